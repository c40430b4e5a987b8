# sharc_add_golden_test as a user meets it (label `golden`): a copy of
# examples/own_project, built outside sharc's tree, whose golden test
#  1. passes on the committed goldens (examples/own_project/golden), so the
#     generated code is byte for byte the same in this fresh folder as where
#     the goldens were made;
#  2. fails after a scripted change to the model (the weight decay), printing
#     the unified diff of the changed line and the command that accepts it;
#  3. passes again after that command (the update target), which rewrote the
#     copy's goldens;
#  4. fails when a golden file is missing, naming it and saying how to create it;
#  5. and the explain target of one of its programs prints the model-line map.
# With OUTPUT_FILE, step 2's output is also written there, BUILD_DIR taken
# out of its paths (docs/guide/reading-generated-code.md quotes it).
#   cmake -DSHARC_SOURCE_DIR=... -DBUILD_DIR=... [-DOUTPUT_FILE=...] -P this
file(REMOVE_RECURSE "${BUILD_DIR}")
set(src "${BUILD_DIR}/src")
set(bin "${BUILD_DIR}/build")
file(COPY "${SHARC_SOURCE_DIR}/examples/own_project/" DESTINATION "${src}")

function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  set(output "${out}${err}" PARENT_SCOPE)
  set(rc ${rc} PARENT_SCOPE)
  if(what AND NOT rc EQUAL 0)
    message("${out}${err}")
    message(FATAL_ERROR "${what} failed (exit ${rc})")
  endif()
endfunction()

function(expect_in text)
  foreach(want IN LISTS ARGN)
    string(FIND "${text}" "${want}" at)
    if(at EQUAL -1)
      message("${text}")
      message(FATAL_ERROR "the golden test's output lacks: ${want}")
    endif()
  endforeach()
endfunction()

run("configure" ${CMAKE_COMMAND} -S "${src}" -B "${bin}" -G Ninja
    "-DSHARC_SOURCE_DIR=${SHARC_SOURCE_DIR}" -DCMAKE_DISABLE_FIND_PACKAGE_GTest=ON)
run("build the golden files" ${CMAKE_COMMAND} --build "${bin}" --target regressor_golden_files)
set(ctest ${CMAKE_CTEST_COMMAND} --test-dir "${bin}" -R "^regressor_golden$" --output-on-failure)

# 1. the committed goldens
run("the golden test on the committed goldens" ${ctest})

# 2. a change to the model
file(READ "${src}/model.cpp" model)
string(REPLACE "/*weight_decay=*/1e-4" "/*weight_decay=*/3e-4" changed "${model}")
if(changed STREQUAL model)
  message(FATAL_ERROR "the scripted change found no weight decay to change in model.cpp")
endif()
file(WRITE "${src}/model.cpp" "${changed}")
run("rebuild the golden files" ${CMAKE_COMMAND} --build "${bin}" --target regressor_golden_files)
run("" ${ctest})
if(rc EQUAL 0)
  message(FATAL_ERROR "the golden test passed after the model changed")
endif()
if(OUTPUT_FILE)
  string(REPLACE "${BUILD_DIR}/" "" shown "${output}")
  file(WRITE "${OUTPUT_FILE}" "${shown}")
endif()
expect_in("${output}"
  "regressor_data4/regressor_data4.cpp differs from its golden file"
  "--- golden/regressor_data4/regressor_data4.cpp"
  "+++ generated/regressor_data4/regressor_data4.cpp"
  # AdamW's decoupled decay, the removed line with the old 1e-4 in f32:
  "-    const float v13 = dev.hidden_kernel[i] * 9.99999975e-05f;"
  "accept it, or create the golden files the first time"
  "cmake --build \"${bin}\" --target regressor_golden_update")

# 3. accepted
run("the update target" ${CMAKE_COMMAND} --build "${bin}" --target regressor_golden_update)
expect_in("${output}" "golden files written to ${src}/golden")
run("the golden test after the update" ${ctest})

# 4. a golden file missing
file(REMOVE "${src}/golden/regressor_fsdp4/regressor_fsdp4.h")
run("" ${ctest})
if(rc EQUAL 0)
  message(FATAL_ERROR "the golden test passed with a golden file missing")
endif()
expect_in("${output}"
  "missing golden file ${src}/golden/regressor_fsdp4/regressor_fsdp4.h"
  "cmake --build \"${bin}\" --target regressor_golden_update")

# 5. which code each model line became
run("the explain target" ${CMAKE_COMMAND} --build "${bin}" --target regressor_data4_explain)
expect_in("${output}"
  "// sharc explain: program regressor_train on mesh"
  "regressor_data4.cpp has "
  "\nmodel.cpp:29  "
  "kernel      dot hidden"
  "collective  all_reduce(data) bucket 0")
file(REMOVE_RECURSE "${BUILD_DIR}")
