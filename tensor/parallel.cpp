// Thread control for CPU ops.
#include "parallel.h"

#include <omp.h>

#include <algorithm>
#include <stdexcept>
#include <string>

namespace troupe {

namespace {
int& num_threads() {
  static int n = std::max(1, omp_get_num_procs());
  return n;
}
}  // namespace

void set_num_threads(int n) {
  if (n < 1) throw std::invalid_argument("[set_num_threads] expected a positive number of threads, got " +
                                         std::to_string(n));
  num_threads() = n;
}

int get_num_threads() { return num_threads(); }

namespace detail {

bool in_parallel_region() { return omp_in_parallel(); }

void parallel_run(int64_t begin, int64_t end, int64_t grain, const std::function<void(int64_t, int64_t)>& f) {
  int64_t n = end - begin;
  int64_t tasks = std::min<int64_t>(num_threads(), (n + grain - 1) / grain);
  if (tasks <= 1) {
    f(begin, end);
    return;
  }
  int64_t chunk = (n + tasks - 1) / tasks;
  std::exception_ptr err;
#pragma omp parallel for num_threads(tasks) schedule(static, 1)
  for (int64_t t = 0; t < tasks; ++t) {
    int64_t b = begin + t * chunk, e = std::min(end, b + chunk);
    if (b >= e) continue;
    try {
      f(b, e);
    } catch (...) {
#pragma omp critical
      err = std::current_exception();
    }
  }
  if (err) std::rethrow_exception(err);
}

}  // namespace detail
}  // namespace troupe
