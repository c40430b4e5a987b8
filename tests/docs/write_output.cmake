# cmake -DCOMMAND="tool|arg|..." -DEXIT=n -DOUT=file -P write_output.cmake:
# runs the command ('|' separates its arguments), checks that it exits with
# status EXIT, and writes what it printed (stdout, then stderr) to OUT. The
# guide quotes these files as excerpts (help_texts.cmake), so a command's
# output shown in the docs is the command's output.
string(REPLACE "|" ";" command "${COMMAND}")
execute_process(COMMAND ${command} OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL EXIT)
  message(FATAL_ERROR "${COMMAND} exited with ${rc}, not ${EXIT}:\n${out}${err}")
endif()
file(WRITE ${OUT} "${out}${err}")
