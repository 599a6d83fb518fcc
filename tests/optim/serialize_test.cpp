// troupe::save / troupe::load of an optimizer, as libtorch's torch::save(optimizer, path): a run
// saved after 3 steps and resumed into a new model and optimizer equals 6 uninterrupted steps to the
// last bit (SGD with momentum, Adam, two param groups with their own options), to files and streams;
// missing or mismatched state names the file.
#include <gtest/gtest.h>

#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <troupe/nn/archive.h>
#include <troupe/optim/optim.h>
#include <troupe/tensor/autograd.h>
#include <troupe/tensor/ops.h>

#include "checkpoint_helpers.h"

namespace {

using namespace troupe;
using troupe::testing::expect_error;
using troupe::testing::identical;
using troupe::testing::TempDir;

struct Mlp : nn::Module {
  Tensor w1, b1, w2, b2;
  Mlp() : nn::Module("Mlp") {
    w1 = register_parameter("w1", randn({8, 4}) * 0.5);
    b1 = register_parameter("b1", randn({8}) * 0.1);
    w2 = register_parameter("w2", randn({1, 8}) * 0.5);
    b2 = register_parameter("b2", zeros({1}));
  }
  Tensor forward(const Tensor& x) override { return (x.matmul(w1.t()) + b1).tanh().matmul(w2.t()) + b2; }
};

/// One optimiser step on batch `i` of a fixed regression problem.
void train_step(Mlp& model, optim::Optimizer& opt, int i) {
  manual_seed(100 + static_cast<uint64_t>(i));
  Tensor x = randn({16, 4});
  Tensor y = x.sum(1, true).sin();
  opt.zero_grad();
  Tensor loss = (model.forward(x) - y).pow(2).mean();
  loss.backward();
  opt.step();
}

template <class MakeOptimizer>
void expect_resume_is_exact(MakeOptimizer make, bool via_stream) {
  TempDir dir;
  manual_seed(0);
  auto reference = std::make_shared<Mlp>();
  auto ref_opt = make(*reference);
  for (int i = 0; i < 6; ++i) train_step(*reference, *ref_opt, i);

  manual_seed(0);
  auto first = std::make_shared<Mlp>();
  auto first_opt = make(*first);
  for (int i = 0; i < 3; ++i) train_step(*first, *first_opt, i);
  std::stringstream model_bytes, opt_bytes;
  if (via_stream) {
    troupe::save(first, model_bytes);
    troupe::save(*first_opt, opt_bytes);
  } else {
    troupe::save(first, dir.file("model.pt"));
    troupe::save(*first_opt, dir.file("optim.pt"));
  }

  manual_seed(42);  // a different initialisation, overwritten by the load
  auto resumed = std::make_shared<Mlp>();
  auto resumed_opt = make(*resumed);
  if (via_stream) {
    troupe::load(resumed, model_bytes);
    troupe::load(*resumed_opt, opt_bytes);
  } else {
    troupe::load(resumed, dir.file("model.pt"));
    troupe::load(*resumed_opt, dir.file("optim.pt"));
  }
  for (int i = 3; i < 6; ++i) train_step(*resumed, *resumed_opt, i);

  const auto want = reference->state_dict(), got = resumed->state_dict();
  for (const auto& item : want) EXPECT_TRUE(identical(item.value(), *got.find(item.key()))) << item.key();

  // the optimizer's state matters: resuming the model alone, with a fresh optimizer, ends elsewhere
  auto cold = std::make_shared<Mlp>();
  auto cold_opt = make(*cold);
  {
    NoGradGuard no_grad;
    for (const auto& item : first->state_dict()) cold->state_dict().find(item.key())->copy_(item.value());
  }
  for (int i = 3; i < 6; ++i) train_step(*cold, *cold_opt, i);
  EXPECT_FALSE(identical(cold->w1, reference->w1));
  const auto want_opt = ref_opt->state_dict(), got_opt = resumed_opt->state_dict();
  ASSERT_EQ(want_opt.size(), got_opt.size());
  for (const auto& item : want_opt) {
    const Tensor* g = got_opt.find(item.key());
    ASSERT_NE(g, nullptr) << item.key();
    EXPECT_TRUE(identical(item.value(), *g)) << item.key();
  }
}

TEST(TorchSaveOptimizer, SgdMomentumResumesBitForBit) {
  auto make = [](Mlp& m) {
    return std::make_unique<optim::SGD>(m.parameters(), optim::SGDOptions(0.05).momentum(0.9).weight_decay(1e-3));
  };
  expect_resume_is_exact(make, /*via_stream=*/false);
  expect_resume_is_exact(make, /*via_stream=*/true);
}

TEST(TorchSaveOptimizer, AdamWithTwoGroupsResumesBitForBit) {
  auto make = [](Mlp& m) {
    std::vector<optim::OptimizerParamGroup> groups;
    groups.emplace_back(std::vector<Tensor>{m.w1, m.b1});
    groups.emplace_back(std::vector<Tensor>{m.w2, m.b2},
                        std::make_unique<optim::AdamOptions>(optim::AdamOptions(3e-3).betas({0.8, 0.99})));
    return std::make_unique<optim::Adam>(std::move(groups), optim::AdamOptions(1e-2).amsgrad(true));
  };
  expect_resume_is_exact(make, /*via_stream=*/false);
  expect_resume_is_exact(make, /*via_stream=*/true);
}

TEST(TorchSaveOptimizer, OptionsComeBackWithTheState) {
  TempDir dir;
  auto model = std::make_shared<Mlp>();
  optim::SGD opt(model->parameters(), optim::SGDOptions(0.1).momentum(0.5));
  train_step(*model, opt, 0);
  static_cast<optim::SGDOptions&>(opt.param_groups()[0].options()).lr(0.025);  // as a scheduler would
  troupe::save(opt, dir.file("sgd.pt"));
  optim::SGD fresh(model->parameters(), optim::SGDOptions(1.0));
  troupe::load(fresh, dir.file("sgd.pt"));
  const auto& o = static_cast<const optim::SGDOptions&>(fresh.param_groups()[0].options());
  EXPECT_EQ(o.lr(), 0.025);
  EXPECT_EQ(o.momentum(), 0.5);
}

TEST(TorchSaveOptimizer, ErrorsNameTheFile) {
  TempDir dir;
  auto model = std::make_shared<Mlp>();
  const std::string model_path = dir.file("model.pt"), opt_path = dir.file("opt.pt");
  troupe::save(model, model_path);
  optim::SGD opt(model->parameters(), optim::SGDOptions(0.1));
  // a model file holds no optimizer state
  expect_error([&] { troupe::load(opt, model_path); }, {"SGD", model_path});
  // a different number of parameter groups
  std::vector<optim::OptimizerParamGroup> two;
  two.emplace_back(std::vector<Tensor>{model->w1});
  two.emplace_back(std::vector<Tensor>{model->w2});
  optim::SGD split(std::move(two), optim::SGDOptions(0.1));
  troupe::save(split, opt_path);
  expect_error([&] { troupe::load(opt, opt_path); }, {opt_path, "different number of parameter groups"});
  // an empty archive
  std::stringstream empty;
  serialize::OutputArchive().save_to(empty);
  expect_error([&] { troupe::load(opt, empty); }, {"<stream> holds no optimizer state"});
}

}  // namespace
