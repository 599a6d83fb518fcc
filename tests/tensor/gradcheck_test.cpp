// Finite-difference checks of every differentiable op's backward (and of a subset's double backward),
// table-driven: one Case per op / overload / shape case. Plus tests of gradcheck itself (it must fail on a
// wrong backward) and a test that the table covers every expected op name.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "tensor/autograd.h"
#include "tensor/gradcheck.h"
#include "tensor/indexing.h"
#include "tensor/ops.h"

namespace {

using namespace troupe;
using troupe::autograd::GradcheckOptions;
using troupe::autograd::variable_list;
using troupe::indexing::Ellipsis;
using troupe::indexing::None;
using troupe::indexing::Slice;

using Fn = std::function<variable_list(const variable_list&)>;

struct Case {
  std::string name;
  Fn fn;
  std::vector<Tensor> inputs;
  bool gradgrad = false;  // also run gradgradcheck
  GradcheckOptions opts = {};
};

// ---------------------------------------------------------------- inputs (float64, deterministic)

std::mt19937_64& rng() {
  static std::mt19937_64 r(20240611);
  return r;
}

Tensor from_values(const std::vector<double>& v, IntArrayRef shape, bool rg = true) {
  Tensor t = tensor(v, TensorOptions().dtype(kFloat64)).reshape(shape).contiguous();
  if (rg) t.requires_grad_(true);
  return t;
}

int64_t numel_of(IntArrayRef shape) {
  int64_t n = 1;
  for (auto s : shape) n *= s;
  return n;
}

/// Random values with |x| in [0.2, 1.2] and a random sign: away from 0 (relu, abs, ...), all distinct.
Tensor R(IntArrayRef shape) {
  std::uniform_real_distribution<double> u(0.2, 1.2);
  std::bernoulli_distribution s(0.5);
  std::vector<double> v(static_cast<size_t>(numel_of(shape)));
  for (auto& x : v) x = s(rng()) ? u(rng()) : -u(rng());
  return from_values(v, shape);
}

/// Positive values in [0.5, 2] (log, sqrt, pow base, divisors).
Tensor P(IntArrayRef shape) {
  std::uniform_real_distribution<double> u(0.5, 2.0);
  std::vector<double> v(static_cast<size_t>(numel_of(shape)));
  for (auto& x : v) x = u(rng());
  return from_values(v, shape);
}

/// Fixed values (requires grad).
Tensor V(std::vector<double> v, IntArrayRef shape) { return from_values(v, shape); }

/// int64 index tensor (no grad).
Tensor I(std::vector<int64_t> v, IntArrayRef shape) { return tensor(v).reshape(shape).contiguous(); }
Tensor I(std::vector<int64_t> v) { return tensor(v); }

/// bool mask from 0/1 values.
Tensor M(std::vector<int64_t> v, IntArrayRef shape) { return tensor(v).reshape(shape).to(kBool).contiguous(); }

GradcheckOptions loose(double eps, double atol, double rtol = 1e-3) {
  GradcheckOptions o;
  o.eps = eps;
  o.atol = atol;
  o.rtol = rtol;
  return o;
}

variable_list L(Tensor t) { return {std::move(t)}; }

// ---------------------------------------------------------------- the table

std::vector<Case> build_cases() {
  std::vector<Case> c;
  auto C = [&c](std::string name, Fn fn, std::vector<Tensor> inputs, bool gg = false,
                  GradcheckOptions o = GradcheckOptions{}) {
    c.push_back(Case{std::move(name), std::move(fn), std::move(inputs), gg, o});
  };

  // ---- elementwise binary
  C("add_tensor", [](const variable_list& v) { return L(add(v[0], v[1])); }, {R({2, 3}), R({2, 3})});
  C("add_scalar", [](const variable_list& v) { return L(add(v[0], 1.5)); }, {R({2, 3})});
  C("add_alpha", [](const variable_list& v) { return L(add(v[0], v[1], 2.5)); }, {R({2, 3}), R({2, 3})});
  C("add_broadcast", [](const variable_list& v) { return L(add(v[0], v[1])); }, {R({3, 1}), R({1, 4})});
  C("add_broadcast_rank", [](const variable_list& v) { return L(v[0] + v[1]); }, {R({2, 3, 4}), R({4})});
  C("add_broadcast_0dim", [](const variable_list& v) { return L(v[0] + v[1]); }, {R({}), R({3})});
  C("add_operator_scalar_left", [](const variable_list& v) { return L(2.0 + v[0]); }, {R({3})});
  C("sub_tensor", [](const variable_list& v) { return L(sub(v[0], v[1])); }, {R({2, 3}), R({2, 3})});
  C("sub_scalar", [](const variable_list& v) { return L(sub(v[0], 0.5)); }, {R({2, 3})});
  C("sub_alpha", [](const variable_list& v) { return L(sub(v[0], v[1], -1.5)); }, {R({2, 3}), R({2, 3})});
  C("sub_broadcast", [](const variable_list& v) { return L(v[0] - v[1]); }, {R({5, 1, 3}), R({1, 2, 1})});
  C("rsub", [](const variable_list& v) { return L(2.0 - v[0]); }, {R({2, 3})});
  C("mul_tensor", [](const variable_list& v) { return L(mul(v[0], v[1])); }, {R({2, 3}), R({2, 3})}, true);
  C("mul_scalar", [](const variable_list& v) { return L(mul(v[0], -1.75)); }, {R({2, 3})});
  C("mul_broadcast", [](const variable_list& v) { return L(v[0] * v[1]); }, {R({3, 1}), R({1, 4})}, true);
  C("mul_same_input", [](const variable_list& v) { return L(v[0] * v[0]); }, {R({4})}, true);
  C("div_tensor", [](const variable_list& v) { return L(div(v[0], v[1])); }, {R({2, 3}), P({2, 3})}, true);
  C("div_scalar", [](const variable_list& v) { return L(div(v[0], 3.0)); }, {R({2, 3})});
  C("div_scalar_by_tensor", [](const variable_list& v) { return L(div(2.0, v[0])); }, {P({2, 3})}, true);
  C("div_broadcast", [](const variable_list& v) { return L(v[0] / v[1]); }, {R({2, 3}), P({3})});
  C("pow_tensor_tensor", [](const variable_list& v) { return L(pow(v[0], v[1])); }, {P({2, 3}), R({2, 3})}, true);
  C("pow_tensor_tensor_broadcast", [](const variable_list& v) { return L(pow(v[0], v[1])); }, {P({2, 3}), R({3})});
  C("pow_tensor_scalar", [](const variable_list& v) { return L(pow(v[0], 3.0)); }, {R({2, 3})}, true);
  C("pow_tensor_scalar_frac", [](const variable_list& v) { return L(pow(v[0], 0.5)); }, {P({2, 3})}, true);
  C("pow_tensor_scalar_two", [](const variable_list& v) { return L(v[0].pow(2)); }, {R({2, 3})}, true);
  C("pow_tensor_scalar_neg", [](const variable_list& v) { return L(pow(v[0], -1.5)); }, {P({2, 3})});
  C("pow_scalar_tensor", [](const variable_list& v) { return L(pow(2.5, v[0])); }, {R({2, 3})}, true);
  C("maximum", [](const variable_list& v) { return L(maximum(v[0], v[1])); }, {R({2, 3}), R({2, 3})});
  C("maximum_broadcast", [](const variable_list& v) { return L(maximum(v[0], v[1])); }, {R({3, 1}), R({1, 4})});
  C("minimum", [](const variable_list& v) { return L(minimum(v[0], v[1])); }, {R({2, 3}), R({2, 3})});
  C("minimum_broadcast", [](const variable_list& v) { return L(v[0].minimum(v[1])); }, {R({3, 1}), R({4})});
  C("lerp", [](const variable_list& v) { return L(lerp(v[0], v[1], 0.3)); }, {R({2, 3}), R({2, 3})});
  C("where_tensor", [](const variable_list& v) { return L(where(M({1, 0, 1, 0, 0, 1}, {2, 3}), v[0], v[1])); },
      {R({2, 3}), R({2, 3})});
  C("where_broadcast", [](const variable_list& v) { return L(where(M({1, 0, 1}, {3}), v[0], v[1])); },
      {R({2, 3}), R({2, 1})});
  C("where_scalar", [](const variable_list& v) { return L(where(M({1, 0, 1, 0, 0, 1}, {2, 3}), v[0], 0.5)); },
      {R({2, 3})});
  C("where_scalar_left", [](const variable_list& v) { return L(where(M({1, 0, 1, 0, 0, 1}, {2, 3}), -0.5, v[0])); },
      {R({2, 3})});
  C("masked_fill", [](const variable_list& v) { return L(masked_fill(v[0], M({0, 1, 1, 0, 0, 1}, {2, 3}), 7.0)); },
      {R({2, 3})});
  C("masked_fill_broadcast_mask", [](const variable_list& v) { return L(v[0].masked_fill(M({0, 1, 1}, {3}), -2.0)); },
      {R({2, 3})});

  // ---- elementwise unary
  C("neg", [](const variable_list& v) { return L(neg(v[0])); }, {R({2, 3})});
  C("neg_operator", [](const variable_list& v) { return L(-v[0]); }, {R({2, 3})});
  C("abs", [](const variable_list& v) { return L(abs(v[0])); }, {R({2, 3})});
  C("exp", [](const variable_list& v) { return L(exp(v[0])); }, {R({2, 3})}, true);
  C("log", [](const variable_list& v) { return L(log(v[0])); }, {P({2, 3})}, true);
  C("log1p", [](const variable_list& v) { return L(log1p(v[0])); }, {P({2, 3})});
  C("sqrt", [](const variable_list& v) { return L(sqrt(v[0])); }, {P({2, 3})});
  C("rsqrt", [](const variable_list& v) { return L(rsqrt(v[0])); }, {P({2, 3})});
  C("sin", [](const variable_list& v) { return L(sin(v[0])); }, {R({2, 3})});
  C("cos", [](const variable_list& v) { return L(cos(v[0])); }, {R({2, 3})});
  C("tanh", [](const variable_list& v) { return L(tanh(v[0])); }, {R({2, 3})}, true);
  C("sigmoid", [](const variable_list& v) { return L(sigmoid(v[0])); }, {R({2, 3})}, true);
  C("relu", [](const variable_list& v) { return L(relu(v[0])); }, {R({2, 3})});
  C("gelu_none", [](const variable_list& v) { return L(gelu(v[0])); }, {R({2, 3})}, true);
  C("gelu_tanh", [](const variable_list& v) { return L(gelu(v[0], "tanh")); }, {R({2, 3})}, true);
  C("silu", [](const variable_list& v) { return L(silu(v[0])); }, {R({2, 3})}, true);
  C("softplus", [](const variable_list& v) { return L(softplus(v[0])); }, {R({2, 3})});
  C("softplus_beta_threshold", [](const variable_list& v) { return L(softplus(v[0], 2.0, 1.0)); }, {R({3, 4})});
  C("leaky_relu", [](const variable_list& v) { return L(leaky_relu(v[0], 0.1)); }, {R({2, 3})});
  C("elu", [](const variable_list& v) { return L(elu(v[0], 1.3)); }, {R({2, 3})});
  C("reciprocal", [](const variable_list& v) { return L(reciprocal(v[0])); }, {R({2, 3})});
  C("square", [](const variable_list& v) { return L(square(v[0])); }, {R({2, 3})});
  C("erf", [](const variable_list& v) { return L(erf(v[0])); }, {R({2, 3})});
  C("sign", [](const variable_list& v) { return L(sign(v[0]) * v[0]); }, {R({2, 3})});
  C("clamp_both", [](const variable_list& v) { return L(clamp(v[0], -0.5, 0.6)); }, {R({3, 4})});
  C("clamp_min_only", [](const variable_list& v) { return L(clamp(v[0], 0.3)); }, {R({3, 4})});
  C("clamp_max_only", [](const variable_list& v) { return L(v[0].clamp(std::nullopt, 0.3)); }, {R({3, 4})});
  C("clamp_min", [](const variable_list& v) { return L(clamp_min(v[0], -0.4)); }, {R({3, 4})});
  C("clamp_max", [](const variable_list& v) { return L(clamp_max(v[0], 0.4)); }, {R({3, 4})});

  // ---- views
  C("view", [](const variable_list& v) { return L(v[0].view({3, 2})); }, {R({2, 3})});
  C("view_infer", [](const variable_list& v) { return L(v[0].view({-1}) * 2.0); }, {R({2, 3})});
  C("reshape", [](const variable_list& v) { return L(v[0].reshape({6, 1})); }, {R({2, 3})});
  C("reshape_of_transposed", [](const variable_list& v) { return L(v[0].t().reshape({6})); }, {R({2, 3})});
  C("transpose", [](const variable_list& v) { return L(v[0].transpose(0, 2)); }, {R({2, 3, 2})});
  C("permute", [](const variable_list& v) { return L(v[0].permute({2, 0, 1})); }, {R({2, 3, 2})});
  C("t", [](const variable_list& v) { return L(v[0].t()); }, {R({2, 3})});
  C("squeeze_all", [](const variable_list& v) { return L(v[0].squeeze()); }, {R({2, 1, 3, 1})});
  C("squeeze_dim", [](const variable_list& v) { return L(v[0].squeeze(1)); }, {R({2, 1, 3})});
  C("unsqueeze", [](const variable_list& v) { return L(v[0].unsqueeze(-1)); }, {R({2, 3})});
  C("expand", [](const variable_list& v) { return L(v[0].expand({2, 3, 4})); }, {R({3, 1})});
  C("broadcast_to", [](const variable_list& v) { return L(broadcast_to(v[0], {2, 3})); }, {R({3})});
  C("narrow", [](const variable_list& v) { return L(v[0].narrow(1, 1, 2)); }, {R({2, 4})});
  C("select", [](const variable_list& v) { return L(v[0].select(1, -1)); }, {R({2, 4})});
  C("slice_step", [](const variable_list& v) { return L(v[0].slice(1, 0, 5, 2)); }, {R({2, 5})});
  C("flatten", [](const variable_list& v) { return L(v[0].flatten(1)); }, {R({2, 3, 2})});
  C("unflatten", [](const variable_list& v) { return L(v[0].unflatten(1, {2, 3})); }, {R({2, 6})});
  C("as_strided", [](const variable_list& v) { return L(v[0].as_strided({2, 2}, {1, 2}, 1)); }, {R({6})});
  C("movedim", [](const variable_list& v) { return L(v[0].movedim(0, 2)); }, {R({2, 3, 2})});
  C("index_slices", [](const variable_list& v) { return L(v[0].index({Slice(1, 3), Slice(std::nullopt, std::nullopt, 2)})); },
      {R({3, 4})});
  C("index_ints", [](const variable_list& v) { return L(v[0].index({1, Ellipsis, -1})); }, {R({3, 2, 4})});
  C("index_none_ellipsis", [](const variable_list& v) { return L(v[0].index({None, Ellipsis, 0})); }, {R({3, 4})});
  C("index_tensor", [](const variable_list& v) { return L(v[0].index({I({2, 0, 2})})); }, {R({3, 4})});
  C("index_tensor_pair", [](const variable_list& v) { return L(v[0].index({I({0, 2}), I({3, 1})})); }, {R({3, 4})});
  C("index_mask", [](const variable_list& v) { return L(v[0].index({M({1, 0, 1}, {3})})); }, {R({3, 4})});
  C("view_chain_then_mul", [](const variable_list& v) { return L(v[0].t().unsqueeze(0).select(2, 1) * v[0].sum()); },
      {R({3, 2})});

  // ---- copies and conversions
  C("contiguous", [](const variable_list& v) { return L(v[0].t().contiguous()); }, {R({2, 3})});
  C("contiguous_noop", [](const variable_list& v) { return L(v[0].contiguous()); }, {R({2, 3})});
  C("clone", [](const variable_list& v) { return L(v[0].clone()); }, {R({2, 3})});
  C("to_dtype_roundtrip", [](const variable_list& v) { return L(v[0].to(kFloat32).to(kFloat64) * 3.0); },
      {R({2, 3})}, false, loose(1e-3, 1e-3));
  C("to_dtype_same", [](const variable_list& v) { return L(v[0].to(kFloat64, true)); }, {R({2, 3})});

  // ---- reductions
  C("sum_all", [](const variable_list& v) { return L(sum(v[0])); }, {R({2, 3})}, true);
  C("sum_dim", [](const variable_list& v) { return L(v[0].sum({1})); }, {R({2, 3, 2})}, true);
  C("sum_dims_keepdim", [](const variable_list& v) { return L(v[0].sum({0, 2}, true)); }, {R({2, 3, 2})});
  C("sum_neg_dim", [](const variable_list& v) { return L(v[0].sum({-1})); }, {R({2, 3})});
  C("mean_all", [](const variable_list& v) { return L(mean(v[0])); }, {R({2, 3})}, true);
  C("mean_dims", [](const variable_list& v) { return L(mean(v[0], {0, 2})); }, {R({2, 3, 2})}, true);
  C("mean_keepdim", [](const variable_list& v) { return L(mean(v[0], {1}, true)); }, {R({2, 3})});
  C("var_all", [](const variable_list& v) { return L(var(v[0])); }, {R({2, 3})}, true);
  C("var_dim_correction0", [](const variable_list& v) { return L(var(v[0], {1}, 0)); }, {R({3, 4})}, true);
  C("var_dim_correction1", [](const variable_list& v) { return L(var(v[0], {1}, 1, true)); }, {R({3, 4})}, true);
  C("var_method", [](const variable_list& v) { return L(v[0].var({0}, false)); }, {R({3, 4})});
  C("std_all", [](const variable_list& v) { return L(troupe::std(v[0])); }, {R({2, 3})});
  C("std_dim_correction0", [](const variable_list& v) { return L(troupe::std(v[0], {0}, 0)); }, {R({3, 4})});
  C("std_dim_correction1", [](const variable_list& v) { return L(troupe::std(v[0], {1}, 1, true)); }, {R({3, 4})});
  C("var_mean", [](const variable_list& v) {
        auto [vv, mm] = var_mean(v[0], {1});
        return variable_list{vv, mm};
      }, {R({3, 4})});
  C("prod_all", [](const variable_list& v) { return L(prod(v[0])); }, {R({2, 3})});
  C("prod_dim", [](const variable_list& v) { return L(prod(v[0], 1)); }, {R({3, 4})});
  C("prod_keepdim", [](const variable_list& v) { return L(prod(v[0], 0, true)); }, {R({3, 4})});
  C("prod_one_zero", [](const variable_list& v) { return L(prod(v[0])); }, {V({0.5, 0.0, -1.5, 2.0}, {4})});
  C("prod_two_zeros", [](const variable_list& v) { return L(prod(v[0])); }, {V({0.5, 0.0, -1.5, 0.0}, {4})});
  C("prod_dim_zero", [](const variable_list& v) { return L(prod(v[0], 1)); },
      {V({0.5, 0.0, -1.5, 2.0, 1.1, 0.7, 0.0, 0.0, 1.3}, {3, 3})});
  C("max_all", [](const variable_list& v) { return L(max(v[0])); }, {R({3, 4})});
  C("max_dim", [](const variable_list& v) {
        auto [val, idx] = max(v[0], 1);
        return variable_list{val, idx};
      }, {R({3, 4})});
  C("max_dim_keepdim", [](const variable_list& v) { return L(std::get<0>(v[0].max(0, true))); }, {R({3, 4})});
  C("min_all", [](const variable_list& v) { return L(min(v[0])); }, {R({3, 4})});
  C("min_dim", [](const variable_list& v) { return L(std::get<0>(min(v[0], -1))); }, {R({3, 4})});
  C("amax", [](const variable_list& v) { return L(amax(v[0], {1})); }, {R({2, 3, 4})});
  C("amax_all", [](const variable_list& v) { return L(amax(v[0])); }, {R({2, 3})});
  C("amin", [](const variable_list& v) { return L(amin(v[0], {0, 2}, true)); }, {R({2, 3, 4})});
  C("logsumexp", [](const variable_list& v) { return L(logsumexp(v[0], {1})); }, {R({3, 4})});
  C("logsumexp_keepdim", [](const variable_list& v) { return L(logsumexp(v[0], {0, 1}, true)); }, {R({3, 4})});
  C("softmax", [](const variable_list& v) { return L(softmax(v[0], 1)); }, {R({3, 4})}, true);
  C("softmax_dim0", [](const variable_list& v) { return L(softmax(v[0], 0)); }, {R({3, 4})});
  C("log_softmax", [](const variable_list& v) { return L(log_softmax(v[0], -1)); }, {R({3, 4})}, true);
  C("log_softmax_dim0", [](const variable_list& v) { return L(log_softmax(v[0], 0)); }, {R({2, 3, 2})});
  C("cumsum", [](const variable_list& v) { return L(cumsum(v[0], 1)); }, {R({3, 4})});
  C("cumsum_dim0", [](const variable_list& v) { return L(v[0].cumsum(0)); }, {R({3, 4})});
  C("norm_p2", [](const variable_list& v) { return L(norm(v[0])); }, {R({3, 4})});
  C("norm_p1", [](const variable_list& v) { return L(norm(v[0], 1)); }, {R({3, 4})});
  C("norm_p3", [](const variable_list& v) { return L(norm(v[0], 3)); }, {R({3, 4})});
  C("norm_dims", [](const variable_list& v) { return L(norm(v[0], 2, {1})); }, {R({3, 4})});

  // ---- linear algebra
  C("matmul_1d_1d", [](const variable_list& v) { return L(matmul(v[0], v[1])); }, {R({4}), R({4})}, true);
  C("matmul_2d_1d", [](const variable_list& v) { return L(matmul(v[0], v[1])); }, {R({3, 4}), R({4})}, true);
  C("matmul_1d_2d", [](const variable_list& v) { return L(matmul(v[0], v[1])); }, {R({3}), R({3, 4})}, true);
  C("matmul_2d_2d", [](const variable_list& v) { return L(matmul(v[0], v[1])); }, {R({2, 3}), R({3, 4})}, true);
  C("matmul_3d_3d", [](const variable_list& v) { return L(matmul(v[0], v[1])); }, {R({2, 2, 3}), R({2, 3, 2})}, true);
  C("matmul_3d_2d", [](const variable_list& v) { return L(matmul(v[0], v[1])); }, {R({2, 2, 3}), R({3, 2})}, true);
  C("matmul_2d_3d", [](const variable_list& v) { return L(matmul(v[0], v[1])); }, {R({2, 3}), R({2, 3, 2})}, true);
  C("matmul_1d_3d", [](const variable_list& v) { return L(matmul(v[0], v[1])); }, {R({3}), R({2, 3, 2})});
  C("matmul_3d_1d", [](const variable_list& v) { return L(matmul(v[0], v[1])); }, {R({2, 2, 3}), R({3})});
  C("matmul_batch_broadcast", [](const variable_list& v) { return L(matmul(v[0], v[1])); },
      {R({2, 1, 2, 3}), R({3, 3, 2})}, true);
  C("matmul_transposed_input", [](const variable_list& v) { return L(matmul(v[0].t(), v[1])); },
      {R({3, 2}), R({3, 4})});
  C("mm", [](const variable_list& v) { return L(mm(v[0], v[1])); }, {R({2, 3}), R({3, 4})});
  C("bmm", [](const variable_list& v) { return L(bmm(v[0], v[1])); }, {R({2, 2, 3}), R({2, 3, 2})});
  C("addmm", [](const variable_list& v) { return L(addmm(v[0], v[1], v[2])); }, {R({2, 4}), R({2, 3}), R({3, 4})});
  C("addmm_alpha_beta_broadcast", [](const variable_list& v) { return L(addmm(v[0], v[1], v[2], 0.5, -2.0)); },
      {R({4}), R({2, 3}), R({3, 4})});
  C("dot", [](const variable_list& v) { return L(dot(v[0], v[1])); }, {R({5}), R({5})});
  C("mv", [](const variable_list& v) { return L(mv(v[0], v[1])); }, {R({3, 4}), R({4})});
  C("outer", [](const variable_list& v) { return L(outer(v[0], v[1])); }, {R({3}), R({4})});
  C("linear", [](const variable_list& v) { return L(linear(v[0], v[1], v[2])); }, {R({2, 3}), R({4, 3}), R({4})});
  C("linear_no_bias", [](const variable_list& v) { return L(linear(v[0], v[1])); }, {R({2, 3}), R({4, 3})});
  C("linear_3d_input", [](const variable_list& v) { return L(linear(v[0], v[1], v[2])); },
      {R({2, 2, 3}), R({2, 3}), R({2})});

  // ---- joining and indexing
  C("cat", [](const variable_list& v) { return L(cat({v[0], v[1]}, 0)); }, {R({2, 3}), R({1, 3})});
  C("cat_dim1", [](const variable_list& v) { return L(cat({v[0], v[1], v[0]}, -1)); }, {R({2, 3}), R({2, 2})});
  C("stack", [](const variable_list& v) { return L(stack({v[0], v[1]}, 1)); }, {R({2, 3}), R({2, 3})});
  C("split", [](const variable_list& v) { return split(v[0], 2, 1); }, {R({2, 5})});
  C("split_with_sizes", [](const variable_list& v) { return split_with_sizes(v[0], {1, 3}, 1); }, {R({2, 4})});
  C("chunk", [](const variable_list& v) { return chunk(v[0], 2, 0); }, {R({3, 2})});
  C("unbind", [](const variable_list& v) { return unbind(v[0], 1); }, {R({2, 3})});
  C("split_partial_use", [](const variable_list& v) { return L(split(v[0], 2, 0)[1] * 2.0); }, {R({4, 2})});
  C("gather", [](const variable_list& v) { return L(gather(v[0], 1, I({0, 2, 2, 1, 0, 1}, {2, 3}))); },
      {R({2, 4})});
  C("gather_dim0", [](const variable_list& v) { return L(v[0].gather(0, I({1, 0, 1, 1}, {1, 4}))); }, {R({2, 4})});
  C("scatter", [](const variable_list& v) { return L(scatter(v[0], 1, I({3, 0, 1, 2}, {2, 2}), v[1])); },
      {R({2, 4}), R({2, 2})});
  C("scatter_scalar", [](const variable_list& v) { return L(scatter(v[0], 0, I({1, 0, 1}, {1, 3}), 2.5)); },
      {R({2, 3})});
  C("scatter_add", [](const variable_list& v) { return L(scatter_add(v[0], 1, I({0, 0, 2, 1, 1, 1}, {2, 3}), v[1])); },
      {R({2, 4}), R({2, 3})});
  C("index_select", [](const variable_list& v) { return L(index_select(v[0], 0, I({2, 0, 2}))); }, {R({3, 2})});
  C("index_select_dim1", [](const variable_list& v) { return L(v[0].index_select(1, I({1, 1}))); }, {R({3, 2})});
  C("index_add", [](const variable_list& v) { return L(index_add(v[0], 0, I({0, 2, 0}), v[1], 1.5)); },
      {R({3, 2}), R({3, 2})});
  C("repeat", [](const variable_list& v) { return L(repeat(v[0], {2, 1, 3})); }, {R({2, 2})});
  C("flip", [](const variable_list& v) { return L(flip(v[0], {0, 2})); }, {R({2, 3, 2})});
  C("masked_select", [](const variable_list& v) { return L(masked_select(v[0], M({1, 0, 0, 1, 1, 0}, {2, 3}))); },
      {R({2, 3})});
  C("masked_select_broadcast", [](const variable_list& v) { return L(masked_select(v[0], M({0, 1, 1}, {3}))); },
      {R({2, 3})});
  C("tril", [](const variable_list& v) { return L(tril(v[0])); }, {R({3, 4})});
  C("tril_diag", [](const variable_list& v) { return L(tril(v[0], -1)); }, {R({3, 4})});
  C("triu", [](const variable_list& v) { return L(triu(v[0])); }, {R({3, 4})});
  C("triu_diag", [](const variable_list& v) { return L(triu(v[0], 1)); }, {R({2, 3, 3})});

  // ---- nn ops
  C("conv2d", [](const variable_list& v) { return L(conv2d(v[0], v[1], v[2])); },
      {R({1, 2, 4, 4}), R({2, 2, 3, 3}), R({2})}, true);
  C("conv2d_stride", [](const variable_list& v) { return L(conv2d(v[0], v[1], v[2], 2)); },
      {R({2, 1, 5, 5}), R({2, 1, 3, 3}), R({2})});
  C("conv2d_padding", [](const variable_list& v) { return L(conv2d(v[0], v[1], v[2], 1, {1, 2})); },
      {R({1, 2, 3, 3}), R({2, 2, 2, 3}), R({2})});
  C("conv2d_dilation", [](const variable_list& v) { return L(conv2d(v[0], v[1], v[2], 1, 0, 2)); },
      {R({1, 1, 5, 5}), R({2, 1, 2, 2}), R({2})});
  C("conv2d_groups", [](const variable_list& v) { return L(conv2d(v[0], v[1], v[2], 1, 1, 1, 2)); },
      {R({1, 4, 3, 3}), R({2, 2, 2, 2}), R({2})});
  C("conv2d_no_bias", [](const variable_list& v) { return L(conv2d(v[0], v[1], Tensor(), {2, 1}, 1)); },
      {R({1, 2, 4, 3}), R({3, 2, 2, 2})}, true);
  C("conv_transpose2d", [](const variable_list& v) { return L(conv_transpose2d(v[0], v[1], v[2])); },
      {R({1, 2, 3, 3}), R({2, 3, 2, 2}), R({3})}, true);
  C("conv_transpose2d_stride_output_padding",
    [](const variable_list& v) { return L(conv_transpose2d(v[0], v[1], v[2], {2, 3}, {1, 0}, {1, 2})); },
    {R({2, 2, 3, 2}), R({2, 1, 3, 2}), R({1})}, true);
  C("conv_transpose2d_groups_dilation",
    [](const variable_list& v) { return L(conv_transpose2d(v[0], v[1], v[2], 1, 1, 0, 2, {2, 1})); },
    {R({1, 4, 3, 3}), R({4, 1, 2, 2}), R({2})});
  // output_padding 1 >= stride 1, allowed by dilation 2: the input gets a zero row
  C("conv_transpose2d_output_padding_dilation",
    [](const variable_list& v) { return L(conv_transpose2d(v[0], v[1], Tensor(), 1, 0, 1, 1, 2)); },
    {R({1, 2, 2, 3}), R({2, 2, 2, 2})});
  C("conv_transpose2d_unbatched", [](const variable_list& v) { return L(conv_transpose2d(v[0], v[1], v[2], 2, 1)); },
    {R({2, 3, 3}), R({2, 2, 3, 3}), R({2})});
  C("conv1d", [](const variable_list& v) { return L(conv1d(v[0], v[1], v[2], 2, 1, 2)); },
    {R({2, 2, 7}), R({3, 2, 3}), R({3})}, true);
  C("conv1d_groups_unbatched", [](const variable_list& v) { return L(conv1d(v[0], v[1], Tensor(), 1, 0, 1, 2)); },
    {R({4, 5}), R({2, 2, 2})});
  C("conv_transpose1d", [](const variable_list& v) { return L(conv_transpose1d(v[0], v[1], v[2], 2, 1, 1)); },
    {R({2, 2, 4}), R({2, 3, 3}), R({3})}, true);
  C("max_pool2d", [](const variable_list& v) { return L(max_pool2d(v[0], 2)); }, {R({1, 2, 4, 4})}, true);
  C("max_pool2d_overlap_padding", [](const variable_list& v) { return L(max_pool2d(v[0], 3, 2, 1)); },
      {R({1, 1, 5, 5})}, true);
  C("max_pool2d_ceil_dilation", [](const variable_list& v) { return L(max_pool2d(v[0], 2, 2, 0, 2, true)); },
      {R({1, 1, 6, 5})});
  C("max_pool2d_with_indices", [](const variable_list& v) {
        auto [o, idx] = max_pool2d_with_indices(v[0], {2, 2});
        return variable_list{o, idx};
      }, {R({1, 2, 4, 4})});
  C("avg_pool2d", [](const variable_list& v) { return L(avg_pool2d(v[0], 2)); }, {R({1, 2, 4, 4})});
  C("avg_pool2d_count_include_pad", [](const variable_list& v) { return L(avg_pool2d(v[0], 3, 2, 1, false, true)); },
      {R({1, 1, 5, 5})});
  C("avg_pool2d_exclude_pad", [](const variable_list& v) { return L(avg_pool2d(v[0], 3, 2, 1, false, false)); },
      {R({1, 1, 5, 5})});
  C("avg_pool2d_ceil_divisor", [](const variable_list& v) { return L(avg_pool2d(v[0], 2, 2, 0, true, true, 3)); },
      {R({1, 1, 5, 5})});
  C("dropout_eval", [](const variable_list& v) { return L(dropout(v[0], 0.5, false)); }, {R({3, 4})});
  C("dropout_train", [](const variable_list& v) {
        manual_seed(1234);  // the same mask for every evaluation
        return L(dropout(v[0], 0.4, true));
      }, {R({4, 5})});

  // ---- in-place ops on a clone (the graph is rebased onto the in-place node)
  C("inplace_add_", [](const variable_list& v) { Tensor y = v[0].clone(); y.add_(v[1], 2.0); return L(y); },
      {R({2, 3}), R({3})});
  C("inplace_add_scalar", [](const variable_list& v) { Tensor y = v[0].clone(); y.add_(1.5); return L(y * y); },
      {R({2, 3})});
  C("inplace_sub_", [](const variable_list& v) { Tensor y = v[0].clone(); y.sub_(v[1]); return L(y * v[1]); },
      {R({2, 3}), R({2, 3})});
  C("inplace_mul_", [](const variable_list& v) { Tensor y = v[0].clone(); y.mul_(v[1]); return L(y); },
      {R({2, 3}), R({2, 3})});
  C("inplace_mul_scalar", [](const variable_list& v) { Tensor y = v[0] * 1.0; y.mul_(-3.0); return L(y); },
      {R({2, 3})});
  C("inplace_div_", [](const variable_list& v) { Tensor y = v[0].clone(); y.div_(v[1]); return L(y); },
      {R({2, 3}), P({1, 3})});
  C("inplace_div_scalar", [](const variable_list& v) { Tensor y = v[0].clone(); y.div_(4.0); return L(y); },
      {R({2, 3})});
  C("inplace_pow_", [](const variable_list& v) { Tensor y = v[0].clone(); y.pow_(3.0); return L(y); }, {R({2, 3})});
  C("inplace_neg_", [](const variable_list& v) { Tensor y = v[0].clone(); y.neg_(); return L(y); }, {R({2, 3})});
  C("inplace_relu_", [](const variable_list& v) { Tensor y = v[0].clone(); y.relu_(); return L(y); }, {R({2, 3})});
  C("inplace_clamp_", [](const variable_list& v) { Tensor y = v[0].clone(); y.clamp_(-0.5, 0.5); return L(y); },
      {R({3, 4})});
  C("inplace_exp_", [](const variable_list& v) { Tensor y = v[0].clone(); y.exp_(); return L(y); }, {R({2, 3})});
  C("inplace_sqrt_", [](const variable_list& v) { Tensor y = v[0].clone(); y.sqrt_(); return L(y); }, {P({2, 3})});
  C("inplace_compound_ops", [](const variable_list& v) {
        Tensor y = v[0].clone();
        y += v[1];
        y *= v[1];
        y -= 0.5;
        y /= v[1];
        return L(y);
      }, {R({2, 3}), P({2, 3})});
  C("inplace_copy_slice", [](const variable_list& v) {
        Tensor y = v[0].clone();
        y.slice(0, 0, 2).copy_(v[1]);
        return L(y);
      }, {R({3, 4}), R({4})});
  C("inplace_copy_slice_step", [](const variable_list& v) {
        Tensor y = v[0] * 2.0;
        y.slice(1, 0, 4, 2).copy_(v[1]);
        return L(y);
      }, {R({3, 4}), R({3, 2})});
  C("inplace_fill_slice", [](const variable_list& v) {
        Tensor y = v[0].clone();
        y.narrow(1, 1, 2).fill_(2.5);
        return L(y * v[0]);
      }, {R({3, 4})});
  C("inplace_zero_select", [](const variable_list& v) {
        Tensor y = v[0].clone();
        y.select(0, 1).zero_();
        return L(y);
      }, {R({3, 4})});
  C("inplace_mul_view", [](const variable_list& v) {
        Tensor y = v[0] * 1.0;
        y.slice(0, 0, 2).mul_(v[1]);
        return L(y);
      }, {R({4, 2}), R({2, 2})});
  C("inplace_index_put_slice", [](const variable_list& v) {
        Tensor y = v[0].clone();
        y.index_put_({Slice(), 1}, v[1]);
        return L(y);
      }, {R({3, 4}), R({3})});
  C("inplace_index_put_tensor", [](const variable_list& v) {
        Tensor y = v[0].clone();
        y.index_put_({I({2, 0})}, v[1]);
        return L(y);
      }, {R({3, 4}), R({2, 4})});
  C("inplace_index_put_scalar", [](const variable_list& v) {
        Tensor y = v[0].clone();
        y.index_put_({M({1, 0, 1}, {3})}, 0.25);
        return L(y);
      }, {R({3, 4})});
  C("inplace_masked_fill_", [](const variable_list& v) {
        Tensor y = v[0].clone();
        y.masked_fill_(M({0, 1, 1, 0, 0, 1}, {2, 3}), -1.0);
        return L(y);
      }, {R({2, 3})});
  C("inplace_scatter_", [](const variable_list& v) {
        Tensor y = v[0].clone();
        y.scatter_(1, I({3, 0, 1, 2}, {2, 2}), v[1]);
        return L(y);
      }, {R({2, 4}), R({2, 2})});
  C("inplace_scatter_add_", [](const variable_list& v) {
        Tensor y = v[0].clone();
        y.scatter_add_(1, I({0, 0, 2, 1, 1, 1}, {2, 3}), v[1]);
        return L(y);
      }, {R({2, 4}), R({2, 3})});
  C("inplace_index_add_", [](const variable_list& v) {
        Tensor y = v[0].clone();
        y.index_add_(0, I({0, 2, 0}), v[1], -1.0);
        return L(y);
      }, {R({3, 2}), R({3, 2})});
  return c;
}

const std::vector<Case>& cases() {
  static const std::vector<Case> c = build_cases();
  return c;
}

// gtest keeps its parameters until after static destruction: it gets indices into cases(), not tensors.
std::vector<size_t> all_indices() {
  std::vector<size_t> r(cases().size());
  for (size_t i = 0; i < r.size(); ++i) r[i] = i;
  return r;
}

std::vector<size_t> gradgrad_indices() {
  std::vector<size_t> r;
  for (size_t i = 0; i < cases().size(); ++i)
    if (cases()[i].gradgrad) r.push_back(i);
  return r;
}

std::vector<Case> gradgrad_cases() {
  std::vector<Case> r;
  for (size_t i : gradgrad_indices()) r.push_back(cases()[i]);
  return r;
}

std::string case_name(const ::testing::TestParamInfo<size_t>& info) { return cases()[info.param].name; }

// ---------------------------------------------------------------- the checks

class Gradcheck : public ::testing::TestWithParam<size_t> {};

TEST_P(Gradcheck, FiniteDifferences) {
  const Case& c = cases()[GetParam()];
  SCOPED_TRACE(c.name);
  try {
    EXPECT_TRUE(autograd::gradcheck(c.fn, c.inputs, c.opts));
  } catch (const std::exception& e) {
    ADD_FAILURE() << c.name << ": " << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, Gradcheck, ::testing::ValuesIn(all_indices()), case_name);

class GradGradcheck : public ::testing::TestWithParam<size_t> {};

TEST_P(GradGradcheck, FiniteDifferences) {
  const Case& c = cases()[GetParam()];
  SCOPED_TRACE(c.name);
  try {
    EXPECT_TRUE(autograd::gradgradcheck(c.fn, c.inputs, c.opts));
  } catch (const std::exception& e) {
    ADD_FAILURE() << c.name << ": " << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, GradGradcheck, ::testing::ValuesIn(gradgrad_indices()), case_name);

bool covered(const std::vector<Case>& cs, const std::string& op) {
  return std::any_of(cs.begin(), cs.end(), [&](const Case& c) {
    return c.name == op || (c.name.size() > op.size() && c.name.compare(0, op.size(), op) == 0 &&
                            c.name[op.size()] == '_');
  });
}

TEST(GradcheckTable, CoversEveryDifferentiableOp) {
  // Every differentiable op of tensor/ops.h and every in-place Tensor method: a new op needs a case here
  // AND in the table above.
  const std::vector<std::string> expected = {
      "add", "sub", "rsub", "mul", "div", "pow", "neg", "abs", "exp", "log", "log1p", "sqrt", "rsqrt", "sin", "cos",
      "tanh", "sigmoid", "relu", "gelu_none", "gelu_tanh", "silu", "softplus", "leaky_relu", "elu", "reciprocal",
      "square", "erf", "sign", "maximum", "minimum", "clamp", "clamp_min", "clamp_max", "where", "masked_fill",
      "lerp",
      // views
      "view", "reshape", "transpose", "permute", "t", "squeeze", "unsqueeze", "expand", "broadcast_to", "narrow",
      "select", "slice_step", "flatten", "unflatten", "as_strided", "movedim", "index_slices", "index_ints",
      "index_tensor", "index_mask",
      // copies
      "contiguous", "clone", "to_dtype_roundtrip",
      // reductions
      "sum_all", "sum_dim", "sum_dims_keepdim", "mean_all", "mean_dims", "var_all", "var_dim_correction0",
      "var_dim_correction1", "std_all", "std_dim_correction0", "std_dim_correction1", "var_mean", "prod_all",
      "prod_dim", "prod_one_zero", "prod_two_zeros", "max_all", "max_dim", "min_all", "min_dim", "amax", "amin",
      "logsumexp", "softmax", "log_softmax", "cumsum", "norm",
      // linalg
      "matmul_1d_1d", "matmul_2d_1d", "matmul_1d_2d", "matmul_2d_2d", "matmul_3d_3d", "matmul_3d_2d",
      "matmul_2d_3d", "matmul_1d_3d", "matmul_3d_1d", "matmul_batch_broadcast", "mm", "bmm", "addmm", "dot", "mv",
      "outer", "linear", "linear_no_bias",
      // joining and indexing
      "cat", "stack", "split", "split_with_sizes", "chunk", "unbind", "gather", "scatter", "scatter_scalar",
      "scatter_add", "index_select", "index_add", "repeat", "flip", "masked_select", "tril", "triu",
      // nn
      "conv2d", "conv2d_stride", "conv2d_padding", "conv2d_dilation", "conv2d_groups", "conv2d_no_bias",
      "conv_transpose2d", "conv_transpose2d_stride_output_padding", "conv_transpose2d_groups_dilation",
      "conv_transpose2d_output_padding_dilation", "conv_transpose2d_unbatched", "conv1d", "conv1d_groups_unbatched",
      "conv_transpose1d",
      "max_pool2d", "max_pool2d_with_indices", "avg_pool2d", "avg_pool2d_count_include_pad",
      "avg_pool2d_exclude_pad", "dropout_eval", "dropout_train",
      // in-place Tensor methods
      "inplace_add_", "inplace_sub_", "inplace_mul_", "inplace_div_", "inplace_pow_", "inplace_neg_",
      "inplace_relu_", "inplace_clamp_", "inplace_exp_", "inplace_sqrt_", "inplace_compound_ops",
      "inplace_copy_slice", "inplace_fill_slice", "inplace_zero_select", "inplace_index_put_slice",
      "inplace_index_put_tensor", "inplace_masked_fill_", "inplace_scatter_", "inplace_scatter_add_",
      "inplace_index_add_"};
  std::set<std::string> names;
  for (auto& c : cases()) {
    EXPECT_TRUE(names.insert(c.name).second) << "duplicate case name " << c.name;
  }
  for (auto& op : expected) EXPECT_TRUE(covered(cases(), op)) << "no gradcheck case for " << op;

  const std::vector<std::string> expected_gg = {"mul", "div", "exp", "log", "tanh", "sigmoid", "pow", "matmul",
                                                "softmax", "log_softmax", "gelu", "silu", "conv2d", "sum", "mean",
                                                "var", "max_pool2d", "conv_transpose2d", "conv1d",
                                                "conv_transpose1d"};
  auto gg = gradgrad_cases();
  for (auto& op : expected_gg) EXPECT_TRUE(covered(gg, op)) << "no gradgradcheck case for " << op;
}

// ---------------------------------------------------------------- gradcheck itself

// A custom op with a deliberately wrong backward (2x instead of 3x^2): gradcheck must throw and name it.
Tensor wrong_cube(const Tensor& x) {
  Tensor out;
  {
    NoGradGuard ng;
    out = x.detach() * x.detach() * x.detach();
  }
  autograd::record("WrongCubeBackward", {x}, out,
                   [sx = autograd::SavedVariable(x, false)](const variable_list& g) {
                     return variable_list{g[0] * sx.unpack() * 2.0};
                   });
  return out;
}

TEST(GradcheckSelf, DetectsWrongBackward) {
  Tensor x = V({0.5, -1.0, 2.0}, {3});
  try {
    autograd::gradcheck([](const variable_list& v) { return L(wrong_cube(v[0])); }, {x});
    FAIL() << "gradcheck accepted a wrong backward";
  } catch (const std::runtime_error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("input 0"), std::string::npos) << msg;
    EXPECT_NE(msg.find("numerical"), std::string::npos) << msg;
    EXPECT_NE(msg.find("analytical"), std::string::npos) << msg;
    EXPECT_NE(msg.find("max difference"), std::string::npos) << msg;
  }
}

TEST(GradcheckSelf, DetectsWrongBackwardThroughProjections) {
  Tensor x = V({0.5, -1.0, 2.0, 1.5}, {4});
  GradcheckOptions o;
  o.full_jacobian_max_outputs = 0;  // force random projections
  EXPECT_THROW(autograd::gradcheck([](const variable_list& v) { return L(wrong_cube(v[0])); }, {x}, o),
               std::runtime_error);
  // and a correct op passes through projections too
  EXPECT_TRUE(autograd::gradcheck([](const variable_list& v) { return L(v[0] * v[0] * v[0]); }, {x}, o));
}

TEST(GradcheckSelf, DetectsMissingBackward) {
  // an op that records nothing: the output does not require grad although it depends on x
  Tensor x = V({0.5, -1.0}, {2});
  EXPECT_THROW(autograd::gradcheck(
                   [](const variable_list& v) {
                     NoGradGuard ng;
                     return L(v[0] * 2.0);
                   },
                   {x}),
               std::runtime_error);
}

TEST(GradcheckSelf, DetectsWrongSecondDerivative) {
  // first derivative right (3x^2), second wrong: its backward is recorded with a non-differentiable
  // constant, so d/dx of the gradient is missing
  auto fn = [](const variable_list& v) {
    const Tensor& x = v[0];
    Tensor out;
    {
      NoGradGuard ng;
      out = x.detach() * x.detach() * x.detach();
    }
    autograd::record("CubeBackward", {x}, out, [sx = autograd::SavedVariable(x, false)](const variable_list& g) {
      Tensor xd = sx.unpack().detach();  // detached: no second derivative
      return variable_list{g[0] * xd * xd * 3.0};
    });
    return L(out);
  };
  Tensor x = V({0.5, -1.0, 2.0}, {3});
  EXPECT_TRUE(autograd::gradcheck(fn, {x}));
  EXPECT_THROW(autograd::gradgradcheck(fn, {x}), std::runtime_error);
  EXPECT_TRUE(autograd::gradgradcheck([](const variable_list& v) { return L(v[0] * v[0] * v[0]); }, {x}));
}

TEST(GradcheckSelf, RejectsUnusableArguments) {
  Tensor x = tensor({1.0f, 2.0f}).requires_grad_(true);
  EXPECT_THROW(autograd::gradcheck([](const variable_list& v) { return L(v[0] * 2.0); }, {x}), std::invalid_argument);
  Tensor y = V({1.0, 2.0}, {2});
  // nothing to compare: no floating output, or no input requiring grad
  EXPECT_THROW(autograd::gradcheck([](const variable_list& v) { return L(v[0] > 1.5); }, {y}), std::invalid_argument);
  EXPECT_THROW(autograd::gradcheck([](const variable_list& v) { return L(v[0] * 2.0); }, {y.detach()}),
               std::invalid_argument);
}

TEST(GradcheckSelf, GradDtypesThroughConversions) {
  // the gradient flowing back through a float32 round trip arrives as float64 (ToCopyBackward converts)
  Tensor x = V({0.5, -1.0}, {2});
  GradcheckOptions o = loose(1e-3, 1e-3);
  EXPECT_TRUE(autograd::gradcheck([](const variable_list& v) { return L(v[0].to(kFloat32).to(kFloat64)); }, {x}, o));
  o.check_grad_dtypes = true;
  EXPECT_TRUE(autograd::gradcheck([](const variable_list& v) { return L(v[0].to(kFloat32).to(kFloat64)); }, {x}, o));
}

TEST(GradcheckSelf, NonContiguousInputAndUnusedInput) {
  Tensor base = R({3, 4});
  Tensor xt;
  {
    NoGradGuard ng;
    xt = base.detach().t();  // non-contiguous leaf
  }
  xt.requires_grad_(true);
  Tensor unused = R({2});
  EXPECT_TRUE(autograd::gradcheck([](const variable_list& v) { return L(v[0].exp() * 2.0); }, {xt, unused}));
}

}  // namespace
