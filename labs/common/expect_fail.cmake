# A grader run on the shipped stubs must fail cleanly: exit status 1 and its summary line
# ("... checks failed"), not a crash of the grader. Run by ctest (labs/CMakeLists.txt).
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
