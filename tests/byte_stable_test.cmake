# Generates every program in LIST (tests/CMakeLists.txt writes it: the
# samples' programs, all meshes) twice more, into WORK/a and WORK/b, and
# checks that both copies are byte for byte the headers, sources and _explain.txt
# the build compiled: no output folder, absolute path, time or hash order leaks into
# generated code. Fails listing each file that differs, with the start of
# its diff.
#   cmake -DLIST=<file> -DWORK=<dir> -P this
include("${CMAKE_CURRENT_LIST_DIR}/generated_files.cmake")
sharc_read_program_list()
file(REMOVE_RECURSE "${WORK}")
set(bad "")
foreach(program IN LISTS PROGRAMS)
  foreach(copy a b)
    set(out "${WORK}/${copy}/${program}")
    execute_process(COMMAND "${GENERATOR_${program}}" ${ARGS_${program}} --out-dir "${out}"
                    RESULT_VARIABLE rc OUTPUT_VARIABLE log ERROR_VARIABLE log)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "generating ${program} into ${out} failed (${rc}):\n${log}")
    endif()
    sharc_compare_generated(${program} "${out}" "${copy}/" bad)
  endforeach()
endforeach()
if(bad)
  message(FATAL_ERROR "generated code is not byte-stable: ${bad}")
endif()
message(STATUS "${count} sample programs: the same bytes from three output folders")
file(REMOVE_RECURSE "${WORK}")
