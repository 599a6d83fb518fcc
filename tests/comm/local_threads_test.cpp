// run_local's compute budget: each rank thread gets max(1, C / n) of the caller's C threads, its regions
// run alongside the other ranks', BLAS is serial on each rank while n > 1, and all of it is undone when
// run_local returns or throws. Also the local queue's hand-off-free paths: a waiting thread runs the
// queued ops up to its own, in issue order; waits with a timeout leave them to the worker.
#include <troupe/comm/comm.h>
#include <troupe/tensor/ops.h>
#include <troupe/tensor/parallel.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

using namespace troupe;
using namespace troupe::comm;

namespace {

// Restores the process-wide thread count a test changed.
struct ProcessThreads {
  int saved = get_num_threads();
  explicit ProcessThreads(int n) { set_num_threads(n); }
  ~ProcessThreads() { set_num_threads(saved); }
};

TEST(LocalThreads, EachRankGetsItsShareOfTheCallersThreads) {
  ProcessThreads p(4);
  // (n, expected per-rank count): 4 / n, never below 1.
  for (auto [n, want] : std::vector<std::pair<int, int>>{{1, 4}, {2, 2}, {3, 1}, {4, 1}, {6, 1}}) {
    std::vector<int> seen(static_cast<size_t>(n), 0);
    run_local(n, [&](ProcessGroupPtr pg) { seen[static_cast<size_t>(pg->rank())] = get_num_threads(); });
    for (int r = 0; r < n; ++r) EXPECT_EQ(seen[static_cast<size_t>(r)], want) << "n " << n << " rank " << r;
    EXPECT_EQ(get_num_threads(), 4) << "after run_local(" << n << ")";
  }
}

TEST(LocalThreads, SetNumThreadsInARankChangesThatRankOnly) {
  ProcessThreads p(4);
  std::vector<int> seen(2, 0);
  run_local(2, [&](ProcessGroupPtr pg) {
    if (pg->rank() == 0) set_num_threads(3);
    pg->barrier();  // rank 1 reads its count after rank 0 changed its own
    seen[static_cast<size_t>(pg->rank())] = get_num_threads();
  });
  EXPECT_EQ(seen[0], 3);
  EXPECT_EQ(seen[1], 2);
  EXPECT_EQ(get_num_threads(), 4);
}

TEST(LocalThreads, BlasIsSerialWhileRanksComputeAndRestoredAfter) {
  const int before = troupe::detail::blas_num_threads();
  if (before == 0) GTEST_SKIP() << "the BLAS is not OpenBLAS";
  std::vector<int> seen(3, -1);
  run_local(3, [&](ProcessGroupPtr pg) { seen[static_cast<size_t>(pg->rank())] = troupe::detail::blas_num_threads(); });
  for (int r = 0; r < 3; ++r) EXPECT_EQ(seen[static_cast<size_t>(r)], 1) << "rank " << r;
  EXPECT_EQ(troupe::detail::blas_num_threads(), before);
  int alone = -1;
  run_local(1, [&](ProcessGroupPtr) { alone = troupe::detail::blas_num_threads(); });
  EXPECT_EQ(alone, before);  // one rank computes alone: BLAS keeps its threads
}

TEST(LocalThreads, SettingsAreRestoredWhenARankThrows) {
  ProcessThreads p(4);
  const int blas = troupe::detail::blas_num_threads();
  EXPECT_THROW(run_local(2,
                         [&](ProcessGroupPtr pg) {
                           if (pg->rank() == 1) throw std::runtime_error("rank 1 fails");
                           Tensor t = ones({4});
                           pg->all_reduce(t);  // fails with CommError once rank 1 threw
                         }),
               std::runtime_error);
  EXPECT_EQ(get_num_threads(), 4);
  EXPECT_EQ(troupe::detail::blas_num_threads(), blas);
}

TEST(LocalThreads, NestedRunLocalSplitsTheRanksShare) {
  ProcessThreads p(4);
  const int blas = troupe::detail::blas_num_threads();
  std::vector<int> outer(2, 0), outer_after(2, 0), inner(4, 0), inner_blas(4, -1);
  run_local(2, [&](ProcessGroupPtr pg) {
    const int r = pg->rank();
    outer[static_cast<size_t>(r)] = get_num_threads();
    run_local(2, [&](ProcessGroupPtr sub) {
      inner[static_cast<size_t>(2 * r + sub->rank())] = get_num_threads();
      inner_blas[static_cast<size_t>(2 * r + sub->rank())] = troupe::detail::blas_num_threads();
    });
    outer_after[static_cast<size_t>(r)] = get_num_threads();
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(outer[static_cast<size_t>(r)], 2);
    EXPECT_EQ(outer_after[static_cast<size_t>(r)], 2);
  }
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(inner[static_cast<size_t>(i)], 1) << "inner rank " << i;
    if (blas > 0) {
      EXPECT_EQ(inner_blas[static_cast<size_t>(i)], 1) << "inner rank " << i;
    }
  }
  EXPECT_EQ(get_num_threads(), 4);
  EXPECT_EQ(troupe::detail::blas_num_threads(), blas);
}

// With 4 threads and 2 ranks, both ranks' 2-chunk regions run at once: every chunk waits (30 s at most)
// for all four chunks to start, which a pool running one region at a time never lets happen.
TEST(LocalThreads, RanksParallelRegionsRunAtOnce) {
  ProcessThreads p(4);
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0;
  std::atomic<int> met{0};
  run_local(2, [&](ProcessGroupPtr) {
    parallel_for(0, 2, 1, [&](int64_t, int64_t) {
      std::unique_lock<std::mutex> lk(mu);
      if (++arrived == 4) cv.notify_all();
      if (cv.wait_for(lk, std::chrono::seconds(30), [&] { return arrived >= 4; })) met.fetch_add(1);
    });
  });
  EXPECT_EQ(met.load(), 4);
}

// Every rank runs GEMMs and pooled ops side by side, then all-reduces: closed forms in rank and size.
TEST(LocalThreads, RanksComputeCorrectlySideBySide) {
  for (int n : {2, 3}) {
    std::vector<double> got(static_cast<size_t>(n), 0);
    run_local(n, [&](ProcessGroupPtr pg) {
      const double v = pg->rank() + 1;
      double acc = 0;
      for (int rep = 0; rep < 10; ++rep) {
        // (128, 256) of v @ (256, 64) of ones: every entry 256 v; summed: 128 * 64 * 256 v.
        Tensor c = matmul(full({128, 256}, v, kFloat64), ones({256, 64}, kFloat64));
        acc += c.sum().item<double>();
        // A large elementwise op (parallel_for): 2 v over 2^18 elements.
        acc += (full({1 << 18}, v, kFloat64) * 2.0).sum().item<double>();
      }
      Tensor t = tensor(std::vector<double>{acc}, kFloat64);
      pg->all_reduce(t);
      got[static_cast<size_t>(pg->rank())] = t.item<double>();
    });
    const double ranks = n * (n + 1) / 2.0;  // sum of v over the ranks
    const double want = 10 * ranks * (128.0 * 64 * 256 + 2.0 * (1 << 18));
    for (int r = 0; r < n; ++r) EXPECT_EQ(got[static_cast<size_t>(r)], want) << "n " << n << " rank " << r;
  }
}

// Async ops queued, then a synchronous one: its thread runs the queue in issue order up to its op; the
// async ones are then complete too. Sums are closed forms: sum over ranks of (r + 1) * k.
TEST(LocalQueue, SyncCallRunsTheQueuedOpsInOrder) {
  for (int n : {2, 3}) {
    std::vector<int> wrong(static_cast<size_t>(n), 0);
    run_local(n, [&](ProcessGroupPtr pg) {
      const double v = pg->rank() + 1, ranks = n * (n + 1) / 2.0;
      for (int rep = 0; rep < 50; ++rep) {
        std::vector<Tensor> ts;
        std::vector<WorkPtr> works;
        for (int k = 1; k <= 3; ++k) {
          ts.push_back(full({5}, v * k, kFloat64));
          works.push_back(pg->all_reduce_async(ts.back()));
        }
        Tensor last = full({5}, v * 4, kFloat64);
        pg->all_reduce(last);
        if (last.min().item<double>() != ranks * 4) ++wrong[static_cast<size_t>(pg->rank())];
        for (int k = 1; k <= 3; ++k) {
          works[static_cast<size_t>(k - 1)]->wait();
          if (ts[static_cast<size_t>(k - 1)].max().item<double>() != ranks * k) ++wrong[static_cast<size_t>(pg->rank())];
        }
      }
      EXPECT_EQ(pg->sequence_number(), 50u * 4);
    });
    for (int r = 0; r < n; ++r) EXPECT_EQ(wrong[static_cast<size_t>(r)], 0) << "n " << n << " rank " << r;
  }
}

// A wait with a timeout does not run the op itself; the worker does, and the result is the same.
TEST(LocalQueue, TimedWaitLeavesTheOpToTheWorker) {
  std::vector<double> got(2, 0);
  run_local(2, [&](ProcessGroupPtr pg) {
    Tensor t = full({3}, pg->rank() + 1.0, kFloat64);
    pg->all_reduce_async(t)->wait(std::chrono::seconds(60));
    got[static_cast<size_t>(pg->rank())] = t.sum().item<double>();
  });
  EXPECT_EQ(got[0], 9.0);  // (1 + 2) * 3 elements
  EXPECT_EQ(got[1], 9.0);
}

// An op issued as a synchronous call (queued without waking the worker) but waited for with a timeout,
// or polled with is_completed, still runs: the worker is woken for it.
TEST(LocalQueue, SyncIssuedOpWaitedWithATimeoutOrPolledRuns) {
  std::vector<double> got(4, 0);
  run_local(2, [&](ProcessGroupPtr pg) {
    const int r = pg->rank();
    Tensor a = full({2}, r + 1.0, kFloat64), b = full({2}, 10.0 * (r + 1), kFloat64);
    WorkPtr wa, wb;
    {
      comm::detail::SyncCall sync;
      wa = pg->all_reduce_async(a);
    }
    wa->wait(std::chrono::seconds(20));
    {
      comm::detail::SyncCall sync;
      wb = pg->all_reduce_async(b);
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!wb->is_completed() && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
    got[static_cast<size_t>(2 * r)] = a.max().item<double>();
    got[static_cast<size_t>(2 * r + 1)] = wb->is_completed() ? b.max().item<double>() : -1;
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(got[static_cast<size_t>(2 * r)], 3.0) << "rank " << r;       // 1 + 2
    EXPECT_EQ(got[static_cast<size_t>(2 * r + 1)], 30.0) << "rank " << r;  // 10 + 20
  }
}

// More ranks than cores, many small synchronous collectives: the ranks poll briefly (yielding the core)
// before they sleep, and every result is exact.
TEST(LocalQueue, ManySmallCollectivesOnMoreRanksThanCores) {
  const int n = 6;
  std::vector<int> wrong(n, 0);
  run_local(n, [&](ProcessGroupPtr pg) {
    for (int i = 0; i < 300; ++i) {
      Tensor t = full({4}, static_cast<double>(pg->rank() + i), kFloat64);
      pg->all_reduce(t);
      // sum over r of (r + i) = n (n - 1) / 2 + n i
      if (t.max().item<double>() != n * (n - 1) / 2.0 + n * i) ++wrong[static_cast<size_t>(pg->rank())];
      if (i % 50 == 0) pg->barrier();
    }
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(wrong[static_cast<size_t>(r)], 0) << "rank " << r;
}

}  // namespace
