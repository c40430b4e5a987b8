# Two build trees, one source: configures sharc's source once more into TREE
# (another folder, beside the build running this test) with
# the samples on and the tests and benchmarks off, builds only the sample
# programs' generated files there (headers, sources and _explain.txt), and checks
# that each is byte for byte the first build's. What the generators read from their build
# tree (output folders, the compiler's working directory, --source-root) must
# not reach generated code.
#
# The second tree compiles the same sources with the same flags, so ccache
# (when the build uses it) serves it: with CCACHE_BASEDIR the source root
# (scripts/build.sh's) a tree at the same depth compiles the same relative
# paths, and CCACHE_NOHASHDIR lets ccache ignore that the working directory
# differs, which only changes debug information. (At another depth the
# relative paths and CMakeLists.txt's relative prefix map differ, and every
# compile missed: nine minutes of CI.)
#   cmake -DLIST=<file> -DSOURCE=<sharc source dir> -DTREE=<dir>
#         -DCACHE_ARGS=<-Dk=v,...> -P this
include("${CMAKE_CURRENT_LIST_DIR}/generated_files.cmake")
sharc_read_program_list()
file(REMOVE_RECURSE "${TREE}")
set(ENV{CCACHE_NOHASHDIR} 1)
set(ENV{CCACHE_BASEDIR} "${SOURCE}")
string(REPLACE "," ";" cache_args "${CACHE_ARGS}")
execute_process(COMMAND "${CMAKE_COMMAND}" -S "${SOURCE}" -B "${TREE}" -G Ninja
                        -DSHARC_BUILD_TESTS=OFF -DSHARC_BUILD_BENCH=OFF -DSHARC_BUILD_SAMPLES=ON
                        ${cache_args}
                RESULT_VARIABLE rc OUTPUT_VARIABLE log ERROR_VARIABLE log)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "configuring the second tree ${TREE} failed (${rc}):\n${log}")
endif()
# Ninja builds a file by its path under the tree: only the generators and
# their outputs, not the programs' libraries or the samples.
set(targets "")
foreach(program IN LISTS PROGRAMS)
  sharc_generated_files(${program} names)
  list(FILTER names EXCLUDE REGEX "_explain[.]txt$")  # a byproduct of the same command
  list(TRANSFORM names PREPEND sharc_generated/${program}/)
  list(APPEND targets ${names})
endforeach()
execute_process(COMMAND "${CMAKE_COMMAND}" --build "${TREE}" --target ${targets}
                RESULT_VARIABLE rc OUTPUT_VARIABLE log ERROR_VARIABLE log)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "generating the sample programs in the second tree ${TREE} failed (${rc}):\n${log}")
endif()
set(bad "")
foreach(program IN LISTS PROGRAMS)
  sharc_compare_generated(${program} "${TREE}/sharc_generated/${program}" "" bad)
endforeach()
if(bad)
  message(FATAL_ERROR "generated code depends on the build tree: ${bad}")
endif()
message(STATUS "${count} sample programs: the same bytes from two build trees")
file(REMOVE_RECURSE "${TREE}")
