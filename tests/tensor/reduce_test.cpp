// Reductions (sum, mean, var/std, prod, max/min, amax/amin, argmax/argmin, logsumexp, softmax, log_softmax,
// cumsum, all/any, norm, count_nonzero): PyTorch fixtures, closed forms, layouts (transposed, non-adjacent
// dims, long rows that split across threads), dtypes, edge cases, gradients and error messages.
// (Over 800 lines, kept whole: every reduction runs through the same fixture reader and layout table at
// the top; a cut would move those into a header for no reader's gain.)
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "common/fixtures.h"
#include "tensor/autograd.h"
#include "tensor/gradcheck.h"
#include "tensor/ops.h"

using namespace troupe;
using troupe::testing::Fixtures;
using troupe::testing::tensors_close;

namespace {

const double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::numeric_limits<double>::quiet_NaN();

template <typename F>
void expect_error(F&& f, const std::string& sub) {
  try {
    f();
    ADD_FAILURE() << "expected an exception containing: " << sub;
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find(sub), std::string::npos) << "message: " << e.what() << "\nwanted: " << sub;
  }
}

Tensor vec_f64(const std::vector<double>& v) { return tensor(v, kFloat64); }
Tensor vec_f32(const std::vector<float>& v) { return tensor(v); }

std::vector<int64_t> shape_of(const Tensor& t) { return t.sizes().vec(); }

/// Reference reduction in double over the dims in `red` (row-major loops on to_vector values).
Tensor ref_sum(const Tensor& x, const std::vector<int64_t>& red, bool keepdim) {
  auto xs = x.sizes().vec();
  auto v = x.to_vector<double>();
  std::vector<bool> m(xs.size(), false);
  for (auto d : red) m[d] = true;
  std::vector<int64_t> os;
  for (size_t i = 0; i < xs.size(); ++i)
    if (!m[i]) os.push_back(xs[i]);
    else if (keepdim) os.push_back(1);
  int64_t on = 1;
  for (size_t i = 0; i < xs.size(); ++i)
    if (!m[i]) on *= xs[i];
  std::vector<double> out(static_cast<size_t>(on), 0.0);
  std::vector<int64_t> idx(xs.size(), 0);
  for (size_t k = 0; k < v.size(); ++k) {
    int64_t o = 0;
    for (size_t i = 0; i < xs.size(); ++i)
      if (!m[i]) o = o * xs[i] + idx[i];
    out[o] += v[k];
    for (size_t i = xs.size(); i-- > 0;) {
      if (++idx[i] < xs[i]) break;
      idx[i] = 0;
    }
  }
  return tensor(out, kFloat64).reshape(os);
}

}  // namespace

// ====================================================================== PyTorch fixtures

TEST(ReduceFixtures, Reductions) {
  auto fx = Fixtures::load("reductions.txt");
  Tensor x = fx.get("x");
  EXPECT_TRUE(tensors_close(x.sum(1), fx.get("sum_dim1"), 1e-6, 1e-6, true));
  EXPECT_TRUE(tensors_close(x.sum({1}, true), fx.get("sum_dim1_keepdim"), 1e-6, 1e-6, true));
  EXPECT_TRUE(tensors_close(x.sum({0, 2}), fx.get("sum_dim02"), 1e-6, 1e-5, true));
  EXPECT_TRUE(tensors_close(x.sum(), fx.get("sum_all"), 1e-6, 1e-5, true));
  EXPECT_TRUE(tensors_close(x.mean(), fx.get("mean_all"), 1e-6, 1e-6, true));
  EXPECT_TRUE(tensors_close(x.mean({1}), fx.get("mean_dim1"), 1e-6, 1e-6, true));
  EXPECT_TRUE(tensors_close(x.var({1}, true), fx.get("var_dim1_unbiased"), 1e-5, 1e-6, true));
  EXPECT_TRUE(tensors_close(x.var({1}, false), fx.get("var_dim1_biased"), 1e-5, 1e-6, true));
  EXPECT_TRUE(tensors_close(x.std({1}, true), fx.get("std_dim1_unbiased"), 1e-5, 1e-6, true));
  EXPECT_TRUE(tensors_close(x.std({1}, false), fx.get("std_dim1_biased"), 1e-5, 1e-6, true));
  EXPECT_TRUE(tensors_close(x.var(), fx.get("var_all"), 1e-5, 1e-6, true));
  EXPECT_TRUE(tensors_close(x.std(), fx.get("std_all"), 1e-5, 1e-6, true));
  auto [mx, mi] = x.max(2);
  EXPECT_TRUE(tensors_close(mx, fx.get("max_dim2_values"), 0, 0, true));
  EXPECT_TRUE(tensors_close(mi, fx.get("max_dim2_indices"), 0, 0, true));
  auto [nx, ni] = x.min(2);
  EXPECT_TRUE(tensors_close(nx, fx.get("min_dim2_values"), 0, 0, true));
  EXPECT_TRUE(tensors_close(ni, fx.get("min_dim2_indices"), 0, 0, true));
  EXPECT_TRUE(tensors_close(x.argmax(), fx.get("argmax_flat"), 0, 0, true));
  EXPECT_TRUE(tensors_close(x.prod(1), fx.get("prod_dim1"), 1e-5, 1e-7, true));
  EXPECT_TRUE(tensors_close(x.cumsum(1), fx.get("cumsum_dim1"), 1e-6, 1e-6, true));
  EXPECT_TRUE(tensors_close(logsumexp(x, {0, 2}), fx.get("logsumexp_dim02"), 1e-6, 1e-6, true));
  EXPECT_TRUE(tensors_close(x.amax({0, 1}), fx.get("amax_dim01"), 0, 0, true));
}

TEST(ReduceFixtures, ReductionsOfPermutedAndStridedInputs) {
  auto fx = Fixtures::load("reductions.txt");
  Tensor x = fx.get("x");                      // (3,4,5)
  Tensor p = x.permute({2, 0, 1});             // (5,3,4): a permutation of dense memory
  ASSERT_FALSE(p.is_contiguous());
  EXPECT_TRUE(tensors_close(p.sum(2), fx.get("sum_dim1").t(), 1e-6, 1e-6));
  EXPECT_TRUE(tensors_close(p.sum({0, 1}), fx.get("sum_dim02"), 1e-6, 1e-5));
  EXPECT_TRUE(tensors_close(p.sum(), fx.get("sum_all"), 1e-6, 1e-5));
  EXPECT_TRUE(tensors_close(p.var({2}, true), fx.get("var_dim1_unbiased").t(), 1e-5, 1e-6));
  EXPECT_TRUE(tensors_close(p.amax({1, 2}), fx.get("amax_dim01"), 0, 0));
  EXPECT_TRUE(tensors_close(std::get<1>(p.max(0)), fx.get("max_dim2_indices"), 0, 0));
  EXPECT_TRUE(tensors_close(p.argmax(), x.permute({2, 0, 1}).contiguous().argmax(), 0, 0));
  EXPECT_TRUE(tensors_close(p.cumsum(2), fx.get("cumsum_dim1").permute({2, 0, 1}), 1e-6, 1e-6));
  // a strided (non-dense) slice: every other element along the last dim
  Tensor s = x.slice(2, 0, 5, 2);  // (3,4,3)
  EXPECT_TRUE(tensors_close(s.sum({0, 2}), ref_sum(s, {0, 2}, false), 1e-6, 1e-5));
  EXPECT_TRUE(tensors_close(s.sum(1, true), ref_sum(s, {1}, true), 1e-6, 1e-5));
}

TEST(ReduceFixtures, Softmax) {
  auto fx = Fixtures::load("softmax.txt");
  for (const char* k : {"x1", "x2", "x3", "x4", "x5"}) {
    SCOPED_TRACE(k);
    std::string n = k;
    Tensor x = fx.get(n);
    const double tol = x.dtype() == kFloat64 ? 1e-12 : 1e-6;
    EXPECT_TRUE(tensors_close(softmax(x, -1), fx.get("softmax_" + n + "_dimm1"), tol, tol, true));
    EXPECT_TRUE(tensors_close(x.softmax(0), fx.get("softmax_" + n + "_dim0"), tol, tol, true));
    if (fx.has("log_softmax_" + n + "_dimm1")) {
      EXPECT_TRUE(tensors_close(log_softmax(x, -1), fx.get("log_softmax_" + n + "_dimm1"), tol, tol, true));
    }
    if (fx.has("logsumexp_" + n + "_dimm1")) {
      EXPECT_TRUE(tensors_close(logsumexp(x, {-1}), fx.get("logsumexp_" + n + "_dimm1"), tol, tol, true));
      // the same through a (1, n, 1) view: the column loop instead of the row loop
      EXPECT_TRUE(tensors_close(logsumexp(x.t().unsqueeze(0), {1}).squeeze(0), fx.get("logsumexp_" + n + "_dimm1"),
                                tol, tol));
    }
    if (fx.has("w_" + n)) {
      Tensor w = fx.get("w_" + n);
      Tensor a = x.clone().requires_grad_();
      (log_softmax(a, -1) * w).sum().backward();
      EXPECT_TRUE(tensors_close(a.grad(), fx.get("grad_log_softmax_" + n), 1e-5, 1e-5, true));
      Tensor b = x.clone().requires_grad_();
      (softmax(b, -1) * w).sum().backward();
      EXPECT_TRUE(tensors_close(b.grad(), fx.get("grad_softmax_" + n), 1e-5, 1e-6, true));
      EXPECT_EQ(softmax(b, -1).grad_fn()->name(), "SoftmaxBackward0");
      EXPECT_EQ(log_softmax(b, -1).grad_fn()->name(), "LogSoftmaxBackward0");
    }
  }
}

TEST(ReduceFixtures, ExtraRecords) {
  // tests/fixtures/reduce_extra.txt (gen_reduce.py): more dims, corrections, ties, zeros, NaN, gradients
  auto fx = Fixtures::load("reduce_extra.txt");
  auto grad_of = [](const std::function<Tensor(const Tensor&)>& f, const Tensor& x, const Tensor& w) {
    Tensor a = x.clone().requires_grad_();
    (f(a) * w).sum().backward();
    return a.grad();
  };
  const double tol = 1e-12;
  Tensor x = fx.get("s4_x");
  struct DimCase { std::vector<int64_t> dims; bool keep; const char* tag; };
  for (const DimCase& c : std::vector<DimCase>{{{0, 2}, false, "02"}, {{1, 3}, true, "13_k"},
                                               {{0, 1, 3}, false, "013"}, {{-1, 0}, true, "30_k"},
                                               {{2}, false, "2"}}) {
    SCOPED_TRACE(c.tag);
    std::string t = c.tag;
    EXPECT_TRUE(tensors_close(x.sum(c.dims, c.keep), fx.get("s4_sum_" + t), tol, tol, true));
    EXPECT_TRUE(tensors_close(x.mean(c.dims, c.keep), fx.get("s4_mean_" + t), tol, tol, true));
    EXPECT_TRUE(tensors_close(x.amax(c.dims, c.keep), fx.get("s4_amax_" + t), 0, 0, true));
    EXPECT_TRUE(tensors_close(var(x, c.dims, 1, c.keep), fx.get("s4_var_" + t), 1e-10, tol, true));
    // the same through a transposed (non-contiguous) input
    Tensor xt = x.transpose(1, 3).contiguous().transpose(1, 3);
    ASSERT_FALSE(xt.is_contiguous());
    EXPECT_TRUE(tensors_close(xt.sum(c.dims, c.keep), fx.get("s4_sum_" + t), tol, tol, true));
    EXPECT_TRUE(tensors_close(var(xt, c.dims, 1, c.keep), fx.get("s4_var_" + t), 1e-10, tol, true));
  }
  EXPECT_TRUE(tensors_close(troupe::std(x, {}, 0), fx.get("s4_std_all_c0"), 1e-12, 0, true));
  EXPECT_TRUE(tensors_close(var(x, {}, std::optional<int64_t>(2)), fx.get("s4_var_all_c2"), 1e-12, 0, true));
  auto [v, m] = var_mean(x, {1, 2}, 0, true);
  EXPECT_TRUE(tensors_close(v, fx.get("s4_varmean_v"), 1e-10, tol, true));
  EXPECT_TRUE(tensors_close(m, fx.get("s4_varmean_m"), tol, tol, true));
  Tensor w13 = fx.get("s4_w13");
  EXPECT_TRUE(tensors_close(grad_of([](const Tensor& t) { return var(t, {0, 2}); }, x, w13), fx.get("s4_gvar13"),
                            1e-10, tol));
  EXPECT_TRUE(tensors_close(grad_of([](const Tensor& t) { return troupe::std(t, {0, 2}, 0); }, x, w13),
                            fx.get("s4_gstd13"), 1e-10, tol));
  EXPECT_TRUE(tensors_close(grad_of([](const Tensor& t) { return t.mean({0, 2}); }, x, w13), fx.get("s4_gmean13"),
                            tol, tol));

  Tensor p = fx.get("prod_x"), wp = fx.get("prod_w");
  EXPECT_TRUE(tensors_close(p.prod(1), fx.get("prod_d1"), 0, 0, true));
  EXPECT_TRUE(tensors_close(p.prod(0), fx.get("prod_d0"), 0, 0, true));
  EXPECT_TRUE(tensors_close(grad_of([](const Tensor& t) { return t.prod(1); }, p, wp), fx.get("prod_g1"), tol, 0));
  EXPECT_TRUE(tensors_close(grad_of([](const Tensor& t) { return t.prod(0); }, p, wp), fx.get("prod_g0"), tol, 0));
  EXPECT_TRUE(tensors_close(grad_of([](const Tensor& t) { return t.prod(); }, p.slice(0, 2, 4), scalar_tensor(2.0, kFloat64)),
                            fx.get("prod_gall"), tol, 0));

  Tensor a = fx.get("ext_x"), wa = fx.get("ext_w");
  EXPECT_TRUE(tensors_close(a.amax({1}), fx.get("ext_amax1"), 0, 0, true));
  EXPECT_TRUE(tensors_close(a.amin({0}), fx.get("ext_amin0"), 0, 0, true));
  EXPECT_TRUE(tensors_close(grad_of([](const Tensor& t) { return t.amax({1}); }, a, wa.select(1, 0)),
                            fx.get("ext_gamax1"), tol, 0));
  EXPECT_TRUE(tensors_close(grad_of([](const Tensor& t) { return t.amin({0}); }, a, wa[0]), fx.get("ext_gamin0"), tol, 0));
  EXPECT_TRUE(tensors_close(grad_of([](const Tensor& t) { return t.amax({0, 1}); }, a, scalar_tensor(2.0, kFloat64)),
                            fx.get("ext_gamax01"), tol, 0));
  auto [mv, mi] = a.max(1);
  EXPECT_TRUE(tensors_close(mv, fx.get("ext_max1_v"), 0, 0, true));
  EXPECT_TRUE(tensors_close(mi, fx.get("ext_max1_i"), 0, 0, true));
  auto [nv, ni] = a.min(0, true);
  EXPECT_TRUE(tensors_close(nv, fx.get("ext_min0k_v"), 0, 0, true));
  EXPECT_TRUE(tensors_close(ni, fx.get("ext_min0k_i"), 0, 0, true));
  EXPECT_TRUE(tensors_close(grad_of([](const Tensor& t) { return std::get<0>(t.max(1)); }, a, wa.select(1, 1)),
                            fx.get("ext_gmax1"), tol, 0));
  EXPECT_TRUE(tensors_close(grad_of([](const Tensor& t) { return t.max(); }, a, scalar_tensor(3.0, kFloat64)),
                            fx.get("ext_gmaxall"), tol, 0));
  EXPECT_TRUE(tensors_close(grad_of([](const Tensor& t) { return t.min(); }, a, scalar_tensor(-1.0, kFloat64)),
                            fx.get("ext_gminall"), tol, 0));
  Tensor an = fx.get("arg_x");
  EXPECT_TRUE(tensors_close(an.argmax(1), fx.get("arg_max1"), 0, 0, true));
  EXPECT_TRUE(tensors_close(an.argmin(1), fx.get("arg_min1"), 0, 0, true));
  EXPECT_TRUE(tensors_close(an.argmax(0), fx.get("arg_max0"), 0, 0, true));
  EXPECT_TRUE(tensors_close(an.argmax(), fx.get("arg_maxflat"), 0, 0, true));
  EXPECT_TRUE(tensors_close(an.slice(0, 1, 2).argmin(), fx.get("arg_minflat_r1"), 0, 0, true));

  Tensor l = fx.get("lse_x");
  EXPECT_TRUE(tensors_close(logsumexp(l, {0, 2}), fx.get("lse_02"), tol, tol, true));
  EXPECT_TRUE(tensors_close(logsumexp(l, {1}, true), fx.get("lse_1k"), tol, tol, true));
  EXPECT_TRUE(tensors_close(grad_of([](const Tensor& t) { return logsumexp(t, {0, 2}); }, l, fx.get("lse_w")),
                            fx.get("lse_g02"), 1e-10, tol));
  EXPECT_TRUE(tensors_close(l.cumsum(2), fx.get("cs_d2"), tol, tol, true));
  EXPECT_TRUE(tensors_close(l.cumsum(0), fx.get("cs_d0"), tol, tol, true));
  EXPECT_TRUE(tensors_close(grad_of([](const Tensor& t) { return t.cumsum(1); }, l, fx.get("cs_w")), fx.get("cs_g1"),
                            tol, tol));

  Tensor nx = fx.get("norm_x"), wn = fx.get("norm_w");
  const double inf = std::numeric_limits<double>::infinity();
  for (auto [tag, pv] : std::vector<std::pair<std::string, double>>{
           {"2", 2.0}, {"1", 1.0}, {"inf", inf}, {"ninf", -inf}, {"0", 0.0}, {"3", 3.0}, {"1p5", 1.5}, {"0p5", 0.5}}) {
    SCOPED_TRACE("p=" + tag);
    EXPECT_TRUE(tensors_close(nx.norm(pv), fx.get("norm_all_" + tag), 1e-12, 0, true));
    EXPECT_TRUE(tensors_close(norm(nx, pv, {1}), fx.get("norm_d1_" + tag), 1e-12, 0, true));
    EXPECT_TRUE(tensors_close(norm(nx, pv, {0}, true), fx.get("norm_d0k_" + tag), 1e-12, 0, true));
    if (fx.has("norm_g1_" + tag)) {
      const double p_ = pv;
      EXPECT_TRUE(tensors_close(grad_of([p_](const Tensor& t) { return norm(t, p_, {1}); }, nx, wn),
                                fx.get("norm_g1_" + tag), 1e-10, 1e-12));
    }
  }

  Tensor b = fx.get("log_x");
  EXPECT_TRUE(tensors_close(all(b, 1), fx.get("log_all1"), 0, 0, true));
  EXPECT_TRUE(tensors_close(any(b, 1), fx.get("log_any1"), 0, 0, true));
  EXPECT_TRUE(tensors_close(all(b, 0), fx.get("log_all0"), 0, 0, true));
  EXPECT_TRUE(tensors_close(any(b, 0, true), fx.get("log_any0k"), 0, 0, true));
  EXPECT_TRUE(tensors_close(count_nonzero(b), fx.get("log_count"), 0, 0, true));
}

// ====================================================================== closed forms

TEST(ReduceSum, ArangeClosedForm) {
  const int64_t n = 100000;
  Tensor a = arange(Scalar(n));
  EXPECT_EQ(a.dtype(), kInt64);
  EXPECT_EQ(a.sum().item<int64_t>(), n * (n - 1) / 2);
  EXPECT_EQ(a.to(kInt32).sum().dtype(), kInt64);
  EXPECT_EQ(a.to(kInt32).sum().item<int64_t>(), n * (n - 1) / 2);
  EXPECT_EQ(a.to(kFloat64).sum().item<double>(), static_cast<double>(n * (n - 1) / 2));
  // 2-D: rows of arange
  Tensor m = arange(Scalar(12), TensorOptions().dtype(kFloat64)).reshape({3, 4});
  EXPECT_TRUE(tensors_close(m.sum(1), vec_f64({6, 22, 38}), 0, 0));
  EXPECT_TRUE(tensors_close(m.sum(0), vec_f64({12, 15, 18, 21}), 0, 0));
  EXPECT_TRUE(tensors_close(m.sum(-1), vec_f64({6, 22, 38}), 0, 0));
  EXPECT_TRUE(tensors_close(m.sum({0, 1}), scalar_tensor(66.0, kFloat64), 0, 0));
}

TEST(ReduceSum, Float32PrecisionOf16MElements) {
  // 2^24 copies of 0.1f: a naive float loop stalls far below the true sum; pairwise/blocked summation
  // stays within a few ulps.
  const int64_t n = int64_t(1) << 24;
  Tensor x = full({n}, 0.1f, kFloat32);
  const double expect = static_cast<double>(0.1f) * static_cast<double>(n);
  const double got = x.sum().item<double>();
  EXPECT_NEAR(got, expect, expect * 1e-6);
  // the same values as one long column (outer=1, r=n, inner=1 through dim 0 of (n, 1)) and as (n/4, 4)
  EXPECT_NEAR(x.reshape({n, 1}).sum(0).item<double>(), expect, expect * 1e-6);
  Tensor cols = x.reshape({n / 4, 4}).sum(0);
  for (double v : cols.to_vector<double>()) EXPECT_NEAR(v, expect / 4, expect / 4 * 1e-6);
  // and the mean
  EXPECT_NEAR(x.mean().item<double>(), 0.1f, 1e-7);
}

TEST(ReduceSum, LongRowsAndColumnsMatchReference) {
  manual_seed(7);
  const int threads = get_num_threads();
  set_num_threads(2);  // the splits of r depend on the thread count: take them even on one core
  // sizes chosen to reach every split of the kernel: long rows split in chunks (3 x 70000), one long column
  // block split in row blocks (70000 x 3 over dim 0), many short rows, and an odd length
  for (auto shape : std::vector<std::vector<int64_t>>{{3, 70000}, {70000, 3}, {2, 40000, 3}, {1, 140001}}) {
    SCOPED_TRACE(list_str(shape));
    Tensor x = randn(shape, kFloat64);
    for (int64_t d = 0; d < x.dim(); ++d) {
      EXPECT_TRUE(tensors_close(x.sum(d), ref_sum(x, {d}, false), 1e-10, 1e-9));
      auto [v, i] = x.max(d);
      Tensor vi = x.gather(d, i.unsqueeze(d)).squeeze(d);
      EXPECT_TRUE(tensors_close(v, vi, 0, 0));
      EXPECT_TRUE(tensors_close(v, x.amax({d}), 0, 0));
      EXPECT_TRUE(tensors_close(x.argmin(d), std::get<1>(x.min(d)), 0, 0));
    }
    // float32 the same
    Tensor xf = x.to(kFloat32);
    for (int64_t d = 0; d < x.dim(); ++d) {
      EXPECT_TRUE(tensors_close(xf.sum(d), ref_sum(x, {d}, false), 1e-5, 1e-3));
      EXPECT_TRUE(tensors_close(std::get<1>(xf.max(d)), std::get<1>(x.max(d)), 0, 0));
      EXPECT_TRUE(tensors_close(xf.argmin(d), x.argmin(d), 0, 0));
    }
  }
  set_num_threads(threads);
}

TEST(ReduceSum, Float32VectorSumMatchesDoubleAtEveryLeafAndThreadCount) {
  // the float32 full sum runs in 8-float vectors over leaves of 1024 elements combined by a carry stack:
  // lengths around the vector width, the leaf and the parallel chunk (32768), against float64, and the same
  // bits with 1 and 2 threads (the chunks are fixed, not per thread)
  manual_seed(11);
  const int threads = get_num_threads();
  for (int64_t n : {1, 7, 31, 32, 33, 1023, 1024, 1025, 3 * 1024 + 5, 32767, 32769, 65536 * 3 + 17, 1000003}) {
    SCOPED_TRACE("n=" + std::to_string(n));
    Tensor x = randn({n}, kFloat32) + Scalar(0.5);
    const double expect = x.to(kFloat64).sum().item<double>();
    set_num_threads(1);
    const float one = x.sum().item<float>();
    set_num_threads(2);
    const float two = x.sum().item<float>();
    EXPECT_EQ(one, two);
    EXPECT_NEAR(one, expect, 1e-6 * (std::abs(expect) + std::sqrt(static_cast<double>(n))));
  }
  set_num_threads(threads);
}

TEST(ReduceSimd, SoftmaxRowsAcrossThreadChunksAndSubnormalExps) {
  // many rows (split over threads in chunks of rows) against float64; exps far below the normal range
  manual_seed(12);
  const int threads = get_num_threads();
  set_num_threads(2);
  Tensor x = randn({300, 1000}, kFloat64) * Scalar(30.0);
  Tensor xf = x.to(kFloat32), x64 = xf.to(kFloat64);
  EXPECT_TRUE(tensors_close(softmax(xf, 1), softmax(x64, 1), 2e-6, 1e-12));
  EXPECT_TRUE(tensors_close(log_softmax(xf, 1), log_softmax(x64, 1), 1e-6, 2e-6));
  EXPECT_TRUE(tensors_close(logsumexp(xf, {1}), logsumexp(x64, {1}), 1e-6, 1e-6));
  set_num_threads(threads);
  // exp(-90) and exp(-100) are subnormal floats: softmax gives them (not 0), correctly rounded to 1e-6
  std::vector<float> v(17, -200.0f);
  v[0] = 0.0f;
  v[5] = -90.0f;
  v[9] = -100.0f;
  Tensor s = softmax(tensor(v).reshape({1, 17}), 1);
  EXPECT_NEAR(s[0][5].item<double>() / std::exp(-90.0), 1.0, 1e-3);
  EXPECT_NEAR(s[0][9].item<double>() / std::exp(-100.0), 1.0, 2.5e-2);  // 26 subnormal steps: 2% rounding
  EXPECT_EQ(s[0][1].item<float>(), 0.0f);
  EXPECT_EQ(s[0][0].item<float>(), 1.0f);
}

TEST(ReduceSimd, VectorisedRowsMatchDoubleAndScalarReferences) {
  // rows long enough for the vector loops, with lengths that leave tails; special values inside the
  // vector part; float32 against the float64 computation
  manual_seed(21);
  for (int64_t r : {1, 7, 8, 16, 37, 1000, 1031}) {
    SCOPED_TRACE("r=" + std::to_string(r));
    Tensor x = randn({5, r}, kFloat64) * Scalar(8.0);
    Tensor xf = x.to(kFloat32);
    Tensor x64 = xf.to(kFloat64);  // the float32 values, exactly
    EXPECT_TRUE(tensors_close(softmax(xf, 1), softmax(x64, 1), 2e-6, 1e-12));
    EXPECT_TRUE(tensors_close(log_softmax(xf, 1), log_softmax(x64, 1), 1e-6, 2e-6));
    EXPECT_TRUE(tensors_close(logsumexp(xf, {1}), logsumexp(x64, {1}), 1e-6, 1e-6));
    EXPECT_TRUE(tensors_close(softmax(xf.t().contiguous(), 0), softmax(x64, 1).t(), 2e-6, 1e-12));
    EXPECT_TRUE(tensors_close(xf.amax({1}), x64.amax({1}), 0, 0));
    EXPECT_TRUE(tensors_close(xf.amin({1}), x64.amin({1}), 0, 0));
    EXPECT_TRUE(tensors_close(xf.argmax(1), x64.argmax(1), 0, 0));
    EXPECT_TRUE(tensors_close(xf.var({1}), x64.var({1}), 1e-5, 1e-6));
    EXPECT_TRUE(tensors_close(xf.norm(2), x64.norm(2), 1e-6, 0));
    EXPECT_TRUE(tensors_close(norm(xf, 2, {1}), norm(x64, 2, {1}), 1e-6, 0));
    // the fused log_softmax/softmax backward against the float64 composition
    Tensor w = randn({5, r}, kFloat64);
    Tensor a = xf.clone().requires_grad_(), b = x64.clone().requires_grad_();
    (log_softmax(a, 1) * w.to(kFloat32)).sum().backward();
    (log_softmax(b, 1) * w).sum().backward();
    EXPECT_TRUE(tensors_close(a.grad(), b.grad(), 1e-4, 1e-5));
    Tensor c = xf.clone().requires_grad_(), d = x64.clone().requires_grad_();
    (softmax(c, 1) * w.to(kFloat32)).sum().backward();
    (softmax(d, 1) * w).sum().backward();
    EXPECT_TRUE(tensors_close(c.grad(), d.grad(), 1e-4, 1e-6));
    // 16-bit floats go through float rows
    EXPECT_TRUE(tensors_close(softmax(xf.to(kBFloat16), 1), softmax(xf.to(kBFloat16).to(kFloat64), 1), 1e-2, 1e-3));
    EXPECT_TRUE(tensors_close(logsumexp(xf.to(kFloat16), {1}), logsumexp(xf.to(kFloat16).to(kFloat64), {1}), 2e-3,
                              1e-2));
  }
  // specials in the middle of a long row
  std::vector<float> v(40, 1.0f);
  v[3] = 2.0f;
  v[20] = -std::numeric_limits<float>::infinity();
  Tensor s = softmax(tensor(v).reshape({1, 40}), 1);
  EXPECT_EQ(s[0][20].item<float>(), 0.0f);
  EXPECT_NEAR(s.sum().item<double>(), 1.0, 1e-6);
  EXPECT_EQ(s.argmax().item<int64_t>(), 3);
  for (float special : {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    std::vector<float> u = v;
    u[21] = special;
    Tensor row = tensor(u).reshape({1, 40});
    EXPECT_TRUE(softmax(row, 1).isnan().all().item<bool>());
    EXPECT_TRUE(log_softmax(row, 1).isnan().all().item<bool>());
    EXPECT_EQ(row.argmax().item<int64_t>(), 21);
    EXPECT_EQ(std::get<1>(row.max(1)).item<int64_t>(), 21);
    EXPECT_EQ(std::isnan(special) ? 21 : 20, row.argmin().item<int64_t>());
    const float lse = logsumexp(row, {1}).item<float>();
    if (std::isnan(special)) EXPECT_TRUE(std::isnan(lse));
    else EXPECT_EQ(lse, special);
  }
  // exp's range ends: underflow to subnormals and 0, overflow to inf
  Tensor e = logsumexp(tensor({-100.0f, -104.0f, -90.0f}).reshape({3, 1}), {1});
  EXPECT_TRUE(tensors_close(e, tensor({-100.0f, -104.0f, -90.0f}), 1e-6, 0));
  Tensor big = softmax(tensor({88.0f, 88.7f, 0.0f, -200.0f, 1.0f, 2.0f, 3.0f, 4.0f, 5.0f}).reshape({1, 9}), 1);
  EXPECT_TRUE(tensors_close(big.sum(), scalar_tensor(1.0f), 1e-6, 0));
  EXPECT_EQ(big[0][3].item<float>(), 0.0f);
}

TEST(ReduceSum, NonAdjacentDimsAndDtypes) {
  manual_seed(3);
  Tensor x = randn({4, 5, 6, 7}, kFloat64);
  for (auto dims : std::vector<std::vector<int64_t>>{{0, 2}, {1, 3}, {0, 3}, {0, 2, 3}, {0, 1, 3}, {3, 0}}) {
    SCOPED_TRACE(list_str(dims));
    EXPECT_TRUE(tensors_close(x.sum(dims), ref_sum(x, dims, false), 1e-12, 1e-12));
    EXPECT_TRUE(tensors_close(x.sum(dims, true), ref_sum(x, dims, true), 1e-12, 1e-12));
    EXPECT_TRUE(tensors_close(x.to(kFloat32).sum(dims), ref_sum(x, dims, false), 1e-5, 1e-5));
    // float16: accumulates in float through the stages, rounds once at the end
    Tensor h = x.to(kFloat16);
    Tensor hs = h.sum(dims);
    EXPECT_EQ(hs.dtype(), kFloat16);
    EXPECT_TRUE(tensors_close(hs, ref_sum(h.to(kFloat64), dims, false).to(kFloat16), 0, 0));
    // transposed input
    Tensor t = x.transpose(0, 3);
    std::vector<int64_t> td;
    for (auto d : dims) td.push_back(d == 0 ? 3 : d == 3 ? 0 : d);
    EXPECT_TRUE(tensors_close(t.sum(td), ref_sum(t.contiguous(), td, false), 1e-12, 1e-12));
    // mean, amax/amin, all/any through the same paths
    int64_t n = 1;
    for (auto d : dims) n *= x.size(d);
    EXPECT_TRUE(tensors_close(x.mean(dims), ref_sum(x, dims, false) / Scalar(double(n)), 1e-12, 1e-12));
  }
  Tensor pos = x.gt(Scalar(-3.5));
  EXPECT_TRUE(all(pos).item<bool>());
  EXPECT_TRUE(pos.amin({0, 2}).all().item<bool>());
  Tensor ints = arange(Scalar(24)).reshape({2, 3, 4}).to(kInt32);
  EXPECT_TRUE(tensors_close(ints.amax({0, 2}), tensor({15, 19, 23}).to(kInt32), 0, 0, true));
  EXPECT_TRUE(tensors_close(ints.amin({0, 2}), tensor({0, 4, 8}).to(kInt32), 0, 0, true));
  EXPECT_TRUE(tensors_close(ints.sum({0, 2}), tensor({60, 92, 124}), 0, 0, true));
}

TEST(ReduceSum, BiasGradientShapeOverDim0) {
  Tensor g = arange(Scalar(6), kFloat32).reshape({3, 2});
  EXPECT_TRUE(tensors_close(g.sum(0), vec_f32({6, 9}), 0, 0, true));
  Tensor big = ones({1000, 300}, kFloat32);
  EXPECT_TRUE(tensors_close(big.sum(0), full({300}, 1000.0f, kFloat32), 0, 0));
  EXPECT_TRUE(tensors_close(big.t().sum(1), full({300}, 1000.0f, kFloat32), 0, 0));
  // broadcast (stride-0) inputs: the gradient of (x + b).sum() reaching b is an expanded tensor
  Tensor b = vec_f32({1, 2, 3});
  Tensor e = b.expand({1000, 3});
  EXPECT_TRUE(tensors_close(e.sum(0), vec_f32({1000, 2000, 3000}), 0, 0, true));
  EXPECT_TRUE(tensors_close(e.sum(1), full({1000}, 6.0f, kFloat32), 0, 0, true));
  EXPECT_TRUE(tensors_close(e.sum(), scalar_tensor(6000.0f, kFloat32), 0, 0, true));
  EXPECT_TRUE(tensors_close(e.mean(0), b, 0, 0, true));
  EXPECT_TRUE(tensors_close(e.amax({0}), b, 0, 0, true));
  EXPECT_TRUE(tensors_close(std::get<1>(e.max(0)), tensor({0, 0, 0}), 0, 0, true));
  EXPECT_TRUE(tensors_close(e.argmax(), scalar_tensor(Scalar(int64_t(2)), kInt64), 0, 0, true));
  EXPECT_TRUE(tensors_close(tensor({true, false}).expand({5, 2}).sum(0), tensor({5, 0}), 0, 0, true));
  EXPECT_TRUE(tensors_close(tensor({1, 2}).to(kInt32).expand({3, 4, 2}).sum({0, 1}), tensor({12, 24}), 0, 0, true));
  EXPECT_TRUE(tensors_close(e.to(kFloat16).sum(0), vec_f32({1000, 2000, 3000}), 0, 0));
  Tensor bb = vec_f32({1, 2, 3}).requires_grad_();
  Tensor xx = ones({4, 3}, kFloat32);
  (xx + bb).sum().backward();
  EXPECT_TRUE(tensors_close(bb.grad(), full({3}, 4.0f, kFloat32), 0, 0, true));
}

TEST(ReduceVar, KnownVector) {
  Tensor x = vec_f64({1, 2, 3, 4});
  EXPECT_DOUBLE_EQ(x.var().item<double>(), 5.0 / 3.0);
  EXPECT_DOUBLE_EQ(x.var(false).item<double>(), 1.25);
  EXPECT_DOUBLE_EQ(x.std().item<double>(), std::sqrt(5.0 / 3.0));
  EXPECT_DOUBLE_EQ(var(x, {}, std::optional<int64_t>(2)).item<double>(), 2.5);
  auto [v, m] = var_mean(x, {0}, 1, true);
  EXPECT_EQ(shape_of(v), std::vector<int64_t>{1});
  EXPECT_DOUBLE_EQ(v.item<double>(), 5.0 / 3.0);
  EXPECT_DOUBLE_EQ(m.item<double>(), 2.5);
  // correction beyond the count: divide by max(0, n - correction) as PyTorch
  EXPECT_TRUE(std::isinf(var(vec_f64({1, 2, 4}), {0}, std::optional<int64_t>(3)).item<double>()));
  EXPECT_TRUE(std::isnan(vec_f64({1}).var().item<double>()));
  EXPECT_TRUE(std::isnan(vec_f64({1}).std().item<double>()));
  // large offset: two passes keep the precision
  Tensor big = vec_f32({1e4f + 1, 1e4f + 2, 1e4f + 3, 1e4f + 4});
  EXPECT_NEAR(big.var().item<double>(), 5.0 / 3.0, 1e-3);
  // rows
  Tensor r = tensor({1.0, 2.0, 3.0, 4.0, 2.0, 2.0, 2.0, 2.0}, kFloat64).reshape({2, 4});
  EXPECT_TRUE(tensors_close(r.var(IntArrayRef{1}), vec_f64({5.0 / 3.0, 0}), 1e-15, 0));
  EXPECT_TRUE(tensors_close(r.var(IntArrayRef{1}, true, true), vec_f64({5.0 / 3.0, 0}).reshape({2, 1}), 1e-15, 0));
  EXPECT_EQ(r.var(IntArrayRef{1}, true, true).grad_fn(), nullptr);
  // float16 computes in float
  Tensor h = x.to(kFloat16);
  EXPECT_EQ(h.var().dtype(), kFloat16);
  EXPECT_NEAR(h.var().item<double>(), 5.0 / 3.0, 2e-3);
}

TEST(ReduceMean, DtypesAndEmpty) {
  EXPECT_TRUE(std::isnan(empty({0}).mean().item<double>()));
  expect_error([] { arange(Scalar(4)).mean(); },
               "[mean] could not infer output dtype. Input dtype must be either a floating point or complex dtype. "
               "Got: int64");
  expect_error([] { arange(Scalar(4)).var(); }, "[var] std and var only support floating point and complex dtypes");
  Tensor h = tensor({1.0, 2.0, 4.0}).to(kBFloat16);
  EXPECT_EQ(h.mean().dtype(), kBFloat16);
  EXPECT_FLOAT_EQ(h.mean().item<float>(), static_cast<float>(BFloat16(7.0f / 3.0f)));
}

// ====================================================================== prod / cumsum

TEST(ReduceProd, ValuesDtypesAndZeroGradients) {
  EXPECT_EQ(tensor({1, 2, 3, 4, 5}).prod().item<int64_t>(), 120);
  EXPECT_EQ(tensor({1, 2, 3}).to(kInt32).prod().dtype(), kInt64);
  EXPECT_EQ(tensor({true, true}).prod(0).dtype(), kInt64);
  EXPECT_DOUBLE_EQ(empty({0}, kFloat64).prod().item<double>(), 1.0);
  // gradients with zeros in the input (PyTorch: [[0,6,0],[0,0,0],[6,3,2]])
  Tensor a = tensor({2.0, 0.0, 3.0, 0.0, 0.0, 1.0, 1.0, 2.0, 3.0}, kFloat64).reshape({3, 3}).requires_grad_();
  a.prod(1).sum().backward();
  EXPECT_TRUE(tensors_close(a.grad(), tensor({0.0, 6.0, 0.0, 0.0, 0.0, 0.0, 6.0, 3.0, 2.0}, kFloat64).reshape({3, 3}),
                            0, 0));
  EXPECT_EQ(a.prod(1).grad_fn()->name(), "ProdBackward1");
  Tensor b = tensor({2.0, 0.0, 3.0}, kFloat64).requires_grad_();
  Tensor pb = b.prod();
  EXPECT_EQ(pb.grad_fn()->name(), "ProdBackward0");
  pb.backward();
  EXPECT_TRUE(tensors_close(b.grad(), tensor({0.0, 6.0, 0.0}, kFloat64), 0, 0));
  Tensor c = tensor({2.0, 0.0, 0.0}, kFloat64).requires_grad_();
  c.prod().backward();
  EXPECT_TRUE(tensors_close(c.grad(), tensor({0.0, 0.0, 0.0}, kFloat64), 0, 0));
  // no zeros: g * out / x; and numerically, including second derivatives around a zero
  Tensor d = tensor({1.5, -2.0, 0.5, 3.0}, kFloat64).reshape({2, 2}).requires_grad_();
  EXPECT_TRUE(autograd::gradcheck([](const autograd::variable_list& in) { return autograd::variable_list{in[0].prod(1)}; },
                                  {d}));
  Tensor z = tensor({1.5, 0.0, 0.5, 3.0, 0.0, 0.0}, kFloat64).reshape({3, 2}).requires_grad_();
  EXPECT_TRUE(autograd::gradcheck([](const autograd::variable_list& in) { return autograd::variable_list{in[0].prod(1)}; },
                                  {z}));
  EXPECT_TRUE(autograd::gradgradcheck(
      [](const autograd::variable_list& in) { return autograd::variable_list{in[0].prod(0)}; }, {d}));
}

TEST(ReduceCumsum, ValuesDtypesAndBackward) {
  Tensor x = arange(Scalar(6), kFloat32).reshape({2, 3});
  EXPECT_TRUE(tensors_close(x.cumsum(1), vec_f32({0, 1, 3, 3, 7, 12}).reshape({2, 3}), 0, 0, true));
  EXPECT_TRUE(tensors_close(x.cumsum(0), vec_f32({0, 1, 2, 3, 5, 7}).reshape({2, 3}), 0, 0, true));
  EXPECT_TRUE(tensors_close(x.cumsum(-2), x.cumsum(0), 0, 0));
  EXPECT_EQ(arange(Scalar(3)).to(kInt32).cumsum(0).dtype(), kInt64);
  EXPECT_EQ(tensor({true, false, true}).cumsum(0).dtype(), kInt64);
  EXPECT_TRUE(tensors_close(tensor({true, false, true}).cumsum(0), tensor({1, 1, 2}), 0, 0, true));
  EXPECT_EQ(cumsum(x, 1, kFloat64).dtype(), kFloat64);
  EXPECT_EQ(scalar_tensor(3.0).cumsum(0).item<double>(), 3.0);
  EXPECT_EQ(empty({0, 3}).cumsum(0).numel(), 0);
  // backward: reverse cumulative sum of the weights
  Tensor a = arange(Scalar(8), kFloat64).reshape({2, 4}).requires_grad_();
  Tensor w = tensor({1.0, 2.0, 3.0, 4.0, -1.0, 0.5, 2.0, 1.0}, kFloat64).reshape({2, 4});
  Tensor y = a.cumsum(1);
  EXPECT_EQ(y.grad_fn()->name(), "CumsumBackward0");
  (y * w).sum().backward();
  EXPECT_TRUE(tensors_close(a.grad(), tensor({10.0, 9.0, 7.0, 4.0, 2.5, 3.5, 3.0, 1.0}, kFloat64).reshape({2, 4}), 0, 0));
  EXPECT_TRUE(autograd::gradgradcheck(
      [](const autograd::variable_list& in) { return autograd::variable_list{in[0].cumsum(0)}; },
      {arange(Scalar(6), kFloat64).reshape({3, 2}).requires_grad_()}));
}

// ====================================================================== max / min / arg / amax

TEST(ReduceMax, TiesNaNAndIndices) {
  Tensor t = vec_f32({3, 1, 3, 1});
  auto [v, i] = t.max(0);
  EXPECT_EQ(v.item<float>(), 3.0f);
  EXPECT_EQ(i.item<int64_t>(), 0);
  EXPECT_EQ(std::get<1>(t.min(0)).item<int64_t>(), 1);
  EXPECT_EQ(t.argmin().item<int64_t>(), 1);
  EXPECT_EQ(t.argmax().item<int64_t>(), 0);
  Tensor n = vec_f32({1, float(kNaN), 3, float(kNaN)});
  EXPECT_TRUE(std::isnan(n.max().item<float>()));
  EXPECT_TRUE(std::isnan(n.min().item<float>()));
  EXPECT_TRUE(std::isnan(n.amax().item<float>()));
  EXPECT_EQ(std::get<1>(n.max(0)).item<int64_t>(), 1);
  EXPECT_EQ(std::get<1>(n.min(0)).item<int64_t>(), 1);
  EXPECT_EQ(n.argmax().item<int64_t>(), 1);
  EXPECT_EQ(n.argmin().item<int64_t>(), 1);
  // 2-D, over both dims
  Tensor m = vec_f32({3, 1, 3, 1, 0, 0, 5, 5}).reshape({2, 4});
  EXPECT_TRUE(tensors_close(std::get<1>(m.max(1)), tensor({0, 2}), 0, 0, true));
  EXPECT_TRUE(tensors_close(std::get<1>(m.max(0)), tensor({0, 0, 1, 1}), 0, 0, true));
  EXPECT_TRUE(tensors_close(m.argmax(1, true), tensor({0, 2}).reshape({2, 1}), 0, 0, true));
  EXPECT_EQ(shape_of(m.argmax(std::nullopt, true)), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(m.argmax().item<int64_t>(), 6);
  EXPECT_EQ(m.t().argmax().item<int64_t>(), 5);  // flat index in the transposed (logical) order
  // keepdim and negative dims
  auto [kv, ki] = m.max(-1, true);
  EXPECT_EQ(shape_of(kv), (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(shape_of(ki), (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(ki.dtype(), kInt64);
  // integers and bool
  Tensor ints = tensor({4, -2, 9, 9});
  EXPECT_EQ(ints.max().item<int64_t>(), 9);
  EXPECT_EQ(ints.argmax().item<int64_t>(), 2);
  EXPECT_EQ(ints.min().item<int64_t>(), -2);
  EXPECT_TRUE(tensor({false, true}).max().item<bool>());
  expect_error([] { tensor({false, true}).argmax(); }, "[argmax] not implemented for dtype bool");
  // 0-dim
  auto [sv, si] = scalar_tensor(2.5).max(0);
  EXPECT_EQ(sv.dim(), 0);
  EXPECT_EQ(si.item<int64_t>(), 0);
  EXPECT_EQ(scalar_tensor(2.5).argmax(0).item<int64_t>(), 0);
}

TEST(ReduceMax, Gradients) {
  // full max: evenly among ties
  Tensor c = tensor({1.0, 3.0, 3.0, 2.0, 2.0, 1.0}, kFloat64).reshape({2, 3}).requires_grad_();
  Tensor mc = c.max();
  EXPECT_EQ(mc.grad_fn()->name(), "MaxBackward1");
  mc.backward();
  EXPECT_TRUE(tensors_close(c.grad(), tensor({0.0, 0.5, 0.5, 0.0, 0.0, 0.0}, kFloat64).reshape({2, 3}), 0, 0));
  // amax over dim 1: split per row
  c.mutable_grad() = Tensor();
  Tensor ac = c.amax({1});
  EXPECT_EQ(ac.grad_fn()->name(), "AmaxBackward0");
  ac.sum().backward();
  EXPECT_TRUE(tensors_close(c.grad(), tensor({0.0, 0.5, 0.5, 0.5, 0.5, 0.0}, kFloat64).reshape({2, 3}), 0, 0));
  // max over a dim: to the returned index only
  c.mutable_grad() = Tensor();
  auto [v, i] = c.max(1);
  EXPECT_EQ(v.grad_fn()->name(), "MaxBackward0");
  EXPECT_FALSE(i.requires_grad());
  v.sum().backward();
  EXPECT_TRUE(tensors_close(c.grad(), tensor({0.0, 1.0, 0.0, 1.0, 0.0, 0.0}, kFloat64).reshape({2, 3}), 0, 0));
  c.mutable_grad() = Tensor();
  std::get<0>(c.min(0, true)).sum().backward();
  EXPECT_TRUE(tensors_close(c.grad(), tensor({1.0, 0.0, 0.0, 0.0, 1.0, 1.0}, kFloat64).reshape({2, 3}), 0, 0));
  // NaN: the full max sends the gradient to the NaNs
  Tensor d = tensor({1.0, kNaN, 3.0, kNaN}, kFloat64).requires_grad_();
  d.max().backward();
  EXPECT_TRUE(tensors_close(d.grad(), tensor({0.0, 0.5, 0.0, 0.5}, kFloat64), 0, 0));
  // numerically, away from ties
  Tensor r = tensor({0.3, -1.2, 2.5, 0.7, 1.1, -0.4}, kFloat64).reshape({2, 3}).requires_grad_();
  EXPECT_TRUE(autograd::gradcheck(
      [](const autograd::variable_list& in) {
        return autograd::variable_list{in[0].amin({0}), std::get<0>(in[0].max(1)), in[0].min()};
      },
      {r}));
}

// ====================================================================== logsumexp / softmax

TEST(ReduceLogsumexp, InfinitiesAndDtypes) {
  EXPECT_EQ(logsumexp(tensor({kInf, 1.0}, kFloat64), {0}).item<double>(), kInf);
  EXPECT_EQ(logsumexp(tensor({-kInf, -kInf}, kFloat64), {0}).item<double>(), -kInf);
  EXPECT_EQ(logsumexp(tensor({kInf, -kInf}, kFloat64), {0}).item<double>(), kInf);
  EXPECT_TRUE(std::isnan(logsumexp(tensor({kNaN, 1.0}, kFloat64), {0}).item<double>()));
  EXPECT_EQ(logsumexp(empty({0}), {0}).item<double>(), -kInf);
  EXPECT_NEAR(logsumexp(tensor({1000.0, 1000.0}, kFloat32), {0}).item<double>(), 1000 + std::log(2.0), 1e-3);
  Tensor i = logsumexp(tensor({1, 1}).reshape({1, 2}), {1});
  EXPECT_EQ(i.dtype(), kFloat32);
  EXPECT_NEAR(i.item<double>(), 1 + std::log(2.0), 1e-6);
  // multi-dim (generic path) vs one dim at a time
  manual_seed(11);
  Tensor x = randn({3, 4, 5}, kFloat64);
  EXPECT_TRUE(tensors_close(logsumexp(x, {0, 2}), logsumexp(logsumexp(x, {2}), {0}), 1e-12, 1e-12));
  EXPECT_TRUE(tensors_close(logsumexp(x, {0, 2}, true), logsumexp(logsumexp(x, {2}, true), {0}, true), 1e-12, 1e-12));
  EXPECT_TRUE(tensors_close(logsumexp(x, {1}), log(exp(x).sum(1)), 1e-12, 1e-12));
  EXPECT_TRUE(tensors_close(logsumexp(x.transpose(0, 2), {2}), log(exp(x).sum(0)).t(), 1e-12, 1e-12));
  Tensor a = x.clone().requires_grad_();
  EXPECT_EQ(logsumexp(a, {1}).grad_fn()->name(), "LogsumexpBackward0");
  EXPECT_TRUE(autograd::gradcheck(
      [](const autograd::variable_list& in) { return autograd::variable_list{logsumexp(in[0], {0, 2}, true)}; }, {a}));
}

TEST(ReduceSoftmax, EdgeCasesAndDtypes) {
  // PyTorch 1.13: a +inf in the row, or a row of -inf, gives NaN everywhere; -inf entries give 0 / -inf
  Tensor x = tensor({1.0, -kInf, 2.0}, kFloat32).reshape({1, 3});
  Tensor s = softmax(x, 1);
  EXPECT_NEAR(s[0][0].item<double>(), 0.26894142, 1e-6);
  EXPECT_EQ(s[0][1].item<double>(), 0.0);
  Tensor ls = log_softmax(x, 1);
  EXPECT_EQ(ls[0][1].item<double>(), -kInf);
  EXPECT_NEAR(ls[0][2].item<double>(), -0.31326169, 1e-6);
  for (const auto& row : std::vector<std::vector<double>>{{1, kInf, 2}, {1, kNaN, 2}, {-kInf, -kInf, -kInf}}) {
    Tensor r = tensor(row).to(kFloat32).reshape({1, 3});
    EXPECT_TRUE(softmax(r, 1).isnan().all().item<bool>());
    EXPECT_TRUE(log_softmax(r, 1).isnan().all().item<bool>());
    EXPECT_TRUE(softmax(r.t(), 0).isnan().all().item<bool>());
    EXPECT_TRUE(log_softmax(r.t(), 0).isnan().all().item<bool>());
  }
  // dtype argument converts first; the graph has ToCopyBackward0 under SoftmaxBackward0
  Tensor a = vec_f32({1, 2, 3}).requires_grad_();
  Tensor d = softmax(a, 0, kFloat64);
  EXPECT_EQ(d.dtype(), kFloat64);
  d[0].backward();
  EXPECT_EQ(a.grad().dtype(), kFloat32);
  expect_error([] { softmax(tensor({1, 2}), 0); }, "[softmax] not implemented for dtype int64");
  expect_error([] { log_softmax(vec_f32({1, 2}), 1); },
               "[log_softmax] Dimension out of range (expected to be in range of [-1, 0], but got 1)");
  // 0-dim and empty
  EXPECT_EQ(scalar_tensor(3.0).softmax(0).item<double>(), 1.0);
  EXPECT_EQ(scalar_tensor(3.0).log_softmax(-1).item<double>(), 0.0);
  EXPECT_EQ(shape_of(empty({0, 3}).softmax(1)), (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(shape_of(empty({2, 0}).log_softmax(1)), (std::vector<int64_t>{2, 0}));
  // half/bfloat16 compute in float
  Tensor h = tensor({0.5, 1.5, -1.0}).to(kBFloat16);
  EXPECT_TRUE(tensors_close(softmax(h, 0), softmax(h.to(kFloat32), 0), 1e-2, 1e-3));
  EXPECT_EQ(softmax(h, 0).dtype(), kBFloat16);
  // middle dim (inner > 1) agrees with the last-dim path on the transposed tensor; gradients numerically
  manual_seed(5);
  Tensor y = randn({3, 4, 5}, kFloat64);
  EXPECT_TRUE(tensors_close(softmax(y, 1), softmax(y.transpose(1, 2).contiguous(), 2).transpose(1, 2), 1e-14, 1e-15));
  EXPECT_TRUE(tensors_close(log_softmax(y, 1), log_softmax(y.transpose(1, 2).contiguous(), 2).transpose(1, 2), 1e-14,
                            1e-14));
  Tensor yr = y.clone().requires_grad_();
  EXPECT_TRUE(autograd::gradcheck(
      [](const autograd::variable_list& in) {
        return autograd::variable_list{softmax(in[0], 1), log_softmax(in[0], -1), softmax(in[0], 2)};
      },
      {yr}));
  EXPECT_TRUE(autograd::gradgradcheck(
      [](const autograd::variable_list& in) { return autograd::variable_list{log_softmax(in[0], -1)}; }, {yr}));
}

// ====================================================================== all / any / count_nonzero / norm

TEST(ReduceLogical, AllAnyCountNonzero) {
  Tensor m = tensor({1.0, 0.0, 2.0, 3.0, 4.0, 5.0}, kFloat32).reshape({2, 3});
  EXPECT_FALSE(m.all().item<bool>());
  EXPECT_TRUE(m.any().item<bool>());
  EXPECT_EQ(m.all().dtype(), kBool);
  EXPECT_TRUE(tensors_close(all(m, 1), tensor({false, true}), 0, 0, true));
  EXPECT_TRUE(tensors_close(all(m, 0, true), tensor({true, false, true}).reshape({1, 3}), 0, 0, true));
  EXPECT_TRUE(tensors_close(any(zeros({2, 3}), -1), tensor({false, false}), 0, 0, true));
  EXPECT_TRUE(empty({0}).all().item<bool>());
  EXPECT_FALSE(empty({0}).any().item<bool>());
  EXPECT_TRUE(tensor({kNaN}).all().item<bool>());
  EXPECT_EQ(tensor({1, 0}).to(kUInt8).all().dtype(), kUInt8);
  EXPECT_EQ(count_nonzero(m).item<int64_t>(), 5);
  EXPECT_EQ(count_nonzero(m).dtype(), kInt64);
}

TEST(ReduceNorm, ValuesAndGradients) {
  Tensor x = tensor({1.0, -2.0, 0.0, 3.0}, kFloat64);
  EXPECT_DOUBLE_EQ(x.norm().item<double>(), std::sqrt(14.0));
  EXPECT_DOUBLE_EQ(x.norm(1).item<double>(), 6.0);
  EXPECT_DOUBLE_EQ(x.norm(kInf).item<double>(), 3.0);
  EXPECT_DOUBLE_EQ(x.norm(-kInf).item<double>(), 0.0);
  EXPECT_DOUBLE_EQ(x.norm(0).item<double>(), 3.0);
  EXPECT_NEAR(x.norm(0.5).item<double>(), 17.191508225450303, 1e-12);
  EXPECT_NEAR(x.norm(3).item<double>(), std::cbrt(36.0), 1e-12);
  Tensor m = x.reshape({2, 2});
  EXPECT_TRUE(tensors_close(norm(m, 2, {1}), tensor({std::sqrt(5.0), 3.0}, kFloat64), 1e-15, 0));
  EXPECT_TRUE(tensors_close(norm(m, 1, {0}, true), tensor({1.0, 5.0}, kFloat64).reshape({1, 2}), 0, 0));
  expect_error([] { tensor({1, 2}).norm(); },
               "[norm] input dtype should be either floating point or complex. Got int64 instead.");
  Tensor a = x.clone().requires_grad_();
  EXPECT_EQ(a.norm().grad_fn()->name(), "NormBackward0");
  EXPECT_EQ(norm(a, 2, {0}).grad_fn()->name(), "NormBackward1");
  // zero vector: 0 gradients for every p (PyTorch masks the divisions by a zero norm)
  for (double p : {2.0, 1.0, kInf, 3.0, 0.5}) {
    Tensor z = zeros({2}, kFloat64).requires_grad_();
    z.norm(p).backward();
    EXPECT_TRUE(tensors_close(z.grad(), zeros({2}, kFloat64), 0, 0)) << "p=" << p;
  }
  Tensor r = tensor({0.3, -1.2, 2.5, 0.7, 1.1, -0.4}, kFloat64).reshape({2, 3}).requires_grad_();
  for (double p : {2.0, 1.0, kInf, 3.0, 1.5, 0.5}) {
    EXPECT_TRUE(autograd::gradcheck(
        [p](const autograd::variable_list& in) {
          return autograd::variable_list{norm(in[0], p), norm(in[0], p, {1}), norm(in[0], p, {0}, true)};
        },
        {r}))
        << "p=" << p;
  }
}

// ====================================================================== shapes, dtypes, empties, errors

TEST(ReduceShapes, KeepdimNegativeDimsAndDtypes) {
  Tensor x = ones({2, 3, 4});
  EXPECT_EQ(shape_of(x.sum({1}, true)), (std::vector<int64_t>{2, 1, 4}));
  EXPECT_EQ(shape_of(x.sum({-1, 0})), (std::vector<int64_t>{3}));
  EXPECT_EQ(shape_of(x.sum({-1, 0}, true)), (std::vector<int64_t>{1, 3, 1}));
  EXPECT_EQ(shape_of(x.sum(IntArrayRef{})), (std::vector<int64_t>{}));  // dim=[] reduces everything
  EXPECT_EQ(shape_of(x.mean({2}, true)), (std::vector<int64_t>{2, 3, 1}));
  EXPECT_EQ(shape_of(x.amax({}, true)), (std::vector<int64_t>{1, 1, 1}));
  EXPECT_EQ(shape_of(std::get<0>(x.max(-2))), (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(shape_of(x.prod(-3, true)), (std::vector<int64_t>{1, 3, 4}));
  EXPECT_EQ(shape_of(var(x, {0, 2}, 1, true)), (std::vector<int64_t>{1, 3, 1}));
  EXPECT_EQ(shape_of(logsumexp(x, {1, 2}, true)), (std::vector<int64_t>{2, 1, 1}));
  // sum over a dim of size 1, and a 0-dim tensor over dim 0 / -1
  EXPECT_TRUE(tensors_close(ones({3, 1}).sum(1), ones({3}), 0, 0));
  EXPECT_EQ(scalar_tensor(4.0).sum(0).item<double>(), 4.0);
  EXPECT_EQ(scalar_tensor(4.0).sum(-1).dim(), 0);
  // dtypes
  EXPECT_EQ(ones({2}, kInt32).sum().dtype(), kInt64);
  EXPECT_EQ(ones({2}, kUInt8).sum().dtype(), kInt64);
  EXPECT_EQ(tensor({true, true, false}).sum().item<int64_t>(), 2);
  EXPECT_EQ(tensor({true, true, false}).sum().dtype(), kInt64);
  EXPECT_EQ(ones({2}, kFloat16).sum().dtype(), kFloat16);
  EXPECT_EQ(ones({2}, kFloat32).sum(kFloat64).dtype(), kFloat64);
  EXPECT_EQ(tensor({0.5, 0.75, 2.0}).sum(kInt32).item<int64_t>(), 2);  // converted first, as PyTorch
  EXPECT_EQ(tensor({0.5, 0.75, 2.0}).sum(kInt32).dtype(), kInt32);
  Tensor h = full({4096}, 1.0f, kFloat16);
  EXPECT_EQ(h.sum().item<float>(), 4096.0f);  // accumulated in float: a float16 loop would stop at 2048
  EXPECT_EQ(h.to(kBFloat16).sum().item<float>(), 4096.0f);
}

TEST(ReduceShapes, EmptyTensors) {
  Tensor e = empty({0});
  EXPECT_EQ(e.sum().item<double>(), 0.0);
  EXPECT_EQ(zeros({0, 3}).sum(0).to_vector<float>(), (std::vector<float>{0, 0, 0}));
  EXPECT_EQ(zeros({0, 3}).sum(1).numel(), 0);
  expect_error([] { empty({0}).max(); },
               "[max] Expected reduction dim to be specified for input.numel() == 0. Specify the reduction dim with "
               "the 'dim' argument.");
  expect_error([] { empty({0}).min(); }, "[min] Expected reduction dim to be specified for input.numel() == 0.");
  expect_error([] { zeros({0, 3}).max(0); }, "[max] Expected reduction dim 0 to have non-zero size.");
  expect_error([] { zeros({0, 3}).amax({0}); }, "[amax] Expected reduction dim 0 to have non-zero size.");
  expect_error([] { zeros({0, 3}).amax(); }, "[amax] Expected reduction dim to be specified for input.numel() == 0.");
  expect_error([] { empty({0}).argmax(); }, "[argmax] Expected reduction dim to be specified for input.numel() == 0.");
  expect_error([] { zeros({0, 3}).argmin(-2); }, "[argmin] Expected reduction dim 0 to have non-zero size.");
  auto [v, i] = zeros({0, 3}).max(1);
  EXPECT_EQ(shape_of(v), std::vector<int64_t>{0});
  EXPECT_EQ(shape_of(i), std::vector<int64_t>{0});
  EXPECT_EQ(shape_of(zeros({0, 3}).amax({1})), std::vector<int64_t>{0});
}

TEST(ReduceErrors, DimsOutOfRangeAndDuplicates) {
  Tensor x = ones({2, 3});
  expect_error([&] { x.sum(2); }, "[sum] Dimension out of range (expected to be in range of [-2, 1], but got 2)");
  expect_error([&] { x.sum(-3); }, "[sum] Dimension out of range (expected to be in range of [-2, 1], but got -3)");
  expect_error([&] { x.sum({1, 1}); }, "[sum] dim 1 appears multiple times in the list of dims");
  expect_error([&] { x.sum({1, -1}); }, "[sum] dim 1 appears multiple times in the list of dims");
  expect_error([&] { x.mean({0, -2}); }, "[mean] dim 0 appears multiple times in the list of dims");
  expect_error([&] { x.max(5); }, "[max] Dimension out of range (expected to be in range of [-2, 1], but got 5)");
  expect_error([&] { x.argmax(-3); }, "[argmax] Dimension out of range");
  expect_error([&] { x.cumsum(2); }, "[cumsum] Dimension out of range");
  expect_error([&] { x.prod(2); }, "[prod] Dimension out of range");
  expect_error([&] { x.softmax(2); }, "[softmax] Dimension out of range");
  expect_error([&] { logsumexp(x, {3}); }, "[logsumexp] Dimension out of range");
  expect_error([&] { all(x, 2); }, "[all] Dimension out of range");
  expect_error([&] { scalar_tensor(1.0).sum(1); },
               "[sum] Dimension out of range (expected to be in range of [-1, 0], but got 1)");
  try {
    x.sum(2);
  } catch (const std::out_of_range&) {
  } catch (...) {
    ADD_FAILURE() << "dim out of range should throw std::out_of_range";
  }
}

TEST(ReduceAutograd, SumMeanVarStdNames) {
  Tensor x = tensor({0.3, -1.2, 2.5, 0.7, 1.1, -0.4}, kFloat64).reshape({2, 3}).requires_grad_();
  EXPECT_EQ(x.sum().grad_fn()->name(), "SumBackward0");
  EXPECT_EQ(x.sum(1).grad_fn()->name(), "SumBackward1");
  EXPECT_EQ(x.mean().grad_fn()->name(), "MeanBackward0");
  EXPECT_EQ(x.mean({1}).grad_fn()->name(), "MeanBackward1");
  EXPECT_EQ(x.var().grad_fn()->name(), "VarBackward0");
  EXPECT_EQ(x.std({1}).grad_fn()->name(), "StdBackward0");
  EXPECT_EQ(std::get<0>(var_mean(x)).grad_fn()->name(), "VarMeanBackward0");
  EXPECT_EQ(x.sum(kFloat32).dtype(), kFloat32);
  {
    NoGradGuard ng;
    EXPECT_EQ(x.sum().grad_fn(), nullptr);
  }
  // sum/mean gradients: ones / n expanded
  Tensor m = x.mean({0}, true);
  m.sum().backward();
  EXPECT_TRUE(tensors_close(x.grad(), full({2, 3}, 0.5, kFloat64), 0, 0));
  EXPECT_TRUE(autograd::gradcheck(
      [](const autograd::variable_list& in) {
        auto [v, mu] = var_mean(in[0], {1}, 1, false);
        return autograd::variable_list{in[0].sum({0}), in[0].mean(), var(in[0], {0}, 0, true), troupe::std(in[0], {1}), v, mu,
                                       in[0].std()};
      },
      {x}));
  EXPECT_TRUE(autograd::gradgradcheck(
      [](const autograd::variable_list& in) { return autograd::variable_list{troupe::std(in[0], {1}), var(in[0])}; }, {x}));
  // float32 sum's gradient into a float16 leaf comes back as float16
  Tensor h = ones({3}, kFloat16).requires_grad_();
  h.sum(kFloat32).backward();
  EXPECT_EQ(h.grad().dtype(), kFloat16);
  EXPECT_TRUE(tensors_close(h.grad(), ones({3}), 0, 0));
}
