# Locates libtorch (Debian 12: libtorch-dev 1.13, CPU only) for benchmarks/examples that compare
# against it in the same binary. Optional: nothing in the libraries or tests needs it.
#
#   troupe_find_libtorch()                 call once from the top-level CMakeLists.txt (libtorch's
#                                          imported targets are directory-scoped); sets
#                                          TROUPE_LIBTORCH_FOUND and the target troupe_libtorch
#   troupe_target_use_libtorch(<target>)   links troupe_libtorch and defines TROUPE_HAVE_LIBTORCH=1
#                                          when libtorch was found; does nothing otherwise
#   troupe_source_wants_libtorch(<src> <out>)  TRUE when <src> mentions TROUPE_HAVE_LIBTORCH or <torch/
#
# Debian ships /usr/lib/x86_64-linux-gnu/cmake/Torch/TorchConfig.cmake (-> target `torch`, headers
# /usr/include + /usr/include/torch/csrc/api/include, TORCH_CXX_FLAGS -D_GLIBCXX_USE_CXX11_ABI=1,
# which is GCC's default, so troupe objects and libtorch agree). Without a TorchConfig the headers
# and libtorch/libtorch_cpu/libc10 are located by hand.
include_guard(GLOBAL)

option(TROUPE_USE_LIBTORCH "Let benchmarks/examples compare against libtorch when found" ON)

macro(troupe_find_libtorch)
  if(NOT DEFINED _TROUPE_LIBTORCH_SEARCHED)
    set(_TROUPE_LIBTORCH_SEARCHED TRUE)
    set(TROUPE_LIBTORCH_FOUND FALSE)
    set(TROUPE_LIBTORCH_HOW "")
    if(TROUPE_USE_LIBTORCH)
      # TorchConfig.cmake calls find_package(Caffe2 REQUIRED PATHS <its dir>/../Caffe2), which is
      # fatal when a half-installed libtorch has no Caffe2Config.cmake next to it: look first.
      find_file(TROUPE_TORCH_CONFIG TorchConfig.cmake
        HINTS ${Torch_DIR}
        PATH_SUFFIXES lib/${CMAKE_LIBRARY_ARCHITECTURE}/cmake/Torch lib/cmake/Torch share/cmake/Torch)
      if(TROUPE_TORCH_CONFIG)
        get_filename_component(_troupe_torch_dir "${TROUPE_TORCH_CONFIG}" DIRECTORY)
        if(EXISTS "${_troupe_torch_dir}/../Caffe2/Caffe2Config.cmake" OR DEFINED Caffe2_DIR)
          find_package(Torch QUIET CONFIG HINTS "${_troupe_torch_dir}")
        endif()
      endif()
      if(Torch_FOUND OR TORCH_FOUND)
        add_library(troupe_libtorch INTERFACE IMPORTED)
        set_property(TARGET troupe_libtorch PROPERTY INTERFACE_LINK_LIBRARIES "${TORCH_LIBRARIES}")
        set_property(TARGET troupe_libtorch PROPERTY INTERFACE_COMPILE_OPTIONS ${TORCH_CXX_FLAGS})
        set(TROUPE_LIBTORCH_FOUND TRUE)
        set(TROUPE_LIBTORCH_HOW "TorchConfig.cmake in ${Torch_DIR}")
      else()
        find_path(TROUPE_TORCH_API_INCLUDE_DIR torch/torch.h
          PATH_SUFFIXES torch/csrc/api/include)
        find_path(TROUPE_ATEN_INCLUDE_DIR ATen/ATen.h)
        find_library(TROUPE_TORCH_LIBRARY torch)
        find_library(TROUPE_TORCH_CPU_LIBRARY torch_cpu)
        find_library(TROUPE_C10_LIBRARY c10)
        if(TROUPE_TORCH_API_INCLUDE_DIR AND TROUPE_ATEN_INCLUDE_DIR AND TROUPE_TORCH_LIBRARY
           AND TROUPE_TORCH_CPU_LIBRARY AND TROUPE_C10_LIBRARY)
          add_library(troupe_libtorch INTERFACE IMPORTED)
          # libtorch_cpu registers its operators from static initialisers: keep it --no-as-needed.
          set_property(TARGET troupe_libtorch PROPERTY INTERFACE_LINK_LIBRARIES
            "${TROUPE_TORCH_LIBRARY}"
            "-Wl,--no-as-needed,${TROUPE_TORCH_CPU_LIBRARY},--as-needed"
            "${TROUPE_C10_LIBRARY}" Threads::Threads)
          set_property(TARGET troupe_libtorch PROPERTY INTERFACE_SYSTEM_INCLUDE_DIRECTORIES
            "${TROUPE_TORCH_API_INCLUDE_DIR}" "${TROUPE_ATEN_INCLUDE_DIR}")
          set_property(TARGET troupe_libtorch PROPERTY INTERFACE_INCLUDE_DIRECTORIES
            "${TROUPE_TORCH_API_INCLUDE_DIR}" "${TROUPE_ATEN_INCLUDE_DIR}")
          set_property(TARGET troupe_libtorch PROPERTY INTERFACE_COMPILE_OPTIONS
            "-D_GLIBCXX_USE_CXX11_ABI=1")
          set(TROUPE_LIBTORCH_FOUND TRUE)
          set(TROUPE_LIBTORCH_HOW "headers ${TROUPE_TORCH_API_INCLUDE_DIR}, ${TROUPE_TORCH_LIBRARY}")
        endif()
      endif()
    endif()
    if(TROUPE_LIBTORCH_FOUND)
      message(STATUS "Troupe: libtorch found (${TROUPE_LIBTORCH_HOW}); comparisons enabled")
    else()
      message(STATUS "Troupe: libtorch not found; benchmarks build without the libtorch comparison")
    endif()
  endif()
endmacro()

function(troupe_target_use_libtorch target)
  if(TARGET troupe_libtorch)
    target_link_libraries(${target} PRIVATE troupe_libtorch)
    target_compile_definitions(${target} PRIVATE TROUPE_HAVE_LIBTORCH=1)
  endif()
endfunction()

# True (in <out>) when <source> mentions libtorch: `TROUPE_HAVE_LIBTORCH` or `<torch/`.
function(troupe_source_wants_libtorch source out)
  file(READ "${source}" _text)
  if(_text MATCHES "TROUPE_HAVE_LIBTORCH" OR _text MATCHES "<torch/")
    set(${out} TRUE PARENT_SCOPE)
  else()
    set(${out} FALSE PARENT_SCOPE)
  endif()
endfunction()
