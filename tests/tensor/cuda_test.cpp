// The CUDA backend: copies (round trips, dtype conversion, strided), fill, elementwise ops with
// broadcasting, reductions, matmul (cuBLAS) and autograd through CUDA tensors, each compared with the
// CPU backend. Every test that needs a device skips without one; CudaNoDevice checks the error a
// CPU-only build or a host without a GPU gives.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "common/fixtures.h"
#include "tensor/autograd.h"
#include "tensor/backend.h"
#include "tensor/ops.h"
#ifdef TROUPE_WITH_CUDA
#include "tensor/cuda/cuda_backend.h"
#endif

using namespace troupe;
using troupe::testing::tensors_close;

#define TROUPE_REQUIRE_CUDA() \
  if (!troupe::cuda::is_available()) GTEST_SKIP() << "no CUDA device"

namespace {

const std::vector<ScalarType> kAllDtypes = {kBool, kUInt8, kInt32, kInt64, kFloat16, kBFloat16, kFloat32, kFloat64};
const std::vector<ScalarType> kFloatDtypes = {kFloat16, kBFloat16, kFloat32, kFloat64};

template <typename F>
void expect_error(F&& f, const std::string& sub) {
  try {
    f();
    ADD_FAILURE() << "expected an exception containing: " << sub;
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find(sub), std::string::npos) << "message: " << e.what() << "\nwanted: " << sub;
  }
}

/// Deterministic CPU values of dtype `dt`: normal floats, small integers (non-negative for uint8), 0/1 for bool.
Tensor sample(ScalarType dt, std::vector<int64_t> sizes, uint64_t seed) {
  manual_seed(seed);
  switch (dt) {
    case kBool: return randint(0, 2, sizes).to(kBool);
    case kUInt8: return randint(0, 256, sizes).to(kUInt8);
    case kInt32: return randint(-1000, 1000, sizes).to(kInt32);
    case kInt64: return randint(-100000, 100000, sizes);
    default: return randn(sizes).mul(3.0).to(dt);
  }
}

/// Values in [0, 100) (with fractions), safe to convert to every dtype including uint8.
Tensor nonnegative(ScalarType dt, std::vector<int64_t> sizes, uint64_t seed) {
  manual_seed(seed);
  return rand(sizes, TensorOptions().dtype(kFloat64)).mul(100.0).to(dt);
}

/// Byte equality of two CPU tensors (compared contiguous).
::testing::AssertionResult same_bytes(const Tensor& a, const Tensor& b) {
  if (!a.is_cpu() || !b.is_cpu()) return ::testing::AssertionFailure() << "not CPU tensors";
  if (a.dtype() != b.dtype()) return ::testing::AssertionFailure() << "dtypes differ";
  if (!a.sizes().equals(b.sizes()))
    return ::testing::AssertionFailure() << "shapes differ: " << shape_str(a.sizes()) << " vs " << shape_str(b.sizes());
  Tensor ca = a.contiguous(), cb = b.contiguous();
  if (ca.nbytes() && std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) != 0)
    return ::testing::AssertionFailure() << "bytes differ";
  return ::testing::AssertionSuccess();
}

/// Tolerances for comparing a CUDA result with the CPU's.
double rtol_for(ScalarType dt) {
  switch (dt) {
    case kFloat16: return 2e-3;
    case kBFloat16: return 1.6e-2;
    case kFloat32: return 1e-5;
    case kFloat64: return 1e-12;
    default: return 0;
  }
}
double atol_for(ScalarType dt) {
  switch (dt) {
    case kFloat16: return 1e-3;
    case kBFloat16: return 1e-2;
    case kFloat32: return 1e-5;
    case kFloat64: return 1e-12;
    default: return 0;
  }
}

}  // namespace

// ---------------------------------------------------------------- without a device

TEST(CudaNoDevice, CudaTensorThrowsClearMessage) {
  if (cuda::is_available()) GTEST_SKIP() << "a CUDA device is present";
  EXPECT_EQ(cuda::device_count(), 0);
  Tensor x = ones({2, 3});
  expect_error([&] { (void)x.cuda(); }, "CUDA");
  expect_error([&] { (void)empty({4}, TensorOptions().device(Device(kCUDA))); }, "CUDA");
  expect_error([&] { (void)zeros({2}, TensorOptions().device(Device("cuda:0"))); }, "CUDA");
  // the failure leaves the CPU side usable
  EXPECT_TRUE(tensors_close(x + x, full({2, 3}, 2.0), 0, 0));
}

// ---------------------------------------------------------------- device and memory

TEST(CudaDevice, AvailableMeansDevicesAndBackend) {
  TROUPE_REQUIRE_CUDA();
  EXPECT_GT(cuda::device_count(), 0);
  EXPECT_TRUE(has_backend(kCUDA));
  EXPECT_EQ(backend(kCUDA).name(), "cuda");
  Tensor y = ones({3}).cuda();
  EXPECT_TRUE(y.is_cuda());
  EXPECT_EQ(y.device().index, 0);
  expect_error([&] { (void)ones({3}).cuda(cuda::device_count()); }, "out of range");
}

TEST(CudaDevice, CachingAllocatorReusesBlocks) {
  TROUPE_REQUIRE_CUDA();
#ifdef TROUPE_WITH_CUDA
  cuda::empty_cache();  // so that the next block of this size is the one freed below
  void* p = nullptr;
  {
    Tensor a = empty({1000, 1000}, TensorOptions().device(Device(kCUDA, 0)));
    p = a.data_ptr();
  }
  EXPECT_GE(cuda::cached_bytes(), size_t(4000000));
  Tensor b = empty({1000, 1000}, TensorOptions().device(Device(kCUDA, 0)));
  EXPECT_EQ(b.data_ptr(), p);  // the freed block came back
  b = Tensor();
  cuda::empty_cache();
  EXPECT_EQ(cuda::cached_bytes(), size_t(0));
  cuda::synchronize();
#endif
}

// ---------------------------------------------------------------- copies

TEST(CudaCopy, RoundTripIsExactForEveryDtype) {
  TROUPE_REQUIRE_CUDA();
  for (ScalarType dt : kAllDtypes) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor x = sample(dt, {3, 5, 7}, 1);
    Tensor y = x.cuda();
    EXPECT_TRUE(y.is_cuda());
    EXPECT_EQ(y.dtype(), dt);
    EXPECT_TRUE(same_bytes(y.cpu(), x));
    // non-contiguous source, 0-dim and empty tensors
    EXPECT_TRUE(same_bytes(x.transpose(0, 2).cuda().cpu(), x.transpose(0, 2).contiguous()));
    Tensor s = x.flatten().select(0, 4);
    EXPECT_TRUE(same_bytes(s.cuda().cpu(), s.contiguous()));
    Tensor e = empty({0, 3}, TensorOptions().dtype(dt));
    EXPECT_EQ(e.cuda().cpu().numel(), 0);
  }
  // special values keep their bits (the copy is a byte copy)
  Tensor sp = tensor({0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e-40f, 65504.0f, 1e-7f, -3.5f});
  for (ScalarType dt : kFloatDtypes) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor x = sp.to(dt);
    EXPECT_TRUE(same_bytes(x.cuda().cpu(), x));
  }
}

TEST(CudaCopy, DtypeConversionOnDeviceMatchesCpu) {
  TROUPE_REQUIRE_CUDA();
  for (ScalarType src : kAllDtypes)
    for (ScalarType dst : kAllDtypes) {
      SCOPED_TRACE(std::string(dtype_name(src)) + " -> " + dtype_name(dst));
      Tensor x = nonnegative(src, {4, 33}, 2);
      Tensor expected = x.to(dst);
      Tensor actual = x.cuda().to(dst);
      EXPECT_TRUE(actual.is_cuda());
      EXPECT_TRUE(tensors_close(actual.cpu(), expected, 0, 0, true));
      // strided source with conversion
      EXPECT_TRUE(tensors_close(x.cuda().t().to(dst).cpu(), expected.t(), 0, 0, true));
    }
  // negative floats to signed integers truncate toward zero
  Tensor f = tensor({-2.7, -0.5, 0.5, 2.7, -1e3});
  EXPECT_TRUE(tensors_close(f.cuda().to(kInt64).cpu(), tensor({-2, 0, 0, 2, -1000}).to(kInt64), 0, 0, true));
}

TEST(CudaCopy, StridedCopiesAndInPlaceCopy) {
  TROUPE_REQUIRE_CUDA();
  Tensor x = sample(kFloat32, {4, 5, 6}, 3);
  Tensor g = x.cuda();
  EXPECT_TRUE(same_bytes(g.permute({2, 0, 1}).contiguous().cpu(), x.permute({2, 0, 1}).contiguous()));
  EXPECT_TRUE(same_bytes(slice(g, 1, 0, 5, 2).contiguous().cpu(), slice(x, 1, 0, 5, 2).contiguous()));
  EXPECT_TRUE(same_bytes(g.select(2, 3).expand({3, 4, 5}).contiguous().cpu(),
                         x.select(2, 3).expand({3, 4, 5}).contiguous()));
  // copy_ into a strided destination, from the device and from the host
  Tensor d = zeros({6, 4}, TensorOptions().device(Device(kCUDA, 0)));
  Tensor src = sample(kFloat32, {4, 6}, 4);
  d.t().copy_(src.cuda());
  EXPECT_TRUE(same_bytes(d.cpu(), src.t().contiguous()));
  Tensor d2 = zeros({6, 4}, TensorOptions().device(Device(kCUDA, 0)));
  d2.t().copy_(src);  // host source
  EXPECT_TRUE(same_bytes(d2.cpu(), src.t().contiguous()));
  // clone keeps the device
  Tensor c = g.clone();
  EXPECT_TRUE(c.is_cuda());
  EXPECT_TRUE(same_bytes(c.cpu(), x));
}

TEST(CudaCopy, TooManyUnmergeableDimsThrowClearly) {
  TROUPE_REQUIRE_CUDA();
  std::vector<int64_t> sizes(9, 2), perm;
  for (int64_t d = 8; d >= 0; --d) perm.push_back(d);
  Tensor g = ones(sizes).cuda().permute(perm);  // reversed: no two dims merge
  expect_error([&] { (void)g.contiguous(); }, "at most 8 dimensions");
  // 9 dims that merge are fine
  EXPECT_TRUE(tensors_close(ones(sizes).cuda().contiguous().cpu(), ones(sizes), 0, 0));
}

TEST(CudaCopy, FactoriesAndFill) {
  TROUPE_REQUIRE_CUDA();
  const TensorOptions on = TensorOptions().device(Device(kCUDA, 0));
  for (ScalarType dt : kAllDtypes) {
    SCOPED_TRACE(dtype_name(dt));
    EXPECT_TRUE(same_bytes(zeros({3, 4}, on.dtype(dt)).cpu(), zeros({3, 4}, TensorOptions().dtype(dt))));
    EXPECT_TRUE(same_bytes(ones({3, 4}, on.dtype(dt)).cpu(), ones({3, 4}, TensorOptions().dtype(dt))));
    Scalar v = dt == kBool ? Scalar(true) : is_floating_point(dt) ? Scalar(-2.25) : Scalar(int64_t(7));
    EXPECT_TRUE(same_bytes(full({5}, v, on.dtype(dt)).cpu(), full({5}, v, TensorOptions().dtype(dt))));
  }
  // fill_ through a strided view
  Tensor g = zeros({4, 6}, on);
  g.t().select(0, 2).fill_(5.0);
  Tensor h = zeros({4, 6});
  h.t().select(0, 2).fill_(5.0);
  EXPECT_TRUE(same_bytes(g.cpu(), h));
}

// ---------------------------------------------------------------- elementwise

TEST(CudaElementwise, UnaryOpsMatchCpu) {
  TROUPE_REQUIRE_CUDA();
  using Fn = std::function<Tensor(const Tensor&)>;
  const std::vector<std::pair<std::string, Fn>> any_sign = {
      {"neg", [](const Tensor& x) { return neg(x); }},
      {"abs", [](const Tensor& x) { return abs(x); }},
      {"exp", [](const Tensor& x) { return exp(x); }},
      {"sin", [](const Tensor& x) { return sin(x); }},
      {"cos", [](const Tensor& x) { return cos(x); }},
      {"tanh", [](const Tensor& x) { return tanh(x); }},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }},
      {"relu", [](const Tensor& x) { return relu(x); }},
      {"gelu", [](const Tensor& x) { return gelu(x); }},
      {"gelu_tanh", [](const Tensor& x) { return gelu(x, "tanh"); }},
      {"silu", [](const Tensor& x) { return silu(x); }},
      {"sign", [](const Tensor& x) { return sign(x); }},
      {"square", [](const Tensor& x) { return square(x); }},
      {"erf", [](const Tensor& x) { return erf(x); }},
      {"softplus", [](const Tensor& x) { return softplus(x, 2.0, 3.0); }},
      {"leaky_relu", [](const Tensor& x) { return leaky_relu(x, 0.1); }},
      {"elu", [](const Tensor& x) { return elu(x, 0.7); }},
      {"pow3", [](const Tensor& x) { return pow(x, 3); }},
      {"rpow", [](const Tensor& x) { return pow(Scalar(1.5), x); }},
      {"clamp", [](const Tensor& x) { return clamp(x, Scalar(-1.0), Scalar(0.5)); }},
  };
  const std::vector<std::pair<std::string, Fn>> positive = {
      {"log", [](const Tensor& x) { return log(x); }},
      {"log1p", [](const Tensor& x) { return log1p(x); }},
      {"sqrt", [](const Tensor& x) { return sqrt(x); }},
      {"rsqrt", [](const Tensor& x) { return rsqrt(x); }},
      {"reciprocal", [](const Tensor& x) { return reciprocal(x); }},
      {"pow2.5", [](const Tensor& x) { return pow(x, 2.5); }},
  };
  for (ScalarType dt : kFloatDtypes) {
    Tensor x = sample(dt, {7, 9}, 5).t();  // strided input
    Tensor p = abs(sample(dt, {7, 9}, 6)).add(0.1);
    for (const auto& [name, f] : any_sign) {
      SCOPED_TRACE(name + " " + dtype_name(dt));
      EXPECT_TRUE(tensors_close(f(x.cuda()).cpu(), f(x), rtol_for(dt), atol_for(dt), true));
    }
    for (const auto& [name, f] : positive) {
      SCOPED_TRACE(name + " " + dtype_name(dt));
      EXPECT_TRUE(tensors_close(f(p.cuda()).cpu(), f(p), rtol_for(dt), atol_for(dt), true));
    }
  }
  // integer unary ops
  for (ScalarType dt : {kInt32, kInt64}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor x = sample(dt, {50}, 7);
    EXPECT_TRUE(tensors_close(neg(x.cuda()).cpu(), neg(x), 0, 0, true));
    EXPECT_TRUE(tensors_close(abs(x.cuda()).cpu(), abs(x), 0, 0, true));
    EXPECT_TRUE(tensors_close(sign(x.cuda()).cpu(), sign(x), 0, 0, true));
    EXPECT_TRUE(tensors_close(square(x.cuda()).cpu(), square(x), 0, 0, true));
    EXPECT_TRUE(tensors_close(pow(x.cuda(), 2).cpu(), pow(x, 2), 0, 0, true));
  }
  // predicates
  Tensor sp = tensor({0.0f, -1.0f, INFINITY, -INFINITY, NAN, 2.0f});
  for (ScalarType dt : kFloatDtypes) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor x = sp.to(dt);
    EXPECT_TRUE(same_bytes(isnan(x.cuda()).cpu(), isnan(x)));
    EXPECT_TRUE(same_bytes(isinf(x.cuda()).cpu(), isinf(x)));
    EXPECT_TRUE(same_bytes(isfinite(x.cuda()).cpu(), isfinite(x)));
    EXPECT_TRUE(same_bytes(logical_not(x.cuda()).cpu(), logical_not(x)));
  }
}

TEST(CudaElementwise, BinaryOpsWithBroadcastingMatchCpu) {
  TROUPE_REQUIRE_CUDA();
  using Fn = std::function<Tensor(const Tensor&, const Tensor&)>;
  const std::vector<std::pair<std::string, Fn>> ops = {
      {"add", [](const Tensor& a, const Tensor& b) { return add(a, b); }},
      {"add_alpha", [](const Tensor& a, const Tensor& b) { return add(a, b, 2); }},
      {"sub", [](const Tensor& a, const Tensor& b) { return sub(a, b); }},
      {"mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); }},
      {"maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); }},
      {"minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); }},
      {"eq", [](const Tensor& a, const Tensor& b) { return eq(a, b); }},
      {"ne", [](const Tensor& a, const Tensor& b) { return ne(a, b); }},
      {"lt", [](const Tensor& a, const Tensor& b) { return lt(a, b); }},
      {"le", [](const Tensor& a, const Tensor& b) { return le(a, b); }},
      {"gt", [](const Tensor& a, const Tensor& b) { return gt(a, b); }},
      {"ge", [](const Tensor& a, const Tensor& b) { return ge(a, b); }},
      {"logical_and", [](const Tensor& a, const Tensor& b) { return logical_and(a, b); }},
      {"logical_or", [](const Tensor& a, const Tensor& b) { return logical_or(a, b); }},
  };
  for (ScalarType dt : {kFloat32, kFloat64, kFloat16, kBFloat16, kInt64, kInt32}) {
    // (3, 1, 4) with (5, 1): broadcast to (3, 5, 4); small integers give some equal pairs for the comparisons
    manual_seed(8);
    Tensor a = randint(-4, 5, {3, 1, 4}).to(dt);
    Tensor b = randint(-4, 5, {5, 1}).to(dt);
    for (const auto& [name, f] : ops) {
      SCOPED_TRACE(name + " " + dtype_name(dt));
      EXPECT_TRUE(tensors_close(f(a.cuda(), b.cuda()).cpu(), f(a, b), rtol_for(dt), atol_for(dt), true));
      EXPECT_TRUE(tensors_close(f(b.cuda(), a.cuda()).cpu(), f(b, a), rtol_for(dt), atol_for(dt), true));
    }
    SCOPED_TRACE(dtype_name(dt));
    // division (true division for integers) and powers of positive bases
    Tensor bn = add(abs(b), 1);
    EXPECT_TRUE(tensors_close(div(a.cuda(), bn.cuda()).cpu(), div(a, bn), rtol_for(dt), atol_for(dt), true));
    if (is_floating_point(dt)) {
      Tensor pa = add(abs(a), 0.5);
      Tensor pb = div(b, 4);
      EXPECT_TRUE(tensors_close(pow(pa.cuda(), pb.cuda()).cpu(), pow(pa, pb), rtol_for(dt), atol_for(dt), true));
    }
    // scalars
    EXPECT_TRUE(tensors_close(mul(a.cuda(), 3).cpu(), mul(a, 3), rtol_for(dt), atol_for(dt), true));
    EXPECT_TRUE(tensors_close(add(a.cuda(), 2.5).cpu(), add(a, 2.5), rtol_for(dt), atol_for(dt), true));
    EXPECT_TRUE(tensors_close(rsub(a.cuda(), 1).cpu(), rsub(a, 1), rtol_for(dt), atol_for(dt), true));
  }
  // type promotion across dtypes happens on the device
  Tensor i = sample(kInt64, {4, 3}, 10), f = sample(kFloat32, {3}, 11);
  EXPECT_TRUE(tensors_close(add(i.cuda(), f.cuda()).cpu(), add(i, f), 1e-6, 1e-6, true));
  // NaN propagates through maximum/minimum
  Tensor n1 = tensor({1.0f, NAN, 3.0f}), n2 = tensor({NAN, 2.0f, 1.0f});
  EXPECT_TRUE(tensors_close(maximum(n1.cuda(), n2.cuda()).cpu(), maximum(n1, n2), 0, 0, true));
  // integer powers: exact, and negative exponents rejected as on the CPU
  Tensor base = tensor({2, -3, 5}).to(kInt64), ex = tensor({10, 3, 0}).to(kInt64);
  EXPECT_TRUE(tensors_close(pow(base.cuda(), ex.cuda()).cpu(), pow(base, ex), 0, 0, true));
  expect_error([&] { (void)pow(base.cuda(), tensor({1, -1, 2}).to(kInt64).cuda()); }, "negative integer powers");
  // operands on different devices
  expect_error([&] { (void)add(ones({3}).cuda(), ones({3})); }, "device");
}

// A 0-dim CPU tensor beside a CUDA tensor acts as a number (PyTorch's rule), in both operand orders
// and in place; its gradient comes back to the CPU. A CPU tensor with dimensions is still refused.
TEST(CudaElementwise, ZeroDimCpuTensorActsAsANumber) {
  TROUPE_REQUIRE_CUDA();
  Tensor x = sample(kFloat32, {4, 5}, 60);
  Tensor s = scalar_tensor(3.0, TensorOptions().dtype(kFloat32)).requires_grad_();
  Tensor g = x.cuda().requires_grad_();
  Tensor y = mul(g, s), y2 = add(s, g);
  ASSERT_TRUE(y.is_cuda());
  ASSERT_TRUE(y2.is_cuda());
  EXPECT_TRUE(tensors_close(y.detach().cpu(), mul(x, 3.0), 1e-6, 1e-6, true));
  EXPECT_TRUE(tensors_close(y2.detach().cpu(), add(x, 3.0), 1e-6, 1e-6, true));
  add(sum(y), sum(y2)).backward();
  ASSERT_TRUE(s.grad().defined());
  EXPECT_TRUE(s.grad().is_cpu());
  EXPECT_NEAR(s.grad().item<float>(), sum(x).item<float>() + 20.0f, 1e-3);
  EXPECT_TRUE(g.grad().is_cuda());
  EXPECT_TRUE(tensors_close(g.grad().cpu(), full({4, 5}, 4.0), 1e-6, 1e-6, true));
  Tensor z = x.cuda();
  z.mul_(scalar_tensor(2.0, TensorOptions().dtype(kFloat32)));
  z.div_(4.0);
  EXPECT_TRUE(tensors_close(z.cpu(), mul(x, 0.5), 1e-6, 1e-6, true));
  EXPECT_THROW((void)mul(x.cuda(), full({5}, 2.0)), std::invalid_argument);
  // where with a 0-dim CPU value
  Tensor w = where(gt(x.cuda(), 0.0), x.cuda(), scalar_tensor(-1.0, TensorOptions().dtype(kFloat32)));
  ASSERT_TRUE(w.is_cuda());
  EXPECT_TRUE(tensors_close(w.cpu(), where(gt(x, 0.0), x, full({}, -1.0)), 0, 0, true));
}

// Contiguous operands (and one-value inputs) take the unrolled kernels: sizes that are not a multiple of a
// block's elements, more elements than one grid covers (2^26 + 1001: the grid-stride loop), in place
// (the output is an input), a number broadcast, 16-bit floats, comparisons and integer errors.
TEST(CudaElementwise, ContiguousOperandsMatchCpu) {
  TROUPE_REQUIRE_CUDA();
  for (int64_t n : {int64_t(1), int64_t(1000), int64_t(1023), int64_t(1025), int64_t(300001), (int64_t(1) << 26) + 1001}) {
    SCOPED_TRACE("n " + std::to_string(n));
    Tensor a = sample(kFloat32, {n}, 60), b = sample(kFloat32, {n}, 61);
    Tensor ga = a.cuda(), gb = b.cuda();
    EXPECT_TRUE(tensors_close(add(ga, gb).cpu(), add(a, b), 0, 0, true));
    EXPECT_TRUE(tensors_close(sub(ga, gb, 2.0).cpu(), sub(a, b, 2.0), 1e-6, 1e-6, true));
    EXPECT_TRUE(tensors_close(mul(ga, 0.9).cpu(), mul(a, 0.9), 1e-6, 0, true));
    EXPECT_TRUE(tensors_close(exp(ga).cpu(), exp(a), 1e-6, 0, true));
    EXPECT_TRUE(same_bytes(lt(ga, gb).cpu(), lt(a, b)));
    if (n > 100000) continue;
    Tensor c = ga.clone();
    c.add_(gb, 0.5);  // in place: the output is the first input
    EXPECT_TRUE(tensors_close(c.cpu(), add(a, b, 0.5), 1e-6, 1e-6, true));
    Tensor h = sample(kBFloat16, {n}, 62), k = sample(kBFloat16, {n}, 63);
    EXPECT_TRUE(tensors_close(mul(h.cuda(), k.cuda()).cpu(), mul(h, k), 0, 0, true));
    EXPECT_TRUE(tensors_close(relu(h.cuda()).cpu(), relu(h), 0, 0, true));
  }
  // the backend's integer division (floor, as on the CPU) reports a zero divisor from the unrolled kernel
  Tensor i = sample(kInt64, {5000}, 64), j = sample(kInt64, {5000}, 65).mul(2).add(1);  // odd: no zero
  j.narrow(0, 4321, 1).fill_(0);
  Tensor q = empty({5000}, TensorOptions().dtype(kInt64).device(Device(kCUDA, 0)));
  expect_error([&] { backend(kCUDA).binary(BinaryOp::Div, q, i.cuda(), j.cuda(), 1); }, "integer division by zero");
  j.narrow(0, 4321, 1).fill_(7);
  Tensor qc = empty({5000}, TensorOptions().dtype(kInt64));
  backend(kCUDA).binary(BinaryOp::Div, q, i.cuda(), j.cuda(), 1);
  backend(kCPU).binary(BinaryOp::Div, qc, i, j, 1);
  EXPECT_TRUE(same_bytes(q.cpu(), qc));
}

TEST(CudaElementwise, WhereAndMaskedFill) {
  TROUPE_REQUIRE_CUDA();
  for (ScalarType dt : {kFloat32, kFloat16, kInt64, kBool, kUInt8}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor c = sample(kBool, {4, 1, 6}, 12);
    Tensor a = sample(dt, {5, 1}, 13), b = sample(dt, {6}, 14);
    EXPECT_TRUE(same_bytes(where(c.cuda(), a.cuda(), b.cuda()).cpu(), where(c, a, b)));
    Tensor x = sample(dt, {4, 5, 6}, 15);
    Scalar v = dt == kBool ? Scalar(true) : Scalar(int64_t(3));
    EXPECT_TRUE(same_bytes(masked_fill(x.cuda(), c.cuda(), v).cpu(), masked_fill(x, c, v)));
  }
}

// ---------------------------------------------------------------- reductions

TEST(CudaReduce, ReductionsMatchCpu) {
  TROUPE_REQUIRE_CUDA();
  for (ScalarType dt : kFloatDtypes) {
    SCOPED_TRACE(dtype_name(dt));
    const double rt = dt == kFloat32 ? 1e-4 : rtol_for(dt) * 4, at = dt == kFloat32 ? 1e-4 : atol_for(dt) * 10;
    Tensor x = sample(dt, {7, 300, 5}, 16);
    Tensor g = x.cuda();
    EXPECT_TRUE(tensors_close(sum(g).cpu(), sum(x), rt, at * 10, true));
    EXPECT_TRUE(tensors_close(sum(g, {1}).cpu(), sum(x, {1}), rt, at, true));
    EXPECT_TRUE(tensors_close(sum(g, {0, 2}, true).cpu(), sum(x, {0, 2}, true), rt, at, true));
    EXPECT_TRUE(tensors_close(sum(g, {2}).cpu(), sum(x, {2}), rt, at, true));
    EXPECT_TRUE(tensors_close(mean(g, {1}).cpu(), mean(x, {1}), rt, at, true));
    EXPECT_TRUE(tensors_close(amax(g, {1}).cpu(), amax(x, {1}), 0, 0, true));
    EXPECT_TRUE(tensors_close(amin(g, {0}).cpu(), amin(x, {0}), 0, 0, true));
    EXPECT_TRUE(tensors_close(max(g).cpu(), max(x), 0, 0, true));
    EXPECT_TRUE(tensors_close(min(g).cpu(), min(x), 0, 0, true));
    for (int64_t d : {0, 1, 2}) {
      SCOPED_TRACE("dim " + std::to_string(d));
      auto [gv, gi] = max(g, d);
      auto [cv, ci] = max(x, d);
      EXPECT_TRUE(tensors_close(gv.cpu(), cv, 0, 0, true));
      EXPECT_TRUE(same_bytes(gi.cpu(), ci));
      auto [gv2, gi2] = min(g, d, true);
      auto [cv2, ci2] = min(x, d, true);
      EXPECT_TRUE(tensors_close(gv2.cpu(), cv2, 0, 0, true));
      EXPECT_TRUE(same_bytes(gi2.cpu(), ci2));
      EXPECT_TRUE(same_bytes(argmax(g, d).cpu(), argmax(x, d)));
      EXPECT_TRUE(same_bytes(argmin(g, d).cpu(), argmin(x, d)));
    }
    Tensor p = add(div(sample(dt, {6, 20}, 17), 30), 1);  // near 1: products stay finite
    EXPECT_TRUE(tensors_close(prod(p.cuda(), 1).cpu(), prod(p, 1), rt * 4, at, true));
    EXPECT_TRUE(tensors_close(cumsum(g, 1).cpu(), cumsum(x, 1), rt, at * 10, true));
  }
  // a long contiguous row (the block-per-row kernel), with ties and a NaN: first extremum wins
  Tensor row = zeros({3, 5000});
  row.select(0, 1).fill_(1.0);
  row.select(0, 2).narrow(0, 4000, 1).fill_(NAN);
  row.select(0, 2).narrow(0, 4500, 1).fill_(NAN);
  Tensor gr = row.cuda();
  EXPECT_TRUE(same_bytes(argmax(gr, 1).cpu(), argmax(row, 1)));
  EXPECT_TRUE(same_bytes(argmin(gr, 1).cpu(), argmin(row, 1)));
  EXPECT_TRUE(tensors_close(sum(gr, {1}).cpu(), sum(row, {1}), 0, 0, true));
  Tensor big = sample(kFloat32, {2, 100000}, 18);
  EXPECT_TRUE(tensors_close(sum(big.cuda(), {1}).cpu(), sum(big, {1}), 1e-4, 1e-2, true));
  EXPECT_TRUE(tensors_close(softmax(big.cuda(), 1).cpu(), softmax(big, 1), 1e-4, 1e-7, true));
  EXPECT_TRUE(tensors_close(logsumexp(big.cuda(), {1}).cpu(), logsumexp(big, {1}), 1e-5, 1e-5, true));
  // integers and bools: exact
  for (ScalarType dt : {kInt64, kInt32, kUInt8, kBool}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor x = sample(dt, {5, 40, 3}, 19);
    EXPECT_TRUE(tensors_close(sum(x.cuda()).cpu(), sum(x), 0, 0, true));
    EXPECT_TRUE(tensors_close(sum(x.cuda(), {1}).cpu(), sum(x, {1}), 0, 0, true));
    if (dt != kBool) {
      EXPECT_TRUE(tensors_close(amax(x.cuda(), {2}).cpu(), amax(x, {2}), 0, 0, true));
      EXPECT_TRUE(same_bytes(argmin(x.cuda(), 1).cpu(), argmin(x, 1)));
    }
    EXPECT_TRUE(same_bytes(all(x.cuda(), 2).cpu(), all(x, 2)));
    EXPECT_TRUE(same_bytes(any(x.cuda(), 0).cpu(), any(x, 0)));
    EXPECT_TRUE(same_bytes(all(x.cuda()).cpu(), all(x)));
    EXPECT_TRUE(tensors_close(cumsum(x.cuda(), 1).cpu(), cumsum(x, 1), 0, 0, true));
  }
  // empty reductions
  Tensor e = zeros({3, 0});
  EXPECT_TRUE(tensors_close(sum(e.cuda(), {1}).cpu(), sum(e, {1}), 0, 0, true));
  EXPECT_TRUE(tensors_close(prod(e.cuda(), 1).cpu(), prod(e, 1), 0, 0, true));
  EXPECT_THROW((void)max(e.cuda(), 1), std::exception);
}

// Reductions whose outputs are too few to fill the device are split over chunks of the reduced dim and
// merged by a second kernel: whole-tensor reductions, a few long rows, and columns of tall matrices. The
// chunk borders must not change which index an extremum reports (the first, NaN counting as the extremum).
TEST(CudaReduce, SplitReductionsMatchCpu) {
  TROUPE_REQUIRE_CUDA();
  // whole tensors (1 row of 2^21): float64 to 1e-12, float32 to 1e-4 relative, integers exactly
  Tensor d = sample(kFloat64, {1 << 21}, 40);
  EXPECT_TRUE(tensors_close(sum(d.cuda()).cpu(), sum(d), 1e-12, 1e-9, true));
  EXPECT_TRUE(tensors_close(mean(d.cuda()).cpu(), mean(d), 1e-12, 1e-12, true));
  Tensor f = sample(kFloat32, {3, 1 << 20}, 41);
  EXPECT_TRUE(tensors_close(sum(f.cuda()).cpu(), sum(f), 1e-4, 1e-1, true));
  EXPECT_TRUE(tensors_close(sum(f.cuda(), {1}).cpu(), sum(f, {1}), 1e-4, 1e-1, true));
  EXPECT_TRUE(tensors_close(amax(f.cuda(), {1}).cpu(), amax(f, {1}), 0, 0, true));
  Tensor i = sample(kInt64, {1 << 20}, 42);
  EXPECT_TRUE(tensors_close(sum(i.cuda()).cpu(), sum(i), 0, 0, true));
  Tensor b = sample(kBool, {1 << 20}, 43);
  EXPECT_TRUE(same_bytes(all(b.cuda()).cpu(), all(b)));
  EXPECT_TRUE(same_bytes(any(b.cuda()).cpu(), any(b)));
  EXPECT_TRUE(same_bytes(any(zeros({1 << 20}, TensorOptions().dtype(kBool)).cuda()).cpu(),
                         any(zeros({1 << 20}, TensorOptions().dtype(kBool)))));
  // ties and NaNs in different chunks: argmax / argmin report the first
  Tensor t = zeros({2, 1 << 20});
  t.select(0, 0).narrow(0, 900000, 1).fill_(5.0);
  t.select(0, 0).narrow(0, 100000, 1).fill_(5.0);
  t.select(0, 0).narrow(0, 500000, 1).fill_(-5.0);
  t.select(0, 0).narrow(0, 700000, 1).fill_(-5.0);
  t.select(0, 1).narrow(0, 800000, 1).fill_(NAN);
  t.select(0, 1).narrow(0, 300000, 1).fill_(NAN);
  Tensor tg = t.cuda();
  EXPECT_TRUE(same_bytes(argmax(tg, 1).cpu(), argmax(t, 1)));
  EXPECT_TRUE(same_bytes(argmin(tg, 1).cpu(), argmin(t, 1)));
  EXPECT_TRUE(same_bytes(argmax(tg.flatten()).cpu(), argmax(t.flatten())));
  EXPECT_EQ(argmax(tg, 1).cpu()[0].item<int64_t>(), 100000);
  EXPECT_EQ(argmin(tg, 1).cpu()[0].item<int64_t>(), 500000);
  EXPECT_EQ(argmax(tg, 1).cpu()[1].item<int64_t>(), 300000);
  // columns of tall matrices (inner > 1, few outputs): bias gradients, per-feature statistics
  for (std::vector<int64_t> sz : {std::vector<int64_t>{4096, 8}, std::vector<int64_t>{2048, 1024},
                                  std::vector<int64_t>{3, 5000, 2}}) {
    SCOPED_TRACE(shape_str(sz));
    const int64_t dim = sz.size() == 3 ? 1 : 0;
    Tensor x = sample(kFloat64, sz, 44);
    Tensor g = x.cuda();
    EXPECT_TRUE(tensors_close(sum(g, {dim}).cpu(), sum(x, {dim}), 1e-12, 1e-10, true));
    EXPECT_TRUE(tensors_close(amin(g, {dim}).cpu(), amin(x, {dim}), 0, 0, true));
    EXPECT_TRUE(same_bytes(argmax(g, dim).cpu(), argmax(x, dim)));
    Tensor r = x.mul(0.5).to(kInt64).to(kFloat64);  // many ties
    EXPECT_TRUE(same_bytes(argmax(r.cuda(), dim).cpu(), argmax(r, dim)));
    EXPECT_TRUE(same_bytes(argmin(r.cuda(), dim).cpu(), argmin(r, dim)));
  }
  // float32 columns, and a bias gradient through autograd: a (2048, 1024) upstream gradient summed over
  // the batch (a non-uniform one: the gradient of a plain sum() is an expanded constant, reduced once)
  Tensor a = sample(kFloat32, {2048, 1024}, 45), w = sample(kFloat32, {2048, 1024}, 46);
  EXPECT_TRUE(tensors_close(sum(a.cuda(), {0}).cpu(), sum(a, {0}), 1e-4, 1e-3, true));
  Tensor bias = zeros({1024}).cuda().requires_grad_();
  ((a.cuda() + bias) * w.cuda()).sum().backward();
  EXPECT_TRUE(tensors_close(bias.grad().cpu(), sum(w, {0}), 1e-4, 1e-3, true));
  // a row one past two chunks, products, all() true, and integer and 16-bit columns
  Tensor edge = sample(kFloat64, {2 * 4096 + 1}, 47);
  EXPECT_TRUE(tensors_close(sum(edge.cuda()).cpu(), sum(edge), 1e-12, 1e-10, true));
  EXPECT_TRUE(tensors_close(amax(edge.cuda(), {0}).cpu(), amax(edge, {0}), 0, 0, true));
  Tensor near1 = add(div(sample(kFloat64, {100000}, 48), 3000), 1);
  EXPECT_TRUE(tensors_close(prod(near1.cuda(), 0).cpu(), prod(near1, 0), 1e-10, 0, true));
  Tensor ones_b = ones({1 << 20}, TensorOptions().dtype(kBool));
  EXPECT_TRUE(same_bytes(all(ones_b.cuda()).cpu(), all(ones_b)));
  Tensor ic = sample(kInt32, {5000, 3}, 49);
  EXPECT_TRUE(tensors_close(sum(ic.cuda(), {0}).cpu(), sum(ic, {0}), 0, 0, true));
  EXPECT_TRUE(same_bytes(argmin(ic.cuda(), 0).cpu(), argmin(ic, 0)));
  Tensor hc = sample(kBFloat16, {3000, 4}, 50);
  EXPECT_TRUE(tensors_close(amax(hc.cuda(), {0}).cpu(), amax(hc, {0}), 0, 0, true));
  EXPECT_TRUE(same_bytes(argmax(hc.cuda(), 0).cpu(), argmax(hc, 0)));
}

// ---------------------------------------------------------------- fused softmax family

// The CUDA backend's fused softmax / log_softmax / logsumexp kernels (block per long row, thread per short
// row or strided slice) and softmax's fused backward, against the CPU's.
TEST(CudaSoftmax, FusedKernelsMatchCpu) {
  TROUPE_REQUIRE_CUDA();
  EXPECT_TRUE(backend(kCUDA).fuses(FusedKernel::Softmax));
  EXPECT_TRUE(backend(kCUDA).fuses(FusedKernel::LogSumExp));
  for (ScalarType dt : kFloatDtypes) {
    SCOPED_TRACE(dtype_name(dt));
    const double rt = dt == kFloat32 ? 1e-5 : rtol_for(dt) * 2, at = dt == kFloat32 ? 1e-6 : atol_for(dt) * 2;
    for (std::vector<int64_t> sz : {std::vector<int64_t>{8, 1000}, std::vector<int64_t>{64, 10},
                                    std::vector<int64_t>{4, 300, 6}, std::vector<int64_t>{5, 256}}) {
      SCOPED_TRACE(shape_str(sz));
      Tensor x = sample(dt, sz, 50);
      Tensor g = x.cuda();
      for (int64_t dim = 0; dim < static_cast<int64_t>(sz.size()); ++dim) {
        SCOPED_TRACE("dim " + std::to_string(dim));
        EXPECT_TRUE(tensors_close(softmax(g, dim).cpu(), softmax(x, dim), rt, at, true));
        EXPECT_TRUE(tensors_close(log_softmax(g, dim).cpu(), log_softmax(x, dim), rt, at * 10, true));
        EXPECT_TRUE(tensors_close(logsumexp(g, {dim}).cpu(), logsumexp(x, {dim}), rt, at * 10, true));
        EXPECT_TRUE(tensors_close(logsumexp(g, {dim}, true).cpu(), logsumexp(x, {dim}, true), rt, at * 10, true));
      }
      std::vector<int64_t> every(sz.size());
      for (size_t k = 0; k < sz.size(); ++k) every[k] = static_cast<int64_t>(k);
      EXPECT_TRUE(tensors_close(logsumexp(g, every).cpu(), logsumexp(x, every), rt, at * 10, true));
    }
  }
  // NaN, +inf and all -inf rows, short (thread per row) and long (block per row)
  for (int64_t r : {6, 600}) {
    SCOPED_TRACE("r " + std::to_string(r));
    Tensor x = sample(kFloat32, {5, r}, 51);
    x.select(0, 1).narrow(0, 3, 1).fill_(NAN);
    x.select(0, 2).narrow(0, 4, 1).fill_(INFINITY);
    x.select(0, 3).fill_(-INFINITY);
    x.select(0, 4).narrow(0, 0, 2).fill_(-INFINITY);
    Tensor g = x.cuda();
    EXPECT_TRUE(tensors_close(softmax(g, 1).cpu(), softmax(x, 1), 1e-5, 1e-6, true));
    EXPECT_TRUE(tensors_close(log_softmax(g, 1).cpu(), log_softmax(x, 1), 1e-5, 1e-5, true));
    EXPECT_TRUE(tensors_close(logsumexp(g, {1}).cpu(), logsumexp(x, {1}), 1e-5, 1e-5, true));
  }
  // backward (the fused kernel, grad mode off inside backward) and the cross-entropy path
  for (ScalarType dt : {kFloat32, kFloat64}) {
    SCOPED_TRACE(dtype_name(dt));
    const double tol = dt == kFloat32 ? 1e-5 : 1e-12;
    for (std::vector<int64_t> sz : {std::vector<int64_t>{8, 1000}, std::vector<int64_t>{64, 10}}) {
      SCOPED_TRACE(shape_str(sz));
      Tensor xc = sample(dt, sz, 52), wc = sample(dt, sz, 53);
      for (bool log : {false, true}) {
        auto run = [&](Device dev) {
          Tensor xi = xc.detach().to(dev).requires_grad_();
          Tensor y = log ? log_softmax(xi, 1) : softmax(xi, 1);
          (y * wc.to(dev)).sum().backward();
          return xi.grad().cpu();
        };
        EXPECT_TRUE(tensors_close(run(Device(kCUDA, 0)), run(Device(kCPU)), tol, tol, true)) << "log " << log;
      }
    }
  }
  // the backend's errors name the op and what was wrong
  Tensor g = sample(kFloat32, {4, 5}, 54).cuda();
  Tensor wrong = empty({4, 5}, TensorOptions().dtype(kFloat64).device(Device(kCUDA, 0)));
  expect_error([&] { backend(kCUDA).softmax(wrong, g, 4, 5, 1, false); }, "[softmax] the output must be contiguous float32");
  expect_error([&] { backend(kCUDA).softmax(g, g, 4, 6, 1, false); }, "expected 24 input and 24 output elements, got 20");
  expect_error([&] { backend(kCUDA).logsumexp(g, sample(kInt64, {4, 5}, 55).cuda(), 4, 5, 1); },
               "[logsumexp] not implemented for dtype int64");
}

// ---------------------------------------------------------------- matmul

TEST(CudaLinalg, MatmulMatchesCpu) {
  TROUPE_REQUIRE_CUDA();
  for (ScalarType dt : kFloatDtypes) {
    SCOPED_TRACE(dtype_name(dt));
    const double rt = dt == kFloat64 ? 1e-10 : dt == kFloat32 ? 1e-4 : 2e-2;
    const double at = dt == kFloat64 ? 1e-10 : dt == kFloat32 ? 1e-4 : 1e-1;
    Tensor a = sample(dt, {33, 17}, 20), b = sample(dt, {17, 29}, 21);
    EXPECT_TRUE(tensors_close(mm(a.cuda(), b.cuda()).cpu(), mm(a, b), rt, at, true));
    // transposed operands (column-major layouts) and a transposed output through bmm/matmul
    Tensor at_ = sample(dt, {17, 33}, 22).t(), bt = sample(dt, {29, 17}, 23).t();
    EXPECT_TRUE(tensors_close(mm(at_.cuda(), b.cuda()).cpu(), mm(at_, b), rt, at, true));
    EXPECT_TRUE(tensors_close(mm(a.cuda(), bt.cuda()).cpu(), mm(a, bt), rt, at, true));
    EXPECT_TRUE(tensors_close(mm(at_.cuda(), bt.cuda()).cpu(), mm(at_, bt), rt, at, true));
    // strided operand without a BLAS layout (every other column)
    Tensor wide = sample(dt, {33, 34}, 24);
    Tensor sl = slice(wide, 1, 0, 34, 2);
    EXPECT_TRUE(tensors_close(mm(sl.cuda(), b.cuda()).cpu(), mm(sl, b), rt, at, true));
    // batched with a broadcast batch dim, mv, dot, addmm, linear
    Tensor ba = sample(dt, {4, 5, 17}, 25);
    EXPECT_TRUE(tensors_close(matmul(ba.cuda(), b.cuda()).cpu(), matmul(ba, b), rt, at, true));
    Tensor bb = sample(dt, {4, 17, 6}, 26);
    EXPECT_TRUE(tensors_close(bmm(ba.cuda(), bb.cuda()).cpu(), bmm(ba, bb), rt, at, true));
    Tensor v = sample(dt, {17}, 27);
    EXPECT_TRUE(tensors_close(mv(a.cuda(), v.cuda()).cpu(), mv(a, v), rt, at, true));
    EXPECT_TRUE(tensors_close(dot(v.cuda(), v.cuda()).cpu(), dot(v, v), rt, at * 10, true));
    Tensor bias = sample(dt, {29}, 28);
    EXPECT_TRUE(tensors_close(addmm(bias.cuda(), a.cuda(), b.cuda(), 0.5, 2).cpu(), addmm(bias, a, b, 0.5, 2), rt,
                              at * 2, true));
    Tensor w = sample(dt, {29, 17}, 29);
    EXPECT_TRUE(tensors_close(linear(a.cuda(), w.cuda(), bias.cuda()).cpu(), linear(a, w, bias), rt, at, true));
  }
  // empty inner dimension: zeros
  Tensor z = mm(zeros({5, 0}).cuda(), zeros({0, 3}).cuda());
  EXPECT_TRUE(tensors_close(z.cpu(), zeros({5, 3}), 0, 0, true));
  // integer matmul is not offered by cuBLAS
  expect_error([&] { (void)mm(ones({2, 2}, TensorOptions().dtype(kInt64)).cuda(),
                              ones({2, 2}, TensorOptions().dtype(kInt64)).cuda()); },
               "not implemented");
}

// ---------------------------------------------------------------- autograd

TEST(CudaAutograd, BackwardThroughCudaTensors) {
  TROUPE_REQUIRE_CUDA();
  Tensor xc = sample(kFloat32, {4, 3}, 30), wc = sample(kFloat32, {4, 3}, 31);
  Tensor x = xc.cuda().requires_grad_(), w = wc.cuda();
  ASSERT_TRUE(x.is_leaf());
  (x * w).sum().backward();
  ASSERT_TRUE(x.grad().defined());
  EXPECT_TRUE(x.grad().is_cuda());
  EXPECT_TRUE(tensors_close(x.grad().cpu(), wc, 0, 0, true));

  // an MLP-like chain: gradients equal the CPU ones
  Tensor W = sample(kFloat32, {3, 5}, 32), b = sample(kFloat32, {5}, 33);
  auto run = [&](Device dev) {
    // detach(): on the CPU, to() returns the tensor itself, and requires_grad_ would then mark the
    // shared input, making the CUDA run's copies non-leaves without a grad
    Tensor xi = xc.detach().to(dev).requires_grad_(), Wi = W.detach().to(dev).requires_grad_(),
           bi = b.detach().to(dev).requires_grad_();
    Tensor y = sigmoid(addmm(bi, xi, Wi)).pow(2).mean();
    y.backward();
    return std::vector<Tensor>{y.detach().cpu(), xi.grad().cpu(), Wi.grad().cpu(), bi.grad().cpu(),
                               Tensor(xi.grad().is_cuda() ? ones({}) : zeros({}))};
  };
  auto cpu = run(Device(kCPU));
  auto gpu = run(Device(kCUDA, 0));
  EXPECT_EQ(gpu[4].item<float>(), 1.0f);  // the gradient stayed on the device
  for (size_t i = 0; i < 4; ++i) {
    SCOPED_TRACE("output " + std::to_string(i));
    EXPECT_TRUE(tensors_close(gpu[i], cpu[i], 1e-5, 1e-6, true));
  }

  // the gradient flows back across .cuda() to a CPU leaf
  Tensor h = xc.clone().requires_grad_();
  Tensor d = h.cuda();
  (d * d).sum().backward();
  ASSERT_TRUE(h.grad().defined());
  EXPECT_TRUE(h.grad().is_cpu());
  EXPECT_TRUE(tensors_close(h.grad(), mul(xc, 2), 1e-6, 1e-6, true));
}

// as_strided's backward and allclose/equal read their data on the host: CUDA tensors go through the CPU
// (before, they read device memory from the host).
TEST(CudaAutograd, AsStridedBackwardAndAllcloseOnCuda) {
  TROUPE_REQUIRE_CUDA();
  Tensor xc = sample(kFloat32, {6}, 34);
  Tensor x = xc.cuda().requires_grad_();
  x.as_strided({2, 3}, {2, 1}, 0).sum().backward();  // windows [0, 3) and [2, 5) overlap at 2
  ASSERT_TRUE(x.grad().defined());
  EXPECT_TRUE(x.grad().is_cuda());
  EXPECT_TRUE(tensors_close(x.grad().cpu(), tensor(std::vector<float>{1, 1, 2, 1, 1, 0}), 0, 0, true));
  EXPECT_TRUE(allclose(x.detach(), xc.cuda()));
  EXPECT_TRUE(equal(x.detach(), xc.cuda()));
  EXPECT_FALSE(equal(x.detach(), add(xc, 1.0).cuda()));
  EXPECT_FALSE(allclose(x.detach(), add(xc, 1.0).cuda()));
}

// ---------------------------------------------------------------- indexing

TEST(CudaIndex, GatherIndexSelectScatterIndexAdd) {
  TROUPE_REQUIRE_CUDA();
  Tensor x = sample(kFloat32, {5, 6}, 40);
  manual_seed(41);
  Tensor idx = randint(0, 6, {5, 4});
  EXPECT_TRUE(same_bytes(gather(x.cuda(), 1, idx.cuda()).cpu(), gather(x, 1, idx)));
  EXPECT_TRUE(same_bytes(gather(x.cuda().t(), 0, idx.cuda().t()).cpu(), gather(x.t(), 0, idx.t())));
  Tensor sel = tensor({4, 0, 2, 2}).to(kInt64);
  for (ScalarType dt : kAllDtypes) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor y = sample(dt, {5, 6, 3}, 42);
    EXPECT_TRUE(same_bytes(index_select(y.cuda(), 0, sel.cuda()).cpu(), index_select(y, 0, sel)));
    EXPECT_TRUE(same_bytes(index_select(y.cuda(), 1, sel.cuda()).cpu(), index_select(y, 1, sel)));
    EXPECT_TRUE(same_bytes(index_select(y.cuda().transpose(0, 2), 2, sel.cuda()).cpu(),
                           index_select(y.transpose(0, 2), 2, sel)));
  }
  // scatter with distinct targets per row
  Tensor uniq = arange(0, 3).mul(2).expand({5, 3}).contiguous();
  Tensor src = sample(kFloat32, {5, 3}, 43);
  EXPECT_TRUE(same_bytes(scatter(x.cuda(), 1, uniq.cuda(), src.cuda()).cpu(), scatter(x, 1, uniq, src)));
  EXPECT_TRUE(same_bytes(scatter(x.cuda(), 1, uniq.cuda(), Scalar(7.5)).cpu(), scatter(x, 1, uniq, Scalar(7.5))));
  // accumulation with repeated targets (atomics; 1- and 2-byte types through compare-and-swap)
  Tensor rep = randint(0, 3, {5, 40});
  for (ScalarType dt : kAllDtypes) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor base = dt == kUInt8 ? zeros({5, 3}, TensorOptions().dtype(dt)) : sample(dt, {5, 3}, 44);
    Tensor s = dt == kUInt8 ? ones({5, 40}, TensorOptions().dtype(dt)) : sample(dt, {5, 40}, 45);
    const double rt = is_floating_point(dt) ? rtol_for(dt) * 8 : 0, at = is_floating_point(dt) ? atol_for(dt) * 40 : 0;
    EXPECT_TRUE(tensors_close(scatter_add(base.cuda(), 1, rep.cuda(), s.cuda()).cpu(), scatter_add(base, 1, rep, s),
                              rt, at, true));
    Tensor rows = randint(0, 5, {12});
    Tensor s2 = dt == kUInt8 ? ones({12, 3}, TensorOptions().dtype(dt)) : sample(dt, {12, 3}, 46);
    Scalar alpha = is_floating_point(dt) ? Scalar(0.5) : Scalar(int64_t(1));
    EXPECT_TRUE(tensors_close(index_add(base.cuda(), 0, rows.cuda(), s2.cuda(), alpha).cpu(),
                              index_add(base, 0, rows, s2, alpha), rt, at, true));
  }
  // out-of-range indices are reported, not written
  Tensor bad = tensor({0, 7}).to(kInt64);
  expect_error([&] { (void)index_select(x.cuda(), 1, bad.cuda()); }, "out of bounds");
  expect_error([&] { (void)gather(x.cuda(), 1, bad.view({1, 2}).cuda()); }, "out of bounds");
}

TEST(CudaIndex, EmbeddingLikeBackward) {
  TROUPE_REQUIRE_CUDA();
  Tensor w = sample(kFloat32, {10, 4}, 47);
  Tensor ids = tensor({3, 1, 3, 9, 0, 3}).to(kInt64);
  Tensor wc = w.clone().requires_grad_(), wg = w.cuda().requires_grad_();
  (index_select(wc, 0, ids) * 2).sum().backward();
  (index_select(wg, 0, ids.cuda()) * 2).sum().backward();
  ASSERT_TRUE(wg.grad().defined());
  EXPECT_TRUE(wg.grad().is_cuda());
  EXPECT_TRUE(tensors_close(wg.grad().cpu(), wc.grad(), 0, 0, true));
}

// ---------------------------------------------------------------- convolution

// Forward and backward are separate tests, so that a failure names the part. The combined test crashed
// the process on an H200: its CPU run marked the shared inputs as requiring grad (to() of a CPU tensor to
// the CPU is the tensor itself), so the CUDA run's inputs were non-leaves, their grad() undefined, and
// .cpu() of an undefined tensor dereferenced null; inputs are detached now, and such a call throws.
const std::vector<int64_t> kConvStride = {2, 1}, kConvPad = {1, 2}, kConvDil = {1, 2};

TEST(CudaConv, Conv2dForwardMatchesCpu) {
  TROUPE_REQUIRE_CUDA();
  Tensor x = sample(kFloat32, {2, 3, 9, 8}, 50), w = sample(kFloat32, {4, 3, 3, 2}, 51), b = sample(kFloat32, {4}, 52);
  Tensor plain = conv2d(x.cuda(), w.cuda(), Tensor(), kConvStride, kConvPad, kConvDil);
  EXPECT_TRUE(tensors_close(plain.cpu(), conv2d(x, w, Tensor(), kConvStride, kConvPad, kConvDil), 1e-4, 1e-3, true));
  Tensor biased = conv2d(x.cuda(), w.cuda(), b.cuda(), kConvStride, kConvPad, kConvDil);
  EXPECT_TRUE(tensors_close(biased.cpu(), conv2d(x, w, b, kConvStride, kConvPad, kConvDil), 1e-4, 1e-3, true));
  // 1x1 (the image is its own column matrix)
  Tensor w1 = sample(kFloat32, {5, 3, 1, 1}, 53);
  EXPECT_TRUE(tensors_close(conv2d(x.cuda(), w1.cuda(), Tensor()).cpu(), conv2d(x, w1, Tensor()), 1e-4, 1e-3, true));
}

TEST(CudaConv, Conv2dBackwardMatchesCpu) {
  TROUPE_REQUIRE_CUDA();
  Tensor x = sample(kFloat32, {2, 3, 9, 8}, 50), w = sample(kFloat32, {4, 3, 3, 2}, 51), b = sample(kFloat32, {4}, 52);
  auto run = [&](Device dev) {
    Tensor xi = x.detach().to(dev).requires_grad_(), wi = w.detach().to(dev).requires_grad_(),
           bi = b.detach().to(dev).requires_grad_();  // detach(): see BackwardThroughCudaTensors
    Tensor y = conv2d(xi, wi, bi, kConvStride, kConvPad, kConvDil);
    (y * y).sum().backward();
    return std::vector<Tensor>{y.detach().cpu(), xi.grad().cpu(), wi.grad().cpu(), bi.grad().cpu()};
  };
  auto cpu = run(Device(kCPU));
  auto gpu = run(Device(kCUDA, 0));
  for (size_t i = 0; i < cpu.size(); ++i) {
    SCOPED_TRACE("output " + std::to_string(i));
    EXPECT_TRUE(tensors_close(gpu[i], cpu[i], 1e-4, 1e-3, true));
  }
  // groups, several images in one GEMM (the columns of a chunk side by side), float64
  Tensor xg = sample(kFloat64, {3, 4, 7, 6}, 54), wg = sample(kFloat64, {6, 2, 3, 3}, 55);
  auto run_g = [&](Device dev) {
    Tensor xi = xg.detach().to(dev).requires_grad_(), wi = wg.detach().to(dev).requires_grad_();
    Tensor y = conv2d(xi, wi, Tensor(), 1, 1, 1, 2);
    (y * y).sum().backward();
    return std::vector<Tensor>{y.detach().cpu(), xi.grad().cpu(), wi.grad().cpu()};
  };
  auto cg = run_g(Device(kCPU));
  auto gg = run_g(Device(kCUDA, 0));
  for (size_t i = 0; i < cg.size(); ++i) {
    SCOPED_TRACE("grouped output " + std::to_string(i));
    EXPECT_TRUE(tensors_close(gg[i], cg[i], 1e-11, 1e-11, true));
  }
}

// Pooling on CUDA runs through index ops (tensor/pool.cpp): values, indices and gradients as the CPU's.
TEST(CudaConv, PoolingMatchesCpu) {
  TROUPE_REQUIRE_CUDA();
  Tensor x = sample(kFloat32, {2, 3, 9, 8}, 50);
  auto run = [&](Device dev) {
    Tensor xm = x.detach().to(dev).requires_grad_(), xa = x.detach().to(dev).requires_grad_();
    auto [m, idx] = max_pool2d_with_indices(xm, {3, 2}, {2, 1}, {1, 1}, {1, 1}, true);
    Tensor a = avg_pool2d(xa, {3, 3}, {2, 2}, {1, 1}, false, false);
    (m * m).sum().backward();
    (a * a).sum().backward();
    return std::vector<Tensor>{m.detach().cpu(), idx.cpu(), xm.grad().cpu(), a.detach().cpu(), xa.grad().cpu()};
  };
  auto cpu = run(Device(kCPU));
  auto gpu = run(Device(kCUDA, 0));
  EXPECT_TRUE(tensors_close(gpu[0], cpu[0], 0, 0, true));
  EXPECT_TRUE(same_bytes(gpu[1], cpu[1]));
  for (size_t i = 2; i < cpu.size(); ++i) {
    SCOPED_TRACE("output " + std::to_string(i));
    EXPECT_TRUE(tensors_close(gpu[i], cpu[i], 1e-5, 1e-5, true));
  }
  // integer average pooling has no CUDA path (as in PyTorch)
  expect_error([&] { (void)avg_pool2d(sample(kInt64, {1, 1, 4, 4}, 51).cuda(), {2, 2}); },
               "not implemented for dtype int64 on device cuda:0");
}

// ---------------------------------------------------------------- random

TEST(CudaRandom, SameSeedSameNumbersAsCpu) {
  TROUPE_REQUIRE_CUDA();
  const TensorOptions on = TensorOptions().device(Device(kCUDA, 0));
  for (ScalarType dt : kFloatDtypes) {
    SCOPED_TRACE(dtype_name(dt));
    manual_seed(7);
    Tensor g = randn({3, 50}, on.dtype(dt));
    manual_seed(7);
    Tensor c = randn({3, 50}, TensorOptions().dtype(dt));
    EXPECT_TRUE(g.is_cuda());
    EXPECT_TRUE(same_bytes(g.cpu(), c));
    manual_seed(8);
    Tensor gu = rand({100}, on.dtype(dt));
    manual_seed(8);
    EXPECT_TRUE(same_bytes(gu.cpu(), rand({100}, TensorOptions().dtype(dt))));
  }
  // a strided destination is filled too
  Tensor t = zeros({20, 30}, on).t();
  uniform_(t, 2.0, 3.0);
  Tensor h = t.cpu();
  EXPECT_TRUE(all(ge(h, 2.0)).item<bool>());
  EXPECT_TRUE(all(lt(h, 3.0)).item<bool>());
}
