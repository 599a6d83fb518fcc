// TensorDictReplayBuffer: ring writes, uniform and prioritized sampling (distribution and weights),
// priorities of new frames, checkpoints, errors.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include <troupe/rl/replay.h>
#include <troupe/tensor/ops.h>

using namespace troupe;
using rl::TensorDict;
using rl::TensorDictReplayBuffer;

namespace {
TensorDict frames(int64_t start, int64_t n) {
  TensorDict td({n});
  td.set("observation", (arange(n, kFloat32) + static_cast<double>(start)).reshape({n, 1}).expand({n, 3}).contiguous());
  td.set("next.reward", (arange(n, kFloat32) + static_cast<double>(start)).reshape({n, 1}));
  return td;
}
std::vector<int64_t> ints(const Tensor& t) {
  Tensor c = t.to(kInt64).contiguous().reshape({-1});
  return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}
}  // namespace

TEST(ReplayBuffer, RingWritesWrapAround) {
  TensorDictReplayBuffer rb(5);
  EXPECT_EQ(ints(rb.extend(frames(0, 3))), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(ints(rb.extend(frames(3, 4))), (std::vector<int64_t>{3, 4, 0, 1}));
  EXPECT_EQ(rb.size(), 5);
  EXPECT_EQ(ints(rb.storage().get("next.reward")), (std::vector<int64_t>{5, 6, 2, 3, 4}));
  // more frames than capacity at once: the last five survive
  TensorDictReplayBuffer small(5);
  small.extend(frames(0, 12));
  std::vector<int64_t> kept = ints(small.storage().get("next.reward"));
  std::sort(kept.begin(), kept.end());
  EXPECT_EQ(kept, (std::vector<int64_t>{7, 8, 9, 10, 11}));
}

TEST(ReplayBuffer, UniformSamplesStoredRows) {
  TensorDictReplayBuffer rb(100, {}, /*seed=*/3);
  rb.extend(frames(0, 10));
  TensorDict s = rb.sample(500);
  EXPECT_EQ(s.batch_size(), (std::vector<int64_t>{500}));
  auto idx = ints(s.get("index"));
  auto val = ints(s.get("next.reward"));
  std::vector<int> seen(10, 0);
  for (size_t i = 0; i < idx.size(); ++i) {
    ASSERT_GE(idx[i], 0);
    ASSERT_LT(idx[i], 10);
    EXPECT_EQ(val[i], idx[i]);
    ++seen[static_cast<size_t>(idx[i])];
  }
  for (int c : seen) EXPECT_GT(c, 20);  // about 50 each
  EXPECT_FALSE(s.contains("_weight"));
}

TEST(ReplayBuffer, PrioritizedFollowsPriorities) {
  for (double alpha : {1.0, 0.5}) {
    TensorDictReplayBuffer rb(4, rl::PrioritizedSampler(4, alpha, 0.4), /*seed=*/5);
    rb.extend(frames(0, 4));
    rb.update_priority(tensor({0, 1, 2, 3}).to(kInt64), tensor({1.0, 2.0, 3.0, 4.0}));
    std::vector<double> p(4), expect(4);
    double total = 0;
    for (int i = 0; i < 4; ++i) total += (expect[i] = std::pow(i + 1 + 1e-8, alpha));
    const int draws = 40000;
    std::vector<int> count(4, 0);
    for (int b = 0; b < draws / 1000; ++b) {
      TensorDict s = rb.sample(1000);
      auto idx = ints(s.get("index"));
      Tensor w = s.get("_weight").to(kFloat64).contiguous();
      for (size_t i = 0; i < idx.size(); ++i) {
        ++count[static_cast<size_t>(idx[i])];
        const double want = std::pow(expect[static_cast<size_t>(idx[i])] / expect[0], -0.4);
        ASSERT_NEAR(w.data_ptr<double>()[i], want, 1e-5);
      }
    }
    for (int i = 0; i < 4; ++i) {
      const double f = static_cast<double>(count[static_cast<size_t>(i)]) / draws;
      // binomial sd at 40k draws is below 0.0025: 4 sd
      EXPECT_NEAR(f, expect[static_cast<size_t>(i)] / total, 0.01) << "alpha " << alpha << " item " << i;
    }
  }
}

TEST(ReplayBuffer, NewFramesGetTheLargestPrioritySeen) {
  TensorDictReplayBuffer rb(8, rl::PrioritizedSampler(8, 1.0, 1.0), 1);
  rb.extend(frames(0, 2));
  rb.update_priority(tensor({0, 1}).to(kInt64), tensor({5.0, 0.5}));
  rb.extend(frames(2, 1));  // index 2 gets priority 5
  const int draws = 20000;
  int c2 = 0, c1 = 0;
  TensorDict s = rb.sample(draws);
  for (int64_t i : ints(s.get("index"))) {
    c2 += i == 2;
    c1 += i == 1;
  }
  EXPECT_NEAR(static_cast<double>(c2) / draws, 5.0 / 10.5, 0.02);
  EXPECT_NEAR(static_cast<double>(c1) / draws, 0.5 / 10.5, 0.02);
}

TEST(ReplayBuffer, CheckpointRoundTrip) {
  TensorDictReplayBuffer a(6, rl::PrioritizedSampler(6, 0.7, 0.5), 9);
  a.extend(frames(0, 4));
  a.update_priority(tensor({1, 3}).to(kInt64), tensor({2.0, 0.1}));
  TensorDictReplayBuffer b(6, rl::PrioritizedSampler(6, 0.7, 0.5), 1234);
  b.load_state_dict(a.state_dict());
  EXPECT_EQ(b.size(), 4);
  EXPECT_TRUE(rl::equal(a.storage(), b.storage()));
  EXPECT_TRUE(rl::equal(a.sample(64), b.sample(64)));  // same generator state, same priorities
  a.extend(frames(10, 3));
  b.extend(frames(10, 3));
  EXPECT_TRUE(rl::equal(a.storage(), b.storage()));
  TensorDictReplayBuffer wrong(7);
  EXPECT_THROW(wrong.load_state_dict(a.state_dict()), std::invalid_argument);
  auto sd = a.state_dict();
  sd.erase("_cursor");
  try {
    b.load_state_dict(sd);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "[ReplayBuffer.load_state_dict] missing key '_cursor'");
  }
}

TEST(ReplayBuffer, Errors) {
  TensorDictReplayBuffer rb(4);
  EXPECT_THROW(rb.sample(2), std::runtime_error);
  EXPECT_THROW(rb.update_priority(tensor({0}).to(kInt64), tensor({1.0})), std::logic_error);
  rb.extend(frames(0, 2));
  TensorDict other({1});
  other.set("observation", zeros({1, 3}));
  EXPECT_THROW(rb.extend(other), std::invalid_argument);  // lacks next.reward
  TensorDictReplayBuffer pr(4, rl::PrioritizedSampler(4, 1, 1));
  pr.extend(frames(0, 2));
  EXPECT_THROW(pr.update_priority(tensor({3}).to(kInt64), tensor({1.0})), std::out_of_range);
  EXPECT_THROW(pr.update_priority(tensor({0}).to(kInt64), tensor({std::nan("")})), std::invalid_argument);
}
