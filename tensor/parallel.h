// parallel_for over an index range on troupe's CPU thread pool, with a grain below which it stays serial.
#pragma once

#include <cstdint>
#include <functional>

namespace troupe {

/// Elements per task below which an op runs on one thread.
constexpr int64_t kGrainSize = 32768;

namespace detail {
void parallel_run(int64_t begin, int64_t end, int64_t grain, const std::function<void(int64_t, int64_t)>& f);
bool in_parallel_region();
}  // namespace detail

/// Calls f(b, e) on disjoint chunks covering [begin, end), in parallel when the range is large.
template <typename F>
inline void parallel_for(int64_t begin, int64_t end, int64_t grain, F&& f) {
  if (end <= begin) return;
  if (end - begin <= grain || detail::in_parallel_region()) {
    f(begin, end);
    return;
  }
  detail::parallel_run(begin, end, grain, std::function<void(int64_t, int64_t)>(f));
}

void set_num_threads(int n);
int get_num_threads();

}  // namespace troupe
