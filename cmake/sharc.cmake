# sharc_add_program(): the build integration, after Halide's
# add_halide_generator / add_halide_library. One call turns a model file into
# a library of generated per-device C++:
#
#   sharc_add_program(NAME SOURCE model.cpp [PROGRAM registered-name]
#                     MESH "data=2,model=4" [DEVICES 8] [NAMESPACE ns] [DUMP_IR])
#
#  1. builds the generator executable from SOURCE (the model file, which
#     registers programs with SHARC_PROGRAM) linked with sharc_generator_main.
#     Calls with the same SOURCE share one generator (named after the first
#     call: NAME.generator), so four meshes of one model build it once;
#  2. runs it at build time (add_custom_command) to write
#     <build>/sharc_generated/NAME/NAME.h and NAME.cpp; it re-runs when the
#     generator (so the model) or anything in templates/ changes;
#  3. adds the STATIC library NAME from the generated source, linking
#     sharc_runtime, with the generated folder on its include path, so users
#     `#include "NAME.h"` and use namespace NAMESPACE (default sharc_gen::NAME);
#  4. adds the target NAME_report (not built by default): `ninja NAME_report`
#     runs the generator with --report, which prints, before anything runs,
#     each parameter's layout and local shape, every collective with its
#     bytes per device and each device's peak memory (codegen/report.h).
#
# PROGRAM defaults to NAME; DEVICES defaults to the product of MESH (give it
# when one axis is -1). DUMP_IR also writes the IR after every pass
# (00_traced.ir, 01_after_resolve_logical_axes.ir, ...) to
# <build>/sharc_generated/NAME/ir/. A mistake in the model fails the build with
# the model's file:line, and no generated files are left behind.

set(SHARC_TEMPLATES_DIR "${CMAKE_CURRENT_LIST_DIR}/../templates")
cmake_path(NORMAL_PATH SHARC_TEMPLATES_DIR)

function(sharc_add_program NAME)
  cmake_parse_arguments(PARSE_ARGV 1 ARG "DUMP_IR" "SOURCE;PROGRAM;MESH;DEVICES;NAMESPACE" "")
  if(ARG_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "sharc_add_program(${NAME}): unexpected arguments: ${ARG_UNPARSED_ARGUMENTS}")
  endif()
  foreach(required SOURCE MESH)
    if(NOT ARG_${required})
      message(FATAL_ERROR "sharc_add_program(${NAME}): ${required} is required")
    endif()
  endforeach()
  if(NOT ARG_PROGRAM)
    set(ARG_PROGRAM ${NAME})
  endif()
  if(NOT ARG_NAMESPACE)
    set(ARG_NAMESPACE "sharc_gen::${NAME}")
  endif()

  # One generator per model source, keyed on its absolute path.
  cmake_path(ABSOLUTE_PATH ARG_SOURCE BASE_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR} NORMALIZE
             OUTPUT_VARIABLE source)
  string(MD5 key "${source}")
  get_property(generator GLOBAL PROPERTY SHARC_GENERATOR_${key})
  if(NOT generator)
    set(generator ${NAME}.generator)
    add_executable(${generator} ${source})
    target_link_libraries(${generator} PRIVATE sharc_generator_main)
    set_property(GLOBAL PROPERTY SHARC_GENERATOR_${key} ${generator})
  endif()

  set(out_dir ${CMAKE_BINARY_DIR}/sharc_generated/${NAME})
  set(outputs ${out_dir}/${NAME}.h ${out_dir}/${NAME}.cpp)
  set(args --program ${ARG_PROGRAM} --mesh ${ARG_MESH} --name ${NAME}
           --namespace ${ARG_NAMESPACE} --out-dir ${out_dir} --templates ${SHARC_TEMPLATES_DIR})
  if(ARG_DEVICES)
    list(APPEND args --devices ${ARG_DEVICES})
  endif()
  if(ARG_DUMP_IR)
    list(APPEND args --dump-ir ${out_dir}/ir)
  endif()
  file(GLOB templates CONFIGURE_DEPENDS ${SHARC_TEMPLATES_DIR}/*)
  add_custom_command(
    OUTPUT ${outputs}
    COMMAND ${generator} ${args}
    DEPENDS ${generator} ${templates}
    COMMENT "sharc: generating ${NAME} (${ARG_PROGRAM} on mesh ${ARG_MESH})"
    VERBATIM)

  add_library(${NAME} STATIC ${outputs})
  target_include_directories(${NAME} PUBLIC ${out_dir})
  target_link_libraries(${NAME} PUBLIC sharc_runtime)
  # Generated code compiles with the project's warnings but is not linted.
  set_target_properties(${NAME} PROPERTIES CXX_CLANG_TIDY "")

  set(report_args --program ${ARG_PROGRAM} --mesh ${ARG_MESH} --report)
  if(ARG_DEVICES)
    list(APPEND report_args --devices ${ARG_DEVICES})
  endif()
  add_custom_target(${NAME}_report
    COMMAND ${generator} ${report_args}
    DEPENDS ${generator}
    COMMENT "sharc: predicted costs of ${NAME} (${ARG_PROGRAM} on mesh ${ARG_MESH})"
    USES_TERMINAL VERBATIM)
endfunction()
