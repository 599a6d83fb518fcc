// The supervision and whole-model checkpoint cases, run by rank 0 with --ranks threads
// (supervision_test.cpp) and under mpirun (mpi_supervision.cpp): a host stopped mid-training restarts
// from its checkpoint and the run ends where a run restarted by hand from the same checkpoint ends;
// idempotent calls are retried, a graph call and a training call fail clearly; the restart limit's
// text; a checkpoint saved with one placement loads into another and into the local model with the
// same outputs and the same next steps (float64, exact: a chain has one gradient path, so the sums do
// not depend on where each stage runs).
#pragma once

#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>

#include <troupe/nn/cloneable.h>
#include <troupe/nn/serialize.h>
#include <troupe/optim/sgd.h>

#include "actors_helpers.h"
#include "remote_models.h"

namespace troupe::actors::testing {

/// head(dec(mid(enc(x)))): Block, Mid (with a buffer), Block, Linear(4, 2); float64.
/// Cloneable: an Averager in one process holds a copy.
struct ChainImpl : nn::Cloneable<ChainImpl> {
  Block enc{nullptr};
  Mid mid{nullptr};
  Block dec{nullptr};
  nn::Linear head{nullptr};
  ChainImpl() { reset(); }
  void reset() override {
    enc = Block();
    mid = Mid();
    dec = Block();
    register_module("enc", enc.ptr());
    register_module("mid", mid.ptr());
    register_module("dec", dec.ptr());
    head = register_module("head", nn::Linear(4, 2));
    head->to(kFloat64);
  }
  Tensor forward(const Tensor& x) override { return head(dec(mid(enc(x)))); }
};
TROUPE_MODULE(Chain);

inline void register_chain() {
  register_remote_models();
  static const bool done = [] {
    register_module<Chain>("Chain");
    return true;
  }();
  (void)done;
}

inline optim::SGDOptions sgd_options() { return optim::SGDOptions(0.05).momentum(0.9); }

/// Step `step` of the training run: its own batch, an MSE loss, one optimizer step.
inline void train_step(Chain& m, DistributedOptimizer& opt, int64_t step) {
  manual_seed(1000 + step);
  Tensor x = randn({6, 4}, kFloat64);
  Tensor t = randn({6, 2}, kFloat64);
  opt.zero_grad();
  (m->forward(x) - t).pow(2).mean().backward();
  opt.step();
}

/// Largest difference over two state dicts with the same keys (inf when the keys differ).
inline double state_diff(const nn::StateDict& a, const nn::StateDict& b) {
  if (a.keys() != b.keys()) return 1e300;
  double d = 0;
  for (const auto& [k, t] : a) d = std::max(d, max_diff(t, b[k]));
  return d;
}

inline std::string temp_file(const std::string& tag) {
  return "/tmp/troupe_" + tag + "_" + std::to_string(::getpid()) + ".troupe";
}

inline std::string text_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

/// A host stopped after 5 of 7 steps (checkpoints every 2): the run catches HostRestartedError, rewinds
/// to the checkpoint at step 4 and ends at exactly the parameters of a run restarted by hand from a
/// checkpoint file written at step 4.
inline void restart_matches_hand_restart(Runtime& rt, int r1, int r2) {
  register_chain();
  const std::map<std::string, Placement> placement{{"enc", r1}, {"dec", r2}};
  manual_seed(7);
  Chain a;
  auto proxies = place(rt, a.ptr(), placement, RestartPolicy().restarts(2).every(2));
  DistributedOptimizer opt(a.ptr(), sgd_options());
  ActorRef first = proxies["enc"]->host_actor();
  int64_t caught_at = -1, resumed_from = -1;
  bool stopped = false;
  for (int64_t step = 0; step < 7;) {
    if (step == 5 && !stopped) {
      proxies["enc"]->host_actor().stop();
      stopped = true;
    }
    try {
      train_step(a, opt, step);
      ++step;
    } catch (const HostRestartedError& e) {
      caught_at = step;
      EXPECT_EQ(e.checkpoint_step(), 4);
      EXPECT_EQ(e.module(), "enc");
      EXPECT_EQ(e.actor(), first.name());
      EXPECT_EQ(e.rank(), r1);
      step = opt.restore();
      resumed_from = step;
    }
  }
  EXPECT_EQ(caught_at, 5);
  EXPECT_EQ(resumed_from, 4);
  EXPECT_EQ(restarts(*proxies["enc"]), 1);
  EXPECT_EQ(restarts(*proxies["dec"]), 0);
  EXPECT_NE(proxies["enc"]->host_actor(), first);
  EXPECT_EQ(proxies["enc"]->host_rank(), r1);
  EXPECT_EQ(opt.steps(), 7);

  // by hand: 4 steps, a checkpoint file, a fresh model (other initial weights) loaded from it, 3 steps
  const std::string file = temp_file("superv_hand");
  manual_seed(7);
  Chain b;
  place(rt, b.ptr(), placement);
  DistributedOptimizer ob(b.ptr(), sgd_options());
  for (int64_t step = 0; step < 4; ++step) train_step(b, ob, step);
  save_checkpoint(file, b.ptr(), &ob);
  manual_seed(8);
  Chain c;
  place(rt, c.ptr(), placement);
  DistributedOptimizer oc(c.ptr(), sgd_options());
  EXPECT_GT(state_diff(b->state_dict(), c->state_dict()), 1e-3);
  EXPECT_EQ(load_checkpoint(file, c.ptr(), &oc), 4);
  for (int64_t step = 4; step < 7; ++step) train_step(c, oc, step);
  std::remove(file.c_str());

  EXPECT_EQ(state_diff(a->state_dict(), c->state_dict()), 0.0);
  // and the run did move: not the state at step 4
  EXPECT_GT(state_diff(a->state_dict(), b->state_dict()), 1e-6);
}

/// Idempotent calls go on on the restarted host (on rank r2: RestartPolicy::ranks); a training forward
/// made across the failure and a backward whose graph the dead host held fail naming the actor, rank,
/// module and step.
inline void idempotent_calls_retried_graph_calls_fail(Runtime& rt, int r1, int r2) {
  register_chain();
  auto blk = host(rt, r1, "Block", {}, "sup.blk", RestartPolicy().restarts(5).on_ranks({r2}));
  manual_seed(3);
  Tensor x = randn({3, 4}, kFloat64);
  blk->eval();
  Tensor y0 = (*blk)(x);
  const std::string first = blk->host_actor().name();

  blk->host_actor().stop();
  Tensor y1 = (*blk)(x);  // eval mode: retried
  EXPECT_EQ(max_diff(y0, y1), 0.0);
  EXPECT_EQ(restarts(*blk), 1);
  EXPECT_EQ(blk->host_rank(), r2);
  EXPECT_FALSE(blk->is_training());

  blk->host_actor().stop();
  auto params = blk->named_parameters();  // a state query: retried
  EXPECT_EQ(params.keys(), (std::vector<std::string>{"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}));
  EXPECT_EQ(restarts(*blk), 2);
  EXPECT_FALSE(blk->get_submodule("fc1")->is_training());  // eval() after the checkpoint is kept by restarts

  blk->train();
  blk->host_actor().stop();
  {
    NoGradGuard g;
    EXPECT_EQ(max_diff((*blk)(x), y0), 0.0);  // no_grad: retried
  }
  EXPECT_EQ(restarts(*blk), 3);

  // a forward in grad mode and training mode is not retried
  const std::string failed = blk->host_actor().name();
  blk->host_actor().stop();
  Tensor xg = x.clone().requires_grad_(true);
  try {
    (*blk)(xg);
    ADD_FAILURE() << "a training forward across a restart did not fail";
  } catch (const HostRestartedError& e) {
    const std::string t = e.what();
    EXPECT_TRUE(contains(t, "'fwd' to `Block` on module host '" + failed + "' (rank " + std::to_string(r2) + ") failed"))
        << t;
    EXPECT_TRUE(contains(t, "the actor is gone")) << t;
    EXPECT_TRUE(contains(t, "from its checkpoint at step 0 (restart 4 of 5)")) << t;
    EXPECT_TRUE(contains(t, "was not retried")) << t;
    EXPECT_EQ(e.actor(), failed);
    EXPECT_EQ(e.checkpoint_step(), 0);
  }
  EXPECT_EQ(restarts(*blk), 4);

  // its graph lived on the host that died: backward fails, clearly
  Tensor y = (*blk)(xg);
  blk->host_actor().stop();
  std::string eb = text_of([&] { y.sum().backward(); });
  EXPECT_TRUE(contains(eb, "backward through Block")) << eb;
  EXPECT_TRUE(contains(eb, "' (rank " + std::to_string(r2) + ") failed after this forward")) << eb;
  EXPECT_TRUE(contains(eb, "the autograd graph the forward recorded there is lost")) << eb;
  EXPECT_EQ(restarts(*blk), 5);
  EXPECT_NE(blk->host_actor().name(), first);
}

/// Past max_restarts every call fails naming the actor and its last failure; the back-off waited.
inline void restart_limit(Runtime& rt, int r1) {
  register_chain();
  auto blk = host(rt, r1, "Block", {}, "sup.lim", RestartPolicy().restarts(1).wait(std::chrono::milliseconds(200)));
  manual_seed(3);
  Tensor x = randn({3, 4}, kFloat64);
  blk->eval();
  (*blk)(x);
  blk->host_actor().stop();
  auto t0 = std::chrono::steady_clock::now();
  (*blk)(x);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(200));
  EXPECT_EQ(restarts(*blk), 1);
  blk->host_actor().stop();
  std::string e = text_of([&] { (*blk)(x); });
  EXPECT_TRUE(contains(e, "module host 'sup.lim.r1' (rank " + std::to_string(r1) +
                              ") holding `Block` failed 2 times, more than max_restarts = 1; its last failure: "))
      << e;
  EXPECT_TRUE(contains(e, "request 'fwd' to actor 'sup.lim.r1'")) << e;
  EXPECT_TRUE(contains(e, "the actor is gone")) << e;
  EXPECT_EQ(text_of([&] { blk->named_parameters(); }), e);  // and every later call
}

/// A cut saved with placement {enc: r1, dec: r2} loads into {enc: r2} and into the local model: the
/// same outputs, and the same parameters and averages after two more steps.
inline void checkpoint_across_placements(Runtime& rt, int r1, int r2) {
  register_chain();
  const std::string file = temp_file("superv_cut");
  manual_seed(7);
  Chain a;
  place(rt, a.ptr(), {{"enc", r1}, {"dec", r2}});
  DistributedOptimizer oa(a.ptr(), sgd_options());
  manual_seed(1);
  Chain twin_a;
  auto ea = Averager::spawn(rt, r1, twin_a.ptr(), AveragerOptions().ema(0.9).in_flight(8));  // no coalescing: versions 1..5 all applied
  for (int64_t step = 0; step < 3; ++step) {
    train_step(a, oa, step);
    ea.update(*a);
  }
  save_checkpoint(file, a.ptr(), &oa, &ea);
  nn::StateDict saved = nn::load_state_dict_file(file);
  for (const auto& [k, t] : a->state_dict()) EXPECT_TRUE(saved.contains("model." + k)) << k;
  EXPECT_TRUE(saved.contains("optimizer.state.enc.fc1.weight.momentum_buffer"));
  EXPECT_TRUE(saved.contains("optimizer.state.head.bias.momentum_buffer"));
  EXPECT_TRUE(saved.contains("optimizer.param_groups.0.lr"));
  EXPECT_TRUE(saved.contains("averager.n_averaged"));

  manual_seed(8);
  Chain b;
  place(rt, b.ptr(), {{"enc", r2}});
  DistributedOptimizer ob(b.ptr(), sgd_options());
  manual_seed(2);
  Chain twin_b;
  auto eb = Averager::spawn(rt, r2, twin_b.ptr(), AveragerOptions().ema(0.9).in_flight(8));  // no coalescing: versions 1..5 all applied
  EXPECT_EQ(load_checkpoint(file, b.ptr(), &ob, &eb), 3);

  manual_seed(9);
  Chain c;  // all local
  DistributedOptimizer oc(c.ptr(), sgd_options());
  EXPECT_EQ(oc.num_hosts(), 0u);
  manual_seed(4);
  Chain twin_c;
  auto ec = Averager::spawn(rt, 0, twin_c.ptr(), AveragerOptions().ema(0.9).in_flight(8));  // no coalescing: versions 1..5 all applied
  EXPECT_EQ(load_checkpoint(file, c.ptr(), &oc, &ec), 3);
  std::remove(file.c_str());

  manual_seed(5);
  Tensor x = randn({4, 4}, kFloat64);
  {
    NoGradGuard g;
    Tensor ya = a->forward(x);
    EXPECT_EQ(max_diff(ya, b->forward(x)), 0.0);
    EXPECT_EQ(max_diff(ya, c->forward(x)), 0.0);
  }
  for (int64_t step = 3; step < 5; ++step) {
    train_step(a, oa, step);
    ea.update(*a);
    train_step(b, ob, step);
    eb.update(*b);
    train_step(c, oc, step);
    ec.update(*c);
  }
  EXPECT_EQ(state_diff(a->state_dict(), b->state_dict()), 0.0);
  EXPECT_EQ(state_diff(a->state_dict(), c->state_dict()), 0.0);
  ea.flush();
  eb.flush();
  ec.flush();
  EXPECT_EQ(state_diff(ea.state_dict(), eb.state_dict()), 0.0);
  EXPECT_EQ(state_diff(ea.state_dict(), ec.state_dict()), 0.0);
  EXPECT_EQ(eb.applied_versions(), (std::vector<int64_t>{1, 2, 3, 4, 5}));
  // a checkpoint without the parts asked for
  save_checkpoint(file, a.ptr());
  std::string e = text_of([&] { load_checkpoint(file, c.ptr(), &oc); });
  EXPECT_TRUE(contains(e, "no optimizer state")) << e;
  std::remove(file.c_str());
}

}  // namespace troupe::actors::testing
