// RL on actors in one process (--ranks threads): collector workers as actors feeding a replay actor,
// versioned policy weights, the synchronous and asynchronous multi-worker collectors, a worker that dies
// and comes back, a restart limit.
#include <gtest/gtest.h>

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
