# A grader run on the shipped stubs must fail cleanly: exit status 1 and its summary line
# ("... checks failed"), not a crash of the grader; when FORBID is given, neither its output nor
# its plots page (PAGE) may match it (an answer only a passed check may reveal). Run by ctest
# (labs/CMakeLists.txt).
string(REPLACE "|" ";" args "${ARGS}")
string(REPLACE "|" ";" emulator "${EMULATOR}")  # a cross build's CMAKE_CROSSCOMPILING_EMULATOR
execute_process(COMMAND ${emulator} ${GRADER} ${args} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(NOT rc EQUAL 1)
  message(FATAL_ERROR "expected the grader on the stubs to exit 1, got: ${rc}")
endif()
if(NOT out MATCHES "checks failed\\)")
  message(FATAL_ERROR "the grader on the stubs did not print its summary of failed checks")
endif()
if(out MATCHES "\\[PASS\\]")
  message(FATAL_ERROR "a check passed on the shipped stubs: every check must need the student's code")
endif()
if(FORBID)
  if(out MATCHES "${FORBID}")
    message(FATAL_ERROR "the grader on the stubs gives away an answer: its output matches '${FORBID}' (${CMAKE_MATCH_0})")
  endif()
  if(NOT EXISTS "${PAGE}")
    message(FATAL_ERROR "the grader on the stubs wrote no page at ${PAGE}")
  endif()
  file(READ "${PAGE}" page)
  if(page MATCHES "${FORBID}")
    message(FATAL_ERROR "the stubs' page ${PAGE} gives away an answer: it matches '${FORBID}' (${CMAKE_MATCH_0})")
  endif()
endif()
