# Every tool's --help, written to build/help/TOOL.txt whenever the tool is
# rebuilt, and the output of the other commands the guide shows (below); docs/reference/command-line.md quotes them as excerpts, so a flag
# added, renamed or described differently fails the docs check
# (docs_excerpts_and_links) until the page says the same. Included by the
# top-level CMakeLists.txt after samples/, tests/ and bench/, so that every
# tool's target exists. A tool this build does not make is left out, and the
# docs check then fails on its missing file.
set(_help_files "")
foreach(tool dot_relu_dot.generator sharc-lift dot_relu_dot_main mlp_classifier_main gpt2_main
             custom_activation_main bench_mlp_train bench_pipeline bench_ring_matmul bench_train bench_compile
             bench_lift bench_gpu_kernels bench_gpt2_gpu)
  if(NOT TARGET ${tool})
    continue()
  endif()
  set(_out ${CMAKE_BINARY_DIR}/help/${tool}.txt)
  add_custom_command(OUTPUT ${_out}
                     COMMAND ${CMAKE_COMMAND} -DTOOL=$<TARGET_FILE:${tool}> -DOUT=${_out}
                             -P ${CMAKE_CURRENT_LIST_DIR}/write_help.cmake
                     DEPENDS ${tool} ${CMAKE_CURRENT_LIST_DIR}/write_help.cmake
                     COMMENT "docs: ${tool} --help" VERBATIM)
  list(APPEND _help_files ${_out})
endforeach()

# Other commands whose output the guide shows, written to build/help/ the
# same way: (file, expected exit status, tool target, arguments joined by '|').
set(_outputs
    "dot_relu_dot_report.txt|0|dot_relu_dot.generator|--program|dot_relu_dot|--mesh|data=2,model=4|--report"
    "bad_model_error.txt|1|bad_model.generator|--program|bad_model|--mesh|data=2,model=4|--report|--source-root|${PROJECT_SOURCE_DIR}")
foreach(entry IN LISTS _outputs)
  string(REPLACE "|" ";" fields "${entry}")
  list(POP_FRONT fields file exit tool)
  if(NOT TARGET ${tool})
    continue()
  endif()
  string(REPLACE ";" "|" args "${fields}")
  set(_out ${CMAKE_BINARY_DIR}/help/${file})
  add_custom_command(OUTPUT ${_out}
                     COMMAND ${CMAKE_COMMAND} "-DCOMMAND=$<TARGET_FILE:${tool}>|${args}" -DEXIT=${exit}
                             -DOUT=${_out} -P ${CMAKE_CURRENT_LIST_DIR}/write_output.cmake
                     DEPENDS ${tool} ${CMAKE_CURRENT_LIST_DIR}/write_output.cmake
                     COMMENT "docs: ${file}" VERBATIM)
  list(APPEND _help_files ${_out})
endforeach()
add_custom_target(docs_help_texts ALL DEPENDS ${_help_files})
# Rewrites the page's --help blocks from these files (tests/docs/help_page.py).
add_custom_target(docs_help_update
                  COMMAND python3 ${CMAKE_CURRENT_LIST_DIR}/help_page.py
                          ${PROJECT_SOURCE_DIR}/docs/reference/command-line.md ${CMAKE_BINARY_DIR}/help
                  DEPENDS docs_help_texts VERBATIM)
