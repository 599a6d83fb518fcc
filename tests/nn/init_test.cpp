// nn::init against torch.nn.init (tests/fixtures/nn_layers.txt, from gen_nn_layers.py): after the
// same manual_seed every random initialiser gives PyTorch's values bit for bit (orthogonal_ to within
// rounding), with PyTorch's error texts.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "fixtures.h"
#include <troupe/nn/init.h>
#include <troupe/nn/module.h>
#include <troupe/tensor/autograd.h>
#include <troupe/tensor/ops.h>
#include <troupe/tensor/warning.h>

namespace {

using namespace troupe;
namespace init = troupe::nn::init;
using troupe::testing::Fixtures;
using troupe::testing::tensors_close;

const Fixtures& fx() {
  static Fixtures f = Fixtures::load("nn_layers.txt");
  return f;
}

// Expects fn() to throw E whose what() is exactly `text`.
template <class E, class F>
void expect_error(F&& fn, const std::string& text) {
  try {
    fn();
    ADD_FAILURE() << "no exception; expected: " << text;
  } catch (const E& e) {
    EXPECT_EQ(std::string(e.what()), text);
  }
}

// torch.manual_seed(seed); w = torch.empty(shape); fn(w)
template <class F>
Tensor seeded(uint64_t seed, IntArrayRef shape, F&& fn, ScalarType dtype = kFloat32) {
  manual_seed(seed);
  Tensor w = empty(shape, TensorOptions().dtype(dtype));
  fn(w);
  return w;
}

TEST(NnInit, CalculateGainMatchesPyTorch) {
  const std::vector<double> want = fx().doubles("calculate_gain");
  const char* names[] = {"linear",           "conv1d",  "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
                         "conv_transpose3d", "sigmoid", "tanh",   "relu",   "leaky_relu",       "selu"};
  size_t i = 0;
  for (const char* n : names) EXPECT_EQ(init::calculate_gain(n), want[i++]) << n;
  EXPECT_EQ(init::calculate_gain("leaky_relu", 0.2), want[i++]);
  EXPECT_EQ(init::calculate_gain("leaky_relu", std::sqrt(5.0)), want[i++]);
  EXPECT_EQ(init::calculate_gain("leaky_relu", 0.0), want[i++]);
  EXPECT_EQ(init::calculate_gain("relu", 0.5), std::sqrt(2.0));  // param only matters for leaky_relu
  expect_error<std::invalid_argument>([] { init::calculate_gain("softplus"); }, "Unsupported nonlinearity softplus");
}

TEST(NnInit, FanInAndFanOut) {
  const std::vector<int64_t> want = fx().ints("fan_in_fan_out");
  const std::vector<std::vector<int64_t>> shapes = {{3, 5}, {16, 8, 3, 3}, {2, 4, 5}, {7, 1, 2, 3, 4}};
  for (size_t i = 0; i < shapes.size(); ++i) {
    auto [fan_in, fan_out] = init::calculate_fan_in_and_fan_out(troupe::empty(shapes[i]));
    EXPECT_EQ(fan_in, want[2 * i]);
    EXPECT_EQ(fan_out, want[2 * i + 1]);
  }
  expect_error<std::invalid_argument>([] { init::calculate_fan_in_and_fan_out(empty({4})); },
                                      "Fan in and fan out can not be computed for tensor with fewer than 2 dimensions");
  expect_error<std::invalid_argument>([] { init::xavier_uniform_(empty({4})); },
                                      "Fan in and fan out can not be computed for tensor with fewer than 2 dimensions");
}

TEST(NnInit, UniformAndNormalMatchPyTorchBitForBit) {
  EXPECT_TRUE(tensors_close(seeded(0, {3, 5}, [](Tensor& w) { init::uniform_(w, -2.0, 3.0); }),
                            fx().get("init_uniform_a"), 0, 0));
  EXPECT_TRUE(tensors_close(seeded(1, {4, 3}, [](Tensor& w) { init::uniform_(w); }, kFloat64),
                            fx().get("init_uniform_f64"), 0, 0, true));
  EXPECT_TRUE(tensors_close(seeded(0, {4, 5}, [](Tensor& w) { init::normal_(w, 1.0, 0.5); }),
                            fx().get("init_normal_a"), 0, 0));
  EXPECT_TRUE(tensors_close(seeded(3, {3, 3}, [](Tensor& w) { init::normal_(w, -1.0, 2.0); }),
                            fx().get("init_normal_small"), 0, 0));
}

TEST(NnInit, XavierAndKaimingMatchPyTorchBitForBit) {
  EXPECT_TRUE(tensors_close(seeded(0, {3, 5, 2, 2}, [](Tensor& w) { init::xavier_uniform_(w, 2.0); }),
                            fx().get("init_xavier_uniform_a"), 0, 0));
  EXPECT_TRUE(tensors_close(seeded(5, {4, 6}, [](Tensor& w) { init::xavier_normal_(w); }),
                            fx().get("init_xavier_normal_a"), 0, 0));
  EXPECT_TRUE(tensors_close(seeded(0, {6, 4}, [](Tensor& w) { init::kaiming_uniform_(w, std::sqrt(5.0)); }),
                            fx().get("init_kaiming_uniform_sqrt5"), 0, 0));
  EXPECT_TRUE(tensors_close(
      seeded(7, {6, 4, 3}, [](Tensor& w) { init::kaiming_uniform_(w, 0, "fan_out", "relu"); }),
      fx().get("init_kaiming_uniform_relu_fan_out"), 0, 0));
  EXPECT_TRUE(tensors_close(seeded(2, {5, 3, 3}, [](Tensor& w) { init::kaiming_normal_(w); }),
                            fx().get("init_kaiming_normal_a"), 0, 0));
  // the mode is compared in lower case, as PyTorch does
  EXPECT_TRUE(tensors_close(seeded(2, {4, 8}, [](Tensor& w) { init::kaiming_normal_(w, 0.2, "FAN_OUT"); }),
                            fx().get("init_kaiming_normal_leaky"), 0, 0));
}

TEST(NnInit, KaimingErrorsAndZeroElementTensors) {
  expect_error<std::invalid_argument>([] { init::kaiming_uniform_(empty({3, 4}), 0, "fan_avg"); },
                                      "Mode fan_avg not supported, please use one of ['fan_in', 'fan_out']");
  expect_error<std::invalid_argument>([] { init::kaiming_normal_(empty({3, 4}), 0, "Fan_Avg"); },
                                      "Mode fan_avg not supported, please use one of ['fan_in', 'fan_out']");
  expect_error<std::invalid_argument>([] { init::kaiming_normal_(empty({3, 4}), 0, "fan_in", "swish"); },
                                      "Unsupported nonlinearity swish");
  // a zero-element tensor is returned untouched (PyTorch warns) before the mode is even looked at
  Tensor z = empty({0, 4});
  EXPECT_TRUE(init::kaiming_uniform_(z, 0, "bogus").is_same(z));
  EXPECT_TRUE(init::kaiming_normal_(z).is_same(z));
  // it draws no random numbers
  manual_seed(9);
  init::kaiming_uniform_(empty({3, 0}));
  Tensor after = rand({3});
  manual_seed(9);
  EXPECT_TRUE(equal(after, rand({3})));
}

TEST(NnInit, ZeroElementWarningGoesToTheWarningHandler) {
  struct Collect : WarningHandler {
    std::vector<std::string> msgs;
    void process(const Warning& w) override { msgs.push_back(w.msg()); }
  } collect;
  WarningUtils::WarningHandlerGuard guard(&collect);
  WarningUtils::set_warnAlways(true);  // TROUPE_WARN_ONCE warns every time
  init::kaiming_uniform_(empty({0, 4}));
  init::kaiming_normal_(empty({0, 4}));
  WarningUtils::set_warnAlways(false);
  EXPECT_EQ(collect.msgs, (std::vector<std::string>{"Initializing zero-element tensors is a no-op",
                                                    "Initializing zero-element tensors is a no-op"}));
}

TEST(NnInit, OrthogonalMatchesPyTorchAndIsOrthogonal) {
  struct Case {
    const char* name;
    uint64_t seed;
    std::vector<int64_t> shape;
    double gain;
    ScalarType dtype;
  };
  const Case cases[] = {{"init_orthogonal_wide", 0, {4, 6}, 1.0, kFloat32},
                        {"init_orthogonal_tall", 1, {6, 4}, 1.0, kFloat32},
                        {"init_orthogonal_square_gain", 2, {5, 5}, 2.0, kFloat32},
                        {"init_orthogonal_3d", 3, {3, 2, 2}, 1.0, kFloat32},
                        {"init_orthogonal_f64", 4, {3, 7}, 1.0, kFloat64}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Tensor w = seeded(c.seed, c.shape, [&](Tensor& t) { init::orthogonal_(t, c.gain); }, c.dtype);
    // PyTorch's sign correction by diag(R) makes the QR unique, so the values agree to rounding
    EXPECT_TRUE(tensors_close(w, fx().get(c.name), 0, 1e-5));
    // rows (wide) or columns (tall) are orthonormal, times gain
    Tensor m = w.reshape({c.shape[0], -1}).to(kFloat64);
    Tensor g = m.size(0) <= m.size(1) ? matmul(m, m.t()) : matmul(m.t(), m);
    Tensor id = eye(g.size(0), TensorOptions().dtype(kFloat64)) * (c.gain * c.gain);
    EXPECT_TRUE(tensors_close(g, id, 0, 1e-5));
  }
}

TEST(NnInit, OrthogonalErrorsAndEmpty) {
  expect_error<std::invalid_argument>([] { init::orthogonal_(empty({5})); },
                                      "Only tensors with 2 or more dimensions are supported");
  Tensor z = empty({0, 3});
  EXPECT_TRUE(init::orthogonal_(z).is_same(z));
}

TEST(NnInit, EyeConstantOnesZeros) {
  EXPECT_TRUE(tensors_close(seeded(0, {3, 5}, [](Tensor& w) { init::eye_(w); }), fx().get("init_eye_wide"), 0, 0));
  EXPECT_TRUE(tensors_close(seeded(0, {4, 2}, [](Tensor& w) { init::eye_(w); }), fx().get("init_eye_tall"), 0, 0));
  expect_error<std::invalid_argument>([] { init::eye_(empty({2, 2, 2})); },
                                      "Only tensors with 2 dimensions are supported");
  Tensor w = empty({2, 3});
  EXPECT_TRUE(equal(init::constant_(w, 0.25), full({2, 3}, 0.25)));
  EXPECT_TRUE(equal(init::ones_(w), ones({2, 3})));
  EXPECT_TRUE(equal(init::zeros_(w), zeros({2, 3})));
  Tensor i = empty({4}, TensorOptions().dtype(kInt64));
  EXPECT_TRUE(equal(init::constant_(i, 7), full({4}, 7, TensorOptions().dtype(kInt64))));
}

TEST(NnInit, DiracAndSparseMatchPyTorch) {
  EXPECT_TRUE(tensors_close(seeded(0, {4, 3, 5}, [](Tensor& w) { init::dirac_(w); }), fx().get("init_dirac_3d"), 0, 0));
  EXPECT_TRUE(tensors_close(seeded(0, {6, 2, 3, 3}, [](Tensor& w) { init::dirac_(w, 2); }),
                            fx().get("init_dirac_groups"), 0, 0));
  EXPECT_TRUE(tensors_close(seeded(0, {2, 3, 1, 2, 3}, [](Tensor& w) { init::dirac_(w); }),
                            fx().get("init_dirac_5d"), 0, 0));
  EXPECT_TRUE(tensors_close(seeded(0, {5, 4}, [](Tensor& w) { init::sparse_(w, 0.3); }),
                            fx().get("init_sparse_a"), 0, 0));
  EXPECT_TRUE(tensors_close(seeded(1, {10, 6}, [](Tensor& w) { init::sparse_(w, 0.5, 1.0); }),
                            fx().get("init_sparse_b"), 0, 0));
  expect_error<std::invalid_argument>([] { init::dirac_(empty({3, 3})); },
                                      "Only tensors with 3, 4, or 5 dimensions are supported");
  expect_error<std::invalid_argument>([] { init::dirac_(empty({3, 3, 3}), 2); }, "dim 0 must be divisible by groups");
  expect_error<std::invalid_argument>([] { init::sparse_(empty({3}), 0.1); },
                                      "Only tensors with 2 dimensions are supported");
}

TEST(NnInit, RunsWithoutRecordingHistoryAndReturnsItsArgument) {
  Tensor w = empty({4, 3}).requires_grad_(true);  // a parameter: in-place ops on it need no_grad
  EXPECT_TRUE(init::uniform_(w).is_same(w));
  EXPECT_TRUE(init::normal_(w).is_same(w));
  EXPECT_TRUE(init::xavier_uniform_(w).is_same(w));
  EXPECT_TRUE(init::kaiming_normal_(w).is_same(w));
  EXPECT_TRUE(init::orthogonal_(w).is_same(w));
  EXPECT_TRUE(init::eye_(w).is_same(w));
  EXPECT_TRUE(init::constant_(w, 1.5).is_same(w));
  EXPECT_TRUE(w.is_leaf());
  EXPECT_TRUE(w.requires_grad());
  EXPECT_EQ(w.grad_fn(), nullptr);
}

TEST(NnInit, DoesNothingWhileInitializationIsSkipped) {
  Tensor w = full({4, 3}, 7.0);
  {
    nn::SkipInitGuard guard;
    init::uniform_(w);
    init::normal_(w);
    init::kaiming_uniform_(w);
    init::orthogonal_(w);
    init::zeros_(w);
    init::eye_(w);
    // argument checks still run
    expect_error<std::invalid_argument>([] { init::orthogonal_(empty({3})); },
                                        "Only tensors with 2 or more dimensions are supported");
  }
  EXPECT_TRUE(equal(w, full({4, 3}, 7.0)));
}

TEST(NnInit, Statistics) {
  manual_seed(123);
  // kaiming_normal_ (fan_in 256, relu): std = sqrt(2 / 256)
  Tensor k = init::kaiming_normal_(empty({512, 256}), 0, "fan_in", "relu");
  EXPECT_NEAR(k.std().item<double>(), std::sqrt(2.0 / 256), 0.02 * std::sqrt(2.0 / 256));
  EXPECT_NEAR(k.mean().item<double>(), 0.0, 0.002);
  // xavier_uniform_: U(-a, a) with a = sqrt(6 / (fan_in + fan_out)); std = a / sqrt(3)
  const double a = std::sqrt(6.0 / (300 + 200));
  Tensor x = init::xavier_uniform_(empty({200, 300}));
  EXPECT_LE(x.abs().max().item<double>(), a);
  EXPECT_NEAR(x.std().item<double>(), a / std::sqrt(3.0), 0.02 * a);
  // kaiming_uniform_ with fan_out: bound = gain * sqrt(3 / fan_out), gain(leaky_relu, 0) = sqrt(2)
  Tensor u = init::kaiming_uniform_(empty({64, 32, 3, 3}), 0, "fan_out");
  const double bound = std::sqrt(2.0) * std::sqrt(3.0 / (64 * 9));
  EXPECT_LE(u.abs().max().item<double>(), bound);
  EXPECT_GT(u.abs().max().item<double>(), 0.99 * bound);
}

}  // namespace
