# The steps of sharc_add_golden_test (sharc.cmake), run as cmake -P scripts:
#
#   -DMODE=stage  -DCONFIG=<file>   generate one program into its stage
#                                   folder (the file, written at configure
#                                   time, names the generator and its arguments)
#   -DMODE=check  -DSTAGE=<dir> -DGOLDEN=<dir> -DPROGRAMS=<list>
#                 -DUPDATE_COMMAND=<text> -DTEST=<name>
#                                   compare the stage with the goldens; fail
#                                   with diffs and the command that accepts them
#   -DMODE=update -DSTAGE=<dir> -DGOLDEN=<dir> -DPROGRAMS=<list>
#                                   replace each program's golden folder with
#                                   its stage folder
cmake_minimum_required(VERSION 3.25)
string(REPLACE "," ";" PROGRAMS "${PROGRAMS}")

if(MODE STREQUAL "stage")
  include("${CONFIG}")
  file(REMOVE_RECURSE "${OUT}")
  file(MAKE_DIRECTORY "${OUT}")
  set(ir_args "")
  if(WITH_IR)
    set(ir_args --dump-ir "${OUT}/ir")
  endif()
  execute_process(COMMAND "${GENERATOR}" ${ARGS} --out-dir "${OUT}" ${ir_args}
                  RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "sharc golden test: generating ${PROGRAM} failed (${rc})")
  endif()
  # The model-line map names generated line numbers, which move with any
  # change above them: kept only when asked for.
  if(NOT WITH_EXPLAIN)
    file(REMOVE "${OUT}/${PROGRAM}_explain.txt")
  endif()
  if(WITH_REPORT)
    execute_process(COMMAND "${GENERATOR}" ${REPORT_ARGS} --report
                    OUTPUT_FILE "${OUT}/${PROGRAM}_report.txt" RESULT_VARIABLE rc)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "sharc golden test: the report of ${PROGRAM} failed (${rc})")
    endif()
  endif()
  return()
endif()

if(MODE STREQUAL "update")
  set(count 0)
  foreach(program IN LISTS PROGRAMS)
    if(NOT IS_DIRECTORY "${STAGE}/${program}")
      message(FATAL_ERROR "sharc golden update: ${STAGE}/${program} is missing; build first")
    endif()
    file(REMOVE_RECURSE "${GOLDEN}/${program}")
    file(COPY "${STAGE}/${program}" DESTINATION "${GOLDEN}")
    file(GLOB_RECURSE files RELATIVE "${GOLDEN}/${program}" "${GOLDEN}/${program}/*")
    list(LENGTH files n)
    math(EXPR count "${count} + ${n}")
  endforeach()
  message(STATUS "sharc: ${count} golden files written to ${GOLDEN}")
  return()
endif()

if(NOT MODE STREQUAL "check")
  message(FATAL_ERROR "sharc_golden.cmake: MODE is '${MODE}'; use stage, check or update")
endif()

find_program(SHARC_DIFF diff)
set(kLines 150)  # diff lines shown per file
set(failures 0)
set(report "")
foreach(program IN LISTS PROGRAMS)
  set(stage_dir "${STAGE}/${program}")
  set(golden_dir "${GOLDEN}/${program}")
  if(NOT IS_DIRECTORY "${stage_dir}")
    message("sharc golden test ${TEST}: nothing generated for ${program} in ${stage_dir}; "
            "build the project (or its target ${TEST}_files) before running its tests")
    message(FATAL_ERROR "sharc golden test ${TEST} failed")
  endif()
  file(GLOB_RECURSE generated RELATIVE "${stage_dir}" "${stage_dir}/*")
  set(golden "")
  if(IS_DIRECTORY "${golden_dir}")
    file(GLOB_RECURSE golden RELATIVE "${golden_dir}" "${golden_dir}/*")
  endif()
  list(SORT generated)
  foreach(file IN LISTS generated)
    if(NOT EXISTS "${golden_dir}/${file}")
      math(EXPR failures "${failures} + 1")
      string(APPEND report "\nmissing golden file ${golden_dir}/${file}: the build generated it, "
                           "no accepted copy exists\n")
      continue()
    endif()
    file(SHA256 "${stage_dir}/${file}" new_hash)
    file(SHA256 "${golden_dir}/${file}" old_hash)
    if(new_hash STREQUAL old_hash)
      continue()
    endif()
    math(EXPR failures "${failures} + 1")
    string(APPEND report "\n${program}/${file} differs from its golden file:\n")
    if(SHARC_DIFF)
      execute_process(COMMAND "${SHARC_DIFF}" -u --label "golden/${program}/${file}"
                              --label "generated/${program}/${file}"
                              "${golden_dir}/${file}" "${stage_dir}/${file}"
                      OUTPUT_VARIABLE diff)
      # Cut after kLines lines, saying how many were left out.
      string(REGEX MATCHALL "\n" newlines "${diff}")
      list(LENGTH newlines total)
      if(total GREATER kLines)
        string(FIND "${diff}" "\n" at)
        set(kept "")
        set(rest "${diff}")
        foreach(i RANGE 1 ${kLines})
          string(FIND "${rest}" "\n" at)
          math(EXPR next "${at} + 1")
          string(SUBSTRING "${rest}" 0 ${next} line)
          string(APPEND kept "${line}")
          string(SUBSTRING "${rest}" ${next} -1 rest)
        endforeach()
        math(EXPR more "${total} - ${kLines}")
        set(diff "${kept}... ${more} more diff lines\n")
      endif()
      string(APPEND report "${diff}")
    else()
      string(APPEND report "  (no diff program found; compare ${golden_dir}/${file} with "
                           "${stage_dir}/${file})\n")
    endif()
  endforeach()
  foreach(file IN LISTS golden)
    if(NOT EXISTS "${stage_dir}/${file}")
      math(EXPR failures "${failures} + 1")
      string(APPEND report "\ngolden file ${golden_dir}/${file} is no longer generated\n")
    endif()
  endforeach()
endforeach()

if(failures GREATER 0)
  # Plain message() keeps lines as they are (FATAL_ERROR rewraps them).
  message("${report}\nsharc golden test ${TEST}: ${failures} file(s) differ from ${GOLDEN}.\n"
          "If the change is intended, accept it, or create the golden files the first time "
          "(this writes the build's output into the golden folder):\n  ${UPDATE_COMMAND}\n")
  message(FATAL_ERROR "sharc golden test ${TEST} failed")
endif()
list(LENGTH PROGRAMS n)
message(STATUS "sharc golden test ${TEST}: ${n} program(s) match ${GOLDEN}")
