// tensor_bench: troupe beside its peer, in the same process, with a table of ratios and targets.
//
//   sgemm          troupe::mm (float32)                   vs cblas_sgemm on raw buffers (same OpenBLAS)
//   elementwise    troupe a + b, a * b, a.add_(b) (16M)   vs the machine's memcpy bandwidth
//   MLP step       relu(x.matmul(w) + b).sum().backward() vs the same in libtorch
//   informative    softmax, sum, conv2d fwd+bwd, add      vs libtorch (no target)
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
}

namespace {

using Clock = std::chrono::steady_clock;

// ------------------------------------------------------------------------------------------ config
struct Config {
  bool quick = false;
  bool strict = false;
  int threads = 0;
  int samples = 15;
  double sample_ms = 50;  // minimum length of one sample
  double warmup_ms = 200;
  std::string filter;
};
Config cfg;

template <typename T>
inline void do_not_optimize(T const& v) {
  asm volatile("" : : "r,m"(v) : "memory");
}

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// One side of a comparison: a callable and its per-sample repeat count.
struct Side {
  explicit Side(std::function<void()> f) : fn(std::move(f)) {}
  std::function<void()> fn;
  int64_t reps = 1;
  std::vector<double> per_call_ms;

  // Runs fn until warmup_ms passed (at least twice), then sets reps from the median warm-up call.
  void warm_and_calibrate() {
    auto t0 = Clock::now();
    std::vector<double> times;
    do {
      auto t1 = Clock::now();
      fn();
      times.push_back(ms_since(t1));
    } while (times.size() < 2 || ms_since(t0) < cfg.warmup_ms);
    times.erase(times.begin());  // the first call pays for cold caches and allocations
    const double per_call = std::max(median(times), 1e-6);
    reps = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(cfg.sample_ms / per_call)));
  }
  void sample() {
    auto t0 = Clock::now();
    for (int64_t i = 0; i < reps; ++i) fn();
    per_call_ms.push_back(ms_since(t0) / static_cast<double>(reps));
  }
  double med() const { return median(per_call_ms); }
};

// Result of timing two callables: median ms per call of each, and the median over sample pairs of
// b_time / a_time (each pair is taken back to back, so the ratio cancels slow drifts of machine speed).
struct Comparison {
  double a_ms, b_ms, ratio;
};

// Times a and b with alternating samples (a b, b a, a b, ...).
Comparison compare(std::function<void()> a, std::function<void()> b) {
  Side sa(std::move(a)), sb(std::move(b));
  sa.warm_and_calibrate();
  sb.warm_and_calibrate();
  for (int s = 0; s < cfg.samples; ++s) {
    if (s % 2 == 0) {
      sa.sample();
      sb.sample();
    } else {
      sb.sample();
      sa.sample();
    }
  }
  std::vector<double> ratios;
  for (size_t i = 0; i < sa.per_call_ms.size(); ++i) ratios.push_back(sb.per_call_ms[i] / sa.per_call_ms[i]);
  return {sa.med(), sb.med(), median(ratios)};
}

[[maybe_unused]] double time_one(std::function<void()> a) {
  Side s(std::move(a));
  s.warm_and_calibrate();
  for (int i = 0; i < cfg.samples; ++i) s.sample();
  return s.med();
}

// --------------------------------------------------------------------------------------- the table
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
int misses = 0, passes = 0, check_failures = 0;

std::string fmt(const char* f, double a) {
  char buf[128];
  std::snprintf(buf, sizeof buf, f, a);
  return buf;
}
std::string fmt_time(double ms) {
  if (ms >= 1000) return fmt("%.3f s", ms / 1000);
  if (ms >= 1) return fmt("%.3f ms", ms);
  return fmt("%.2f us", ms * 1000);
}

constexpr int kW0 = 54, kW1 = 26, kW2 = 30, kW3 = 7, kW4 = 8;

void print_header() {
  std::printf("%-*s | %-*s | %-*s | %*s | %-*s | %s\n", kW0, "case", kW1, "troupe", kW2, "peer", kW3, "ratio",
              kW4, "target", "result");
  std::printf("%s-+-%s-+-%s-+-%s-+-%s-+-%s\n", std::string(kW0, '-').c_str(), std::string(kW1, '-').c_str(),
              std::string(kW2, '-').c_str(), std::string(kW3, '-').c_str(), std::string(kW4, '-').c_str(),
              "------");
}

// ratio and target NaN: informative row (no target).
void row(const std::string& name, const std::string& troupe_col, const std::string& peer_col, double ratio,
         double target) {
  std::string r = std::isnan(ratio) ? "-" : fmt("%.2f", ratio);
  std::string t = std::isnan(target) ? "-" : fmt(">= %.2f", target);
  std::string res = "info";
  if (!std::isnan(target) && !std::isnan(ratio)) {
    bool ok = ratio >= target;
    res = ok ? "PASS" : "MISS";
    (ok ? passes : misses)++;
  }
  std::printf("%-*s | %-*s | %-*s | %*s | %-*s | %s\n", kW0, name.c_str(), kW1, troupe_col.c_str(), kW2,
              peer_col.c_str(), kW3, r.c_str(), kW4, t.c_str(), res.c_str());
  std::fflush(stdout);
}

std::vector<std::string> notes;
void note(const std::string& s) { notes.push_back(s); }

bool selected(const std::string& name) { return cfg.filter.empty() || name.find(cfg.filter) != std::string::npos; }

// ------------------------------------------------------------------------------------------ helpers
// Normwise relative difference: max|a - b| / max(max|b|, tiny).
double rel_diff(const float* a, const float* b, int64_t n) {
  double d = 0, m = 0;
  for (int64_t i = 0; i < n; ++i) {
    d = std::max(d, std::abs(double(a[i]) - double(b[i])));
    m = std::max(m, std::abs(double(b[i])));
  }
  return d / std::max(m, 1e-30);
}

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

void bench_informative() {
  {
    troupe::Tensor x = t_randn({256, 1024});
    TORCH_ONLY(torch::Tensor tx = to_torch(x);)
    info_vs_torch("softmax (256, 1024) dim -1 vs libtorch", [&] { do_not_optimize(troupe::softmax(x, -1)); },
                  [&] { TORCH_ONLY(do_not_optimize(torch::softmax(tx, -1));) });
  }
  {
    const int64_t n = int64_t(16) << 20;
    troupe::Tensor x = t_randn({n});
    TORCH_ONLY(torch::Tensor tx = to_torch(x);)
    info_vs_torch("sum 16M f32 vs libtorch", [&] { do_not_optimize(x.sum()); },
                  [&] { TORCH_ONLY(do_not_optimize(tx.sum());) }, 4.0 * n);
    troupe::Tensor y = t_randn({n});
    TORCH_ONLY(torch::Tensor ty = to_torch(y);)
    info_vs_torch("add 16M f32 (a + b) vs libtorch", [&] { do_not_optimize(x + y); },
                  [&] { TORCH_ONLY(do_not_optimize(tx + ty);) }, 12.0 * n);
  }
  {
    troupe::Tensor x = t_randn({8, 16, 32, 32}).requires_grad_(true);
    troupe::Tensor w = t_randn({32, 16, 3, 3}).mul(0.1).requires_grad_(true);
    troupe::Tensor b = t_randn({32}).mul(0.1).requires_grad_(true);
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
    if (selected("conv2d")) {  // once: same loss and weight gradient
      float v1 = troupe_step().item<float>(), v2 = torch_step().item<float>();
      troupe::Tensor gw = w.grad().contiguous();
      torch::Tensor tgw = tw.grad().contiguous();
      troupe::Tensor gx = x.grad().contiguous();
      torch::Tensor tgx = tx.grad().contiguous();
      double dl = std::abs(double(v1) - v2) / std::max(1.0, std::abs(double(v2)));
      double dw = rel_diff(gw.data_ptr<float>(), tgw.data_ptr<float>(), gw.numel());
      double dx = rel_diff(gx.data_ptr<float>(), tgx.data_ptr<float>(), gx.numel());
      bool ok = dl <= 1e-4 && dw <= 1e-4 && dx <= 1e-4;
      note("check conv2d: loss rel " + fmt("%.1e", dl) + ", grad w rel " + fmt("%.1e", dw) + ", grad x rel " +
           fmt("%.1e", dx) + (ok ? "  -> OK (<= 1e-4)" : "  -> MISMATCH (> 1e-4)"));
      if (!ok) ++check_failures;
    }
#endif
    info_vs_torch("conv2d fwd+bwd N8 C16 32x32 -> 32, 3x3 p1 vs libtorch",
                  [&] { do_not_optimize(troupe_step()); }, [&] { TORCH_ONLY(do_not_optimize(torch_step());) });
  }
}

std::string cpu_name() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) {
      auto p = line.find(':');
      return p == std::string::npos ? line : line.substr(p + 2);
    }
  return "unknown cpu";
}

std::string loadavg() {
  std::ifstream f("/proc/loadavg");
  double a = 0, b = 0, c = 0;
  if (f >> a >> b >> c) return fmt("%.2f", a) + " " + fmt("%.2f", b) + " " + fmt("%.2f", c);
  return "?";
}

void usage() {
  std::printf(
      "usage: tensor_bench [--quick] [--threads=N] [--samples=N] [--filter=SUBSTR] [--strict]\n"
      "  --quick        few short samples (smoke test)\n"
      "  --threads=N    threads for troupe, libtorch and OpenBLAS (default: troupe's default = cores)\n"
      "  --samples=N    samples per side (median reported; default 15, quick 3)\n"
      "  --filter=S     only cases whose name contains S\n"
      "  --strict       exit 1 when a target is missed\n");
}

}  // namespace

int main(int argc, char** argv) {
  int samples = -1;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--quick") cfg.quick = true;
    else if (a == "--strict") cfg.strict = true;
    else if (a.rfind("--threads=", 0) == 0) cfg.threads = std::atoi(a.c_str() + 10);
    else if (a.rfind("--samples=", 0) == 0) samples = std::atoi(a.c_str() + 10);
    else if (a.rfind("--filter=", 0) == 0) cfg.filter = a.substr(9);
    else if (a.rfind("--benchmark_", 0) == 0) std::fprintf(stderr, "tensor_bench: ignoring %s\n", a.c_str());
    else if (a == "-h" || a == "--help") {
      usage();
      return 0;
    } else {
      std::fprintf(stderr, "tensor_bench: unknown argument '%s'\n", a.c_str());
      usage();
      return 2;
    }
  }
  if (cfg.quick) {
    cfg.samples = 3;
    cfg.sample_ms = 5;
    cfg.warmup_ms = 10;
  }
  if (samples > 0) cfg.samples = samples;

  int n = cfg.threads > 0 ? cfg.threads : troupe::get_num_threads();
  troupe::set_num_threads(n);
  if (openblas_set_num_threads) openblas_set_num_threads(n);
  int blas_threads = openblas_get_num_threads ? openblas_get_num_threads() : -1;
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
  std::printf("ratio = peer_time / troupe_time (> 1: troupe faster; median of back-to-back sample pairs); "
              "bandwidth rows: troupe GB/s / memcpy GB/s\n\n");
  print_header();

  try {
    bench_sgemm(1024);
    bench_sgemm(2048);
    bench_elementwise(n);
    bench_mlp("small", 64, 32, 64, 2.0);
    bench_mlp("large", 256, 784, 1024, 1.0);
    bench_informative();
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "tensor_bench: error: %s\n", e.what());
    return 1;
  }

  std::printf("\n");
  for (const auto& s : notes) std::printf("%s\n", s.c_str());
  std::printf("targets: %d PASS, %d MISS; correctness checks: %s; load average at end %s\n", passes, misses,
              check_failures ? "FAILED" : "ok", loadavg().c_str());
  if (check_failures) return 1;
  if (cfg.strict && misses) return 1;
  return 0;
}
