// digits_bench: the wall time of examples/train_digits' training against the same model trained by
// libtorch 1.13, in the same process: same weights at the start (troupe's copied into libtorch by
// name), the same batches in the same order, SGD(lr 0.05, momentum 0.9, weight_decay 1e-4),
// CrossEntropyLoss. One call = one epoch of the 1,437 training images in batches of 32 (45 steps).
//
// The models are examples/digits_models.h's (MLP 64-512-10; conv net with two Conv2d + BatchNorm2d).
//
// Before timing, both sides train one epoch from equal weights and their final losses are checked to
// agree. ratio = libtorch_time / troupe_time (> 1: troupe faster). Flags: --quick, --threads=N,
// --samples=N, --filter=SUBSTR, --strict; --benchmark_* flags are ignored.
#include <omp.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <troupe/troupe.h>

#if defined(TROUPE_HAVE_LIBTORCH)
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
namespace optim = troupe::optim;
namespace data = troupe::data;
using troupe::Tensor;

struct Batches {
  std::vector<Tensor> x, y;
#if defined(TROUPE_HAVE_LIBTORCH)
  std::vector<torch::Tensor> tx, ty;
#endif
};

// One epoch of shuffled training batches, taken from troupe's DataLoader once, for both sides.
Batches make_batches() {
  auto digits = data::Digits::load(data::default_digits_path());
  auto split = data::random_split(digits, {0.8, 0.2}, 42);
  data::DataLoader loader(split[0], data::DataLoaderOptions().batch_size(32).shuffle(true).seed(0));
  Batches b;
  for (auto& batch : loader) {
    b.x.push_back(batch.data.contiguous());
    b.y.push_back(batch.target.contiguous());
#if defined(TROUPE_HAVE_LIBTORCH)
    b.tx.push_back(to_torch(batch.data));
    Tensor y = batch.target.contiguous();
    b.ty.push_back(torch::from_blob(y.data_ptr<int64_t>(), {y.size(0)}, torch::kInt64).clone());
#endif
  }
  return b;
}

#if defined(TROUPE_HAVE_LIBTORCH)
torch::nn::Sequential torch_mlp() {
  namespace tn = torch::nn;
  return tn::Sequential(tn::Flatten(), tn::Linear(64, 512), tn::ReLU(), tn::Linear(512, 10));
}

torch::nn::Sequential torch_conv() {
  namespace tn = torch::nn;
  return tn::Sequential(tn::Conv2d(tn::Conv2dOptions(1, 16, 3).padding(1)), tn::BatchNorm2d(16), tn::ReLU(),
                        tn::MaxPool2d(2), tn::Conv2d(tn::Conv2dOptions(16, 32, 3).padding(1)), tn::BatchNorm2d(32), tn::ReLU(),
                        tn::MaxPool2d(2), tn::Flatten(), tn::Linear(32 * 2 * 2, 10));
}
#endif

void bench_model(const std::string& label, const Batches& b, bool conv) {
  const std::string name = "digits " + label + " epoch (45 SGD steps, batch 32)";
  if (!selected(name)) return;
  auto model = conv ? digits::make_conv_net() : digits::make_mlp();
  optim::SGD opt(model->parameters(), optim::SGDOptions(0.05).momentum(0.9).weight_decay(1e-4));
  nn::CrossEntropyLoss loss_fn;
  double troupe_loss = 0;
  auto troupe_epoch = [&] {
    for (size_t i = 0; i < b.x.size(); ++i) {
      Tensor loss = loss_fn((*model)(b.x[i]), b.y[i]);
      opt.zero_grad();
      loss.backward();
      opt.step();
      troupe_loss = loss.item<double>();
    }
  };
#if defined(TROUPE_HAVE_LIBTORCH)
  auto tmodel = conv ? torch_conv() : torch_mlp();
  if (!copy_state(*model, *tmodel)) {
    std::printf("%s: parameter names differ between troupe and libtorch\n", name.c_str());
    ++check_failures;
    return;
  }
  torch::optim::SGD topt(tmodel->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9).weight_decay(1e-4));
  double torch_loss = 0;
  auto torch_epoch = [&] {
    for (size_t i = 0; i < b.tx.size(); ++i) {
      torch::Tensor loss = torch::nn::functional::cross_entropy(tmodel->forward(b.tx[i]), b.ty[i]);
      topt.zero_grad();
      loss.backward();
      topt.step();
      torch_loss = loss.item<double>();
    }
  };
  // Correctness: one epoch from equal weights ends at nearly the same loss.
  troupe_epoch();
  torch_epoch();
  const double diff = std::abs(troupe_loss - torch_loss) / std::max(std::abs(torch_loss), 1e-6);
  if (diff > 1e-2) {
    std::printf("%s: last losses differ after one epoch: troupe %.6f, libtorch %.6f\n", name.c_str(), troupe_loss,
                torch_loss);
    ++check_failures;
  } else {
    note(name + ": after one epoch from equal weights, last batch loss troupe " + fmt("%.5f", troupe_loss) +
         ", libtorch " + fmt("%.5f", torch_loss));
  }
  Comparison c = compare(troupe_epoch, torch_epoch);
  row(name, fmt_time(c.a_ms), "libtorch " + fmt_time(c.b_ms), c.ratio, 1.0);
#else
  double ms = time_one(troupe_epoch);
  row(name, fmt_time(ms), "n/a (built without libtorch)", kNaN, kNaN);
#endif
}

}  // namespace

int main(int argc, char** argv) {
  if (int rc = parse_args(argc, argv, "digits_bench"); rc >= 0) return rc;
  const int n = cfg.threads > 0 ? cfg.threads : troupe::get_num_threads();
  troupe::set_num_threads(n);
  if (openblas_set_num_threads) openblas_set_num_threads(n);
#if defined(TROUPE_HAVE_LIBTORCH)
  torch::set_num_threads(n);
#endif
  troupe::manual_seed(0);
  std::printf("digits_bench%s: %s, %d cpus, %d threads each; load average %s\n", cfg.quick ? " --quick" : "",
              cpu_name().c_str(), omp_get_num_procs(), n, loadavg().c_str());
  std::printf("ratio = libtorch_time / troupe_time (> 1: troupe faster)\n\n");
  print_header();
  try {
    Batches b = make_batches();
    bench_model("MLP", b, false);
    bench_model("conv net", b, true);
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "digits_bench: error: %s\n", e.what());
    return 1;
  }
  return finish();
}
