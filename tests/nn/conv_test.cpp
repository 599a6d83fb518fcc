// Conv2d, MaxPool2d, AvgPool2d and their functional forms against PyTorch (tests/fixtures/nn_conv.txt,
// written by gen_nn_conv.py): default initialisation, forward and gradients, padding forms and modes,
// printed forms, errors; and a small conv net (conv -> batch norm -> relu -> max pool -> linear) trained
// one step and evaluated.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include <troupe/nn/functional/conv.h>
#include <troupe/nn/functional/pooling.h>
#include <troupe/nn/modules/batchnorm.h>
#include <troupe/nn/modules/conv.h>
#include <troupe/nn/modules/pooling.h>
#include <troupe/tensor/autograd.h>
#include <troupe/tensor/gradcheck.h>
#include <troupe/tensor/ops.h>

#include "common/fixtures.h"

namespace {

using namespace troupe;
namespace nn = troupe::nn;
namespace F = troupe::nn::functional;
using troupe::testing::Fixtures;
using troupe::testing::tensors_close;

const Fixtures& fx() {
  static const Fixtures f = Fixtures::load("nn_conv.txt");
  return f;
}

Tensor get(const std::string& name) { return fx().get(name); }
Tensor leaf(const std::string& name) { return fx().get(name).requires_grad_(true); }

/// Runs f and expects an exception whose message contains `text`.
template <class Fn>
void expect_error(Fn&& f, const std::string& text) {
  try {
    f();
    ADD_FAILURE() << "expected an error containing: " << text;
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << "message: " << e.what();
  }
}

// ---------------------------------------------------------------- Conv2d default initialisation

TEST(Conv2dTest, DefaultInitIsBitEqualToPyTorch) {
  for (std::string c : {"a", "b", "c"}) {
    SCOPED_TRACE("case " + c);
    auto p = fx().ints("init_" + c + "_params");  // [seed, in, out, kH, kW, groups, bias, float64]
    manual_seed(static_cast<uint64_t>(p[0]));
    auto opts = nn::Conv2dOptions(p[1], p[2], {p[3], p[4]}).groups(p[5]).bias(p[6] != 0);
    if (p[7]) opts.dtype(kFloat64);
    auto m = std::make_shared<nn::Conv2dImpl>(opts);
    EXPECT_TRUE(tensors_close(m->weight, get("init_" + c + "_weight"), 0, 0, true));
    EXPECT_TRUE(m->weight.requires_grad());
    if (p[6]) {
      EXPECT_TRUE(tensors_close(m->bias, get("init_" + c + "_bias"), 0, 0, true));
    } else {
      EXPECT_FALSE(m->bias.defined());
    }
  }
}

TEST(Conv2dTest, ParametersAndShapes) {
  auto m = std::make_shared<nn::Conv2dImpl>(4, 6, 3, /*stride=*/1, /*padding=*/1, /*dilation=*/1, /*groups=*/2);
  EXPECT_EQ(m->weight.sizes().vec(), (std::vector<int64_t>{6, 2, 3, 3}));
  EXPECT_EQ(m->bias.sizes().vec(), (std::vector<int64_t>{6}));
  auto names = m->named_parameters().keys();
  EXPECT_EQ(names, (std::vector<std::string>{"weight", "bias"}));
  Tensor y = (*m)(randn({2, 4, 5, 7}));
  EXPECT_EQ(y.sizes().vec(), (std::vector<int64_t>{2, 6, 5, 7}));
  // unbatched input
  EXPECT_EQ((*m)(randn({4, 5, 7})).sizes().vec(), (std::vector<int64_t>{6, 5, 7}));

  auto nb = std::make_shared<nn::Conv2dImpl>(nn::Conv2dOptions(2, 3, {2, 3}).bias(false).dtype(kFloat64));
  EXPECT_EQ(nb->named_parameters().keys(), (std::vector<std::string>{"weight"}));
  EXPECT_EQ(nb->weight.dtype(), kFloat64);
  EXPECT_FALSE(nb->bias.defined());
}

TEST(Conv2dTest, SkipInitLeavesParametersUninitialised) {
  manual_seed(5);
  Tensor before = rand({3});
  manual_seed(5);
  auto m = nn::skip_init<nn::Conv2dImpl>(2, 3, 3);
  // no random numbers were drawn
  EXPECT_TRUE(tensors_close(rand({3}), before, 0, 0));
  EXPECT_EQ(m->weight.sizes().vec(), (std::vector<int64_t>{3, 2, 3, 3}));
}

// ---------------------------------------------------------------- F::conv2d vs PyTorch

nn::Conv2dPadding padding_of(const std::vector<int64_t>& p, size_t at_code, size_t at_ints) {
  switch (p[at_code]) {
    case 1: return "same";
    case 2: return "valid";
    default: return nn::Conv2dPadding({p[at_ints], p[at_ints + 1]});
  }
}

TEST(FunctionalConv2dTest, ForwardAndBackwardMatchPyTorch) {
  for (int i = 0; i < 6; ++i) {
    SCOPED_TRACE("conv case " + std::to_string(i));
    const std::string c = "conv_" + std::to_string(i) + "_";
    auto p = fx().ints(c + "params");  // [sH, sW, pH, pW, dH, dW, groups, padding code, has_bias]
    Tensor x = leaf(c + "x"), w = leaf(c + "w");
    Tensor b = p[8] ? leaf(c + "b") : Tensor();
    Tensor out = F::conv2d(x, w,
                           F::Conv2dFuncOptions()
                               .bias(b)
                               .stride({p[0], p[1]})
                               .padding(padding_of(p, 7, 2))
                               .dilation({p[4], p[5]})
                               .groups(p[6]));
    EXPECT_TRUE(tensors_close(out, get(c + "out"), 1e-5, 1e-5));
    out.backward(get(c + "g"));
    EXPECT_TRUE(tensors_close(x.grad(), get(c + "dx"), 1e-5, 1e-5));
    EXPECT_TRUE(tensors_close(w.grad(), get(c + "dw"), 1e-5, 1e-4));
    if (p[8]) {
      EXPECT_TRUE(tensors_close(b.grad(), get(c + "db"), 1e-5, 1e-4));
    }
  }
}

TEST(FunctionalConv2dTest, SamePaddingKeepsTheSizeAndGradchecks) {
  // even kernel: the extra pixel of padding goes right / bottom
  Tensor x = randn({1, 2, 5, 6}, kFloat64).requires_grad_(true);
  Tensor w = randn({3, 2, 2, 4}, kFloat64).requires_grad_(true);
  Tensor b = randn({3}, kFloat64).requires_grad_(true);
  EXPECT_EQ(F::conv2d(x, w, F::Conv2dFuncOptions().bias(b).stride(1).padding("same")).sizes().vec(),
            (std::vector<int64_t>{1, 3, 5, 6}));
  EXPECT_EQ(F::conv2d(x, w, F::Conv2dFuncOptions().bias(b).stride(1).padding("same").dilation({2, 1})).sizes().vec(),
            (std::vector<int64_t>{1, 3, 5, 6}));
  EXPECT_EQ(F::conv2d(x, w, F::Conv2dFuncOptions().bias(b).stride(1).padding("valid")).sizes().vec(),
            (std::vector<int64_t>{1, 3, 4, 3}));
  EXPECT_TRUE(autograd::gradcheck(
      [](const autograd::variable_list& in) {
        return autograd::variable_list{
            F::conv2d(in[0], in[1], F::Conv2dFuncOptions().bias(in[2]).stride(1).padding("same").dilation({2, 1}))};
      },
      {x, w, b}));
}

TEST(FunctionalConv2dTest, Errors) {
  Tensor x = randn({1, 3, 6, 6}), w = randn({4, 3, 3, 3});
  expect_error([&] { F::conv2d(x, w, F::Conv2dFuncOptions().stride(2).padding("same")); },
               "padding='same' is not supported for strided convolutions");
  expect_error([&] { F::conv2d(x, w, F::Conv2dFuncOptions().stride(1).padding("foo")); },
               "Invalid padding string: 'foo'");
  // the tensor op reports a wrong channel count with PyTorch's text
  expect_error([&] { F::conv2d(randn({1, 3, 28, 28}), randn({20, 1, 5, 5})); },
               "Given groups=1, weight of size [20, 1, 5, 5], expected input[1, 3, 28, 28] to have 1 channels, but "
               "got 3 channels instead");
}

// ---------------------------------------------------------------- F::pad and Conv2d padding_mode

TEST(FunctionalPadTest, ModesAndErrors) {
  Tensor x = arange(6.).reshape({1, 2, 3});
  EXPECT_TRUE(tensors_close(F::pad(x, F::PadFuncOptions({1, 2}).mode("reflect")),
                            tensor({1., 0., 1., 2., 1., 0., 4., 3., 4., 5., 4., 3.}).reshape({1, 2, 6}), 0, 0));
  EXPECT_TRUE(tensors_close(F::pad(x, F::PadFuncOptions({1, 2}).mode("replicate")),
                            tensor({0., 0., 1., 2., 2., 2., 3., 3., 4., 5., 5., 5.}).reshape({1, 2, 6}), 0, 0));
  EXPECT_TRUE(tensors_close(F::pad(x, F::PadFuncOptions({1, 2}).mode("circular")),
                            tensor({2., 0., 1., 2., 0., 1., 5., 3., 4., 5., 3., 4.}).reshape({1, 2, 6}), 0, 0));
  EXPECT_TRUE(tensors_close(F::pad(x, F::PadFuncOptions({1, -1, 0, 1}).mode("constant").value(7.)),
                            tensor({7., 0., 1., 7., 3., 4., 7., 7., 7.}).reshape({1, 3, 3}), 0, 0));
  expect_error([&] { F::pad(x, F::PadFuncOptions({1, 2, 3})); }, "Padding length must be divisible by 2");
  expect_error([&] { F::pad(x, F::PadFuncOptions({1, 1, 1, 1, 1, 1, 1, 1})); }, "Padding length too large");
  expect_error([&] { F::pad(x, F::PadFuncOptions({1, 1}).mode("foo")); }, "Unrecognised padding mode foo");
  expect_error(
      [&] {
        F::pad(x, F::PadFuncOptions({1, 1}).mode("replicate").value(2.));
      },
      "Padding mode \"replicate\" doesn't take in value argument");
  expect_error(
      [&] {
        F::pad(randn({1, 1, 2, 2}), F::PadFuncOptions({3, 3, 0, 0}).mode("reflect"));
      },
      "Argument #4: Padding size should be less than the corresponding input dimension, but got: padding "
      "(3, 3) at dimension 3 of input 4");
  expect_error(
      [&] {
        F::pad(randn({1, 1, 2, 2}), F::PadFuncOptions({3, 3, 0, 0}).mode("circular"));
      },
      "Padding value causes wrapping around more than once.");
  expect_error(
      [&] {
        F::pad(randn({5}), F::PadFuncOptions({1, 1}).mode("reflect"));
      },
      "Only 2D, 3D, 4D, 5D padding with non-constant padding are supported for now");
}

TEST(Conv2dTest, PaddingModesMatchPyTorch) {
  const char* modes[] = {"zeros", "reflect", "replicate", "circular"};
  for (int i = 0; i < 5; ++i) {
    SCOPED_TRACE("padding_mode case " + std::to_string(i));
    const std::string c = "convmode_" + std::to_string(i) + "_";
    auto p = fx().ints(c + "params");  // [seed, in, out, k, pH, pW (-1: same), mode, groups]
    manual_seed(static_cast<uint64_t>(p[0]));
    auto opts = nn::Conv2dOptions(p[1], p[2], p[3]).padding_mode(modes[p[6]]).groups(p[7]);
    if (p[4] < 0) {
      opts.padding("same");
    } else {
      opts.padding({p[4], p[5]});
    }
    auto m = std::make_shared<nn::Conv2dImpl>(opts);
    EXPECT_TRUE(tensors_close(m->weight, get(c + "weight"), 0, 0));
    EXPECT_TRUE(tensors_close(m->bias, get(c + "bias"), 0, 0));
    Tensor x = leaf(c + "x");
    Tensor out = (*m)(x);
    EXPECT_TRUE(tensors_close(out, get(c + "out"), 1e-5, 1e-5));
    out.backward(get(c + "g"));
    EXPECT_TRUE(tensors_close(x.grad(), get(c + "dx"), 1e-5, 1e-5));
    EXPECT_TRUE(tensors_close(m->weight.grad(), get(c + "dw"), 1e-5, 1e-4));
  }
}

TEST(Conv2dTest, Errors) {
  expect_error([] { nn::Conv2d(3, 4, 3, 1, 0, 1, /*groups=*/2); }, "in_channels must be divisible by groups");
  expect_error([] { nn::Conv2d(4, 3, 3, 1, 0, 1, /*groups=*/2); }, "out_channels must be divisible by groups");
  expect_error([] { nn::Conv2d(4, 4, 3, 1, 0, 1, /*groups=*/0); }, "groups must be a positive integer");
  expect_error([] { nn::Conv2d(nn::Conv2dOptions(1, 1, 3).padding("full")); }, "Invalid padding string 'full'");
  expect_error([] { nn::Conv2d(nn::Conv2dOptions(1, 1, 3).padding("same").stride(2)); },
               "padding='same' is not supported for strided convolutions");
  expect_error([] { nn::Conv2d(nn::Conv2dOptions(1, 1, 3).padding_mode("mirror")); },
               "padding_mode must be one of {'zeros', 'reflect', 'replicate', 'circular'}, but got "
               "padding_mode='mirror'");
  auto m = std::make_shared<nn::Conv2dImpl>(1, 20, 5);
  expect_error([&] { (*m)(randn({1, 3, 28, 28})); },
               "Given groups=1, weight of size [20, 1, 5, 5], expected input[1, 3, 28, 28] to have 1 channels, but "
               "got 3 channels instead");
}

TEST(Conv2dTest, PrintsAsPyTorch) {
  // texts from PyTorch 1.13 (the `# repr:` lines of nn_conv.txt)
  EXPECT_EQ(std::make_shared<nn::Conv2dImpl>(1, 20, 5)->repr(), "Conv2d(1, 20, kernel_size=(5, 5), stride=(1, 1))");
  EXPECT_EQ(std::make_shared<nn::Conv2dImpl>(nn::Conv2dOptions(1, 20, {5, 3}).padding({1, 2}).dilation(2).bias(false))->repr(),
            "Conv2d(1, 20, kernel_size=(5, 3), stride=(1, 1), padding=(1, 2), dilation=(2, 2), bias=False)");
  EXPECT_EQ(std::make_shared<nn::Conv2dImpl>(nn::Conv2dOptions(4, 6, 3).stride({2, 1}).groups(2).padding(1))->repr(),
            "Conv2d(4, 6, kernel_size=(3, 3), stride=(2, 1), padding=(1, 1), groups=2)");
  EXPECT_EQ(std::make_shared<nn::Conv2dImpl>(nn::Conv2dOptions(2, 2, 3).padding("same").padding_mode("circular"))->repr(),
            "Conv2d(2, 2, kernel_size=(3, 3), stride=(1, 1), padding=same, padding_mode=circular)");
  EXPECT_EQ(std::make_shared<nn::Conv2dImpl>(nn::Conv2dOptions(2, 2, 3).padding("valid"))->repr(),
            "Conv2d(2, 2, kernel_size=(3, 3), stride=(1, 1), padding=valid)");
  EXPECT_EQ(std::make_shared<nn::Conv2dImpl>(nn::Conv2dOptions(2, 2, 2).padding("same").groups(2).padding_mode("reflect"))->repr(),
            "Conv2d(2, 2, kernel_size=(2, 2), stride=(1, 1), padding=same, groups=2, padding_mode=reflect)");
  EXPECT_EQ(std::make_shared<nn::MaxPool2dImpl>(2)->repr(), "MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False)");
  EXPECT_EQ(std::make_shared<nn::MaxPool2dImpl>(nn::MaxPool2dOptions({2, 3}).stride(1).padding({1, 0}).dilation(2).ceil_mode(true))->repr(),
            "MaxPool2d(kernel_size=(2, 3), stride=1, padding=(1, 0), dilation=2, ceil_mode=True)");
  EXPECT_EQ(std::make_shared<nn::AvgPool2dImpl>(2)->repr(), "AvgPool2d(kernel_size=2, stride=2, padding=0)");
  EXPECT_EQ(std::make_shared<nn::AvgPool2dImpl>(nn::AvgPool2dOptions({3, 2}).stride({2, 1}).padding(1).ceil_mode(true))->repr(),
            "AvgPool2d(kernel_size=(3, 2), stride=(2, 1), padding=1)");
}

// ---------------------------------------------------------------- pooling vs PyTorch

TEST(PoolingTest, MaxPool2dMatchesPyTorch) {
  for (int i = 0; i < 4; ++i) {
    SCOPED_TRACE("max_pool2d case " + std::to_string(i));
    const std::string c = "maxpool_" + std::to_string(i) + "_";
    auto p = fx().ints(c + "params");  // [kH, kW, sH, sW, pH, pW, dH, dW, ceil_mode]
    Tensor x = leaf(c + "x");
    auto [out, idx] = F::max_pool2d_with_indices(x, F::MaxPool2dFuncOptions({p[0], p[1]})
                                                        .stride({p[2], p[3]})
                                                        .padding({p[4], p[5]})
                                                        .dilation({p[6], p[7]})
                                                        .ceil_mode(p[8]));
    EXPECT_TRUE(tensors_close(out, get(c + "out"), 0, 0));
    EXPECT_TRUE(tensors_close(idx, get(c + "idx"), 0, 0, true));
    out.backward(get(c + "g"));
    EXPECT_TRUE(tensors_close(x.grad(), get(c + "dx"), 1e-6, 1e-6));
    // the module gives the same, and a tuple with return_indices
    auto m = std::make_shared<nn::MaxPool2dImpl>(nn::MaxPool2dOptions({p[0], p[1]})
                                                 .stride({p[2], p[3]})
                                                 .padding({p[4], p[5]})
                                                 .dilation({p[6], p[7]})
                                                 .ceil_mode(p[8] != 0));
    EXPECT_TRUE(tensors_close((*m)(x), get(c + "out"), 0, 0));
    m->options.return_indices(true);
    nn::Value r = (*m)(nn::Args{x});
    ASSERT_TRUE(r.is_tuple());
    EXPECT_TRUE(tensors_close(r.tuple().at(1), get(c + "idx"), 0, 0));
  }
  // stride defaults to the kernel size
  Tensor x = randn({1, 1, 4, 6});
  EXPECT_TRUE(tensors_close(F::max_pool2d(x, F::MaxPool2dFuncOptions(2)),
                            F::max_pool2d(x, F::MaxPool2dFuncOptions(2).stride(2)), 0, 0));
  EXPECT_EQ(nn::MaxPool2d(3)->options.stride()[1], 3);
}

TEST(PoolingTest, AvgPool2dMatchesPyTorch) {
  for (int i = 0; i < 5; ++i) {
    SCOPED_TRACE("avg_pool2d case " + std::to_string(i));
    const std::string c = "avgpool_" + std::to_string(i) + "_";
    auto p = fx().ints(c + "params");  // [kH, kW, sH, sW, pH, pW, ceil, count_include_pad, divisor (0: None)]
    std::optional<int64_t> div = p[8] ? std::optional<int64_t>(p[8]) : std::nullopt;
    Tensor x = leaf(c + "x");
    Tensor out = F::avg_pool2d(x, F::AvgPool2dFuncOptions({p[0], p[1]})
                                      .stride({p[2], p[3]})
                                      .padding({p[4], p[5]})
                                      .ceil_mode(p[6])
                                      .count_include_pad(p[7])
                                      .divisor_override(div));
    EXPECT_TRUE(tensors_close(out, get(c + "out"), 1e-6, 1e-6));
    out.backward(get(c + "g"));
    EXPECT_TRUE(tensors_close(x.grad(), get(c + "dx"), 1e-6, 1e-6));
    auto m = std::make_shared<nn::AvgPool2dImpl>(nn::AvgPool2dOptions({p[0], p[1]})
                                                 .stride({p[2], p[3]})
                                                 .padding({p[4], p[5]})
                                                 .ceil_mode(p[6] != 0)
                                                 .count_include_pad(p[7] != 0)
                                                 .divisor_override(div));
    EXPECT_TRUE(tensors_close((*m)(x), get(c + "out"), 1e-6, 1e-6));
  }
}

// ---------------------------------------------------------------- a small conv net vs PyTorch

TEST(ConvNetTest, TrainAndEvalStepsMatchPyTorch) {
  manual_seed(1000);
  auto conv = std::make_shared<nn::Conv2dImpl>(1, 4, 3);
  auto bn = std::make_shared<nn::BatchNorm2dImpl>(4);
  auto pool = std::make_shared<nn::MaxPool2dImpl>(2);
  EXPECT_TRUE(tensors_close(conv->weight, get("net_conv_w"), 0, 0));
  EXPECT_TRUE(tensors_close(conv->bias, get("net_conv_b"), 0, 0));
  Tensor fc_w = leaf("net_fc_w"), fc_b = leaf("net_fc_b");
  auto net = [&](const Tensor& x) {
    Tensor h = (*pool)(relu((*bn)((*conv)(x))));
    return linear(h.reshape({h.size(0), -1}), fc_w, fc_b);
  };
  struct Grad {
    std::string name;
    Tensor param;
  };
  const std::vector<Grad> params{{"conv_w", conv->weight}, {"conv_b", conv->bias}, {"bn_w", bn->weight},
                                 {"bn_b", bn->bias},       {"fc_w", fc_w},          {"fc_b", fc_b}};
  for (std::string phase : {"train", "eval"}) {
    SCOPED_TRACE(phase);
    if (phase == "eval") {
      for (const auto& g : params) g.param.set_grad(Tensor());
      conv->eval();
      bn->eval();
    }
    Tensor x = leaf("net_" + phase + "_x");
    Tensor out = net(x);
    EXPECT_TRUE(tensors_close(out, get("net_" + phase + "_out"), 1e-5, 1e-5));
    out.backward(get("net_" + phase + "_g"));
    EXPECT_TRUE(tensors_close(x.grad(), get("net_" + phase + "_dx"), 1e-4, 1e-5));
    for (const auto& g : params) {
      SCOPED_TRACE(g.name);
      EXPECT_TRUE(tensors_close(g.param.grad(), get("net_" + phase + "_d" + g.name), 1e-4, 1e-5));
    }
    EXPECT_TRUE(tensors_close(bn->running_mean, get("net_" + phase + "_running_mean"), 1e-5, 1e-6));
    EXPECT_TRUE(tensors_close(bn->running_var, get("net_" + phase + "_running_var"), 1e-5, 1e-6));
  }
  EXPECT_EQ(bn->num_batches_tracked.item<int64_t>(), 1);
}

}  // namespace
