# cmake "-DONE=cmd;args" "-DMANY=mpirun;...;cmd;args" -P same_run.cmake
# Runs gpt2_main on one process (ONE) and under mpirun (MANY); both must
# succeed and print the same run: every step's loss, lr and grad norm (the
# timings in brackets aside), the oracle check and the sample.
function(run_gpt2 cmd out)
  execute_process(COMMAND ${cmd} RESULT_VARIABLE rc OUTPUT_VARIABLE text ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${cmd} failed (${rc}):\n${text}${err}")
  endif()
  string(REGEX REPLACE "\\[ *[0-9.]+ s, [^]\n]*\\]" "" text "${text}")  # timings: [0.4 s, 130 ms/step, eta 0 s]
  string(REGEX REPLACE "world: [^\n]*\n" "" text "${text}")   # the MPI run's extra line
  set(${out} "${text}" PARENT_SCOPE)
endfunction()
run_gpt2("${ONE}" one)
run_gpt2("${MANY}" many)
message("${many}")
if(NOT one STREQUAL many)
  message(FATAL_ERROR "the runs differ; one process printed:\n${one}")
endif()
if(NOT many MATCHES "check: step 0 loss [0-9.]+, oracle [0-9.]+: PASS")
  message(FATAL_ERROR "no passing oracle check in the output")
endif()
message("the same run on one process and under mpirun")
