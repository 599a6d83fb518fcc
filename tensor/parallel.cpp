// Thread pool for CPU ops. Idle workers block on a condition variable rather than spin: OpenBLAS keeps
// its own threads, and spinning OpenMP workers (libgomp's default) starve them between a parallel loop
// and the GEMM that follows it (measured: conv2d 7x slower on 2 cores).
#include "parallel.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace troupe {

namespace {

thread_local bool t_in_parallel = false;

class Pool {
 public:
  static Pool& get() {
    static Pool* p = new Pool();  // never destroyed: workers may outlive static destruction order
    return *p;
  }

  int threads() const { return threads_; }

  void set_threads(int n) {
    std::lock_guard<std::mutex> run_guard(run_mu_);
    threads_ = n;
    grow(n - 1);
  }

  // Runs f(b, e) over `tasks` chunks of [begin, end); the caller takes one chunk itself.
  void run(int64_t begin, int64_t end, int64_t tasks, const std::function<void(int64_t, int64_t)>& f) {
    std::lock_guard<std::mutex> run_guard(run_mu_);  // one parallel region at a time
    grow(static_cast<int>(tasks) - 1);
    int64_t chunk = (end - begin + tasks - 1) / tasks;
    {
      std::lock_guard<std::mutex> g(mu_);
      job_ = &f;
      begin_ = begin;
      end_ = end;
      chunk_ = chunk;
      next_.store(1);
      ntasks_ = tasks;
      pending_ = tasks;
      error_ = nullptr;
      ++generation_;
    }
    cv_.notify_all();
    work_loop(0);  // the caller does chunk 0, then helps with the rest
    std::unique_lock<std::mutex> lk(mu_);
    done_cv_.wait(lk, [&] { return pending_ == 0; });
    job_ = nullptr;
    if (error_) std::rethrow_exception(error_);
  }

 private:
  Pool() : threads_(std::max(1u, std::thread::hardware_concurrency())) {}

  void grow(int n) {
    while (static_cast<int>(workers_.size()) < n) {
      workers_.emplace_back([this] { worker(); });
      workers_.back().detach();
    }
  }

  // Executes chunk `first` (if >= 0) and then claims further chunks until none remain.
  void work_loop(int64_t first) {
    t_in_parallel = true;
    for (int64_t t = first; t < ntasks_; t = next_.fetch_add(1)) {
      int64_t b = begin_ + t * chunk_, e = std::min(end_, b + chunk_);
      if (b < e) {
        try {
          (*job_)(b, e);
        } catch (...) {
          std::lock_guard<std::mutex> g(mu_);
          if (!error_) error_ = std::current_exception();
        }
      }
      std::lock_guard<std::mutex> g(mu_);
      if (--pending_ == 0) done_cv_.notify_one();
    }
    t_in_parallel = false;
  }

  void worker() {
    uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return generation_ != seen && job_ != nullptr; });
        seen = generation_;
      }
      work_loop(next_.fetch_add(1));
    }
  }

  int threads_;
  std::vector<std::thread> workers_;
  std::mutex run_mu_;
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t begin_ = 0, end_ = 0, chunk_ = 1, pending_ = 0;
  std::atomic<int64_t> ntasks_{0};  // read by late workers of a finished job
  std::atomic<int64_t> next_{0};
  uint64_t generation_ = 0;
  std::exception_ptr error_;
};

}  // namespace

void set_num_threads(int n) {
  if (n < 1)
    throw std::invalid_argument("[set_num_threads] expected a positive number of threads, got " + std::to_string(n));
  Pool::get().set_threads(n);
}

int get_num_threads() { return Pool::get().threads(); }

namespace detail {

bool in_parallel_region() { return t_in_parallel; }

void parallel_run(int64_t begin, int64_t end, int64_t grain, const std::function<void(int64_t, int64_t)>& f) {
  int64_t n = end - begin;
  int64_t tasks = std::min<int64_t>(get_num_threads(), (n + grain - 1) / grain);
  if (tasks <= 1) {
    f(begin, end);
    return;
  }
  Pool::get().run(begin, end, tasks, f);
}

}  // namespace detail
}  // namespace troupe
