# Each layer includes only the layers below it (docs/architecture.md, "Layers"):
#   runtime/ < ir/ < dsl/ < codegen/
# Fails naming every #include that reaches upward.
#   cmake -DROOT=<sharc source dir> -P layering_test.cmake
set(above_runtime ir dsl codegen)
# ir/ includes no other layer but the element types it shares with generated
# code (runtime/dtype.h, header-only).
set(above_ir dsl codegen runtime)
set(allowed_ir "runtime/dtype.h")
set(above_dsl codegen)
set(bad "")
foreach(layer runtime ir dsl)
  file(GLOB_RECURSE files "${ROOT}/${layer}/*.h" "${ROOT}/${layer}/*.cpp")
  foreach(file IN LISTS files)
    file(STRINGS "${file}" includes REGEX "^#include \"")
    foreach(line IN LISTS includes)
      foreach(upper IN LISTS above_${layer})
        if(line MATCHES "^#include \"${upper}/" AND NOT line MATCHES "^#include \"(${allowed_${layer}})\"")
          file(RELATIVE_PATH rel "${ROOT}" "${file}")
          string(APPEND bad "\n  ${rel}: ${line}")
        endif()
      endforeach()
    endforeach()
  endforeach()
endforeach()
if(NOT bad STREQUAL "")
  message(FATAL_ERROR "includes that reach a layer above their own:${bad}")
endif()
message("layering: runtime/ < ir/ < dsl/ < codegen/ holds")
