# What byte_stable_test.cmake and two_trees_test.cmake share: reading the
# list of sample programs (tests/CMakeLists.txt writes it) and comparing one
# program's generated files with the ones the build compiled.
include_guard()

# Includes LIST (PROGRAMS, and per program GENERATOR_, ARGS_ and BUILT_) and
# checks that it names the samples' programs.
macro(sharc_read_program_list)
  include("${LIST}")
  list(LENGTH PROGRAMS count)
  if(count LESS 10)
    message(FATAL_ERROR "only ${count} sample programs listed in ${LIST}; expected the samples' "
                        "programs on all their meshes")
  endif()
  find_program(DIFF diff)
endmacro()

# The files sharc_add_program generates for `program` (ARGS_<program> has
# its --cpp-files and --backend): <program>.h, _step.h, .cpp, _part2.cpp .. (.cu
# for BACKEND cuda) and _explain.txt.
function(sharc_generated_files program out_list)
  list(FIND ARGS_${program} --cpp-files at)
  if(at LESS 0)
    message(FATAL_ERROR "the generator arguments of ${program} have no --cpp-files: ${ARGS_${program}}")
  endif()
  math(EXPR at "${at} + 1")
  list(GET ARGS_${program} ${at} files)
  # BACKEND cuda's sources are .cu.
  set(ext cpp)
  list(FIND ARGS_${program} --backend b)
  if(b GREATER_EQUAL 0)
    math(EXPR b "${b} + 1")
    list(GET ARGS_${program} ${b} backend)
    if(backend STREQUAL "cuda")
      set(ext cu)
    endif()
  endif()
  set(names ${program}.h ${program}_step.h ${program}.${ext})
  if(files GREATER 1)
    foreach(k RANGE 2 ${files})
      list(APPEND names ${program}_part${k}.${ext})
    endforeach()
  endif()
  list(APPEND names ${program}_explain.txt)
  set(${out_list} ${names} PARENT_SCOPE)
endfunction()

# Compares the files of `program` (sharc_generated_files) in `dir` with the
# build's (BUILT_<program>); appends "<tag><file>" to the list named `out_list`
# for each that differs and prints the start of its diff.
function(sharc_compare_generated program dir tag out_list)
  set(found ${${out_list}})
  sharc_generated_files(${program} names)
  foreach(file IN LISTS names)
    if(NOT EXISTS "${dir}/${file}")
      message(FATAL_ERROR "${dir}/${file} was not generated")
    endif()
    file(SHA256 "${dir}/${file}" got)
    file(SHA256 "${BUILT_${program}}/${file}" want)
    if(NOT got STREQUAL want)
      list(APPEND found "${tag}${file}")
      if(DIFF)
        execute_process(COMMAND "${DIFF}" -u "${BUILT_${program}}/${file}" "${dir}/${file}"
                        COMMAND head -n 40 OUTPUT_VARIABLE diff)
        message("${file} in ${dir} differs from the build's:\n${diff}")
      endif()
    endif()
  endforeach()
  set(${out_list} ${found} PARENT_SCOPE)
endfunction()
