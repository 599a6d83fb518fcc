// The timing harness and result table shared by the benchmarks (tensor_bench, nn_bench): alternating
// samples of troupe and its peer, medians, ratios over back-to-back sample pairs, and the PASS/MISS
// table. Included by one .cpp per executable (everything is in an anonymous namespace).
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <troupe/tools/cli.h>

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

// Column widths of the table (a bench may widen the case and peer columns before print_header()).
inline int kW0 = 54, kW1 = 26, kW2 = 30, kW3 = 7, kW4 = 8;

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
[[maybe_unused]] double rel_diff(const float* a, const float* b, int64_t n) {
  double d = 0, m = 0;
  for (int64_t i = 0; i < n; ++i) {
    d = std::max(d, std::abs(double(a[i]) - double(b[i])));
    m = std::max(m, std::abs(double(b[i])));
  }
  return d / std::max(m, 1e-30);
}

// ------------------------------------------------------------------------------------------ machine
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

// ------------------------------------------------------------------------------------- main helpers
// Parses the flags every bench takes (tools/cli.h): --quick (few short samples), --strict (exit 1 on a
// missed target), --threads=N, --samples=N, --filter=SUBSTR; `extra` declares a bench's own. Google
// Benchmark's --benchmark_* flags are ignored so that scripts/bench.sh can pass them to every bench.
// Returns -1 to go on; --help exits 0, a bad flag exits 2 with one line.
[[maybe_unused]] int parse_args(int argc, char** argv, const char* prog,
                                const std::function<void(troupe::cli::App&)>& extra = {}) {
  std::vector<char*> kept{argv[0]};
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]).rfind("--benchmark_", 0) == 0) std::fprintf(stderr, "%s: ignoring %s\n", prog, argv[i]);
    else kept.push_back(argv[i]);
  }
  int samples = -1;
  troupe::cli::App app(prog, "A benchmark against its peer (bench/README.md).");
  app.add_flag("--quick", cfg.quick, "few short samples");
  app.add_flag("--strict", cfg.strict, "exit 1 when a target is missed");
  app.add_option("--threads", cfg.threads, "threads of the CPU kernels")->check(troupe::cli::Positive);
  app.add_option("--samples", samples, "samples per case")->check(troupe::cli::Positive);
  app.add_option("--filter", cfg.filter, "only cases whose name contains this");
  if (extra) extra(app);
  troupe::cli::parse(app, static_cast<int>(kept.size()), kept.data());
  if (cfg.quick) {
    cfg.samples = 3;
    cfg.sample_ms = 5;
    cfg.warmup_ms = 10;
  }
  if (samples > 0) cfg.samples = samples;
  return -1;
}

// Prints the notes and the PASS/MISS summary; returns main's exit status (1 when a correctness check
// failed, or a target was missed under --strict).
[[maybe_unused]] int finish() {
  std::printf("\n");
  for (const auto& s : notes) std::printf("%s\n", s.c_str());
  std::printf("targets: %d PASS, %d MISS; correctness checks: %s; load average at end %s\n", passes, misses,
              check_failures ? "FAILED" : "ok", loadavg().c_str());
  if (check_failures) return 1;
  return cfg.strict && misses ? 1 : 0;
}

}  // namespace
