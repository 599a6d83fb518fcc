# ctest metrics_plot_cli: troupe-plot draws two runs into an SVG, and each bad input (a missing file, a
# malformed line, an unwritable output, an unknown tag, an unknown flag) ends it with status 2 and
# exactly one line on stderr that names the problem.
#   cmake -DEXE=<troupe-plot> -DWORK_DIR=<dir> -P plot_cli_check.cmake
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}/run_a" "${WORK_DIR}/run_b")
file(WRITE "${WORK_DIR}/run_a/metrics.jsonl"
  "{\"tag\":\"loss\",\"step\":0,\"value\":1,\"wall_time\":100,\"rank\":0}\n"
  "{\"tag\":\"loss\",\"step\":1,\"value\":0.5,\"wall_time\":101,\"rank\":0}\n")
file(WRITE "${WORK_DIR}/run_b/metrics.jsonl"
  "{\"tag\":\"loss\",\"step\":0,\"value\":2,\"wall_time\":200,\"rank\":0}\n"
  "{\"tag\":\"loss\",\"step\":1,\"value\":0.7,\"wall_time\":202,\"rank\":0}\n")
file(WRITE "${WORK_DIR}/bad.jsonl"
  "{\"tag\":\"loss\",\"step\":0,\"value\":1}\n"
  "{\"tag\":\"loss\",\"step\":1,\"value\":oops}\n")

execute_process(COMMAND "${EXE}" run_a/metrics.jsonl run_b/metrics.jsonl -o curves.svg
  WORKING_DIRECTORY "${WORK_DIR}" RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT out MATCHES "4 records of 2 runs -> curves.svg")
  message(FATAL_ERROR "troupe-plot on good input: status ${rc}, output '${out}${err}'")
endif()
file(READ "${WORK_DIR}/curves.svg" svg)
if(NOT svg MATCHES "^<svg" OR NOT svg MATCHES ">run_a<" OR NOT svg MATCHES ">run_b<")
  message(FATAL_ERROR "curves.svg lacks the svg element or the run names")
endif()

# expect_one_error(<regex> args...): status 2 and exactly one stderr line matching regex.
function(expect_one_error regex)
  execute_process(COMMAND "${EXE}" ${ARGN} WORKING_DIRECTORY "${WORK_DIR}"
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  string(REGEX MATCHALL "\n" newlines "${err}")
  list(LENGTH newlines n)
  if(NOT rc EQUAL 2 OR NOT n EQUAL 1 OR NOT err MATCHES "${regex}")
    message(FATAL_ERROR "troupe-plot ${ARGN}: status ${rc}, ${n} stderr lines, stderr '${err}' (want one line matching '${regex}')")
  endif()
  message(STATUS "troupe-plot ${ARGN}: ${err}")
endfunction()

expect_one_error("^troupe-plot: runs: File does not exist: missing.jsonl \\(see --help\\)\n$" missing.jsonl)
expect_one_error("^troupe-plot: The following argument was not expected: --colour \\(see --help\\)\n$"
  run_a/metrics.jsonl --colour)
expect_one_error("^troupe-plot: runs is required \\(see --help\\)\n$" -o c.svg)
expect_one_error("^troupe-plot: \\[metrics\\] bad.jsonl:2: expected a number for \"value\" at column 32\n$" bad.jsonl)
expect_one_error("^troupe-plot: \\[plot\\] cannot open 'no_such_dir/c.svg' for writing: No such file or directory\n$"
  run_a/metrics.jsonl -o no_such_dir/c.svg)
expect_one_error("^troupe-plot: \\[plot\\] no records of tag 'acc' \\(the runs have: loss\\)\n$"
  run_a/metrics.jsonl --tags acc)
expect_one_error("^troupe-plot: \\[plot\\] output 'c.pdf' must end in .svg or .png\n$" run_a/metrics.jsonl -o c.pdf)
message(STATUS "troupe-plot: good input drawn, every bad input one error line")
