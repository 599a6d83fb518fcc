// optim_bench: one optimizer step over 10M float32 parameters (10 tensors of 1M, as a model would
// have), troupe's fused optim::SGD / optim::Adam beside libtorch 1.13's torch::optim, in the same
// process and with the same number of threads, and beside the memory floor.
//
//   SGD (momentum 0.9)   each element reads p, g, buf and writes p, buf: 20 bytes per parameter
//   Adam (defaults)      reads p, g, m, v and writes p, m, v:           28 bytes per parameter
//
// floor time = those bytes / the memory bandwidth measured in this run: a memcpy of 64 MB (the faster
// of one thread and the same threads as the updates), counting the bytes read and the bytes written,
// sampled alternately with the update. Rows:
//   vs libtorch              ratio = libtorch_time / troupe_time (> 1: troupe faster), target >= 1.5
//   fraction of memory floor ratio = floor_time / troupe_time (1 = at the floor), target >= 0.7
// A fraction above 1 means the update moved its bytes faster than memcpy did: glibc copies a large
// block with non-temporal stores, which some machines (VMs) run slowly, while the updates store into
// lines they have just read and prefetch ahead (on the 2-core VM of bench/results.txt: 38 GB/s
// against memcpy's 20, the same with 10 x 4M parameters, so not from cache reuse between steps).
// Both sides start from the same values; after their first step the parameters must agree (they do
// bit for bit: both round as ATen's kernels do).
//
// Timing (bench/harness.h): warm-up, then alternating samples of the two sides, medians; the ratio
// is the median over back-to-back sample pairs. Flags: --quick (few samples), --threads=N (default
// 2), --samples=N, --filter=SUBSTR, --strict (exit 1 when a target is missed). Google Benchmark flags
// (--benchmark_*) are accepted and ignored. Exit status: 1 when a correctness check fails.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <troupe/optim/optim.h>
#include <troupe/tensor/ops.h>
#include <troupe/tensor/parallel.h>
#include <troupe/tensor/random.h>
#include <troupe/tensor/tensor.h>

#if defined(TROUPE_HAVE_LIBTORCH)
#include <torch/torch.h>
#endif

#include "harness.h"

namespace {

namespace optim = troupe::optim;

constexpr int64_t kTensors = 10;
constexpr int64_t kPerTensor = 1 << 20;  // 10 x 1M = 10.5M parameters
constexpr double kParams = double(kTensors * kPerTensor);

// ------------------------------------------------------------------------------------------ bandwidth
// memcpy of 64 MB (bytes moved = 2 x size), on one thread and split over the pool's threads (as
// tensor_bench's): the faster of the two is the machine's bandwidth the updates are compared with.
struct Memcpy {
  size_t bytes;
  std::vector<char> src, dst;
  bool multi = false;  // the faster variant
  explicit Memcpy(size_t n) : bytes(n), src(n, 1), dst(n, 2) {}
  void one() {
    std::memcpy(dst.data(), src.data(), bytes);
    do_not_optimize(dst[bytes / 2]);
  }
  void many() {
    const int64_t n = static_cast<int64_t>(bytes);
    const int64_t threads = std::max(1, troupe::get_num_threads());
    troupe::parallel_for(0, n, (n + threads - 1) / threads,
                         [&](int64_t b, int64_t e) { std::memcpy(dst.data() + b, src.data() + b, e - b); });
    do_not_optimize(dst[bytes / 2]);
  }
  void best() { multi ? many() : one(); }
  double bytes_per_s(double ms) const { return 2.0 * static_cast<double>(bytes) / (ms * 1e-3); }
};

// ------------------------------------------------------------------------------------------ the models
struct TroupeSide {
  std::vector<troupe::Tensor> params;
  TroupeSide() {
    for (int64_t i = 0; i < kTensors; ++i) {
      troupe::Tensor p = troupe::randn({kPerTensor}).requires_grad_(true);
      p.set_grad(troupe::randn({kPerTensor}));
      params.push_back(p);
    }
  }
};

#if defined(TROUPE_HAVE_LIBTORCH)
torch::Tensor to_torch(const troupe::Tensor& t) {
  troupe::Tensor c = t.detach().contiguous();
  return torch::from_blob(c.data_ptr<float>(), {c.numel()}, torch::kFloat32).clone();
}

struct TorchSide {
  std::vector<torch::Tensor> params;
  explicit TorchSide(const TroupeSide& t) {
    for (const auto& p : t.params) {
      torch::Tensor q = to_torch(p).requires_grad_(true);
      q.mutable_grad() = to_torch(p.grad());
      params.push_back(q);
    }
  }
};

// Largest normwise relative difference between the two sides' parameters.
double max_param_diff(const TroupeSide& a, const TorchSide& b) {
  double worst = 0;
  for (size_t i = 0; i < a.params.size(); ++i) {
    troupe::Tensor x = a.params[i].detach().contiguous();
    torch::Tensor y = b.params[i].detach().contiguous();
    worst = std::max(worst, rel_diff(x.data_ptr<float>(), y.data_ptr<float>(), x.numel()));
  }
  return worst;
}
#endif

// One case: troupe's optimizer vs libtorch's, and troupe vs the memory floor.
template <class TroupeOpt, class TroupeOptions, class MakeTorch>
void bench_case(const std::string& label, TroupeOptions options, double bytes_per_param, Memcpy& mc,
                MakeTorch make_torch) {
  const std::string name = label + " step, 10 x 1M fp32";
  if (!selected(name)) return;
  TroupeSide ts;
  TroupeOpt topt(ts.params, options);
#if defined(TROUPE_HAVE_LIBTORCH)
  TorchSide ps(ts);
  auto popt = make_torch(ps.params);
  topt.step();  // the first step makes the state on both sides
  popt->step();
  const double diff = max_param_diff(ts, ps);
  const bool ok = diff <= 1e-6;
  note("check " + label + ": parameters after one step, max rel difference troupe vs libtorch " + fmt("%.1e", diff) +
       (diff == 0 ? " (bit for bit)" : "") + (ok ? "  -> OK (<= 1e-6)" : "  -> MISMATCH (> 1e-6)"));
  if (!ok) ++check_failures;
  Comparison c = compare([&] { topt.step(); }, [&] { popt->step(); });
  row(name + " vs libtorch", fmt_time(c.a_ms), "libtorch " + fmt_time(c.b_ms), c.ratio, 1.5);
#else
  (void)make_torch;
  topt.step();
  row(name + " vs libtorch", "-", "n/a (built without libtorch)", kNaN, kNaN);
#endif
  // The update and the memcpy sampled alternately (both see the same load): fraction of the floor =
  // (update bytes / t) / (memcpy bytes / t_memcpy), from the paired time ratio t_memcpy / t.
  const double moved = bytes_per_param * kParams;
  Comparison f = compare([&] { topt.step(); }, [&] { mc.best(); });
  const double bw = mc.bytes_per_s(f.b_ms);
  row(name + " fraction of memory floor", fmt_time(f.a_ms) + fmt("  %.1f GB/s", moved / (f.a_ms * 1e6)),
      "floor " + fmt_time(moved / bw * 1e3) + fmt(" (%.0f B/param, ", bytes_per_param) + fmt("memcpy %.1f GB/s)", bw / 1e9),
      f.ratio * moved / (2.0 * static_cast<double>(mc.bytes)), 0.7);
}


}  // namespace

int main(int argc, char** argv) {
  cfg.threads = 2;
  if (int rc = parse_args(argc, argv, "optim_bench"); rc >= 0) return rc;
  if (cfg.quick) {
    cfg.sample_ms = 20;
    cfg.warmup_ms = 20;
  }
  if (cfg.threads < 1) cfg.threads = 1;
  troupe::set_num_threads(cfg.threads);
#if defined(TROUPE_HAVE_LIBTORCH)
  torch::set_num_threads(cfg.threads);
  const std::string torch_threads = std::to_string(torch::get_num_threads());
#else
  const std::string torch_threads = "n/a (built without libtorch)";
#endif
  troupe::manual_seed(0);

  std::printf("optim_bench%s: %s; load average %s\n", cfg.quick ? " --quick" : "", cpu_name().c_str(),
              loadavg().c_str());
  std::printf("threads: troupe %d, libtorch %s; median of %d samples (>= %.0f ms each), the two sides sampled "
              "alternately\n",
              troupe::get_num_threads(), torch_threads.c_str(), cfg.samples, cfg.sample_ms);
  std::printf("ratio: vs libtorch = libtorch_time / troupe_time; fraction of floor = floor_time / troupe_time\n\n");
  kW0 = 58;  // longer case names, a wider peer column
  kW1 = 28;
  kW2 = 46;
  print_header();
  Memcpy mc(size_t(64) << 20);
  {
    Comparison c = compare([&] { mc.one(); }, [&] { mc.many(); });
    mc.multi = c.b_ms < c.a_ms;
    row("memcpy 64 MB, 1 thread (2x bytes moved)", "-", fmt_time(c.a_ms) + fmt("  %.1f GB/s", mc.bytes_per_s(c.a_ms) / 1e9),
        kNaN, kNaN);
    row("memcpy 64 MB, " + std::to_string(troupe::get_num_threads()) + " threads (2x bytes moved)", "-",
        fmt_time(c.b_ms) + fmt("  %.1f GB/s", mc.bytes_per_s(c.b_ms) / 1e9), kNaN, kNaN);
  }

#if defined(TROUPE_HAVE_LIBTORCH)
  auto torch_sgd = [](std::vector<torch::Tensor>& p) {
    return std::make_unique<torch::optim::SGD>(p, torch::optim::SGDOptions(0.01).momentum(0.9));
  };
  auto torch_adam = [](std::vector<torch::Tensor>& p) {
    return std::make_unique<torch::optim::Adam>(p, torch::optim::AdamOptions(1e-3));
  };
#else
  const int torch_sgd = 0, torch_adam = 0;
#endif
  try {
    bench_case<optim::SGD>("SGD momentum", optim::SGDOptions(0.01).momentum(0.9), 20, mc, torch_sgd);
    bench_case<optim::Adam>("Adam", optim::AdamOptions(1e-3), 28, mc, torch_adam);
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "optim_bench: error: %s\n", e.what());
    return 1;
  }

  return finish();
}
