// Random numbers: exact agreement with PyTorch 1.13 after manual_seed (tests/fixtures/random.txt, made by
// tests/fixtures/gen_random.py), the generator itself (mt19937 sequence, state bytes, thread safety),
// statistics of large samples, errors and autograd of the in-place fills.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/fixtures.h"
#include "tensor/autograd.h"
#include "tensor/backend.h"
#include "tensor/ops.h"
#include "tensor/random.h"

using namespace troupe;
using troupe::testing::Fixtures;
using troupe::testing::tensors_close;

namespace {

const Fixtures& fx() {
  static Fixtures f = Fixtures::load("random.txt");
  return f;
}

/// Bit-exact comparison (same dtype, same values; NaN never occurs here).
::testing::AssertionResult exact(const Tensor& actual, const Tensor& expected) {
  return tensors_close(actual, expected, 0.0, 0.0, /*check_dtype=*/true);
}

Tensor filled(IntArrayRef sizes, ScalarType dt, const std::function<void(Tensor&)>& f) {
  Tensor t = empty(sizes, dtype(dt));
  f(t);
  return t;
}

struct Case {
  std::string name;
  std::function<Tensor()> make;
};

std::vector<Case> cases() {
  return {
      {"rand5", [] { return rand({5}); }},
      {"rand3x4_f64", [] { return rand({3, 4}, dtype(kFloat64)); }},
      {"randn5", [] { return randn({5}); }},
      {"randn20", [] { return randn({20}); }},
      {"randn17", [] { return randn({17}); }},
      {"randn16", [] { return randn({16}); }},
      {"randn15", [] { return randn({15}); }},
      {"randn20_f64", [] { return randn({20}, dtype(kFloat64)); }},
      {"randn5_f64", [] { return randn({5}, dtype(kFloat64)); }},
      {"randn2x3x4", [] { return randn({2, 3, 4}); }},
      {"randint8", [] { return randint(0, 10, {8}); }},
      {"randint_neg", [] { return randint(-50, 50, {2, 5}); }},
      {"randint_wide", [] { return randint(-3, int64_t(1) << 40, {6}); }},
      {"randint_i32", [] { return randint(0, 1000, {5}, dtype(kInt32)); }},
      {"randint_f32", [] { return randint(0, 10, {5}, dtype(kFloat32)); }},
      {"randperm10", [] { return randperm(10); }},
      {"randperm100", [] { return randperm(100); }},
      {"normal20", [] { return filled({20}, kFloat32, [](Tensor& t) { t.normal_(2, 3); }); }},
      {"normal7", [] { return filled({7}, kFloat32, [](Tensor& t) { t.normal_(2, 3); }); }},
      {"normal37_f64", [] { return filled({37}, kFloat64, [](Tensor& t) { t.normal_(-1, 0.5); }); }},
      {"uniform10", [] { return filled({10}, kFloat32, [](Tensor& t) { t.uniform_(-1, 1); }); }},
      {"uniform10_odd", [] { return filled({10}, kFloat32, [](Tensor& t) { t.uniform_(-3.7, 11.1); }); }},
      {"uniform10_f64", [] { return filled({10}, kFloat64, [](Tensor& t) { t.uniform_(-3.7, 11.1); }); }},
      {"bernoulli10", [] { return bernoulli(full({10}, 0.3)); }},
      {"bernoulli10_f64", [] { return bernoulli(full({10}, 0.3, dtype(kFloat64))); }},
      {"bernoulli_scalar", [] { return filled({12}, kFloat32, [](Tensor& t) { t.bernoulli_(0.3); }); }},
      {"rand20_f16", [] { return rand({20}, dtype(kFloat16)); }},
      {"rand20_bf16", [] { return rand({20}, dtype(kBFloat16)); }},
      {"uniform10_f16", [] { return filled({10}, kFloat16, [](Tensor& t) { t.uniform_(-3.7, 11.1); }); }},
      {"randn37_f16", [] { return randn({37}, dtype(kFloat16)); }},
      {"randn37_bf16", [] { return randn({37}, dtype(kBFloat16)); }},
      {"randn5_f16", [] { return randn({5}, dtype(kFloat16)); }},
      {"normal40_bf16", [] { return filled({40}, kBFloat16, [](Tensor& t) { t.normal_(0.5, 2); }); }},
      {"seq",
       [] {
         Tensor a = randn({3}), b = rand({2}), c = randn({3}), d = randn({3}, dtype(kFloat64));
         return cat({a.to(kFloat64), b.to(kFloat64), c.to(kFloat64), d});
       }},
      {"normal_t",
       [] {
         Tensor t = empty({5, 4}).t();
         t.normal_();
         return t.contiguous();
       }},
      {"uniform_t",
       [] {
         Tensor t = empty({5, 4}).t();
         t.uniform_();
         return t.contiguous();
       }},
  };
}

}  // namespace

// ---------------------------------------------------------------- agreement with PyTorch

TEST(RandomTorch, EveryCaseMatchesPyTorchExactly) {
  int checked = 0;
  for (const auto& c : cases()) {
    for (uint64_t seed : {0, 42, 1234}) {
      std::string name = c.name + "_s" + std::to_string(seed);
      ASSERT_TRUE(fx().has(name)) << name;
      manual_seed(seed);
      Tensor got = c.make();
      EXPECT_TRUE(exact(got, fx().get(name))) << name;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 3 * static_cast<int>(cases().size()));
}

TEST(RandomTorch, LargeSamplesMatch) {
  manual_seed(0);
  EXPECT_TRUE(exact(randn({1000}), fx().get("randn1000_s0")));
  manual_seed(0);
  EXPECT_TRUE(exact(randn({100}, dtype(kFloat64)), fx().get("randn100_f64_s0")));
}

TEST(RandomTorch, VectorizedAndScalarNormalKernelsAgree) {
  // The float32 kernel has an AVX2 path and a scalar path; both must give PyTorch's numbers.
  bool prev = cpu::set_vectorized_normal(false);
  manual_seed(0);
  Tensor scalar_path = randn({1000});
  manual_seed(77);
  Tensor scalar_big = randn({1 << 16}, dtype(kFloat32));
  cpu::set_vectorized_normal(true);
  manual_seed(77);
  Tensor vec_big = randn({1 << 16});
  cpu::set_vectorized_normal(prev);
  EXPECT_TRUE(exact(scalar_path, fx().get("randn1000_s0")));
  EXPECT_TRUE(exact(vec_big, scalar_big));
}

TEST(RandomTorch, StateBytesMatchTorchGetRngState) {
  manual_seed(42);
  randn({3});
  std::vector<uint8_t> mine = default_generator().get_state();
  std::vector<int64_t> torch_state = fx().ints("state_after_randn3_s42");
  ASSERT_EQ(mine.size(), Generator::kStateSize);
  ASSERT_EQ(torch_state.size(), Generator::kStateSize);
  int differ = 0;
  for (size_t i = 0; i < mine.size(); ++i) {
    bool padding = (i >= 5044 && i < 5048) || i >= 5053;
    if (!padding && mine[i] != static_cast<uint8_t>(torch_state[i])) ++differ;
  }
  EXPECT_EQ(differ, 0);
  // restoring torch's bytes reproduces the rest of the stream, cached normal value included
  std::vector<uint8_t> bytes(torch_state.begin(), torch_state.end());
  Generator g;
  g.set_state(bytes);
  Tensor a = randn({5}, g);
  Tensor b = randn({5});
  EXPECT_TRUE(exact(a, b));
}

// ---------------------------------------------------------------- the generator

TEST(RandomGenerator, SequenceIsStdMt19937) {
  for (uint64_t seed : {0ull, 1ull, 42ull, 5489ull, 0xffffffffull}) {
    Generator g(seed);
    std::mt19937 ref(static_cast<uint32_t>(seed));
    for (int i = 0; i < 2000; ++i) ASSERT_EQ(g.random(), ref()) << "seed " << seed << " draw " << i;
  }
}

TEST(RandomGenerator, Random64IsHighThenLow) {
  Generator g(3);
  std::mt19937 ref(3);
  uint64_t hi = ref(), lo = ref();
  EXPECT_EQ(g.random64(), (hi << 32) | lo);
}

TEST(RandomGenerator, SeedsKeepAll64BitsButSeedMt19937WithLow32) {
  Generator g;
  EXPECT_EQ(g.initial_seed(), Generator::kDefaultSeed);
  const uint64_t big = (uint64_t(1) << 40) + 5;
  g.manual_seed(big);
  EXPECT_EQ(g.initial_seed(), big);
  Generator h(5);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(g.random(), h.random());
  manual_seed(1234);
  EXPECT_EQ(initial_seed(), 1234u);
}

TEST(RandomGenerator, SameSeedSameNumbersDifferentSeedDifferentNumbers) {
  manual_seed(7);
  Tensor a = randn({100});
  Tensor a2 = rand({10});
  manual_seed(7);
  Tensor b = randn({100});
  Tensor b2 = rand({10});
  EXPECT_TRUE(exact(a, b));
  EXPECT_TRUE(exact(a2, b2));
  manual_seed(8);
  Tensor c = randn({100});
  EXPECT_FALSE(equal(a, c));
  // successive calls continue the stream
  manual_seed(7);
  randn({100});
  EXPECT_FALSE(equal(rand({10}), rand({10})));
}

TEST(RandomGenerator, ExplicitGeneratorsAreIndependentOfTheDefault) {
  Generator g1(99), g2(99);
  manual_seed(1);
  Tensor a = randn({50}, g1);
  randn({50});  // the default generator moves; g2 does not
  Tensor b = randn({50}, g2);
  EXPECT_TRUE(exact(a, b));
  Tensor r1 = randint(0, 100, {20}, g1), r2 = randint(0, 100, {20}, g2);
  EXPECT_TRUE(exact(r1, r2));
}

TEST(RandomGenerator, GetSetStateRoundTripsIncludingTheCachedNormal) {
  Generator g(11);
  randn({3}, g);  // odd count on the scalar path: leaves a cached value
  ASSERT_TRUE(g.next_double_normal_sample().has_value());
  std::vector<uint8_t> s = g.get_state();
  Tensor a = randn({7}, g);
  Tensor u = rand({40}, g);
  g.set_state(s);
  EXPECT_TRUE(exact(randn({7}, g), a));
  EXPECT_TRUE(exact(rand({40}, g), u));
  Generator copy = g;
  EXPECT_TRUE(exact(rand({5}, copy), rand({5}, g)));
  EXPECT_THROW(g.set_state(std::vector<uint8_t>(100)), std::invalid_argument);
}

TEST(RandomGenerator, ManualSeedDropsTheCachedNormal) {
  manual_seed(3);
  Tensor first = randn({1});
  randn({1});
  manual_seed(3);
  randn({3});  // leaves a cache
  manual_seed(3);
  EXPECT_TRUE(exact(randn({1}), first));
}

TEST(RandomGenerator, ConcurrentCallsDrawDisjointPartsOfOneStream) {
  // each call holds the generator's lock for its whole fill, so four threads' tensors are four
  // consecutive chunks of the sequence one thread would draw
  manual_seed(5);
  std::vector<Tensor> parts(4);
  {
    std::vector<std::thread> ts;
    for (int i = 0; i < 4; ++i) ts.emplace_back([&, i] { parts[i] = rand({1000}); });
    for (auto& t : ts) t.join();
  }
  manual_seed(5);
  std::vector<float> ref = rand({4000}).to_vector<float>();
  std::vector<std::vector<float>> chunks;
  for (int i = 0; i < 4; ++i) chunks.emplace_back(ref.begin() + 1000 * i, ref.begin() + 1000 * (i + 1));
  for (auto& p : parts) {
    std::vector<float> v = p.to_vector<float>();
    EXPECT_TRUE(std::find(chunks.begin(), chunks.end(), v) != chunks.end());
  }
}

// ---------------------------------------------------------------- statistics

namespace {
void mean_var(const Tensor& t, double& mean, double& var) {
  std::vector<double> v = t.to_vector<double>();
  double s = 0, s2 = 0;
  for (double x : v) s += x;
  mean = s / static_cast<double>(v.size());
  for (double x : v) s2 += (x - mean) * (x - mean);
  var = s2 / static_cast<double>(v.size() - 1);
}
}  // namespace

TEST(RandomStats, UniformMeanVarianceAndRange) {
  manual_seed(123);
  for (ScalarType dt : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    Tensor u = rand({100000}, dtype(dt));
    std::vector<double> v = u.to_vector<double>();
    EXPECT_GE(*std::min_element(v.begin(), v.end()), 0.0);
    EXPECT_LT(*std::max_element(v.begin(), v.end()), 1.0);
    double m, var;
    mean_var(u, m, var);
    EXPECT_NEAR(m, 0.5, 0.01) << dt;
    EXPECT_NEAR(var, 1.0 / 12, 0.005) << dt;
  }
  Tensor w = empty({100000});
  w.uniform_(-2, 6);
  double m, var;
  mean_var(w, m, var);
  EXPECT_NEAR(m, 2.0, 0.05);
  EXPECT_NEAR(var, 64.0 / 12, 0.1);
}

TEST(RandomStats, NormalMeanAndVarianceOnEveryPath) {
  manual_seed(321);
  double m, var;
  for (ScalarType dt : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    mean_var(randn({100000}, dtype(dt)), m, var);  // blocks of 16
    EXPECT_NEAR(m, 0.0, 0.02) << dt;
    EXPECT_NEAR(var, 1.0, 0.03) << dt;
  }
  Tensor t = empty({400, 250}).t();  // non-contiguous: the scalar Box-Muller path
  t.normal_(2, 3);
  mean_var(t, m, var);
  EXPECT_NEAR(m, 2.0, 0.05);
  EXPECT_NEAR(var, 9.0, 0.25);
  // many small tensors: the scalar path with its cache
  std::vector<Tensor> small;
  for (int i = 0; i < 20000; ++i) small.push_back(randn({5}));
  mean_var(cat(small), m, var);
  EXPECT_NEAR(m, 0.0, 0.02);
  EXPECT_NEAR(var, 1.0, 0.03);
}

TEST(RandomStats, RandintCoversItsRangeUniformly) {
  manual_seed(9);
  Tensor r = randint(-3, 7, {100000});
  EXPECT_EQ(r.dtype(), kInt64);
  std::vector<int64_t> v = r.to_vector<int64_t>();
  std::vector<int> counts(10, 0);
  for (int64_t x : v) {
    ASSERT_GE(x, -3);
    ASSERT_LT(x, 7);
    ++counts[x + 3];
  }
  for (int c : counts) EXPECT_NEAR(c, 10000, 500);
  Tensor h = randint(5, {1000});
  std::vector<int64_t> hv = h.to_vector<int64_t>();
  EXPECT_EQ(*std::min_element(hv.begin(), hv.end()), 0);
  EXPECT_EQ(*std::max_element(hv.begin(), hv.end()), 4);
  Tensor b = empty({1000}, dtype(kBool));
  b.random_(0, 2);
  double m = b.to(kFloat64).mean().item<double>();
  EXPECT_NEAR(m, 0.5, 0.08);
}

TEST(RandomStats, RandpermIsAPermutation) {
  manual_seed(4);
  for (int64_t n : {0, 1, 2, 17, 1000}) {
    std::vector<int64_t> v = randperm(n).to_vector<int64_t>();
    std::sort(v.begin(), v.end());
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(v[i], i);
  }
  Tensor f = randperm(10, dtype(kFloat32));
  EXPECT_EQ(f.dtype(), kFloat32);
  EXPECT_DOUBLE_EQ(f.sum().item<double>(), 45.0);
}

TEST(RandomStats, BernoulliProbabilities) {
  manual_seed(17);
  Tensor p = full({100000}, 0.3);
  EXPECT_NEAR(bernoulli(p).mean().item<double>(), 0.3, 0.01);
  Tensor q = empty({100000}, dtype(kFloat64));
  q.bernoulli_(0.8);
  EXPECT_NEAR(q.mean().item<double>(), 0.8, 0.01);
  EXPECT_EQ(bernoulli(zeros({100})).sum().item<double>(), 0.0);
  EXPECT_EQ(bernoulli(ones({100})).sum().item<double>(), 100.0);
}

// ---------------------------------------------------------------- options, likes, errors, autograd

TEST(RandomApi, DtypesShapesAndLikes) {
  Tensor a = rand({2, 3}, dtype(kFloat64).requires_grad(true));
  EXPECT_EQ(a.dtype(), kFloat64);
  EXPECT_TRUE(a.requires_grad());
  EXPECT_TRUE(a.is_leaf());
  EXPECT_EQ(a.sizes().vec(), (std::vector<int64_t>{2, 3}));
  Tensor b = rand_like(a);
  EXPECT_EQ(b.dtype(), kFloat64);
  EXPECT_FALSE(b.requires_grad());
  Tensor c = randn_like(a, dtype(kFloat16));
  EXPECT_EQ(c.dtype(), kFloat16);
  EXPECT_EQ(c.sizes().vec(), a.sizes().vec());
  EXPECT_EQ(rand({0}).numel(), 0);
  EXPECT_EQ(randn({}).dim(), 0);
  // like PyTorch: rand_like continues the default stream exactly like rand
  manual_seed(2);
  Tensor x = rand_like(zeros({4}));
  manual_seed(2);
  EXPECT_TRUE(exact(x, rand({4})));
}

namespace {
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}
}  // namespace

TEST(RandomApi, ErrorMessages) {
  EXPECT_EQ(error_of([] { randint(5, 5, {3}); }),
            "[randint] random_ expects 'from' to be less than 'to', but got from=5 >= to=5");
  EXPECT_EQ(error_of([] { empty({3}).random_(2, 1); }),
            "[random_] random_ expects 'from' to be less than 'to', but got from=2 >= to=1");
  EXPECT_EQ(error_of([] { empty({3}).normal_(0, -1); }), "[normal_] normal expects std >= 0.0, but found std -1");
  EXPECT_EQ(error_of([] { empty({3}).uniform_(2, 1); }),
            "[uniform_] uniform_ expects to return a [from, to) range, but found from=2 > to=1");
  EXPECT_EQ(error_of([] { empty({3}).bernoulli_(1.5); }),
            "[bernoulli_] bernoulli_ expects p to be in [0, 1], but got p=1.5");
  EXPECT_EQ(error_of([] { bernoulli(tensor({0.5, 1.5})); }), "[bernoulli] p must be in [0, 1], but got p=1.5 at index 1");
  EXPECT_EQ(error_of([] { rand({2}, dtype(kInt64)); }),
            "[rand] expected a floating point dtype, but got torch.int64");
  EXPECT_EQ(error_of([] { empty({2}, dtype(kInt64)).normal_(); }),
            "[normal_] expected a floating point dtype, but got torch.int64");
  EXPECT_EQ(error_of([] { empty({2}, dtype(kUInt8)).random_(0, 300); }),
            "[random_] to - 1 is out of bounds for unsigned char");
  EXPECT_EQ(error_of([] { randperm(-1); }), "[randperm] Trying to create tensor with negative dimension -1: [-1]");
  EXPECT_EQ(error_of([] { rand({-2}); }), "[rand] Trying to create tensor with negative dimension -2: [-2]");
}

TEST(RandomApi, InPlaceFillsAndAutograd) {
  Tensor leaf = zeros({4}, requires_grad());
  EXPECT_THROW(leaf.normal_(), std::runtime_error);
  {
    NoGradGuard ng;
    leaf.normal_();  // allowed without grad mode (how nn init works)
    leaf.uniform_(-1, 1);
  }
  Tensor x = leaf * 2;
  uint32_t v0 = x._version();
  x.normal_();
  EXPECT_GT(x._version(), v0);
  ASSERT_TRUE(x.grad_fn() != nullptr);
  EXPECT_EQ(x.grad_fn()->name(), "NormalBackward0");
  (x * 3).sum().backward();
  ASSERT_TRUE(leaf.grad().defined());
  EXPECT_EQ(leaf.grad().abs().sum().item<double>(), 0.0);  // the random values do not depend on leaf

  Tensor p = full({5}, 0.5, requires_grad());
  Tensor b = bernoulli(p);
  ASSERT_TRUE(b.grad_fn() != nullptr);
  EXPECT_EQ(b.grad_fn()->name(), "BernoulliBackward0");
}

TEST(RandomApi, RandomFillsIntegerAndFloatDtypes) {
  manual_seed(6);
  for (ScalarType dt : {kUInt8, kInt32, kInt64, kFloat32, kFloat64, kFloat16, kBFloat16}) {
    Tensor t = empty({500}, dtype(dt));
    t.random_(3, 9);
    std::vector<double> v = t.to_vector<double>();
    std::set<double> seen(v.begin(), v.end());
    EXPECT_EQ(seen, (std::set<double>{3, 4, 5, 6, 7, 8})) << dt;
  }
  Tensor t = empty({6, 4}).t();  // non-contiguous
  t.random_(0, 2);
  EXPECT_LE(t.max().item<double>(), 1.0);
}

TEST(RandomApi, CudaTensorsAreFilledFromTheCpuGenerator) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  manual_seed(31);
  Tensor g = rand({100}, device(Device(kCUDA, 0)));
  manual_seed(31);
  Tensor c = rand({100});
  EXPECT_TRUE(g.is_cuda());
  EXPECT_TRUE(exact(g.cpu(), c));
  manual_seed(31);
  Tensor gn = randn({100}, device(Device(kCUDA, 0)));
  manual_seed(31);
  EXPECT_TRUE(exact(gn.cpu(), randn({100})));
}
