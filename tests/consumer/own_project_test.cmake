# Builds examples/own_project from outside sharc's tree, the way a user would,
# in a fresh folder, bringing sharc in by ROUTE (add_subdirectory,
# FetchContent, or find_package after configuring, building and installing
# sharc alone into a fresh prefix) with GoogleTest hidden from find_package;
# then runs its
# driver, which trains one model on three meshes and exits 0 only when the
# losses agree across meshes within 1e-5 relative and the model learned.
# Also checks that sharc's tests, samples and benchmarks stayed off, and that
# the build printed no compiler warning (sharc's sources and the generated
# code compile clean under the project's -Wall -Wextra -Wpedantic -Wshadow).
# CXX, if given, is the C++ compiler (the clang 14 variant of this test).
#   cmake -DSHARC_SOURCE_DIR=... -DROUTE=... -DBUILD_DIR=... [-DCXX=...] -P this
file(REMOVE_RECURSE "${BUILD_DIR}")
set(compiler)
if(CXX)
  set(compiler "-DCMAKE_CXX_COMPILER=${CXX}")
endif()
set(project_dir "${SHARC_SOURCE_DIR}/examples/own_project")

function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message("${out}${err}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (exit ${rc})")
  endif()
  set(output "${out}${err}" PARENT_SCOPE)
endfunction()

set(prefix_path)
if(ROUTE STREQUAL "find_package")
  # sharc on its own, as a packager would build it: no tests, samples or
  # benchmarks; then `cmake --install` into a prefix nothing else uses.
  set(sharc_build "${BUILD_DIR}-sharc")
  set(prefix "${BUILD_DIR}-prefix")
  file(REMOVE_RECURSE "${sharc_build}" "${prefix}")
  run("configure sharc" ${CMAKE_COMMAND} -S "${SHARC_SOURCE_DIR}" -B "${sharc_build}" -G Ninja
      -DSHARC_BUILD_TESTS=OFF -DSHARC_BUILD_SAMPLES=OFF -DSHARC_BUILD_BENCH=OFF
      "-DCMAKE_INSTALL_PREFIX=${prefix}" ${compiler})
  run("build sharc" ${CMAKE_COMMAND} --build "${sharc_build}")
  run("install sharc" ${CMAKE_COMMAND} --install "${sharc_build}")
  foreach(installed lib/cmake/sharc/sharcConfig.cmake share/sharc/templates/program.cpp
                    include/sharc/dsl/sharc.h include/sharc/runtime/checkpoint.h lib/libsharc_checkpoint.a)
    if(NOT EXISTS "${prefix}/${installed}")
      message(FATAL_ERROR "the install has no ${installed}")
    endif()
  endforeach()
  if(EXISTS "${sharc_build}/lift/sharc-lift" AND NOT EXISTS "${prefix}/bin/sharc-lift")
    message(FATAL_ERROR "sharc-lift was built but the install has no bin/sharc-lift")
  endif()
  find_program(mpiexec NAMES mpirun mpiexec)
  if(mpiexec AND NOT EXISTS "${prefix}/lib/libsharc_mpi.a")
    message(FATAL_ERROR "MPI is installed (${mpiexec}) but the install has no lib/libsharc_mpi.a")
  endif()
  file(REMOVE_RECURSE "${sharc_build}")  # the project must need only the install
  set(prefix_path "-DCMAKE_PREFIX_PATH=${prefix}")
endif()

# The FetchContent route also builds without sharc-lift (as where Clang's
# LibTooling is not installed): a model that lifts nothing must not need it,
# and configuring says why it is missing.
set(lift)
if(ROUTE STREQUAL "FetchContent")
  set(lift -DSHARC_LIFT=OFF)
endif()
run("configure" ${CMAKE_COMMAND} -S "${project_dir}" -B "${BUILD_DIR}" -G Ninja
    "-DSHARC_SOURCE_DIR=${SHARC_SOURCE_DIR}" "-DOWN_PROJECT_GET_SHARC=${ROUTE}"
    -DCMAKE_DISABLE_FIND_PACKAGE_GTest=ON ${prefix_path} ${compiler} ${lift})
if(lift AND NOT output MATCHES "sharc-lift is not built: it is not built here \\(SHARC_LIFT is OFF")
  message(FATAL_ERROR "configuring without sharc-lift did not say so")
endif()
if(ROUTE STREQUAL "find_package")
  file(STRINGS "${BUILD_DIR}/CMakeCache.txt" found REGEX "^sharc_DIR:PATH=")
  if(NOT found MATCHES "${prefix}")
    message(FATAL_ERROR "find_package(sharc) did not find the install in ${prefix}: ${found}")
  endif()
else()
  file(STRINGS "${BUILD_DIR}/CMakeCache.txt" off REGEX "^SHARC_BUILD_(TESTS|SAMPLES|BENCH):BOOL=OFF$")
  list(LENGTH off n)
  if(NOT n EQUAL 3)
    message(FATAL_ERROR "sharc's tests, samples and benchmarks are not all off: ${off}")
  endif()
endif()

run("build" ${CMAKE_COMMAND} --build "${BUILD_DIR}")
string(FIND "${output}" "warning:" at)
if(NOT at EQUAL -1)
  message(FATAL_ERROR "the build printed a compiler warning")
endif()

run("train" "${BUILD_DIR}/train")
foreach(want "largest relative loss difference across meshes: .* \\(PASS, tolerance 1e-5\\)"
             "over 20 steps \\(PASS, must halve\\)")
  if(NOT output MATCHES "${want}")
    message(FATAL_ERROR "train printed no line matching '${want}'")
  endif()
endforeach()
file(REMOVE_RECURSE "${BUILD_DIR}" "${BUILD_DIR}-prefix")
