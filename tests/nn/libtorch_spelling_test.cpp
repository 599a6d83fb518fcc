// Pins troupe's API to libtorch's spelling: every snippet below is written as it would be against libtorch
// (`torch::`, `torch::nn::functional::*FuncOptions`, `torch::kSum`), compiled against troupe through
// `namespace torch = troupe;`, and checked against a module form or a closed form. One case per
// nn::functional function and per audited overload; a signature that drifts from libtorch's fails to compile.
//
// The overload cases record what libtorch 1.13 does (probed against libtorch-dev): x.var(1) and x.var({1})
// reduce dim 1, x.var(true) reduces everything; the same for std, torch::var / std / var_mean.
#include <gtest/gtest.h>

#include <cmath>
#include <tuple>
#include <vector>

#include <troupe/nn/nn.h>
#include <troupe/tensor/ops.h>

namespace torch = troupe;
namespace F = torch::nn::functional;

namespace {

using Shape = std::vector<int64_t>;

::testing::AssertionResult close(const torch::Tensor& a, const torch::Tensor& b, double tol = 1e-6) {
  if (a.sizes().vec() != b.sizes().vec()) return ::testing::AssertionFailure() << "shapes differ";
  if (torch::allclose(a.to(torch::kFloat64), b.to(torch::kFloat64), tol, tol)) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "values differ";
}

Shape shape(const torch::Tensor& t) { return t.sizes().vec(); }

// (2, 3, 4) with distinct values, float64.
torch::Tensor x234() {
  return torch::arange(24.0, torch::TensorOptions().dtype(torch::kFloat64)).reshape({2, 3, 4}).sin();
}

}  // namespace

// ---------------------------------------------------------------- activations

TEST(LibtorchSpelling, Linear) {
  auto x = torch::randn({4, 3}), w = torch::randn({2, 3}), b = torch::randn({2});
  EXPECT_TRUE(close(F::linear(x, w, b), x.matmul(w.t()) + b));
  EXPECT_TRUE(close(F::linear(x, w), x.matmul(w.t())));
}

TEST(LibtorchSpelling, Relu) {
  auto x = torch::tensor({-1.0, 2.0});
  EXPECT_TRUE(close(F::relu(x), torch::tensor({0.0, 2.0})));
  auto y = x.clone();
  F::relu(y, F::ReLUFuncOptions(true));
  EXPECT_TRUE(close(y, torch::tensor({0.0, 2.0})));
  EXPECT_TRUE(close(F::relu(x, F::ReLUFuncOptions().inplace(false)), torch::tensor({0.0, 2.0})));
}

TEST(LibtorchSpelling, LeakyRelu) {
  auto x = torch::tensor({-1.0, 2.0});
  EXPECT_TRUE(close(F::leaky_relu(x, F::LeakyReLUFuncOptions().negative_slope(0.1)), torch::tensor({-0.1, 2.0})));
  EXPECT_TRUE(close(F::leaky_relu(x), torch::tensor({-0.01, 2.0})));
}

TEST(LibtorchSpelling, Elu) {
  auto x = torch::tensor({-1.0, 2.0});
  EXPECT_TRUE(close(F::elu(x, F::ELUFuncOptions().alpha(0.5)), torch::tensor({0.5 * (std::exp(-1.0) - 1), 2.0})));
}

TEST(LibtorchSpelling, Gelu) {
  auto x = torch::tensor({-1.0, 0.5});
  auto exact = x * 0.5 * (1 + torch::erf(x / std::sqrt(2.0)));
  EXPECT_TRUE(close(F::gelu(x), exact));
  EXPECT_TRUE(close(F::gelu(x, F::GELUFuncOptions().approximate("tanh")), exact, 1e-3));
}

TEST(LibtorchSpelling, Silu) {
  auto x = torch::tensor({-1.0, 2.0});
  EXPECT_TRUE(close(F::silu(x), x * x.sigmoid()));
}

TEST(LibtorchSpelling, Softmax) {
  auto x = x234();
  auto e = x.exp();
  EXPECT_TRUE(close(F::softmax(x, F::SoftmaxFuncOptions(1)), e / e.sum({1}, true)));
  EXPECT_EQ(F::softmax(x, F::SoftmaxFuncOptions(-1).dtype(torch::kFloat32)).dtype(), torch::kFloat32);
}

TEST(LibtorchSpelling, LogSoftmax) {
  auto x = x234();
  EXPECT_TRUE(close(F::log_softmax(x, F::LogSoftmaxFuncOptions(2)), F::softmax(x, F::SoftmaxFuncOptions(2)).log()));
}

// ---------------------------------------------------------------- layers

TEST(LibtorchSpelling, Dropout) {
  auto x = torch::ones({8, 8});
  EXPECT_TRUE(F::dropout(x, F::DropoutFuncOptions().p(0.2).training(false)).equal(x));
  auto y = F::dropout(x, F::DropoutFuncOptions().p(0.5));
  // every element is 0 or 1 / (1 - p)
  EXPECT_TRUE(torch::logical_or(y.eq(0), y.eq(2)).all().item<bool>());
}

TEST(LibtorchSpelling, Embedding) {
  auto w = torch::randn({5, 3});
  auto idx = torch::tensor({int64_t{4}, int64_t{0}});
  EXPECT_TRUE(close(F::embedding(idx, w), torch::stack({w[4], w[0]})));
  auto g = torch::randn({5, 3}).requires_grad_(true);
  F::embedding(idx, g, F::EmbeddingFuncOptions().padding_idx(0)).sum().backward();
  EXPECT_TRUE(close(g.grad()[0], torch::zeros({3})));
  EXPECT_TRUE(close(g.grad()[4], torch::ones({3})));
}

TEST(LibtorchSpelling, Conv2d) {
  auto x = torch::randn({1, 2, 5, 5}), w = torch::randn({3, 2, 3, 3}), b = torch::randn({3});
  auto y = F::conv2d(x, w, F::Conv2dFuncOptions().bias(b).stride(2).padding(1));
  EXPECT_EQ(shape(y), (Shape{1, 3, 3, 3}));
  EXPECT_TRUE(close(y, torch::conv2d(x, w, b, 2, 1), 1e-5));
  EXPECT_EQ(shape(F::conv2d(x, w, F::Conv2dFuncOptions().padding(torch::kSame))), (Shape{1, 3, 5, 5}));
  EXPECT_EQ(shape(F::conv2d(x, w, F::Conv2dFuncOptions().padding(torch::kValid))), (Shape{1, 3, 3, 3}));
  EXPECT_EQ(shape(F::conv2d(x, w)), (Shape{1, 3, 3, 3}));
}

TEST(LibtorchSpelling, Pad) {
  auto x = torch::tensor({1.0, 2.0, 3.0}).reshape({1, 1, 3});
  EXPECT_TRUE(close(F::pad(x, F::PadFuncOptions({1, 1}).mode(torch::kReflect)),
                    torch::tensor({2.0, 1.0, 2.0, 3.0, 2.0}).reshape({1, 1, 5})));
  EXPECT_TRUE(
      close(F::pad(x, F::PadFuncOptions({1, 0}).value(9)), torch::tensor({9.0, 1.0, 2.0, 3.0}).reshape({1, 1, 4})));
  EXPECT_TRUE(close(F::pad(x, F::PadFuncOptions({0, 1}).mode(torch::kReplicate)),
                    torch::tensor({1.0, 2.0, 3.0, 3.0}).reshape({1, 1, 4})));
}

TEST(LibtorchSpelling, MaxPool2d) {
  auto x = torch::arange(16.0).reshape({1, 1, 4, 4});
  EXPECT_TRUE(
      close(F::max_pool2d(x, F::MaxPool2dFuncOptions(2)), torch::tensor({5.0, 7.0, 13.0, 15.0}).reshape({1, 1, 2, 2})));
  EXPECT_EQ(shape(F::max_pool2d(x, F::MaxPool2dFuncOptions(3).stride(1))), (Shape{1, 1, 2, 2}));
  auto [out, idx] = F::max_pool2d_with_indices(x, F::MaxPool2dFuncOptions(2));
  EXPECT_TRUE(close(out, F::max_pool2d(x, F::MaxPool2dFuncOptions(2))));
  EXPECT_TRUE(idx.equal(torch::tensor({int64_t{5}, int64_t{7}, int64_t{13}, int64_t{15}}).reshape({1, 1, 2, 2})));
}

TEST(LibtorchSpelling, AvgPool2d) {
  auto x = torch::arange(16.0).reshape({1, 1, 4, 4});
  EXPECT_TRUE(
      close(F::avg_pool2d(x, F::AvgPool2dFuncOptions(2)), torch::tensor({2.5, 4.5, 10.5, 12.5}).reshape({1, 1, 2, 2})));
  EXPECT_EQ(shape(F::avg_pool2d(x, F::AvgPool2dFuncOptions(3).stride(2).padding(1))), (Shape{1, 1, 2, 2}));
}

TEST(LibtorchSpelling, LayerNorm) {
  auto x = x234();
  auto mean = x.mean({2}, true), var = x.var({2}, false, true);
  EXPECT_TRUE(close(F::layer_norm(x, F::LayerNormFuncOptions({4})), (x - mean) / (var + 1e-5).sqrt(), 1e-6));
  auto w = torch::randn({4}, torch::TensorOptions().dtype(torch::kFloat64));
  EXPECT_TRUE(close(F::layer_norm(x, F::LayerNormFuncOptions({4}).weight(w).eps(1e-3)),
                    (x - mean) / (var + 1e-3).sqrt() * w, 1e-6));
}

TEST(LibtorchSpelling, BatchNorm) {
  auto x = x234();  // (N=2, C=3, L=4)
  auto mean = torch::zeros({3}, x.options()), var = torch::ones({3}, x.options());
  auto w = torch::full({3}, 2.0, x.options()), b = torch::full({3}, 0.5, x.options());
  auto y = F::batch_norm(x, mean, var, F::BatchNormFuncOptions().weight(w).bias(b).training(true));
  const std::vector<int64_t> nl{0, 2};  // a braced {0, 2} is ambiguous in libtorch (IntArrayRef or DimnameList)
  auto bm = x.mean(nl, true), bv = x.var(nl, false, true);
  EXPECT_TRUE(close(y, (x - bm) / (bv + 1e-5).sqrt() * 2 + 0.5, 1e-6));
  EXPECT_TRUE(close(mean, bm.reshape({3}) * 0.1, 1e-12));  // running mean updated in place
  // eval: the running statistics (default options: training false)
  EXPECT_TRUE(close(F::batch_norm(x, torch::zeros({3}, x.options()), torch::ones({3}, x.options())),
                    x / std::sqrt(1 + 1e-5), 1e-12));
}

// ---------------------------------------------------------------- losses

TEST(LibtorchSpelling, MseLoss) {
  auto x = x234(), y = x234().cos();
  EXPECT_TRUE(close(F::mse_loss(x, y), (x - y).square().mean()));
  EXPECT_TRUE(close(F::mse_loss(x, y, F::MSELossFuncOptions(torch::kSum)), (x - y).square().sum()));
  EXPECT_TRUE(close(F::mse_loss(x, y, F::MSELossFuncOptions().reduction(torch::kNone)), (x - y).square()));
}

TEST(LibtorchSpelling, L1Loss) {
  auto x = x234(), y = x234().cos();
  EXPECT_TRUE(close(F::l1_loss(x, y, F::L1LossFuncOptions(torch::kSum)), (x - y).abs().sum()));
}

TEST(LibtorchSpelling, SmoothL1Loss) {
  auto x = torch::tensor({0.0, 3.0}), y = torch::tensor({0.5, 0.0});
  // |d| = 0.5 < beta: 0.5 * 0.25 / 1; |d| = 3: 3 - 0.5
  EXPECT_TRUE(close(F::smooth_l1_loss(x, y, F::SmoothL1LossFuncOptions(torch::kNone)), torch::tensor({0.125, 2.5})));
  // options.beta() takes effect, as in PyTorch 2.x (libtorch 1.13 ignored it for a separate `double beta`)
  EXPECT_TRUE(
      close(F::smooth_l1_loss(x, y, F::SmoothL1LossFuncOptions().beta(0.25)), torch::tensor({0.375, 2.875}).mean()));
}

TEST(LibtorchSpelling, HuberLoss) {
  auto x = torch::tensor({0.0, 3.0}), y = torch::tensor({0.5, 0.0});
  EXPECT_TRUE(close(F::huber_loss(x, y, F::HuberLossFuncOptions().reduction(torch::kSum).delta(2.0)),
                    torch::scalar_tensor(0.125 + 2.0 * (3.0 - 1.0), torch::TensorOptions().dtype(torch::kFloat64))));
}

TEST(LibtorchSpelling, NllLoss) {
  auto logp = torch::randn({3, 4}).log_softmax(1);
  auto t = torch::tensor({int64_t{1}, int64_t{3}, int64_t{0}});
  auto picked = torch::stack({logp[0][1], logp[1][3], logp[2][0]});
  EXPECT_TRUE(close(F::nll_loss(logp, t), -picked.mean()));
  EXPECT_TRUE(close(F::nll_loss(logp, t, F::NLLLossFuncOptions().ignore_index(3).reduction(torch::kSum)),
                    -(picked[0] + picked[2])));
}

TEST(LibtorchSpelling, CrossEntropy) {
  auto x = torch::randn({3, 4});
  auto t = torch::tensor({int64_t{1}, int64_t{3}, int64_t{0}});
  EXPECT_TRUE(close(F::cross_entropy(x, t), F::nll_loss(F::log_softmax(x, F::LogSoftmaxFuncOptions(1)), t)));
  torch::nn::CrossEntropyLoss module(torch::nn::CrossEntropyLossOptions().label_smoothing(0.1));
  EXPECT_TRUE(close(F::cross_entropy(x, t, F::CrossEntropyFuncOptions().label_smoothing(0.1)), module(x, t)));
  // label smoothing 1: the loss against the uniform distribution, -mean_c log_softmax
  EXPECT_TRUE(close(F::cross_entropy(x, t, F::CrossEntropyFuncOptions().label_smoothing(1.0)),
                    -x.log_softmax(1).mean({1}).mean(), 1e-6));
}

TEST(LibtorchSpelling, BinaryCrossEntropy) {
  auto p = torch::tensor({0.25, 0.5}), t = torch::tensor({1.0, 0.0});
  auto w = torch::tensor({2.0, 1.0});
  EXPECT_TRUE(close(F::binary_cross_entropy(p, t, F::BinaryCrossEntropyFuncOptions().weight(w).reduction(torch::kNone)),
                    torch::tensor({-2 * std::log(0.25), -std::log(0.5)})));
}

TEST(LibtorchSpelling, BinaryCrossEntropyWithLogits) {
  auto x = torch::tensor({-1.0, 2.0}), t = torch::tensor({1.0, 0.0});
  auto pw = torch::tensor({3.0, 3.0});
  auto expect = -(3 * t * x.sigmoid().log() + (1 - t) * (1 - x.sigmoid()).log());
  EXPECT_TRUE(close(F::binary_cross_entropy_with_logits(
                        x, t, F::BinaryCrossEntropyWithLogitsFuncOptions().pos_weight(pw).reduction(torch::kNone)),
                    expect));
  EXPECT_TRUE(close(F::binary_cross_entropy_with_logits(x, t), F::binary_cross_entropy(x.sigmoid(), t)));
}

// ---------------------------------------------------------------- overloads resolved as libtorch's

TEST(LibtorchSpellingOverloads, VarIntIsADim) {
  auto x = x234();
  EXPECT_EQ(shape(x.var(1)), (Shape{2, 4}));
  EXPECT_TRUE(close(x.var(1), x.var(torch::IntArrayRef{1}, true, false), 0));
  EXPECT_EQ(shape(x.var(0)), (Shape{3, 4}));
  EXPECT_EQ(shape(x.var({1})), (Shape{2, 4}));
  EXPECT_EQ(shape(x.var(1, true, true)), (Shape{2, 1, 4}));
  EXPECT_EQ(shape(x.var({1}, true, true)), (Shape{2, 1, 4}));
}

TEST(LibtorchSpellingOverloads, VarBoolIsUnbiased) {
  auto x = x234();
  const double n = 24;
  EXPECT_EQ(shape(x.var(true)), Shape{});
  EXPECT_EQ(shape(x.var()), Shape{});
  EXPECT_TRUE(close(x.var(false), x.var(true) * ((n - 1) / n), 1e-12));
  EXPECT_TRUE(close(x.var(1, false), x.var(1) * (2.0 / 3.0), 1e-12));  // dim 1, biased
}

TEST(LibtorchSpellingOverloads, Std) {
  auto x = x234();
  EXPECT_EQ(shape(x.std(1)), (Shape{2, 4}));
  EXPECT_EQ(shape(x.std(0)), (Shape{3, 4}));
  EXPECT_TRUE(close(x.std({1}), x.var(1).sqrt(), 1e-12));
  EXPECT_EQ(shape(x.std(true)), Shape{});
  EXPECT_TRUE(close(x.std(1, false), x.var(1, false).sqrt(), 1e-12));
}

TEST(LibtorchSpellingOverloads, FreeVarStdVarMean) {
  auto x = x234();
  EXPECT_TRUE(close(torch::var(x, 1), x.var(1), 0));
  EXPECT_TRUE(close(torch::std(x, 1), x.std(1), 0));
  EXPECT_EQ(shape(torch::var(x, true)), Shape{});
  EXPECT_TRUE(close(torch::var(x, false), x.var(false), 0));
  EXPECT_EQ(shape(torch::std(x, false)), Shape{});
  auto [v, m] = torch::var_mean(x, 1);
  EXPECT_TRUE(close(v, x.var(1), 0));
  EXPECT_TRUE(close(m, x.mean({1}), 1e-15));
  EXPECT_EQ(shape(std::get<0>(torch::var_mean(x, true))), Shape{});
}

TEST(LibtorchSpellingOverloads, SumMeanProd) {
  auto x = x234();
  EXPECT_EQ(shape(x.sum(1)), (Shape{2, 4}));
  EXPECT_EQ(shape(x.sum({1})), (Shape{2, 4}));
  EXPECT_EQ(shape(x.sum(1, true)), (Shape{2, 1, 4}));
  EXPECT_EQ(shape(x.sum()), Shape{});
  EXPECT_EQ(shape(torch::sum(x, 1)), (Shape{2, 4}));
  EXPECT_EQ(shape(x.mean(1)), (Shape{2, 4}));
  EXPECT_EQ(shape(x.mean(1, true)), (Shape{2, 1, 4}));
  EXPECT_EQ(shape(torch::mean(x, 1)), (Shape{2, 4}));
  EXPECT_TRUE(close(x.mean(1), x.sum(1) / 3, 1e-12));
  EXPECT_EQ(shape(x.prod(1)), (Shape{2, 4}));
  EXPECT_EQ(shape(x.prod(1, true)), (Shape{2, 1, 4}));
}

TEST(LibtorchSpellingOverloads, ArgmaxAmaxLogsumexpMaxMin) {
  auto x = x234();
  EXPECT_EQ(shape(x.argmax(1)), (Shape{2, 4}));
  EXPECT_EQ(shape(x.argmax()), Shape{});
  EXPECT_EQ(shape(x.argmax(1, true)), (Shape{2, 1, 4}));
  EXPECT_EQ(shape(x.amax(1)), (Shape{2, 4}));
  EXPECT_EQ(shape(x.amax({1, 2}, true)), (Shape{2, 1, 1}));
  EXPECT_TRUE(close(x.logsumexp(1), x.exp().sum(1).log(), 1e-12));
  EXPECT_TRUE(close(std::get<0>(x.max(1)), x.amax(1), 0));
  EXPECT_EQ(shape(std::get<0>(x.min(1, true))), (Shape{2, 1, 4}));
}

TEST(LibtorchSpellingOverloads, AllAnyNorm) {
  auto b = x234().gt(0);
  EXPECT_EQ(shape(b.all(1)), (Shape{2, 4}));
  EXPECT_EQ(shape(b.any(1)), (Shape{2, 4}));
  EXPECT_EQ(shape(b.all(1, true)), (Shape{2, 1, 4}));
  EXPECT_TRUE(b.all(1).equal(b.to(torch::kInt64).sum(1).eq(3)));
  auto x = x234();
  EXPECT_EQ(shape(x.norm()), Shape{});
  EXPECT_TRUE(close(x.norm(1), x.abs().sum(), 1e-12));  // a scalar p, not a dim
  EXPECT_TRUE(close(x.norm(2, 1), x.square().sum(1).sqrt(), 1e-12));
  EXPECT_EQ(shape(x.norm(2, {1}, true)), (Shape{2, 1, 4}));
}
