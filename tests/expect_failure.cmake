# cmake -DCOMMAND=a|b|c -DEXPECT=regex -P expect_failure.cmake
# Runs COMMAND ('|'-separated arguments) and passes only when it exits
# non-zero and its output (stdout and stderr) matches EXPECT.
string(REPLACE "|" ";" argv "${COMMAND}")
execute_process(COMMAND ${argv} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(rc EQUAL 0)
  message(FATAL_ERROR "expected a failure, but the command exited 0")
endif()
if(NOT "${out}${err}" MATCHES "${EXPECT}")
  message(FATAL_ERROR "the command failed (${rc}), but its output does not match: ${EXPECT}")
endif()
message("failed as expected (exit ${rc})")
