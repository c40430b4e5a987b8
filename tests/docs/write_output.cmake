# cmake -DCOMMAND="tool|arg|..." -DEXIT=n -DOUT=file [-DSTRIP=dir/] [-DWORKDIR=dir] -P write_output.cmake:
# runs the command ('|' separates its arguments; in WORKDIR if given), checks that it exits with
# status EXIT, and writes what it printed (stdout, then stderr) to OUT, with
# every STRIP taken out (the source folder, so that paths read as the docs
# show them, relative to the repository). The guide quotes these files as
# excerpts (help_texts.cmake), so a command's output shown in the docs is
# the command's output.
string(REPLACE "|" ";" command "${COMMAND}")
if(NOT WORKDIR)
  set(WORKDIR .)
endif()
execute_process(COMMAND ${command} WORKING_DIRECTORY ${WORKDIR} OUTPUT_VARIABLE out ERROR_VARIABLE err
                RESULT_VARIABLE rc)
if(NOT rc EQUAL EXIT)
  message(FATAL_ERROR "${COMMAND} exited with ${rc}, not ${EXIT}:\n${out}${err}")
endif()
set(text "${out}${err}")
if(STRIP)
  string(REPLACE "${STRIP}" "" text "${text}")
endif()
file(WRITE ${OUT} "${text}")
