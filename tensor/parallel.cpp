// Thread pool for CPU ops (parallel.h). Idle workers block on a condition variable rather than spin:
// OpenBLAS keeps its own threads, and spinning OpenMP workers (libgomp's default) starve them between a
// parallel loop and the GEMM that follows it (measured: conv2d 7x slower on 2 cores).
//
// A parallel region is a Region on its caller's stack. The caller lends it up to tasks - 1 idle workers
// (each worker has its own condition variable, so only those wake), claims chunks itself, then takes
// back the lent workers that have not woken yet and waits for the others to leave the region. Chunks
// are claimed from one atomic counter, so which thread runs a chunk never changes what the chunk is.
#include "parallel.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

// OpenBLAS's thread-count calls, weak so that any other CBLAS links too (they are then null).
#if defined(__GNUC__) && defined(__ELF__)
extern "C" {
void openblas_set_num_threads(int num_threads) __attribute__((weak));
int openblas_get_num_threads(void) __attribute__((weak));
}
#define TROUPE_OPENBLAS_WEAK 1
#endif

namespace troupe {

namespace {

thread_local bool t_in_parallel = false;
thread_local int t_num_threads = 0;  // this thread's NumThreadsGuard count; 0: the process-wide one

// OMP_NUM_THREADS when set to a positive number (its first value, as PyTorch reads it), else the cores.
int default_threads() {
  if (const char* env = std::getenv("OMP_NUM_THREADS")) {
    char* rest = nullptr;
    const long n = std::strtol(env, &rest, 10);
    if (rest != env && n > 0 && n <= 4096) return static_cast<int>(n);
  }
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

std::atomic<int>& process_threads() {
  static std::atomic<int> n{default_threads()};
  return n;
}

void check_count(const char* fn, int n) {
  if (n < 1)
    throw std::invalid_argument(std::string("[") + fn + "] expected a positive number of threads, got " +
                                std::to_string(n));
}

// One parallel region: chunks [begin + t*chunk, ...) for t in [0, ntasks); chunk 0 is the caller's.
struct Region {
  const std::function<void(int64_t, int64_t)>* f = nullptr;
  int64_t begin = 0, end = 0, chunk = 1, ntasks = 0;
  std::atomic<int64_t> next{1};
  std::mutex mu;
  std::condition_variable left;  // signalled when `lent` drops to 0
  int lent = 0;                  // workers lent and not yet gone (guarded by mu)
  std::exception_ptr error;      // the first chunk's exception (guarded by mu)

  // Runs chunk `first`, then claims further chunks until none remain.
  void work(int64_t first) {
    for (int64_t t = first; t < ntasks; t = next.fetch_add(1)) {
      const int64_t b = begin + t * chunk, e = std::min(end, b + chunk);
      if (b >= e) continue;
      try {
        (*f)(b, e);
      } catch (...) {
        std::lock_guard<std::mutex> g(mu);
        if (!error) error = std::current_exception();
      }
    }
  }
};

struct Worker {
  std::condition_variable wake;
  Region* job = nullptr;  // guarded by Pool::mu_
  bool started = false;   // woke and took `job` (guarded by Pool::mu_)
};

class Pool {
 public:
  static Pool& get() {
    static Pool* p = new Pool();  // never destroyed: workers may outlive static destruction order
    return *p;
  }

  // Runs f(b, e) over `tasks` chunks of [begin, end) on the caller and up to tasks - 1 idle workers.
  void run(int64_t begin, int64_t end, int64_t tasks, const std::function<void(int64_t, int64_t)>& f) {
    Region r;
    r.f = &f;
    r.begin = begin;
    r.end = end;
    r.ntasks = tasks;
    r.chunk = (end - begin + tasks - 1) / tasks;
    std::vector<Worker*> lent;
    lent.reserve(static_cast<size_t>(tasks - 1));
    {
      std::lock_guard<std::mutex> g(mu_);
      const int64_t want = tasks - 1;
      const int64_t cap = std::max<int64_t>(process_threads().load(std::memory_order_relaxed), tasks) - 1;
      while (static_cast<int64_t>(idle_.size()) < want && workers_ < cap) spawn();
      while (static_cast<int64_t>(lent.size()) < want && !idle_.empty()) {
        Worker* w = idle_.back();
        idle_.pop_back();
        w->job = &r;
        w->started = false;
        lent.push_back(w);
      }
      r.lent = static_cast<int>(lent.size());  // before any lent worker can see r (it takes mu_ first)
    }
    for (Worker* w : lent) w->wake.notify_one();

    const bool outer = t_in_parallel;
    t_in_parallel = true;
    r.work(0);
    t_in_parallel = outer;

    if (!lent.empty()) {
      int taken_back = 0;
      {
        std::lock_guard<std::mutex> g(mu_);
        for (Worker* w : lent) {
          if (w->job == &r && !w->started) {  // still asleep: every chunk is done, it has nothing to do
            w->job = nullptr;
            idle_.push_back(w);
            ++taken_back;
          }
        }
      }
      std::unique_lock<std::mutex> lk(r.mu);
      r.lent -= taken_back;
      r.left.wait(lk, [&] { return r.lent == 0; });
    }
    if (r.error) std::rethrow_exception(r.error);
  }

 private:
  Pool() = default;

  // Adds an idle worker (mu_ held).
  void spawn() {
    auto* w = new Worker();  // lives as long as the process, like its thread
    ++workers_;
    idle_.push_back(w);
    std::thread([this, w] { worker_main(w); }).detach();
  }

  void worker_main(Worker* w) {
    t_in_parallel = true;
    std::unique_lock<std::mutex> lk(mu_);
    for (;;) {
      w->wake.wait(lk, [&] { return w->job != nullptr; });
      Region* r = w->job;
      w->started = true;
      lk.unlock();
      r->work(r->next.fetch_add(1));
      {
        std::lock_guard<std::mutex> g(r->mu);  // after this block r may be gone
        if (--r->lent == 0) r->left.notify_one();
      }
      lk.lock();
      w->job = nullptr;
      w->started = false;
      idle_.push_back(w);
    }
  }

  std::mutex mu_;
  std::vector<Worker*> idle_;
  int64_t workers_ = 0;
};

std::mutex g_blas_mu;
int g_blas_holders = 0;  // live SerialBlasGuards
int g_blas_saved = 0;    // OpenBLAS's count when the first one began

}  // namespace

void set_num_threads(int n) {
  check_count("set_num_threads", n);
  if (t_num_threads > 0)
    t_num_threads = n;  // inside a NumThreadsGuard: this thread's count
  else
    process_threads().store(n, std::memory_order_relaxed);
}

int get_num_threads() { return t_num_threads > 0 ? t_num_threads : process_threads().load(std::memory_order_relaxed); }

NumThreadsGuard::NumThreadsGuard(int n) : prev_(t_num_threads) {
  check_count("NumThreadsGuard", n);
  t_num_threads = n;
}

NumThreadsGuard::~NumThreadsGuard() { t_num_threads = prev_; }

SerialBlasGuard::SerialBlasGuard() {
#ifdef TROUPE_OPENBLAS_WEAK
  std::lock_guard<std::mutex> g(g_blas_mu);
  if (g_blas_holders++ == 0 && openblas_get_num_threads && openblas_set_num_threads) {
    g_blas_saved = openblas_get_num_threads();
    if (g_blas_saved != 1) openblas_set_num_threads(1);
  }
#endif
}

SerialBlasGuard::~SerialBlasGuard() {
#ifdef TROUPE_OPENBLAS_WEAK
  std::lock_guard<std::mutex> g(g_blas_mu);
  if (--g_blas_holders == 0 && openblas_set_num_threads && g_blas_saved > 1) openblas_set_num_threads(g_blas_saved);
#endif
}

namespace detail {

bool in_parallel_region() { return t_in_parallel; }

int blas_num_threads() {
#ifdef TROUPE_OPENBLAS_WEAK
  if (openblas_get_num_threads) return openblas_get_num_threads();
#endif
  return 0;
}

void parallel_run(int64_t begin, int64_t end, int64_t grain, const std::function<void(int64_t, int64_t)>& f) {
  const int64_t n = end - begin;
  const int64_t tasks = std::min<int64_t>(get_num_threads(), (n + grain - 1) / grain);
  if (tasks <= 1) {
    f(begin, end);
    return;
  }
  Pool::get().run(begin, end, tasks, f);
}

}  // namespace detail
}  // namespace troupe
