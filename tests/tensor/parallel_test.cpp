// tensor/parallel.h: the process-wide and per-thread thread counts (NumThreadsGuard), parallel regions
// of several threads at once, nesting, errors, and SerialBlasGuard.
#include <troupe/tensor/ops.h>
#include <troupe/tensor/parallel.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

using namespace troupe;

namespace {

// Restores the process-wide thread count a test changed.
struct ProcessThreads {
  int saved = get_num_threads();
  explicit ProcessThreads(int n) { set_num_threads(n); }
  ~ProcessThreads() { set_num_threads(saved); }
};

// `count` arrivals, each waiting (30 s at most, so a broken pool fails instead of hanging) for all.
class Latch {
 public:
  explicit Latch(int count) : count_(count) {}
  // Arrives and returns whether every party arrived in time.
  bool arrive_and_wait() {
    std::unique_lock<std::mutex> lk(mu_);
    if (++arrived_ == count_) cv_.notify_all();
    return cv_.wait_for(lk, std::chrono::seconds(30), [&] { return arrived_ >= count_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int count_, arrived_ = 0;
};

// Number of chunks parallel_for makes of [0, 1000) with grain 1 on the calling thread.
int chunks_here() {
  std::atomic<int> calls{0};
  parallel_for(0, 1000, 1, [&](int64_t, int64_t) { calls.fetch_add(1); });
  return calls.load();
}

TEST(Parallel, SetNumThreadsIsProcessWide) {
  ProcessThreads p(3);
  EXPECT_EQ(get_num_threads(), 3);
  EXPECT_EQ(chunks_here(), 3);
  int seen = 0, chunks = 0;
  std::thread([&] {
    seen = get_num_threads();
    chunks = chunks_here();
  }).join();
  EXPECT_EQ(seen, 3);
  EXPECT_EQ(chunks, 3);
}

// Every test restores the count it changed, so this is the default: OMP_NUM_THREADS where it is set.
TEST(Parallel, DefaultIsOmpNumThreadsWhenSet) {
  const char* env = std::getenv("OMP_NUM_THREADS");
  if (!env || std::atoi(env) < 1) GTEST_SKIP() << "OMP_NUM_THREADS is not set";
  EXPECT_EQ(get_num_threads(), std::atoi(env));
}

TEST(Parallel, GuardIsSeenOnItsThreadOnly) {
  ProcessThreads p(4);
  std::atomic<int> guarded{0}, guarded_chunks{0}, plain{0};
  Latch set(2), checked(2);
  std::thread a([&] {
    NumThreadsGuard g(3);
    set.arrive_and_wait();  // b reads its count while a's guard is live
    guarded = get_num_threads();
    guarded_chunks = chunks_here();
    checked.arrive_and_wait();
  });
  std::thread b([&] {
    set.arrive_and_wait();
    plain = get_num_threads();
    checked.arrive_and_wait();
  });
  a.join();
  b.join();
  EXPECT_EQ(guarded.load(), 3);
  EXPECT_EQ(guarded_chunks.load(), 3);
  EXPECT_EQ(plain.load(), 4);
  EXPECT_EQ(get_num_threads(), 4);
}

TEST(Parallel, GuardOfOneRunsOnTheCallingThread) {
  ProcessThreads p(4);
  NumThreadsGuard g(1);
  std::set<std::thread::id> ids;
  std::mutex mu;
  int calls = 0;
  parallel_for(0, 1 << 20, 1, [&](int64_t b, int64_t e) {
    std::lock_guard<std::mutex> lk(mu);
    ids.insert(std::this_thread::get_id());
    ++calls;
    EXPECT_EQ(b, 0);
    EXPECT_EQ(e, 1 << 20);
  });
  EXPECT_EQ(calls, 1);
  ASSERT_EQ(ids.size(), 1u);
  EXPECT_EQ(*ids.begin(), std::this_thread::get_id());
}

TEST(Parallel, NestedGuardsRestoreTheEnclosingCount) {
  ProcessThreads p(5);
  {
    NumThreadsGuard outer(4);
    EXPECT_EQ(get_num_threads(), 4);
    {
      NumThreadsGuard inner(2);
      EXPECT_EQ(get_num_threads(), 2);
      EXPECT_EQ(chunks_here(), 2);
    }
    EXPECT_EQ(get_num_threads(), 4);
    EXPECT_EQ(chunks_here(), 4);
  }
  EXPECT_EQ(get_num_threads(), 5);
}

TEST(Parallel, SetNumThreadsInsideAGuardChangesThisThreadOnly) {
  ProcessThreads p(4);
  {
    NumThreadsGuard g(2);
    set_num_threads(3);
    EXPECT_EQ(get_num_threads(), 3);
    int other = 0;
    std::thread([&] { other = get_num_threads(); }).join();
    EXPECT_EQ(other, 4);
  }
  EXPECT_EQ(get_num_threads(), 4);
}

TEST(Parallel, BadCountsNameTheFunctionAndValue) {
  try {
    NumThreadsGuard g(0);
    FAIL() << "NumThreadsGuard(0) did not throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("[NumThreadsGuard]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("got 0"), std::string::npos) << e.what();
  }
  const int before = get_num_threads();
  EXPECT_THROW(set_num_threads(-2), std::invalid_argument);
  EXPECT_EQ(get_num_threads(), before);
}

// Two threads' regions run at the same time: every chunk of both waits for all four chunks to start, which
// only happens if neither region waits for the other (budgets 2 + 2 within the process-wide 4).
TEST(Parallel, RegionsOfTwoThreadsRunAtOnce) {
  ProcessThreads p(4);
  Latch all(4);
  std::atomic<int> met{0};
  auto region = [&] {
    NumThreadsGuard g(2);
    parallel_for(0, 2, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i)
        if (all.arrive_and_wait()) met.fetch_add(1);
    });
  };
  std::thread a(region), b(region);
  a.join();
  b.join();
  EXPECT_EQ(met.load(), 4);
}

// Four threads with assorted budgets run ops concurrently many times; every result is exact.
TEST(Parallel, ConcurrentRegionsGiveCorrectResults) {
  ProcessThreads p(4);
  const int64_t n = 1 << 18;
  std::vector<std::thread> threads;
  std::vector<int> wrong(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      NumThreadsGuard g(1 + t % 3);
      for (int rep = 0; rep < 20; ++rep) {
        std::vector<int64_t> out(static_cast<size_t>(n), -1);
        parallel_for(0, n, 1000, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) out[static_cast<size_t>(i)] = i * (t + 1);
        });
        for (int64_t i = 0; i < n; ++i)
          if (out[static_cast<size_t>(i)] != i * (t + 1)) ++wrong[t];
        // arange(n) * (t + 1), summed in float64: (t + 1) * n * (n - 1) / 2 exactly.
        const double s = (arange(n, kFloat64) * static_cast<double>(t + 1)).sum().item<double>();
        if (s != static_cast<double>(t + 1) * static_cast<double>(n) * static_cast<double>(n - 1) / 2) ++wrong[t];
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(wrong[t], 0) << "thread " << t;
}

// parallel_for inside a chunk runs serially on the thread running that chunk.
TEST(Parallel, NestedParallelForRunsSerially) {
  ProcessThreads p(3);
  std::atomic<int> inner_calls{0}, wrong_thread{0};
  std::atomic<int64_t> total{0};
  parallel_for(0, 3, 1, [&](int64_t b, int64_t e) {
    const auto me = std::this_thread::get_id();
    parallel_for(0, 1000, 1, [&](int64_t ib, int64_t ie) {
      inner_calls.fetch_add(1);
      if (std::this_thread::get_id() != me) wrong_thread.fetch_add(1);
      total.fetch_add((ie - ib) * (e - b));
    });
  });
  EXPECT_EQ(inner_calls.load(), 3);
  EXPECT_EQ(wrong_thread.load(), 0);
  EXPECT_EQ(total.load(), 3000);
}

TEST(Parallel, ChunkExceptionReachesTheCallerAndThePoolGoesOn) {
  ProcessThreads p(4);
  EXPECT_THROW(parallel_for(0, 4, 1,
                            [&](int64_t b, int64_t) {
                              if (b == 2) throw std::runtime_error("chunk 2");
                            }),
               std::runtime_error);
  EXPECT_EQ(chunks_here(), 4);
}

TEST(Parallel, SerialBlasGuardNestsAndRestores) {
  const int before = detail::blas_num_threads();
  if (before == 0) GTEST_SKIP() << "the BLAS is not OpenBLAS";
  {
    SerialBlasGuard g;
    EXPECT_EQ(detail::blas_num_threads(), 1);
    {
      SerialBlasGuard inner;
      EXPECT_EQ(detail::blas_num_threads(), 1);
    }
    EXPECT_EQ(detail::blas_num_threads(), 1);  // the outer guard still holds
    // A GEMM still computes: (64, 64) of ones @ itself = 64 everywhere.
    Tensor c = matmul(ones({64, 64}), ones({64, 64}));
    EXPECT_EQ(c.min().item<float>(), 64.0f);
    EXPECT_EQ(c.max().item<float>(), 64.0f);
  }
  EXPECT_EQ(detail::blas_num_threads(), before);
}

}  // namespace
