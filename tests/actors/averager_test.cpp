// The averager actor in one process (--ranks threads): the same averages as an in-process AveragedModel
// fed the same snapshots (EMA, SWA, a registered function, buffers), a trainer that never waits on a
// slow averager (coalesced updates, bounded), forward, load_into, update_bn, errors.
#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <thread>

#include <troupe/optim/swa_utils.h>

#include "actors_helpers.h"
#include "remote_models.h"

using namespace troupe;
using namespace troupe::actors;
using namespace troupe::actors::testing;
namespace swa = troupe::optim::swa_utils;

namespace {

nn::Sequential small_model() {
  manual_seed(3);
  nn::Sequential m{nn::Linear(4, 8), nn::BatchNorm1d(8), nn::ReLU(), nn::Linear(8, 2)};
  m->to(kFloat64);
  return m;
}

// A training-like change of every parameter and of the BatchNorm statistics.
void perturb(nn::Module& m, int step) {
  NoGradGuard g;
  manual_seed(100 + step);
  for (auto p : m.parameters()) p.add_(randn(p.sizes(), kFloat64) * 0.1);
  m.train();
  m.forward(randn({16, 4}, kFloat64));  // moves running_mean / running_var
}

void expect_equal(const nn::StateDict& a, const nn::StateDict& b) {
  ASSERT_EQ(a.keys(), b.keys());
  for (const auto& [k, t] : a) EXPECT_EQ(max_diff(t, b[k]), 0.0) << k;
}

}  // namespace

TEST(Averager, EmaAndSwaMatchTheInProcessAveragedModel) {
  on_ranks(2, [](launch::Context& ctx) {
    if (ctx.rank == 0) {
      for (bool ema : {true, false})
        for (bool use_buffers : {false, true}) {
          auto model = small_model();
          AveragerOptions o;
          if (ema) o.ema(0.9);
          o.with_buffers(use_buffers).in_flight(100);
          Averager av = Averager::spawn(ctx.actors(), 1, model.ptr(), o);
          swa::AveragedModel local(model.ptr(), std::nullopt, nullptr,
                                   ema ? swa::get_ema_multi_avg_fn(0.9) : swa::MultiAvgFn(), use_buffers);
          for (int step = 0; step < 8; ++step) {
            perturb(*model, step);
            av.update(*model);
            local.update_parameters(*model);
          }
          av.flush();
          EXPECT_EQ(av.versions_sent(), 8);
          EXPECT_EQ(av.coalesced(), 0);
          EXPECT_EQ(av.applied_versions().size(), 8u);
          expect_equal(local.state_dict(), av.state_dict());
          av.ref().stop();
        }
    }
    ctx.world->barrier();
  });
}

// The averager's first step is held (a gate the test opens only after the trainer's 30 updates): every
// update() returned while it was held, so none waited for an averaging step. (It was a 20 ms step and
// a 15 ms bound on update(), which a loaded machine broke under ASan: a preempted trainer thread.)
TEST(Averager, ASlowAveragerNeverHoldsTheTrainerBack) {
  static std::mutex gate_mu;
  static std::condition_variable gate_cv;
  static bool gate_open = false;
  static std::atomic<int> slow_calls{0};
  {
    std::lock_guard<std::mutex> g(gate_mu);
    gate_open = false;
  }
  slow_calls = 0;
  register_avg_fn("test.slow_swa", [](std::vector<Tensor>& avg, const std::vector<Tensor>& cur, const Tensor& n) {
    {
      std::unique_lock<std::mutex> g(gate_mu);
      gate_cv.wait_for(g, std::chrono::seconds(10), [] { return gate_open; });  // bounded: a trainer that waits ends
    }
    slow_calls++;
    swa::get_swa_multi_avg_fn()(avg, cur, n);
  });
  on_ranks(2, [](launch::Context& ctx) {
    if (ctx.rank == 0) {
      auto model = small_model();
      AveragerOptions o;
      o.avg = "test.slow_swa";
      Averager av = Averager::spawn(ctx.actors(), 1, model.ptr(), o);
      std::map<int64_t, nn::StateDict> sent;  // what each version carried
      for (int step = 0; step < 30; ++step) {
        perturb(*model, step);
        int64_t v = av.update(*model);
        NoGradGuard g;
        nn::StateDict snap;
        for (const auto& [k, t] : model->state_dict()) snap.insert_or_assign(k, t.clone());
        sent[v] = snap;
      }
      EXPECT_EQ(slow_calls.load(), 0);  // the 30 updates returned while the first averaging step was held
      {
        std::lock_guard<std::mutex> g(gate_mu);
        gate_open = true;
      }
      gate_cv.notify_all();
      av.flush();
      auto applied = av.applied_versions();
      EXPECT_GT(av.coalesced(), 0);
      EXPECT_EQ(static_cast<int64_t>(applied.size()) + av.coalesced(), 30);
      EXPECT_TRUE(std::is_sorted(applied.begin(), applied.end()));
      EXPECT_EQ(applied.back(), 30);  // the newest snapshot is never the one dropped
      // the in-process AveragedModel fed the applied snapshots gives the same average
      auto replay = small_model();
      swa::AveragedModel local(replay.ptr(), std::nullopt, nullptr, swa::get_swa_multi_avg_fn());
      for (int64_t v : applied) {
        replay->load_state_dict(sent[v]);
        local.update_parameters(*replay);
      }
      expect_equal(local.state_dict(), av.state_dict());
    }
    ctx.world->barrier();
  });
}

TEST(Averager, ForwardLoadIntoUpdateBnAndErrors) {
  on_ranks(2, [](launch::Context& ctx) {
    if (ctx.rank == 0) {
      auto model = small_model();
      Averager av = Averager::spawn(ctx.actors(), 1, model.ptr(), AveragerOptions().in_flight(4));
      swa::AveragedModel local(model.ptr());
      for (int step = 0; step < 3; ++step) {
        perturb(*model, step);
        av.update(*model);
        local.update_parameters(*model);
      }
      av.flush();
      std::vector<Tensor> batches;
      for (int i = 0; i < 4; ++i) batches.push_back(randn({8, 4}, kFloat64));
      av.update_bn(batches);
      swa::update_bn(batches, local);
      expect_equal(local.state_dict(), av.state_dict());
      av.train(false);
      local.eval();
      Tensor x = randn({5, 4}, kFloat64);
      EXPECT_EQ(max_diff(av.forward(x), local.forward(x)), 0.0);
      auto copy = small_model();
      av.load_into(*copy);
      copy->eval();
      EXPECT_EQ(max_diff(copy->forward(x), local.forward(x)), 0.0);

      AveragerOptions bad;
      bad.avg = "test.nope";
      std::string e = error_of([&] { Averager::spawn(ctx.actors(), 1, model.ptr(), bad); });
      EXPECT_TRUE(contains(e, "no averaging function 'test.nope'") && contains(e, "register_avg_fn")) << e;
    }
    ctx.world->barrier();
  });
}

TEST(Averager, AStoppedAveragerComesBackFromItsCheckpoint) {
  on_ranks(2, [](launch::Context& ctx) {
    if (ctx.rank == 0) {
      auto model = small_model();
      AveragerOptions o;
      o.ema(0.8).in_flight(1).max_restarts = 1;
      Averager av = Averager::spawn(ctx.actors(), 1, model.ptr(), o, "sup");
      std::map<int64_t, nn::StateDict> sent;
      auto step = [&](int i) {
        perturb(*model, i);
        int64_t v = av.update(*model);
        NoGradGuard g;
        nn::StateDict snap;
        for (const auto& [k, t] : model->state_dict()) snap.insert_or_assign(k, t.clone());
        sent[v] = snap;
      };
      for (int i = 0; i < 6; ++i) step(i);
      av.checkpoint();  // versions 1..6 (or the ones not coalesced)
      const auto at_ckpt = av.applied_versions();
      for (int i = 6; i < 9; ++i) step(i);
      av.flush();
      av.ref().stop();  // the averager dies: versions 7..9 are gone with it
      for (int i = 9; i < 14; ++i) step(i);
      av.flush();
      EXPECT_EQ(av.restarts(), 1);
      auto applied = av.applied_versions();
      // the restored cut, then only versions sent after the failure
      ASSERT_GE(applied.size(), at_ckpt.size());
      EXPECT_TRUE(std::equal(at_ckpt.begin(), at_ckpt.end(), applied.begin()));
      for (size_t i = at_ckpt.size(); i < applied.size(); ++i) EXPECT_GE(applied[i], 10);
      // equal to the in-process AveragedModel fed exactly the applied snapshots
      auto replay = small_model();
      swa::AveragedModel local(replay.ptr(), std::nullopt, nullptr, swa::get_ema_multi_avg_fn(0.8));
      for (int64_t v : applied) {
        replay->load_state_dict(sent[v]);
        local.update_parameters(*replay);
      }
      expect_equal(local.state_dict(), av.state_dict());
      // a second failure is past max_restarts: flush reports it, naming the averager
      av.ref().stop();
      step(20);
      std::string e = error_of([&] { av.flush(); });
      EXPECT_TRUE(contains(e, "averager 'sup' (rank 1) failed 2 times, more than max_restarts = 1; its last failure: ")) << e;
    }
    ctx.world->barrier();
  });
}

// Hard target-network updates (AveragerOptions::hard(K)): only every K-th update() sends, and the
// averaged model is then an exact copy of the model at that call.
TEST(Averager, HardCopiesEveryKUpdates) {
  on_ranks(2, [](launch::Context& ctx) {
    if (ctx.rank == 0) {
      auto model = small_model();
      Averager av = Averager::spawn(ctx.actors(), 1, model.ptr(), AveragerOptions().hard(3).in_flight(4));
      nn::StateDict at6;
      for (int step = 1; step <= 7; ++step) {
        perturb(*model, step);
        av.update(*model);
        if (step == 6)
          for (const auto& [k, t] : model->state_dict()) at6.insert_or_assign(k, t.clone());
      }
      av.flush();
      EXPECT_EQ(av.versions_sent(), 2);  // calls 3 and 6
      EXPECT_EQ(av.applied_versions(), (std::vector<int64_t>{1, 2}));
      auto copy = small_model();
      av.load_into(*copy);
      auto params = copy->named_parameters();
      for (const auto& k : params.keys()) EXPECT_EQ(max_diff(params[k], at6[k]), 0.0) << k;
      std::string e = error_of([&] { Averager::spawn(ctx.actors(), 1, model.ptr(), AveragerOptions().hard(0)); });
      EXPECT_TRUE(contains(e, "update_every must be at least 1, got 0")) << e;
    }
    ctx.world->barrier();
  });
}
