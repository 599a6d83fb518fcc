// matmul / mm / bmm / addmm / dot / mv / outer / linear: PyTorch fixtures, closed forms, layouts, dtypes,
// autograd and error messages.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "common/fixtures.h"
#include "tensor/autograd.h"
#include "tensor/backend.h"
#include "tensor/cpu/sgemm.h"
#include "tensor/cpu/sgemm_small.h"
#include "tensor/ops.h"

using namespace troupe;
using troupe::testing::Fixtures;
using troupe::testing::tensors_close;

namespace {

template <typename F>
void expect_error(F&& f, const std::string& sub) {
  try {
    f();
    ADD_FAILURE() << "expected an exception containing: " << sub;
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find(sub), std::string::npos) << "message: " << e.what() << "\nwanted: " << sub;
  }
}

// Reference product in double by a triple loop over to_vector values.
Tensor ref_mm(const Tensor& a, const Tensor& b) {
  const int64_t n = a.size(0), k = a.size(1), m = b.size(1);
  auto av = a.to_vector<double>(), bv = b.to_vector<double>();
  std::vector<double> out(static_cast<size_t>(n * m), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < m; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p) s += av[i * k + p] * bv[p * m + j];
      out[i * m + j] = s;
    }
  return tensor(out, kFloat64).view({n, m});
}

std::string grad_fn_name(const Tensor& t) {
  auto fn = t.grad_fn();
  return fn ? fn->name() : "";
}

}  // namespace

// ---------------------------------------------------------------- PyTorch fixtures

TEST(LinalgMatmul, FixturesForwardAndBackward) {
  auto fx = Fixtures::load("matmul.txt");
  for (int i = 0; i <= 9; ++i) {
    SCOPED_TRACE("case " + std::to_string(i));
    const std::string s = std::to_string(i);
    Tensor a = fx.get("a_" + s).requires_grad_(), b = fx.get("b_" + s).requires_grad_();
    Tensor out = matmul(a, b);
    EXPECT_TRUE(tensors_close(out, fx.get("out_" + s), 1e-5, 1e-5, true));
    (out * fx.get("w_" + s)).sum().backward();
    EXPECT_TRUE(tensors_close(a.grad(), fx.get("ga_" + s), 1e-5, 1e-5, true));
    EXPECT_TRUE(tensors_close(b.grad(), fx.get("gb_" + s), 1e-5, 1e-5, true));
  }
}

TEST(LinalgMatmul, FixturesFromTransposedAndStridedViews) {
  // the same products, with operands that are non-contiguous views of the fixture values
  auto fx = Fixtures::load("matmul.txt");
  for (int i = 0; i <= 9; ++i) {
    SCOPED_TRACE("case " + std::to_string(i));
    const std::string s = std::to_string(i);
    Tensor a = fx.get("a_" + s), b = fx.get("b_" + s);
    // column-major copies (transpose of a contiguous transpose) and every-other-element views
    auto colmajor = [](const Tensor& t) { return t.dim() >= 2 ? t.transpose(-1, -2).contiguous().transpose(-1, -2) : t; };
    auto strided = [](const Tensor& t) {
      std::vector<int64_t> sz = t.sizes().vec();
      sz.back() *= 2;
      Tensor big = zeros(sz);
      Tensor v = big.slice(-1, 0, std::nullopt, 2);
      v.copy_(t);
      return v;
    };
    Tensor expect = fx.get("out_" + s);
    EXPECT_TRUE(tensors_close(matmul(colmajor(a), colmajor(b)), expect, 1e-5, 1e-5));
    EXPECT_TRUE(tensors_close(matmul(strided(a), strided(b)), expect, 1e-5, 1e-5));
  }
}

// ---------------------------------------------------------------- mm

TEST(LinalgMm, ClosedFormAndGradFn) {
  Tensor a = arange(6, dtype(kFloat32)).view({2, 3});
  Tensor b = arange(12, dtype(kFloat32)).view({3, 4});
  Tensor c = mm(a, b);
  std::vector<float> expect{20, 23, 26, 29, 56, 68, 80, 92};
  EXPECT_EQ(c.to_vector<float>(), expect);
  EXPECT_EQ(c.sizes().vec(), (std::vector<int64_t>{2, 4}));
  Tensor ar = a.clone().requires_grad_();
  EXPECT_EQ(grad_fn_name(mm(ar, b)), "MmBackward0");
  EXPECT_EQ(grad_fn_name(ar.mm(b)), "MmBackward0");
}

TEST(LinalgMm, TransposedViewsGiveTheSameResults) {
  manual_seed(11);
  for (ScalarType dt : {kFloat32, kFloat64}) {
    Tensor a = randn({37, 53}, dtype(dt)), b = randn({53, 29}, dtype(dt));
    Tensor ref = mm(a, b);
    Tensor at = a.t().contiguous().t();  // same values, column-major
    Tensor bt = b.t().contiguous().t();
    EXPECT_FALSE(at.is_contiguous());
    // OpenBLAS may order the k-sum differently per transpose flag at some sizes: equal up to rounding
    const double tol = dt == kFloat32 ? 1e-5 : 1e-12;
    EXPECT_TRUE(tensors_close(mm(at, b), ref, tol, tol));
    EXPECT_TRUE(tensors_close(mm(a, bt), ref, tol, tol));
    EXPECT_TRUE(tensors_close(mm(at, bt), ref, tol, tol));
    EXPECT_TRUE(tensors_close(ref, ref_mm(a, b), 1e-4, 1e-4));
    // a strided (non-BLAS) layout is copied first and still correct
    Tensor big = randn({37, 106}, dtype(dt));
    Tensor as = big.slice(1, 0, std::nullopt, 2);
    EXPECT_TRUE(tensors_close(mm(as, b), ref_mm(as.contiguous(), b), 1e-4, 1e-4));
  }
}

TEST(LinalgMm, BackwardUsesTransposesAndMatchesClosedForm) {
  manual_seed(3);
  Tensor a = randn({4, 5}, dtype(kFloat64)).requires_grad_();
  Tensor b = randn({5, 3}, dtype(kFloat64)).requires_grad_();
  Tensor w = randn({4, 3}, dtype(kFloat64));
  (mm(a, b) * w).sum().backward();
  EXPECT_TRUE(tensors_close(a.grad(), ref_mm(w, b.detach().t().contiguous()), 1e-12, 1e-12));
  EXPECT_TRUE(tensors_close(b.grad(), ref_mm(a.detach().t().contiguous(), w), 1e-12, 1e-12));
}

TEST(LinalgMm, DoubleBackward) {
  // f = sum(mm(a, b) * w); ga = w @ b^T; d/db sum(ga * v) = v^T @ w
  manual_seed(5);
  Tensor a = randn({3, 4}, dtype(kFloat64)).requires_grad_();
  Tensor b = randn({4, 2}, dtype(kFloat64)).requires_grad_();
  Tensor w = randn({3, 2}, dtype(kFloat64)), v = randn({3, 4}, dtype(kFloat64));
  Tensor f = (mm(a, b) * w).sum();
  auto ga = autograd::grad({f}, {a}, {}, std::nullopt, /*create_graph=*/true);
  ASSERT_TRUE(ga[0].requires_grad());
  (ga[0] * v).sum().backward();
  EXPECT_TRUE(tensors_close(b.grad(), ref_mm(v.t().contiguous(), w), 1e-12, 1e-12));
}

TEST(LinalgMm, EmptyAndZeroInnerDim) {
  Tensor c = mm(randn({0, 3}), randn({3, 4}));
  EXPECT_EQ(c.sizes().vec(), (std::vector<int64_t>{0, 4}));
  Tensor z = mm(randn({2, 0}), randn({0, 4}));
  EXPECT_EQ(z.sizes().vec(), (std::vector<int64_t>{2, 4}));
  EXPECT_TRUE(equal(z, zeros({2, 4})));
}

TEST(LinalgMm, HalfAndBFloat16ComputeInFloat) {
  manual_seed(7);
  Tensor a = randn({16, 24}), b = randn({24, 8});
  for (ScalarType dt : {kFloat16, kBFloat16}) {
    Tensor ah = a.to(dt), bh = b.to(dt);
    Tensor c = mm(ah, bh);
    EXPECT_EQ(c.dtype(), dt);
    // float32 accumulation of the same (rounded) inputs, rounded once at the end
    Tensor ref = mm(ah.to(kFloat32), bh.to(kFloat32)).to(dt);
    EXPECT_TRUE(equal(c, ref));
    Tensor m = matmul(ah.unsqueeze(0).expand({3, 16, 24}), bh);
    EXPECT_TRUE(tensors_close(m[1], ref, 1e-2, 1e-2));
    // transposed half operands
    EXPECT_TRUE(equal(mm(ah.t().contiguous().t(), bh), ref));
  }
}

TEST(LinalgMm, IntegerMatmulByLoop) {
  Tensor a = arange(6, dtype(kInt64)).view({2, 3});
  Tensor b = arange(12, dtype(kInt64)).view({3, 4});
  Tensor c = mm(a, b);
  EXPECT_EQ(c.dtype(), kInt64);
  EXPECT_EQ(c.to_vector<int64_t>(), (std::vector<int64_t>{20, 23, 26, 29, 56, 68, 80, 92}));
  Tensor ci = matmul(a.to(kInt32), b.to(kInt32).t().contiguous().t());
  EXPECT_EQ(ci.dtype(), kInt32);
  EXPECT_EQ(ci.to_vector<int64_t>(), (std::vector<int64_t>{20, 23, 26, 29, 56, 68, 80, 92}));
  // uint8 wraps modulo 256 as in PyTorch
  Tensor u = full({1, 2}, 200, dtype(kUInt8));
  Tensor v = full({2, 1}, 3, dtype(kUInt8));
  EXPECT_EQ(mm(u, v).to_vector<int64_t>(), (std::vector<int64_t>{(200 * 3 * 2) % 256}));
  EXPECT_EQ(dot(tensor({1, 2, 3}), tensor({4, 5, 6})).item<int64_t>(), 32);
}

TEST(LinalgMm, Errors) {
  expect_error([] { mm(randn({2, 3}), randn({4, 5})); }, "[mm] mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)");
  expect_error([] { mm(randn({3}), randn({3, 5})); }, "[mm] self must be a matrix");
  expect_error([] { mm(randn({2, 3}), randn({3})); }, "[mm] mat2 must be a matrix");
  expect_error([] { mm(randn({2, 3}), randn({3, 5}, dtype(kFloat64))); },
               "[mm] expected both arguments to have the same dtype, but got float32 and float64");
  expect_error([] { mm(ones({2, 3}, dtype(kBool)), ones({3, 5}, dtype(kBool))); }, "[mm] not implemented for dtype bool");
}

// ---------------------------------------------------------------- matmul ranks

TEST(LinalgMatmul, RankCasesAndGradFnNames) {
  Tensor v = randn({3}).requires_grad_(), m = randn({3, 3}).requires_grad_();
  EXPECT_EQ(matmul(v, randn({3})).dim(), 0);
  EXPECT_EQ(grad_fn_name(matmul(v, randn({3}))), "DotBackward0");
  EXPECT_EQ(grad_fn_name(matmul(m, randn({3}))), "MvBackward0");
  EXPECT_EQ(grad_fn_name(matmul(m, randn({3, 3}))), "MmBackward0");
  EXPECT_EQ(matmul(v, m).sizes().vec(), (std::vector<int64_t>{3}));
  Tensor b3 = randn({5, 3, 3}).requires_grad_();
  EXPECT_EQ(matmul(b3, randn({5, 3, 3})).sizes().vec(), (std::vector<int64_t>{5, 3, 3}));
  EXPECT_EQ(grad_fn_name(matmul(b3, randn({5, 3, 3}))), "BmmBackward0");
}

TEST(LinalgMatmul, FoldedBatchIsOneViewNoCopy) {
  // (B, n, k) @ (k, m) with contiguous a: the result equals per-batch mm and a's gradient is exact
  manual_seed(21);
  Tensor a = randn({4, 3, 5}, dtype(kFloat64)).requires_grad_();
  Tensor b = randn({5, 2}, dtype(kFloat64)).requires_grad_();
  Tensor out = matmul(a, b);
  ASSERT_EQ(out.sizes().vec(), (std::vector<int64_t>{4, 3, 2}));
  for (int64_t i = 0; i < 4; ++i) EXPECT_TRUE(tensors_close(out[i], ref_mm(a.detach()[i], b.detach()), 1e-12, 1e-12));
  out.sum().backward();
  // d/da = ones @ b^T per row; d/db = sum over rows of a^T @ ones
  Tensor ga_row = b.detach().sum({1});
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t r = 0; r < 3; ++r) EXPECT_TRUE(tensors_close(a.grad()[i][r], ga_row, 1e-12, 1e-12));
  EXPECT_TRUE(tensors_close(b.grad(), a.detach().sum({0, 1}).unsqueeze(1).expand({5, 2}), 1e-12, 1e-12));
}

TEST(LinalgMatmul, BroadcastBatchDims) {
  manual_seed(22);
  Tensor a = randn({2, 1, 3, 4}, dtype(kFloat64)), b = randn({5, 4, 2}, dtype(kFloat64));
  Tensor out = matmul(a, b);
  ASSERT_EQ(out.sizes().vec(), (std::vector<int64_t>{2, 5, 3, 2}));
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 5; ++j) EXPECT_TRUE(tensors_close(out[i][j], ref_mm(a[i][0], b[j]), 1e-12, 1e-12));
  // a broadcast right operand with one batch dim: (5, 2, 3) @ (1, 3, 4)
  Tensor c = randn({5, 2, 3}, dtype(kFloat64)), d = randn({1, 3, 4}, dtype(kFloat64));
  Tensor cd = matmul(c, d);
  for (int64_t i = 0; i < 5; ++i) EXPECT_TRUE(tensors_close(cd[i], ref_mm(c[i], d[0]), 1e-12, 1e-12));
}

TEST(LinalgMatmul, ZeroSizes) {
  Tensor r = matmul(randn({3, 5, 0}), randn({0, 0}));
  EXPECT_EQ(r.sizes().vec(), (std::vector<int64_t>{3, 5, 0}));
  Tensor d = matmul(randn({0}), randn({0}));
  EXPECT_EQ(d.item<float>(), 0.0f);
}

TEST(LinalgMatmul, Errors) {
  expect_error([] { matmul(scalar_tensor(1.0), randn({3})); },
               "[matmul] both arguments to matmul need to be at least 1D, but they are 0D and 1D");
  expect_error([] { matmul(randn({3}), randn({4})); },
               "[matmul] inconsistent tensor size, expected tensor [3] and src [4] to have the same number of elements");
  expect_error([] { matmul(randn({2, 3}), randn({4, 5})); },
               "[matmul] mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)");
  expect_error([] { matmul(randn({5, 2, 3}), randn({4})); },
               "[matmul] mat1 and mat2 shapes cannot be multiplied (5x2x3 and 4)");
  expect_error([] { matmul(randn({5, 2, 3}), randn({4, 3, 5})); }, "[matmul]");
  expect_error([] { matmul(randn({2, 3}), randn({3, 5}, dtype(kFloat64))); },
               "[matmul] expected both arguments to have the same dtype, but got float32 and float64");
}

// ---------------------------------------------------------------- bmm

TEST(LinalgBmm, ClosedFormBackwardAndErrors) {
  manual_seed(31);
  Tensor a = randn({3, 2, 4}, dtype(kFloat64)).requires_grad_();
  Tensor b = randn({3, 4, 5}, dtype(kFloat64)).requires_grad_();
  Tensor out = bmm(a, b);
  EXPECT_EQ(grad_fn_name(out), "BmmBackward0");
  Tensor w = randn({3, 2, 5}, dtype(kFloat64));
  (out * w).sum().backward();
  for (int64_t i = 0; i < 3; ++i) {
    EXPECT_TRUE(tensors_close(out[i], ref_mm(a.detach()[i], b.detach()[i]), 1e-12, 1e-12));
    EXPECT_TRUE(tensors_close(a.grad()[i], ref_mm(w[i], b.detach()[i].t().contiguous()), 1e-12, 1e-12));
    EXPECT_TRUE(tensors_close(b.grad()[i], ref_mm(a.detach()[i].t().contiguous(), w[i]), 1e-12, 1e-12));
  }
  // transposed batches
  Tensor bt = b.detach().transpose(1, 2).contiguous().transpose(1, 2);
  EXPECT_TRUE(tensors_close(bmm(a.detach(), bt), out.detach(), 1e-12, 1e-12));
  expect_error([] { bmm(randn({2, 3}), randn({2, 3, 4})); }, "[bmm] batch1 must be a 3D tensor");
  expect_error([] { bmm(randn({2, 2, 3}), randn({2, 3})); }, "[bmm] batch2 must be a 3D tensor");
  expect_error([] { bmm(randn({2, 2, 3}), randn({3, 3, 4})); },
               "[bmm] Expected size for first two dimensions of batch2 tensor to be: [2, 3] but got: [3, 3].");
}

// ---------------------------------------------------------------- addmm

TEST(LinalgAddmm, BetaAlphaAndBiasBroadcast) {
  manual_seed(41);
  Tensor a = randn({3, 4}, dtype(kFloat64)), b = randn({4, 5}, dtype(kFloat64));
  Tensor ab = ref_mm(a, b);
  Tensor row = randn({5}, dtype(kFloat64)), col = randn({3, 1}, dtype(kFloat64)), full2 = randn({3, 5}, dtype(kFloat64));
  EXPECT_TRUE(tensors_close(addmm(row, a, b), ab + row, 1e-12, 1e-12));
  EXPECT_TRUE(tensors_close(addmm(col, a, b), ab + col, 1e-12, 1e-12));
  EXPECT_TRUE(tensors_close(addmm(full2, a, b, 0.5, 2.0), ab * 2.0 + full2 * 0.5, 1e-12, 1e-12));
  EXPECT_TRUE(tensors_close(addmm(scalar_tensor(1.5, dtype(kFloat64)), a, b), ab + 1.5, 1e-12, 1e-12));
  // beta = 0 ignores the bias entirely (NaN does not propagate)
  Tensor nan_bias = full({5}, std::nan(""), dtype(kFloat64));
  EXPECT_TRUE(tensors_close(addmm(nan_bias, a, b, 0, 1), ab, 1e-12, 1e-12));
}

TEST(LinalgAddmm, Backward) {
  manual_seed(42);
  Tensor bias = randn({5}, dtype(kFloat64)).requires_grad_();
  Tensor a = randn({3, 4}, dtype(kFloat64)).requires_grad_();
  Tensor b = randn({4, 5}, dtype(kFloat64)).requires_grad_();
  Tensor w = randn({3, 5}, dtype(kFloat64));
  Tensor out = addmm(bias, a, b, 0.5, 3.0);
  EXPECT_EQ(grad_fn_name(out), "AddmmBackward0");
  (out * w).sum().backward();
  EXPECT_TRUE(tensors_close(bias.grad(), w.sum({0}) * 0.5, 1e-12, 1e-12));
  EXPECT_TRUE(tensors_close(a.grad(), ref_mm(w, b.detach().t().contiguous()) * 3.0, 1e-12, 1e-12));
  EXPECT_TRUE(tensors_close(b.grad(), ref_mm(a.detach().t().contiguous(), w) * 3.0, 1e-12, 1e-12));
}

TEST(LinalgAddmm, Errors) {
  expect_error([] { addmm(randn({4}), randn({2, 3}), randn({3, 3})); },
               "[addmm] bias of shape (4) cannot be broadcast to the output shape (2, 3)");
  expect_error([] { addmm(randn({3}), randn({2, 3}), randn({4, 3})); },
               "[addmm] mat1 and mat2 shapes cannot be multiplied (2x3 and 4x3)");
  expect_error([] { addmm(randn({3}), randn({2, 3, 1}), randn({3, 3})); }, "[addmm] mat1 must be a matrix");
  expect_error([] { addmm(randn({3}, dtype(kFloat64)), randn({2, 3}), randn({3, 3})); }, "[addmm] expected self");
}

// ---------------------------------------------------------------- dot, mv, outer

TEST(LinalgVector, DotMvOuter) {
  Tensor a = tensor({1.0, 2.0, 3.0}, dtype(kFloat64)).requires_grad_();
  Tensor b = tensor({4.0, 5.0, 6.0}, dtype(kFloat64)).requires_grad_();
  Tensor d = dot(a, b);
  EXPECT_EQ(d.dim(), 0);
  EXPECT_DOUBLE_EQ(d.item<double>(), 32.0);
  EXPECT_EQ(grad_fn_name(d), "DotBackward0");
  (d * 2.0).backward();
  EXPECT_EQ(a.grad().to_vector<double>(), (std::vector<double>{8, 10, 12}));
  EXPECT_EQ(b.grad().to_vector<double>(), (std::vector<double>{2, 4, 6}));

  // strided vectors
  Tensor big = arange(10, dtype(kFloat32));
  EXPECT_FLOAT_EQ(dot(big.slice(0, 0, std::nullopt, 2), big.slice(0, 1, std::nullopt, 2)).item<float>(),
                  0 * 1 + 2 * 3 + 4 * 5 + 6 * 7 + 8 * 9);

  Tensor m = arange(6, dtype(kFloat64)).view({2, 3}).requires_grad_();
  Tensor v = tensor({1.0, -1.0, 2.0}, dtype(kFloat64)).requires_grad_();
  Tensor mvr = mv(m, v);
  EXPECT_EQ(grad_fn_name(mvr), "MvBackward0");
  EXPECT_EQ(mvr.to_vector<double>(), (std::vector<double>{0 - 1 + 4, 3 - 4 + 10}));
  (mvr * tensor({1.0, 10.0}, dtype(kFloat64))).sum().backward();
  EXPECT_EQ(m.grad().to_vector<double>(), (std::vector<double>{1, -1, 2, 10, -10, 20}));
  EXPECT_EQ(v.grad().to_vector<double>(), (std::vector<double>{30, 41, 52}));
  // mv with a transposed matrix
  EXPECT_EQ(mv(m.detach().t(), tensor({1.0, 1.0}, dtype(kFloat64))).to_vector<double>(),
            (std::vector<double>{3, 5, 7}));

  Tensor o = outer(tensor({1.0, 2.0}), tensor({3.0, 4.0, 5.0}));
  EXPECT_EQ(o.sizes().vec(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(o.to_vector<float>(), (std::vector<float>{3, 4, 5, 6, 8, 10}));
  EXPECT_EQ(outer(tensor({1.0f}), tensor({2.0}, dtype(kFloat64))).dtype(), kFloat64);
}

TEST(LinalgVector, Errors) {
  expect_error([] { dot(randn({3}), randn({4})); },
               "[dot] inconsistent tensor size, expected tensor [3] and src [4] to have the same number of elements, but "
               "got 3 and 4 elements respectively");
  expect_error([] { dot(randn({3, 1}), randn({3})); }, "[dot] 1D tensors expected, but got 2D and 1D tensors");
  expect_error([] { dot(randn({3}), randn({3}, dtype(kFloat64))); },
               "[dot] expected both vectors to have same dtype, but found float32 and float64");
  expect_error([] { mv(randn({2, 3}), randn({4})); }, "[mv] size mismatch");
  expect_error([] { mv(randn({2, 3, 1}), randn({4})); }, "[mv] vector + matrix @ vector expected");
  expect_error([] { outer(randn({3, 1}), randn({3})); }, "[outer] Expected 1-D argument self, but got 2-D");
  expect_error([] { outer(randn({3}), randn({3, 2})); }, "[outer] Expected 1-D argument vec2, but got 2-D");
}

// ---------------------------------------------------------------- linear

TEST(LinalgLinear, PathsValuesAndGradients) {
  manual_seed(51);
  Tensor w = randn({4, 3}, dtype(kFloat64)).requires_grad_();
  Tensor b = randn({4}, dtype(kFloat64)).requires_grad_();
  Tensor x2 = randn({2, 3}, dtype(kFloat64)).requires_grad_();
  Tensor y2 = linear(x2, w, b);
  EXPECT_EQ(grad_fn_name(y2), "AddmmBackward0");  // bias fused into the gemm
  Tensor ref2 = ref_mm(x2.detach(), w.detach().t().contiguous()) + b.detach();
  EXPECT_TRUE(tensors_close(y2, ref2, 1e-12, 1e-12));
  EXPECT_EQ(grad_fn_name(linear(x2, w)), "MmBackward0");

  Tensor x3 = randn({2, 5, 3}, dtype(kFloat64)).requires_grad_();
  Tensor y3 = linear(x3, w, b);
  EXPECT_EQ(y3.sizes().vec(), (std::vector<int64_t>{2, 5, 4}));
  EXPECT_EQ(grad_fn_name(y3), "ViewBackward0");
  for (int64_t i = 0; i < 2; ++i)
    EXPECT_TRUE(tensors_close(y3[i], ref_mm(x3.detach()[i], w.detach().t().contiguous()) + b.detach(), 1e-12, 1e-12));
  Tensor g3 = randn({2, 5, 4}, dtype(kFloat64));
  (y3 * g3).sum().backward();
  Tensor g2 = g3.reshape({10, 4}), xf = x3.detach().reshape({10, 3});
  EXPECT_TRUE(tensors_close(x3.grad(), ref_mm(g2, w.detach()).view({2, 5, 3}), 1e-12, 1e-12));
  EXPECT_TRUE(tensors_close(w.grad(), ref_mm(g2.t().contiguous(), xf), 1e-12, 1e-12));
  EXPECT_TRUE(tensors_close(b.grad(), g2.sum({0}), 1e-12, 1e-12));

  // non-contiguous 3-D input and 1-D input
  Tensor x3t = x3.detach().transpose(0, 1);
  Tensor y3t = linear(x3t, w.detach(), b.detach());
  EXPECT_TRUE(tensors_close(y3t, y3.detach().transpose(0, 1), 1e-12, 1e-12));
  Tensor x1 = randn({3}, dtype(kFloat64));
  EXPECT_TRUE(tensors_close(linear(x1, w.detach(), b.detach()), mv(w.detach(), x1) + b.detach(),
                            1e-12, 1e-12));
}

TEST(LinalgLinear, Errors) {
  expect_error([] { linear(randn({2, 3}), randn({4, 5})); }, "[linear] mat1 and mat2 shapes cannot be multiplied (2x3 and 5x4)");
  expect_error([] { linear(randn({2, 3}), randn({4, 3}), randn({5})); },
               "[linear] bias of shape (5) cannot be broadcast to the output shape (2, 4)");
  expect_error([] { linear(scalar_tensor(1.0), randn({4, 3})); }, "[linear] both arguments to matmul need to be at least 1D");
  expect_error([] { linear(randn({2, 3}), randn({4, 3}, dtype(kFloat64))); }, "[linear] expected input, weight and bias");
}

// ---------------------------------------------------------------- the gemm kernel directly

TEST(LinalgGemmKernel, OutputLayoutsAndBeta) {
  manual_seed(61);
  Tensor a = randn({4, 6}, dtype(kFloat64)), b = randn({6, 5}, dtype(kFloat64));
  Tensor ab = ref_mm(a, b);
  Backend& be = backend(kCPU);
  // column-major C
  Tensor ct = empty({5, 4}, dtype(kFloat64)).t();
  be.gemm(ct, a, b, 1.0, 0.0);
  EXPECT_TRUE(tensors_close(ct, ab, 1e-12, 1e-12));
  // strided C (every other column) with beta: C = 2 AB + 0.5 C
  Tensor big = ones({4, 10}, dtype(kFloat64));
  Tensor cs = big.slice(1, 0, std::nullopt, 2);
  be.gemm(cs, a, b, 2.0, 0.5);
  EXPECT_TRUE(tensors_close(cs, ab * 2.0 + 0.5, 1e-12, 1e-12));
  EXPECT_TRUE(equal(big.slice(1, 1, std::nullopt, 2), ones({4, 5}, dtype(kFloat64))));
  // beta = 0 never reads C: NaN garbage in C does not leak
  Tensor cn = full({4, 5}, std::nan(""), dtype(kFloat64));
  be.gemm(cn, a, b, 1.0, 0.0);
  EXPECT_TRUE(tensors_close(cn, ab, 1e-12, 1e-12));
  // K = 0 with beta
  Tensor ck = full({2, 3}, 4.0, dtype(kFloat64));
  be.gemm(ck, empty({2, 0}, dtype(kFloat64)), empty({0, 3}, dtype(kFloat64)), 1.0, 0.5);
  EXPECT_TRUE(equal(ck, full({2, 3}, 2.0, dtype(kFloat64))));
  // expanded (stride 0) operand
  Tensor row = randn({1, 6}, dtype(kFloat64));
  Tensor ce = empty({3, 5}, dtype(kFloat64));
  be.gemm(ce, row.expand({3, 6}), b, 1.0, 0.0);
  for (int64_t i = 0; i < 3; ++i) EXPECT_TRUE(tensors_close(ce[i], ref_mm(row, b)[0], 1e-12, 1e-12));
}

// ====================================================================== troupe's own sgemm (cpu/sgemm.h)

TEST(OwnSgemm, MatchesFloat64ReferenceForEdgesStridesAlphaBeta) {
  // shapes around the 6x16 (AVX2) and 12x32 (AVX-512) tiles, the 256-deep K block and the packed block sizes
  // (1020 rows of A, 2048 columns of B); A and B plain or
  // transposed (strides swapped); beta 0 (C's NaNs ignored), 1 and 0.5; checked against a float64 loop
  manual_seed(31);
  const int threads = get_num_threads();
  set_num_threads(2);
  struct Shape {
    int64_t m, n, k;
  };
  for (Shape sh : {Shape{1, 1, 1}, Shape{5, 15, 3}, Shape{6, 16, 256}, Shape{7, 17, 257}, Shape{32, 1024, 144},
                   Shape{144, 300, 32}, Shape{13, 2100, 40}, Shape{1100, 20, 9}, Shape{12, 32, 256},
                   Shape{11, 33, 5}, Shape{25, 31, 300}}) {
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (float beta : {0.0f, 1.0f, 0.5f}) {
          SCOPED_TRACE("m=" + std::to_string(sh.m) + " n=" + std::to_string(sh.n) + " k=" + std::to_string(sh.k) +
                       " ta=" + std::to_string(ta) + " tb=" + std::to_string(tb) + " beta=" + std::to_string(beta));
          Tensor a = randn({sh.m, sh.k}, kFloat32), b = randn({sh.k, sh.n}, kFloat32);
          Tensor as = ta ? a.t().contiguous() : a, bs = tb ? b.t().contiguous() : b;  // storage order
          Tensor c0 = randn({sh.m, sh.n}, kFloat32);
          Tensor c = beta == 0.0f ? full({sh.m, sh.n}, std::nanf(""), kFloat32) : c0.clone();
          const float alpha = 0.75f;
          cpu::sgemm_packed(sh.m, sh.n, sh.k, alpha, as.data_ptr<float>(), ta ? 1 : sh.k, ta ? sh.m : 1,
                            bs.data_ptr<float>(), tb ? 1 : sh.n, tb ? sh.k : 1, beta, c.data_ptr<float>(), sh.n);
          Tensor ref = a.to(kFloat64).matmul(b.to(kFloat64)) * Scalar(double(alpha));
          if (beta != 0.0f) ref = ref + c0.to(kFloat64) * Scalar(double(beta));
          EXPECT_TRUE(tensors_close(c.to(kFloat64), ref, 1e-5, 1e-4 * std::sqrt(double(sh.k))));
        }
  }
  set_num_threads(threads);
}

TEST(OwnSgemm, SmallPathEqualsThePackedPathBitForBit) {
  // sgemm_small runs the packed path's arithmetic without packing: for every shape it takes (edges of the
  // 6 x 32 tile, K up to the 256 block), strides of A and B (plain, transposed, a padded row stride) and
  // beta, its result equals sgemm_packed's bit for bit; and it declines what it does not take
  manual_seed(33);
  struct Shape {
    int64_t m, n, k;
  };
  int taken = 0;
  for (Shape sh : {Shape{1, 1, 1}, Shape{16, 64, 32}, Shape{16, 10, 64}, Shape{64, 64, 16}, Shape{7, 33, 5},
                   Shape{6, 32, 256}, Shape{13, 70, 3}, Shape{5, 31, 100}}) {
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (int pad : {0, 3})
          for (float beta : {0.0f, 1.0f, 0.5f}) {
            SCOPED_TRACE("m=" + std::to_string(sh.m) + " n=" + std::to_string(sh.n) + " k=" + std::to_string(sh.k) +
                         " ta=" + std::to_string(ta) + " tb=" + std::to_string(tb) + " pad=" + std::to_string(pad) +
                         " beta=" + std::to_string(beta));
            // storage (rows x cols + pad): A is (m, k) or, transposed, (k, m); B is (k, n) or (n, k)
            const int64_t ar = ta ? sh.k : sh.m, ac = (ta ? sh.m : sh.k) + pad;
            const int64_t br = tb ? sh.n : sh.k, bc = (tb ? sh.k : sh.n) + pad;
            Tensor as = randn({ar, ac}, kFloat32), bs = randn({br, bc}, kFloat32);
            const int64_t rsa = ta ? 1 : ac, csa = ta ? ac : 1, rsb = tb ? 1 : bc, csb = tb ? bc : 1;
            Tensor c0 = randn({sh.m, sh.n}, kFloat32);
            Tensor cp = beta == 0.0f ? full({sh.m, sh.n}, std::nanf(""), kFloat32) : c0.clone();
            Tensor cs = cp.clone();
            cpu::sgemm_packed(sh.m, sh.n, sh.k, 0.75f, as.data_ptr<float>(), rsa, csa, bs.data_ptr<float>(), rsb, csb, beta,
                              cp.data_ptr<float>(), sh.n);
            if (!cpu::sgemm_small(sh.m, sh.n, sh.k, 0.75f, as.data_ptr<float>(), rsa, csa, bs.data_ptr<float>(), rsb, csb,
                                  beta, cs.data_ptr<float>(), sh.n))
              continue;  // no AVX-512 here
            ++taken;
            EXPECT_EQ(std::memcmp(cp.data_ptr<float>(), cs.data_ptr<float>(), sh.m * sh.n * sizeof(float)), 0);
          }
  }
  if (taken == 0) GTEST_SKIP() << "sgemm_small does not run on this CPU (no AVX-512)";
  std::vector<float> a(300 * 300), b(300 * 300), c(300 * 300);
  EXPECT_FALSE(cpu::sgemm_small(2, 2, 257, 1.0f, a.data(), 257, 1, b.data(), 2, 1, 0.0f, c.data(), 2));  // K > 256
  EXPECT_FALSE(cpu::sgemm_small(300, 300, 4, 1.0f, a.data(), 4, 1, b.data(), 300, 1, 0.0f, c.data(), 300));  // large
}

TEST(OwnSgemm, TroupeMatmulAgreesWithTheBlasPathWhicheverIsActive) {
  // whichever path use_own_sgemm() picks on this machine, mm equals the float64 product
  manual_seed(32);
  Tensor a = randn({70, 300}, kFloat32), b = randn({300, 50}, kFloat32);
  EXPECT_TRUE(tensors_close(mm(a, b).to(kFloat64), mm(a.to(kFloat64), b.to(kFloat64)), 1e-5, 1e-3));
  EXPECT_TRUE(tensors_close(mm(b.t(), a.t()).to(kFloat64), mm(a.to(kFloat64), b.to(kFloat64)).t(), 1e-5, 1e-3));
}
