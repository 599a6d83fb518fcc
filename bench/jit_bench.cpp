// jit_bench: a traced and compiled troupe module (jit::trace + ScriptModule::compile) against the same model
// run eagerly by troupe, and against PyTorch 1.13's TorchScript running the archive troupe's save() wrote
// (torch::jit::load in libtorch, the traced module's peer), in the same process.
//
//   MLP step         Linear(32,64) ReLU Linear(64,64) ReLU Linear(64,10), batch 16
//   digits conv net  examples/digits_models.h's conv net (two Conv2d + BatchNorm2d, train mode), batch 32 of
//                    (1, 8, 8) images
//
// One step = zero_grad (grads set to None) + forward + mse_loss + backward. Before timing, the compiled
// module's loss and gradients are checked against troupe eager (equal bit for bit) and against libtorch's
// (relative 1e-4; gradients relative to the largest gradient of the model). Each row: median per call of
// both sides over alternating samples; ratio = the median over back-to-back sample pairs of
// peer_time / compiled_time (> 1: compiled faster). The eager comparison is also timed in process CPU time
// (an informative row: on a loaded machine wall time mostly shows the scheduler's share). Flags: --quick, --threads=N, --samples=N,
// --filter=SUBSTR, --strict.
#include <omp.h>
#include <unistd.h>

#include <cmath>
#include <ctime>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <troupe/troupe.h>
#include <troupe/jit/jit.h>

#if defined(TROUPE_HAVE_LIBTORCH)
#include <torch/script.h>
#include <torch/torch.h>
#endif

extern "C" {
void openblas_set_num_threads(int num_threads) __attribute__((weak));
}

#include "harness.h"
#include "torch_compat.h"
#include "../examples/digits_models.h"

namespace {

namespace nn = troupe::nn;
namespace F = troupe::nn::functional;
namespace jit = troupe::jit;
[[maybe_unused]] const char* kNoTorch = "n/a (built without libtorch)";

// The process's CPU time in ms (all threads): on a loaded machine, where wall time mostly measures how the
// scheduler shared the cores, this is the work each side did.
double cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

// compare() on CPU time: alternating samples of at least cfg.sample_ms CPU ms each; medians per call and
// the median over sample pairs of b / a.
Comparison compare_cpu(const std::function<void()>& a, const std::function<void()>& b) {
  auto reps_for = [](const std::function<void()>& f) {
    for (int i = 0; i < 3; ++i) f();
    const double t0 = cpu_ms();
    int64_t n = 0;
    while (cpu_ms() - t0 < cfg.warmup_ms / 4) {
      f();
      ++n;
    }
    return std::max<int64_t>(1, static_cast<int64_t>(n * cfg.sample_ms / std::max(cpu_ms() - t0, 1e-3)));
  };
  const int64_t ra = reps_for(a), rb = reps_for(b);
  std::vector<double> ta, tb, ratios;
  auto sample = [](const std::function<void()>& f, int64_t reps, std::vector<double>& out) {
    const double t0 = cpu_ms();
    for (int64_t i = 0; i < reps; ++i) f();
    out.push_back((cpu_ms() - t0) / static_cast<double>(reps));
  };
  for (int s = 0; s < cfg.samples; ++s) {
    if (s % 2 == 0) {
      sample(a, ra, ta);
      sample(b, rb, tb);
    } else {
      sample(b, rb, tb);
      sample(a, ra, ta);
    }
    ratios.push_back(tb.back() / ta.back());
  }
  return {median(ta), median(tb), median(ratios)};
}

double max_rel(const troupe::Tensor& a, const troupe::Tensor& b) {
  if (!a.defined() || !b.defined()) return a.defined() == b.defined() ? 0 : INFINITY;
  const double scale = std::max(b.abs().max().item<double>(), 1e-30);
  return (a - b).abs().max().item<double>() / scale;
}

// One case: the eager module `net`, its traced copy compiled, and (with libtorch) PyTorch's load of the
// traced copy's archive; input x and target y.
void bench_case(const std::string& label, const std::shared_ptr<nn::Module>& net, const troupe::Tensor& x,
                const troupe::Tensor& y, double target) {
  const std::string eager_name = label + ": compiled vs troupe eager";
  const std::string torch_name = label + ": compiled vs torch.jit (libtorch)";
  if (!selected(eager_name) && !selected(torch_name)) return;
  jit::ScriptModulePtr traced = jit::trace(net, x);
  const std::string archive = "/tmp/troupe_jit_bench_" + std::to_string(::getpid()) + ".pt";
  traced->save(archive);  // before compile(): the archive holds the traced graph either way
  traced->compile();

  auto step = [&](nn::Module& m) {
    m.zero_grad(true);
    troupe::Tensor loss = F::mse_loss(m.call({nn::Value(x)}).tensor(), y);
    loss.backward();
    return loss;
  };
  // correctness: compiled == eager, bit for bit
  troupe::manual_seed(1);
  troupe::Tensor le = step(*net);
  troupe::manual_seed(1);
  troupe::Tensor lc = step(*traced);
  double worst = max_rel(lc, le);
  auto pe = net->named_parameters();
  auto pc = traced->named_parameters();
  for (const auto& [k, p] : pe) worst = std::max(worst, max_rel(pc[k].grad(), p.grad()));
  const bool same = worst == 0;
  note("check " + label + ": compiled vs eager, max rel diff of loss and grads " + fmt("%.1e", worst) +
       (same ? "  -> OK (equal)" : "  -> MISMATCH"));
  if (!same) ++check_failures;
  // buffers (BatchNorm's running statistics) were updated once more by the checks: resync the eager module
  {
    troupe::NoGradGuard ng;
    auto be = net->named_buffers();
    auto bc = traced->named_buffers();
    for (const auto& [k, b] : be) bc[k].copy_(b);
  }

  if (selected(eager_name)) {
    auto [tc, te, ratio] = compare([&] { do_not_optimize(step(*traced)); }, [&] { do_not_optimize(step(*net)); });
    row(eager_name, fmt_time(tc), "eager " + fmt_time(te), ratio, target);
    auto [cc, ce, cratio] = compare_cpu([&] { do_not_optimize(step(*traced)); }, [&] { do_not_optimize(step(*net)); });
    row(label + ": compiled vs troupe eager, CPU time", fmt_time(cc) + " cpu", "eager " + fmt_time(ce) + " cpu", cratio,
        kNaN);
  }
#if defined(TROUPE_HAVE_LIBTORCH)
  if (!selected(torch_name)) {
    std::remove(archive.c_str());
    return;
  }
  torch::jit::script::Module tm;
  try {
    tm = torch::jit::load(archive);
  } catch (...) {
    std::remove(archive.c_str());
    throw;
  }
  std::remove(archive.c_str());
  torch::Tensor tx = to_torch(x), ty = to_torch(y);
  auto torch_step = [&] {
    for (const torch::Tensor& p : tm.parameters()) p.mutable_grad() = torch::Tensor();
    torch::Tensor loss = torch::mse_loss(tm.forward({tx}).toTensor(), ty);
    loss.backward();
    return loss;
  };
  {
    troupe::manual_seed(1);
    troupe::Tensor l1 = step(*traced);
    torch::Tensor l2 = torch_step();
    double d = std::abs(l1.item<double>() - l2.item<double>()) / std::max(std::abs(l2.item<double>()), 1e-30);
    // gradients relative to the largest gradient of the model (a conv bias before BatchNorm has a zero
    // gradient up to rounding, which no per-tensor relative measure survives)
    double scale = 1e-30, worst_abs = 0;
    for (const auto& item : tm.named_parameters()) {
      const torch::Tensor g = item.value.grad().contiguous();
      troupe::Tensor tg = pc[item.name].grad().contiguous();
      const float* a = tg.data_ptr<float>();
      const float* b = g.data_ptr<float>();
      for (int64_t i = 0; i < g.numel(); ++i) {
        scale = std::max(scale, std::abs(double(b[i])));
        worst_abs = std::max(worst_abs, std::abs(double(a[i]) - double(b[i])));
      }
    }
    d = std::max(d, worst_abs / scale);
    const bool ok = d <= 1e-4;
    note("check " + label + ": compiled vs libtorch's torch::jit::load of troupe's archive, max rel diff " +
         fmt("%.1e", d) + (ok ? "  -> OK (<= 1e-4)" : "  -> MISMATCH (> 1e-4)"));
    if (!ok) ++check_failures;
  }
  {
    auto [tc, tt, ratio] = compare([&] { do_not_optimize(step(*traced)); }, [&] { do_not_optimize(torch_step()); });
    row(torch_name, fmt_time(tc), "torch.jit " + fmt_time(tt), ratio, target);
  }
#else
  std::remove(archive.c_str());
  if (selected(torch_name)) row(torch_name, "-", kNoTorch, kNaN, target);
#endif
}

}  // namespace

int main(int argc, char** argv) {
  if (int rc = parse_args(argc, argv, "jit_bench"); rc >= 0) return rc;
  int n = cfg.threads > 0 ? cfg.threads : troupe::get_num_threads();
  troupe::set_num_threads(n);
  if (openblas_set_num_threads) openblas_set_num_threads(n);
#if defined(TROUPE_HAVE_LIBTORCH)
  torch::set_num_threads(n);
  std::string torch_threads = std::to_string(torch::get_num_threads());
#else
  std::string torch_threads = "n/a";
#endif
  std::printf("jit_bench%s: %s, %d cpus; load average %s\n", cfg.quick ? " --quick" : "", cpu_name().c_str(),
              omp_get_num_procs(), loadavg().c_str());
  std::printf("threads: troupe %d, libtorch %s; median of %d samples (>= %.0f ms each), sides sampled alternately\n",
              troupe::get_num_threads(), torch_threads.c_str(), cfg.samples, cfg.sample_ms);
  std::printf("ratio = peer_time / compiled_time (> 1: compiled faster; median of back-to-back sample pairs)\n\n");
  kW0 = 62;
  print_header();
  try {
    troupe::manual_seed(0);
    {
      auto mlp = std::make_shared<nn::SequentialImpl>(
          std::make_shared<nn::LinearImpl>(32, 64), std::make_shared<nn::ReLUImpl>(), std::make_shared<nn::LinearImpl>(64, 64),
          std::make_shared<nn::ReLUImpl>(), std::make_shared<nn::LinearImpl>(64, 10));
      bench_case("MLP step b16 32-64-64-10", mlp, troupe::randn({16, 32}), troupe::randn({16, 10}), 1.2);
    }
    {
      nn::Sequential conv = digits::make_conv_net();
      conv->train();
      bench_case("digits conv net step b32 (1, 8, 8)", conv.ptr(), troupe::randn({32, 1, 8, 8}), troupe::randn({32, 10}),
                 kNaN);
    }
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "jit_bench: error: %s\n", e.what());
    return 1;
  }
  return finish();
}
