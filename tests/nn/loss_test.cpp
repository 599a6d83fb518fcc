// Losses (nn/functional/loss.h, nn/modules/loss.h) against PyTorch 1.13: every case of
// tests/fixtures/nn_loss.txt (gen_nn_loss.py) with each reduction, its value and its input (and target)
// gradients; finite-difference checks in float64; PyTorch's error texts; the loss modules' buffers,
// printing and calling convention.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "fixtures.h"
#include <troupe/nn/functional/loss.h>
#include <troupe/nn/modules/loss.h>
#include <troupe/tensor/autograd.h>
#include <troupe/tensor/gradcheck.h>
#include <troupe/tensor/ops.h>

namespace {

using namespace troupe;
namespace F = troupe::nn::functional;
using troupe::autograd::variable_list;
using troupe::nn::Reduction;
using troupe::testing::Fixtures;
using troupe::testing::tensors_close;

const Fixtures& fx() {
  static Fixtures f = Fixtures::load("nn_loss.txt");
  return f;
}

// Expects fn() to throw E whose what() is exactly `text`.
template <class E, class Fn>
void expect_error(Fn&& fn, const std::string& text) {
  try {
    fn();
    ADD_FAILURE() << "no exception; expected: " << text;
  } catch (const E& e) {
    EXPECT_EQ(std::string(e.what()), text);
  }
}

Tensor f64(std::vector<double> v, IntArrayRef shape) {
  return tensor(v, TensorOptions().dtype(kFloat64)).reshape(shape).contiguous();
}

bool all_finite(const Tensor& t) { return isfinite(t).all().item<bool>(); }

// ================================================================== fixtures

/// The fixture cases: every record name ending in "_spec", without the suffix.
std::vector<std::string> case_names() {
  std::vector<std::string> out;
  try {
    for (const auto& n : fx().names())
      if (n.size() > 5 && n.compare(n.size() - 5, 5, "_spec") == 0 && n.find("_fspec") == std::string::npos)
        out.push_back(n.substr(0, n.size() - 5));
  } catch (const std::exception& e) {
    out.push_back(std::string("fixture_load_failed"));
  }
  return out;
}

/// The loss of case `c` with reduction r, as the generator called PyTorch.
Tensor call_case(const std::vector<int64_t>& spec, double fparam, const Tensor& x, const Tensor& t,
                 const Tensor& w, const Tensor& pw, Reduction r) {
  const int64_t ignore_index = spec[1];
  switch (spec[0]) {
    case 0:
      return F::mse_loss(x, t, F::MSELossFuncOptions(r));
    case 1:
      return F::l1_loss(x, t, F::L1LossFuncOptions(r));
    case 2:
      return F::smooth_l1_loss(x, t, F::SmoothL1LossFuncOptions().reduction(r).beta(fparam));
    case 3:
      return F::huber_loss(x, t, F::HuberLossFuncOptions().reduction(r).delta(fparam));
    case 4:
      return F::cross_entropy(
          x, t, F::CrossEntropyFuncOptions().weight(w).ignore_index(ignore_index).reduction(r).label_smoothing(fparam));
    case 5:
      return F::nll_loss(x, t, F::NLLLossFuncOptions().weight(w).ignore_index(ignore_index).reduction(r));
    case 6:
      return F::binary_cross_entropy(x, t, F::BinaryCrossEntropyFuncOptions().weight(w).reduction(r));
    case 7:
      return F::binary_cross_entropy_with_logits(
          x, t, F::BinaryCrossEntropyWithLogitsFuncOptions().weight(w).pos_weight(pw).reduction(r));
  }
  throw std::runtime_error("unknown loss id " + std::to_string(spec[0]));
}

class LossFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(LossFixture, ValueAndGradientsMatchPyTorch) {
  const std::string c = GetParam();
  const Fixtures& f = fx();
  const std::vector<int64_t> spec = f.ints(c + "_spec");
  const double fparam = f.doubles(c + "_fspec")[0];
  const Tensor input = f.get(c + "_input"), target = f.get(c + "_target");
  const Tensor weight = spec[2] ? f.get(c + "_weight") : Tensor();
  const Tensor pos_weight = spec[3] ? f.get(c + "_pos_weight") : Tensor();
  const bool target_grad = target.is_floating_point();
  // float64 cases agree to rounding; float32 ones to about 1e-6 relative
  const bool single = input.dtype() == kFloat32;
  const double rtol = single ? 2e-6 : 1e-10, atol = single ? 1e-7 : 1e-13;

  for (const char* r : {"none", "mean", "sum"}) {
    SCOPED_TRACE(c + " reduction=" + r);
    Tensor x = input.clone().requires_grad_();
    Tensor t = target_grad ? target.clone().requires_grad_() : target;
    Tensor y = call_case(spec, fparam, x, t, weight, pos_weight, Reduction(r));
    EXPECT_TRUE(tensors_close(y, f.get(c + "_out_" + r), rtol, atol));
    EXPECT_EQ(y.dtype(), input.dtype());
    if (std::string(r) == "none") (y * f.get(c + "_gw")).sum().backward();
    else y.backward();
    ASSERT_TRUE(x.grad().defined());
    EXPECT_TRUE(tensors_close(x.grad(), f.get(c + "_ginput_" + r), rtol, atol));
    if (target_grad) {
      ASSERT_TRUE(t.grad().defined());
      EXPECT_TRUE(tensors_close(t.grad(), f.get(c + "_gtarget_" + r), rtol, atol));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(NnLoss, LossFixture, ::testing::ValuesIn(case_names()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

TEST(LossFixtures, CoverEveryLossAndOption) {
  std::vector<int> per_loss(8, 0);
  int weighted = 0, pos_weighted = 0, ignored = 0, smoothed = 0, probabilities = 0, kdim = 0, unbatched = 0;
  for (const auto& c : case_names()) {
    const auto spec = fx().ints(c + "_spec");
    ++per_loss.at(static_cast<size_t>(spec[0]));
    weighted += spec[2] != 0;
    pos_weighted += spec[3] != 0;
    if (spec[0] == 4 || spec[0] == 5) {
      const Tensor t = fx().get(c + "_target"), x = fx().get(c + "_input");
      if (!t.is_floating_point() && t.eq(spec[1]).any().item<bool>()) ++ignored;
      if (t.is_floating_point()) ++probabilities;
      if (x.dim() > 2) ++kdim;
      if (x.dim() == 1) ++unbatched;
    }
    if (spec[0] == 4 && fx().doubles(c + "_fspec")[0] > 0) ++smoothed;
  }
  for (size_t i = 0; i < per_loss.size(); ++i) EXPECT_GE(per_loss[i], 2) << "loss id " << i;
  EXPECT_GE(weighted, 8);
  EXPECT_GE(pos_weighted, 3);
  EXPECT_GE(ignored, 6);
  EXPECT_GE(smoothed, 6);
  EXPECT_GE(probabilities, 6);
  EXPECT_GE(kdim, 5);
  EXPECT_GE(unbatched, 3);
}

// ================================================================== behaviour

TEST(LossReduction, ParsesPyTorchsStrings) {
  EXPECT_EQ(Reduction("none").kind(), Reduction::None);
  EXPECT_EQ(Reduction("mean").kind(), Reduction::Mean);
  EXPECT_EQ(Reduction("sum").kind(), Reduction::Sum);
  EXPECT_EQ(Reduction("elementwise_mean"), Reduction::Mean);  // PyTorch's deprecated alias
  EXPECT_EQ(Reduction().str(), "mean");
  EXPECT_EQ(Reduction(Reduction::None).str(), "none");
  expect_error<std::invalid_argument>([] { Reduction("avg"); }, "avg is not a valid value for reduction");
  Tensor x = f64({1, 2, 3}, {3});
  expect_error<std::invalid_argument>([&] { F::mse_loss(x, x, F::MSELossFuncOptions("foo")); },
                                      "foo is not a valid value for reduction");
}

TEST(LossBehaviour, MseLossBroadcastsMismatchedShapes) {
  // PyTorch warns and broadcasts: (3, 1) against (2) is a (3, 2) loss
  Tensor x = f64({1, 2, 3}, {3, 1}), t = f64({0, 1}, {2});
  Tensor y = F::mse_loss(x, t, F::MSELossFuncOptions(kNone));
  EXPECT_TRUE(tensors_close(y, f64({1, 0, 4, 1, 9, 4}, {3, 2}), 0, 0));
  EXPECT_TRUE(tensors_close(F::mse_loss(x, t), tensor({19.0 / 6}, TensorOptions().dtype(kFloat64)).reshape({}),
                            1e-15, 0));
  EXPECT_ANY_THROW(F::mse_loss(f64({1, 2, 3, 4, 5, 6}, {3, 2}), f64({1, 2, 3, 4}, {4})));
}

TEST(LossBehaviour, IgnoredTargetsGetZeroGradientEvenWithInfiniteLogits) {
  // row 1 is ignored and has a -inf logit at class 0 (the class its masked index gathers)
  const double inf = std::numeric_limits<double>::infinity();
  Tensor t = tensor({2, -100, 0});
  for (const char* r : {"mean", "sum"}) {
    for (double ls : {0.0, 0.1}) {
      Tensor x = f64({1, 2, 3, -inf, 0.5, 0.25, 0.1, 0.2, 0.3}, {3, 3}).requires_grad_();
      Tensor y = F::cross_entropy(x, t, F::CrossEntropyFuncOptions().reduction(r).label_smoothing(ls));
      EXPECT_TRUE(all_finite(y)) << r << " ls=" << ls;
      y.backward();
      EXPECT_TRUE(all_finite(x.grad())) << r << " ls=" << ls;
      EXPECT_TRUE(tensors_close(x.grad().select(0, 1), zeros({3}, TensorOptions().dtype(kFloat64)), 0, 0));
    }
  }
}

TEST(LossBehaviour, AllTargetsIgnoredGivesNanMeanAndZeroGradients) {
  Tensor x = f64({1, 2, 3, 4, 5, 6}, {2, 3}).requires_grad_();
  Tensor t = tensor({-100, -100});
  Tensor y = F::cross_entropy(x, t);
  EXPECT_TRUE(std::isnan(y.item<double>()));
  y.backward();
  EXPECT_TRUE(tensors_close(x.grad(), zeros({2, 3}, TensorOptions().dtype(kFloat64)), 0, 0));
  EXPECT_EQ(F::nll_loss(x, t, F::NLLLossFuncOptions().reduction(kSum)).item<double>(), 0.0);
}

TEST(LossBehaviour, EmptyBatchMeanIsNanAndSumIsZero) {
  Tensor x = zeros({0, 4}, TensorOptions().dtype(kFloat64));
  Tensor t = zeros({0}, TensorOptions().dtype(kInt64));
  EXPECT_TRUE(std::isnan(F::cross_entropy(x, t).item<double>()));
  EXPECT_EQ(F::cross_entropy(x, t, F::CrossEntropyFuncOptions().reduction(kSum)).item<double>(), 0.0);
  EXPECT_EQ(F::cross_entropy(x, t, F::CrossEntropyFuncOptions().reduction(kNone)).numel(), 0);
  EXPECT_TRUE(std::isnan(F::cross_entropy(x, zeros({0, 4}, TensorOptions().dtype(kFloat64))).item<double>()));
}

TEST(LossBehaviour, NegativeLabelSmoothingIsNoSmoothing) {
  // PyTorch 1.13 only smooths (and only checks the range) when label_smoothing > 0
  Tensor x = f64({0.5, -1, 2, 0.25, 0, 1}, {2, 3});
  Tensor t = tensor({2, 0});
  EXPECT_TRUE(tensors_close(F::cross_entropy(x, t, F::CrossEntropyFuncOptions().label_smoothing(-0.5)),
                            F::cross_entropy(x, t), 0, 0));
}

TEST(LossBehaviour, ReductionNoneKeepsTargetShape) {
  manual_seed(3);
  Tensor x = randn({2, 4, 3, 5});
  Tensor t = randint(0, 4, {2, 3, 5});
  EXPECT_EQ(F::cross_entropy(x, t, F::CrossEntropyFuncOptions().reduction(kNone)).sizes().vec(),
            (std::vector<int64_t>{2, 3, 5}));
  EXPECT_EQ(
      F::cross_entropy(randn({4}), tensor({int64_t{1}}).reshape({}), F::CrossEntropyFuncOptions().reduction(kNone))
          .dim(),
      0);
  EXPECT_EQ(F::cross_entropy(x, x.softmax(1), F::CrossEntropyFuncOptions().reduction(kNone)).sizes().vec(),
            (std::vector<int64_t>{2, 3, 5}));
  EXPECT_EQ(
      F::binary_cross_entropy_with_logits(x, x.sigmoid(), F::BinaryCrossEntropyWithLogitsFuncOptions().reduction(kNone))
          .sizes()
          .vec(),
      x.sizes().vec());
}

TEST(LossBehaviour, BinaryCrossEntropyIsFiniteAtZeroAndOne) {
  // PyTorch: log clamped at -100, gradient w * (x - t) / max(x (1 - x), 1e-12)
  Tensor x = f64({0, 1, 0, 1}, {4}).requires_grad_();
  Tensor t = f64({1, 0, 0, 1}, {4});
  Tensor y = F::binary_cross_entropy(x, t, F::BinaryCrossEntropyFuncOptions().reduction(kNone));
  EXPECT_TRUE(tensors_close(y, f64({100, 100, 0, 0}, {4}), 0, 0));
  y.sum().backward();
  EXPECT_TRUE(tensors_close(x.grad(), f64({-1e12, 1e12, 0, 0}, {4}), 1e-15, 0));
}

TEST(LossBehaviour, BceWithLogitsIsStableForLargeLogits) {
  Tensor x = f64({-1000, 1000, -1000, 1000}, {4}).requires_grad_();
  Tensor t = f64({0, 1, 1, 0}, {4});
  Tensor y = F::binary_cross_entropy_with_logits(x, t, F::BinaryCrossEntropyWithLogitsFuncOptions().reduction(kNone));
  EXPECT_TRUE(tensors_close(y, f64({0, 0, 1000, 1000}, {4}), 0, 0));
  y.sum().backward();
  EXPECT_TRUE(tensors_close(x.grad(), f64({0, 0, -1, 1}, {4}), 0, 0));
}

// ================================================================== gradcheck (float64)

struct GradCase {
  std::string name;
  std::function<variable_list(const variable_list&)> fn;
  std::vector<Tensor> inputs;
};

Tensor rg(const Tensor& t) { return t.clone().requires_grad_(); }

std::vector<GradCase> grad_cases() {
  manual_seed(42);
  const auto d = TensorOptions().dtype(kFloat64);
  Tensor x = randn({3, 4}, d), t = randn({3, 4}, d) * 0.8;
  Tensor logits = randn({4, 5}, d) * 2, idx = tensor({1, -100, 4, 0});
  Tensor w = rand({5}, d) + 0.5;
  Tensor xk = randn({2, 3, 2, 2}, d), tk = randint(0, 3, {2, 2, 2});
  Tensor probs = randn({4, 5}, d).softmax(1);
  Tensor p = rand({3, 4}, d) * 0.8 + 0.1, pt = rand({3, 4}, d);
  Tensor pw = rand({4}, d) + 0.5, bw = rand({3, 1}, d) + 0.5;
  std::vector<GradCase> cases;
  for (const char* r : {"none", "mean", "sum"}) {
    const std::string s = r;
    const Reduction red(r);
    cases.push_back(
        {"mse_" + s,
         [red](const variable_list& v) { return variable_list{F::mse_loss(v[0], v[1], F::MSELossFuncOptions(red))}; },
         {rg(x), rg(t)}});
    cases.push_back(
        {"l1_" + s,
         [red](const variable_list& v) { return variable_list{F::l1_loss(v[0], v[1], F::L1LossFuncOptions(red))}; },
         {rg(x), rg(t)}});
    cases.push_back({"smooth_l1_" + s,
                     [red](const variable_list& v) {
                       return variable_list{
                           F::smooth_l1_loss(v[0], v[1], F::SmoothL1LossFuncOptions().reduction(red).beta(0.7))};
                     },
                     {rg(x), rg(t)}});
    cases.push_back({"huber_" + s,
                     [red](const variable_list& v) {
                       return variable_list{
                           F::huber_loss(v[0], v[1], F::HuberLossFuncOptions().reduction(red).delta(0.6))};
                     },
                     {rg(x), rg(t)}});
    cases.push_back({"cross_entropy_w_ls_" + s,
                     [red, idx, w](const variable_list& v) {
                       return variable_list{F::cross_entropy(
                           v[0], idx, F::CrossEntropyFuncOptions().weight(w).reduction(red).label_smoothing(0.1))};
                     },
                     {rg(logits)}});
    cases.push_back({"cross_entropy_k4_" + s,
                     [red, tk](const variable_list& v) {
                       return variable_list{F::cross_entropy(v[0], tk, F::CrossEntropyFuncOptions().reduction(red))};
                     },
                     {rg(xk)}});
    cases.push_back({"cross_entropy_probs_w_ls_" + s,
                     [red, w](const variable_list& v) {
                       return variable_list{F::cross_entropy(
                           v[0], v[1], F::CrossEntropyFuncOptions().weight(w).reduction(red).label_smoothing(0.2))};
                     },
                     {rg(logits), rg(probs)}});
    cases.push_back({"nll_w_" + s,
                     [red, idx, w](const variable_list& v) {
                       return variable_list{F::nll_loss(v[0], idx, F::NLLLossFuncOptions().weight(w).reduction(red))};
                     },
                     {rg(logits)}});
    cases.push_back({"bce_" + s,
                     [red, bw](const variable_list& v) {
                       return variable_list{F::binary_cross_entropy(
                           v[0], v[1], F::BinaryCrossEntropyFuncOptions().weight(bw).reduction(red))};
                     },
                     {rg(p), rg(pt)}});
    cases.push_back(
        {"bce_with_logits_" + s,
         [red](const variable_list& v) {
           return variable_list{F::binary_cross_entropy_with_logits(
               v[0], v[1], F::BinaryCrossEntropyWithLogitsFuncOptions().weight(v[2]).pos_weight(v[3]).reduction(red))};
         },
         {rg(x * 3), rg(pt), rg(bw), rg(pw)}});
  }
  cases.push_back({"cross_entropy_unbatched",
                   [](const variable_list& v) { return variable_list{F::cross_entropy(v[0], tensor({int64_t{2}}).reshape({}))}; },
                   {rg(logits.select(0, 0))}});
  return cases;
}

TEST(LossGradcheck, EveryFunctionalLoss) {
  for (const auto& c : grad_cases()) {
    SCOPED_TRACE(c.name);
    EXPECT_NO_THROW(EXPECT_TRUE(autograd::gradcheck(c.fn, c.inputs))) << c.name;
  }
}

TEST(LossGradcheck, SecondDerivatives) {
  for (const auto& c : grad_cases()) {
    // l1 and the piecewise losses have no useful second derivative to check beyond their pieces
    if (c.name.rfind("l1_", 0) == 0) continue;
    SCOPED_TRACE(c.name);
    EXPECT_NO_THROW(EXPECT_TRUE(autograd::gradgradcheck(c.fn, c.inputs))) << c.name;
  }
}

// ================================================================== PyTorch's error texts

TEST(LossErrors, CrossEntropyAndNllLoss) {
  manual_seed(0);
  Tensor x = randn({3, 5});
  auto ce = [](const Tensor& in, const Tensor& t, const Tensor& w = Tensor(), int64_t ii = -100, const char* r = "mean",
               double ls = 0.0) {
    return F::cross_entropy(in, t,
                            F::CrossEntropyFuncOptions().weight(w).ignore_index(ii).reduction(r).label_smoothing(ls));
  };
  expect_error<std::invalid_argument>([&] { ce(x, tensor({1, 2, 3, 4})); },
                                      "Expected input batch_size (3) to match target batch_size (4).");
  expect_error<std::out_of_range>([&] { ce(x, tensor({1, 2, 5})); }, "Target 5 is out of bounds.");
  expect_error<std::out_of_range>([&] { ce(x, tensor({1, 2, -1})); }, "Target -1 is out of bounds.");
  expect_error<std::out_of_range>([&] { ce(x, tensor({1, 2, 5}), {}, -100, "none"); }, "Target 5 is out of bounds.");
  expect_error<std::out_of_range>([&] { ce(x, tensor({0, 1, 5}), {}, -100, "sum", 0.1); }, "Target 5 is out of bounds.");
  expect_error<std::runtime_error>(
      [&] { ce(x, tensor({1, 2, 3}), ones({4})); },
      "weight tensor should be defined either for all 5 classes or no classes but got weight tensor of shape: [4]");
  expect_error<std::runtime_error>(
      [&] { ce(x, rand({3, 5}), ones({4})); },
      "cross_entropy: weight tensor should be defined either for all 5 classes or no classes but got weight tensor "
      "of shape: [4]");
  expect_error<std::runtime_error>([&] { ce(x, rand({3, 5}), {}, 1); },
                                   "ignore_index is not supported for floating point target");
  expect_error<std::runtime_error>([&] { ce(x, randint(0, 5, {3, 5})); },
                                   "Expected floating point type for target with class probabilities, got Long");
  expect_error<std::runtime_error>([&] { ce(x, tensor({1.f, 2.f, 3.f})); },
                                   "expected scalar type Long but found Float");
  expect_error<std::runtime_error>([&] { ce(x, tensor({1, 2, 3}).to(kInt32)); },
                                   "expected scalar type Long but found Int");
  expect_error<std::runtime_error>([&] { ce(x, tensor({1, 2, 3}), {}, -100, "mean", 1.5); },
                                   "label_smoothing must be between 0.0 and 1.0. Got: 1.5");
  expect_error<std::runtime_error>([&] { ce(x, rand({3, 5}), {}, -100, "mean", 1.5); },
                                   "label_smoothing must be between 0.0 and 1.0. Got: 1.5");
  expect_error<std::runtime_error>([&] { ce(randn({5}), tensor({1})); }, "size mismatch (got input: [5], target: [1])");
  expect_error<std::out_of_range>([&] { ce(randn({5}), tensor({int64_t{7}}).reshape({})); },
                                  "Target 7 is out of bounds.");
  expect_error<std::runtime_error>([&] { ce(randn({2, 3, 4, 5}), randint(0, 3, {2, 4, 4})); },
                                   "size mismatch (got input: [2, 3, 4, 5] , target: [2, 4, 4]");
  expect_error<std::runtime_error>(
      [&] { ce(randn({2, 3, 4, 5}), randint(0, 3, {2, 4})); },
      "only batches of spatial targets supported (3D tensors) but got targets of dimension: 2");
  expect_error<std::runtime_error>([&] { ce(randn({2, 3, 4}), randint(0, 3, {2, 5})); },
                                   "Expected target size [2, 4], got [2, 5]");
  expect_error<std::runtime_error>([&] { ce(randn({2, 3, 4}), randint(0, 3, {2})); },
                                   "Expected target size [2, 4], got [2]");
  expect_error<std::out_of_range>([&] { ce(randn({2, 3, 4, 5}), full({2, 4, 5}, 5, TensorOptions().dtype(kInt64))); },
                                  "Target 5 is out of bounds.");
  expect_error<std::runtime_error>([&] { ce(randn({2, 3}), tensor({1, 2, 0, 1}).reshape({2, 2})); },
                                   "0D or 1D target tensor expected, multi-target not supported");

  expect_error<std::invalid_argument>([&] { F::nll_loss(randn({3, 5}), tensor({int64_t{1}}).reshape({})); },
                                      "Expected input batch_size (3) to match target batch_size (0).");
  expect_error<std::invalid_argument>([&] { F::nll_loss(scalar_tensor(1.0), tensor({int64_t{1}}).reshape({})); },
                                      "Expected 1 or more dimensions (got 0)");
  expect_error<std::invalid_argument>([&] { F::nll_loss(randn({2, 3, 4, 5}), randint(0, 3, {3, 4, 5})); },
                                      "Expected input batch_size (2) to match target batch_size (3).");
  expect_error<std::runtime_error>(
      [&] {
        F::nll_loss(randn({2, 3, 4, 5}), randint(0, 3, {2, 4, 5}), F::NLLLossFuncOptions().weight(ones({2})));
      },
      "weight tensor should be defined either for all or no classes");
  expect_error<std::runtime_error>(
      [&] {
        F::nll_loss(randn({2, 3}), randint(0, 3, {2}), F::NLLLossFuncOptions().weight(ones({3, 1})));
      },
      "weight tensor should be defined either for all 3 classes or no classes but got weight tensor of shape: [3, 1]");
  expect_error<std::out_of_range>([&] { F::nll_loss(randn({2, 3}), tensor({-1, 0})); }, "Target -1 is out of bounds.");
}

TEST(LossErrors, BinaryAndRegressionLosses) {
  manual_seed(0);
  Tensor x = randn({3, 5});
  expect_error<std::invalid_argument>([&] { F::binary_cross_entropy_with_logits(x, rand({3, 4})); },
                                      "Target size (torch.Size([3, 4])) must be the same as input size "
                                      "(torch.Size([3, 5]))");
  expect_error<std::invalid_argument>([&] { F::binary_cross_entropy(rand({3, 5}), rand({3, 4})); },
                                      "Using a target size (torch.Size([3, 4])) that is different to the input size "
                                      "(torch.Size([3, 5])) is deprecated. Please ensure they have the same size.");
  expect_error<std::runtime_error>([&] { F::binary_cross_entropy(rand({3, 5}) * 2, rand({3, 5})); },
                                   "all elements of input should be between 0 and 1");
  expect_error<std::runtime_error>([&] { F::smooth_l1_loss(x, x, F::SmoothL1LossFuncOptions().beta(-1.0)); },
                                   "smooth_l1_loss does not support negative values for beta.");
  expect_error<std::runtime_error>([&] { F::huber_loss(x, x, F::HuberLossFuncOptions().delta(0.0)); },
                                   "huber_loss does not support non-positive values for delta.");
  expect_error<std::runtime_error>([&] { F::huber_loss(x, x, F::HuberLossFuncOptions().delta(-1.0)); },
                                   "huber_loss does not support non-positive values for delta.");
  EXPECT_ANY_THROW(
      F::binary_cross_entropy(rand({3, 5}), rand({3, 5}), F::BinaryCrossEntropyFuncOptions().weight(ones({4}))));
  EXPECT_ANY_THROW(F::binary_cross_entropy_with_logits(
      x, rand({3, 5}), F::BinaryCrossEntropyWithLogitsFuncOptions().pos_weight(ones({4}))));
}

// ================================================================== modules

TEST(LossModules, PrintAsPyTorch) {
  EXPECT_EQ(nn::MSELoss()->repr(), "MSELoss()");
  EXPECT_EQ(nn::L1Loss()->repr(), "L1Loss()");
  EXPECT_EQ(nn::SmoothL1Loss(nn::SmoothL1LossOptions().beta(0.5))->repr(), "SmoothL1Loss()");
  EXPECT_EQ(nn::HuberLoss(nn::HuberLossOptions().delta(2))->repr(), "HuberLoss()");
  EXPECT_EQ(nn::CrossEntropyLoss(nn::CrossEntropyLossOptions().weight(ones({3})))->repr(), "CrossEntropyLoss()");
  EXPECT_EQ(nn::NLLLoss()->repr(), "NLLLoss()");
  EXPECT_EQ(nn::BCELoss()->repr(), "BCELoss()");
  EXPECT_EQ(nn::BCEWithLogitsLoss()->repr(), "BCEWithLogitsLoss()");
}

std::vector<std::string> keys(const troupe::OrderedDict<std::string, Tensor>& d) { return d.keys(); }

TEST(LossModules, WeightsAreBuffersAsInPyTorch) {
  using V = std::vector<std::string>;
  // None when not given: the name is reserved, nothing is in state_dict
  nn::CrossEntropyLoss ce;
  EXPECT_EQ(keys(ce->buffers_dict()), V{"weight"});
  EXPECT_FALSE(ce->buffers_dict().at("weight").defined());
  EXPECT_TRUE(ce->state_dict().empty());
  EXPECT_TRUE(ce->named_parameters().empty());
  EXPECT_EQ(keys(nn::NLLLoss()->buffers_dict()), V{"weight"});
  EXPECT_EQ(keys(nn::BCELoss()->buffers_dict()), V{"weight"});
  EXPECT_EQ(keys(nn::BCEWithLogitsLoss()->buffers_dict()), (V{"weight", "pos_weight"}));
  EXPECT_TRUE(nn::MSELoss()->buffers_dict().empty());
  EXPECT_TRUE(nn::HuberLoss()->buffers_dict().empty());

  Tensor w = tensor({1.f, 2.f, 3.f});
  nn::CrossEntropyLoss cew(nn::CrossEntropyLossOptions().weight(w));
  EXPECT_EQ(keys(cew->state_dict()), V{"weight"});
  EXPECT_TRUE(cew->weight.is_same(cew->buffers_dict().at("weight")));
  EXPECT_TRUE(tensors_close(cew->state_dict().at("weight"), w, 0, 0));
  nn::BCEWithLogitsLoss b(nn::BCEWithLogitsLossOptions().pos_weight(w));
  EXPECT_EQ(keys(b->state_dict()), V{"pos_weight"});

  // the buffer follows Module::to, and forward uses it
  cew->to(kFloat64);
  EXPECT_EQ(cew->weight.dtype(), kFloat64);
  Tensor x = f64({0.1, 0.2, 0.3, 1, 0, -1}, {2, 3});
  Tensor t = tensor({2, 0});
  EXPECT_TRUE(
      tensors_close(cew(x, t), F::cross_entropy(x, t, F::CrossEntropyFuncOptions().weight(w.to(kFloat64))), 1e-15, 0));
}

TEST(LossModules, ForwardIsTheFunctionalLoss) {
  manual_seed(5);
  Tensor x = randn({4, 3}), t = randint(0, 3, {4}), y = rand({4, 3});
  Tensor w = rand({3}) + 0.5;
  auto same = [](const Tensor& a, const Tensor& b) { return tensors_close(a, b, 0, 0); };
  EXPECT_TRUE(
      same(nn::MSELoss(nn::MSELossOptions(Reduction::Sum))(x, y), F::mse_loss(x, y, F::MSELossFuncOptions(kSum))));
  EXPECT_TRUE(
      same(nn::L1Loss(nn::L1LossOptions().reduction("none"))(x, y), F::l1_loss(x, y, F::L1LossFuncOptions(kNone))));
  EXPECT_TRUE(same(nn::SmoothL1Loss(nn::SmoothL1LossOptions().beta(0.3))(x, y),
                   F::smooth_l1_loss(x, y, F::SmoothL1LossFuncOptions().beta(0.3))));
  EXPECT_TRUE(same(nn::HuberLoss(nn::HuberLossOptions("sum").delta(0.4))(x, y),
                   F::huber_loss(x, y, F::HuberLossFuncOptions().reduction(kSum).delta(0.4))));
  nn::CrossEntropyLoss ce(nn::CrossEntropyLossOptions().weight(w).ignore_index(1).label_smoothing(0.2).reduction("sum"));
  EXPECT_TRUE(
      same(ce(x, t),
           F::cross_entropy(
               x, t, F::CrossEntropyFuncOptions().weight(w).ignore_index(1).reduction(kSum).label_smoothing(0.2))));
  nn::NLLLoss nll(nn::NLLLossOptions().weight(w).ignore_index(0));
  EXPECT_TRUE(same(nll(x.log_softmax(1), t),
                   F::nll_loss(x.log_softmax(1), t, F::NLLLossFuncOptions().weight(w).ignore_index(0))));
  EXPECT_TRUE(same(nn::BCELoss(nn::BCELossOptions().weight(w))(y, y.square()),
                   F::binary_cross_entropy(y, y.square(), F::BinaryCrossEntropyFuncOptions().weight(w))));
  nn::BCEWithLogitsLoss bl(nn::BCEWithLogitsLossOptions().weight(w).pos_weight(w * 2).reduction("none"));
  EXPECT_TRUE(same(
      bl(x, y), F::binary_cross_entropy_with_logits(
                    x, y, F::BinaryCrossEntropyWithLogitsFuncOptions().weight(w).pos_weight(w * 2).reduction(kNone))));
}

TEST(LossModules, CallTakesInputAndTargetPositionallyOrByKeyword) {
  auto loss = std::make_shared<nn::MSELossImpl>();
  Tensor x = f64({1, 2}, {2}), t = f64({0, 0}, {2});
  int seen_args = 0;
  loss->register_forward_hook([&](nn::Module&, const nn::Args& args, const nn::Value&) {
    seen_args = static_cast<int>(args.size());
  });
  EXPECT_DOUBLE_EQ((*loss)(x, t).item<double>(), 2.5);
  EXPECT_EQ(seen_args, 2);
  EXPECT_DOUBLE_EQ(loss->call({x}, {{"target", t}}).tensor().item<double>(), 2.5);
  EXPECT_DOUBLE_EQ(loss->call({}, {{"input", x}, {"target", t}}).tensor().item<double>(), 2.5);
  expect_error<std::invalid_argument>([&] { (*loss)(x); }, "[MSELoss] forward takes (input, target) Tensors, got (Tensor)");
  expect_error<std::invalid_argument>([&] { loss->call({x, t, t}); },
                                      "[MSELoss] forward takes (input, target) Tensors, got (Tensor, Tensor, Tensor)");
  expect_error<std::invalid_argument>([&] { loss->call({x, 1.5}); },
                                      "[MSELoss] forward takes (input, target) Tensors, got (Tensor, float)");
  expect_error<std::invalid_argument>([&] { loss->call({x, t}, {{"target", t}}); },
                                      "[MSELoss] forward takes (input, target) Tensors, got (Tensor, Tensor, target=Tensor)");
}

TEST(LossModules, TrainAModelDownhill) {
  // CrossEntropyLoss's gradient drives a plain gradient step downhill on a fixed batch
  manual_seed(7);
  Tensor w = (randn({4, 3}) * 0.1).requires_grad_();
  Tensor x = randn({8, 4}), t = randint(0, 3, {8});
  nn::CrossEntropyLoss loss_fn(nn::CrossEntropyLossOptions().label_smoothing(0.05));
  double first = 0, last = 0;
  for (int step = 0; step < 20; ++step) {
    Tensor loss = loss_fn(x.matmul(w), t);
    if (step == 0) first = loss.item<double>();
    last = loss.item<double>();
    w.mutable_grad() = Tensor();
    loss.backward();
    NoGradGuard ng;
    w.sub_(w.grad() * 0.5);
  }
  EXPECT_LT(last, first * 0.8);
}

}  // namespace
