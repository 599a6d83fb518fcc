// Joining and indexing: cat/stack/split/chunk/unbind, gather/scatter/index_select/index_add, one_hot,
// repeat/flip/masked_select/nonzero/tril/triu, and x.index({...}) / x.index_put_({...}, v).
// Expected values are closed forms, literals computed with PyTorch 1.13 (the Python expression is given
// beside each), or records of tests/fixtures/index.txt (written by tests/fixtures/gen_index.py).
// (Over 800 lines, kept whole: the join and index families share the literal helpers and error-text
// checks at the top, and the file mirrors join.cpp + index_ops.cpp as one suite.)
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "common/fixtures.h"
#include "tensor/autograd.h"
#include "tensor/indexing.h"
#include "tensor/ops.h"

using namespace troupe;
using namespace troupe::indexing;
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

// arange(numel) as float32 in the given shape: every value names its row-major position.
Tensor ar(std::vector<int64_t> shape, ScalarType dt = kFloat32) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return arange(n, TensorOptions().dtype(dt)).view(shape);
}

std::vector<double> vals(const Tensor& t) { return t.to_vector<double>(); }
std::vector<int64_t> ivals(const Tensor& t) { return t.to_vector<int64_t>(); }
std::vector<int64_t> shape(const Tensor& t) { return t.sizes().vec(); }
using V = std::vector<double>;
using I = std::vector<int64_t>;

std::string grad_fn_name(const Tensor& t) {
  auto fn = t.grad_fn();
  return fn ? fn->name() : "";
}

// Weights 1..n shaped like t: (t * W).sum() has d/dt = W, so each gradient names where it came from.
Tensor weights_like(const Tensor& t) { return arange(1, t.numel() + 1, 1, TensorOptions().dtype(t.dtype())).view(t.sizes()); }

Tensor lt(std::initializer_list<int64_t> v) { return tensor(v); }

}  // namespace

// ================================================================ cat / stack

TEST(IndexCat, ValuesAlongEachDim) {
  Tensor a = ar({2, 3}), b = ar({1, 3}) + 100;
  Tensor c0 = cat({a, b}, 0);
  EXPECT_EQ(shape(c0), (I{3, 3}));
  EXPECT_EQ(vals(c0), (V{0, 1, 2, 3, 4, 5, 100, 101, 102}));
  Tensor d = ar({2, 1}) + 50;
  Tensor c1 = cat({a, d, a}, -1);
  EXPECT_EQ(shape(c1), (I{2, 7}));
  EXPECT_EQ(vals(c1), (V{0, 1, 2, 50, 0, 1, 2, 3, 4, 5, 51, 3, 4, 5}));
  // a non-contiguous input
  Tensor t = ar({3, 2}).t();  // [[0,2,4],[1,3,5]]
  EXPECT_EQ(vals(cat({t, a}, 1)), (V{0, 2, 4, 0, 1, 2, 1, 3, 5, 3, 4, 5}));
  // a single tensor is copied
  Tensor one = cat({a}, 0);
  EXPECT_EQ(vals(one), vals(a));
  one.fill_(7);
  EXPECT_EQ(vals(a)[0], 0);
}

TEST(IndexCat, PromotionAndLegacyEmpty) {
  // torch.cat([zeros(2,2,int32), zeros(0), ones(1,2,float16)]) -> float32 (the empty 1-D tensor takes part
  // in promotion only)
  Tensor i = ar({2, 2}, kInt32), e = zeros({0}), h = ones({1, 2}, TensorOptions().dtype(kFloat16));
  Tensor c = cat({i, e, h}, 0);
  EXPECT_EQ(c.dtype(), kFloat32);
  EXPECT_EQ(shape(c), (I{3, 2}));
  EXPECT_EQ(vals(c), (V{0, 1, 2, 3, 1, 1}));
  EXPECT_EQ(cat({ar({2}, kInt64), ar({1}, kFloat64)}).dtype(), kFloat64);
  // only legacy empties: an empty 1-D result, any dim accepted
  Tensor ee = cat({zeros({0}), zeros({0})}, 5);
  EXPECT_EQ(shape(ee), (I{0}));
  // cat([zeros(0), zeros(2,3)], 1) -> (2, 3)
  EXPECT_EQ(shape(cat({zeros({0}), zeros({2, 3})}, 1)), (I{2, 3}));
}

TEST(IndexCat, Errors) {
  expect_error([] { cat({zeros({2, 2}), zeros({3, 3})}, 1); },
               "[cat] Sizes of tensors must match except in dimension 1. Expected size 2 but got size 3 for tensor "
               "number 1 in the list.");
  expect_error([] { cat({zeros({2, 2}), zeros({2})}, 0); },
               "[cat] Tensors must have same number of dimensions: got 2 and 1");
  expect_error([] { cat(std::vector<Tensor>{}, 0); }, "[cat] expected a non-empty list of Tensors");
  expect_error([] { cat({scalar_tensor(1.0), zeros({2})}, 0); },
               "[cat] zero-dimensional tensor (at position 0) cannot be concatenated");
  expect_error([] { cat({zeros({2}), zeros({2})}, 1); },
               "[cat] Dimension out of range (expected to be in range of [-1, 0], but got 1)");
}

TEST(IndexCat, Backward) {
  Tensor a = ar({2, 3}).requires_grad_(), b = ar({2, 1}).requires_grad_(), c = ar({2, 2});
  Tensor out = cat({a, b, c}, 1);
  EXPECT_EQ(grad_fn_name(out), "CatBackward0");
  (out * weights_like(out)).sum().backward();
  // W = [[1..6],[7..12]]; a gets columns 0..2, b column 3
  EXPECT_EQ(vals(a.grad()), (V{1, 2, 3, 7, 8, 9}));
  EXPECT_EQ(vals(b.grad()), (V{4, 10}));
  EXPECT_FALSE(c.grad().defined());
  // float64 input promoted with float32: the gradient comes back as float64
  Tensor d = ar({2}, kFloat64).requires_grad_(), f = ar({3});
  Tensor o2 = cat({d, f});
  EXPECT_EQ(o2.dtype(), kFloat64);
  o2.sum().backward();
  EXPECT_EQ(d.grad().dtype(), kFloat64);
  EXPECT_EQ(vals(d.grad()), (V{1, 1}));
}

TEST(IndexStack, ValuesShapesAndBackward) {
  Tensor a = ar({2, 3}), b = ar({2, 3}) + 10;
  EXPECT_EQ(shape(stack({a, b}, 0)), (I{2, 2, 3}));
  Tensor s1 = stack({a, b}, 1);
  EXPECT_EQ(shape(s1), (I{2, 2, 3}));
  EXPECT_EQ(vals(s1), (V{0, 1, 2, 10, 11, 12, 3, 4, 5, 13, 14, 15}));
  Tensor s2 = stack({a, b}, -1);
  EXPECT_EQ(shape(s2), (I{2, 3, 2}));
  EXPECT_EQ(vals(s2), (V{0, 10, 1, 11, 2, 12, 3, 13, 4, 14, 5, 15}));
  EXPECT_EQ(stack({ar({2}), ar({2}, kFloat64)}).dtype(), kFloat64);
  expect_error([] { stack({zeros({2}), zeros({3})}); },
               "[stack] stack expects each tensor to be equal size, but got [2] at entry 0 and [3] at entry 1");
  expect_error([] { stack(std::vector<Tensor>{}); }, "[stack] stack expects a non-empty TensorList");
  expect_error([] { stack({zeros({2}), zeros({2})}, 3); },
               "[stack] Dimension out of range (expected to be in range of [-2, 1], but got 3)");

  Tensor x = ar({3}).requires_grad_(), y = ar({3}).requires_grad_();
  Tensor st = stack({x, y}, 1);  // (3, 2)
  EXPECT_EQ(grad_fn_name(st), "StackBackward0");
  (st * weights_like(st)).sum().backward();
  EXPECT_EQ(vals(x.grad()), (V{1, 3, 5}));
  EXPECT_EQ(vals(y.grad()), (V{2, 4, 6}));
}

// stack's block-copy path (contiguous inputs of one dtype) against element-wise reads, for the block
// sizes it special-cases (1, 4, 8, 16 bytes) and others, and with a strided input (the general path)
TEST(IndexStack, BlockCopiesMatchElementReads) {
  for (int64_t inner : {1, 2, 3, 4, 5})
    for (ScalarType dt : {kFloat32, kFloat64, kBool, kInt64})
      for (bool strided : {false, true}) {
        std::vector<Tensor> ts;
        for (int64_t i = 0; i < 5; ++i) {
          Tensor base = ((ar({4, inner}) + static_cast<double>(i * 13)) * 0.37).sin() * 50;
          ts.push_back(dt == kBool ? base.gt(0) : base.to(dt));
        }
        if (strided) ts[2] = ts[2].t().contiguous().t();  // strided when inner > 1: the general path
        for (int64_t d = 0; d <= 2; ++d) {
          Tensor s = stack(ts, d);
          for (int64_t i = 0; i < 5; ++i)
            for (int64_t r = 0; r < 4; ++r)
              for (int64_t c = 0; c < inner; ++c) {
                const double want = ts[static_cast<size_t>(i)][r][c].to(kFloat64).item<double>();
                const double got =
                    (d == 0 ? s[i][r][c] : d == 1 ? s[r][i][c] : s[r][c][i]).to(kFloat64).item<double>();
                ASSERT_EQ(got, want) << "inner " << inner << " dim " << d << " tensor " << i;
              }
        }
      }
}

// ================================================================ split / chunk / unbind

TEST(IndexSplit, SplitChunkUnbindAreViews) {
  Tensor x = ar({5, 2});
  auto parts = x.split(2);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(shape(parts[0]), (I{2, 2}));
  EXPECT_EQ(shape(parts[2]), (I{1, 2}));
  EXPECT_EQ(vals(parts[2]), (V{8, 9}));
  parts[1].fill_(-1);  // writes through to x
  EXPECT_EQ(vals(x), (V{0, 1, 2, 3, -1, -1, -1, -1, 8, 9}));

  auto cols = ar({2, 5}).split(2, 1);
  ASSERT_EQ(cols.size(), 3u);
  EXPECT_EQ(vals(cols[2]), (V{4, 9}));

  auto ws = ar({6}).split_with_sizes({1, 0, 5});
  ASSERT_EQ(ws.size(), 3u);
  EXPECT_EQ(shape(ws[1]), (I{0}));
  EXPECT_EQ(vals(ws[2]), (V{1, 2, 3, 4, 5}));

  // torch.zeros(6,2).chunk(4) -> three chunks of 2; zeros(5,2).chunk(3) -> 2, 2, 1; zeros(0,2).chunk(3) -> three (0,2)
  EXPECT_EQ(zeros({6, 2}).chunk(4).size(), 3u);
  auto c5 = zeros({5, 2}).chunk(3);
  ASSERT_EQ(c5.size(), 3u);
  EXPECT_EQ(shape(c5[2]), (I{1, 2}));
  auto c0 = zeros({0, 2}).chunk(3);
  ASSERT_EQ(c0.size(), 3u);
  EXPECT_EQ(shape(c0[1]), (I{0, 2}));
  EXPECT_EQ(zeros({0, 2}).split(0).size(), 1u);

  Tensor y = ar({2, 3});
  auto rows = y.unbind(1);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(vals(rows[1]), (V{1, 4}));
  rows[2].fill_(9);
  EXPECT_EQ(vals(y), (V{0, 1, 9, 3, 4, 9}));
}

TEST(IndexSplit, Errors) {
  expect_error([] { ar({2, 5}).split(0); },
               "split_size can only be 0 if dimension size is 0, but got dimension size of 2");
  expect_error([] { ar({2, 5}).split(-1); }, "split expects split_size be non-negative, but got split_size=-1");
  expect_error([] { ar({2, 5}).split_with_sizes({1, 2}); },
               "split_with_sizes expects split_sizes to sum exactly to 2 (input tensor's size at dimension 0), but "
               "got split_sizes=[1, 2]");
  expect_error([] { ar({2, 5}).split_with_sizes({3, -1}); },
               "split_with_sizes expects split_sizes have only non-negative entries");
  expect_error([] { ar({2, 5}).chunk(0); }, "chunk expects `chunks` to be greater than 0, got: 0");
  expect_error([] { scalar_tensor(1.0).unbind(0); }, "[unbind]");
}

TEST(IndexSplit, GradientsFlowThroughPieces) {
  Tensor x = ar({4, 2}).requires_grad_();
  auto p = x.chunk(2);
  (p[0] * 2 + p[1] * 3).sum().backward();
  EXPECT_EQ(vals(x.grad()), (V{2, 2, 2, 2, 3, 3, 3, 3}));
  Tensor y = ar({2, 3}).requires_grad_();
  auto u = y.unbind(1);
  (u[0] + u[2] * 5).sum().backward();
  EXPECT_EQ(vals(y.grad()), (V{1, 0, 5, 1, 0, 5}));
}

// ================================================================ gather / scatter

TEST(IndexGather, DocExampleAndFixtures) {
  // torch.gather(tensor([[1, 2], [3, 4]]), 1, tensor([[0, 0], [1, 0]])) -> [[1, 1], [4, 3]]
  Tensor t = lt({1, 2, 3, 4}).view({2, 2});
  Tensor g = gather(t, 1, lt({0, 0, 1, 0}).view({2, 2}));
  EXPECT_EQ(g.dtype(), kInt64);
  EXPECT_EQ(ivals(g), (I{1, 1, 4, 3}));
  // index smaller than self outside dim: x (2,5), index (3? no) (1, 2) along dim 0
  Tensor x = ar({2, 5});
  EXPECT_EQ(vals(x.gather(0, lt({1, 0}).view({1, 2}))), (V{5, 1}));
  // 0-dim
  EXPECT_EQ(vals(gather(tensor({5.f, 6.f}), 0, scalar_tensor(1, TensorOptions().dtype(kInt64)))), (V{6}));

  auto fx = Fixtures::load("index.txt");
  Tensor a = fx.get("a"), gi = fx.get("gather_index");
  EXPECT_TRUE(tensors_close(gather(a, 1, gi), fx.get("gather_d1"), 0, 0, true));
  Tensor at = a.transpose(0, 2);  // non-contiguous input
  EXPECT_TRUE(tensors_close(gather(at, 1, gi.transpose(0, 2).contiguous()), fx.get("gather_t"), 0, 0, true));
  // a non-contiguous index is accepted too
  EXPECT_TRUE(tensors_close(gather(at, 1, gi.transpose(0, 2)), fx.get("gather_t"), 0, 0, true));
  // every dtype moves bits unchanged
  for (ScalarType dt : {kFloat64, kFloat16, kBFloat16, kInt32, kUInt8, kBool}) {
    Tensor ad = (a * 10).to(dt);
    EXPECT_TRUE(tensors_close(gather(ad, 1, gi), gather(a * 10, 1, gi).to(dt), 0, 0, true)) << dtype_name(dt);
  }
}

TEST(IndexGather, Errors) {
  Tensor x = ar({2, 5});
  expect_error([&] { x.gather(1, lt({7}).view({1, 1})); }, "[gather] index 7 is out of bounds for dimension 1 with size 5");
  expect_error([&] { x.gather(1, lt({-1}).view({1, 1})); },
               "[gather] index -1 is out of bounds for dimension 1 with size 5");
  expect_error([&] { x.gather(0, lt({0, 1})); }, "Index tensor must have the same number of dimensions as input tensor");
  expect_error([&] { x.gather(0, lt({0, 1}).view({1, 2}).to(kInt32)); }, "[gather] Expected dtype int64 for index");
  expect_error([&] { x.gather(1, zeros({3, 2}, TensorOptions().dtype(kInt64))); },
               "[gather] Size does not match at dimension 0 expected index [3, 2] to be smaller than self [2, 5] "
               "apart from dimension 1");
  expect_error([&] { x.gather(2, lt({0}).view({1, 1})); }, "[gather] Dimension out of range");
}

TEST(IndexGather, BackwardIsScatterAdd) {
  Tensor x = ar({2, 3}).requires_grad_();
  Tensor idx = lt({2, 2, 0, 1, 1, 1}).view({2, 3});
  Tensor g = x.gather(1, idx);
  EXPECT_EQ(grad_fn_name(g), "GatherBackward0");
  (g * weights_like(g)).sum().backward();
  // row 0: W 1,2 -> col 2, W 3 -> col 0; row 1: all of 4+5+6 -> col 1
  EXPECT_EQ(vals(x.grad()), (V{3, 0, 3, 0, 15, 0}));
}

TEST(IndexScatter, DocExamples) {
  // torch.zeros(3, 5, dtype=long).scatter(0, tensor([[0, 1, 2, 0]]), arange(1, 11).view(2, 5))
  Tensor src = arange(1, 11).view({2, 5});
  Tensor out = zeros({3, 5}, TensorOptions().dtype(kInt64)).scatter(0, lt({0, 1, 2, 0}).view({1, 4}), src);
  EXPECT_EQ(ivals(out), (I{1, 0, 0, 4, 0, 0, 2, 0, 0, 0, 0, 0, 3, 0, 0}));
  // torch.full((2, 4), 2.).scatter(1, tensor([[2], [3]]), 1.23)
  Tensor s = full({2, 4}, 2.0).scatter(1, lt({2, 3}).view({2, 1}), 1.23);
  EXPECT_TRUE(tensors_close(s, tensor({2.f, 2.f, 1.23f, 2.f, 2.f, 2.f, 2.f, 1.23f}).view({2, 4}), 0, 0));
  // torch.zeros(3, 5).scatter_add(0, tensor([[0,1,2,0,0],[0,1,2,2,2]]), ones(2, 5))
  Tensor sa = zeros({3, 5}).scatter_add(0, lt({0, 1, 2, 0, 0, 0, 1, 2, 2, 2}).view({2, 5}), ones({2, 5}));
  EXPECT_EQ(vals(sa), (V{2, 0, 0, 1, 1, 0, 2, 0, 0, 0, 0, 0, 2, 1, 1}));
  // torch.full((1,), 2048., dtype=half).scatter_add(0, tensor([0, 0]), ones(2, dtype=half)) -> [2048.]
  Tensor h = full({1}, 2048.0, TensorOptions().dtype(kFloat16));
  Tensor hs = h.scatter_add(0, lt({0, 0}), full({2}, 1.0, TensorOptions().dtype(kFloat16)));
  EXPECT_EQ(vals(hs), (V{2048}));  // each add rounds to half (2049 -> 2048), as PyTorch 1.13 gives
}

TEST(IndexScatter, Fixtures) {
  auto fx = Fixtures::load("index.txt");
  Tensor a = fx.get("a"), src = fx.get("src");
  EXPECT_TRUE(tensors_close(zeros({3, 4, 5}).scatter_add(1, fx.get("gather_index"), src), fx.get("scatter_add_d1"),
                            1e-6, 1e-6, true));
  EXPECT_TRUE(tensors_close(a.scatter(1, fx.get("scatter_index"), src), fx.get("scatter_d1"), 0, 0, true));
  // in place on a non-contiguous self: scatter into a transposed copy's view
  Tensor base = a.transpose(0, 1).contiguous();  // (4, 3, 5)
  Tensor view = base.transpose(0, 1);            // (3, 4, 5), non-contiguous
  uint32_t v0 = view._version();
  view.scatter_(1, fx.get("scatter_index"), src);
  EXPECT_GT(view._version(), v0);
  EXPECT_TRUE(tensors_close(view, fx.get("scatter_d1"), 0, 0, true));
}

TEST(IndexScatter, InPlaceAndErrors) {
  Tensor x = zeros({2, 5});
  Tensor& r = x.scatter_(1, lt({4, 0}).view({2, 1}), 3.0);
  EXPECT_TRUE(r.is_same(x));
  EXPECT_EQ(vals(x), (V{0, 0, 0, 0, 3, 3, 0, 0, 0, 0}));
  x.scatter_add_(1, lt({4, 4}).view({1, 2}), ones({1, 2}));
  EXPECT_EQ(vals(x)[4], 5);

  expect_error([&] { x.scatter(1, lt({5}).view({1, 1}), 1.0); }, "[scatter] index 5 is out of bounds for dimension 1 with size 5");
  expect_error([&] { x.scatter(1, lt({-1}).view({1, 1}), 1.0); }, "index -1 is out of bounds for dimension 1 with size 5");
  expect_error([&] { x.scatter(0, lt({0}).view({1, 1}), ones({1, 1}, TensorOptions().dtype(kFloat64))); },
               "[scatter] Expected self.dtype to be equal to src.dtype");
  expect_error([&] { x.scatter(0, lt({0, 1}).view({1, 2}), ones({1, 1})); },
               "Expected index [1, 2] to be smaller than self [2, 5] apart from dimension 0 and to be smaller size "
               "than src [1, 1]");
  expect_error([&] { x.scatter(0, lt({0, 1}), 1.0); }, "Index tensor must have the same number of dimensions as self tensor");
  // torch: x.scatter(0, tensor([[0,1,1,1,1,1]]), 1.) -> Expected index [1, 6] to be smaller than self [2, 5] apart from dimension 0
  expect_error([&] { x.scatter(0, zeros({1, 6}, TensorOptions().dtype(kInt64)), 1.0); },
               "[scatter] Expected index [1, 6] to be smaller than self [2, 5] apart from dimension 0");
  // a failed bounds check leaves self untouched
  Tensor y = zeros({3});
  expect_error([&] { y.scatter_(0, lt({0, 1, 9}), 1.0); }, "out of bounds");
  EXPECT_EQ(vals(y), (V{0, 0, 0}));
  // in place on a leaf that requires grad
  Tensor leaf = zeros({3}).requires_grad_();
  expect_error([&] { leaf.scatter_(0, lt({0}), 1.0); }, "a leaf Variable that requires grad");
}

TEST(IndexScatter, Backward) {
  Tensor x = ar({2, 3}).requires_grad_(), src = (ar({2, 2}) + 10).requires_grad_();
  Tensor idx = lt({2, 0, 1, 2}).view({2, 2});
  Tensor out = x.scatter(1, idx, src);
  EXPECT_EQ(grad_fn_name(out), "ScatterBackward0");
  (out * weights_like(out)).sum().backward();
  // overwritten positions (0,2),(0,0),(1,1),(1,2) give x no gradient; src gets W at its targets
  EXPECT_EQ(vals(x.grad()), (V{0, 2, 0, 4, 0, 0}));
  EXPECT_EQ(vals(src.grad()), (V{3, 1, 5, 6}));

  Tensor x2 = ar({2, 3}).requires_grad_(), s2 = ar({1, 3}).requires_grad_();
  Tensor o2 = x2.scatter_add(0, lt({1, 1, 0}).view({1, 3}), s2);
  EXPECT_EQ(grad_fn_name(o2), "ScatterAddBackward0");
  (o2 * weights_like(o2)).sum().backward();
  EXPECT_EQ(vals(x2.grad()), (V{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(vals(s2.grad()), (V{4, 5, 3}));

  // src larger than index: the gradient of the unused part is zero
  Tensor x3 = zeros({3}), s3 = ar({4}).requires_grad_();
  (x3.scatter(0, lt({2, 0}), s3) * tensor({1.f, 2.f, 3.f})).sum().backward();
  EXPECT_EQ(vals(s3.grad()), (V{3, 1, 0, 0}));

  // in place on a non-leaf, src requiring grad
  Tensor x4 = ar({4}).requires_grad_(), s4 = tensor({10.f}).requires_grad_();
  Tensor y4 = x4 * 1;
  y4.scatter_(0, lt({1}), s4);
  EXPECT_EQ(vals(y4), (V{0, 10, 2, 3}));
  (y4 * tensor({1.f, 2.f, 3.f, 4.f})).sum().backward();
  EXPECT_EQ(vals(x4.grad()), (V{1, 0, 3, 4}));
  EXPECT_EQ(vals(s4.grad()), (V{2}));
}

// ================================================================ index_select / index_add

TEST(IndexSelect, ValuesAndLayouts) {
  Tensor x = ar({4, 3});
  Tensor r = x.index_select(0, lt({3, 0, 3}));  // the embedding lookup path
  EXPECT_EQ(vals(r), (V{9, 10, 11, 0, 1, 2, 9, 10, 11}));
  EXPECT_EQ(vals(x.index_select(1, lt({2, 2, 0}))), (V{2, 2, 0, 5, 5, 3, 8, 8, 6, 11, 11, 9}));
  EXPECT_EQ(vals(x.index_select(-1, lt({1}).to(kInt32))), (V{1, 4, 7, 10}));
  EXPECT_EQ(shape(x.index_select(0, scalar_tensor(1, TensorOptions().dtype(kInt64)))), (I{1, 3}));
  EXPECT_EQ(shape(x.index_select(0, zeros({0}, TensorOptions().dtype(kInt64)))), (I{0, 3}));
  // torch.tensor(5.).index_select(0, tensor([0])) -> tensor(5.)
  Tensor s = scalar_tensor(5.0).index_select(0, lt({0}));
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(vals(s), (V{5}));
  // a big table: rows move whole
  Tensor table = ar({1000, 64});
  Tensor rows = table.index_select(0, lt({999, 0, 500}));
  EXPECT_EQ(vals(rows.select(0, 0).slice(0, 0, 2)), (V{999 * 64, 999 * 64 + 1}));
  EXPECT_EQ(vals(rows.select(0, 2))[63], 500 * 64 + 63);

  auto fx = Fixtures::load("index.txt");
  Tensor a = fx.get("a");
  Tensor ii = lt({3, 0, 3, 1, 2, 3});
  EXPECT_TRUE(tensors_close(a.index_select(1, ii), fx.get("index_select_d1"), 0, 0, true));
  EXPECT_TRUE(tensors_close(a.transpose(1, 2).index_select(2, ii), fx.get("index_select_d2_t"), 0, 0, true));
  for (ScalarType dt : {kFloat16, kInt64, kBool}) {
    Tensor ad = (a * 10).to(dt);
    EXPECT_TRUE(tensors_close(ad.index_select(1, ii), (a * 10).index_select(1, ii).to(dt), 0, 0, true));
  }
}

TEST(IndexSelect, ErrorsAndBackward) {
  Tensor x = ar({2, 5});
  // PyTorch 1.13 rejects negative indices in index_select (advanced indexing wraps them)
  expect_error([&] { x.index_select(1, lt({-1})); }, "[index_select] index -1 is out of bounds for dimension 1 with size 5");
  expect_error([&] { x.index_select(1, lt({5})); }, "[index_select] index 5 is out of bounds for dimension 1 with size 5");
  expect_error([&] { x.index_select(0, lt({0}).view({1, 1})); }, "Index is supposed to be a vector");
  expect_error([&] { x.index_select(0, tensor({1.f})); }, "Expected dtype int32 or int64 for index");

  Tensor w = ar({3, 2}).requires_grad_();
  Tensor e = w.index_select(0, lt({2, 0, 2, 2}));
  EXPECT_EQ(grad_fn_name(e), "IndexSelectBackward0");
  (e * weights_like(e)).sum().backward();
  // row 2 collects W rows 0, 2, 3: (1+5+7, 2+6+8); row 0 gets (3, 4)
  EXPECT_EQ(vals(w.grad()), (V{3, 4, 0, 0, 13, 16}));
}

TEST(IndexAdd, ValuesFixturesAndBackward) {
  // torch.zeros(3, dtype=long).index_add(0, tensor([0, 1]), ones(2, dtype=long), alpha=2) -> [2, 2, 0]
  Tensor il = zeros({3}, TensorOptions().dtype(kInt64)).index_add(0, lt({0, 1}), ones({2}, TensorOptions().dtype(kInt64)), 2);
  EXPECT_EQ(ivals(il), (I{2, 2, 0}));
  Tensor x = zeros({3, 2});
  Tensor r = x.index_add(0, lt({2, 0, 2}), ar({3, 2}));
  EXPECT_EQ(vals(r), (V{2, 3, 0, 0, 4, 6}));
  EXPECT_EQ(vals(x), (V{0, 0, 0, 0, 0, 0}));  // out of place
  EXPECT_EQ(vals(zeros({2, 3}).index_add(1, lt({1, 1}), ones({2, 2}), -1.5)), (V{0, -3, 0, 0, -3, 0}));
  Tensor b = ones({4});
  b.index_add_(0, lt({3, 3, 3}), tensor({1.f, 2.f, 3.f}));
  EXPECT_EQ(vals(b), (V{1, 1, 1, 7}));

  auto fx = Fixtures::load("index.txt");
  Tensor a = fx.get("a"), src = fx.get("index_add_src");
  EXPECT_TRUE(tensors_close(a.index_add(1, lt({3, 0, 3, 1, 2, 3}), src, -0.5), fx.get("index_add_d1"), 1e-6, 1e-6, true));
  EXPECT_TRUE(tensors_close(a.view({3, 20}).index_add(0, lt({2, 2, 0}), src.view({3, 30}).slice(1, 0, 20)),
                            fx.get("index_add_d0"), 1e-6, 1e-6, true));
  // non-contiguous self in place
  Tensor base = zeros({2, 3});
  Tensor tv = base.t();  // (3, 2)
  tv.index_add_(0, lt({1, 1}), ones({2, 2}));
  EXPECT_EQ(vals(base), (V{0, 2, 0, 0, 2, 0}));

  expect_error([] { ar({2, 5}).index_add(0, lt({0, 1, 1}), ones({2, 5})); },
               "[index_add] Number of indices (3) should be equal to source.size(dim): (2), for dim: 0");
  expect_error([] { ar({2, 5}).index_add(0, lt({0, 1}), ones({2, 5}, TensorOptions().dtype(kFloat64))); },
               "[index_add] self (float32) and source (float64) must have the same scalar type");
  expect_error([] { ar({2, 5}).index_add(0, lt({0, 1}), ones({2, 4})); }, "[index_add] source shape (2, 4)");
  expect_error([] { ar({2, 5}).index_add(0, lt({0, 2}), ones({2, 5})); },
               "[index_add] index 2 is out of bounds for dimension 0 with size 2");

  Tensor s = ar({2, 2}).requires_grad_(), t = zeros({3, 2}).requires_grad_();
  Tensor o = t.index_add(0, lt({2, 0}), s, 3);
  EXPECT_EQ(grad_fn_name(o), "IndexAddBackward0");
  (o * weights_like(o)).sum().backward();
  EXPECT_EQ(vals(t.grad()), (V{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(vals(s.grad()), (V{15, 18, 3, 6}));  // alpha * W rows 2, 0
}

// ================================================================ one_hot / repeat / flip

TEST(IndexOneHot, ValuesAndErrors) {
  Tensor o = one_hot(lt({0, 2, 1}));
  EXPECT_EQ(o.dtype(), kInt64);
  EXPECT_EQ(shape(o), (I{3, 3}));
  EXPECT_EQ(ivals(o), (I{1, 0, 0, 0, 0, 1, 0, 1, 0}));
  Tensor o2 = one_hot(lt({3, 0}).view({2, 1}), 5);
  EXPECT_EQ(shape(o2), (I{2, 1, 5}));
  EXPECT_EQ(ivals(o2), (I{0, 0, 0, 1, 0, 1, 0, 0, 0, 0}));
  EXPECT_EQ(shape(one_hot(zeros({0}, TensorOptions().dtype(kInt64)), 3)), (I{0, 3}));
  expect_error([] { one_hot(lt({0, 3}), 3); }, "Class values must be smaller than num_classes.");
  expect_error([] { one_hot(lt({0, -1}), 3); }, "Class values must be non-negative.");
  expect_error([] { one_hot(tensor({0.f})); }, "one_hot is only applicable to index tensor");
  expect_error([] { one_hot(zeros({0}, TensorOptions().dtype(kInt64))); },
               "Can not infer total number of classes from empty tensor.");
}

TEST(IndexRepeat, ValuesAndBackward) {
  // torch.tensor([1, 2, 3]).repeat(4, 2): four rows of [1, 2, 3, 1, 2, 3]
  Tensor r = lt({1, 2, 3}).repeat({4, 2});
  EXPECT_EQ(shape(r), (I{4, 6}));
  for (int i = 0; i < 4; ++i) EXPECT_EQ(ivals(r.select(0, i)), (I{1, 2, 3, 1, 2, 3}));
  EXPECT_EQ(shape(lt({1, 2, 3}).repeat({4, 2, 1})), (I{4, 2, 3}));
  EXPECT_EQ(vals(ar({2, 2}).t().repeat({1, 2})), (V{0, 2, 0, 2, 1, 3, 1, 3}));
  auto fx = Fixtures::load("index.txt");
  EXPECT_TRUE(tensors_close(fx.get("a").slice(1, 0, 2).slice(2, 0, 3).repeat({2, 1, 2, 1}), fx.get("repeat"), 0, 0, true));
  expect_error([] { ar({2, 2}).repeat({2}); },
               "[repeat] Number of dimensions of repeat dims can not be smaller than number of dimensions of tensor");
  expect_error([] { ar({2, 2}).repeat({2, -1}); }, "[repeat] Trying to create tensor with negative dimension -2: [4, -2]");

  Tensor y = ar({3, 4}).requires_grad_();
  Tensor o = y.repeat({2, 3});
  EXPECT_EQ(grad_fn_name(o), "RepeatBackward0");
  (o * weights_like(o)).sum().backward();
  // (o * arange(1, 73).view(6, 12)).sum() with torch: y.grad
  EXPECT_EQ(vals(y.grad()), (V{138, 144, 150, 156, 210, 216, 222, 228, 282, 288, 294, 300}));
}

TEST(IndexFlip, ValuesAndBackward) {
  Tensor y = ar({3, 4});
  EXPECT_EQ(vals(y.flip({0})), (V{8, 9, 10, 11, 4, 5, 6, 7, 0, 1, 2, 3}));
  EXPECT_EQ(vals(y.flip({-1, 0})), (V{11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0}));
  EXPECT_EQ(vals(y.t().flip({1})), (V{8, 4, 0, 9, 5, 1, 10, 6, 2, 11, 7, 3}));
  EXPECT_EQ(vals(y.flip({})), vals(y));
  auto fx = Fixtures::load("index.txt");
  EXPECT_TRUE(tensors_close(fx.get("a").flip({0, 2}), fx.get("flip"), 0, 0, true));
  expect_error([&] { y.flip({0, -2}); }, "[flip] dim 0 appears multiple times in the list of dims");
  Tensor x = ar({4}).requires_grad_();
  Tensor f = x.flip({0});
  EXPECT_EQ(grad_fn_name(f), "FlipBackward0");
  (f * weights_like(f)).sum().backward();
  EXPECT_EQ(vals(x.grad()), (V{4, 3, 2, 1}));
}

// ================================================================ masked_select / nonzero / tril / triu

TEST(IndexMasked, MaskedSelectAndNonzero) {
  Tensor x = ar({2, 5});
  // torch.masked_select(x, tensor([1, 0, 1, 0, 1], dtype=uint8)) -> [0, 2, 4, 5, 7, 9]
  EXPECT_EQ(vals(masked_select(x, tensor({true, false, true, false, true}))), (V{0, 2, 4, 5, 7, 9}));
  EXPECT_EQ(vals(masked_select(x, tensor({1, 0, 1, 0, 1}).to(kUInt8))), (V{0, 2, 4, 5, 7, 9}));
  EXPECT_EQ(vals(masked_select(x, x > 6.5)), (V{7, 8, 9}));
  // x broadcast against the mask
  EXPECT_EQ(vals(masked_select(ar({3}), tensor({true, false, false, true, true, true}).view({2, 3}))), (V{0, 0, 1, 2}));
  expect_error([&] { masked_select(x, lt({1, 0, 1, 0, 1})); }, "expected BoolTensor or ByteTensor for mask");
  auto fx = Fixtures::load("index.txt");
  Tensor a = fx.get("a");
  EXPECT_TRUE(tensors_close(masked_select(a, (a > 0.3).slice(1, 0, 1)), fx.get("masked_select"), 0, 0, true));
  EXPECT_TRUE(tensors_close(nonzero((a > 0.3).select(0, 1)), fx.get("nonzero"), 0, 0, true));

  Tensor n = nonzero(tensor({0.f, 1.5f, 0.f, -2.f}).view({2, 2}));
  EXPECT_EQ(shape(n), (I{2, 2}));
  EXPECT_EQ(ivals(n), (I{0, 1, 1, 1}));
  EXPECT_EQ(shape(nonzero(scalar_tensor(3.0))), (I{1, 0}));
  EXPECT_EQ(shape(nonzero(scalar_tensor(0.0))), (I{0, 0}));

  Tensor w = ar({2, 3}).requires_grad_();
  Tensor m = masked_select(w, tensor({true, false, true}));
  EXPECT_EQ(grad_fn_name(m), "MaskedSelectBackward0");
  (m * weights_like(m)).sum().backward();
  EXPECT_EQ(vals(w.grad()), (V{1, 0, 2, 3, 0, 4}));
  // a broadcast input: gradients of the copies add up
  Tensor v = ar({3}).requires_grad_();
  masked_select(v, ones({2, 3}, TensorOptions().dtype(kBool))).sum().backward();
  EXPECT_EQ(vals(v.grad()), (V{2, 2, 2}));
}

TEST(IndexTri, TrilTriu) {
  Tensor y = ar({3, 4});
  EXPECT_EQ(vals(tril(y)), (V{0, 0, 0, 0, 4, 5, 0, 0, 8, 9, 10, 0}));
  EXPECT_EQ(vals(tril(y, 1)), (V{0, 1, 0, 0, 4, 5, 6, 0, 8, 9, 10, 11}));
  EXPECT_EQ(vals(triu(y, -1)), (V{0, 1, 2, 3, 4, 5, 6, 7, 0, 9, 10, 11}));
  EXPECT_EQ(vals(triu(y, 2)), (V{0, 0, 2, 3, 0, 0, 0, 7, 0, 0, 0, 0}));
  EXPECT_EQ(vals(tril(y, -5)), (V(12, 0.0)));
  EXPECT_EQ(ivals(triu(ar({2, 2}, kInt64))), (I{0, 1, 0, 3}));
  auto fx = Fixtures::load("index.txt");
  Tensor a = fx.get("a");
  EXPECT_TRUE(tensors_close(tril(a, -1), fx.get("tril_m1"), 0, 0, true));
  EXPECT_TRUE(tensors_close(triu(a.transpose(1, 2), 2), fx.get("triu_2"), 0, 0, true));
  expect_error([] { tril(zeros({3})); }, "[tril] input tensor must have at least 2 dimensions");
  Tensor x = ar({2, 2}).requires_grad_();
  Tensor t = tril(x);
  EXPECT_EQ(grad_fn_name(t), "TrilBackward0");
  (t * weights_like(t)).sum().backward();
  EXPECT_EQ(vals(x.grad()), (V{1, 0, 3, 4}));
  Tensor x2 = ar({2, 2}).requires_grad_();
  Tensor u = triu(x2, 1);
  EXPECT_EQ(grad_fn_name(u), "TriuBackward0");
  u.sum().backward();
  EXPECT_EQ(vals(x2.grad()), (V{0, 1, 0, 0}));
}

// ================================================================ basic indexing

TEST(IndexBasic, PythonSliceSemantics) {
  Tensor x = ar({10}, kInt64);
  // literals from PyTorch: x = torch.arange(10)
  EXPECT_EQ(ivals(x.index({Slice(2, 5)})), (I{2, 3, 4}));                       // x[2:5]
  EXPECT_EQ(ivals(x.index({Slice(-3)})), (I{7, 8, 9}));                         // x[-3:]
  EXPECT_EQ(ivals(x.index({Slice(None, -7)})), (I{0, 1, 2}));                   // x[:-7]
  EXPECT_EQ(ivals(x.index({Slice(None, None, 3)})), (I{0, 3, 6, 9}));           // x[::3]
  EXPECT_EQ(ivals(x.index({Slice(8, 2)})), (I{}));                              // x[8:2]
  EXPECT_EQ(ivals(x.index({Slice(-100, 100)})), (I{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));  // x[-100:100]
  EXPECT_EQ(ivals(x.index({Slice(1, 8, 3)})), (I{1, 4, 7}));                    // x[1:8:3]
  EXPECT_EQ(ivals(x.index({Slice(-4, -1, 2)})), (I{6, 8}));                     // x[-4:-1:2]
  EXPECT_EQ(ivals(x.index({Slice(5, -5)})), (I{}));                             // x[5:-5]
  EXPECT_EQ(ivals(x.index({-1})), (I{9}));                                      // x[-1]
  EXPECT_EQ(x.index({-1}).dim(), 0);
  expect_error([&] { x.index({Slice(None, None, 0)}); }, "step must be greater than zero");
  expect_error([&] { x.index({Slice(None, None, -1)}); }, "step must be greater than zero");
}

TEST(IndexBasic, IntegersNoneEllipsisBool) {
  Tensor x = ar({2, 3, 4});
  EXPECT_EQ(vals(x.index({1, -1})), (V{20, 21, 22, 23}));
  EXPECT_EQ(vals(x.index({-2, 1, -1})), (V{7}));
  EXPECT_EQ(shape(x.index({None})), (I{1, 2, 3, 4}));
  EXPECT_EQ(shape(x.index({None, Ellipsis, None})), (I{1, 2, 3, 4, 1}));  // x[None, ..., None]
  EXPECT_EQ(shape(x.index({"...", 0})), (I{2, 3}));
  EXPECT_EQ(vals(x.index({Ellipsis, 0, 1})), (V{1, 13}));
  EXPECT_EQ(shape(x.index({Slice(), None, 1})), (I{2, 1, 4}));
  EXPECT_EQ(shape(x.index({true})), (I{1, 2, 3, 4}));
  EXPECT_EQ(shape(x.index({false})), (I{0, 2, 3, 4}));
  EXPECT_EQ(shape(x.index({0, scalar_tensor(true, TensorOptions().dtype(kBool))})), (I{1, 3, 4}));  // x[0, tensor(True)]
  EXPECT_EQ(vals(x.index({scalar_tensor(1, TensorOptions().dtype(kInt64)), 2, 3})), (V{23}));
  // a 0-dim int64 tensor selects (a view)
  Tensor sel = x.index({scalar_tensor(1, TensorOptions().dtype(kInt64))});
  EXPECT_EQ(shape(sel), (I{3, 4}));
  EXPECT_EQ(sel.storage_offset(), 12);

  expect_error([&] { x.index({2}); }, "index 2 is out of bounds for dimension 0 with size 2");
  expect_error([&] { x.index({0, 7}); }, "index 7 is out of bounds for dimension 1 with size 3");
  expect_error([&] { ar({3}).index({5}); }, "index 5 is out of bounds for dimension 0 with size 3");
  expect_error([&] { x.index({0, 0, 0, 0}); }, "too many indices for tensor of dimension 3");
  expect_error([] { TensorIndex bad("..x"); }, "\"...\"");
}

TEST(IndexBasic, ResultsAreViews) {
  Tensor x = ar({3, 4});
  Tensor v = x.index({Slice(1, 3), Slice(None, None, 2)});  // x[1:3, ::2]
  EXPECT_EQ(vals(v), (V{4, 6, 8, 10}));
  EXPECT_TRUE(v.is_view());
  v.fill_(-1);
  EXPECT_EQ(vals(x), (V{0, 1, 2, 3, -1, 5, -1, 7, -1, 9, -1, 11}));
  Tensor row = x.index({0});
  row.mul_(10);
  EXPECT_EQ(vals(x.index({0})), (V{0, 10, 20, 30}));
  Tensor e = x.index({None, Ellipsis, 1});
  e.zero_();
  EXPECT_EQ(vals(x.index({Slice(), 1})), (V{0, 0, 0}));
  // x[...] is a new view of everything (an alias, not x itself)
  Tensor z = zeros({2, 2});
  Tensor all = z.index({Ellipsis});
  EXPECT_FALSE(all.is_same(z));
  EXPECT_TRUE(all.is_view());
  all.fill_(4);
  EXPECT_EQ(vals(z), (V{4, 4, 4, 4}));
}

TEST(IndexBasic, GradientThroughViews) {
  Tensor x = ar({3, 4}).requires_grad_();
  Tensor v = x.index({Slice(1), -1});  // x[1:, -1]
  (v * tensor({2.f, 3.f})).sum().backward();
  EXPECT_EQ(vals(x.grad()), (V{0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 3}));
}

// ================================================================ advanced indexing

namespace {

struct AdvCase {
  const char* name;
  std::vector<TensorIndex> idx;
};

Tensor M() { return tensor({true, false, true, false, true, true}).view({2, 3}); }

std::vector<AdvCase> adv_cases() {
  // mirrors INDEX_CASES of tests/fixtures/gen_index.py (the Python expression is the record's description)
  Tensor empty_long = zeros({0}, TensorOptions().dtype(kInt64));
  return {
      {"rows", {lt({1, 0, 1})}},                                                   // X[tensor([1, 0, 1])]
      {"dim1_neg", {Slice(), lt({2, -1})}},                                        // X[:, tensor([2, -1])]
      {"split", {lt({0, 1, 1, 0}).view({2, 2}), Slice(), lt({3, 0})}},             // X[t([[0,1],[1,0]]), :, t([3,0])]
      {"adjacent_bcast", {Slice(), lt({0, 2}).view({2, 1}), lt({0, 1, 3})}},       // X[:, t([[0],[2]]), t([0,1,3])]
      {"none_between", {lt({1}), None, lt({0, 2})}},                               // X[t([1]), None, t([0, 2])]
      {"none_first", {None, lt({1}), None, lt({0, 2})}},                           // X[None, t([1]), None, t([0, 2])]
      {"mask2d", {M()}},                                                           // X[M]
      {"mask_dim1", {Slice(), tensor({true, false, true})}},                       // X[:, t([True, False, True])]
      {"mask_then_int", {M(), lt({0, 1, 2, 3})}},                                  // X[M, t([0, 1, 2, 3])]
      {"ellipsis_last", {Ellipsis, lt({0, 3})}},                                   // X[..., t([0, 3])]
      {"int_adv_slice", {0, lt({2, 0}), Slice(1, 3)}},                             // X[0, t([2, 0]), 1:3]
      {"adv_int_adv", {lt({0, 1}), 1, lt({0, 1})}},                                // X[t([0, 1]), 1, t([0, 1])]
      {"slice_adv_neg", {Slice(1), lt({-1, -3})}},                                 // X[1:, t([-1, -3])]
      {"step_slice_adv", {Slice(), Slice(None, None, 2), lt({3, 2, 1, 0}).view({2, 2})}},  // X[:, ::2, t([[3,2],[1,0]])]
      {"bool_true", {true}},                                                       // X[True]
      {"empty_index", {empty_long}},                                               // X[t([], dtype=long)]
      {"three", {lt({1, 0}), lt({2, 2}), lt({3, -4})}},                            // X[t([1,0]), t([2,2]), t([3,-4])]
  };
}

}  // namespace

TEST(IndexAdvanced, FixturesForwardAndBackward) {
  auto fx = Fixtures::load("index.txt");
  for (const AdvCase& c : adv_cases()) {
    SCOPED_TRACE(c.name);
    Tensor x = ar({2, 3, 4}).requires_grad_();
    Tensor out = x.index(ArrayRef<TensorIndex>(c.idx));
    EXPECT_TRUE(tensors_close(out, fx.get(std::string("idx_") + c.name), 0, 0, true));
    (out * weights_like(out)).sum().backward();
    ASSERT_TRUE(x.grad().defined());
    EXPECT_TRUE(tensors_close(x.grad(), fx.get(std::string("grad_") + c.name), 0, 0, true));
  }
}

TEST(IndexAdvanced, CopiesNotViews) {
  Tensor x = ar({3, 4});
  Tensor r = x.index({lt({2, 0})});
  EXPECT_EQ(vals(r), (V{8, 9, 10, 11, 0, 1, 2, 3}));
  r.fill_(-1);
  EXPECT_EQ(vals(x)[0], 0);
  EXPECT_EQ(vals(x)[8], 8);
  Tensor y = ar({3, 4}).requires_grad_();
  Tensor o = y.index({Slice(), lt({1, 1})});
  EXPECT_EQ(grad_fn_name(o), "IndexBackward0");
  o.sum().backward();
  EXPECT_EQ(vals(y.grad()), (V{0, 2, 0, 0, 0, 2, 0, 0, 0, 2, 0, 0}));  // duplicates accumulate
  // non-contiguous source, several index tensors
  Tensor t = ar({4, 3}).t();  // (3, 4): t[i][j] = 3 j + i
  EXPECT_EQ(vals(t.index({lt({0, 2}), lt({3, 1})})), (V{9, 5}));
  // other dtypes
  EXPECT_EQ(ivals(ar({3, 4}, kInt64).index({lt({1}), lt({-1})})), (I{7}));
  EXPECT_EQ(vals(ar({5}, kFloat16).index({tensor({true, false, false, true, true})})), (V{0, 3, 4}));
}

TEST(IndexAdvanced, Errors) {
  Tensor x = ar({2, 5});
  expect_error([&] { x.index({lt({5})}); }, "index 5 is out of bounds for dimension 0 with size 2");
  expect_error([&] { x.index({lt({-3})}); }, "index -3 is out of bounds for dimension 0 with size 2");
  expect_error([&] { x.index({Slice(), lt({7})}); }, "index 7 is out of bounds for dimension 1 with size 5");
  expect_error([&] { x.index({tensor({true, false, true})}); },
               "The shape of the mask [3] at index 0 does not match the shape of the indexed tensor [2, 5] at index 0");
  expect_error([&] { x.index({Slice(), tensor({true, false, true})}); },
               "The shape of the mask [3] at index 0 does not match the shape of the indexed tensor [2, 5] at index 1");
  expect_error([&] { x.index({lt({0, 1, 0, 1}).view({2, 2}), lt({1, 2, 3})}); },
               "shape mismatch: indexing tensors could not be broadcast together with shapes [2, 2], [3]");
  expect_error([&] { x.index({lt({0}).to(kInt32)}); }, "tensors used as indices must be long, byte or bool tensors");
  expect_error([&] { x.index({tensor({0.f})}); }, "tensors used as indices must be long, byte or bool tensors");
}

// ================================================================ index_put_

TEST(IndexPut, BasicWritesThroughTheView) {
  Tensor x = zeros({3, 4});
  x.index_put_({0, Slice(1, 3)}, tensor({1.f, 2.f}));
  EXPECT_EQ(vals(x.index({0})), (V{0, 1, 2, 0}));
  x.index_put_({Slice(), -1}, 7);  // scalar fill
  EXPECT_EQ(vals(x.index({Slice(), 3})), (V{7, 7, 7}));
  x.index_put_({Slice(1), Slice(None, 2)}, tensor({5.f, 6.f}).view({1, 1, 2}));  // leading 1s are dropped
  EXPECT_EQ(vals(x), (V{0, 1, 2, 7, 5, 6, 0, 7, 5, 6, 0, 7}));
  x.index_put_({Ellipsis}, scalar_tensor(3.0));
  EXPECT_EQ(vals(x), (V(12, 3.0)));
  uint32_t v0 = x._version();
  x.index_put_({1, 1}, 0.5);
  EXPECT_GT(x._version(), v0);
  EXPECT_EQ(vals(x)[5], 0.5);
  // Y[0] = zeros(1, 2, 5) fails in PyTorch (only leading 1s beyond the target's dims are dropped)
  Tensor y = zeros({2, 5});
  expect_error([&] { y.index_put_({0}, zeros({1, 2, 5})); }, "cannot be broadcast");
  expect_error([&] { y.index_put_({0}, ones({3})); }, "cannot be broadcast");
  Tensor leaf = zeros({3}).requires_grad_();
  expect_error([&] { leaf.index_put_({0}, 1.0); }, "leaf Variable that requires grad");
  {
    NoGradGuard ng;  // allowed without grad mode (initialising parameters)
    leaf.index_put_({0}, 1.0);
  }
  EXPECT_EQ(vals(leaf), (V{1, 0, 0}));
}

namespace {

struct PutCase {
  const char* name;
  std::vector<TensorIndex> idx;
  Tensor value;
};

std::vector<PutCase> put_cases() {
  // mirrors PUT_CASES of tests/fixtures/gen_index.py
  return {
      {"dim1", {Slice(), lt({0, 2})}, ar({2, 2, 4}) + 100},                       // Y[:, t([0, 2])] = arange(16.).view(2,2,4)+100
      {"split_bcast", {lt({1, 0}), Slice(), lt({3, 0})}, tensor({10.f, 20.f, 30.f})},  // Y[t([1,0]), :, t([3,0])] = t([10,20,30])
      {"mask2d", {M()}, tensor({-1.f, -2.f, -3.f, -4.f}).view({4, 1})},              // Y[M] = t([[-1],[-2],[-3],[-4]])
      {"rows_leading1", {lt({1})}, full({1, 1, 3, 4}, 9.0)},                        // Y[t([1])] = full((1,1,3,4), 9.)
      {"int_adv", {1, lt({2, 0}), Slice(1, 3)}, tensor({5.f, 6.f, 7.f, 8.f}).view({2, 2})},  // Y[1, t([2,0]), 1:3] = ...
  };
}

}  // namespace

TEST(IndexPut, AdvancedFixturesAndGradients) {
  auto fx = Fixtures::load("index.txt");
  for (PutCase& c : put_cases()) {
    SCOPED_TRACE(c.name);
    Tensor x = ar({2, 3, 4}).requires_grad_();
    Tensor v = c.value.detach().clone().requires_grad_();
    Tensor y = x * 1;
    troupe::index_put_(y, ArrayRef<TensorIndex>(c.idx), v);
    EXPECT_TRUE(tensors_close(y, fx.get(std::string("put_") + c.name), 0, 0, true));
    (y * weights_like(y)).sum().backward();
    ASSERT_TRUE(x.grad().defined());
    ASSERT_TRUE(v.grad().defined());
    EXPECT_TRUE(tensors_close(x.grad(), fx.get(std::string("putgx_") + c.name), 0, 0, true));
    EXPECT_TRUE(tensors_close(v.grad(), fx.get(std::string("putgv_") + c.name), 0, 0, true));
  }
}

TEST(IndexPut, AdvancedInPlaceSemantics) {
  Tensor x = zeros({2, 5});
  // Y[tensor([0, 0]), tensor([1, 1])] = tensor([3., 4.]): no accumulation, a duplicate keeps one value
  x.index_put_({lt({0, 0}), lt({1, 1})}, tensor({3.f, 4.f}));
  double v = vals(x)[1];
  EXPECT_TRUE(v == 3 || v == 4);
  EXPECT_EQ(vals(x.sum())[0], v);
  // through a view: writes reach the base
  Tensor base = zeros({3, 4});
  Tensor view = base.index({Slice(1)});
  view.index_put_({Slice(), lt({0, 3})}, 2.0);
  EXPECT_EQ(vals(base), (V{0, 0, 0, 0, 2, 0, 0, 2, 2, 0, 0, 2}));
  // mask assignment with a scalar, on a non-contiguous tensor
  Tensor t = ar({4, 3}).t().contiguous().t();  // (4, 3) with strides (1, 4)
  t.index_put_({t > 6}, -1.0);
  EXPECT_EQ(vals(t), (V{0, 1, 2, 3, 4, 5, 6, -1, -1, -1, -1, -1}));
  // value aliasing the destination
  Tensor a = ar({4});
  a.index_put_({lt({0, 1})}, a.index({Slice(2)}));
  EXPECT_EQ(vals(a), (V{2, 3, 2, 3}));
  // value of another dtype is converted
  Tensor c = zeros({3}, TensorOptions().dtype(kInt64));
  c.index_put_({lt({2})}, tensor({4.0f}));
  EXPECT_EQ(ivals(c), (I{0, 0, 4}));
  // errors
  Tensor y = zeros({2, 5});
  expect_error([&] { y.index_put_({lt({1})}, ones({3, 5})); },
               "shape mismatch: value tensor of shape [3, 5] cannot be broadcast to indexing result of shape [1, 5]");
  expect_error([&] { y.index_put_({lt({2})}, 1.0); }, "index 2 is out of bounds for dimension 0 with size 2");
  EXPECT_EQ(vals(y.sum())[0], 0);
}
