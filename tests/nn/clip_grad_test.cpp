// nn::utils::clip_grad_norm_ and clip_grad_value_ against PyTorch 1.13 (tests/fixtures/lr_scheduler.txt,
// records clip_*, from gen_lr_scheduler.py): four parameters, the second without a gradient; the total
// norm and the clipped gradients for norm types 2, 1, inf and 3, float64 and float32, plus the error
// for a non-finite norm.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "fixtures.h"
#include <troupe/nn/utils/clip_grad.h>
#include <troupe/tensor/ops.h>

namespace {

using namespace troupe;
using troupe::testing::Fixtures;
using troupe::testing::tensors_close;
namespace U = troupe::nn::utils;

const Fixtures& fx() {
  static Fixtures f = Fixtures::load("lr_scheduler.txt");
  return f;
}

// Parameters of shapes (3,4), (4), (5), (2,2,2) in `dtype`; all but the second get the fixture's gradient.
std::vector<Tensor> params(ScalarType dtype, bool with_inf = false) {
  std::vector<Tensor> ps;
  const std::vector<std::vector<int64_t>> shapes{{3, 4}, {4}, {5}, {2, 2, 2}};
  for (size_t i = 0; i < shapes.size(); ++i) {
    Tensor p = zeros(shapes[i], TensorOptions().dtype(dtype).requires_grad(true));
    if (i != 1) {
      Tensor g = fx().get("clip_grad_" + std::to_string(i));
      if (with_inf && i == 0) g.data_ptr<double>()[1 * 4 + 2] = INFINITY;
      p.set_grad(g.to(dtype));
    }
    ps.push_back(p);
  }
  return ps;
}

Tensor flat_grads(const std::vector<Tensor>& ps) {
  std::vector<Tensor> gs;
  for (const auto& p : ps)
    if (p.grad().defined()) gs.push_back(p.grad().reshape({-1}));
  return cat(gs);
}

TEST(ClipGrad, NormMatchesPyTorch) {
  for (auto [dtype, dname, tol] : {std::tuple{kDouble, "f64", 1e-12}, std::tuple{kFloat, "f32", 2e-6}})
    for (auto [p, pname] : {std::pair{2.0, "2"}, std::pair{1.0, "1"}, std::pair{double(INFINITY), "inf"},
                            std::pair{3.0, "3"}})
      for (auto [m, mname] : {std::pair{1.0, "1"}, std::pair{100.0, "100"}}) {
        const std::string name = std::string("clip_norm_") + dname + "_" + pname + "_" + mname;
        SCOPED_TRACE(name);
        auto ps = params(dtype);
        Tensor total = U::clip_grad_norm_(ps, m, p);
        EXPECT_EQ(total.dim(), 0);
        EXPECT_EQ(total.dtype(), dtype);
        EXPECT_TRUE(tensors_close(total, fx().get(name + "_total"), tol, 0));
        EXPECT_TRUE(tensors_close(flat_grads(ps), fx().get(name + "_out"), tol, 1e-300));
        EXPECT_FALSE(ps[1].grad().defined());
      }
}

TEST(ClipGrad, ClippedNormIsMaxNorm) {
  auto ps = params(kDouble);
  const double before = U::clip_grad_norm_(ps, 0.75).item<double>();
  ASSERT_GT(before, 0.75);
  const double after = U::clip_grad_norm_(ps, 100.0).item<double>();
  EXPECT_NEAR(after, 0.75 * before / (before + 1e-6), 1e-12);
}

TEST(ClipGrad, SingleTensor) {
  Tensor p = params(kDouble)[0];
  Tensor total = U::clip_grad_norm_(p, 0.5);
  EXPECT_TRUE(tensors_close(total, fx().get("clip_single_total"), 1e-12, 0));
  EXPECT_TRUE(tensors_close(p.grad().reshape({-1}), fx().get("clip_single_out"), 1e-12, 1e-300));
}

TEST(ClipGrad, NoGradients) {
  Tensor p = zeros({3}, requires_grad());
  Tensor total = U::clip_grad_norm_(std::vector<Tensor>{p}, 1.0);
  EXPECT_EQ(total.dtype(), kFloat);
  EXPECT_EQ(total.item<double>(), 0.0);
  U::clip_grad_value_(p, 1.0);
  EXPECT_FALSE(p.grad().defined());
}

TEST(ClipGrad, NonFinite) {
  auto ps = params(kDouble, /*with_inf=*/true);
  Tensor total = U::clip_grad_norm_(ps, 1.0);
  EXPECT_TRUE(tensors_close(total, fx().get("clip_nonfinite_total"), 0, 0));
  EXPECT_TRUE(tensors_close(flat_grads(ps), fx().get("clip_nonfinite_out"), 0, 0));  // nan where inf, else 0

  auto qs = params(kDouble, true);
  Tensor before = flat_grads(qs).clone();
  for (auto [p, text] : {std::pair{2.0, "2.0"}, std::pair{double(INFINITY), "inf"}, std::pair{0.5, "0.5"}}) {
    try {
      U::clip_grad_norm_(qs, 1.0, p, /*error_if_nonfinite=*/true);
      ADD_FAILURE() << "no error for norm_type " << text;
    } catch (const std::runtime_error& e) {
      EXPECT_EQ(std::string(e.what()),
                std::string("The total norm of order ") + text +
                    " for gradients from `parameters` is non-finite, so it cannot be clipped. To disable this error "
                    "and scale the gradients by the non-finite norm anyway, set `error_if_nonfinite=False`");
    }
  }
  EXPECT_TRUE(tensors_close(flat_grads(qs), before, 0, 0));  // untouched
}

TEST(ClipGrad, ValueMatchesPyTorch) {
  for (auto [dtype, dname] : {std::pair{kDouble, "f64"}, std::pair{kFloat, "f32"}}) {
    auto ps = params(dtype);
    U::clip_grad_value_(ps, 0.5);
    EXPECT_TRUE(tensors_close(flat_grads(ps), fx().get(std::string("clip_value_") + dname + "_out"), 0, 0));
  }
}

}  // namespace
