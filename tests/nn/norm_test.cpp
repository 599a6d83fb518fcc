// LayerNorm, BatchNorm1d / BatchNorm2d and F::layer_norm / F::batch_norm against PyTorch
// (tests/fixtures/nn_conv.txt, written by gen_nn_conv.py): forward, gradients, running statistics over
// training steps (momentum and the cumulative average), eval mode, buffers, printed forms, errors; and
// finite-difference gradient checks in float64.
#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <troupe/nn/functional/normalization.h>
#include <troupe/nn/modules/batchnorm.h>
#include <troupe/nn/modules/normalization.h>
#include <troupe/tensor/autograd.h>
#include <troupe/tensor/gradcheck.h>
#include <troupe/tensor/ops.h>

#include "common/fixtures.h"

namespace {

using namespace troupe;
namespace nn = troupe::nn;
namespace F = troupe::nn::functional;
using troupe::autograd::variable_list;
using troupe::testing::Fixtures;
using troupe::testing::tensors_close;

const Fixtures& fx() {
  static const Fixtures f = Fixtures::load("nn_conv.txt");
  return f;
}

Tensor get(const std::string& name) { return fx().get(name); }
Tensor leaf(const std::string& name) { return fx().get(name).requires_grad_(true); }

template <class Fn>
void expect_error(Fn&& f, const std::string& text) {
  try {
    f();
    ADD_FAILURE() << "expected an error containing: " << text;
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << "message: " << e.what();
  }
}

Tensor f64(IntArrayRef shape, double scale = 1, double shift = 0) {
  return (randn(shape, kFloat64) * scale + shift).requires_grad_(true);
}

// ---------------------------------------------------------------- F::layer_norm

TEST(FunctionalLayerNormTest, ForwardAndBackwardMatchPyTorch) {
  for (int i = 0; i < 4; ++i) {
    SCOPED_TRACE("layer_norm case " + std::to_string(i));
    const std::string c = "ln_" + std::to_string(i) + "_";
    auto p = fx().ints(c + "params");  // [has_affine, normalized_shape...]
    std::vector<int64_t> shape(p.begin() + 1, p.end());
    const double eps = fx().doubles(c + "eps")[0];
    Tensor x = leaf(c + "x");
    Tensor w = p[0] ? leaf(c + "w") : Tensor(), b = p[0] ? leaf(c + "b") : Tensor();
    Tensor out = F::layer_norm(x, F::LayerNormFuncOptions(shape).weight(w).bias(b).eps(eps));
    EXPECT_TRUE(tensors_close(out, get(c + "out"), 1e-5, 1e-5));
    out.backward(get(c + "g"));
    EXPECT_TRUE(tensors_close(x.grad(), get(c + "dx"), 1e-4, 1e-5));
    if (p[0]) {
      EXPECT_TRUE(tensors_close(w.grad(), get(c + "dw"), 1e-5, 1e-5));
      EXPECT_TRUE(tensors_close(b.grad(), get(c + "db"), 1e-5, 1e-5));
    }
  }
}

TEST(FunctionalLayerNormTest, Gradcheck) {
  manual_seed(11);
  Tensor x = f64({3, 2, 4}, 2, 0.5), w = f64({2, 4}), b = f64({2, 4});
  EXPECT_TRUE(autograd::gradcheck(
      [](const variable_list& in) {
        return variable_list{F::layer_norm(in[0], F::LayerNormFuncOptions({2, 4}).weight(in[1]).bias(in[2]).eps(1e-5))};
      },
      {x, w, b}));
  EXPECT_TRUE(autograd::gradcheck(
      [](const variable_list& in) {
        return variable_list{F::layer_norm(in[0], F::LayerNormFuncOptions({4}).eps(1e-3))};
      },
      {x}));
  EXPECT_TRUE(autograd::gradgradcheck(
      [](const variable_list& in) {
        return variable_list{F::layer_norm(in[0], F::LayerNormFuncOptions({4}).weight(in[1]))};
      },
      {f64({2, 4}), f64({4})}));
}

TEST(FunctionalLayerNormTest, Errors) {
  Tensor x = randn({2, 3});
  expect_error([&] { F::layer_norm(x, F::LayerNormFuncOptions({4})); },
               "Given normalized_shape=[4], expected input with shape [*, 4], but got input of size[2, 3]");
  expect_error([&] { F::layer_norm(x, F::LayerNormFuncOptions({3}).weight(ones({4}))); },
               "Expected weight to be of same shape as normalized_shape, but got weight of shape [4] and "
               "normalized_shape = [3]");
  expect_error([&] { F::layer_norm(x, F::LayerNormFuncOptions({3}).bias(ones({2}))); },
               "Expected bias to be of same shape as normalized_shape, but got bias of shape [2] and "
               "normalized_shape = [3]");
  expect_error([&] { F::layer_norm(x, F::LayerNormFuncOptions(std::vector<int64_t>{})); },
               "Expected normalized_shape to be at least 1-dimensional, i.e., containing at least one element, but "
               "got normalized_shape = []");
}

// ---------------------------------------------------------------- LayerNorm module

TEST(LayerNormTest, ParametersForwardAndPrinting) {
  auto ln = std::make_shared<nn::LayerNormImpl>(4);
  EXPECT_EQ(ln->named_parameters().keys(), (std::vector<std::string>{"weight", "bias"}));
  EXPECT_TRUE(tensors_close(ln->weight, ones({4}), 0, 0));
  EXPECT_TRUE(tensors_close(ln->bias, zeros({4}), 0, 0));
  EXPECT_EQ(ln->repr(), "LayerNorm((4,), eps=1e-05, elementwise_affine=True)");

  auto c = "ln_1_";  // normalized_shape (2, 3), eps 1e-3
  auto m = std::make_shared<nn::LayerNormImpl>(nn::LayerNormOptions({2, 3}).eps(1e-3));
  {
    NoGradGuard g;
    m->weight.copy_(get(std::string(c) + "w"));
    m->bias.copy_(get(std::string(c) + "b"));
  }
  EXPECT_TRUE(tensors_close((*m)(get(std::string(c) + "x")), get(std::string(c) + "out"), 1e-5, 1e-5));

  auto plain = std::make_shared<nn::LayerNormImpl>(std::vector<int64_t>{2, 3}, 1e-3, false);
  EXPECT_EQ(plain->repr(), "LayerNorm((2, 3), eps=0.001, elementwise_affine=False)");
  EXPECT_TRUE(plain->named_parameters().keys().empty());
  EXPECT_FALSE(plain->weight.defined());

  auto d = std::make_shared<nn::LayerNormImpl>(nn::LayerNormOptions({5}).dtype(kFloat64));
  EXPECT_EQ(d->weight.dtype(), kFloat64);
}

// ---------------------------------------------------------------- F::batch_norm

TEST(FunctionalBatchNormTest, ForwardBackwardAndRunningStatsMatchPyTorch) {
  for (int i = 0; i < 5; ++i) {
    SCOPED_TRACE("batch_norm case " + std::to_string(i));
    const std::string c = "bn_" + std::to_string(i) + "_";
    auto p = fx().ints(c + "params");  // [training, has_running_stats, has_affine]
    auto hyper = fx().doubles(c + "hyper");  // [momentum, eps]
    Tensor x = leaf(c + "x");
    Tensor rm = p[1] ? get(c + "rm") : Tensor(), rv = p[1] ? get(c + "rv") : Tensor();
    Tensor w = p[2] ? leaf(c + "w") : Tensor(), b = p[2] ? leaf(c + "b") : Tensor();
    Tensor out = F::batch_norm(
        x, rm, rv, F::BatchNormFuncOptions().weight(w).bias(b).training(p[0] != 0).momentum(hyper[0]).eps(hyper[1]));
    EXPECT_TRUE(tensors_close(out, get(c + "out"), 1e-5, 1e-5));
    if (p[1]) {
      EXPECT_TRUE(tensors_close(rm, get(c + "rm_after"), 1e-6, 1e-6));
      EXPECT_TRUE(tensors_close(rv, get(c + "rv_after"), 1e-6, 1e-6));
    }
    out.backward(get(c + "g"));
    EXPECT_TRUE(tensors_close(x.grad(), get(c + "dx"), 1e-4, 1e-5));
    if (p[2]) {
      EXPECT_TRUE(tensors_close(w.grad(), get(c + "dw"), 1e-5, 1e-5));
      EXPECT_TRUE(tensors_close(b.grad(), get(c + "db"), 1e-5, 1e-5));
    }
  }
}

TEST(FunctionalBatchNormTest, GradcheckTrainAndEval) {
  manual_seed(12);
  Tensor x = f64({4, 3, 2}, 1.5, 0.3), w = f64({3}), b = f64({3});
  Tensor rm = randn({3}, kFloat64), rv = rand({3}, kFloat64) + 0.5;
  // training: batch statistics (running stats updated on copies, so that every call sees the same)
  EXPECT_TRUE(autograd::gradcheck(
      [&](const variable_list& in) {
        return variable_list{
            F::batch_norm(in[0], rm.clone(), rv.clone(),
                          F::BatchNormFuncOptions().weight(in[1]).bias(in[2]).training(true).momentum(0.1).eps(1e-5))};
      },
      {x, w, b}));
  EXPECT_TRUE(autograd::gradcheck(
      [](const variable_list& in) {
        return variable_list{F::batch_norm(in[0], Tensor(), Tensor(), F::BatchNormFuncOptions().training(true))};
      },
      {f64({3, 2, 2, 2})}));
  // eval: running statistics
  EXPECT_TRUE(autograd::gradcheck(
      [&](const variable_list& in) {
        return variable_list{
            F::batch_norm(in[0], rm, rv,
                          F::BatchNormFuncOptions().weight(in[1]).bias(in[2]).training(false).momentum(0.1).eps(1e-5))};
      },
      {x, w, b}));
  EXPECT_TRUE(autograd::gradgradcheck(
      [&](const variable_list& in) {
        return variable_list{
            F::batch_norm(in[0], Tensor(), Tensor(), F::BatchNormFuncOptions().weight(in[1]).training(true))};
      },
      {f64({3, 2}), f64({2})}));
}

TEST(FunctionalBatchNormTest, Errors) {
  expect_error(
      [] {
        F::batch_norm(randn({1, 3}), zeros({3}), ones({3}), F::BatchNormFuncOptions().training(true));
      },
      "Expected more than 1 value per channel when training, got input size [1, 3]");
  expect_error(
      [] {
        F::batch_norm(randn({2, 3}), zeros({4}), ones({3}), F::BatchNormFuncOptions().training(true));
      },
      "running_mean should contain 3 elements not 4");
  expect_error(
      [] {
        F::batch_norm(randn({2, 3}), zeros({3}), ones({3}), F::BatchNormFuncOptions().weight(ones({2})).training(true));
      },
      "weight should contain 3 elements not 2");
  expect_error(
      [] {
        F::batch_norm(randn({2, 3}), Tensor(), Tensor(), F::BatchNormFuncOptions().training(false));
      },
      "running_mean must be defined in evaluation mode");
}

// ---------------------------------------------------------------- BatchNorm1d / BatchNorm2d

std::shared_ptr<nn::BatchNormBase> make_bn(const std::vector<int64_t>& p, std::optional<double> momentum) {
  // p = [dims, num_features, momentum is None, affine, track_running_stats]
  auto opts = nn::BatchNormOptions(p[1]).momentum(momentum).affine(p[3] != 0).track_running_stats(p[4] != 0);
  if (p[0] == 1) return std::make_shared<nn::BatchNorm1dImpl>(opts);
  return std::make_shared<nn::BatchNorm2dImpl>(opts);
}

TEST(BatchNormTest, TrainingStepsAndEvalMatchPyTorch) {
  for (std::string name : {"m1", "m1cma", "m2", "m2cma", "m2mom", "m2nostats"}) {
    SCOPED_TRACE(name);
    const std::string c = "bnm_" + name + "_";
    auto p = fx().ints(c + "params");
    std::optional<double> momentum;
    if (!p[2]) momentum = fx().doubles(c + "momentum")[0];
    auto m = make_bn(p, momentum);
    if (p[3]) {
      NoGradGuard g;
      m->weight.copy_(get(c + "w"));
      m->bias.copy_(get(c + "b"));
    }
    for (int step = 0; step < 3; ++step) {
      SCOPED_TRACE("step " + std::to_string(step));
      Tensor y = (*m)(get(c + "x" + std::to_string(step)));
      EXPECT_TRUE(tensors_close(y, get(c + "y" + std::to_string(step)), 1e-5, 1e-5));
    }
    if (p[4]) {
      EXPECT_TRUE(tensors_close(m->running_mean, get(c + "running_mean"), 1e-5, 1e-6));
      EXPECT_TRUE(tensors_close(m->running_var, get(c + "running_var"), 1e-5, 1e-6));
      EXPECT_TRUE(tensors_close(m->num_batches_tracked, get(c + "num_batches_tracked"), 0, 0, true));
    } else {
      EXPECT_FALSE(m->running_mean.defined());
      EXPECT_FALSE(m->num_batches_tracked.defined());
    }
    m->eval();
    EXPECT_TRUE(tensors_close((*m)(get(c + "xeval")), get(c + "yeval"), 1e-5, 1e-5));
  }
}

TEST(BatchNormTest, ParametersAndBuffers) {
  auto bn = std::make_shared<nn::BatchNorm2dImpl>(3);
  EXPECT_EQ(bn->named_parameters().keys(), (std::vector<std::string>{"weight", "bias"}));
  EXPECT_EQ(bn->named_buffers().keys(),
            (std::vector<std::string>{"running_mean", "running_var", "num_batches_tracked"}));
  EXPECT_TRUE(tensors_close(bn->weight, ones({3}), 0, 0));
  EXPECT_TRUE(tensors_close(bn->bias, zeros({3}), 0, 0));
  EXPECT_TRUE(tensors_close(bn->running_mean, zeros({3}), 0, 0));
  EXPECT_TRUE(tensors_close(bn->running_var, ones({3}), 0, 0));
  EXPECT_EQ(bn->num_batches_tracked.dtype(), kInt64);
  EXPECT_EQ(bn->num_batches_tracked.dim(), 0);
  EXPECT_EQ(bn->state_dict().keys(),
            (std::vector<std::string>{"weight", "bias", "running_mean", "running_var", "num_batches_tracked"}));

  // training updates the statistics and the counter; eval leaves them alone
  (*bn)(randn({2, 3, 2, 2}) * 2 + 1);
  (*bn)(randn({2, 3, 2, 2}));
  EXPECT_EQ(bn->num_batches_tracked.item<int64_t>(), 2);
  Tensor rm = bn->running_mean.clone();
  bn->eval();
  (*bn)(randn({2, 3, 2, 2}));
  EXPECT_EQ(bn->num_batches_tracked.item<int64_t>(), 2);
  EXPECT_TRUE(tensors_close(bn->running_mean, rm, 0, 0));
  bn->reset_running_stats();
  EXPECT_TRUE(tensors_close(bn->running_mean, zeros({3}), 0, 0));
  EXPECT_TRUE(tensors_close(bn->running_var, ones({3}), 0, 0));
  EXPECT_EQ(bn->num_batches_tracked.item<int64_t>(), 0);
  {
    NoGradGuard g;
    bn->weight.fill_(3);
  }
  bn->reset_parameters();
  EXPECT_TRUE(tensors_close(bn->weight, ones({3}), 0, 0));

  // buffers follow the options' dtype, the counter stays int64
  auto half = std::make_shared<nn::BatchNorm2dImpl>(nn::BatchNormOptions(3).dtype(kFloat16));
  EXPECT_EQ(half->running_mean.dtype(), kFloat16);
  EXPECT_EQ(half->weight.dtype(), kFloat16);
  EXPECT_EQ(half->num_batches_tracked.dtype(), kInt64);

  // without running statistics: buffers are None, batch statistics in eval too
  auto plain = std::make_shared<nn::BatchNorm1dImpl>(4, 1e-5, 0.1, /*affine=*/false, /*track_running_stats=*/false);
  EXPECT_TRUE(plain->named_parameters().keys().empty());
  EXPECT_TRUE(plain->named_buffers().keys().empty());
  EXPECT_EQ(plain->buffers_dict().keys(),
            (std::vector<std::string>{"running_mean", "running_var", "num_batches_tracked"}));
  plain->eval();
  Tensor x = randn({5, 4});
  EXPECT_TRUE(
      tensors_close((*plain)(x), F::batch_norm(x, Tensor(), Tensor(), F::BatchNormFuncOptions().training(true)), 0, 0));
}

TEST(BatchNormTest, ModuleGradcheckTrainAndEval) {
  auto bn = std::make_shared<nn::BatchNorm1dImpl>(nn::BatchNormOptions(3).dtype(kFloat64));
  {
    NoGradGuard g;
    bn->weight.copy_(randn({3}, kFloat64));
    bn->bias.copy_(randn({3}, kFloat64));
  }
  Tensor x = f64({4, 3, 2});
  EXPECT_TRUE(autograd::gradcheck([&](const variable_list& in) { return variable_list{(*bn)(in[0])}; }, {x}));
  bn->eval();
  EXPECT_TRUE(autograd::gradcheck([&](const variable_list& in) { return variable_list{(*bn)(in[0])}; }, {x}));
}

TEST(BatchNormTest, MovesWithTo) {
  auto bn = std::make_shared<nn::BatchNorm2dImpl>(2);
  (*bn)(randn({2, 2, 3, 3}));
  bn->to(kFloat64);
  EXPECT_EQ(bn->running_mean.dtype(), kFloat64);
  EXPECT_EQ(bn->num_batches_tracked.dtype(), kInt64);
  Tensor y = (*bn)(randn({2, 2, 3, 3}, kFloat64));
  EXPECT_EQ(y.dtype(), kFloat64);
  EXPECT_EQ(bn->num_batches_tracked.item<int64_t>(), 2);
}

TEST(BatchNormTest, Errors) {
  auto b1 = std::make_shared<nn::BatchNorm1dImpl>(3);
  auto b2 = std::make_shared<nn::BatchNorm2dImpl>(3);
  expect_error([&] { (*b1)(randn({2, 3, 4, 5})); }, "expected 2D or 3D input (got 4D input)");
  expect_error([&] { (*b2)(randn({2, 3, 4})); }, "expected 4D input (got 3D input)");
  expect_error([&] { (*b1)(randn({1, 3})); },
               "Expected more than 1 value per channel when training, got input size [1, 3]");
  b1->eval();
  EXPECT_EQ((*b1)(randn({1, 3})).sizes().vec(), (std::vector<int64_t>{1, 3}));  // fine in eval
}

TEST(BatchNormTest, PrintsAsPyTorch) {
  EXPECT_EQ(std::make_shared<nn::BatchNorm1dImpl>(3)->repr(),
            "BatchNorm1d(3, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True)");
  EXPECT_EQ(std::make_shared<nn::BatchNorm2dImpl>(nn::BatchNormOptions(3).momentum(std::nullopt))->repr(),
            "BatchNorm2d(3, eps=1e-05, momentum=None, affine=True, track_running_stats=True)");
  EXPECT_EQ(std::make_shared<nn::BatchNorm2dImpl>(8, 0.001, 0.01, false, false)->repr(),
            "BatchNorm2d(8, eps=0.001, momentum=0.01, affine=False, track_running_stats=False)");
}

}  // namespace
