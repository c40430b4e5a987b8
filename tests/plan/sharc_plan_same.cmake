# cmake -DSHARC_PLAN=path -DMODEL=file -DWORK=dir -DCASES="args,expected_file;..." -P sharc_plan_same.cmake
# Runs sharc-plan on MODEL once per case (its '|'-separated arguments, the
# same work folder each time) and passes only when each run exits 0 and
# prints exactly the expected file: the table sharc_add_program's MESH auto
# wrote for the same program, devices and budget. Every run after the first
# must reuse the generator the first built (it says nothing of building).
set(first TRUE)
foreach(case IN LISTS CASES)
  string(REPLACE "," ";" parts "${case}")
  list(GET parts 0 args)
  list(GET parts 1 expected_file)
  string(REPLACE "|" ";" args "${args}")
  execute_process(COMMAND ${SHARC_PLAN} ${MODEL} --work ${WORK} ${args}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message("${err}${out}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "sharc-plan ${args} exited ${rc}")
  endif()
  file(READ ${expected_file} expected)
  if(NOT out STREQUAL expected)
    message(FATAL_ERROR "sharc-plan ${args} printed another table than ${expected_file}:\n${expected}")
  endif()
  if(NOT first AND err MATCHES "building the generator")
    message(FATAL_ERROR "sharc-plan ${args} built the generator again: ${err}")
  endif()
  set(first FALSE)
  message("sharc-plan ${args}: the table of ${expected_file}")
endforeach()
