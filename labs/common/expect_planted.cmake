# A grader run on a planted bug (tests/labs/planted.h) must fail exactly one check, the one named
# CHECK (a prefix of its name), must not print what FORBID matches (an answer), and its failed
# check's line must match EXPECT when given (e.g. the element it names). Run by ctest
# (labs/CMakeLists.txt bertlab_add_planted_bug).
string(REPLACE "|" ";" args "${ARGS}")
string(REPLACE "|" ";" emulator "${EMULATOR}")
execute_process(COMMAND ${emulator} ${GRADER} ${args} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(NOT rc EQUAL 1)
  message(FATAL_ERROR "expected the grader to exit 1 on the planted bug, got: ${rc}")
endif()
string(REPLACE ";" "," lines "${out}")  # a detail's ';' would split the list of matches
string(REGEX MATCHALL "\\[FAIL\\][^\n]*" fails "${lines}")
list(LENGTH fails n)
if(NOT n EQUAL 1)
  message(FATAL_ERROR "expected exactly one failed check, the one starting '${CHECK}'; got ${n}")
endif()
string(FIND "${fails}" "[FAIL] ${CHECK}" at)
if(NOT at EQUAL 0)
  message(FATAL_ERROR "expected the check starting '${CHECK}' to fail; failed instead: ${fails}")
endif()
if(FORBID AND out MATCHES "${FORBID}")
  message(FATAL_ERROR "the output gives away an answer: it matches '${FORBID}' (${CMAKE_MATCH_0})")
endif()
if(EXPECT AND NOT fails MATCHES "${EXPECT}")
  message(FATAL_ERROR "the failed check's line does not match '${EXPECT}': ${fails}")
endif()
