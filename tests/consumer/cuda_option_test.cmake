# SHARC_ENABLE_CUDA=ON where no CUDA compiler can be found must stop sharc's
# configure step, naming the option and what to do. Usage:
#   cmake -DSHARC_SOURCE_DIR=... -DBUILD_DIR=... -P cuda_option_test.cmake
set(ENV{CUDACXX} /nonexistent/nvcc)
file(REMOVE_RECURSE "${BUILD_DIR}")
execute_process(COMMAND ${CMAKE_COMMAND} -S "${SHARC_SOURCE_DIR}" -B "${BUILD_DIR}" -G Ninja
                        -DSHARC_ENABLE_CUDA=ON -DSHARC_BUILD_TESTS=OFF -DSHARC_BUILD_SAMPLES=OFF
                        -DSHARC_BUILD_BENCH=OFF
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0)
  message(FATAL_ERROR "sharc configured with SHARC_ENABLE_CUDA=ON and no nvcc:\n${out}")
endif()
string(REGEX REPLACE "[ \n]+" " " flat "${err}")
set(want "sharc: SHARC_ENABLE_CUDA is ON but no CUDA compiler \\(nvcc\\) was found: install the CUDA toolkit, point CMAKE_CUDA_COMPILER at nvcc, or configure with -DSHARC_ENABLE_CUDA=OFF")
if(NOT flat MATCHES "${want}")
  message(FATAL_ERROR "the configure error does not name the option:\n${err}")
endif()
message("configure stopped as it should:\n${err}")
