// SyncDataCollector against semantics.md section 4: batch shape, traj_ids, frame counts, random frames,
// truncation, policy versions, postproc; QValuePolicy and EGreedy.
#include <cmath>
#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <vector>

#include <troupe/nn/nn.h>
#include <troupe/rl/cartpole.h>
#include <troupe/rl/collector.h>
#include <troupe/rl/multistep.h>
#include <troupe/rl/parallel_env.h>
#include <troupe/tensor/ops.h>

using namespace troupe;
using rl::TensorDict;

namespace {
std::vector<int64_t> ints(const Tensor& t) {
  Tensor c = t.to(kInt64).contiguous().reshape({-1});
  return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}
rl::Policy always(int64_t a) {
  return [a](TensorDict td) {
    td.set("action", full({td.batch_size()[0]}, a, TensorOptions().dtype(kInt64)));
    return td;
  };
}
}  // namespace

TEST(SyncDataCollector, BatchShapeCountsAndTrajIds) {
  auto env = std::make_shared<rl::CartPoleEnv>(4);
  env->set_seed(0);
  // always pushing right: every episode ends within a few dozen steps
  rl::SyncDataCollector c(env, always(1), rl::SyncDataCollectorOptions().frames_per_batch(30).total_frames(250));
  int n = 0;
  std::set<int64_t> ids_seen;
  int64_t last_max = -1;
  while (auto batch = c.next()) {
    ++n;
    EXPECT_EQ(batch->batch_size(), (std::vector<int64_t>{4, 8}));  // T = ceil(30 / 4)
    auto ids = ints(batch->get("collector.traj_ids"));
    auto done = ints(batch->get("next.done"));
    for (int64_t e = 0; e < 4; ++e)
      for (int64_t t = 0; t + 1 < 8; ++t) {
        const int64_t a = ids[e * 8 + t], b = ids[e * 8 + t + 1];
        if (done[e * 8 + t]) EXPECT_GT(b, last_max) << "a fresh id after a done";
        else EXPECT_EQ(a, b);
      }
    for (int64_t id : ids) ids_seen.insert(id);
    last_max = *std::max_element(ids.begin(), ids.end());
  }
  EXPECT_EQ(n, 9);  // ceil(250 / 30)
  EXPECT_EQ(c.frames(), 9 * 32);
  // an id never belongs to two copies
  // (ids are handed out from one counter: the number seen equals initial + resets)
  EXPECT_GE(ids_seen.size(), 4u + 1u);
  EXPECT_FALSE(c.take_episode_returns().empty());
}

TEST(SyncDataCollector, RandomFramesTruncationVersionsPostproc) {
  auto env = std::make_shared<rl::CartPoleEnv>(2);
  int policy_calls = 0;
  rl::Policy counting = [&](TensorDict td) {
    ++policy_calls;
    td.set("action", zeros({td.batch_size()[0]}, kInt64).add_(static_cast<int64_t>(policy_calls % 2)));
    return td;
  };
  rl::SyncDataCollector c(env, counting,
                          rl::SyncDataCollectorOptions().frames_per_batch(10).total_frames(-1).init_random_frames(20).max_frames_per_traj(3),
                          rl::MultiStep(0.9, 2));
  auto b1 = c.next();
  auto b2 = c.next();
  // 20 random frames: two batches of 10, whose actions are random (the policy runs only for its keys)
  EXPECT_EQ(policy_calls, 10);
  c.update_policy_weights_();
  auto b3 = c.next();
  EXPECT_EQ(policy_calls, 15);
  EXPECT_EQ(ints(b2->get("collector.policy_version")), std::vector<int64_t>(10, 0));
  EXPECT_EQ(ints(b3->get("collector.policy_version")), std::vector<int64_t>(10, 1));
  // max_frames_per_traj = 3: every third step of a copy is truncated (nothing terminates that fast)
  auto trunc = ints(b1->get("next.truncated"));
  EXPECT_EQ(trunc, (std::vector<int64_t>{0, 0, 1, 0, 0, 0, 0, 1, 0, 0}));
  // postproc ran: MultiStep's keys are there
  EXPECT_TRUE(b3->contains("steps_to_next_obs"));
  EXPECT_TRUE(b3->contains("next.original_reward"));
}

// split_trajectories as TorchRL's: rows [0 0 1 1 1] and [2 2 2 2 3] give the runs 0, 1, 2, 3 of lengths
// 2, 3, 4, 1, each in its own row padded with zeros to 4, collector.mask true on the real frames.
TEST(SplitTrajectories, RunsOfTrajIdsPaddedWithAMask) {
  TensorDict b({2, 5});
  b.set("collector.traj_ids", tensor({0, 0, 1, 1, 1, 2, 2, 2, 2, 3}).to(kInt64).reshape({2, 5}));
  b.set("observation", (arange(10, kFloat32) + 1).reshape({2, 5, 1}).expand({2, 5, 3}).contiguous());
  b.set("next.done", tensor({false, true, false, false, true, false, false, false, true, false}).reshape({2, 5, 1}));
  TensorDict s = rl::split_trajectories(b);
  EXPECT_EQ(s.batch_size(), (std::vector<int64_t>{4, 4}));
  EXPECT_EQ(ints(s.get("collector.mask")), (std::vector<int64_t>{1, 1, 0, 0, 1, 1, 1, 0, 1, 1, 1, 1, 1, 0, 0, 0}));
  EXPECT_EQ(ints(s.get("collector.traj_ids")), (std::vector<int64_t>{0, 0, 0, 0, 1, 1, 1, 0, 2, 2, 2, 2, 3, 0, 0, 0}));
  EXPECT_EQ(ints(s.get("observation").select(2, 1)), (std::vector<int64_t>{1, 2, 0, 0, 3, 4, 5, 0, 6, 7, 8, 9, 10, 0, 0, 0}));
  EXPECT_EQ(s.get("observation").sizes().vec(), (std::vector<int64_t>{4, 4, 3}));
  EXPECT_EQ(ints(s.get("next.done")), (std::vector<int64_t>{0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0}));
  // rows that are whole trajectories keep their shape; a 1-D batch becomes one row
  TensorDict w({2, 3});
  w.set("collector.traj_ids", tensor({4, 4, 4, 9, 9, 9}).to(kInt64).reshape({2, 3}));
  TensorDict ws = rl::split_trajectories(w);
  EXPECT_EQ(ws.batch_size(), (std::vector<int64_t>{2, 3}));
  EXPECT_TRUE(ws.get("collector.mask").all().item<bool>());
  EXPECT_EQ(rl::split_trajectories(w[1]).batch_size(), (std::vector<int64_t>{1, 3}));
  EXPECT_THROW(rl::split_trajectories(TensorDict({3})), std::invalid_argument);
}

TEST(SyncDataCollector, SplitTrajsHandsOutTrajectories) {
  auto env = std::make_shared<rl::CartPoleEnv>(3);
  env->set_seed(1);
  rl::SyncDataCollector c(env, always(1), rl::SyncDataCollectorOptions().frames_per_batch(60).total_frames(120).split_trajs(true));
  while (auto b = c.next()) {
    ASSERT_EQ(b->batch_dims(), 2);
    Tensor mask = b->get("collector.mask");
    EXPECT_EQ(mask.sum().item<int64_t>(), 60) << "every frame once";
    auto ids = ints(b->get("collector.traj_ids"));
    auto m = ints(mask);
    auto done = ints(b->get("next.done"));
    const int64_t L = b->batch_size()[1];
    std::set<int64_t> rows_ids;
    for (int64_t r = 0; r < b->batch_size()[0]; ++r) {
      EXPECT_EQ(m[r * L], 1) << "no empty row";
      for (int64_t t = 0; t < L; ++t) {
        if (!m[r * L + t]) continue;
        EXPECT_EQ(ids[r * L + t], ids[r * L]) << "one trajectory per row";
        if (t + 1 < L && m[r * L + t + 1]) {
          EXPECT_EQ(done[r * L + t], 0) << "a done ends its row";
        }
      }
      EXPECT_TRUE(rows_ids.insert(ids[r * L]).second) << "a trajectory in two rows";
    }
    EXPECT_GT(b->batch_size()[0], 3) << "pushing right ends episodes within 20 steps";
  }
}

// QValuePolicy's action is action_value.argmax(-1) also on ties (the first maximum) and NaN (a NaN
// counts as the maximum): q = [x, x, b] with b = 0, -5 or NaN.
TEST(Policies, QValueActionIsArgmaxWithTiesAndNaN) {
  auto net = std::make_shared<nn::LinearImpl>(1, 3);
  for (double b : {0.0, -5.0, std::nan("")}) {
    {
      NoGradGuard g;
      net->weight.copy_(tensor({1.0, 1.0, 0.0}).reshape({3, 1}));
      net->bias.copy_(tensor({0.0, 0.0, b}));
    }
    TensorDict td({4});
    td.set("observation", tensor({2.0, -1.0, 0.0, 3.0}).reshape({4, 1}).to(kFloat32));
    TensorDict out = rl::QValuePolicy(net)(td);
    EXPECT_EQ(ints(out.get("action")), ints(out.get("action_value").argmax(-1))) << "bias " << b;
  }
  NoGradGuard g;
  net->bias.copy_(tensor({0.0, 0.0, std::nan("")}));
  TensorDict td({1});
  td.set("observation", tensor({1.0}).reshape({1, 1}).to(kFloat32));
  EXPECT_EQ(ints(rl::QValuePolicy(net)(td).get("action")), (std::vector<int64_t>{2}));
  net->bias.copy_(tensor({0.0, 0.0, 0.0}));
  EXPECT_EQ(ints(rl::QValuePolicy(net)(td).get("action")), (std::vector<int64_t>{0}));
}

TEST(Policies, QValueAndEGreedy) {
  auto net = std::make_shared<nn::LinearImpl>(4, 2);
  {
    NoGradGuard g;
    net->weight.copy_(tensor({1.0, 0.0, 0.0, 0.0, -1.0, 0.0, 0.0, 0.0}).reshape({2, 4}));
    net->bias.zero_();
  }
  TensorDict td({3});
  td.set("observation", tensor({1.0, 0.0, 0.0, 0.0, -1.0, 0.0, 0.0, 0.0, 2.0, 0.0, 0.0, 0.0}).reshape({3, 4}).to(kFloat32));
  TensorDict out = rl::QValuePolicy(net)(td);
  EXPECT_EQ(ints(out.get("action")), (std::vector<int64_t>{0, 1, 0}));
  auto env = std::make_shared<rl::CartPoleEnv>(1000);
  rl::EGreedy greedy(rl::QValuePolicy(net), env, 1.0, 0.1, 100, 7);
  EXPECT_DOUBLE_EQ(greedy.eps(), 1.0);
  greedy.step(50);
  EXPECT_NEAR(greedy.eps(), 0.55, 1e-12);
  greedy.step(500);
  EXPECT_NEAR(greedy.eps(), 0.1, 1e-12);
  // eps 0.1: about 5% of actions differ from the greedy one (half the random ones agree by chance)
  TensorDict many({1000});
  many.set("observation", ones({1000, 4}));
  auto acts = ints(greedy(many).get("action"));
  int differ = 0;
  for (int64_t a : acts) differ += a != 0;
  EXPECT_GT(differ, 20);
  EXPECT_LT(differ, 90);
}

// A SyncDataCollector over a ParallelEnv (workers on threads): the batch holds every worker's copies, the
// done copies are reset through the workers (partial resets) and trajectory ids stay consistent.
TEST(SyncDataCollector, OverAParallelEnv) {
  auto env = std::make_shared<rl::ParallelEnv>(3, [] { return std::make_shared<rl::CartPoleEnv>(2); });
  env->set_seed(4);
  rl::SyncDataCollector c(env, always(1), rl::SyncDataCollectorOptions().frames_per_batch(60).total_frames(120));
  int batches = 0;
  while (auto b = c.next()) {
    ++batches;
    EXPECT_EQ(b->batch_size(), (std::vector<int64_t>{6, 10}));
    auto ids = ints(b->get("collector.traj_ids"));
    auto done = ints(b->get("next.done"));
    for (int64_t e = 0; e < 6; ++e) {
      for (int64_t t = 0; t + 1 < 10; ++t) {
        if (!done[e * 10 + t]) {
          EXPECT_EQ(ids[e * 10 + t], ids[e * 10 + t + 1]) << e << " " << t;
        }
      }
    }
    // pushing right ends every episode within 10-20 steps: the reset observations are small
    Tensor obs = b->get("observation");
    for (int64_t e = 0; e < 6; ++e) {
      for (int64_t t = 1; t < 10; ++t) {
        if (done[e * 10 + t - 1]) {
          EXPECT_LE(obs.select(0, e).select(0, t).abs().max().item<float>(), 0.05f);
        }
      }
    }
  }
  EXPECT_EQ(batches, 2);
  EXPECT_FALSE(c.take_episode_returns().empty());
}
