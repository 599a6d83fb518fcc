// MultiStep against shared/reference/semantics.md section 3: the reference page's example (corrected
// step_count), the second check, n_steps 0 and 1, random segments against a direct reading of the
// formulas, and cross-batch exactness of MultiStepTransform.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include <troupe/rl/multistep.h>
#include <troupe/tensor/ops.h>
#include <troupe/tensor/random.h>

using namespace troupe;
using rl::MultiStep;
using rl::MultiStepTransform;
using rl::TensorDict;

namespace {

std::vector<int64_t> ints(const Tensor& t) {
  Tensor c = t.to(kInt64).contiguous().reshape({-1});
  return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}
std::vector<double> doubles(const Tensor& t) {
  Tensor c = t.to(kFloat64).contiguous().reshape({-1});
  return std::vector<double>(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
}

// One trajectory of T frames with a step_count and reward 1 (the reference page's CartPole batch).
TensorDict counted(int64_t T, const std::vector<int64_t>& done_at = {}) {
  TensorDict td({T});
  td.set("step_count", arange(T, kInt64).reshape({T, 1}));
  td.set("next.step_count", (arange(T, kInt64) + 1).reshape({T, 1}));
  td.set("next.observation", arange(T * 2, kFloat32).reshape({T, 2}));
  td.set("next.reward", ones({T, 1}));
  Tensor done = zeros({T, 1}, kBool);
  for (int64_t t : done_at) done.select(0, t).fill_(true);
  td.set("next.done", done);
  td.set("next.terminated", done.clone());
  td.set("next.truncated", zeros({T, 1}, kBool));
  return td;
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "no throw";
}

}  // namespace

TEST(MultiStep, ReferencePageExampleWithCorrectedStepCount) {
  TensorDict out = MultiStep(0.99, 4)(counted(10));
  EXPECT_EQ(ints(out.get("step_count")), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(ints(out.get("next.step_count")), (std::vector<int64_t>{4, 5, 6, 7, 8, 9, 10, 10, 10, 10}));
  EXPECT_EQ(ints(out.get("steps_to_next_obs")), (std::vector<int64_t>{4, 4, 4, 4, 4, 4, 4, 3, 2, 1}));
  auto g = doubles(out.get("gamma"));
  auto st = ints(out.get("steps_to_next_obs"));
  for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], std::pow(0.99, st[i]), 1e-6);
  auto r = doubles(out.get("next.reward"));
  EXPECT_NEAR(r[0], 3.940399, 1e-6);
  EXPECT_NEAR(r[6], 3.940399, 1e-6);
  EXPECT_NEAR(r[7], 2.9701, 1e-6);
  EXPECT_NEAR(r[8], 1.99, 1e-6);
  EXPECT_NEAR(r[9], 1.0, 1e-6);
  EXPECT_EQ(doubles(out.get("next.original_reward")), std::vector<double>(10, 1.0));
  // nonterminal false only at the batch's last frame; done / terminated / truncated are not shifted
  auto nt = ints(out.get("nonterminal"));
  EXPECT_EQ(nt, (std::vector<int64_t>{1, 1, 1, 1, 1, 1, 1, 1, 1, 0}));
  EXPECT_EQ(ints(out.get("next.done")), std::vector<int64_t>(10, 0));
  // next.observation shifted with the same index
  EXPECT_EQ(doubles(out.get("next.observation")).at(0), 6.0);  // row 3's first value
}

TEST(MultiStep, SecondCheckWithADone) {
  TensorDict out = MultiStep(0.9, 3)(counted(10, {5}));
  // idx = [2,3,4,5,5,5,8,9,9,9] shows in the shifted next.step_count (idx + 1)
  EXPECT_EQ(ints(out.get("next.step_count")), (std::vector<int64_t>{3, 4, 5, 6, 6, 6, 9, 10, 10, 10}));
  EXPECT_EQ(ints(out.get("steps_to_next_obs")), (std::vector<int64_t>{3, 3, 3, 3, 2, 1, 3, 3, 2, 1}));
  EXPECT_EQ(ints(out.get("nonterminal")), (std::vector<int64_t>{1, 1, 1, 1, 1, 0, 1, 1, 1, 0}));
  EXPECT_EQ(ints(out.get("next.done")), (std::vector<int64_t>{0, 0, 0, 0, 0, 1, 0, 0, 0, 0}));
  // the windows of t = 3, 4, 5 end on the terminated frame 5
  EXPECT_EQ(ints(out.get("next.n_step_terminated")), (std::vector<int64_t>{0, 0, 0, 1, 1, 1, 0, 0, 0, 0}));
}

TEST(MultiStep, ZeroIsIdentityAndOneKeepsRewards) {
  TensorDict in = counted(6, {2});
  TensorDict same = MultiStep(0.5, 0)(in);
  EXPECT_TRUE(equal(same, in));
  TensorDict one = MultiStep(0.5, 1)(in);
  EXPECT_TRUE(equal(one.get("next.reward"), in.get("next.reward")));
  EXPECT_EQ(ints(one.get("steps_to_next_obs")), std::vector<int64_t>(6, 1));
  EXPECT_EQ(ints(one.get("nonterminal")), (std::vector<int64_t>{1, 1, 0, 1, 1, 0}));
  EXPECT_TRUE(equal(one.get("next.step_count"), in.get("next.step_count")));
}

TEST(MultiStep, ArgumentChecks) {
  EXPECT_EQ(error_of([] { MultiStep(0.0, 3); }), "got out-of-bounds gamma decay: gamma=0.000000");
  EXPECT_EQ(error_of([] { MultiStep(1.5, 3); }), "got out-of-bounds gamma decay: gamma=1.500000");
  EXPECT_EQ(error_of([] { MultiStep(0.9, -1); }), "n_steps must be a non-negative integer, got -1");
  TensorDict bad({4});
  bad.set("next.reward", zeros({4, 2}));
  bad.set("next.done", zeros({4}, kBool));
  EXPECT_EQ(error_of([&] { MultiStep(0.9, 2)(bad); }),
            "[MultiStep] ('next', 'reward') must have the batch shape [4] (optionally followed by 1), got [4, 2]");
  TensorDict missing({4});
  EXPECT_EQ(error_of([&] { MultiStep(0.9, 2)(missing); }),
            "[MultiStep] the batch must hold ('next', 'reward') and ('next', 'done')");
}

TEST(MultiStep, RandomSegmentsMatchTheFormulas) {
  Generator gen(7);
  const int64_t B = 3, T = 17, n = 4;
  const double gamma = 0.95;
  Tensor reward = rand({B, T}, gen);
  Tensor done = rand({B, T}, gen).lt(0.2);
  TensorDict td({B, T});
  td.set("next.reward", reward);
  td.set("next.done", done);
  td.set("next.observation", rand({B, T, 2}, gen));
  TensorDict out = MultiStep(gamma, n)(td);
  auto r = doubles(reward), got_r = doubles(out.get("next.reward")), g = doubles(out.get("gamma"));
  auto d = ints(done), st = ints(out.get("steps_to_next_obs")), nt = ints(out.get("nonterminal"));
  auto obs = doubles(td.get("next.observation")), got_obs = doubles(out.get("next.observation"));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      int64_t dt = T - 1;  // first done at or after t
      for (int64_t u = t; u < T; ++u)
        if (d[b * T + u]) {
          dt = u;
          break;
        }
      const int64_t idx = std::min(t + n - 1, dt);
      double sum = 0;
      for (int64_t i = 0; i <= idx - t; ++i) sum += std::pow(gamma, i) * r[b * T + t + i];
      const int64_t k = b * T + t;
      EXPECT_NEAR(got_r[k], sum, 1e-5) << b << "," << t;
      EXPECT_EQ(st[k], idx - t + 1);
      EXPECT_NEAR(g[k], std::pow(gamma, idx - t + 1), 1e-6);
      EXPECT_EQ(nt[k], t != dt ? 1 : 0);
      EXPECT_EQ(got_obs[2 * k], obs[2 * (b * T + idx)]);
      EXPECT_EQ(got_obs[2 * k + 1], obs[2 * (b * T + idx) + 1]);
    }
}

TEST(MultiStepTransform, ExactAcrossBatchBoundaries) {
  Generator gen(11);
  const int64_t B = 3, T = 40;
  TensorDict whole({B, T});
  whole.set("next.reward", rand({B, T, 1}, gen));
  whole.set("next.done", rand({B, T, 1}, gen).lt(0.1));
  whole.set("next.observation", rand({B, T, 3}, gen));
  whole.set("observation", rand({B, T, 3}, gen));
  const TensorDict expect = MultiStep(0.9, 5)(whole);
  for (int64_t chunk : {4, 7, 13, 40}) {
    MultiStepTransform tr(0.9, 5);
    std::vector<TensorDict> parts;
    for (int64_t s = 0; s < T; s += chunk) {
      TensorDict out = tr(whole.slice(1, s, std::min(s + chunk, T)));
      if (out.batch_size()[1] > 0) parts.push_back(out);
    }
    EXPECT_EQ(tr.held(), 4);
    auto tail = tr.flush();
    ASSERT_TRUE(tail);
    parts.push_back(*tail);
    TensorDict got = TensorDict::cat(parts, 1);
    EXPECT_TRUE(equal(got, expect)) << "chunk " << chunk;
  }
}
