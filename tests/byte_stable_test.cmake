# Generates every program in LIST (tests/CMakeLists.txt writes it: the
# samples' programs, all meshes) twice more, into WORK/a and WORK/b, and
# checks that both copies are byte for byte the .h, .cpp and _explain.txt the build
# compiled: no output folder, absolute path, time or hash order leaks into
# generated code. Fails listing each file that differs, with the start of
# its diff.
#   cmake -DLIST=<file> -DWORK=<dir> -P this
include("${LIST}")
list(LENGTH PROGRAMS count)
if(count LESS 10)
  message(FATAL_ERROR "only ${count} sample programs listed in ${LIST}; expected the samples' "
                      "programs on all their meshes")
endif()
file(REMOVE_RECURSE "${WORK}")
find_program(DIFF diff)
set(bad "")
foreach(program IN LISTS PROGRAMS)
  foreach(copy a b)
    set(out "${WORK}/${copy}/${program}")
    execute_process(COMMAND "${GENERATOR_${program}}" ${ARGS_${program}} --out-dir "${out}"
                    RESULT_VARIABLE rc OUTPUT_VARIABLE log ERROR_VARIABLE log)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "generating ${program} into ${out} failed (${rc}):\n${log}")
    endif()
    foreach(file ${program}.h ${program}.cpp ${program}_explain.txt)
      file(SHA256 "${out}/${file}" got)
      file(SHA256 "${BUILT_${program}}/${file}" want)
      if(NOT got STREQUAL want)
        list(APPEND bad "${copy}/${file}")
        if(DIFF)
          execute_process(COMMAND "${DIFF}" -u "${BUILT_${program}}/${file}" "${out}/${file}"
                          COMMAND head -n 40 OUTPUT_VARIABLE diff)
          message("${file} generated into ${out} differs from the build's:\n${diff}")
        endif()
      endif()
    endforeach()
  endforeach()
endforeach()
if(bad)
  message(FATAL_ERROR "generated code is not byte-stable: ${bad}")
endif()
message(STATUS "${count} sample programs: the same bytes from three output folders")
file(REMOVE_RECURSE "${WORK}")
