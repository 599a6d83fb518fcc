# ctest comm_mpi_dead_rank: under mpirun -np 2, rank 1 dies (SIGKILL) before a collective that rank 0
# waits in. The job must end within LIMIT seconds with a non-zero status and a message naming the dead
# rank; nothing may hang.   cmake -DMPIRUN=... -DEXE=... -DLIMIT=60 -P dead_rank_check.cmake
string(TIMESTAMP t0 "%s")
execute_process(
  COMMAND ${MPIRUN} --allow-run-as-root --oversubscribe -np 2 "${EXE}" --kill-rank 1
  TIMEOUT ${LIMIT} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
string(TIMESTAMP t1 "%s")
math(EXPR took "${t1} - ${t0}")
message("${out}${err}")
message("mpirun exited with '${rc}' after ${took} s")
if(rc MATCHES "timeout|Process terminated due to timeout")
  message(FATAL_ERROR "the job hung: still running after ${LIMIT} s")
endif()
if(rc EQUAL 0)
  message(FATAL_ERROR "the job succeeded although rank 1 died")
endif()
if(NOT "${out}${err}" MATCHES "rank 1")
  message(FATAL_ERROR "no message names rank 1")
endif()
if(NOT "${out}${err}" MATCHES "signal 9|Killed|killed")
  message(FATAL_ERROR "no message says the rank was killed")
endif()
