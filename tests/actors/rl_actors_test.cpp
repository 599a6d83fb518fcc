// RL on actors in one process (--ranks threads): collector workers as actors feeding a replay actor,
// versioned policy weights, the synchronous and asynchronous multi-worker collectors, a worker that dies
// and comes back, a restart limit.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include <troupe/nn/nn.h>
#include <troupe/rl/rl.h>
#include <troupe/tensor/ops.h>

#include "actors_helpers.h"

using namespace troupe;
using namespace troupe::actors;
using namespace troupe::actors::testing;

namespace {

struct TinyQClone : nn::Cloneable<TinyQClone> {
  nn::Linear fc1{nullptr}, fc2{nullptr};
  TinyQClone() { reset(); }
  void reset() override {
    fc1 = register_module("fc1", nn::Linear(4, 16));
    fc2 = register_module("fc2", nn::Linear(16, 2));
  }
  Tensor forward(const Tensor& x) override { return fc2->forward(relu(fc1->forward(x))); }
};

rl::CollectorSpec spec(int64_t n_steps = 3) {
  rl::CollectorSpec s;
  s.env = "CartPole";
  s.num_envs = 4;
  s.frames_per_batch = 128;
  s.n_steps = n_steps;
  s.policy = "TinyQClone";
  s.seed = 5;
  return s;
}

void register_rl_test_modules() {
  register_module_factory("TinyQClone", [](const List&) -> nn::ModulePtr { return std::make_shared<TinyQClone>(); });
}

}  // namespace

TEST(RlActors, WorkersFeedTheReplayActorWithVersionedBatches) {
  register_rl_test_modules();
  on_ranks(3, [](launch::Context& ctx) {
    if (ctx.rank == 0) {
      auto& rt = ctx.actors();
      auto q = std::make_shared<TinyQClone>();
      auto replay = rl::RemoteReplayBuffer::spawn(rt, 2, 10000, 1);
      rl::MultiaSyncDataCollector collectors(rt, {1, 2}, spec(), q, /*total_frames=*/1280, replay);
      int64_t frames = 0, batches = 0;
      std::set<int> workers;
      int64_t max_version = 0;
      while (auto b = collectors.next()) {
        EXPECT_EQ(b->frames, 128);
        EXPECT_FALSE(b->batch.has_value());  // the replay actor took it
        frames += b->frames;
        workers.insert(b->worker);
        max_version = std::max(max_version, b->policy_version);
        if (++batches == 3) collectors.update_policy_weights_(*q);
      }
      EXPECT_EQ(frames, 1280);
      EXPECT_EQ(collectors.frames(), 1280);
      EXPECT_EQ(workers.size(), 2u);
      EXPECT_EQ(collectors.policy_version(), 1);
      EXPECT_EQ(max_version, 1);  // later batches were collected with the new weights
      // the other worker's batch in flight when the total was reached went to the replay too
      const int64_t stored = replay.size();
      EXPECT_TRUE(stored == 1280 || stored == 1280 + 128) << stored;
      auto s = replay.sample(64);
      EXPECT_EQ(s.batch_size(), (std::vector<int64_t>{64}));
      EXPECT_TRUE(s.contains("next.reward") && s.contains("steps_to_next_obs") && s.contains("collector.traj_ids"));
      // trajectory ids never collide across workers: worker i's are i << 40 + ...
      Tensor ids = replay.sample(2000).get("collector.traj_ids");
      std::set<int64_t> hi;
      for (int64_t i = 0; i < ids.numel(); ++i) hi.insert(ids[i].item<int64_t>() >> 40);
      EXPECT_EQ(hi, (std::set<int64_t>{0, 1}));
      collectors.shutdown();
    }
    ctx.world->barrier();
  });
}

TEST(RlActors, SyncCollectorReturnsOneBatchFromEveryWorker) {
  register_rl_test_modules();
  on_ranks(3, [](launch::Context& ctx) {
    if (ctx.rank == 0) {
      auto q = std::make_shared<TinyQClone>();
      rl::MultiSyncDataCollector collectors(ctx.actors(), {1, 2}, spec(0), q, /*total_frames=*/512);
      int n = 0;
      while (auto b = collectors.next()) {
        ASSERT_TRUE(b->batch.has_value());
        EXPECT_EQ(b->frames, 256);
        EXPECT_EQ(b->batch->batch_size(), (std::vector<int64_t>{256}));
        EXPECT_FALSE(b->batch->contains("action_value"));
        ++n;
      }
      EXPECT_EQ(n, 2);
    }
    ctx.world->barrier();
  });
}

TEST(RlActors, AWorkerThatDiesIsSpawnedAgain) {
  register_rl_test_modules();
  on_ranks(2, [](launch::Context& ctx) {
    if (ctx.rank == 0) {
      auto q = std::make_shared<TinyQClone>();
      rl::MultiaSyncDataCollector collectors(ctx.actors(), {1, 1}, spec(), q, /*total_frames=*/1280);
      int64_t frames = 0;
      int n = 0;
      while (auto b = collectors.next()) {
        frames += b->frames;
        if (++n == 2) collectors.workers()[0].stop();  // killed mid-run
      }
      EXPECT_EQ(frames, 1280);
      EXPECT_EQ(collectors.restarts(), 1);
    }
    ctx.world->barrier();
  });
}

TEST(RlActors, ARestartLimitEndsWithTheWorkersError) {
  register_rl_test_modules();
  struct Broken : rl::CartPoleEnv {
    using rl::CartPoleEnv::CartPoleEnv;
    rl::TensorDict step(const rl::TensorDict&) override { throw std::runtime_error("the simulator crashed"); }
  };
  rl::register_env("test.Broken", [](int64_t n) -> std::shared_ptr<rl::EnvBase> { return std::make_shared<Broken>(n); });
  on_ranks(2, [](launch::Context& ctx) {
    if (ctx.rank == 0) {
      auto s = spec();
      s.env = "test.Broken";
      auto q = std::make_shared<TinyQClone>();
      rl::MultiaSyncDataCollector collectors(ctx.actors(), {1}, s, q, 1000, {}, /*max_restarts=*/1);
      std::string e = error_of([&] { while (collectors.next()) {} });
      EXPECT_TRUE(contains(e, "collector worker 0 (rank 1) failed 2 times")) << e;
      EXPECT_TRUE(contains(e, "the simulator crashed")) << e;
    }
    ctx.world->barrier();
  });
}

// The replay actor with prioritized sampling: priorities sent one-way by the learner are what the next
// sample uses (P(i) = p_i^alpha / sum, weights (p_i / p_min)^-beta), beta set by message; a checkpoint
// of it loaded into a fresh replay actor samples the same sequence; a bad update fails the next sample.
TEST(RlActors, PrioritizedReplayActorAndItsCheckpoint) {
  on_ranks(2, [](launch::Context& ctx) {
    if (ctx.rank == 0) {
      auto& rt = ctx.actors();
      auto replay = rl::RemoteReplayBuffer::spawn(rt, 1, 4, rl::PrioritizedReplayOptions{1.0, 0.5, 0.0}, /*seed=*/3);
      rl::TensorDict frames({4});
      frames.set("x", arange(4, kFloat32));
      EXPECT_EQ(replay.extend(frames), 4);
      replay.update_priority(arange(4, kInt64), tensor({1.0, 2.0, 3.0, 4.0}));  // one-way
      const int64_t n = 20000;
      rl::TensorDict s = replay.sample(n);
      ASSERT_TRUE(s.contains("index") && s.contains("_weight"));
      Tensor idx = s.get("index"), w = s.get("_weight"), x = s.get("x");
      std::vector<int64_t> count(4, 0);
      for (int64_t i = 0; i < n; ++i) {
        const int64_t k = idx[i].item<int64_t>();
        ++count[static_cast<size_t>(k)];
        ASSERT_EQ(x[i].item<float>(), static_cast<float>(k));
        ASSERT_NEAR(w[i].item<float>(), std::pow(static_cast<double>(k + 1), -0.5), 1e-6);  // (p_k / 1)^-0.5
      }
      for (int k = 0; k < 4; ++k) {
        const double p = (k + 1) / 10.0;  // alpha 1: P(k) = p_k / 10
        EXPECT_NEAR(count[static_cast<size_t>(k)] / static_cast<double>(n), p, 4 * std::sqrt(p * (1 - p) / n)) << k;
      }
      replay.set_beta(1.0);
      rl::TensorDict s1 = replay.sample(64);
      for (int64_t i = 0; i < 64; ++i)
        EXPECT_NEAR(s1.get("_weight")[i].item<float>(), 1.0 / (s1.get("index")[i].item<int64_t>() + 1.0), 1e-6) << "beta 1: 1 / p";
      // checkpoint: a fresh actor loaded from it draws the same frames and weights
      nn::StateDict sd = replay.state_dict();
      auto copy = rl::RemoteReplayBuffer::spawn(rt, 1, 4, rl::PrioritizedReplayOptions{1.0, 0.5, 0.0}, /*seed=*/99);
      copy.load_state_dict(sd);
      copy.set_beta(1.0);
      for (int r = 0; r < 3; ++r) {
        rl::TensorDict a = replay.sample(64), b = copy.sample(64);
        EXPECT_TRUE(equal(a.get("index"), b.get("index"))) << r;
        EXPECT_TRUE(equal(a.get("_weight"), b.get("_weight"))) << r;
      }
      // an update naming a frame not stored: the next sample says so
      replay.update_priority(tensor({7}).to(kInt64), tensor({1.0}));
      std::string e = error_of([&] { replay.sample(1); });
      EXPECT_TRUE(contains(e, "an earlier update_priority or set_beta failed")) << e;
      EXPECT_TRUE(contains(e, "index 7 outside the 4 stored frames")) << e;
      EXPECT_EQ(replay.sample(2).batch_size(), (std::vector<int64_t>{2}));  // it goes on
      // a uniform replay actor refuses priorities the same way
      auto uniform = rl::RemoteReplayBuffer::spawn(rt, 1, 4);
      uniform.extend(frames);
      uniform.update_priority(arange(4, kInt64), ones({4}));
      e = error_of([&] { uniform.sample(1); });
      EXPECT_TRUE(contains(e, "samples uniformly")) << e;
      uniform.set_beta(0.5);
      e = error_of([&] { uniform.sample(1); });
      EXPECT_TRUE(contains(e, "samples uniformly (no PrioritizedSampler)")) << e;
      EXPECT_EQ(uniform.sample(3).batch_size(), (std::vector<int64_t>{3}));
      EXPECT_THROW(rl::RemoteReplayBuffer::spawn(rt, 1, 4, rl::PrioritizedReplayOptions{-1.0, 0.5, 0.0}), std::invalid_argument);
    }
    ctx.world->barrier();
  });
}
