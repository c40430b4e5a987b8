# Configures tests/consumer/bad_args with -DCASE=<CASE> in a fresh folder and
# checks that configuring fails, that CMake's output names the user's
# CMakeLists.txt:<line> of that case's sharc_add_program or
# sharc_add_golden_test call (the line marked
# `# case: <CASE>`), and that it contains EXPECT, the reason. With
# OUTPUT_FILE, CMake's output is also written there, sharc's folder taken
# out of its paths (docs/guide/getting-started.md quotes it).
#   cmake -DSHARC_SOURCE_DIR=... -DCASE=... -DEXPECT=... -DBUILD_DIR=... [-DOUTPUT_FILE=...] -P this
set(project_dir "${CMAKE_CURRENT_LIST_DIR}/bad_args")
file(STRINGS "${project_dir}/CMakeLists.txt" lines)
set(number 0)
set(line "")
foreach(text IN LISTS lines)
  math(EXPR number "${number} + 1")
  if(text MATCHES "# case: ${CASE}$")
    set(line ${number})
  endif()
endforeach()
if(line STREQUAL "")
  message(FATAL_ERROR "no line marked '# case: ${CASE}' in ${project_dir}/CMakeLists.txt")
endif()

file(REMOVE_RECURSE "${BUILD_DIR}")
execute_process(
  COMMAND ${CMAKE_COMMAND} -S "${project_dir}" -B "${BUILD_DIR}" -G Ninja -DCASE=${CASE}
          "-DSHARC_SOURCE_DIR=${SHARC_SOURCE_DIR}" -DCMAKE_DISABLE_FIND_PACKAGE_GTest=ON
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
set(all "${out}${err}")
message("${all}")
if(OUTPUT_FILE)
  string(REPLACE "${SHARC_SOURCE_DIR}/" "" shown "${all}")
  file(WRITE "${OUTPUT_FILE}" "${shown}")
endif()
if(rc EQUAL 0)
  message(FATAL_ERROR "configuring with CASE=${CASE} succeeded; it must fail")
endif()
if(NOT all MATCHES "CMakeLists.txt:${line} \\(sharc_add_(program|golden_test)\\)")
  message(FATAL_ERROR "the output does not name CMakeLists.txt:${line} (sharc_add_program or "
                      "sharc_add_golden_test)")
endif()
string(REGEX REPLACE "[ \t\r\n]+" " " flat "${all}")  # CMake wraps long messages
string(FIND "${flat}" "${EXPECT}" at)
if(at EQUAL -1)
  message(FATAL_ERROR "the output does not say: ${EXPECT}")
endif()
file(REMOVE_RECURSE "${BUILD_DIR}")
