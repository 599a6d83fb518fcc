// Elementwise ops against PyTorch: broadcasting results and gradients (broadcast.txt), every type-promotion
// record, float16/bfloat16 arithmetic (halfprec.txt), comparisons, integer ops, NaN propagation, in-place
// dtype errors, broadcasting errors, and the operators.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "common/fixtures.h"
#include "tensor/autograd.h"
#include "tensor/ops.h"

namespace {

using namespace troupe;
using troupe::testing::Fixtures;
using troupe::testing::parse_dtype_name;
using troupe::testing::tensors_close;

template <typename T = double>
std::vector<T> vals(const Tensor& t) {
  return t.to_vector<T>();
}

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "<no exception>";
}

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << "message: " << (haystack)

const double kNaN = std::numeric_limits<double>::quiet_NaN();

// ---------------------------------------------------------------- broadcast.txt

TEST(Elementwise, BroadcastingMatchesPyTorch) {
  auto fx = Fixtures::load("broadcast.txt");
  for (int i = 0; i < 5; ++i) {
    const std::string s = std::string("_").append(std::to_string(i));
    SCOPED_TRACE("pair " + std::to_string(i));
    Tensor a = fx.get("a" + s), b = fx.get("b" + s);
    EXPECT_TRUE(tensors_close(a + b, fx.get("add" + s), 1e-6, 1e-6, true));
    EXPECT_TRUE(tensors_close(add(a, b), fx.get("add" + s), 1e-6, 1e-6, true));
    EXPECT_TRUE(tensors_close(a - b, fx.get("sub" + s), 1e-6, 1e-6, true));
    EXPECT_TRUE(tensors_close(a * b, fx.get("mul" + s), 1e-6, 1e-6, true));
    EXPECT_TRUE(tensors_close(a / b, fx.get("div" + s), 1e-6, 1e-6, true));
    EXPECT_TRUE(tensors_close(maximum(a, b), fx.get("maximum" + s), 0, 0, true));
    // gradients of (a*b + a).sum()
    a.requires_grad_(true);
    b.requires_grad_(true);
    (a * b + a).sum().backward();
    ASSERT_TRUE(a.grad().defined());
    ASSERT_TRUE(b.grad().defined());
    EXPECT_TRUE(tensors_close(a.grad(), fx.get("ga" + s), 1e-5, 1e-5, true));
    EXPECT_TRUE(tensors_close(b.grad(), fx.get("gb" + s), 1e-5, 1e-5, true));
  }
}

// ---------------------------------------------------------------- promotion records

TEST(Elementwise, TypePromotionMatchesPyTorch) {
  auto fx = Fixtures::load("broadcast.txt");
  int n_tensor = 0, n_zero = 0, n_scalar = 0;
  for (const auto& name : fx.names()) {
    bool tensor_case = name.rfind("promote_", 0) == 0;
    bool zero_case = name.rfind("promote0d_", 0) == 0;
    bool scalar_case = name.rfind("promotescalar_", 0) == 0;
    if (!tensor_case && !zero_case && !scalar_case) continue;
    SCOPED_TRACE(name);
    std::string rest = name.substr(name.find('_') + 1);
    std::string lhs = rest.substr(0, rest.find('_')), rhs = rest.substr(rest.find('_') + 1);
    ScalarType a_dt = parse_dtype_name(lhs);
    auto expected = static_cast<ScalarType>(fx.ints(name).at(0));
    Tensor a = ones({2}, a_dt);
    if (scalar_case) {
      ++n_scalar;
      Scalar s = rhs == "float" ? Scalar(2.5) : Scalar(2);
      ASSERT_TRUE(rhs == "float" || rhs == "int") << rhs;
      EXPECT_EQ(result_type(a, s), expected);
      EXPECT_EQ((a * s).dtype(), expected);
      EXPECT_EQ((a + s).dtype(), expected);
      continue;
    }
    Tensor b = zero_case ? ones({}, parse_dtype_name(rhs)) : ones({2}, parse_dtype_name(rhs));
    (zero_case ? n_zero : n_tensor)++;
    EXPECT_EQ(result_type(a, b), expected);
    if (tensor_case) {
      EXPECT_EQ(promote_types(a_dt, b.dtype()), expected);
    }
    // the ops produce that dtype
    EXPECT_EQ((a + b).dtype(), expected);
    EXPECT_EQ((a * b).dtype(), expected);
    EXPECT_EQ(maximum(a, b).dtype(), expected);
    EXPECT_EQ(where(ones({2}, kBool), a, b).dtype(), expected);
    // true division gives a floating result
    ScalarType div_dt = is_floating_point(expected) ? expected : kFloat32;
    EXPECT_EQ((a / b).dtype(), div_dt);
  }
  EXPECT_EQ(n_tensor, 64);
  EXPECT_EQ(n_zero, 64);
  EXPECT_EQ(n_scalar, 16);
}

// ---------------------------------------------------------------- half precision

// Bitwise equality of two 16-bit float tensors.
::testing::AssertionResult same_bits(const Tensor& actual, const Tensor& expected) {
  if (actual.dtype() != expected.dtype())
    return ::testing::AssertionFailure() << "dtype " << actual.dtype() << " vs " << expected.dtype();
  if (!actual.sizes().equals(expected.sizes())) return ::testing::AssertionFailure() << "shapes differ";
  Tensor a = actual.contiguous(), e = expected.contiguous();
  const uint16_t* p = static_cast<const uint16_t*>(a.data_ptr());
  const uint16_t* q = static_cast<const uint16_t*>(e.data_ptr());
  int bad = 0;
  std::ostringstream os;
  for (int64_t i = 0; i < a.numel(); ++i) {
    if (p[i] != q[i]) {
      if (bad++ < 5) os << " [" << i << "] 0x" << std::hex << p[i] << " vs 0x" << q[i] << std::dec;
    }
  }
  if (bad) return ::testing::AssertionFailure() << bad << " elements differ:" << os.str();
  return ::testing::AssertionSuccess();
}

TEST(Elementwise, HalfAndBFloat16ArithmeticMatchesPyTorch) {
  auto fx = Fixtures::load("halfprec.txt");
  Tensor ha = fx.get("h_a"), hb = fx.get("h_b");
  ASSERT_EQ(ha.dtype(), kFloat16);
  // each element is computed in float and rounded once: bit-exact
  EXPECT_TRUE(same_bits(ha + hb, fx.get("h_add")));
  EXPECT_TRUE(same_bits(ha * hb, fx.get("h_mul")));
  EXPECT_TRUE(same_bits(ha / hb, fx.get("h_div")));
  // exp's float result may differ by an ulp of float between libms: within one float16 ulp
  EXPECT_TRUE(tensors_close(exp(ha), fx.get("h_exp"), 1e-3, 0, true));
  // a sum depends on the order of accumulation: within one ulp of the result
  EXPECT_TRUE(tensors_close(ha.sum(), fx.get("h_sum"), 0, 2e-3, true));

  Tensor ba = fx.get("bf_a"), bb = fx.get("bf_b");
  ASSERT_EQ(ba.dtype(), kBFloat16);
  EXPECT_TRUE(same_bits(ba + bb, fx.get("bf_add")));
  EXPECT_TRUE(same_bits(ba * bb, fx.get("bf_mul")));
  EXPECT_TRUE(same_bits(ba / bb, fx.get("bf_div")));
  EXPECT_TRUE(tensors_close(exp(ba), fx.get("bf_exp"), 8e-3, 0, true));
  EXPECT_TRUE(tensors_close(ba.sum(), fx.get("bf_sum"), 0, 1.6e-2, true));

  // mixing float16 and bfloat16 computes in float32
  EXPECT_EQ((ha + ba).dtype(), kFloat32);
  EXPECT_TRUE(tensors_close(ha + ba, ha.to(kFloat32) + ba.to(kFloat32), 0, 0, true));
  // a float scalar keeps the 16-bit dtype
  EXPECT_EQ((ha * 0.5).dtype(), kFloat16);
  EXPECT_TRUE(same_bits(ha * 0.5, (ha.to(kFloat32) * 0.5).to(kFloat16)));
}

// ---------------------------------------------------------------- comparisons

TEST(Elementwise, ComparisonsGiveBool) {
  Tensor a = tensor({1.0, 2.0, 3.0});
  Tensor b = tensor({3.0, 2.0, 1.0});
  EXPECT_EQ((a < b).dtype(), kBool);
  EXPECT_EQ(vals<bool>(a < b), (std::vector<bool>{true, false, false}));
  EXPECT_EQ(vals<bool>(a <= b), (std::vector<bool>{true, true, false}));
  EXPECT_EQ(vals<bool>(a > b), (std::vector<bool>{false, false, true}));
  EXPECT_EQ(vals<bool>(a >= b), (std::vector<bool>{false, true, true}));
  EXPECT_EQ(vals<bool>(a == b), (std::vector<bool>{false, true, false}));
  EXPECT_EQ(vals<bool>(a != b), (std::vector<bool>{true, false, true}));
  EXPECT_EQ(vals<bool>(a > 1.5), (std::vector<bool>{false, true, true}));
  EXPECT_EQ(vals<bool>(a == 2), (std::vector<bool>{false, true, false}));
  EXPECT_EQ(vals<bool>(eq(a, b)), vals<bool>(a == b));
  EXPECT_EQ(vals<bool>(a.lt(b)), vals<bool>(a < b));
  // mixed dtypes compare by value in the promoted dtype
  Tensor i = tensor({1, 2, 3});
  EXPECT_EQ(vals<bool>(i < 1.5), (std::vector<bool>{true, false, false}));
  EXPECT_EQ(vals<bool>(i == a), (std::vector<bool>{true, true, true}));
  // broadcasting
  Tensor c = tensor({2.0}).view({1, 1}) < a.view({3, 1});
  EXPECT_EQ(c.sizes().vec(), (std::vector<int64_t>{3, 1}));
  // NaN compares unequal to everything, itself included
  Tensor n = tensor({kNaN});
  EXPECT_EQ(vals<bool>(n == n), (std::vector<bool>{false}));
  EXPECT_EQ(vals<bool>(n != n), (std::vector<bool>{true}));
  EXPECT_EQ(vals<bool>(isnan(n)), (std::vector<bool>{true}));
  // comparisons record no gradient
  Tensor g = tensor({1.0}).requires_grad_(true);
  EXPECT_FALSE((g > 0.0).requires_grad());
}

// ---------------------------------------------------------------- integers

TEST(Elementwise, IntegerOps) {
  Tensor x = tensor({1, 2, 7});  // int64
  EXPECT_EQ((x + x).dtype(), kInt64);
  EXPECT_EQ(vals<int64_t>(x * 3), (std::vector<int64_t>{3, 6, 21}));
  EXPECT_EQ((x * 3).dtype(), kInt64);
  EXPECT_EQ((x - 1).dtype(), kInt64);
  EXPECT_EQ((x * 2.5).dtype(), kFloat32);  // a float scalar: the default dtype
  EXPECT_EQ(vals(x * 2.5), (std::vector<double>{2.5, 5, 17.5}));
  // true division promotes to float
  Tensor d = x / 2;
  EXPECT_EQ(d.dtype(), kFloat32);
  EXPECT_EQ(vals(d), (std::vector<double>{0.5, 1, 3.5}));
  Tensor dd = x / tensor({2, 2, 2});
  EXPECT_EQ(dd.dtype(), kFloat32);
  EXPECT_EQ(vals(dd), (std::vector<double>{0.5, 1, 3.5}));
  EXPECT_EQ((tensor(std::vector<int32_t>{1}, kInt32) / tensor(std::vector<int32_t>{4}, kInt32)).dtype(), kFloat32);
  // mixed integer widths
  Tensor i32 = tensor(std::vector<int32_t>{1, 2, 3}, kInt32);
  EXPECT_EQ((i32 + x).dtype(), kInt64);
  EXPECT_EQ((i32 + 1).dtype(), kInt32);  // an int scalar keeps the tensor's dtype
  Tensor u8 = tensor(std::vector<uint8_t>{250, 3});
  EXPECT_EQ((u8 + 10).dtype(), kUInt8);
  EXPECT_EQ(vals<int64_t>(u8 + 10), (std::vector<int64_t>{4, 13}));  // wraps like uint8
  Tensor bl = tensor({true, false});
  EXPECT_EQ((bl + 1).dtype(), kInt64);  // bool with an int scalar: int64
  EXPECT_EQ((bl + bl).dtype(), kBool);
  // unary ops keep integer dtypes, float-only ones promote
  EXPECT_EQ(neg(x).dtype(), kInt64);
  EXPECT_EQ(vals<int64_t>(abs(tensor({-3, 4}))), (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(exp(x).dtype(), kFloat32);
  EXPECT_EQ(sqrt(tensor({4})).dtype(), kFloat32);
  EXPECT_EQ(vals(sqrt(tensor({4, 9}))), (std::vector<double>{2, 3}));
  EXPECT_EQ(vals<int64_t>(pow(x, 2)), (std::vector<int64_t>{1, 4, 49}));
  EXPECT_EQ(pow(x, 2).dtype(), kInt64);
  EXPECT_THROW(pow(x, -1), std::invalid_argument);
  EXPECT_EQ(vals<int64_t>(maximum(x, tensor({3, 0, 9}))), (std::vector<int64_t>{3, 2, 9}));
  EXPECT_EQ(vals<int64_t>(clamp(x, 2, 5)), (std::vector<int64_t>{2, 2, 5}));
  EXPECT_EQ(clamp(x, 2, 5).dtype(), kInt64);
  // bool negation and subtraction are refused with PyTorch's advice
  EXPECT_CONTAINS(error_of([&] { -bl; }), "logical_not");
  EXPECT_CONTAINS(error_of([&] { bl - bl; }), "logical_xor");
}

// ---------------------------------------------------------------- NaN

TEST(Elementwise, NaNPropagates) {
  Tensor a = tensor(std::vector<double>{kNaN, 1.0, kNaN, -2.0}, kFloat64);
  Tensor b = tensor(std::vector<double>{0.0, kNaN, kNaN, 3.0}, kFloat64);
  auto mx = vals(maximum(a, b));
  EXPECT_TRUE(std::isnan(mx[0]));
  EXPECT_TRUE(std::isnan(mx[1]));
  EXPECT_TRUE(std::isnan(mx[2]));
  EXPECT_EQ(mx[3], 3.0);
  auto mn = vals(minimum(a, b));
  EXPECT_TRUE(std::isnan(mn[0]));
  EXPECT_TRUE(std::isnan(mn[1]));
  EXPECT_TRUE(std::isnan(mn[2]));
  EXPECT_EQ(mn[3], -2.0);
  auto cl = vals(clamp(a, -1.0, 1.0));
  EXPECT_TRUE(std::isnan(cl[0]));
  EXPECT_EQ(cl[1], 1.0);
  EXPECT_EQ(cl[3], -1.0);
  EXPECT_TRUE(std::isnan(vals(clamp_min(a, 0.0))[0]));
  EXPECT_TRUE(std::isnan(vals(clamp_max(a, 0.0))[0]));
  auto r = vals(relu(a));
  EXPECT_TRUE(std::isnan(r[0]));
  EXPECT_EQ(r[3], 0.0);
  // float32 and float16 too
  EXPECT_TRUE(std::isnan(vals(maximum(a.to(kFloat32), b.to(kFloat32)))[1]));
  EXPECT_TRUE(std::isnan(vals(relu(a.to(kFloat16)))[0]));
  EXPECT_TRUE(std::isnan(vals(a + 1.0)[0]));
}

// ---------------------------------------------------------------- errors

TEST(Elementwise, InPlaceResultTypeMustFitTheTensor) {
  Tensor i = tensor({1, 2});  // int64
  auto check = [](const std::string& msg, const char* from, const char* to, const char* from_legacy,
                  const char* to_legacy) {
    bool has_from = msg.find(from) != std::string::npos || msg.find(from_legacy) != std::string::npos;
    bool has_to = msg.find(to) != std::string::npos || msg.find(to_legacy) != std::string::npos;
    EXPECT_TRUE(has_from && has_to) << "message: " << msg;
    EXPECT_NE(msg.find("can't be cast"), std::string::npos) << "message: " << msg;
  };
  check(error_of([&] { i.add_(1.5); }), "float32", "int64", "Float", "Long");
  check(error_of([&] { i.add_(tensor({0.5, 0.5})); }), "float32", "int64", "Float", "Long");
  check(error_of([&] { i.mul_(tensor(std::vector<double>{2.0, 2.0}, kFloat64)); }), "float64", "int64", "Double", "Long");
  check(error_of([&] { i.div_(2); }), "float32", "int64", "Float", "Long");
  Tensor b = tensor({true, false});
  check(error_of([&] { b.add_(tensor({1, 1})); }), "int64", "bool", "Long", "Bool");
  EXPECT_EQ(vals<int64_t>(i), (std::vector<int64_t>{1, 2}));  // unchanged
  // allowed: a lower type into a higher one
  Tensor f = tensor({1.0, 2.0});
  f.add_(tensor({1, 1}));
  EXPECT_EQ(vals(f), (std::vector<double>{2, 3}));
  i.add_(tensor({true, true}));
  EXPECT_EQ(vals<int64_t>(i), (std::vector<int64_t>{2, 3}));
  Tensor h = tensor({1.0, 2.0}, kFloat16);
  h.mul_(tensor(std::vector<double>{0.5, 0.5}, kFloat64));  // float64 result cast into float16
  EXPECT_EQ(h.dtype(), kFloat16);
  EXPECT_EQ(vals(h), (std::vector<double>{0.5, 1}));
  // the broadcast shape must be the tensor's own
  EXPECT_CONTAINS(error_of([&] { f.add_(ones({2, 2})); }), "doesn't match the broadcast shape");
}

TEST(Elementwise, BroadcastingErrorNamesBothShapes) {
  std::string msg = error_of([] { zeros({2, 3}) + zeros({4}); });
  EXPECT_CONTAINS(msg, "(2, 3)");
  EXPECT_CONTAINS(msg, "(4)");
  EXPECT_CONTAINS(msg, "[add]");
  msg = error_of([] { mul(zeros({5, 1, 3}), zeros({2, 2})); });
  EXPECT_CONTAINS(msg, "(5, 1, 3)");
  EXPECT_CONTAINS(msg, "(2, 2)");
  EXPECT_CONTAINS(error_of([] { maximum(zeros({3}), zeros({2})); }), "not broadcastable");
  EXPECT_THROW(where(zeros({3}, kBool), zeros({3}), zeros({2})), std::invalid_argument);
}

// ---------------------------------------------------------------- operators

TEST(Elementwise, Operators) {
  Tensor a = tensor({1.0, 2.0, 4.0});
  Tensor b = tensor({2.0, 2.0, 8.0});
  EXPECT_EQ(vals(a + b), (std::vector<double>{3, 4, 12}));
  EXPECT_EQ(vals(a - b), (std::vector<double>{-1, 0, -4}));
  EXPECT_EQ(vals(a * b), (std::vector<double>{2, 4, 32}));
  EXPECT_EQ(vals(a / b), (std::vector<double>{0.5, 1, 0.5}));
  EXPECT_EQ(vals(-a), (std::vector<double>{-1, -2, -4}));
  EXPECT_EQ(vals(a + 1), (std::vector<double>{2, 3, 5}));
  EXPECT_EQ(vals(1 + a), (std::vector<double>{2, 3, 5}));
  EXPECT_EQ(vals(a - 1), (std::vector<double>{0, 1, 3}));
  EXPECT_EQ(vals(10 - a), (std::vector<double>{9, 8, 6}));
  EXPECT_EQ(vals(a * 0.5), (std::vector<double>{0.5, 1, 2}));
  EXPECT_EQ(vals(0.5 * a), (std::vector<double>{0.5, 1, 2}));
  EXPECT_EQ(vals(a / 2), (std::vector<double>{0.5, 1, 2}));
  EXPECT_EQ(vals(8 / a), (std::vector<double>{8, 4, 2}));
  EXPECT_EQ(vals(add(a, b, 2)), (std::vector<double>{5, 6, 20}));
  EXPECT_EQ(vals(sub(a, b, 0.5)), (std::vector<double>{0, 1, 0}));
  EXPECT_EQ(vals(a.pow(2)), (std::vector<double>{1, 4, 16}));
  EXPECT_EQ(vals(pow(2, a)), (std::vector<double>{2, 4, 16}));
  EXPECT_EQ(vals(pow(a, b)), (std::vector<double>{1, 4, 65536}));

  Tensor c = a.clone();
  c += b;
  EXPECT_EQ(vals(c), (std::vector<double>{3, 4, 12}));
  c -= 1;
  EXPECT_EQ(vals(c), (std::vector<double>{2, 3, 11}));
  c *= b;
  EXPECT_EQ(vals(c), (std::vector<double>{4, 6, 88}));
  c /= 2;
  EXPECT_EQ(vals(c), (std::vector<double>{2, 3, 44}));
  c -= b;
  EXPECT_EQ(vals(c), (std::vector<double>{0, 1, 36}));
  c *= 0.5;
  EXPECT_EQ(vals(c), (std::vector<double>{0, 0.5, 18}));
  c /= b;
  EXPECT_EQ(vals(c), (std::vector<double>{0, 0.25, 2.25}));
  c += 1;
  EXPECT_EQ(vals(c), (std::vector<double>{1, 1.25, 3.25}));
  Tensor& ref = (c += 1);
  EXPECT_TRUE(ref.is_same(c));
  EXPECT_EQ(vals(a), (std::vector<double>{1, 2, 4}));  // untouched
}

TEST(Elementwise, UnaryValues) {
  Tensor x = tensor(std::vector<double>{-1.5, -0.5, 0.5, 2.0}, kFloat64);
  auto close = [](const Tensor& t, std::vector<double> e) {
    return tensors_close(t, tensor(e, kFloat64), 1e-12, 1e-12);
  };
  EXPECT_TRUE(close(relu(x), {0, 0, 0.5, 2}));
  EXPECT_TRUE(close(abs(x), {1.5, 0.5, 0.5, 2}));
  EXPECT_TRUE(close(sign(x), {-1, -1, 1, 1}));
  EXPECT_TRUE(close(square(x), {2.25, 0.25, 0.25, 4}));
  EXPECT_TRUE(close(reciprocal(x), {-1 / 1.5, -2, 2, 0.5}));
  EXPECT_TRUE(close(leaky_relu(x, 0.1), {-0.15, -0.05, 0.5, 2}));
  EXPECT_TRUE(close(elu(x), {std::expm1(-1.5), std::expm1(-0.5), 0.5, 2}));
  EXPECT_TRUE(close(sigmoid(x), {1 / (1 + std::exp(1.5)), 1 / (1 + std::exp(0.5)), 1 / (1 + std::exp(-0.5)),
                                 1 / (1 + std::exp(-2.0))}));
  EXPECT_TRUE(close(silu(x), {-1.5 / (1 + std::exp(1.5)), -0.5 / (1 + std::exp(0.5)), 0.5 / (1 + std::exp(-0.5)),
                              2 / (1 + std::exp(-2.0))}));
  EXPECT_TRUE(close(gelu(x), {-1.5 * 0.5 * (1 + std::erf(-1.5 / std::sqrt(2.0))), -0.5 * 0.5 * (1 + std::erf(-0.5 / std::sqrt(2.0))),
                              0.5 * 0.5 * (1 + std::erf(0.5 / std::sqrt(2.0))), 2 * 0.5 * (1 + std::erf(2 / std::sqrt(2.0)))}));
  EXPECT_TRUE(close(softplus(x), {std::log1p(std::exp(-1.5)), std::log1p(std::exp(-0.5)), std::log1p(std::exp(0.5)),
                                  std::log1p(std::exp(2.0))}));
  EXPECT_TRUE(close(softplus(x, 1, 1), {std::log1p(std::exp(-1.5)), std::log1p(std::exp(-0.5)),
                                        std::log1p(std::exp(0.5)), 2}));  // linear above the threshold
  EXPECT_TRUE(close(lerp(x, zeros({4}, kFloat64), 0.25), {-1.125, -0.375, 0.375, 1.5}));
  EXPECT_TRUE(close(erf(x), {std::erf(-1.5), std::erf(-0.5), std::erf(0.5), std::erf(2.0)}));
  EXPECT_TRUE(close(masked_fill(x, x < 0.0, 9.0), {9, 9, 0.5, 2}));
  EXPECT_TRUE(close(where(x > 0.0, x, 0.0), {0, 0, 0.5, 2}));
}

}  // namespace
