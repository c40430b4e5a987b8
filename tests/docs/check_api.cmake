# cmake -DDOXYGEN=path -DDOXYFILE=file -DLOG=file -P check_api.cmake: builds
# the API reference (docs/api/Doxyfile.in) and fails when Doxygen warned,
# printing the warnings (an undocumented public name is one). Without
# Doxygen it fails too, saying how to install it: the reference is part of
# the product, so CI must not skip it.
if(NOT DOXYGEN)
  message(FATAL_ERROR "doxygen is not installed, so the API reference cannot be built: "
                      "scripts/install_deps.sh installs it (Debian's doxygen)")
endif()
file(REMOVE ${LOG})
execute_process(COMMAND ${DOXYGEN} ${DOXYFILE} RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "doxygen failed (${rc}):\n${err}")
endif()
file(READ ${LOG} warnings)
string(STRIP "${warnings}" warnings)
if(NOT warnings STREQUAL "")
  message(FATAL_ERROR "the API reference has warnings (document these names in their headers):\n${warnings}")
endif()
message(STATUS "the API reference built without warnings")
