# sharc_add_program(): the build integration, after Halide's
# add_halide_generator / add_halide_library. One call turns a model file into
# a library of generated per-device C++:
#
#   sharc_add_program(NAME SOURCE model.cpp [PROGRAM registered-name]
#                     MESH "data=2,model=4" [DEVICES 8] [NAMESPACE ns] [DUMP_IR]
#                     [CPP_FILES n] [OPTIONS name=value...] [BACKEND cpu|cuda]
#                     [HF_CONFIG config.json] [BUCKET_BYTES 1MiB])
#   sharc_add_program(NAME SOURCE model.cpp MESH auto DEVICES 8 [MEMORY 16GiB]
#                     [MACHINE cpu|h100-nvlink|h100-ib|file.json] [CANDIDATE k] ...)
#
#  0. when SOURCE marks functions SHARC_ELEMENTWISE (dsl/lift.h), or LIFT is
#     given (for marked functions in a header SOURCE includes), runs sharc-lift
#     on it first (sharc_lift below): the generator then finds the Tensor
#     forms in "<SOURCE stem>.lifted.h";
#  1. builds the generator executable from SOURCE (the model file, which
#     registers programs with SHARC_PROGRAM) linked with sharc::generator_main.
#     Calls with the same SOURCE share one generator (named after the first
#     call: NAME.generator), so four meshes of one model build it once;
#  2. runs it at build time (add_custom_command) to write, in
#     <build>/sharc_generated/NAME/, the API NAME.h, the sources' private
#     header NAME_step.h, the sources NAME.cpp and NAME_part2.cpp ..
#     NAME_part<CPP_FILES>.cpp, and NAME_explain.txt: each model line with the
#     kernels and collectives it became and their lines in the sources
#     (codegen/explain.h). A large program's step is spread over the part
#     files, about 2,000 lines to a file (codegen/emit_cpu.h kLinesPerFile),
#     so the build compiles them in parallel; a program that needs fewer
#     files leaves the rest empty (a comment, nothing to compile). CPP_FILES
#     defaults to 4. It re-runs when the generator
#     (so the model) or anything in sharc's templates/ changes, and a file
#     that comes out the same keeps its time stamp, so it is not compiled
#     again;
#  3. adds the STATIC library NAME from the generated source, linking
#     sharc::runtime, with the generated folder on its include path, so users
#     `#include "NAME.h"` and use namespace NAMESPACE (default sharc_gen::NAME);
#  4. adds the target NAME_report (not built by default): `ninja NAME_report`
#     runs the generator with --report, which prints, before anything runs,
#     each parameter's layout and local shape, every collective with its
#     bytes per device and each device's peak memory (codegen/report.h); for a
#     pipelined program, per stage, and it draws the schedule into
#     <build>/sharc_generated/NAME/NAME_schedule.svg;
#  5. adds the target NAME_explain (not built by default), which prints what
#     NAME_explain.txt holds (the generator's --explain).
#
# BACKEND cuda (default cpu) writes the step as CUDA: NAME.cu and its part
# files (.cu), whose statements are kernels in sharc's dialect, cuBLASLt GEMMs
# through the device's KernelSet, and collectives on device buffers. Each .cu
# compiles twice: into NAME with the host compiler, for the block simulator
# (a gpu::SimGpuWorld runs it), and into NAME_device with nvcc for the GPU.
# It needs sharc built with SHARC_ENABLE_CUDA (nvcc found); without it
# configuring stops at the call. The API (NAME.h) is the CPU program's.
#
# MESH auto DEVICES n plans the mesh (codegen/plan.h): every split of the n
# devices over the axes the program's rules and specs use is partitioned and
# costed before anything runs (peak memory per device exactly, step time on
# the MACHINE's cost model, default cpu), and the fastest whose peak fits
# MEMORY (a budget per device: 16GiB, 512MiB, bytes; default none) is
# generated; <build>/sharc_generated/NAME/NAME_plan.txt ranks every
# candidate and says why each lost. Nothing fitting fails the build, naming
# the smallest peak found and its mesh. CANDIDATE k generates the plan's
# k-th candidate that fits instead (0 is its choice, 1 the next fastest):
# bench/bench_plan builds a program for each to time them.
#
# BUCKET_BYTES (1MiB, 256KiB, bytes; default 25MiB) is the most one
# gradient bucket carries: the backward pass's all-reduces are grouped into
# buckets of at most that many bytes a device, each bucket one collective.
# With MESH auto and no BUCKET_BYTES the planner chooses it.
#
# PROGRAM defaults to NAME; DEVICES defaults to the product of MESH (give it
# when one axis is -1). OPTIONS are generation-time integers the model reads
# with ProgramBuilder::option (a depth, a width): OPTIONS layers=12 builds the
# same model file at 12 layers. A value that is not an integer stops
# configuring; an option the program does not read fails the build at the
# program's SHARC_PROGRAM line, naming those it does and this call's
# CMakeLists.txt line. HF_CONFIG names a Hugging Face config.json (relative
# to the calling directory) that the model reads with b.hf_config(), e.g.
# GPTConfig::from_hf(b.hf_config()): the program is generated for that
# checkpoint's sizes, and again when the file changes. DUMP_IR also writes the IR after every pass
# (00_traced.ir, 01_after_rematerialize.ir, ...) to
# <build>/sharc_generated/NAME/ir/. A mistake in the model fails the build with
# the model's file:line, and no generated files are left behind.
#
# The function works from any directory of any project: it finds sharc's
# templates next to this file (CMAKE_CURRENT_FUNCTION_LIST_DIR), or where an
# installed sharc's config file put them (a global property), not through a
# variable of the directory that included it, so add_subdirectory(),
# FetchContent and find_package() all give the same function. Its
# arguments are checked when CMake configures, so a mistake (a bad MESH, an
# unknown keyword, a missing SOURCE, a NAME already taken) stops at the user's
# CMakeLists.txt line, which CMake prints in the call stack under the message.
include_guard(GLOBAL)

# Generated programs compile with -O3 (GCC vectorises the fused loops only
# there: they read several buffers, which needs runtime alias checks), the
# instruction set of the build machine (SHARC_ARCH_FLAGS, "-march=native" by
# default when the compiler takes it; set it to "" or e.g.
# "-march=x86-64-v3" for binaries that must run elsewhere) and
# -ffp-contract=off, so that no a * b + c becomes one fused multiply-add:
# every op rounds as the per-device interpreter and the oracle's tolerances
# assume. -fno-math-errno lets std::sqrt vectorise (the AdamW update's loop
# was scalar without it) and -fno-trapping-math lets loops that select
# between values or convert floats to integers (rt::exp, rt::tanh) vectorise;
# neither changes a result (no program here reads errno or FP exception
# flags).
include(CheckCXXCompilerFlag)
check_cxx_compiler_flag("-march=native" _sharc_has_march_native)
if(_sharc_has_march_native)
  set(_sharc_default_arch "-march=native")
else()
  set(_sharc_default_arch "")
endif()
set(SHARC_ARCH_FLAGS "${_sharc_default_arch}" CACHE STRING
    "Instruction-set flags for sharc's generated programs (default: -march=native when supported)")

# sharc_lift(TARGET <target> SOURCE <file>): runs sharc-lift (lift/) on
# <file>, a source of <target>, at build time, with <target>'s include
# directories and definitions, and puts the header it writes,
# <build>/sharc_lifted/<target>/<stem>.lifted.h (and the lifted IR, for
# reading, in <stem>.lifted.ir beside it), on <target>'s include path:
# the source includes "<stem>.lifted.h" for the Tensor forms of its
# SHARC_ELEMENTWISE functions. The header is rewritten when the file, a
# header the file includes, or the tool changes. sharc_add_program calls it;
# tests and users may too. Without sharc-lift (no Clang LibTooling) it stops
# configuring with what to install.
function(sharc_lift)
  cmake_parse_arguments(PARSE_ARGV 0 ARG "" "TARGET;SOURCE" "")
  get_property(tool GLOBAL PROPERTY SHARC_LIFT_TOOL)
  if(NOT tool OR NOT TARGET ${tool})
    get_property(why GLOBAL PROPERTY SHARC_LIFT_MISSING)
    if(NOT why)  # an installed sharc without the tool
      set(why "and this sharc was installed without it")
    endif()
    message(FATAL_ERROR "sharc: ${ARG_SOURCE} marks functions SHARC_ELEMENTWISE, which needs "
                        "sharc-lift: ${why}")
  endif()
  cmake_path(ABSOLUTE_PATH ARG_SOURCE BASE_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR} NORMALIZE
             OUTPUT_VARIABLE source)
  cmake_path(GET source STEM stem)
  set(dir ${CMAKE_BINARY_DIR}/sharc_lifted/${ARG_TARGET})
  set(header ${dir}/${stem}.lifted.h)
  set(includes "$<TARGET_PROPERTY:${ARG_TARGET},INCLUDE_DIRECTORIES>")
  set(defines "$<TARGET_PROPERTY:${ARG_TARGET},COMPILE_DEFINITIONS>")
  file(MAKE_DIRECTORY ${dir})
  add_custom_command(
    OUTPUT ${header}
    BYPRODUCTS ${dir}/${stem}.lifted.ir
    COMMAND ${tool} ${source} --output ${header} --ir ${dir}/${stem}.lifted.ir
            --source-root ${CMAKE_SOURCE_DIR} --depfile ${header}.d --
            "$<$<BOOL:${includes}>:-I$<JOIN:${includes},;-I>>"
            "$<$<BOOL:${defines}>:-D$<JOIN:${defines},;-D>>" -I${dir}
    DEPENDS ${source} ${tool}
    DEPFILE ${header}.d
    COMMENT "sharc-lift: lifting the SHARC_ELEMENTWISE functions of ${ARG_SOURCE}"
    COMMAND_EXPAND_LISTS VERBATIM)
  target_sources(${ARG_TARGET} PRIVATE ${header})
  target_include_directories(${ARG_TARGET} PRIVATE ${dir})
endfunction()

# Stops configuring with `sharc_add_program(NAME): <why>`; CMake's call stack
# below the message names the caller's CMakeLists.txt:<line>.
function(_sharc_fail name)
  string(JOIN "" why ${ARGN})  # the message, given in pieces
  message(FATAL_ERROR "sharc_add_program(${name}): ${why}")
endfunction()

# Checks MESH (and DEVICES) the way the generator's Mesh::parse will, so a bad
# mesh never reaches the build. Sets <out_devices> in the caller to the device
# count (DEVICES, or the product of the sizes).
function(_sharc_check_mesh name mesh devices out_devices)
  set(hint "MESH is a comma-separated list of axis=size, e.g. \"data=2,model=4\"")
  if(mesh MATCHES "^[ \t]*$")
    _sharc_fail(${name} "MESH is empty. ${hint}")
  endif()
  string(REPLACE "," ";" items "${mesh}")
  set(seen)
  set(product 1)
  set(rest "")
  foreach(item IN LISTS items)
    if(NOT item MATCHES "^([^=]*)=(.*)$")
      _sharc_fail(${name} "MESH \"${mesh}\": \"${item}\" is not axis=size. ${hint}")
    endif()
    set(axis "${CMAKE_MATCH_1}")
    set(size "${CMAKE_MATCH_2}")
    if(NOT axis MATCHES "^[A-Za-z_][A-Za-z0-9_]*$")
      _sharc_fail(${name} "MESH \"${mesh}\": axis name '${axis}' is not valid: names are "
                          "identifiers (letters, digits and _, not starting with a digit)")
    endif()
    if(axis IN_LIST seen)
      _sharc_fail(${name} "MESH \"${mesh}\": axis '${axis}' appears twice")
    endif()
    list(APPEND seen "${axis}")
    if(NOT size MATCHES "^-?[0-9]+$")
      _sharc_fail(${name} "MESH \"${mesh}\": axis '${axis}' has size \"${size}\", which is not "
                          "an integer (sizes are positive, or -1 for the rest of the devices)")
    endif()
    if(size EQUAL -1)
      if(NOT rest STREQUAL "")
        _sharc_fail(${name} "MESH \"${mesh}\": axes '${rest}' and '${axis}' are both -1, but at most "
                            "one axis may be -1 (the rest of the devices)")
      endif()
      set(rest "${axis}")
    elseif(size LESS_EQUAL 0)
      _sharc_fail(${name} "MESH \"${mesh}\": axis '${axis}' has size ${size}, but sizes must be "
                          "positive, or -1 for the rest of the devices")
    else()
      math(EXPR product "${product} * ${size}")
    endif()
  endforeach()

  if(NOT devices STREQUAL "")
    if(NOT devices MATCHES "^[0-9]+$" OR devices EQUAL 0)
      _sharc_fail(${name} "DEVICES \"${devices}\" is not a positive integer")
    endif()
  endif()
  if(NOT rest STREQUAL "")
    if(devices STREQUAL "")
      _sharc_fail(${name} "MESH \"${mesh}\": axis '${rest}' is -1 (the rest of the devices), so "
                          "DEVICES must say how many devices there are, e.g. DEVICES 8")
    endif()
    math(EXPR remainder "${devices} % ${product}")
    if(NOT remainder EQUAL 0)
      _sharc_fail(${name} "MESH \"${mesh}\" with DEVICES ${devices}: axis '${rest}' is -1 but "
                          "${devices} devices do not divide by ${product} (the product of the "
                          "other axes)")
    endif()
    set(${out_devices} ${devices} PARENT_SCOPE)
  else()
    if(NOT devices STREQUAL "" AND NOT devices EQUAL product)
      _sharc_fail(${name} "MESH \"${mesh}\" has ${product} devices but DEVICES is ${devices}: "
                          "leave DEVICES out, or make the sizes multiply to it")
    endif()
    set(${out_devices} ${product} PARENT_SCOPE)
  endif()
endfunction()

function(sharc_add_program NAME)
  set(options DUMP_IR LIFT)
  set(one_value SOURCE PROGRAM MESH DEVICES NAMESPACE CPP_FILES BACKEND HF_CONFIG MEMORY MACHINE CANDIDATE
                BUCKET_BYTES)
  cmake_parse_arguments(PARSE_ARGV 1 ARG "${options}" "${one_value}" "OPTIONS")
  set(keywords "${one_value};OPTIONS;${options}")
  string(REPLACE ";" ", " keywords "${keywords}")

  if(NOT NAME MATCHES "^[A-Za-z_][A-Za-z0-9_]*$")
    _sharc_fail("${NAME}" "the name \"${NAME}\" is not a C++ identifier (it names the library, "
                          "the generated files and the default namespace sharc_gen::NAME)")
  endif()
  if(ARG_UNPARSED_ARGUMENTS)
    list(GET ARG_UNPARSED_ARGUMENTS 0 first)
    _sharc_fail(${NAME} "unknown argument '${first}' (the keywords are ${keywords})")
  endif()
  if(ARG_KEYWORDS_MISSING_VALUES)
    list(GET ARG_KEYWORDS_MISSING_VALUES 0 first)
    _sharc_fail(${NAME} "${first} needs a value")
  endif()
  foreach(required SOURCE MESH)
    if(NOT DEFINED ARG_${required})
      _sharc_fail(${NAME} "${required} is required, e.g. "
                          "sharc_add_program(${NAME} SOURCE model.cpp MESH \"data=2,model=4\")")
    endif()
  endforeach()
  foreach(taken ${NAME} ${NAME}_report ${NAME}_explain ${NAME}_plan)
    if(TARGET ${taken})
      _sharc_fail(${NAME} "a target named ${taken} already exists: each sharc_add_program "
                          "needs its own NAME (it names the library ${NAME} and the targets "
                          "${NAME}_report, ${NAME}_explain and, with MESH auto, ${NAME}_plan)")
    endif()
  endforeach()
  cmake_path(ABSOLUTE_PATH ARG_SOURCE BASE_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR} NORMALIZE
             OUTPUT_VARIABLE source)
  if(NOT EXISTS "${source}" OR IS_DIRECTORY "${source}")
    _sharc_fail(${NAME} "SOURCE '${ARG_SOURCE}' does not exist (looked for ${source})")
  endif()
  set(plan_args "")
  set(plan_depends "")
  if(DEFINED ARG_BUCKET_BYTES)
    # The gradient buckets' size (codegen/passes/bucket_all_reduces.h); with
    # MESH auto it replaces the planner's search.
    if(NOT ARG_BUCKET_BYTES MATCHES "^[0-9]+(\\.[0-9]+)?(B|KiB|MiB|GiB|KB|MB|GB)?$" OR ARG_BUCKET_BYTES MATCHES "^0+(\\.0*)?[A-Za-z]*$")
      _sharc_fail(${NAME} "BUCKET_BYTES ${ARG_BUCKET_BYTES} is not a size: write the most bytes one gradient "
                          "bucket carries as 1MiB, 256KiB or a byte count")
    endif()
    list(APPEND plan_args --bucket-bytes ${ARG_BUCKET_BYTES})
  endif()
  if(ARG_MESH STREQUAL "auto")
    # The planner picks the mesh at build time (codegen/plan.h).
    if(NOT DEFINED ARG_DEVICES OR NOT ARG_DEVICES MATCHES "^[1-9][0-9]*$")
      _sharc_fail(${NAME} "MESH auto needs DEVICES, the device count to plan for, e.g. MESH auto DEVICES 8")
    endif()
    set(devices ${ARG_DEVICES})
    if(DEFINED ARG_MEMORY)
      if(NOT ARG_MEMORY MATCHES "^[0-9]+(\\.[0-9]+)?(B|KiB|MiB|GiB|TiB|KB|MB|GB)?$")
        _sharc_fail(${NAME} "MEMORY ${ARG_MEMORY} is not a size: write the budget per device as 16GiB, "
                            "512MiB or a byte count")
      endif()
      list(APPEND plan_args --memory ${ARG_MEMORY})
    endif()
    if(DEFINED ARG_MACHINE)
      # A machine sharc knows (codegen/machines/*.json; a test checks the
      # list against the generator's), or a machine file.
      set(_sharc_machines cpu h100-ib h100-nvlink)
      if(ARG_MACHINE MATCHES "\\.json$")
        get_filename_component(machine_file "${ARG_MACHINE}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
        if(NOT EXISTS "${machine_file}" OR IS_DIRECTORY "${machine_file}")
          _sharc_fail(${NAME} "MACHINE file '${ARG_MACHINE}' does not exist (looked for ${machine_file})")
        endif()
        list(APPEND plan_args --machine ${machine_file})
        set(plan_depends ${machine_file})
      elseif(NOT ARG_MACHINE IN_LIST _sharc_machines)
        string(JOIN ", " known ${_sharc_machines})
        _sharc_fail(${NAME} "MACHINE ${ARG_MACHINE} is not a machine sharc knows (${known}) nor a machine "
                            "file (a path ending in .json)")
      else()
        list(APPEND plan_args --machine ${ARG_MACHINE})
      endif()
    endif()
    if(DEFINED ARG_CANDIDATE)
      # The plan's K-th candidate that fits instead of its choice (0): how
      # bench_plan measures the ranking.
      if(NOT ARG_CANDIDATE MATCHES "^[0-9]+$")
        _sharc_fail(${NAME} "CANDIDATE ${ARG_CANDIDATE} is not a candidate's rank: 0 is the plan's choice, "
                            "1 the next fastest that fits, and so on")
      endif()
      list(APPEND plan_args --candidate ${ARG_CANDIDATE})
    endif()
  else()
    foreach(planning MEMORY MACHINE CANDIDATE)
      if(DEFINED ARG_${planning})
        _sharc_fail(${NAME} "${planning} is for MESH auto (the planner's budget, machine and ranks); "
                            "MESH \"${ARG_MESH}\" is fixed")
      endif()
    endforeach()
    _sharc_check_mesh(${NAME} "${ARG_MESH}" "${ARG_DEVICES}" devices)
  endif()
  if(NOT DEFINED ARG_PROGRAM)
    set(ARG_PROGRAM ${NAME})
  endif()
  if(NOT ARG_PROGRAM MATCHES "^[A-Za-z_][A-Za-z0-9_]*$")
    _sharc_fail(${NAME} "PROGRAM \"${ARG_PROGRAM}\" is not a program name: it is the name given "
                        "to SHARC_PROGRAM(name, b) in the model file")
  endif()
  if(NOT DEFINED ARG_NAMESPACE)
    set(ARG_NAMESPACE "sharc_gen::${NAME}")
  endif()
  if(NOT DEFINED ARG_CPP_FILES)
    set(ARG_CPP_FILES 4)
  endif()
  if(NOT ARG_CPP_FILES MATCHES "^[1-9][0-9]*$" OR ARG_CPP_FILES GREATER 1000)
    _sharc_fail(${NAME} "CPP_FILES ${ARG_CPP_FILES} is not a number of files from 1 to 1000 (the most "
                        ".cpp files the generated step is spread over, e.g. CPP_FILES 8)")
  endif()
  if(NOT DEFINED ARG_BACKEND)
    set(ARG_BACKEND cpu)
  endif()
  if(NOT ARG_BACKEND MATCHES "^(cpu|cuda)$")
    _sharc_fail(${NAME} "BACKEND ${ARG_BACKEND} is not a backend: BACKEND cpu (the default: C++ for "
                        "device threads) or BACKEND cuda (CUDA kernels, run on a gpu::GpuWorld)")
  endif()
  if(ARG_BACKEND STREQUAL "cuda" AND NOT SHARC_ENABLE_CUDA)
    _sharc_fail(${NAME} "BACKEND cuda needs sharc built with SHARC_ENABLE_CUDA=ON (nvcc compiles each "
                        "generated .cu for the GPU besides the simulator's build), but SHARC_ENABLE_CUDA "
                        "is OFF or nvcc was not found; install the CUDA toolkit or use BACKEND cpu")
  endif()
  set(option_args "")
  foreach(option IN LISTS ARG_OPTIONS)
    if(NOT option MATCHES "^[A-Za-z_][A-Za-z0-9_]*=[^,=]+$")
      _sharc_fail(${NAME} "OPTIONS entry \"${option}\" is not NAME=VALUE, e.g. OPTIONS layers=12 "
                          "(the model reads it with b.option(\"layers\", 2))")
    endif()
    string(REGEX MATCH "=(.*)" value "${option}")
    set(value "${CMAKE_MATCH_1}")
    string(REGEX MATCH "^[^=]*" option_name "${option}")
    # The generator reads them as int64_t (ProgramBuilder::option); 19
    # digits and more may not fit, and are no depth or width anyway.
    set(digit_count 0)
    if(value MATCHES "^[-+]?0*([0-9]+)$")
      string(LENGTH "${CMAKE_MATCH_1}" digit_count)
    endif()
    if(digit_count EQUAL 0 OR digit_count GREATER 18)
      _sharc_fail(${NAME} "OPTIONS ${option}: the value '${value}' is not an integer (the model reads "
                          "options with b.option(name, fallback), as int64_t), e.g. OPTIONS ${option_name}=12")
    endif()
    list(APPEND option_args --option ${option})
  endforeach()
  set(hf_config "")
  if(DEFINED ARG_HF_CONFIG)
    cmake_path(ABSOLUTE_PATH ARG_HF_CONFIG BASE_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR} NORMALIZE
               OUTPUT_VARIABLE hf_config)
    if(NOT EXISTS "${hf_config}" OR IS_DIRECTORY "${hf_config}")
      _sharc_fail(${NAME} "HF_CONFIG '${ARG_HF_CONFIG}' does not exist (looked for ${hf_config}); it names a "
                          "Hugging Face config.json, e.g. HF_CONFIG gpt2/config.json")
    endif()
    if(hf_config MATCHES ",")
      _sharc_fail(${NAME} "HF_CONFIG '${hf_config}': the path has a comma, which generation-time options "
                          "cannot carry; move or link the file to a path without one")
    endif()
    list(APPEND option_args --option hf_config=${hf_config})
  endif()
  if(NOT ARG_NAMESPACE MATCHES "^[A-Za-z_][A-Za-z0-9_]*(::[A-Za-z_][A-Za-z0-9_]*)*$")
    _sharc_fail(${NAME} "NAMESPACE \"${ARG_NAMESPACE}\" is not a C++ namespace, e.g. my_models::mlp")
  endif()

  # sharc's templates: where an installed sharc's config file says they are
  # (a global property, not a variable of the calling directory), else next
  # to this file in sharc's source tree.
  get_property(templates_dir GLOBAL PROPERTY SHARC_TEMPLATES_DIR)
  if(NOT templates_dir)
    set(templates_dir "${CMAKE_CURRENT_FUNCTION_LIST_DIR}/../templates")
  endif()
  cmake_path(NORMAL_PATH templates_dir)
  if(NOT IS_DIRECTORY "${templates_dir}")
    message(FATAL_ERROR "sharc: templates not found at ${templates_dir}; is sharc's source tree "
                        "or install complete?")
  endif()
  get_property(templates GLOBAL PROPERTY SHARC_TEMPLATE_FILES)
  if(NOT templates)
    file(GLOB templates CONFIGURE_DEPENDS "${templates_dir}/*")
    set_property(GLOBAL PROPERTY SHARC_TEMPLATE_FILES "${templates}")
  endif()

  # One generator per model source, keyed on its absolute path. Source
  # locations it records are made relative to the top-level project, so
  # generated code and diagnostics name `model.cpp:12`, not a home folder;
  # --source-root lets the generator find the file again to show the line.
  string(MD5 key "${source}")
  get_property(generator GLOBAL PROPERTY SHARC_GENERATOR_${key})
  if(NOT generator)
    set(generator ${NAME}.generator)
    add_executable(${generator} ${source})
    target_link_libraries(${generator} PRIVATE sharc::generator_main)
    if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
      target_compile_options(${generator} PRIVATE "-ffile-prefix-map=${CMAKE_SOURCE_DIR}/=")
    endif()
    set_property(GLOBAL PROPERTY SHARC_GENERATOR_${key} ${generator})
    file(STRINGS "${source}" marked REGEX "SHARC_ELEMENTWISE" LIMIT_COUNT 1)
    if(ARG_LIFT OR marked)
      sharc_lift(TARGET ${generator} SOURCE ${source})
    endif()
  endif()

  set(out_dir ${CMAKE_BINARY_DIR}/sharc_generated/${NAME})
  set(ext cpp)
  if(ARG_BACKEND STREQUAL "cuda")
    set(ext cu)
  endif()
  set(sources ${out_dir}/${NAME}.${ext})
  if(ARG_CPP_FILES GREATER 1)
    foreach(part RANGE 2 ${ARG_CPP_FILES})
      list(APPEND sources ${out_dir}/${NAME}_part${part}.${ext})
    endforeach()
  endif()
  set(outputs ${out_dir}/${NAME}.h ${out_dir}/${NAME}_step.h ${sources})
  # This call's place, for the notes under the generator's errors: the
  # calling CMakeLists.txt (relative to the top project, as the model's
  # lines are), and the line of the call when NAME is written there once
  # (CMake tells a function no caller line).
  file(READ "${CMAKE_CURRENT_LIST_FILE}" caller_text)
  cmake_path(RELATIVE_PATH CMAKE_CURRENT_LIST_FILE BASE_DIRECTORY ${CMAKE_SOURCE_DIR}
             OUTPUT_VARIABLE called_from)
  set(call_regex "sharc_add_program\\([ \t\r\n]*${NAME}[ \t\r\n)]")
  string(REGEX MATCHALL "${call_regex}" calls "${caller_text}")
  list(LENGTH calls call_count)
  if(call_count EQUAL 1)
    string(REGEX REPLACE "${call_regex}.*" "" before "${caller_text}")
    string(REGEX MATCHALL "\n" newlines "${before}")
    list(LENGTH newlines line)
    math(EXPR line "${line} + 1")
    string(APPEND called_from ":${line}")
  endif()
  set(common_args --program ${ARG_PROGRAM} --mesh ${ARG_MESH} --devices ${devices}
                  --name ${NAME} --source-root ${CMAKE_SOURCE_DIR} ${option_args} ${plan_args}
                  --called-from ${called_from})
  set(args ${common_args} --namespace ${ARG_NAMESPACE} --cpp-files ${ARG_CPP_FILES}
           --backend ${ARG_BACKEND} --out-dir ${out_dir} --templates ${templates_dir})
  if(ARG_DUMP_IR)
    list(APPEND args --dump-ir ${out_dir}/ir)
  endif()
  set(plan_output "")
  if(ARG_MESH STREQUAL "auto")
    set(plan_output ${out_dir}/${NAME}_plan.txt)  # the planner's ranked table
  endif()
  add_custom_command(
    OUTPUT ${outputs} ${out_dir}/${NAME}_explain.txt ${plan_output}
    COMMAND ${generator} ${args}
    DEPENDS ${generator} ${templates} ${hf_config} ${plan_depends}
    COMMENT "sharc: generating ${NAME} (${ARG_PROGRAM} on mesh ${ARG_MESH})"
    VERBATIM)

  separate_arguments(_sharc_arch UNIX_COMMAND "${SHARC_ARCH_FLAGS}")
  if(ARG_BACKEND STREQUAL "cuda")
    # Each generated .cu compiles twice: the library NAME builds it with the
    # host compiler for the block simulator (gpu::SimGpuWorld), NAME_device
    # with nvcc for the GPU. Both build it through a one-line source that
    # includes it (a source file has one language per directory).
    set_source_files_properties(${sources} PROPERTIES HEADER_FILE_ONLY TRUE)
    set(sim_sources "")
    set(device_sources "")
    foreach(cu IN LISTS sources)
      cmake_path(GET cu STEM stem)
      file(CONFIGURE OUTPUT ${out_dir}/build/${stem}_sim.cpp
           CONTENT "// The simulator's build of ${stem}.cu (cmake/sharc.cmake).\n#include \"${stem}.cu\"\n")
      file(CONFIGURE OUTPUT ${out_dir}/build/${stem}_device.cu
           CONTENT "// nvcc's build of ${stem}.cu (cmake/sharc.cmake).\n#include \"${stem}.cu\"\n")
      list(APPEND sim_sources ${out_dir}/build/${stem}_sim.cpp)
      list(APPEND device_sources ${out_dir}/build/${stem}_device.cu)
    endforeach()
    add_library(${NAME} STATIC ${outputs} ${sim_sources})
    target_link_libraries(${NAME} PUBLIC sharc::runtime sharc::gpu)
    add_library(${NAME}_device STATIC ${outputs} ${device_sources})
    target_include_directories(${NAME}_device PUBLIC ${out_dir})
    target_link_libraries(${NAME}_device PUBLIC sharc::runtime sharc::gpu)
    set_target_properties(${NAME}_device PROPERTIES CUDA_STANDARD 20 CUDA_STANDARD_REQUIRED ON)
    target_compile_options(${NAME}_device PRIVATE --expt-relaxed-constexpr -Xcompiler=-fno-math-errno)
    if(SHARC_WERROR)
      target_compile_options(${NAME}_device PRIVATE --Werror=all-warnings)
    endif()
  else()
    add_library(${NAME} STATIC ${outputs})
  endif()
  target_include_directories(${NAME} PUBLIC ${out_dir})
  target_link_libraries(${NAME} PUBLIC sharc::runtime)
  target_compile_options(${NAME} PRIVATE -O3 ${_sharc_arch} -ffp-contract=off -fno-math-errno
                         -fno-trapping-math)
  # Generated code compiles with the project's warnings but is not linted.
  set_target_properties(${NAME} PROPERTIES CXX_CLANG_TIDY "")

  add_custom_target(${NAME}_report
    COMMAND ${generator} ${common_args} --backend ${ARG_BACKEND} --report
            --schedule-svg ${out_dir}/${NAME}_schedule.svg
    DEPENDS ${generator}
    COMMENT "sharc: predicted costs of ${NAME} (${ARG_PROGRAM} on mesh ${ARG_MESH})"
    USES_TERMINAL VERBATIM)
  add_custom_target(${NAME}_explain
    COMMAND ${generator} ${common_args} --cpp-files ${ARG_CPP_FILES} --backend ${ARG_BACKEND}
            --templates ${templates_dir} --explain
    DEPENDS ${generator}
    COMMENT "sharc: what each model line of ${NAME} became in ${NAME}.${ext}"
    USES_TERMINAL VERBATIM)
  if(ARG_MESH STREQUAL "auto")
    # The planner's table alone, building only the generator: for trying a
    # budget or a machine (edit MEMORY or MACHINE, run it again).
    add_custom_target(${NAME}_plan
      COMMAND ${generator} ${common_args} --backend ${ARG_BACKEND} --plan
      DEPENDS ${generator} ${plan_depends}
      COMMENT "sharc: the plans for ${NAME} (${ARG_PROGRAM} on ${devices} devices)"
      USES_TERMINAL VERBATIM)
  endif()

  # What sharc_add_golden_test needs to generate this program again; the
  # global list lets a project (sharc's own tests) find every program.
  set_property(GLOBAL APPEND PROPERTY SHARC_PROGRAMS ${NAME})
  set_target_properties(${NAME} PROPERTIES
    SHARC_GENERATED_DIR ${out_dir}
    SHARC_GENERATOR ${generator}
    SHARC_GENERATOR_ARGS "${common_args};--namespace;${ARG_NAMESPACE};--cpp-files;${ARG_CPP_FILES};--backend;${ARG_BACKEND};--templates;${templates_dir}"
    SHARC_REPORT_ARGS "${common_args}"
    SHARC_TEMPLATE_FILES "${templates}")
endfunction()

# sharc_add_golden_test(): pins the generated code of programs made by
# sharc_add_program, so that a change of model, mesh or sharc shows up as a
# reviewable diff:
#
#   sharc_add_golden_test(NAME PROGRAMS prog [prog...] GOLDEN_DIR dir
#                         [WITH_IR] [WITH_REPORT] [WITH_EXPLAIN])
#
#  - at build time (in ALL) each program is generated once more into
#    <build>/sharc_golden/NAME/<prog>/: <prog>.h and <prog>.cpp, with WITH_IR the
#    IR after every pass (ir/), with WITH_REPORT the report's text
#    (<prog>_report.txt), with WITH_EXPLAIN the model-line map
#    (<prog>_explain.txt, whose generated line numbers move with any change
#    above them);
#  - the ctest NAME compares those files with GOLDEN_DIR/<prog>/. A file that
#    differs prints its unified diff (the first 150 lines, then how many more
#    there are); a golden file missing, or one the program no longer
#    generates, is named. Every failure ends with the command that accepts
#    the build's output;
#  - the target NAME_update (not in ALL) writes the build's output into
#    GOLDEN_DIR, replacing each program's folder there.
function(_sharc_golden_fail name)
  string(JOIN "" why ${ARGN})
  message(FATAL_ERROR "sharc_add_golden_test(${name}): ${why}")
endfunction()

function(sharc_add_golden_test NAME)
  cmake_parse_arguments(PARSE_ARGV 1 ARG "WITH_IR;WITH_REPORT;WITH_EXPLAIN" "GOLDEN_DIR" "PROGRAMS")
  if(NOT NAME MATCHES "^[A-Za-z_][A-Za-z0-9_.-]*$")
    _sharc_golden_fail("${NAME}" "the name \"${NAME}\" cannot name a test and its NAME_update target")
  endif()
  if(ARG_UNPARSED_ARGUMENTS)
    list(GET ARG_UNPARSED_ARGUMENTS 0 first)
    _sharc_golden_fail(${NAME} "unknown argument '${first}' (the keywords are PROGRAMS, GOLDEN_DIR, "
                        "WITH_IR, WITH_REPORT, WITH_EXPLAIN)")
  endif()
  if(NOT ARG_PROGRAMS)
    _sharc_golden_fail(${NAME} "PROGRAMS needs at least one target made by sharc_add_program")
  endif()
  if(NOT DEFINED ARG_GOLDEN_DIR)
    _sharc_golden_fail(${NAME} "GOLDEN_DIR is required: the folder, in your source tree, that holds "
                        "the accepted files")
  endif()
  cmake_path(ABSOLUTE_PATH ARG_GOLDEN_DIR BASE_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR} NORMALIZE
             OUTPUT_VARIABLE golden_dir)
  set(script "${CMAKE_CURRENT_FUNCTION_LIST_DIR}/sharc_golden.cmake")
  set(stage "${CMAKE_CURRENT_BINARY_DIR}/sharc_golden/${NAME}")
  set(stamps "")
  foreach(program IN LISTS ARG_PROGRAMS)
    if(NOT TARGET ${program})
      _sharc_golden_fail(${NAME} "PROGRAMS names '${program}', which is not a target (yet): call "
                          "sharc_add_program(${program} ...) before sharc_add_golden_test")
    endif()
    get_target_property(generator ${program} SHARC_GENERATOR)
    if(NOT generator)
      _sharc_golden_fail(${NAME} "PROGRAMS names '${program}', which sharc_add_program did not make")
    endif()
    get_target_property(args ${program} SHARC_GENERATOR_ARGS)
    get_target_property(report_args ${program} SHARC_REPORT_ARGS)
    get_target_property(templates ${program} SHARC_TEMPLATE_FILES)
    # The generator's path and arguments travel in a file, not on a command line.
    set(config "${stage}/${program}.config.cmake")
    string(REPLACE ";" "\" \"" quoted_args "${args}")
    string(REPLACE ";" "\" \"" quoted_report "${report_args}")
    file(GENERATE OUTPUT "${config}" CONTENT
"set(GENERATOR \"$<TARGET_FILE:${generator}>\")
set(ARGS \"${quoted_args}\")
set(REPORT_ARGS \"${quoted_report}\")
set(PROGRAM \"${program}\")
set(OUT \"${stage}/${program}\")
set(WITH_IR ${ARG_WITH_IR})
set(WITH_REPORT ${ARG_WITH_REPORT})
set(WITH_EXPLAIN ${ARG_WITH_EXPLAIN})
")
    add_custom_command(
      OUTPUT "${stage}/${program}.stamp"
      COMMAND ${CMAKE_COMMAND} -DMODE=stage "-DCONFIG=${config}" -P "${script}"
      COMMAND ${CMAKE_COMMAND} -E touch "${stage}/${program}.stamp"
      DEPENDS ${generator} ${templates} "${script}" "${config}"
      COMMENT "sharc: generating ${program} for the golden test ${NAME}"
      VERBATIM)
    list(APPEND stamps "${stage}/${program}.stamp")
  endforeach()
  add_custom_target(${NAME}_files ALL DEPENDS ${stamps})
  set(update_command "cmake --build \"${CMAKE_BINARY_DIR}\" --target ${NAME}_update")
  # Lists go to the scripts comma-separated: a ';' would split the argument.
  string(JOIN "," programs ${ARG_PROGRAMS})
  add_test(NAME ${NAME}
           COMMAND ${CMAKE_COMMAND} -DMODE=check "-DSTAGE=${stage}" "-DGOLDEN=${golden_dir}"
                   "-DPROGRAMS=${programs}" "-DUPDATE_COMMAND=${update_command}"
                   "-DTEST=${NAME}" -P "${script}")
  set_tests_properties(${NAME} PROPERTIES LABELS golden)
  add_custom_target(${NAME}_update
    COMMAND ${CMAKE_COMMAND} -DMODE=update "-DSTAGE=${stage}" "-DGOLDEN=${golden_dir}"
            "-DPROGRAMS=${programs}" -P "${script}"
    DEPENDS ${NAME}_files
    COMMENT "sharc: accepting the generated files of ${NAME} into ${golden_dir}"
    VERBATIM)
endfunction()
