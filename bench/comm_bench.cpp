// all_reduce bus bandwidth of troupe's mpi group against raw MPI_Allreduce on the same buffers, 4 KB to
// 64 MB of float32: run as `mpirun --allow-run-as-root -np 2 comm_bench [--quick]`. Bus bandwidth =
// 2*(n-1)/n * bytes / time (nccl-tests' definition); the ratio troupe / raw should be >= 0.95.
// Samples alternate between the two, each the slowest rank's time of a timed loop; medians reported.
// A third column, MPI_Iallreduce polled with MPI_Test (what the group issues underneath), separates
// troupe's own overhead (queue, thread) from the cost of MPI's nonblocking collective.
// `--threshold`: the small all-reduce algorithm against MPI_Iallreduce by size (threshold_sweep below).
#define OMPI_SKIP_MPICXX 1  // the C API only
#include <mpi.h>

#include <troupe/tools/cli.h>
#include <troupe/comm/mpi.h>
#include <troupe/tensor/ops.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

using namespace troupe;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Seconds per call of f over `iters` calls, the slowest rank's.
template <typename F>
double time_loop(int iters, F f) {
  MPI_Barrier(MPI_COMM_WORLD);
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) f();
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
  MPI_Allreduce(MPI_IN_PLACE, &s, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return s;
}

}  // namespace

// --threshold: the two all-reduce algorithms of the mpi group side by side, 1 KB to 4 MB: troupe's
// recursive doubling (the small path, forced) and MPI_Iallreduce (the small path off), each through
// pg->all_reduce, alternating, medians of 9 samples; prints the size below which the first is faster
// (what the small all-reduce threshold, 64 KB by default, should be on this network).
int threshold_sweep(const comm::ProcessGroupPtr& pg, bool quick) {
  const int me = pg->rank();
  const int64_t saved = comm::detail::mpi_small_allreduce_bytes(*pg);
  const bool spans = comm::detail::mpi_group_spans_hosts(*pg);
  if (me == 0) {
    std::printf("all_reduce latency by algorithm, %d ranks, float32 SUM (us per call; ratio = Iallreduce / doubling)\n", pg->size());
    std::printf("%10s %14s %14s %8s\n", "bytes", "doubling", "Iallreduce", "ratio");
  }
  int64_t crossover = -1;
  for (int64_t bytes = 1024; bytes <= (int64_t{4} << 20); bytes *= 2) {
    Tensor t = zeros({bytes / 4});
    comm::detail::set_mpi_small_allreduce_bytes(0);
    double one = time_loop(3, [&] { pg->all_reduce(t); });
    int iters = std::max(3, std::min(5000, static_cast<int>((quick ? 0.005 : 0.03) / std::max(one, 1e-7))));
    MPI_Bcast(&iters, 1, MPI_INT, 0, MPI_COMM_WORLD);
    std::vector<double> doubling, nb;
    for (int s = 0; s < (quick ? 3 : 9); ++s) {
      auto run_d = [&] {
        comm::detail::set_mpi_small_allreduce_bytes(int64_t{1} << 40);
        doubling.push_back(time_loop(iters, [&] { pg->all_reduce(t); }));
      };
      auto run_nb = [&] {
        comm::detail::set_mpi_small_allreduce_bytes(0);
        nb.push_back(time_loop(iters, [&] { pg->all_reduce(t); }));
      };
      if (s % 2) { run_d(); run_nb(); } else { run_nb(); run_d(); }
    }
    const double d = median(doubling), i = median(nb);
    if (d < i) crossover = bytes;
    if (me == 0) {
      std::printf("%10lld %14.1f %14.1f %8.2f\n", static_cast<long long>(bytes), d * 1e6, i * 1e6, i / d);
      std::fflush(stdout);
    }
  }
  if (me == 0) {
    std::printf("recursive doubling faster up to %lld bytes (largest size where it won; threshold in use: %lld, the %s default)\n",
                static_cast<long long>(crossover), static_cast<long long>(saved), spans ? "across-hosts" : "one-host");
  }
  comm::detail::set_mpi_small_allreduce_bytes(-1);
  return 0;
}

int main(int argc, char** argv) {
  // --quick, --threshold and launch's flags (tools/cli.h); Google Benchmark's --benchmark_* (scripts/bench.sh
  // passes them to every bench) are ignored
  bool quick = false, threshold = false;
  troupe::cli::App app("comm_bench", "A benchmark against its peer (bench/README.md).");
  app.add_flag("--quick", quick, "few short samples");
  app.add_flag("--threshold", threshold, "the small all-reduce algorithm against MPI_Iallreduce by size");
  app.allow_extras();
  troupe::cli::parse(app, argc, argv);
  for (const auto& extra : app.remaining())
    if (extra.rfind("--benchmark_", 0) != 0) troupe::cli::fail(app, "The following argument was not expected: " + extra);
  auto pg = comm::make_mpi_world();  // initialises MPI (MPI_THREAD_MULTIPLE)
  int n = pg->size(), me = pg->rank();
  if (n < 2) {
    std::printf("comm_bench: run under mpirun -np 2 (or more); size is %d\n", n);
    pg.reset();
    comm::mpi_finalize();
    return 0;
  }
  if (threshold) {
    int rc = threshold_sweep(pg, quick);
    pg.reset();
    comm::mpi_finalize();
    return rc;
  }
  // Correctness first: every rank contributes rank + 1.
  Tensor check = full({1 << 16}, me + 1.0);
  pg->all_reduce(check);
  auto v = check.to_vector<float>();
  bool ok = std::all_of(v.begin(), v.end(), [&](float x) { return x == n * (n + 1) / 2.0f; });
  if (me == 0) {
    std::printf("all_reduce bus bandwidth, %d ranks, float32 SUM in place (GB/s; ratio = troupe / raw MPI_Allreduce)\n", n);
    std::printf("%10s %12s %12s %12s %8s %8s\n", "bytes", "raw MPI", "raw Iallred", "troupe", "ratio", "vs Iall");
  }
  int samples = quick ? 3 : 9;
  MPI_Comm nb_comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &nb_comm);
  double worst = 1e9;
  for (size_t bytes = 4096; bytes <= (size_t{64} << 20); bytes *= 4) {
    int64_t count = static_cast<int64_t>(bytes / 4);
    Tensor t = zeros({count});  // zeros: repeated sums stay finite
    float* data = t.data_ptr<float>();
    // About 20 ms per sample.
    double one = time_loop(3, [&] { MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); });
    int iters = std::max(3, std::min(20000, static_cast<int>((quick ? 0.005 : 0.02) / std::max(one, 1e-7))));
    MPI_Bcast(&iters, 1, MPI_INT, 0, MPI_COMM_WORLD);
    std::vector<double> raw, ours, nb;
    for (int s = 0; s < samples; ++s) {
      auto run_raw = [&] {
        raw.push_back(time_loop(iters, [&] {
          MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        }));
      };
      auto run_ours = [&] { ours.push_back(time_loop(iters, [&] { pg->all_reduce(t); })); };
      // What troupe's group issues underneath: MPI_Iallreduce polled with MPI_Test (no queue, no thread).
      auto run_nb = [&] {
        nb.push_back(time_loop(iters, [&] {
          MPI_Request req;
          MPI_Iallreduce(MPI_IN_PLACE, data, static_cast<int>(count), MPI_FLOAT, MPI_SUM, nb_comm, &req);
          int done = 0;
          while (!done) MPI_Test(&req, &done, MPI_STATUS_IGNORE);
        }));
      };
      if (s % 2) { run_raw(); run_ours(); run_nb(); } else { run_ours(); run_raw(); run_nb(); }
    }
    double factor = 2.0 * (n - 1) / n * static_cast<double>(bytes) / 1e9;
    double bw_raw = factor / median(raw), bw_ours = factor / median(ours);
    double ratio = bw_ours / bw_raw;
    double bw_nb = factor / median(nb);
    worst = std::min(worst, ratio);
    if (me == 0) {
      std::printf("%10zu %12.3f %12.3f %12.3f %8.3f %8.3f %s\n", bytes, bw_raw, bw_nb, bw_ours, ratio, bw_ours / bw_nb,
                  ratio >= 0.95 ? "" : "(< 0.95)");
      std::fflush(stdout);
    }
  }
  if (me == 0) {
    std::printf("correctness: %s; lowest ratio %.3f (target >= 0.95)\n", ok ? "ok" : "WRONG", worst);
  }
  MPI_Comm_free(&nb_comm);
  pg.reset();
  comm::mpi_finalize();
  return ok ? 0 : 1;
}
