// run_local: the n ranks of a local group as n threads of this process, each with its share of the
// caller's compute threads (a NumThreadsGuard; BLAS on the rank's own thread); a rank that throws aborts
// the others' collectives, and the first exception is rethrown naming its rank.
#include "local_internal.h"

#include <troupe/tensor/parallel.h>

#include <algorithm>
#include <stdexcept>
#include <thread>

namespace troupe::comm {

namespace {

using namespace local_impl;

std::string describe(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "an exception not derived from std::exception";
  }
}

// Rethrows e as the same standard exception family, its message prefixed with the rank.
[[noreturn]] void rethrow_named(int rank, const std::exception_ptr& e) {
  const std::string head = "[run_local] rank " + std::to_string(rank) + ": ";
  try {
    std::rethrow_exception(e);
  } catch (const CommError& x) {
    throw CommError(head + x.what());
  } catch (const std::invalid_argument& x) {
    throw std::invalid_argument(head + x.what());
  } catch (const std::out_of_range& x) {
    throw std::out_of_range(head + x.what());
  } catch (const std::logic_error& x) {
    throw std::logic_error(head + x.what());
  } catch (const std::exception& x) {
    throw std::runtime_error(head + x.what());
  } catch (...) {
    throw std::runtime_error(head + "threw an exception not derived from std::exception");
  }
}

}  // namespace

void run_local(int n, std::function<void(ProcessGroupPtr)> fn, GroupOptions options) {
  if (!fn) throw CommError("[run_local] fn is empty");
  auto groups = make_local_groups(n, std::move(options));
  auto universe = universe_of(*groups[0]);
  std::mutex mu;
  int first_rank = -1;
  std::exception_ptr first;
  // Each rank computes with its share of the caller's threads, as one process per rank would; BLAS runs
  // on the ranks' own threads while more than one computes (tensor/parallel.h).
  const int budget = std::max(1, get_num_threads() / n);
  std::optional<SerialBlasGuard> serial_blas;
  if (n > 1) serial_blas.emplace();
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      NumThreadsGuard threads_of_rank(budget);
      set_thread_world(groups[r]);
      try {
        fn(groups[r]);
      } catch (...) {
        auto e = std::current_exception();
        {
          std::lock_guard<std::mutex> g(mu);
          if (!first) {
            first = e;
            first_rank = r;
          }
        }
        universe->abort("rank " + std::to_string(r) + " failed: " + describe(e));
      }
      set_thread_world(nullptr);
    });
  }
  for (auto& t : threads) t.join();
  groups.clear();  // joins the ranks' workers
  if (first) rethrow_named(first_rank, first);
}

}  // namespace troupe::comm
