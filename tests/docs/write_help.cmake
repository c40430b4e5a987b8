# cmake -DTOOL=path -DOUT=file -P write_help.cmake: writes `TOOL --help` to
# OUT (docs/reference/command-line.md quotes these files; the docs check
# compares them line by line), failing when the tool does not print it.
execute_process(COMMAND ${TOOL} --help OUTPUT_FILE ${OUT} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${TOOL} --help exited with ${rc}")
endif()
