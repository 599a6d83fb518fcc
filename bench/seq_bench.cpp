// seq_bench: troupe's sequence layers beside libtorch's, in the same process, with the harness's table of
// ratios and targets (see nn_bench.cpp for the timing method).
//
//   LSTM step          nn::LSTM(256, 256), input (seq 64, batch 32, 256): zero_grad + forward +
//                      mse_loss(output, target) + backward
//   encoder layer step nn::TransformerEncoderLayer(d_model 256, 8 heads, dim_feedforward 1024,
//                      dropout 0), input (seq 128, batch 16, 256), the same step
//
// Both sides start from the same weights (copied by parameter name) and their losses and gradients are
// checked to agree before timing. ratio = libtorch_time / troupe_time (> 1: troupe faster).
//
// Flags: --quick, --threads=N, --samples=N, --filter=SUBSTR, --strict (as nn_bench).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <troupe/nn/functional/loss.h>
#include <troupe/nn/module.h>
#include <troupe/nn/modules/rnn.h>
#include <troupe/nn/modules/transformer.h>
#include <troupe/tensor/autograd.h>
#include <troupe/tensor/ops.h>
#include <troupe/tensor/tensor.h>

#if defined(TROUPE_HAVE_LIBTORCH)
#include <torch/torch.h>
#endif

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

#if defined(TROUPE_HAVE_LIBTORCH)
// Largest normwise relative difference over same-named parameter gradients.
double max_grad_diff(const nn::Module& a, torch::nn::Module& b) {
  auto tp = b.named_parameters();
  double worst = 0;
  auto ap = a.named_parameters();
  for (const auto& [k, p] : ap.items()) {
    torch::Tensor* q = tp.find(k);
    if (!q || !p.grad().defined() || !q->grad().defined()) return std::numeric_limits<double>::infinity();
    troupe::Tensor g = p.grad().contiguous();
    torch::Tensor h = q->grad().contiguous();
    worst = std::max(worst, rel_diff(g.data_ptr<float>(), h.data_ptr<float>(), g.numel()));
  }
  return worst;
}

template <typename FT, typename FP>
void check_step(const std::string& label, nn::Module& tnet, torch::nn::Module& pnet, FT troupe_step, FP torch_step) {
  float v1 = troupe_step().template item<float>();
  float v2 = torch_step().template item<float>();
  double dl = std::abs(double(v1) - v2) / std::max(1e-30, std::abs(double(v2)));
  double dg = max_grad_diff(tnet, pnet);
  bool ok = dl <= 1e-4 && dg <= 1e-3;
  note("check " + label + ": loss troupe " + fmt("%.6g", v1) + " libtorch " + fmt("%.6g", v2) + " (rel " +
       fmt("%.1e", dl) + "), max grad rel " + fmt("%.1e", dg) + " over " +
       std::to_string(tnet.named_parameters().size()) + " parameters" + (ok ? "  -> OK" : "  -> MISMATCH"));
  if (!ok) ++check_failures;
}
#endif

void bench_lstm(int64_t T, int64_t B, int64_t in, int64_t H, double target) {
  std::string name = "LSTM step seq " + std::to_string(T) + " b" + std::to_string(B) + " " + std::to_string(in) +
                     "->" + std::to_string(H) + " vs libtorch";
  if (!selected(name)) return;
  nn::LSTM lstm(in, H);
  troupe::Tensor x = troupe::randn({T, B, in});
  troupe::Tensor y = troupe::randn({T, B, H});
  auto troupe_step = [&] {
    lstm->zero_grad(true);
    auto [out, st] = lstm(x);
    troupe::Tensor loss = F::mse_loss(out, y);
    loss.backward();
    return loss;
  };
#if defined(TROUPE_HAVE_LIBTORCH)
  torch::nn::LSTM tl(torch::nn::LSTMOptions(in, H));
  if (!copy_state(*lstm, *tl)) {
    ++check_failures;
    note(name + ": parameter names or shapes differ");
  }
  torch::Tensor tx = to_torch(x), ty = to_torch(y);
  auto torch_step = [&] {
    tl->zero_grad(true);
    auto out = std::get<0>(tl->forward(tx));
    torch::Tensor loss = torch::mse_loss(out, ty);
    loss.backward();
    return loss;
  };
  check_step("LSTM", *lstm, *tl, troupe_step, torch_step);
  auto [tt, tp, ratio] = compare([&] { do_not_optimize(troupe_step()); }, [&] { do_not_optimize(torch_step()); });
  row(name, fmt_time(tt), fmt_time(tp), ratio, target);
#else
  double tt = time_one([&] { do_not_optimize(troupe_step()); });
  row(name, fmt_time(tt), kNoTorch, kNaN, target);
#endif
}

void bench_encoder_layer(int64_t S, int64_t B, int64_t d, int64_t heads, int64_t ff, double target) {
  std::string name = "encoder layer step seq " + std::to_string(S) + " b" + std::to_string(B) + " d" +
                     std::to_string(d) + " h" + std::to_string(heads) + " vs libtorch";
  if (!selected(name)) return;
  nn::TransformerEncoderLayer layer(nn::TransformerEncoderLayerOptions(d, heads).dim_feedforward(ff).dropout(0.0));
  troupe::Tensor x = troupe::randn({S, B, d});
  troupe::Tensor y = troupe::randn({S, B, d});
  auto troupe_step = [&] {
    layer->zero_grad(true);
    troupe::Tensor loss = F::mse_loss(layer(x), y);
    loss.backward();
    return loss;
  };
#if defined(TROUPE_HAVE_LIBTORCH)
  torch::nn::TransformerEncoderLayer tl(torch::nn::TransformerEncoderLayerOptions(d, heads).dim_feedforward(ff).dropout(0.0));
  if (!copy_state(*layer.ptr(), *tl)) {
    ++check_failures;
    note(name + ": parameter names or shapes differ");
  }
  torch::Tensor tx = to_torch(x), ty = to_torch(y);
  auto torch_step = [&] {
    tl->zero_grad(true);
    torch::Tensor loss = torch::mse_loss(tl->forward(tx), ty);
    loss.backward();
    return loss;
  };
  check_step("encoder layer", *layer.ptr(), *tl, troupe_step, torch_step);
  auto [tt, tp, ratio] = compare([&] { do_not_optimize(troupe_step()); }, [&] { do_not_optimize(torch_step()); });
  row(name, fmt_time(tt), fmt_time(tp), ratio, target);
#else
  double tt = time_one([&] { do_not_optimize(troupe_step()); });
  row(name, fmt_time(tt), kNoTorch, kNaN, target);
#endif
}

}  // namespace

int main(int argc, char** argv) {
  if (int rc = parse_args(argc, argv, "seq_bench"); rc >= 0) return rc;
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
  std::printf("seq_bench%s: %s, %d cpus; load average %s\n", cfg.quick ? " --quick" : "", cpu_name().c_str(),
              omp_get_num_procs(), loadavg().c_str());
  std::printf("threads: troupe %d, libtorch %s, OpenBLAS %d; median of %d samples (>= %.0f ms each), "
              "troupe and peer sampled alternately\n",
              troupe::get_num_threads(), torch_threads.c_str(), blas_threads, cfg.samples, cfg.sample_ms);
  std::printf("ratio = peer_time / troupe_time (> 1: troupe faster; median of back-to-back sample pairs)\n\n");
  kW0 = 58;
  kW2 = 26;
  print_header();
  try {
    bench_lstm(64, 32, 256, 256, 1.0);
    bench_encoder_layer(128, 16, 256, 8, 1024, 1.0);
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "seq_bench: error: %s\n", e.what());
    return 1;
  }
  return finish();
}
