# Helpers shared by the layer libraries (one per folder: tensor, util, nn, optim, data, comm, parallel, launch).
include_guard(GLOBAL)

# troupe_layer_setup(<target> LAYER <dir>)
#   Common settings for a layer library <target> whose sources/headers live in <source root>/<dir>:
#   C++20 usage requirement, include dirs (<troupe/<dir>/x.h> in-tree via the build/include/troupe
#   symlink, and installed under include/), install of the library + <dir>/**/*.h, and registration
#   with the umbrella target `troupe` and the exported package.
function(troupe_layer_setup target)
  cmake_parse_arguments(ARG "" "LAYER" "" ${ARGN})
  if(NOT ARG_LAYER)
    message(FATAL_ERROR "troupe_layer_setup(${target}): LAYER <dir> is required")
  endif()

  add_library(Troupe::${target} ALIAS ${target})
  # A header-only layer (util) is an INTERFACE library: its requirements are INTERFACE ones.
  get_target_property(_type ${target} TYPE)
  if(_type STREQUAL "INTERFACE_LIBRARY")
    set(_scope INTERFACE)
  else()
    set(_scope PUBLIC)
    set_target_properties(${target} PROPERTIES POSITION_INDEPENDENT_CODE ON)
  endif()
  target_compile_features(${target} ${_scope} cxx_std_20)
  target_include_directories(${target} ${_scope}
    "$<BUILD_INTERFACE:${TROUPE_BUILD_INCLUDE_DIR}>"
    "$<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>"
    "$<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>")

  install(TARGETS ${target}
    EXPORT TroupeTargets
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
    RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  install(DIRECTORY "${PROJECT_SOURCE_DIR}/${ARG_LAYER}/"
    DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}/troupe/${ARG_LAYER}"
    FILES_MATCHING PATTERN "*.h" PATTERN "*.hpp" PATTERN "*.cuh"
    PATTERN "internal" EXCLUDE)  # <layer>/internal/: private headers (actors/internal includes CAF)

  set_property(GLOBAL APPEND PROPERTY TROUPE_LAYER_TARGETS ${target})
endfunction()
