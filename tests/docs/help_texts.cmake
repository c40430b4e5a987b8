# The output of every command the guide shows, written to build/help/ by
# running it whenever its tool is rebuilt (write_output.cmake): each tool's
# --help, which docs/reference/command-line.md quotes, and the other
# commands below. The pages quote these files as excerpts, so a flag added,
# renamed or described differently, or an output that changed, fails the
# docs check (docs_excerpts_and_links) until the page says the same.
# Included by the top-level CMakeLists.txt after samples/, tests/ and bench/,
# so that every tool's target exists. A tool this build does not make is
# left out, and the docs check then fails on its missing file.
#
# Each entry: file, expected exit status, tool target, arguments, joined by '|'.
set(_outputs
    "dot_relu_dot_report.txt|0|dot_relu_dot.generator|--program|dot_relu_dot|--mesh|data=2,model=4|--report"
    "bad_model_error.txt|1|bad_model.generator|--program|bad_model|--mesh|data=2,model=4|--report|--source-root|${PROJECT_SOURCE_DIR}"
    # docs/reference/command-line.md: a mistake on a command line.
    "mlp_classifier_bad_flag.txt|2|mlp_classifier_main|--steps|0"
    # docs/guide/getting-started.md: a mistake in the model.
    "bad_matmul_error.txt|1|bad_model.generator|--program|bad_matmul|--mesh|data=2|--report|--source-root|${PROJECT_SOURCE_DIR}"
    # docs/guide/lift.md: what a function sharc-lift cannot lower gets.
    "lift_error.txt|1|sharc-lift|${PROJECT_SOURCE_DIR}/tests/lift/bad_functions.cpp|--ir|${CMAKE_BINARY_DIR}/help/bad_functions.ir|--|-I${PROJECT_SOURCE_DIR}"
    # docs/guide/interop.md: the GPT-2 and Llama tables.
    "sharc_hf_table.txt|0|sharc-hf|table"
    "sharc_hf_table_llama.txt|0|sharc-hf|table|llama"
    # docs/guide/planning.md: MESH auto's table for the samples' programs.
    "plan_gpt2_8.txt|0|gpt2_train_data8.generator|--program|gpt2_train|--mesh|auto|--devices|8|--plan"
    "plan_gpt2_pipelined_8.txt|0|gpt2_train_data8.generator|--program|gpt2_train_pipelined|--mesh|auto|--devices|8|--plan"
    "plan_mlp_8_1900kib.txt|0|mlp_train_data8.generator|--program|mlp_train|--mesh|auto|--devices|8|--memory|1900KiB|--plan")
foreach(tool dot_relu_dot.generator sharc-lift dot_relu_dot_main mlp_classifier_main gpt2_main finetune_main
             custom_activation_main bench_mlp_train bench_pipeline bench_ring_matmul bench_train bench_compile
             bench_lift bench_gpu_kernels bench_gpt2_gpu sharc-hf sharc-calibrate bench_plan bench_buckets sharc-plan)
  list(APPEND _outputs "${tool}.txt|0|${tool}|--help")
endforeach()

set(_files "")
foreach(entry IN LISTS _outputs)
  string(REPLACE "|" ";" fields "${entry}")
  list(POP_FRONT fields file exit tool)
  if(NOT TARGET ${tool})
    continue()
  endif()
  # Source files among the arguments: the output changes with them too.
  set(_inputs "")
  foreach(arg IN LISTS fields)
    if(arg MATCHES "^${PROJECT_SOURCE_DIR}/" AND EXISTS "${arg}" AND NOT IS_DIRECTORY "${arg}")
      list(APPEND _inputs "${arg}")
    endif()
  endforeach()
  string(REPLACE ";" "|" args "${fields}")
  set(_out ${CMAKE_BINARY_DIR}/help/${file})
  add_custom_command(OUTPUT ${_out}
                     COMMAND ${CMAKE_COMMAND} "-DCOMMAND=$<TARGET_FILE:${tool}>|${args}" -DEXIT=${exit}
                             -DOUT=${_out} -DSTRIP=${PROJECT_SOURCE_DIR}/ -P ${CMAKE_CURRENT_LIST_DIR}/write_output.cmake
                     DEPENDS ${tool} ${_inputs} ${CMAKE_CURRENT_LIST_DIR}/write_output.cmake
                     COMMENT "docs: ${file}" VERBATIM)
  list(APPEND _files ${_out})
endforeach()
# docs/mesh_diff.md: the MLP's training step generated for data=8 against
# fsdp=8, `diff -u` of its private header and of its source.
if(TARGET mlp_train_data8 AND TARGET mlp_train_fsdp8)
  foreach(pair "step_h|_step.h" "cpp|.cpp")
    string(REPLACE "|" ";" pair "${pair}")
    list(GET pair 0 tag)
    list(GET pair 1 suffix)
    set(_out ${CMAKE_BINARY_DIR}/help/mesh_diff_mlp_train_${tag}.txt)
    add_custom_command(OUTPUT ${_out}
                       COMMAND ${CMAKE_COMMAND}
                               "-DCOMMAND=diff|-u|mlp_train_data8/mlp_train_data8${suffix}|mlp_train_fsdp8/mlp_train_fsdp8${suffix}"
                               -DEXIT=1 -DWORKDIR=${CMAKE_BINARY_DIR}/sharc_generated -DOUT=${_out}
                               -P ${CMAKE_CURRENT_LIST_DIR}/write_output.cmake
                       DEPENDS mlp_train_data8 mlp_train_fsdp8 ${CMAKE_CURRENT_LIST_DIR}/write_output.cmake
                       COMMENT "docs: mesh_diff_mlp_train_${tag}.txt" VERBATIM)
    list(APPEND _files ${_out})
  endforeach()
endif()
add_custom_target(docs_help_texts ALL DEPENDS ${_files})
# Rewrites command-line.md's --help blocks from these files (help_page.py).
add_custom_target(docs_help_update
                  COMMAND ${SHARC_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/help_page.py
                          ${PROJECT_SOURCE_DIR}/docs/reference/command-line.md ${CMAKE_BINARY_DIR}/help
                  DEPENDS docs_help_texts VERBATIM)
