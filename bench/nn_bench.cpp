// nn_bench: troupe's nn modules beside libtorch's torch::nn, in the same process, with a table of
// ratios and targets (the harness, timing method and output of tensor_bench.cpp).
//
//   MLP step    nn::Sequential(Linear, ReLU, Linear, ReLU, Linear), zero_grad + forward + mse_loss +
//               backward, small (batch 16, 32-64-64-10) and large (batch 256, 784-1024-1024-10)
//   conv net    Conv2d(1,8,3,p1) BatchNorm2d ReLU MaxPool2d(2) Conv2d(8,16,3,p1) ReLU MaxPool2d(2)
//               Flatten Linear(784,10), train mode, same step, on (N, 1, 28, 28) at N = 8 and 64
//   conv layers Conv1d(32,64,5,p2) on (16, 32, 256) and ConvTranspose2d(32,16,4,s2,p1) on (8, 32, 16, 16): the
//               same step (zero_grad, forward, mse_loss, backward) with one layer
//   hooks       forward through nn::Sequential of 100 Linear(4,4) (batch 1): no hooks, a forward hook
//               on every layer, a forward pre-hook on every layer (hooks that return nothing); and the
//               same Sequential in libtorch (which has no module hooks) for reference; with autograd
//               recording and under no_grad
//
// Both sides start from the same weights (troupe's are copied into libtorch by parameter name) and
// their losses and gradients are checked to agree before timing.
//
// Timing: a manual timer on std::chrono::steady_clock. Each case is warmed up, then each side gets an
// inner repeat count so that one sample lasts at least `sample_ms`; samples of the two sides are taken
// alternately (so that both see the same background load) and the median per call is reported.
// ratio = peer_time / troupe_time (> 1: troupe faster), as the median over back-to-back sample pairs
// (robust to drifts of machine speed); in the hook rows ratio = hooked_time / plain_time (troupe both).
//
// Flags: --quick (few samples), --threads=N, --samples=N, --filter=SUBSTR (cases whose name contains
// SUBSTR), --strict (exit 1 when a target is missed). Google Benchmark flags (--benchmark_*) are
// accepted and ignored, so that scripts/bench.sh can pass them to every bench.
// Exit status: 1 when a correctness check fails (or a target is missed under --strict), else 0.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <troupe/nn/functional/loss.h>
#include <troupe/nn/module.h>
#include <troupe/nn/modules/activation.h>
#include <troupe/nn/modules/batchnorm.h>
#include <troupe/nn/modules/container.h>
#include <troupe/nn/modules/conv.h>
#include <troupe/nn/modules/linear.h>
#include <troupe/nn/modules/pooling.h>
#include <troupe/tensor/autograd.h>
#include <troupe/tensor/ops.h>
#include <troupe/tensor/random.h>
#include <troupe/tensor/tensor.h>

#if defined(TROUPE_HAVE_LIBTORCH)
#include <torch/torch.h>
#endif

// OpenBLAS extension (declared in OpenBLAS's cblas.h; repeated so other CBLAS headers compile too).
extern "C" {
void openblas_set_num_threads(int num_threads) __attribute__((weak));
int openblas_get_num_threads(void) __attribute__((weak));
}

#include "harness.h"
#include "torch_compat.h"

namespace {

namespace nn = troupe::nn;
namespace F = troupe::nn::functional;
[[maybe_unused]] const char* kNoTorch = "n/a (built without libtorch)";

troupe::Tensor t_randn(std::vector<int64_t> sizes) {
  return troupe::randn(sizes, troupe::TensorOptions().dtype(troupe::kFloat32));
}

#if defined(TROUPE_HAVE_LIBTORCH)
// Largest normwise relative difference over the gradients of same-named parameters (inf when one
// side has a gradient the other lacks). The denominator of each is floored at 1% of the largest
// gradient entry of the model: a conv bias followed by BatchNorm has a zero gradient up to rounding.
double max_grad_diff(const nn::Module& a, torch::nn::Module& b) {
  auto ap = a.named_parameters();
  auto tp = b.named_parameters();
  double global = 0;
  for (const auto& it : tp.items())
    if (it.value().grad().defined()) global = std::max(global, it.value().grad().abs().max().item<double>());
  double worst = 0;
  for (const auto& [k, p] : ap.items()) {
    torch::Tensor* q = tp.find(k);
    if (!q) return std::numeric_limits<double>::infinity();
    troupe::Tensor g = p.grad();
    torch::Tensor h = q->grad();
    if (g.defined() != h.defined()) return std::numeric_limits<double>::infinity();
    if (!g.defined()) continue;
    troupe::Tensor gc = g.contiguous();
    torch::Tensor hc = h.contiguous();
    const float* pa = gc.data_ptr<float>();
    const float* pb = hc.data_ptr<float>();
    double d = 0, m = 0.01 * global;
    for (int64_t i = 0; i < gc.numel(); ++i) {
      d = std::max(d, std::abs(double(pa[i]) - double(pb[i])));
      m = std::max(m, std::abs(double(pb[i])));
    }
    worst = std::max(worst, d / std::max(m, 1e-30));
  }
  return worst;
}

// Runs one step on each side (from equal weights) and records the agreement of loss and gradients.
template <typename FT, typename FP>
void check_step(const std::string& label, nn::Module& tnet, torch::nn::Module& pnet, FT troupe_step,
                FP torch_step) {
  float v1 = troupe_step().template item<float>();
  float v2 = torch_step().template item<float>();
  double dl = std::abs(double(v1) - v2) / std::max(1e-30, std::abs(double(v2)));
  double dg = max_grad_diff(tnet, pnet);
  bool ok = dl <= 1e-4 && dg <= 1e-4;
  note("check " + label + ": loss troupe " + fmt("%.6g", v1) + " libtorch " + fmt("%.6g", v2) + " (rel " +
       fmt("%.1e", dl) + "), max grad rel " + fmt("%.1e", dg) + " over " +
       std::to_string(tnet.named_parameters().size()) + " parameters" +
       (ok ? "  -> OK (<= 1e-4)" : "  -> MISMATCH (> 1e-4)"));
  if (!ok) ++check_failures;
}
#endif

// ------------------------------------------------------------------------------------------ cases
// MLP: Sequential(Linear(d0,d1), ReLU, Linear(d1,d2), ReLU, Linear(d2,d3)); step = zero_grad (set to
// None on both sides) + forward + mse_loss + backward.
void bench_mlp(const std::string& label, int64_t batch, std::vector<int64_t> d, double target) {
  std::string name = "MLP step " + label + " b" + std::to_string(batch) + " " + std::to_string(d[0]) + "-" +
                     std::to_string(d[1]) + "-" + std::to_string(d[2]) + "-" + std::to_string(d[3]) + " vs libtorch";
  if (!selected(name)) return;
  auto net = std::make_shared<nn::SequentialImpl>(
      std::make_shared<nn::LinearImpl>(d[0], d[1]), std::make_shared<nn::ReLUImpl>(), std::make_shared<nn::LinearImpl>(d[1], d[2]),
      std::make_shared<nn::ReLUImpl>(), std::make_shared<nn::LinearImpl>(d[2], d[3]));
  troupe::Tensor x = t_randn({batch, d[0]});
  troupe::Tensor y = t_randn({batch, d[3]});
  auto troupe_step = [&] {
    net->zero_grad(true);
    troupe::Tensor loss = F::mse_loss((*net)(x), y);
    loss.backward();
    return loss;
  };
#if defined(TROUPE_HAVE_LIBTORCH)
  torch::nn::Sequential tnet(torch::nn::Linear(d[0], d[1]), torch::nn::ReLU(), torch::nn::Linear(d[1], d[2]),
                             torch::nn::ReLU(), torch::nn::Linear(d[2], d[3]));
  if (!copy_state(*net, *tnet)) {
    ++check_failures;
    note(name + ": parameter names or shapes differ between troupe and libtorch");
  }
  torch::Tensor tx = to_torch(x), ty = to_torch(y);
  auto torch_step = [&] {
    tnet->zero_grad(true);
    torch::Tensor loss = torch::mse_loss(tnet->forward(tx), ty);
    loss.backward();
    return loss;
  };
  check_step(label + " MLP", *net, *tnet, troupe_step, torch_step);
  auto [tt, tp, ratio] = compare([&] { do_not_optimize(troupe_step()); }, [&] { do_not_optimize(torch_step()); });
  row(name, fmt_time(tt), fmt_time(tp), ratio, target);
#else
  double tt = time_one([&] { do_not_optimize(troupe_step()); });
  row(name, fmt_time(tt), kNoTorch, kNaN, target);
#endif
}

// Small conv net (MNIST-sized input), train mode; the same step as the MLP.
void bench_convnet(const std::string& label, int64_t batch) {
  std::string name = "conv net step " + label + " (" + std::to_string(batch) + ", 1, 28, 28) vs libtorch";
  if (!selected(name)) return;
  auto net = std::make_shared<nn::SequentialImpl>(
      std::make_shared<nn::Conv2dImpl>(nn::Conv2dOptions(1, 8, 3).padding(1)), std::make_shared<nn::BatchNorm2dImpl>(8),
      std::make_shared<nn::ReLUImpl>(), std::make_shared<nn::MaxPool2dImpl>(2),
      std::make_shared<nn::Conv2dImpl>(nn::Conv2dOptions(8, 16, 3).padding(1)), std::make_shared<nn::ReLUImpl>(),
      std::make_shared<nn::MaxPool2dImpl>(2), std::make_shared<nn::FlattenImpl>(),
      std::make_shared<nn::LinearImpl>(16 * 7 * 7, 10));
  net->train();
  troupe::Tensor x = t_randn({batch, 1, 28, 28});
  troupe::Tensor y = t_randn({batch, 10});
  auto troupe_step = [&] {
    net->zero_grad(true);
    troupe::Tensor loss = F::mse_loss((*net)(x), y);
    loss.backward();
    return loss;
  };
#if defined(TROUPE_HAVE_LIBTORCH)
  namespace tn = torch::nn;
  tn::Sequential tnet(tn::Conv2d(tn::Conv2dOptions(1, 8, 3).padding(1)), tn::BatchNorm2d(8), tn::ReLU(),
                      tn::MaxPool2d(tn::MaxPool2dOptions(2)), tn::Conv2d(tn::Conv2dOptions(8, 16, 3).padding(1)),
                      tn::ReLU(), tn::MaxPool2d(tn::MaxPool2dOptions(2)), tn::Flatten(), tn::Linear(16 * 7 * 7, 10));
  tnet->train();
  if (!copy_state(*net, *tnet)) {
    ++check_failures;
    note(name + ": parameter/buffer names or shapes differ between troupe and libtorch");
  }
  torch::Tensor tx = to_torch(x), ty = to_torch(y);
  auto torch_step = [&] {
    tnet->zero_grad(true);
    torch::Tensor loss = torch::mse_loss(tnet->forward(tx), ty);
    loss.backward();
    return loss;
  };
  check_step(label + " conv net", *net, *tnet, troupe_step, torch_step);
  auto [tt, tp, ratio] = compare([&] { do_not_optimize(troupe_step()); }, [&] { do_not_optimize(torch_step()); });
  row(name, fmt_time(tt), fmt_time(tp), ratio, kNaN);
#else
  double tt = time_one([&] { do_not_optimize(troupe_step()); });
  row(name, fmt_time(tt), kNoTorch, kNaN, kNaN);
#endif
}

// One conv layer, train step as above: troupe's module and libtorch's, made by the callers with the same
// options (the weights are then copied across).
template <typename TM, typename PM>
void bench_conv_layer(const std::string& name, std::shared_ptr<TM> layer, PM tlayer, std::vector<int64_t> in_shape) {
  if (!selected(name)) return;
  troupe::Tensor x = t_randn(in_shape);
  troupe::Tensor y;
  {
    troupe::NoGradGuard ng;
    y = troupe::randn_like((*layer)(x));
  }
  auto troupe_step = [&] {
    layer->zero_grad(true);
    troupe::Tensor loss = F::mse_loss((*layer)(x), y);
    loss.backward();
    return loss;
  };
#if defined(TROUPE_HAVE_LIBTORCH)
  if (!copy_state(*layer, *tlayer)) {
    ++check_failures;
    note(name + ": parameter names or shapes differ between troupe and libtorch");
  }
  torch::Tensor tx = to_torch(x), ty = to_torch(y);
  auto torch_step = [&] {
    tlayer->zero_grad(true);
    torch::Tensor loss = torch::mse_loss(tlayer->forward(tx), ty);
    loss.backward();
    return loss;
  };
  check_step(name.substr(0, name.find(' ')), *layer, *tlayer, troupe_step, torch_step);
  auto [tt, tp, ratio] = compare([&] { do_not_optimize(troupe_step()); }, [&] { do_not_optimize(torch_step()); });
  row(name, fmt_time(tt), fmt_time(tp), ratio, kNaN);
#else
  (void)tlayer;
  double tt = time_one([&] { do_not_optimize(troupe_step()); });
  row(name, fmt_time(tt), kNoTorch, kNaN, kNaN);
#endif
}

void bench_conv_layers() {
#if defined(TROUPE_HAVE_LIBTORCH)
  namespace tn = torch::nn;
  auto c1 = tn::Conv1d(tn::Conv1dOptions(32, 64, 5).padding(2));
  auto ct = tn::ConvTranspose2d(tn::ConvTranspose2dOptions(32, 16, 4).stride(2).padding(1));
#else
  int c1 = 0, ct = 0;
#endif
  bench_conv_layer("Conv1d(32,64,5,p2) step (16, 32, 256) vs libtorch",
                   std::make_shared<nn::Conv1dImpl>(nn::Conv1dOptions(32, 64, 5).padding(2)), c1, {16, 32, 256});
  bench_conv_layer("ConvTranspose2d(32,16,4,s2,p1) step (8, 32, 16, 16) vs libtorch",
                   std::make_shared<nn::ConvTranspose2dImpl>(nn::ConvTranspose2dOptions(32, 16, 4).stride(2).padding(1)),
                   ct, {8, 32, 16, 16});
}

// Hook machinery: forward through 100 Linear(4,4) at batch 1, with autograd recording (as in training)
// or under no_grad (which leaves the module call path and the kernels alone).
void bench_hooks(bool grad) {
  const int64_t layers = 100;
  const std::string base = std::string("hooks 100 x Linear(4,4) b1 ") + (grad ? "fwd: " : "no_grad: ");
  std::string names[3] = {base + "none vs libtorch", base + "fwd hook / none", base + "pre-hook / none"};
  if (!selected(names[0]) && !selected(names[1]) && !selected(names[2])) return;
  auto make = [&] {
    auto s = std::make_shared<nn::SequentialImpl>();
    for (int64_t i = 0; i < layers; ++i) s->push_back(std::make_shared<nn::LinearImpl>(4, 4));
    return s;
  };
  std::optional<troupe::NoGradGuard> no_grad;
  if (!grad) no_grad.emplace();
#if defined(TROUPE_HAVE_LIBTORCH)
  std::optional<torch::NoGradGuard> torch_no_grad;
  if (!grad) torch_no_grad.emplace();
#endif
  auto plain = make(), fwd = make(), pre = make();
  int64_t calls = 0;  // the hooks count their calls, so that they are not optimised away
  std::vector<nn::RemovableHandle> handles;
  for (const auto& m : fwd->modules_list())
    handles.push_back(m->register_forward_hook([&calls](nn::Module&, const nn::Args&, const nn::Value&) { ++calls; }));
  for (const auto& m : pre->modules_list())
    handles.push_back(m->register_forward_pre_hook([&calls](nn::Module&, const nn::Args&) { ++calls; }));
  troupe::Tensor x = t_randn({1, 4});
  {  // once: each hook runs once per forward, and the hooked nets compute what the plain one does
    int64_t before = calls;
    (*fwd)(x);
    (*pre)(x);
    if (calls - before != 2 * layers) {
      ++check_failures;
      note("hooks: expected " + std::to_string(2 * layers) + " hook calls per forward pair, got " +
           std::to_string(calls - before));
    }
  }
  auto run_plain = [&] { do_not_optimize((*plain)(x)); };
#if defined(TROUPE_HAVE_LIBTORCH)
  if (selected(names[0])) {
    torch::nn::Sequential tnet;
    for (int64_t i = 0; i < layers; ++i) tnet->push_back(torch::nn::Linear(4, 4));
    if (!copy_state(*plain, *tnet)) {
      ++check_failures;
      note("hooks: parameter names differ between troupe and libtorch");
    }
    torch::Tensor tx = to_torch(x);
    troupe::Tensor o1 = (*plain)(x).contiguous();
    torch::Tensor o2 = tnet->forward(tx).contiguous();
    double d = rel_diff(o1.data_ptr<float>(), o2.data_ptr<float>(), o1.numel());
    bool ok = d <= 1e-4;
    note(std::string("check hooks net (") + (grad ? "grad" : "no_grad") + "): output rel " + fmt("%.1e", d) +
         (ok ? "  -> OK (<= 1e-4)" : "  -> MISMATCH (> 1e-4)"));
    if (!ok) ++check_failures;
    auto [tt, tp, ratio] = compare(run_plain, [&] { do_not_optimize(tnet->forward(tx)); });
    row(names[0], fmt_time(tt) + fmt("  %.0f ns/layer", tt * 1e6 / layers),
        fmt_time(tp) + fmt("  %.0f ns/layer", tp * 1e6 / layers), ratio, kNaN);
  }
#else
  if (selected(names[0])) {
    double tt = time_one(run_plain);
    row(names[0], fmt_time(tt) + fmt("  %.0f ns/layer", tt * 1e6 / layers), kNoTorch, kNaN, kNaN);
  }
#endif
  // troupe column: the hooked forward and its extra time per layer, (ratio - 1) x plain time / layers
  // (from the paired ratio, which is steadier than a difference of medians); peer column: the plain
  // forward
  auto hook_row = [&](const std::string& name, const std::shared_ptr<nn::SequentialImpl>& hooked) {
    if (!selected(name)) return;
    auto [tp, th, ratio] = compare(run_plain, [&] { do_not_optimize((*hooked)(x)); });
    row(name, fmt_time(th) + fmt("  %+.0f ns/layer", (ratio - 1) * tp * 1e6 / layers), "no hooks " + fmt_time(tp),
        ratio, kNaN);
  };
  hook_row(names[1], fwd);
  hook_row(names[2], pre);
  for (auto& h : handles) h.remove();
}


}  // namespace

int main(int argc, char** argv) {
  if (int rc = parse_args(argc, argv, "nn_bench"); rc >= 0) return rc;

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

  std::printf("nn_bench%s: %s, %d cpus; load average %s\n", cfg.quick ? " --quick" : "", cpu_name().c_str(),
              omp_get_num_procs(), loadavg().c_str());
  std::printf("threads: troupe %d, libtorch %s, OpenBLAS %d; median of %d samples (>= %.0f ms each), "
              "troupe and peer sampled alternately\n",
              troupe::get_num_threads(), torch_threads.c_str(), blas_threads, cfg.samples, cfg.sample_ms);
  std::printf("ratio = peer_time / troupe_time (> 1: troupe faster; median of back-to-back sample pairs); "
              "hook rows: hooked / plain time\n\n");
  kW0 = 58;  // nn_bench's case names are longer, its peer column shorter
  kW2 = 26;
  print_header();

  try {
    bench_mlp("small", 16, {32, 64, 64, 10}, 2.0);
    bench_mlp("large", 256, {784, 1024, 1024, 10}, 1.0);
    bench_convnet("small", 8);
    bench_convnet("large", 64);
    bench_conv_layers();
    bench_hooks(true);
    bench_hooks(false);
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "nn_bench: error: %s\n", e.what());
    return 1;
  }

  return finish();
}
