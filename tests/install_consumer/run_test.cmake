# ctest install_consumer: cmake -P run_test.cmake with
#   TROUPE_BUILD_DIR, CONSUMER_SOURCE_DIR, WORK_DIR, CONFIG, GENERATOR, CXX_COMPILER.
foreach(var TROUPE_BUILD_DIR CONSUMER_SOURCE_DIR WORK_DIR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "run_test.cmake: -D${var}=... is required")
  endif()
endforeach()
if(NOT CONFIG)
  set(CONFIG Release)
endif()

set(prefix "${WORK_DIR}/prefix")
set(consumer_build "${WORK_DIR}/build")
file(REMOVE_RECURSE "${prefix}" "${consumer_build}")
file(MAKE_DIRECTORY "${WORK_DIR}")

function(run_step name)
  message(STATUS "[install_consumer] ${name}: ${ARGN}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "[install_consumer] ${name} failed (${rc})")
  endif()
endfunction()

run_step(install "${CMAKE_COMMAND}" --install "${TROUPE_BUILD_DIR}" --prefix "${prefix}" --config "${CONFIG}")

set(gen_args "")
if(GENERATOR)
  set(gen_args -G "${GENERATOR}")
endif()
set(cxx_args "")
if(CXX_COMPILER)
  set(cxx_args "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}")
endif()
run_step(configure "${CMAKE_COMMAND}" ${gen_args} -S "${CONSUMER_SOURCE_DIR}" -B "${consumer_build}"
  "-DCMAKE_PREFIX_PATH=${prefix}" "-DCMAKE_BUILD_TYPE=${CONFIG}" ${cxx_args})
run_step(build "${CMAKE_COMMAND}" --build "${consumer_build}" --config "${CONFIG}")

if(EXISTS "${consumer_build}/${CONFIG}/troupe_consumer")
  set(exe "${consumer_build}/${CONFIG}/troupe_consumer")
else()
  set(exe "${consumer_build}/troupe_consumer")
endif()
run_step(run "${exe}")
