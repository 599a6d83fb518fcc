# ctest example_train_digits_resume: a run stopped after epoch STOP and resumed from its checkpoint
# ends with the same parameters, bit for bit, as the same run done in one go.
#   cmake -DEXE=<train_digits> -DWORK_DIR=<dir> -DEPOCHS=N -DSTOP=K -P resume_check.cmake
file(MAKE_DIRECTORY "${WORK_DIR}")
set(common --epochs ${EPOCHS} --min-accuracy 0)

function(run_and_checksum out_var)
  execute_process(COMMAND "${EXE}" ${common} ${ARGN}
    WORKING_DIRECTORY "${WORK_DIR}" RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message("${out}${err}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "train_digits ${common} ${ARGN} exited with ${rc}")
  endif()
  string(REGEX MATCH "parameter checksum ([0-9a-f]+)" _ "${out}")
  if(NOT CMAKE_MATCH_1)
    message(FATAL_ERROR "no parameter checksum in the output of train_digits ${ARGN}")
  endif()
  set(${out_var} "${CMAKE_MATCH_1}" PARENT_SCOPE)
endfunction()

run_and_checksum(whole --checkpoint whole.ckpt)
run_and_checksum(first --checkpoint split.ckpt --stop-after ${STOP})
run_and_checksum(resumed --checkpoint split.ckpt --resume)
if(NOT whole STREQUAL resumed)
  message(FATAL_ERROR "resumed run ends at checksum ${resumed}, the uninterrupted run at ${whole}")
endif()
if(first STREQUAL whole)
  message(FATAL_ERROR "the stopped run already has the final checksum: the check proves nothing")
endif()
message("resume check: both runs end at checksum ${whole}")
