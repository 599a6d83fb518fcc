// troupe::tensor(...) as libtorch's torch::tensor: numbers and nested braced lists, the dtype each gives,
// options, and the errors for ragged lists, mixed element types and values out of range (texts as
// libtorch 1.13 prints them, probed against Debian's libtorch-dev).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <troupe/tensor/ops.h>
#include <troupe/tensor/tensor.h>

namespace {

namespace torch = troupe;  // written in libtorch's spelling

template <class Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "no exception";
}

std::vector<int64_t> shape(const torch::Tensor& t) { return t.sizes().vec(); }

TEST(TensorLiteral, NumbersGiveZeroDimTensorsOfLibtorchsDtype) {
  EXPECT_EQ(torch::tensor(1).dtype(), torch::kInt64);
  EXPECT_EQ(torch::tensor(int64_t{3}).dtype(), torch::kInt64);
  EXPECT_EQ(torch::tensor(1.5).dtype(), torch::kFloat32);
  EXPECT_EQ(torch::tensor(1.5f).dtype(), torch::kFloat32);
  EXPECT_EQ(torch::tensor(true).dtype(), torch::kBool);
  EXPECT_EQ(torch::tensor(uint8_t{3}).dtype(), torch::kUInt8);
  EXPECT_EQ(torch::tensor(torch::Half(1.5f)).dtype(), torch::kFloat16);
  EXPECT_EQ(torch::tensor(torch::BFloat16(1.5f)).dtype(), torch::kBFloat16);
  EXPECT_EQ(torch::tensor(1.5).dim(), 0);
  EXPECT_EQ(torch::tensor(1.5).item<float>(), 1.5f);
  EXPECT_EQ(torch::tensor(-7).item<int64_t>(), -7);
}

TEST(TensorLiteral, NestedListsGiveTheirShape) {
  auto a = torch::tensor({1, 2, 3});
  EXPECT_EQ(a.dtype(), torch::kInt64);
  EXPECT_EQ(shape(a), (std::vector<int64_t>{3}));
  EXPECT_EQ(a[2].item<int64_t>(), 3);
  auto b = torch::tensor({{1.5, 2.0}, {3.0, 4.5}});
  EXPECT_EQ(b.dtype(), torch::kFloat32);
  EXPECT_EQ(shape(b), (std::vector<int64_t>{2, 2}));
  EXPECT_TRUE(b.is_contiguous());
  EXPECT_EQ(b[1][1].item<float>(), 4.5f);
  EXPECT_EQ(b[0][1].item<float>(), 2.0f);
  auto c = torch::tensor({{{1}, {2}}, {{3}, {4}}});
  EXPECT_EQ(shape(c), (std::vector<int64_t>{2, 2, 1}));
  EXPECT_EQ(c[1][0][0].item<int64_t>(), 3);
  auto d = torch::tensor({true, false});
  EXPECT_EQ(d.dtype(), torch::kBool);
  EXPECT_FALSE(d[1].item<bool>());
  EXPECT_EQ(torch::tensor({1.f, 2.f}).dtype(), torch::kFloat32);
}

TEST(TensorLiteral, EmptyListsAreFloatWithAZeroDim) {
  auto e = torch::tensor({});
  EXPECT_EQ(e.dtype(), torch::kFloat32);
  EXPECT_EQ(shape(e), (std::vector<int64_t>{0}));
  auto f = torch::tensor({{}, {}});
  EXPECT_EQ(shape(f), (std::vector<int64_t>{2, 0}));
}

TEST(TensorLiteral, OptionsSetDtypeAndRequiresGrad) {
  auto a = torch::tensor({1, 2}, torch::kFloat64);
  EXPECT_EQ(a.dtype(), torch::kFloat64);
  EXPECT_EQ(a[1].item<double>(), 2.0);
  auto b = torch::tensor({1.5, 2.5}, torch::TensorOptions().dtype(torch::kInt32));
  EXPECT_EQ(b.dtype(), torch::kInt32);
  EXPECT_EQ(b[0].item<int32_t>(), 1);  // truncated, as a C++ cast
  auto c = torch::tensor({1.5, 2.5}, torch::TensorOptions().requires_grad(true));
  EXPECT_TRUE(c.requires_grad());
  EXPECT_TRUE(c.is_leaf());
  auto d = torch::tensor({true, false}, torch::kFloat32);
  EXPECT_EQ(d[0].item<float>(), 1.0f);
  auto u = torch::tensor({200, 3}, torch::kUInt8);
  EXPECT_EQ(u[0].item<uint8_t>(), 200);
  EXPECT_EQ(torch::tensor(2.5, torch::kFloat64).item<double>(), 2.5);
}

TEST(TensorLiteral, FollowsTheDefaultDtype) {
  torch::set_default_dtype(torch::kFloat64);
  auto a = torch::tensor(1.5);
  auto b = torch::tensor({1.5f});
  auto c = torch::tensor({1, 2});
  torch::set_default_dtype(torch::kFloat32);
  EXPECT_EQ(a.dtype(), torch::kFloat64);
  EXPECT_EQ(b.dtype(), torch::kFloat64);
  EXPECT_EQ(c.dtype(), torch::kInt64);
}

TEST(TensorLiteral, VectorsAndNamedInitializerLists) {
  std::initializer_list<int64_t> ids = {4, 5, 6};
  auto a = torch::tensor(ids);
  EXPECT_EQ(a.dtype(), torch::kInt64);
  EXPECT_EQ(a[2].item<int64_t>(), 6);
  std::vector<float> v{1, 2, 3};
  EXPECT_EQ(torch::tensor(v).dtype(), torch::kFloat32);
  std::vector<int64_t> w{1, 2};
  EXPECT_EQ(shape(torch::tensor(w)), (std::vector<int64_t>{2}));
}

TEST(TensorLiteral, RaggedListsAndMixedTypesAreLibtorchsErrors) {
  EXPECT_EQ(error_of([] { torch::tensor({{1, 2}, {3}}); }),
            "Expected all sub-lists to have sizes: 2 (e.g. {1, 2}), but got sub-list {3} with sizes: 1");
  EXPECT_EQ(error_of([] { torch::tensor({{{1, 2}}, {{3, 4}, {5, 6}}}); }),
            "Expected all sub-lists to have sizes: 1 2 (e.g. {{1, 2}}), but got sub-list {{3, 4}, {5, 6}} with "
            "sizes: 2 2");
  EXPECT_EQ(error_of([] { torch::tensor({{1, 2}, 3}); }),
            "Expected all sub-lists to have sizes: 2 (e.g. {1, 2}), but got sub-list 3 with sizes: ");
  EXPECT_EQ(error_of([] { torch::tensor({{}, {1}}); }),
            "Expected all sub-lists to have sizes: 0 (e.g. {}), but got sub-list {1} with sizes: 1");
  EXPECT_EQ(error_of([] { torch::tensor({1, 2.5}); }),
            "Expected all elements of the tensor to have the same scalar type: Int, but got element of scalar "
            "type: Double");
  EXPECT_EQ(error_of([] { torch::tensor({true, 1}); }),
            "Expected all elements of the tensor to have the same scalar type: Bool, but got element of scalar "
            "type: Int");
  // the inner list is checked first, as libtorch builds it first
  EXPECT_EQ(error_of([] { torch::tensor({{1, 2}, {3.5, 4}}); }),
            "Expected all elements of the tensor to have the same scalar type: Double, but got element of scalar "
            "type: Int");
  EXPECT_EQ(error_of([] { torch::tensor({300, -1}, torch::kUInt8); }),
            "value cannot be converted to type uint8_t without overflow");
}

}  // namespace
