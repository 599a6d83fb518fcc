// parallel_for over an index range on troupe's CPU thread pool, with a grain below which it stays serial.
//
// Thread counts, as PyTorch's (torch.set_num_threads / get_num_threads), plus a per-thread budget:
//   - set_num_threads(n) sets the process-wide count (default: OMP_NUM_THREADS when set, else the
//     number of cores, as PyTorch's);
//   - NumThreadsGuard g(n) gives the calling thread its own count until g ends (nested guards restore
//     the enclosing one); set_num_threads inside a guard changes that thread's count only, so code
//     written for one process per rank behaves the same on a rank thread;
//   - get_num_threads() is the count parallel_for uses on the calling thread.
// comm::run_local gives each of its N rank threads max(1, C / N) threads, C being the caller's count, as
// PyTorch gives each DDP process its own intra-op threads.
//
// The pool runs several parallel regions at once on disjoint workers: a region of t tasks borrows up to
// t - 1 idle workers and its caller claims chunks too, so regions of different threads never wait on one
// another, and a region that finds no idle worker runs on its caller alone. Workers are created on
// demand, up to max(process-wide count, the region's count) - 1 in all, so budgets that add up to the
// process-wide count are always served in full. A thread whose count is 1 never touches the pool.
//
// BLAS: OpenBLAS keeps its own threads, one count for the whole process; concurrent multi-threaded GEMMs
// of the pthread build queue on one lock while their workers spin. SerialBlasGuard makes every BLAS call
// run on its calling thread while ranks compute side by side (run_local with N > 1 holds one).
#pragma once

#include <cstdint>
#include <functional>

namespace troupe {

/// Elements per task below which an op runs on one thread.
constexpr int64_t kGrainSize = 32768;

namespace detail {
void parallel_run(int64_t begin, int64_t end, int64_t grain, const std::function<void(int64_t, int64_t)>& f);
bool in_parallel_region();
/// OpenBLAS's thread count (openblas_get_num_threads), or 0 where the BLAS is not OpenBLAS.
int blas_num_threads();
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

/// Sets the process-wide thread count (torch.set_num_threads); inside a NumThreadsGuard, this thread's.
void set_num_threads(int n);
/// Threads parallel_for uses on the calling thread: its NumThreadsGuard's count, else the process-wide one.
int get_num_threads();

/// Gives the calling thread its own thread count for its lifetime, then restores the previous one.
class NumThreadsGuard {
 public:
  /// Sets this thread's count to n (n >= 1).
  explicit NumThreadsGuard(int n);
  ~NumThreadsGuard();
  NumThreadsGuard(const NumThreadsGuard&) = delete;
  NumThreadsGuard& operator=(const NumThreadsGuard&) = delete;

 private:
  int prev_;  // the enclosing override, 0 for none
};

/// While any SerialBlasGuard lives (on any thread), OpenBLAS runs each call on its calling thread; the
/// last one to end restores the count the first one found. No effect where the BLAS is not OpenBLAS.
class SerialBlasGuard {
 public:
  SerialBlasGuard();
  ~SerialBlasGuard();
  SerialBlasGuard(const SerialBlasGuard&) = delete;
  SerialBlasGuard& operator=(const SerialBlasGuard&) = delete;
};

}  // namespace troupe
