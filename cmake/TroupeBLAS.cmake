# Locates a CBLAS (OpenBLAS preferred) and defines the imported INTERFACE target Troupe::BLAS:
# linking it gives the BLAS library and the directory holding <cblas.h>.
#
# Used in-tree (root CMakeLists.txt) and by the installed TroupeConfig.cmake, so that consumers of
# the static troupe libraries resolve the same BLAS.
#
# Order: pkg-config `openblas` (Debian: libopenblas-dev -> /usr/include/x86_64-linux-gnu/openblas-*),
# then FindBLAS (BLA_VENDOR=OpenBLAS, then any vendor) plus find_path(cblas.h).
# Sets TROUPE_BLAS_FOUND. Set TROUPE_BLAS_REQUIRED to FALSE before including it to make it optional.
include_guard(GLOBAL)

if(NOT DEFINED TROUPE_BLAS_REQUIRED)
  set(TROUPE_BLAS_REQUIRED TRUE)
endif()

if(TARGET Troupe::BLAS)
  set(TROUPE_BLAS_FOUND TRUE)
  return()
endif()

set(TROUPE_BLAS_FOUND FALSE)
set(_troupe_blas_libs "")
set(_troupe_blas_incs "")
set(_troupe_blas_how "")

# 1. pkg-config openblas
find_package(PkgConfig QUIET)
if(PkgConfig_FOUND)
  pkg_check_modules(TROUPE_PC_OPENBLAS QUIET openblas)
  if(TROUPE_PC_OPENBLAS_FOUND)
    # Resolve -L/-l into a full path so consumers do not depend on link-directory order.
    set(_troupe_pc_libs "")
    foreach(_lib IN LISTS TROUPE_PC_OPENBLAS_LIBRARIES)
      find_library(TROUPE_PC_OPENBLAS_${_lib}_LIBRARY NAMES ${_lib}
        HINTS ${TROUPE_PC_OPENBLAS_LIBRARY_DIRS} NO_DEFAULT_PATH)
      if(NOT TROUPE_PC_OPENBLAS_${_lib}_LIBRARY)
        find_library(TROUPE_PC_OPENBLAS_${_lib}_LIBRARY NAMES ${_lib})
      endif()
      if(TROUPE_PC_OPENBLAS_${_lib}_LIBRARY)
        list(APPEND _troupe_pc_libs "${TROUPE_PC_OPENBLAS_${_lib}_LIBRARY}")
      else()
        list(APPEND _troupe_pc_libs "${_lib}")
      endif()
    endforeach()
    find_path(TROUPE_CBLAS_INCLUDE_DIR cblas.h
      HINTS ${TROUPE_PC_OPENBLAS_INCLUDE_DIRS} NO_DEFAULT_PATH)
    if(_troupe_pc_libs AND TROUPE_CBLAS_INCLUDE_DIR)
      set(_troupe_blas_libs ${_troupe_pc_libs})
      set(_troupe_blas_incs ${TROUPE_CBLAS_INCLUDE_DIR})
      set(_troupe_blas_how "pkg-config openblas ${TROUPE_PC_OPENBLAS_VERSION}")
    endif()
  endif()
endif()

# 2. FindBLAS + cblas.h
if(NOT _troupe_blas_libs)
  if(NOT DEFINED BLA_VENDOR)
    set(BLA_VENDOR OpenBLAS)
    find_package(BLAS QUIET)
    unset(BLA_VENDOR)
    if(NOT BLAS_FOUND)
      find_package(BLAS QUIET)
    endif()
  else()
    find_package(BLAS QUIET)
  endif()
  find_path(TROUPE_CBLAS_INCLUDE_DIR cblas.h
    PATH_SUFFIXES openblas openblas-pthread openblas-openmp
                  x86_64-linux-gnu/openblas-pthread x86_64-linux-gnu/openblas-openmp
                  aarch64-linux-gnu/openblas-pthread aarch64-linux-gnu/openblas-openmp)
  if(BLAS_FOUND AND TROUPE_CBLAS_INCLUDE_DIR)
    set(_troupe_blas_libs ${BLAS_LIBRARIES} ${BLAS_LINKER_FLAGS})
    set(_troupe_blas_incs ${TROUPE_CBLAS_INCLUDE_DIR})
    set(_troupe_blas_how "FindBLAS")
  endif()
endif()

if(_troupe_blas_libs)
  add_library(Troupe::BLAS INTERFACE IMPORTED)
  set_target_properties(Troupe::BLAS PROPERTIES
    INTERFACE_LINK_LIBRARIES "${_troupe_blas_libs}"
    INTERFACE_INCLUDE_DIRECTORIES "${_troupe_blas_incs}")
  set(TROUPE_BLAS_FOUND TRUE)
  if(NOT Troupe_FIND_QUIETLY)
    message(STATUS "Troupe: BLAS via ${_troupe_blas_how}: ${_troupe_blas_libs} (cblas.h in ${_troupe_blas_incs})")
  endif()
elseif(TROUPE_BLAS_REQUIRED)
  message(FATAL_ERROR "Troupe: no CBLAS found (need OpenBLAS: apt-get install libopenblas-dev)")
endif()

unset(_troupe_blas_libs)
unset(_troupe_blas_incs)
unset(_troupe_blas_how)
