// CartPole-v1 and Pendulum-v1 against trajectories from Gymnasium's equations (tests/fixtures/envs.txt,
// gen_envs.py), plus resets, seeds, truncation, step_mdp, rollout and the StepCounter / RewardSum transforms.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>
#include <vector>

#include <troupe/rl/cartpole.h>
#include <troupe/rl/env.h>
#include <troupe/rl/parallel_env.h>
#include <troupe/tensor/ops.h>

#include "common/fixtures.h"

using namespace troupe;
using rl::CartPoleEnv;
using rl::PendulumEnv;
using rl::TensorDict;

namespace {
std::vector<double> doubles(const Tensor& t) {
  Tensor c = t.to(kFloat64).contiguous().reshape({-1});
  return std::vector<double>(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
}
}  // namespace

TEST(CartPole, MatchesGymnasiumEquations) {
  auto fx = troupe::testing::Fixtures::load("envs.txt");
  for (int i = 0; i < 3; ++i) {
    const std::string c = "cartpole_" + std::to_string(i);
    auto states = doubles(fx.get(c + "_states"));
    Tensor actions = fx.get(c + "_actions");
    auto terms = doubles(fx.get(c + "_terminated"));
    CartPoleEnv env(1);
    env.reset();
    env.set_state(std::vector<double>(states.begin(), states.begin() + 4));
    for (int64_t s = 0; s < actions.size(0); ++s) {
      TensorDict td({1});
      td.set("action", actions.narrow(0, s, 1));
      TensorDict out = env.step(td);
      for (int j = 0; j < 4; ++j)
        ASSERT_NEAR(env.state()[j], states[4 * (s + 1) + j], 1e-12 * (1 + std::abs(states[4 * (s + 1) + j])))
            << c << " step " << s;
      EXPECT_EQ(out.get("next.terminated").item<bool>(), terms[s] != 0) << c << " step " << s;
      EXPECT_EQ(out.get("next.reward").item<float>(), 1.0f);
      EXPECT_NEAR(out.get("next.observation").select(1, 2).item<float>(), states[4 * (s + 1) + 2], 1e-6);
    }
  }
}

TEST(Pendulum, MatchesGymnasiumEquations) {
  auto fx = troupe::testing::Fixtures::load("envs.txt");
  for (int i = 0; i < 3; ++i) {
    const std::string c = "pendulum_" + std::to_string(i);
    auto states = doubles(fx.get(c + "_states"));
    auto actions = doubles(fx.get(c + "_actions"));
    auto rewards = doubles(fx.get(c + "_rewards"));
    PendulumEnv env(1);
    env.reset();
    env.set_state(std::vector<double>{states[0], states[1]});
    for (size_t s = 0; s < actions.size(); ++s) {
      TensorDict td({1});
      td.set("action", full({1, 1}, actions[s], kFloat64));
      TensorDict out = env.step(td);
      ASSERT_NEAR(env.state()[0], states[2 * (s + 1)], 1e-12 * (1 + std::abs(states[2 * (s + 1)]))) << c << " " << s;
      ASSERT_NEAR(env.state()[1], states[2 * (s + 1) + 1], 1e-12 * (1 + std::abs(states[2 * (s + 1) + 1])));
      EXPECT_NEAR(out.get("next.reward").item<float>(), rewards[s], 1e-5 * (1 + std::abs(rewards[s])));
      EXPECT_FALSE(out.get("next.terminated").item<bool>());
    }
  }
}

TEST(CartPole, ResetIsSeededAndInRange) {
  CartPoleEnv a(16), b(16);
  a.set_seed(3);
  b.set_seed(3);
  TensorDict ra = a.reset(), rb = b.reset();
  EXPECT_TRUE(equal(ra.get("observation"), rb.get("observation")));
  EXPECT_LE(ra.get("observation").abs().max().item<float>(), 0.05f);
  EXPECT_FALSE(ra.get("done").any().item<bool>());
  b.set_seed(4);
  EXPECT_FALSE(equal(b.reset().get("observation"), ra.get("observation")));
  // copies differ from one another (each has its own generator)
  EXPECT_FALSE(equal(ra.get("observation").select(0, 0), ra.get("observation").select(0, 1)));
}

TEST(CartPole, PartialResetTouchesOnlyMarkedCopies) {
  CartPoleEnv env(3);
  TensorDict td = env.reset();
  td.set("action", zeros({3}, kInt64));
  td = rl::step_mdp(env.step(td));
  Tensor before = td.get("observation").clone();
  TensorDict request = td;
  request.set("_reset", tensor({false, true, false}).reshape({3, 1}));
  TensorDict out = env.reset(request);
  EXPECT_TRUE(equal(out.get("observation").select(0, 0), before.select(0, 0)));
  EXPECT_TRUE(equal(out.get("observation").select(0, 2), before.select(0, 2)));
  EXPECT_FALSE(equal(out.get("observation").select(0, 1), before.select(0, 1)));
}

TEST(CartPole, TruncatesAndAutoResets) {
  CartPoleEnv env(2, /*max_episode_steps=*/5);
  env.set_seed(0);
  TensorDict td = env.reset();
  for (int s = 0; s < 5; ++s) {
    td.set("action", tensor({s % 2, (s + 1) % 2}).to(kInt64));
    auto [full, next] = env.step_and_maybe_reset(td);
    if (s < 4) {
      EXPECT_FALSE(full.get("next.truncated").any().item<bool>());
    } else {
      EXPECT_TRUE(full.get("next.truncated").all().item<bool>());
      EXPECT_TRUE(full.get("next.done").all().item<bool>());
      EXPECT_FALSE(full.get("next.terminated").any().item<bool>());
      // the next root comes from a reset: small values, done false
      EXPECT_LE(next.get("observation").abs().max().item<float>(), 0.05f);
      EXPECT_FALSE(next.get("done").any().item<bool>());
    }
    td = next;
  }
}

TEST(Env, RolloutStepCounterRewardSum) {
  auto base = std::make_shared<CartPoleEnv>(4);
  rl::TransformedEnv env(base, {std::make_shared<rl::StepCounter>(), std::make_shared<rl::RewardSum>()});
  env.set_seed(1);
  TensorDict r = env.rollout(6, nullptr, /*break_when_any_done=*/false);
  EXPECT_EQ(r.batch_size(), (std::vector<int64_t>{4, 6}));
  EXPECT_EQ(r.get("observation").sizes().vec(), (std::vector<int64_t>{4, 6, 4}));
  // no episode ends in 6 steps from a reset: step_count 0..5, next.step_count 1..6, returns 1..6
  Tensor sc = r.get("step_count").select(0, 2).reshape({-1});
  EXPECT_TRUE(equal(sc, arange(6, kInt64)));
  EXPECT_TRUE(equal(r.get("next.step_count").select(0, 2).reshape({-1}), arange(6, kInt64) + 1));
  EXPECT_TRUE(equal(r.get("next.episode_reward").select(0, 1).reshape({-1}), (arange(6, kFloat32) + 1)));
  // step_mdp: next.* at the root, no action, no reward
  TensorDict root = rl::step_mdp(r[0]);
  EXPECT_FALSE(root.contains("action"));
  EXPECT_FALSE(root.contains("reward"));
  EXPECT_TRUE(root.contains("step_count"));
  // with max_steps the counter truncates
  auto base2 = std::make_shared<CartPoleEnv>(2);
  rl::TransformedEnv capped(base2, {std::make_shared<rl::StepCounter>(3)});
  TensorDict c = capped.rollout(10);
  EXPECT_EQ(c.batch_size()[1], 3);
  EXPECT_TRUE(c.get("next.truncated").select(1, 2).all().item<bool>());
}

// ParallelEnv: 4 workers of 3 CartPole copies on threads step exactly as the same 4 environments seeded in
// a chain (TorchRL's set_seed) and stepped one after another, through auto-resets and partial resets.
TEST(ParallelEnv, EqualsItsWorkersSteppedInTurn) {
  rl::ParallelEnv par(4, [] { return std::make_shared<CartPoleEnv>(3, /*max_episode_steps=*/40); });
  std::vector<std::shared_ptr<CartPoleEnv>> ref;
  for (int w = 0; w < 4; ++w) ref.push_back(std::make_shared<CartPoleEnv>(3, 40));
  EXPECT_EQ(par.batch_size(), (std::vector<int64_t>{12}));
  EXPECT_EQ(par.num_workers(), 4);
  EXPECT_EQ(par.name(), "ParallelEnv(4 x CartPoleEnv)");
  uint64_t seed = 7;
  for (auto& e : ref) seed = e->set_seed(seed);
  EXPECT_EQ(par.set_seed(7), seed);
  auto ref_all = [&](const std::function<TensorDict(size_t, const TensorDict&)>& f, const TensorDict& td) {
    std::vector<TensorDict> parts;
    for (size_t w = 0; w < 4; ++w) parts.push_back(f(w, td.slice(0, 3 * w, 3 * w + 3)));
    return TensorDict::cat(parts, 0);
  };
  TensorDict tp = par.reset();
  TensorDict to = ref_all([&](size_t w, const TensorDict&) { return ref[w]->reset(); }, tp);
  EXPECT_TRUE(equal(tp.get("observation"), to.get("observation")));
  EXPECT_FALSE(equal(tp.get("observation").select(0, 0), tp.get("observation").select(0, 3)));  // distinct seeds
  Generator g(3);
  int64_t dones = 0;
  for (int s = 0; s < 120; ++s) {
    Tensor a = empty({12}, TensorOptions().dtype(kInt64));
    for (int64_t i = 0; i < 12; ++i) a.data_ptr<int64_t>()[i] = static_cast<int64_t>(g.random64() % 2);
    tp.set("action", a);
    to.set("action", a.clone());
    auto [fp, np] = par.step_and_maybe_reset(tp);
    std::vector<TensorDict> fo_parts, no_parts;
    for (size_t w = 0; w < 4; ++w) {
      auto [f, n] = ref[w]->step_and_maybe_reset(to.slice(0, 3 * w, 3 * w + 3));
      fo_parts.push_back(f);
      no_parts.push_back(n);
    }
    TensorDict fo = TensorDict::cat(fo_parts, 0), no = TensorDict::cat(no_parts, 0);
    for (const char* k : {"next.observation", "next.reward", "next.done", "next.terminated", "next.truncated"})
      ASSERT_TRUE(equal(fp.get(k), fo.get(k))) << k << " at step " << s;
    ASSERT_TRUE(equal(np.get("observation"), no.get("observation"))) << "the auto-reset root at step " << s;
    dones += fp.get("next.done").sum().item<int64_t>();
    tp = np;
    to = no;
  }
  EXPECT_GE(dones, 12) << "every copy is truncated at 40 steps at the latest";
  // a partial reset reaches only the marked copy, in the right worker
  Tensor mask = zeros({12, 1}, TensorOptions().dtype(kBool));
  mask.data_ptr<bool>()[7] = true;
  TensorDict req = tp;
  req.set("_reset", mask);
  TensorDict out = par.reset(req);
  for (int64_t i = 0; i < 12; ++i)
    EXPECT_EQ(equal(out.get("observation").select(0, i), tp.get("observation").select(0, i)), i != 7) << i;
  EXPECT_EQ(par.rand_action().sizes().vec(), (std::vector<int64_t>{12}));
}

TEST(ParallelEnv, ErrorsNameTheWorker) {
  EXPECT_THROW(rl::ParallelEnv(0, [] { return std::make_shared<CartPoleEnv>(1); }), std::invalid_argument);
  rl::ParallelEnv par(2, [] { return std::make_shared<CartPoleEnv>(2); });
  TensorDict td = par.reset();
  Tensor bad = zeros({4}, kInt64);
  bad.data_ptr<int64_t>()[3] = 5;  // worker 1's second copy: not an action of CartPole
  td.set("action", bad);
  try {
    par.step(td);
    ADD_FAILURE() << "no error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("[ParallelEnv] worker 1 (CartPoleEnv) failed: "), std::string::npos) << e.what();
  }
  // the pool still works after a failure
  td.set("action", zeros({4}, kInt64));
  EXPECT_EQ(par.step(td).get("next.observation").size(0), 4);
}

// CartPole's one-pass step_and_maybe_reset equals EnvBase's (step, step_mdp, reset of the done copies)
// on a twin environment, key for key, through many auto-resets.
TEST(CartPole, StepAndMaybeResetEqualsTheGenericPath) {
  CartPoleEnv fast(16, /*max_episode_steps=*/30), twin(16, 30);
  fast.set_seed(11);
  twin.set_seed(11);
  TensorDict tf = fast.reset(), tt = twin.reset();
  Generator g(5);
  int64_t dones = 0;
  for (int s = 0; s < 200; ++s) {
    Tensor a = empty({16}, TensorOptions().dtype(kInt64));
    for (int64_t i = 0; i < 16; ++i) a.data_ptr<int64_t>()[i] = static_cast<int64_t>(g.random64() % 2);
    tf.set("action", a);
    tt.set("action", a.clone());
    auto [ff, nf] = fast.step_and_maybe_reset(tf);
    auto [ft, nt] = twin.rl::EnvBase::step_and_maybe_reset(tt);
    ASSERT_TRUE(equal(ff, ft)) << "frame at step " << s;
    ASSERT_TRUE(equal(nf, nt)) << "next root at step " << s;
    std::vector<std::string> kf, kt;
    for (const auto& k : nf.keys(true, true)) kf.push_back(k.str());
    for (const auto& k : nt.keys(true, true)) kt.push_back(k.str());
    ASSERT_EQ(kf, kt);
    dones += ff.get("next.done").sum().item<int64_t>();
    tf = nf;
    tt = nt;
  }
  EXPECT_GT(dones, 50);
}
