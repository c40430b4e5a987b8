# `cmake --install` and find_package(sharc CONFIG): the libraries, their
# headers, the templates and sharc_add_program(), so a project builds
# against an install tree exactly as it does with add_subdirectory():
#
#   find_package(sharc 0.1 CONFIG REQUIRED)
#   sharc_add_program(mlp_data4 SOURCE model.cpp PROGRAM mlp_train MESH "data=4")
#   target_link_libraries(train PRIVATE mlp_data4 sharc::runtime)
#
# Layout under the prefix:
#   include/sharc/{runtime,ir,dsl,codegen,codegen/passes}/*.h  (included as "dsl/sharc.h")
#   lib/libsharc_{runtime,ir,dsl,codegen,generator_main,checkpoint,interop,tokenizer,mpi}.a
#   lib/cmake/sharc/   sharcConfig.cmake, its version file, the exported
#                      targets (sharc::runtime, sharc::ir, sharc::dsl,
#                      sharc::codegen, sharc::generator_main and, when
#                      built, sharc::checkpoint, sharc::interop,
#                      sharc::tokenizer and sharc::mpi) and
#                      sharc.cmake and sharc_golden.cmake
#   share/sharc/templates/   what the generator fills in
#   bin/sharc-lift           where Clang LibTooling was found (sharc::lift)
#   bin/sharc-plan           the planner's table for a model file
# and, without installing, <build>/sharc-build holds the same config file
# over the build tree (sharc-plan's package when it runs from a build).
# tests/consumer installs sharc into a fresh prefix and builds
# examples/own_project against it (ctest -L install).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(SHARC_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/sharc")
set(SHARC_INSTALL_TEMPLATESDIR "${CMAKE_INSTALL_DATADIR}/sharc/templates")

set(_sharc_libraries sharc_runtime sharc_ir sharc_dsl sharc_codegen sharc_generator_main)
foreach(optional sharc_checkpoint sharc_interop sharc_tokenizer sharc_mpi)
  if(TARGET ${optional})
    list(APPEND _sharc_libraries ${optional})
  endif()
endforeach()
foreach(lib IN LISTS _sharc_libraries)
  string(REPLACE "sharc_" "" export_name ${lib})
  set_target_properties(${lib} PROPERTIES EXPORT_NAME ${export_name})
endforeach()
# Headers are included by their path from sharc's root ("runtime/mesh.h"),
# which under the prefix is include/sharc.
foreach(lib sharc_runtime sharc_ir)
  target_include_directories(${lib} PUBLIC $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}/sharc>)
endforeach()

install(TARGETS ${_sharc_libraries} EXPORT sharcTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
# sharc-lift, where it was built (lift/), as the imported executable
# sharc::lift, which sharc_lift() runs for models with SHARC_ELEMENTWISE
# functions.
if(TARGET sharc-lift)
  set_target_properties(sharc-lift PROPERTIES EXPORT_NAME lift)
  install(TARGETS sharc-lift EXPORT sharcTargets RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
foreach(dir runtime ir dsl codegen codegen/passes)
  file(GLOB headers CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/${dir}/*.h")
  install(FILES ${headers} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/sharc/${dir})
endforeach()
install(DIRECTORY "${PROJECT_SOURCE_DIR}/templates/" DESTINATION ${SHARC_INSTALL_TEMPLATESDIR})
install(TARGETS sharc-plan RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(EXPORT sharcTargets NAMESPACE sharc:: DESTINATION ${SHARC_INSTALL_CMAKEDIR})

foreach(optional checkpoint tokenizer mpi)
  string(TOUPPER ${optional} upper)
  if(TARGET sharc_${optional})
    set(SHARC_HAS_${upper} TRUE)
  else()
    set(SHARC_HAS_${upper} FALSE)
  endif()
endforeach()
configure_package_config_file("${CMAKE_CURRENT_LIST_DIR}/sharcConfig.cmake.in"
  "${PROJECT_BINARY_DIR}/sharcConfig.cmake"
  INSTALL_DESTINATION ${SHARC_INSTALL_CMAKEDIR}
  PATH_VARS SHARC_INSTALL_TEMPLATESDIR)
# The build tree as a package too, <build>/sharc-build: the same config
# file over the build tree's targets, sharc.cmake and the source tree's
# templates, so sharc-plan builds a model's generator without an install.
export(EXPORT sharcTargets NAMESPACE sharc:: FILE "${PROJECT_BINARY_DIR}/sharc-build/sharcTargets.cmake")
set(SHARC_BUILD_TEMPLATESDIR "${PROJECT_SOURCE_DIR}/templates")
set(SHARC_INSTALL_TEMPLATESDIR_SAVED "${SHARC_INSTALL_TEMPLATESDIR}")
set(SHARC_INSTALL_TEMPLATESDIR "${SHARC_BUILD_TEMPLATESDIR}")
configure_package_config_file("${CMAKE_CURRENT_LIST_DIR}/sharcConfig.cmake.in"
  "${PROJECT_BINARY_DIR}/sharc-build/sharcConfig.cmake"
  INSTALL_DESTINATION "${PROJECT_BINARY_DIR}/sharc-build"
  INSTALL_PREFIX "${PROJECT_BINARY_DIR}"
  PATH_VARS SHARC_INSTALL_TEMPLATESDIR)
set(SHARC_INSTALL_TEMPLATESDIR "${SHARC_INSTALL_TEMPLATESDIR_SAVED}")
foreach(file sharc.cmake sharc_golden.cmake)
  configure_file("${CMAKE_CURRENT_LIST_DIR}/${file}" "${PROJECT_BINARY_DIR}/sharc-build/${file}" COPYONLY)
endforeach()
write_basic_package_version_file("${PROJECT_BINARY_DIR}/sharc-build/sharcConfigVersion.cmake"
  COMPATIBILITY SameMinorVersion)
write_basic_package_version_file("${PROJECT_BINARY_DIR}/sharcConfigVersion.cmake"
  COMPATIBILITY SameMinorVersion)
install(FILES "${PROJECT_BINARY_DIR}/sharcConfig.cmake" "${PROJECT_BINARY_DIR}/sharcConfigVersion.cmake"
              "${CMAKE_CURRENT_LIST_DIR}/sharc.cmake"
              "${CMAKE_CURRENT_LIST_DIR}/sharc_golden.cmake"
        DESTINATION ${SHARC_INSTALL_CMAKEDIR})
