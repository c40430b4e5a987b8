# Configuring sharc itself with options that cannot hold on this machine must
# stop, saying why and what to do:
#   cmake -DSHARC_SOURCE_DIR=... -DBUILD_DIR=... "-DARGS=-DX=ON|-DY=..."
#         [-DCUDACXX=...] "-DEXPECT=..." -P option_error_test.cmake
# ARGS are the configure flags, '|'-separated; CUDACXX, when given, is put in
# the environment (a path with no nvcc: as on a machine without CUDA);
# EXPECT is a fragment of the error (plain text, compared with CMake's line
# wrapping undone).
if(DEFINED CUDACXX)
  set(ENV{CUDACXX} "${CUDACXX}")
endif()
string(REPLACE "|" ";" args "${ARGS}")
file(REMOVE_RECURSE "${BUILD_DIR}")
execute_process(COMMAND ${CMAKE_COMMAND} -S "${SHARC_SOURCE_DIR}" -B "${BUILD_DIR}" -G Ninja ${args}
                        -DSHARC_BUILD_TESTS=OFF -DSHARC_BUILD_SAMPLES=OFF -DSHARC_BUILD_BENCH=OFF
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0)
  message(FATAL_ERROR "sharc configured with ${ARGS}; it must stop:\n${out}")
endif()
string(REGEX REPLACE "[ \n]+" " " flat "${err}")
string(FIND "${flat}" "${EXPECT}" at)
if(at EQUAL -1)
  message(FATAL_ERROR "the configure error does not say: ${EXPECT}\n${err}")
endif()
file(REMOVE_RECURSE "${BUILD_DIR}")
message("configure stopped as it should:\n${err}")
