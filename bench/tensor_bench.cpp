// tensor_bench: troupe beside its peer, in the same process, with a table of ratios and targets.
//
//   sgemm          troupe::mm (float32)                   vs cblas_sgemm on raw buffers (same OpenBLAS)
//   elementwise    troupe a + b, a * b, a.add_(b) (16M)   vs the machine's memcpy bandwidth
//   MLP step       relu(x.matmul(w) + b).sum().backward() vs the same in libtorch
//   informative    softmax, log_softmax, logsumexp, sum, conv2d fwd+bwd (4 shapes), add vs libtorch (no target)
//   read bandwidth sum of 16M float32 vs a plain OpenMP sum loop over the same buffer (target 0.9)
//
// Timing: a manual timer on std::chrono::steady_clock. Each case is warmed up, then each side gets an
// inner repeat count so that one sample lasts at least `sample_ms`; samples of troupe and of the peer
// are taken alternately (so that both see the same background load) and the median per call is
// reported. ratio = peer_time / troupe_time (> 1: troupe faster), as the median over back-to-back
// sample pairs (robust to drifts of machine speed); for bandwidth rows ratio = troupe GB/s / memcpy
// GB/s, from the same paired times.
//
// Flags: --quick (few samples: the ctest smoke test), --threads=N, --samples=N, --filter=SUBSTR (cases
// whose name contains SUBSTR), --strict (exit 1 when a target is missed). Google Benchmark flags
// (--benchmark_*) are accepted and ignored, so that scripts/bench.sh can pass them to every bench.
// Exit status: 1 when a correctness check fails (or a target is missed under --strict), else 0.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <troupe/tensor/autograd.h>
#include <troupe/tensor/ops.h>
#include <troupe/tensor/tensor.h>

#if defined(TROUPE_HAVE_LIBTORCH)
#include <torch/torch.h>
#endif

// OpenBLAS extension (declared in OpenBLAS's cblas.h; repeated so other CBLAS headers compile too).
extern "C" {
void openblas_set_num_threads(int num_threads) __attribute__((weak));
int openblas_get_num_threads(void) __attribute__((weak));
char* openblas_get_corename(void) __attribute__((weak));
}

#include "harness.h"

namespace {


troupe::Tensor t_randn(std::vector<int64_t> sizes) {
  return troupe::randn(sizes, troupe::TensorOptions().dtype(troupe::kFloat32));
}

#if defined(TROUPE_HAVE_LIBTORCH)
// A libtorch tensor holding a copy of a contiguous float32 troupe tensor.
torch::Tensor to_torch(const troupe::Tensor& t) {
  troupe::Tensor c = t.contiguous();
  std::vector<int64_t> sizes(c.sizes().begin(), c.sizes().end());
  return torch::from_blob(c.data_ptr<float>(), sizes, torch::kFloat32).clone();
}
#endif

[[maybe_unused]] const char* kNoTorch = "n/a (built without libtorch)";

// ------------------------------------------------------------------------------------------ cases
void bench_sgemm(int64_t n) {
  std::string name = "sgemm " + std::to_string(n) + "x" + std::to_string(n) + " (mm vs cblas_sgemm)";
  if (!selected(name)) return;
  troupe::Tensor a = t_randn({n, n}), b = t_randn({n, n});
  std::vector<float> c(static_cast<size_t>(n * n));
  const float* pa = a.data_ptr<float>();
  const float* pb = b.data_ptr<float>();
  auto raw = [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)n, (int)n, 1.0f, pa, (int)n, pb, (int)n,
                0.0f, c.data(), (int)n);
  };
  // Once: troupe's product equals the raw call's.
  raw();
  troupe::Tensor ct = troupe::mm(a, b);
  double rd = rel_diff(ct.data_ptr<float>(), c.data(), n * n);
  if (rd > 1e-5) {
    ++check_failures;
    note(name + ": troupe::mm differs from cblas_sgemm (relative " + fmt("%.2e", rd) + ")");
  }
  auto [tt, tp, ratio] = compare([&] { do_not_optimize(troupe::mm(a, b)); }, raw);
  double flop = 2.0 * n * n * n;
  row(name, fmt_time(tt) + fmt("  %.1f GFLOP/s", flop / (tt * 1e6)),
      fmt_time(tp) + fmt("  %.1f GFLOP/s", flop / (tp * 1e6)), ratio, 0.95);
}

// memcpy of 64 MB (bytes moved = 2 x size), single-thread and chunked over `threads` threads: the
// faster of the two is the hardware limit the elementwise rows are compared with.
struct Memcpy {
  size_t bytes;
  int threads;
  std::unique_ptr<char[]> src, dst;
  bool multi = false;  // the faster variant
  Memcpy(size_t n, int t) : bytes(n), threads(t), src(new char[n]), dst(new char[n]) {
    std::memset(src.get(), 1, bytes);
    std::memset(dst.get(), 2, bytes);
  }
  void one() {
    std::memcpy(dst.get(), src.get(), bytes);
    do_not_optimize(dst.get());
  }
  void many() {
    char* s = src.get();
    char* d = dst.get();
    const int64_t chunks = threads;
    const int64_t total = static_cast<int64_t>(bytes);
    const int64_t step = (total + chunks - 1) / chunks;
#pragma omp parallel for num_threads(threads) schedule(static, 1)
    for (int64_t k = 0; k < chunks; ++k) {
      int64_t b = k * step, e = std::min<int64_t>(total, b + step);
      if (b < e) std::memcpy(d + b, s + b, static_cast<size_t>(e - b));
    }
    do_not_optimize(d);
  }
  void best() { multi ? many() : one(); }
  double gbps(double ms) const { return 2.0 * static_cast<double>(bytes) / (ms * 1e6); }
};

void bench_elementwise(int threads) {
  const int64_t n = int64_t(16) << 20;  // 16M floats = 64 MB
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);
  std::string names[3] = {"add 16M f32 (a + b) vs memcpy", "mul 16M f32 (a * b) vs memcpy",
                          "add_ 16M f32 (a.add_(b)) vs memcpy"};
  if (!selected(names[0]) && !selected(names[1]) && !selected(names[2])) return;
  Memcpy mc(bytes, threads);
  {
    auto [t1, tm, r] = compare([&] { mc.one(); }, [&] { mc.many(); });
    (void)r;
    mc.multi = tm < t1;
    row("memcpy 64 MB, 1 thread (2x bytes moved)", "-", fmt_time(t1) + fmt("  %.1f GB/s", mc.gbps(t1)), kNaN, kNaN);
    row("memcpy 64 MB, " + std::to_string(threads) + " threads (2x bytes moved)", "-",
        fmt_time(tm) + fmt("  %.1f GB/s", mc.gbps(tm)), kNaN, kNaN);
  }
  troupe::Tensor a = t_randn({n}), b = t_randn({n});
  {  // once: the sums are right
    troupe::Tensor c = a + b;
    const float *pa = a.data_ptr<float>(), *pb = b.data_ptr<float>(), *pc = c.data_ptr<float>();
    for (int64_t i = 0; i < n; i += 9973)
      if (pc[i] != pa[i] + pb[i]) {
        ++check_failures;
        note("add: element " + std::to_string(i) + " is wrong");
        break;
      }
  }
  const double moved = 3.0 * bytes;  // read a, read b, write out
  // Each troupe op is sampled alternately with the faster memcpy, so both see the same load.
  auto bw_row = [&](const std::string& name, std::function<void()> f) {
    if (!selected(name)) return;
    auto [t, tm, r] = compare(std::move(f), [&] { mc.best(); });
    double gb = moved / (t * 1e6), hw = mc.gbps(tm);
    // troupe GB/s / memcpy GB/s = (moved / t) / (2 bytes / tm), from the paired time ratio tm / t
    row(name, fmt_time(t) + fmt("  %.1f GB/s", gb),
        fmt("memcpy %.1f GB/s", hw) + " (" + std::to_string(mc.multi ? threads : 1) + " thr)",
        r * moved / (2.0 * static_cast<double>(bytes)), 0.8);
  };
  bw_row(names[0], [&] { do_not_optimize(a + b); });
  bw_row(names[1], [&] { do_not_optimize(a * b); });
  troupe::Tensor acc = a.clone(), small = b * 1e-3;
  bw_row(names[2], [&] { acc.add_(small); });
}

// The MLP step: relu(x.matmul(w) + b).sum() forward + backward; grads set undefined first.
void bench_mlp(const std::string& label, int64_t batch, int64_t in, int64_t out, double target) {
  std::string name = "MLP fwd+bwd " + label + " x" + std::to_string(batch) + "x" + std::to_string(in) + " w" +
                     std::to_string(in) + "x" + std::to_string(out) + " vs libtorch";
  if (!selected(name)) return;
  troupe::Tensor x = t_randn({batch, in});
  troupe::Tensor w = t_randn({in, out}).mul(1.0 / std::sqrt(double(in))).requires_grad_(true);
  troupe::Tensor b = t_randn({out}).mul(0.1).requires_grad_(true);
  auto troupe_step = [&] {
    w.set_grad(troupe::Tensor());
    b.set_grad(troupe::Tensor());
    troupe::Tensor loss = troupe::relu(x.matmul(w) + b).sum();
    loss.backward();
    return loss;
  };
#if defined(TROUPE_HAVE_LIBTORCH)
  torch::Tensor tx = to_torch(x);
  torch::Tensor tw = to_torch(w.detach()).requires_grad_(true);
  torch::Tensor tb = to_torch(b.detach()).requires_grad_(true);
  auto torch_step = [&] {
    tw.mutable_grad().reset();
    tb.mutable_grad().reset();
    torch::Tensor loss = torch::relu(tx.matmul(tw) + tb).sum();
    loss.backward();
    return loss;
  };
  {  // once: same loss and gradients
    troupe::Tensor l1 = troupe_step();
    torch::Tensor l2 = torch_step();
    float v1 = l1.item<float>(), v2 = l2.item<float>();
    double dl = std::abs(double(v1) - v2) / std::max(1e-30, std::abs(double(v2)));
    troupe::Tensor gw = w.grad().contiguous(), gb = b.grad().contiguous();
    torch::Tensor tgw = tw.grad().contiguous(), tgb = tb.grad().contiguous();
    double dw = rel_diff(gw.data_ptr<float>(), tgw.data_ptr<float>(), gw.numel());
    double db = rel_diff(gb.data_ptr<float>(), tgb.data_ptr<float>(), gb.numel());
    bool ok = dl <= 1e-4 && dw <= 1e-4 && db <= 1e-4;
    std::string msg = "check " + label + " MLP: loss troupe " + fmt("%.6g", v1) + " libtorch " + fmt("%.6g", v2) +
                      " (rel " + fmt("%.1e", dl) + "), grad w rel " + fmt("%.1e", dw) + ", grad b rel " +
                      fmt("%.1e", db) + (ok ? "  -> OK (<= 1e-4)" : "  -> MISMATCH (> 1e-4)");
    note(msg);
    if (!ok) ++check_failures;
  }
  auto [tt, tp, ratio] = compare([&] { do_not_optimize(troupe_step()); }, [&] { do_not_optimize(torch_step()); });
  row(name, fmt_time(tt), fmt_time(tp), ratio, target);
#else
  double tt = time_one([&] { do_not_optimize(troupe_step()); });
  row(name, fmt_time(tt), kNoTorch, kNaN, kNaN);
#endif
}

// Informative rows: troupe vs libtorch, no target.
template <typename FT, typename FP>
void info_vs_torch(const std::string& name, FT troupe_fn, FP torch_fn, double bytes = 0) {
  if (!selected(name)) return;
  auto bw = [&](double ms) { return bytes > 0 ? fmt("  %.1f GB/s", bytes / (ms * 1e6)) : std::string(); };
#if defined(TROUPE_HAVE_LIBTORCH)
  auto [tt, tp, ratio] = compare(troupe_fn, torch_fn);
  row(name, fmt_time(tt) + bw(tt), fmt_time(tp) + bw(tp), ratio, kNaN);
#else
  (void)torch_fn;
  double tt = time_one(troupe_fn);
  row(name, fmt_time(tt) + bw(tt), kNoTorch, kNaN, kNaN);
#endif
}

#if defined(TROUPE_HAVE_LIBTORCH)
#define TORCH_ONLY(...) __VA_ARGS__
#else
#define TORCH_ONLY(...)
#endif

// The read bandwidth of the machine: a plain OpenMP sum reduction over the buffer (threads splitting it in
// contiguous halves, the compiler's vectorised loop), the bound a full sum of float32 can reach.
float read_sum(const float* p, int64_t n, int threads) {
  float s = 0.0f;
#pragma omp parallel for simd num_threads(threads) schedule(static) reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += p[i];
  return s;
}

void bench_informative(int threads) {
  {
    troupe::Tensor x = t_randn({256, 1024});
    TORCH_ONLY(torch::Tensor tx = to_torch(x);)
    info_vs_torch("softmax (256, 1024) dim -1 vs libtorch", [&] { do_not_optimize(troupe::softmax(x, -1)); },
                  [&] { TORCH_ONLY(do_not_optimize(torch::softmax(tx, -1));) });
    info_vs_torch("log_softmax (256, 1024) dim -1 vs libtorch", [&] { do_not_optimize(troupe::log_softmax(x, -1)); },
                  [&] { TORCH_ONLY(do_not_optimize(torch::log_softmax(tx, -1));) });
    info_vs_torch("logsumexp (256, 1024) dim -1 vs libtorch", [&] { do_not_optimize(troupe::logsumexp(x, {-1})); },
                  [&] { TORCH_ONLY(do_not_optimize(torch::logsumexp(tx, {-1}));) });
  }
  {
    const int64_t n = int64_t(16) << 20;
    troupe::Tensor x = t_randn({n});
    TORCH_ONLY(torch::Tensor tx = to_torch(x);)
    info_vs_torch("sum 16M f32 vs libtorch", [&] { do_not_optimize(x.sum()); },
                  [&] { TORCH_ONLY(do_not_optimize(tx.sum());) }, 4.0 * n);
    const std::string rb = "sum 16M f32 vs read bandwidth (OpenMP sum loop)";
    if (selected(rb)) {
      const float* px = x.data_ptr<float>();
      const double got = x.sum().item<float>(), ref = read_sum(px, n, threads);
      if (std::abs(got - ref) > 1e-3 * std::max(1.0, std::abs(ref)) + 1.0) {
        ++check_failures;
        note("sum: troupe " + fmt("%.6g", got) + " differs from the OpenMP loop's " + fmt("%.6g", ref));
      }
      auto [tt, tp, ratio] =
          compare([&] { do_not_optimize(x.sum()); }, [&] { do_not_optimize(read_sum(px, n, threads)); });
      row(rb, fmt_time(tt) + fmt("  %.1f GB/s", 4.0 * n / (tt * 1e6)),
          fmt_time(tp) + fmt("  %.1f GB/s", 4.0 * n / (tp * 1e6)), ratio, 0.9);
    }
    troupe::Tensor y = t_randn({n});
    TORCH_ONLY(torch::Tensor ty = to_torch(y);)
    info_vs_torch("add 16M f32 (a + b) vs libtorch", [&] { do_not_optimize(x + y); },
                  [&] { TORCH_ONLY(do_not_optimize(tx + ty);) }, 12.0 * n);
  }
  // conv2d forward+backward: the first shape of the README's table, a ResNet block's convolution and the
  // digits conv net's two layers (batch 32, 8x8 images); each checked once against libtorch (loss, both
  // gradients), then timed.
  struct ConvCase {
    const char* name;
    int64_t n, c, hw, o;
  };
  for (ConvCase cc : {ConvCase{"conv2d fwd+bwd N8 C16 32x32 -> 32, 3x3 p1 vs libtorch", 8, 16, 32, 32},
                      ConvCase{"conv2d fwd+bwd N32 C64 56x56 -> 64, 3x3 p1 vs libtorch", 32, 64, 56, 64},
                      ConvCase{"conv2d fwd+bwd N32 C1 8x8 -> 16, 3x3 p1 vs libtorch", 32, 1, 8, 16},
                      ConvCase{"conv2d fwd+bwd N32 C16 4x4 -> 32, 3x3 p1 vs libtorch", 32, 16, 4, 32}}) {
    if (!selected(cc.name)) continue;
    troupe::Tensor x = t_randn({cc.n, cc.c, cc.hw, cc.hw}).requires_grad_(true);
    troupe::Tensor w = t_randn({cc.o, cc.c, 3, 3}).mul(0.1).requires_grad_(true);
    troupe::Tensor b = t_randn({cc.o}).mul(0.1).requires_grad_(true);
    auto troupe_step = [&] {
      x.set_grad(troupe::Tensor());
      w.set_grad(troupe::Tensor());
      b.set_grad(troupe::Tensor());
      troupe::Tensor loss = troupe::conv2d(x, w, b, 1, 1).sum();
      loss.backward();
      return loss;
    };
#if defined(TROUPE_HAVE_LIBTORCH)
    torch::Tensor tx = to_torch(x.detach()).requires_grad_(true);
    torch::Tensor tw = to_torch(w.detach()).requires_grad_(true);
    torch::Tensor tb = to_torch(b.detach()).requires_grad_(true);
    auto torch_step = [&] {
      tx.mutable_grad().reset();
      tw.mutable_grad().reset();
      tb.mutable_grad().reset();
      torch::Tensor loss = torch::conv2d(tx, tw, tb, 1, 1).sum();
      loss.backward();
      return loss;
    };
    {  // once: same loss and gradients
      float v1 = troupe_step().item<float>(), v2 = torch_step().item<float>();
      troupe::Tensor gw = w.grad().contiguous(), gx = x.grad().contiguous();
      torch::Tensor tgw = tw.grad().contiguous(), tgx = tx.grad().contiguous();
      double dl = std::abs(double(v1) - v2) / std::max(1.0, std::abs(double(v2)));
      double dw = rel_diff(gw.data_ptr<float>(), tgw.data_ptr<float>(), gw.numel());
      double dx = rel_diff(gx.data_ptr<float>(), tgx.data_ptr<float>(), gx.numel());
      bool ok = dl <= 1e-4 && dw <= 1e-4 && dx <= 1e-4;
      note("check " + std::string(cc.name) + ": loss rel " + fmt("%.1e", dl) + ", grad w rel " + fmt("%.1e", dw) +
           ", grad x rel " + fmt("%.1e", dx) + (ok ? "  -> OK (<= 1e-4)" : "  -> MISMATCH (> 1e-4)"));
      if (!ok) ++check_failures;
    }
#endif
    info_vs_torch(cc.name, [&] { do_not_optimize(troupe_step()); }, [&] { TORCH_ONLY(do_not_optimize(torch_step());) });
  }
}


}  // namespace

int main(int argc, char** argv) {
  if (int rc = parse_args(argc, argv, "tensor_bench"); rc >= 0) return rc;

  int n = cfg.threads > 0 ? cfg.threads : troupe::get_num_threads();
  troupe::set_num_threads(n);
  if (openblas_set_num_threads) openblas_set_num_threads(n);
  int blas_threads = openblas_get_num_threads ? openblas_get_num_threads() : -1;
  const char* blas_core = openblas_get_corename ? openblas_get_corename() : "n/a";
  const char* blas_env = std::getenv("OPENBLAS_CORETYPE");
#if defined(TROUPE_HAVE_LIBTORCH)
  torch::set_num_threads(n);
  torch::manual_seed(0);
  std::string torch_threads = std::to_string(torch::get_num_threads());
#else
  std::string torch_threads = "n/a (built without libtorch)";
#endif
  troupe::manual_seed(0);

  std::printf("tensor_bench%s: %s, %d cpus; load average %s\n", cfg.quick ? " --quick" : "", cpu_name().c_str(),
              omp_get_num_procs(), loadavg().c_str());
  std::printf("threads: troupe %d, libtorch %s, OpenBLAS %d; median of %d samples (>= %.0f ms each), "
              "troupe and peer sampled alternately\n",
              troupe::get_num_threads(), torch_threads.c_str(), blas_threads, cfg.samples, cfg.sample_ms);
  std::printf("OpenBLAS kernels: %s (OPENBLAS_CORETYPE %s)\n", blas_core, blas_env ? blas_env : "unset");
  std::printf("ratio = peer_time / troupe_time (> 1: troupe faster; median of back-to-back sample pairs); "
              "bandwidth rows: troupe GB/s / memcpy GB/s\n\n");
  print_header();

  try {
    bench_sgemm(1024);
    bench_sgemm(2048);
    bench_elementwise(n);
    bench_mlp("small", 64, 32, 64, 2.0);
    bench_mlp("large", 256, 784, 1024, 1.0);
    bench_informative(n);
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "tensor_bench: error: %s\n", e.what());
    return 1;
  }

  return finish();
}
