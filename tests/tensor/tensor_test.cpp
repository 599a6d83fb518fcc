// The Tensor class: dtypes and geometry, factories and their dtype rules, item/data_ptr, views sharing
// storage, contiguous/reshape/view semantics, dtype conversion (PyTorch's half/bfloat16 rounding),
// device errors, fill_/zero_/copy_, clone.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
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

// ---------------------------------------------------------------- dtypes and geometry

TEST(Tensor, DtypeProperties) {
  EXPECT_EQ(element_size(kBool), 1u);
  EXPECT_EQ(element_size(kUInt8), 1u);
  EXPECT_EQ(element_size(kInt32), 4u);
  EXPECT_EQ(element_size(kInt64), 8u);
  EXPECT_EQ(element_size(kFloat16), 2u);
  EXPECT_EQ(element_size(kBFloat16), 2u);
  EXPECT_EQ(element_size(kFloat32), 4u);
  EXPECT_EQ(element_size(kFloat64), 8u);
  EXPECT_STREQ(dtype_name(kFloat32), "float32");
  EXPECT_STREQ(dtype_name(kBFloat16), "bfloat16");
  EXPECT_STREQ(legacy_type_name(kInt64), "LongTensor");
  EXPECT_TRUE(is_floating_point(kFloat16));
  EXPECT_FALSE(is_floating_point(kInt32));
  EXPECT_TRUE(is_integral(kUInt8));
  EXPECT_FALSE(is_integral(kBool));
  EXPECT_TRUE(is_integral(kBool, true));
  std::ostringstream os;
  os << kFloat64;
  EXPECT_EQ(os.str(), "torch.float64");
  for (auto dt : {kBool, kUInt8, kInt32, kInt64, kFloat16, kBFloat16, kFloat32, kFloat64}) {
    Tensor t = zeros({2, 3}, dt);
    EXPECT_EQ(t.dtype(), dt);
    EXPECT_EQ(t.element_size(), element_size(dt));
    EXPECT_EQ(t.nbytes(), 6 * element_size(dt));
    EXPECT_EQ(t.is_floating_point(), is_floating_point(dt));
  }
}

TEST(Tensor, SizesStridesAndDims) {
  Tensor t = zeros({2, 3, 4});
  EXPECT_EQ(t.dim(), 3);
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.sizes().vec(), (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(t.strides().vec(), (std::vector<int64_t>{12, 4, 1}));
  EXPECT_EQ(t.size(-1), 4);
  EXPECT_EQ(t.stride(0), 12);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.storage_offset(), 0);
  EXPECT_EQ(t.dtype(), kFloat32);
  EXPECT_TRUE(t.is_cpu());
  EXPECT_CONTAINS(error_of([&] { t.size(3); }), "Dimension out of range (expected to be in range of [-3, 2], but got 3)");
  EXPECT_THROW(t.size(-4), std::out_of_range);
  Tensor s = zeros({});
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(s.numel(), 1);
  Tensor e = zeros({0, 3});
  EXPECT_EQ(e.numel(), 0);
  EXPECT_TRUE(Tensor().defined() == false);
}

// ---------------------------------------------------------------- factories

// An undefined tensor (default-constructed, or a grad() never set) throws from its accessors, naming the
// accessor, instead of dereferencing null.
TEST(Tensor, UndefinedTensorThrowsInsteadOfCrashing) {
  Tensor t;
  ASSERT_FALSE(t.defined());
  auto message = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string("<no error>");
  };
  EXPECT_EQ(message([&] { (void)t.sizes(); }),
            "sizes() called on an undefined Tensor (a default-constructed Tensor, or a grad() that is not set)");
  EXPECT_NE(message([&] { (void)t.cpu(); }).find("called on an undefined Tensor"), std::string::npos);
  EXPECT_NE(message([&] { (void)t.to(kFloat64); }).find("called on an undefined Tensor"), std::string::npos);
  EXPECT_NE(message([&] { (void)t.detach(); }).find("detach() called on an undefined Tensor"), std::string::npos);
  EXPECT_NE(message([&] { (void)t.data_ptr(); }).find("data_ptr() called on an undefined Tensor"), std::string::npos);
  Tensor leaf = ones({2}).requires_grad_();
  Tensor nonleaf = mul(leaf, 2.0);
  EXPECT_NE(message([&] { (void)nonleaf.grad().numel(); }).find("numel() called on an undefined Tensor"),
            std::string::npos);
}

TEST(Tensor, ZerosOnesFull) {
  EXPECT_EQ(vals(zeros({3})), (std::vector<double>{0, 0, 0}));
  EXPECT_EQ(vals(ones({2, 2}, kInt32)), (std::vector<double>{1, 1, 1, 1}));
  EXPECT_EQ(ones({2}, kInt32).dtype(), kInt32);
  Tensor f = full({2}, 2.5);
  EXPECT_EQ(f.dtype(), kFloat32);  // a float value: the default dtype
  EXPECT_EQ(vals(f), (std::vector<double>{2.5, 2.5}));
  EXPECT_EQ(full({2}, 7).dtype(), kInt64);  // an integer value: int64
  EXPECT_EQ(full({2}, true).dtype(), kBool);
  EXPECT_EQ(full({2}, 7, kFloat64).dtype(), kFloat64);
  EXPECT_EQ(vals(zeros_like(f)), (std::vector<double>{0, 0}));
  EXPECT_EQ(ones_like(f, kInt64).dtype(), kInt64);
  EXPECT_EQ(vals(full_like(f, -1)), (std::vector<double>{-1, -1}));
  EXPECT_EQ(full_like(f, -1).dtype(), kFloat32);
  EXPECT_TRUE(zeros({2}, TensorOptions().requires_grad(true)).requires_grad());
  EXPECT_CONTAINS(error_of([] { zeros({2, -1}); }), "negative dimension");
}

TEST(Tensor, ArangeLinspaceEye) {
  Tensor a = arange(5);
  EXPECT_EQ(a.dtype(), kInt64);
  EXPECT_EQ(vals(a), (std::vector<double>{0, 1, 2, 3, 4}));
  Tensor b = arange(0.0, 1.0, 0.25);
  EXPECT_EQ(b.dtype(), kFloat32);
  EXPECT_EQ(vals(b), (std::vector<double>{0, 0.25, 0.5, 0.75}));
  EXPECT_EQ(vals(arange(1, 10, 3)), (std::vector<double>{1, 4, 7}));
  EXPECT_EQ(vals(arange(5, 0, -2)), (std::vector<double>{5, 3, 1}));
  EXPECT_EQ(arange(3, kFloat64).dtype(), kFloat64);
  EXPECT_THROW(arange(0, 5, 0), std::invalid_argument);
  EXPECT_THROW(arange(5, 0, 1), std::invalid_argument);

  Tensor l = linspace(0, 1, 5);
  EXPECT_EQ(l.dtype(), kFloat32);
  EXPECT_EQ(vals(l), (std::vector<double>{0, 0.25, 0.5, 0.75, 1}));
  EXPECT_EQ(vals(linspace(-1, 1, 1)), (std::vector<double>{-1}));
  EXPECT_EQ(linspace(0, 1, 0).numel(), 0);

  EXPECT_EQ(vals(eye(3)), (std::vector<double>{1, 0, 0, 0, 1, 0, 0, 0, 1}));
  Tensor e = eye(2, 3, kInt64);
  EXPECT_EQ(e.dtype(), kInt64);
  EXPECT_EQ(e.sizes().vec(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(vals(e), (std::vector<double>{1, 0, 0, 0, 1, 0}));
}

TEST(Tensor, TensorFromListsFollowsLibtorchDtypeRules) {
  EXPECT_EQ(tensor({1.5}).dtype(), kFloat32);          // braced floating values: default dtype
  EXPECT_EQ(tensor({1.5f, 2.0f}).dtype(), kFloat32);
  EXPECT_EQ(tensor({1, 2}).dtype(), kInt64);           // braced integers: int64
  EXPECT_EQ(tensor({true, false}).dtype(), kBool);
  // libtorch's rule (as for braced lists): floating vectors give the default dtype, integer ones int64
  EXPECT_EQ(tensor(std::vector<double>{1, 2}).dtype(), kFloat32);
  EXPECT_EQ(tensor(std::vector<double>{1, 2}, kFloat64).dtype(), kFloat64);
  EXPECT_EQ(tensor(std::vector<float>{1, 2}).dtype(), kFloat32);
  EXPECT_EQ(tensor(std::vector<int32_t>{1, 2}).dtype(), kInt64);
  EXPECT_EQ(tensor(std::vector<int32_t>{1, 2}, kInt32).dtype(), kInt32);
  EXPECT_EQ(tensor(std::vector<int64_t>{1, 2}).dtype(), kInt64);
  EXPECT_EQ(tensor({1, 2}, kFloat16).dtype(), kFloat16);
  EXPECT_EQ(vals(tensor({1, 2}, kFloat16)), (std::vector<double>{1, 2}));
  EXPECT_EQ(vals(tensor({1.5, -2.25})), (std::vector<double>{1.5, -2.25}));
  EXPECT_EQ(tensor({1.5}).sizes().vec(), (std::vector<int64_t>{1}));
  Tensor s = scalar_tensor(3.5);
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(s.dtype(), kFloat32);
  EXPECT_EQ(scalar_tensor(3).dtype(), kInt64);

  // the default dtype follows set_default_dtype
  set_default_dtype(kFloat64);
  EXPECT_EQ(tensor({1.5}).dtype(), kFloat64);
  EXPECT_EQ(zeros({1}).dtype(), kFloat64);
  EXPECT_EQ(tensor({1, 2}).dtype(), kInt64);
  set_default_dtype(kFloat32);
  EXPECT_THROW(set_default_dtype(kInt64), std::invalid_argument);
  EXPECT_EQ(get_default_dtype(), kFloat32);
}

// ---------------------------------------------------------------- item and data_ptr

TEST(Tensor, ItemAndDataPtr) {
  EXPECT_DOUBLE_EQ(tensor({2.5}).item<double>(), 2.5);
  EXPECT_EQ(tensor({7}).item<int64_t>(), 7);
  EXPECT_EQ(tensor({2.75}).item<int>(), 2);
  EXPECT_TRUE(tensor({true}).item<bool>());
  EXPECT_DOUBLE_EQ(scalar_tensor(1.25, kFloat16).item<double>(), 1.25);
  Scalar s = tensor({3}).item();
  EXPECT_TRUE(s.is_integral());
  EXPECT_TRUE(tensor({3.0}).item().is_floating_point());
  EXPECT_CONTAINS(error_of([] { tensor({1.0, 2.0}).item(); }), "a Tensor with 2 elements cannot be converted to Scalar");
  EXPECT_THROW(zeros({0}).item(), std::invalid_argument);

  Tensor f = tensor({1.0, 2.0});
  EXPECT_NO_THROW(f.data_ptr<float>());
  EXPECT_EQ(f.data_ptr<float>()[1], 2.0f);
  std::string msg = error_of([&] { f.data_ptr<double>(); });
  EXPECT_CONTAINS(msg, "float64");
  EXPECT_CONTAINS(msg, "float32");
  EXPECT_THROW(tensor({1, 2}).data_ptr<int32_t>(), std::invalid_argument);
  EXPECT_NO_THROW(tensor({1, 2}).data_ptr<int64_t>());
  // data_ptr of a view points at its first element
  Tensor a = arange(6.0);
  EXPECT_EQ(a.slice(0, 2).data_ptr<float>(), a.data_ptr<float>() + 2);
  EXPECT_EQ(*a.select(0, 4).data_ptr<float>(), 4.0f);
}

// ---------------------------------------------------------------- views

TEST(Tensor, ViewsShareStorageAndWriteThrough) {
  Tensor a = arange(6.0).reshape({2, 3});
  Tensor v = a.view({3, 2});
  v.data_ptr<float>()[0] = 100;
  EXPECT_EQ(a.data_ptr<float>()[0], 100);
  EXPECT_TRUE(v.is_view());

  Tensor t = a.transpose(0, 1);
  EXPECT_EQ(t.data_ptr(), a.data_ptr());
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_EQ(t.strides().vec(), (std::vector<int64_t>{1, 3}));
  t.select(0, 2).fill_(-1.0);  // column 2 of a
  EXPECT_EQ(vals(a), (std::vector<double>{100, 1, -1, 3, 4, -1}));

  Tensor row = a.select(0, 1);
  row.fill_(7.0);
  EXPECT_EQ(vals(a), (std::vector<double>{100, 1, -1, 7, 7, 7}));

  Tensor sl = a.slice(1, 0, 3, 2);  // columns 0 and 2
  EXPECT_EQ(sl.sizes().vec(), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(sl.strides().vec(), (std::vector<int64_t>{3, 2}));
  sl.zero_();
  EXPECT_EQ(vals(a), (std::vector<double>{0, 1, 0, 0, 7, 0}));

  Tensor base = tensor({1.0, 2.0, 3.0});
  Tensor ex = base.unsqueeze(0).expand({2, 3});
  EXPECT_EQ(ex.strides().vec(), (std::vector<int64_t>{0, 1}));
  base.data_ptr<float>()[1] = 20;
  EXPECT_EQ(vals(ex), (std::vector<double>{1, 20, 3, 1, 20, 3}));

  // the version counter is shared by every view of the storage
  uint32_t v0 = a._version();
  row.add_(1.0);
  EXPECT_EQ(a._version(), v0 + 1);
  EXPECT_EQ(sl._version(), a._version());
}

TEST(Tensor, ContiguousCopiesOnlyNonContiguousTensors) {
  Tensor a = arange(6.0).reshape({2, 3});
  Tensor c = a.contiguous();
  EXPECT_TRUE(c.is_same(a));
  Tensor t = a.t();
  Tensor tc = t.contiguous();
  EXPECT_FALSE(tc.is_same(t));
  EXPECT_NE(tc.data_ptr(), a.data_ptr());
  EXPECT_TRUE(tc.is_contiguous());
  EXPECT_EQ(vals(tc), (std::vector<double>{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(tc.strides().vec(), (std::vector<int64_t>{2, 1}));
}

TEST(Tensor, ReshapeViewsWhenPossibleAndCopiesOtherwise) {
  Tensor a = arange(6.0).reshape({2, 3});
  Tensor r = a.reshape({3, 2});
  EXPECT_EQ(r.data_ptr(), a.data_ptr());  // a view
  Tensor t = a.t();
  Tensor rt = t.reshape({6});
  EXPECT_NE(rt.data_ptr(), a.data_ptr());  // needs a copy
  EXPECT_EQ(vals(rt), (std::vector<double>{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(a.reshape({-1, 2}).sizes().vec(), (std::vector<int64_t>{3, 2}));
  EXPECT_CONTAINS(error_of([&] { a.reshape({4, 2}); }), "shape '[4, 2]' is invalid for input of size 6");
  EXPECT_CONTAINS(error_of([&] { a.view({-1, -1}); }), "only one dimension can be inferred");
}

TEST(Tensor, ViewOfATransposedTensorThrowsPyTorchsMessage) {
  Tensor t = arange(6.0).reshape({2, 3}).t();
  EXPECT_CONTAINS(error_of([&] { t.view({6}); }),
                  "view size is not compatible with input tensor's size and stride (at least one dimension spans "
                  "across two contiguous subspaces). Use .reshape(...) instead.");
  // a view that keeps the split dims is fine
  EXPECT_NO_THROW(t.view({3, 2}));
  EXPECT_NO_THROW(t.unsqueeze(0).view({3, 2}));
}

// ---------------------------------------------------------------- conversions

TEST(Tensor, ToDtypeRoundsHalfAndBFloat16LikePyTorch) {
  auto fx = Fixtures::load("halfprec.txt");
  Tensor x = fx.get("x");
  Tensor h = x.to(kFloat16);
  Tensor hx = fx.get("half_of_x");
  ASSERT_EQ(h.dtype(), kFloat16);
  ASSERT_EQ(h.numel(), hx.numel());
  // bit-exact (signed zeros and NaN payloads aside)
  const Half* p = h.contiguous().data_ptr<Half>();
  const Half* q = hx.contiguous().data_ptr<Half>();
  for (int64_t i = 0; i < h.numel(); ++i) {
    bool both_nan = std::isnan(static_cast<float>(p[i])) && std::isnan(static_cast<float>(q[i]));
    if (!both_nan) {
      EXPECT_EQ(p[i].x, q[i].x) << "element " << i << " of x = " << vals(x)[i];
    }
  }
  Tensor b = x.to(kBFloat16);
  Tensor bx = fx.get("bf16_of_x");
  const BFloat16* pb = b.contiguous().data_ptr<BFloat16>();
  const BFloat16* qb = bx.contiguous().data_ptr<BFloat16>();
  for (int64_t i = 0; i < b.numel(); ++i) {
    bool both_nan = std::isnan(static_cast<float>(pb[i])) && std::isnan(static_cast<float>(qb[i]));
    if (!both_nan) {
      EXPECT_EQ(pb[i].x, qb[i].x) << "element " << i << " of x = " << vals(x)[i];
    }
  }
  // the documented edge cases
  EXPECT_EQ(vals(tensor({65519.0f, 65520.0f}).to(kFloat16)), (std::vector<double>{65504, std::numeric_limits<double>::infinity()}));
  EXPECT_EQ(vals(tensor({65504.0f}).to(kBFloat16)), (std::vector<double>{65536}));
  // back to float32 is exact
  EXPECT_TRUE(tensors_close(h.to(kFloat32), hx, 0, 0));
}

TEST(Tensor, ToDtypeIntegerAndBool) {
  Tensor f = tensor({1.7, -1.7, 0.0, 2.0});
  EXPECT_EQ(vals<int64_t>(f.to(kInt64)), (std::vector<int64_t>{1, -1, 0, 2}));  // truncation
  EXPECT_EQ(vals<bool>(f.to(kBool)), (std::vector<bool>{true, true, false, true}));
  EXPECT_EQ(vals(tensor({true, false}).to(kFloat32)), (std::vector<double>{1, 0}));
  EXPECT_EQ(vals(tensor({300}).to(kInt32)), (std::vector<double>{300}));
  Tensor same = f.to(kFloat32);
  EXPECT_TRUE(same.is_same(f));  // no conversion: the tensor itself
  Tensor copy = f.to(kFloat32, /*copy=*/true);
  EXPECT_FALSE(copy.is_same(f));
  EXPECT_NE(copy.data_ptr(), f.data_ptr());
  EXPECT_EQ(f.double_().dtype(), kFloat64);
  EXPECT_EQ(f.half().dtype(), kFloat16);
  EXPECT_EQ(f.long_().dtype(), kInt64);
}

TEST(Tensor, CudaWithoutCudaThrowsAClearMessage) {
#ifdef TROUPE_WITH_CUDA
  GTEST_SKIP() << "built with CUDA";
#else
  Tensor a = tensor({1.0, 2.0});
  std::string msg = error_of([&] { a.cuda(); });
  EXPECT_CONTAINS(msg, "CUDA");
  EXPECT_CONTAINS(msg, "cuda");
  EXPECT_THROW(zeros({2}, Device(kCUDA)), std::runtime_error);
  EXPECT_THROW(a.to(Device("cuda:0")), std::runtime_error);
  EXPECT_TRUE(a.cpu().is_same(a));
#endif
}

// ---------------------------------------------------------------- fill_, zero_, copy_, clone

TEST(Tensor, FillZeroAndCopyWithBroadcastingAndConversion) {
  Tensor a = zeros({2, 3});
  a.copy_(tensor({1.0, 2.0, 3.0}));  // broadcast over rows
  EXPECT_EQ(vals(a), (std::vector<double>{1, 2, 3, 1, 2, 3}));
  a.copy_(tensor({10, 20}).view({2, 1}));  // int64 -> float32, broadcast over columns
  EXPECT_EQ(vals(a), (std::vector<double>{10, 10, 10, 20, 20, 20}));
  Tensor i = zeros({3}, kInt64);
  i.copy_(tensor({1.9, -2.9, 3.5}));  // float -> int truncates
  EXPECT_EQ(vals<int64_t>(i), (std::vector<int64_t>{1, -2, 3}));
  i.fill_(2.5);
  EXPECT_EQ(vals<int64_t>(i), (std::vector<int64_t>{2, 2, 2}));
  Tensor h = zeros({2}, kFloat16);
  h.fill_(0.1);
  EXPECT_EQ(vals<float>(h)[0], static_cast<float>(Half(0.1f)));
  a.fill_(scalar_tensor(4.0));
  EXPECT_EQ(vals(a), (std::vector<double>(6, 4.0)));
  EXPECT_CONTAINS(error_of([&] { a.fill_(tensor({1.0, 2.0})); }), "0-dimension");
  a.zero_();
  EXPECT_EQ(vals(a), (std::vector<double>(6, 0.0)));
  std::string msg = error_of([&] { a.copy_(ones({4})); });
  EXPECT_CONTAINS(msg, "(4)");
  EXPECT_CONTAINS(msg, "(2, 3)");
  // copy_ into a non-contiguous view
  Tensor b = zeros({2, 3});
  b.t().copy_(arange(6.0).reshape({3, 2}));
  EXPECT_EQ(vals(b), (std::vector<double>{0, 2, 4, 1, 3, 5}));
  // copying a tensor onto an overlapping view of itself
  Tensor c = arange(4.0);
  c.slice(0, 1, 4).copy_(c.slice(0, 0, 3));
  EXPECT_EQ(vals(c), (std::vector<double>{0, 0, 1, 2}));
  // version counters
  uint32_t v = b._version();
  b.fill_(1.0);
  EXPECT_EQ(b._version(), v + 1);
}

TEST(Tensor, CloneIsIndependent) {
  Tensor a = arange(6.0).reshape({2, 3});
  Tensor c = a.clone();
  EXPECT_NE(c.data_ptr(), a.data_ptr());
  c.fill_(-1.0);
  EXPECT_EQ(vals(a), (std::vector<double>{0, 1, 2, 3, 4, 5}));
  Tensor tc = a.t().clone();
  EXPECT_EQ(vals(tc), (std::vector<double>{0, 3, 1, 4, 2, 5}));
  a.zero_();
  EXPECT_EQ(vals(tc), (std::vector<double>{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(tc.dtype(), kFloat32);
  EXPECT_EQ(tensor({1, 2}).clone().dtype(), kInt64);
  EXPECT_FALSE(c.is_view());
}

}  // namespace
