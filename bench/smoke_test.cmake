# Runs a benchmark binary and fails unless it exits 0 and its output matches a
# regular expression. Usage:
#   cmake -DBENCH=path -DARGS="a;b" -DEXPECT=regex -P smoke_test.cmake
# It checks that the benchmark runs, never what it measured.
execute_process(COMMAND ${BENCH} ${ARGS} RESULT_VARIABLE rc OUTPUT_VARIABLE out
                ERROR_VARIABLE err)
message("${out}${err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${BENCH} exited with ${rc}")
endif()
if(NOT out MATCHES "${EXPECT}")
  message(FATAL_ERROR "${BENCH} printed no line matching '${EXPECT}'")
endif()
