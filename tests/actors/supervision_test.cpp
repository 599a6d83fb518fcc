// Supervision of module hosts and whole-model checkpoints in one process (--ranks threads): the cases of
// supervision_cases.h, run by rank 0 while the other ranks host.
#include "supervision_cases.h"

using namespace troupe;
using namespace troupe::actors;
using namespace troupe::actors::testing;

TEST(Supervision, AHostStoppedMidTrainingEndsAtTheHandRestartedParameters) {
  on_ranks(3, [](launch::Context& ctx) {
    if (ctx.rank == 0) restart_matches_hand_restart(ctx.actors(), 1, 2);
    ctx.world->barrier();
  });
}

TEST(Supervision, IdempotentCallsAreRetriedTrainingAndGraphCallsFailClearly) {
  on_ranks(3, [](launch::Context& ctx) {
    if (ctx.rank == 0) idempotent_calls_retried_graph_calls_fail(ctx.actors(), 1, 2);
    ctx.world->barrier();
  });
}

TEST(Supervision, TheRestartLimitNamesTheActorAndItsLastFailure) {
  on_ranks(2, [](launch::Context& ctx) {
    if (ctx.rank == 0) restart_limit(ctx.actors(), 1);
    ctx.world->barrier();
  });
}

TEST(Supervision, RestartPolicyChecksItsRanks) {
  register_chain();
  on_ranks(2, [](launch::Context& ctx) {
    if (ctx.rank == 0) {
      std::string e = text_of([&] { host(ctx.actors(), 1, "Block", {}, "", RestartPolicy().restarts(1).on_ranks({5})); });
      EXPECT_TRUE(contains(e, "RestartPolicy: restart rank 5, but there are 2 ranks")) << e;
    }
    ctx.world->barrier();
  });
}

TEST(Supervision, RestoreWithoutACheckpointSaysSo) {
  register_chain();
  on_ranks(2, [](launch::Context& ctx) {
    if (ctx.rank == 0) {
      Chain m;
      place(ctx.actors(), m.ptr(), {{"enc", 1}});  // not supervised: no cut is taken
      DistributedOptimizer opt(m.ptr(), sgd_options());
      EXPECT_EQ(opt.checkpoint_step(), -1);
      std::string e = text_of([&] { opt.restore(); });
      EXPECT_TRUE(contains(e, "DistributedOptimizer::restore: no checkpoint() was taken")) << e;
      train_step(m, opt, 0);
      opt.checkpoint();
      EXPECT_EQ(opt.checkpoint_step(), 1);
      auto at1 = m->state_dict();
      nn::StateDict copy;
      for (const auto& [k, t] : at1) copy.insert_or_assign(k, t.clone());
      train_step(m, opt, 1);
      EXPECT_GT(state_diff(copy, m->state_dict()), 1e-6);
      EXPECT_EQ(opt.restore(), 1);  // an unsupervised model rewinds too
      EXPECT_EQ(opt.steps(), 1);
      EXPECT_EQ(state_diff(copy, m->state_dict()), 0.0);
    }
    ctx.world->barrier();
  });
}

TEST(WholeModelCheckpoint, SavedWithOnePlacementLoadsIntoAnotherAndIntoTheLocalModel) {
  on_ranks(3, [](launch::Context& ctx) {
    if (ctx.rank == 0) checkpoint_across_placements(ctx.actors(), 1, 2);
    ctx.world->barrier();
  });
}
