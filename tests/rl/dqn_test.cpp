// DQNLoss against the target written out by hand: DQN and double DQN, terminal frames, MultiStep's
// per-frame gamma, importance weights, and gradients reaching only the online network.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include <troupe/nn/nn.h>
#include <troupe/optim/swa_utils.h>
#include <troupe/rl/dqn.h>
#include <troupe/tensor/ops.h>

using namespace troupe;
using rl::TensorDict;

namespace {

std::shared_ptr<nn::LinearImpl> fixed_linear(std::vector<double> w) {
  auto l = std::make_shared<nn::LinearImpl>(nn::LinearOptions(2, 2).bias(false));
  NoGradGuard g;
  l->weight.copy_(tensor(w).reshape({2, 2}).to(l->weight.dtype()));
  return l;
}

double huber(double d) { return std::abs(d) < 1 ? 0.5 * d * d : std::abs(d) - 0.5; }

// q(s) = W s for a 2x2 W (row a gives action a's value).
double q(const std::vector<double>& W, double s0, double s1, int a) { return W[2 * a] * s0 + W[2 * a + 1] * s1; }

}  // namespace

TEST(DQNLoss, MatchesTheTargetWrittenOut) {
  const std::vector<double> Wv = {1.0, 0.5, -0.5, 2.0}, Wt = {0.2, 1.0, 1.5, -1.0};
  auto online = fixed_linear(Wv), target = fixed_linear(Wt);
  TensorDict td({3});
  const double obs[3][2] = {{1, 2}, {0.5, -1}, {2, 0}}, nxt[3][2] = {{0.3, 1}, {1, 1}, {-1, 0.5}};
  td.set("observation", tensor({1.0, 2.0, 0.5, -1.0, 2.0, 0.0}).reshape({3, 2}));
  td.set("next.observation", tensor({0.3, 1.0, 1.0, 1.0, -1.0, 0.5}).reshape({3, 2}));
  td.set("action", tensor({0, 1, 1}).to(kInt64));
  td.set("next.reward", tensor({1.0, 0.0, -1.0}).reshape({3, 1}));
  td.set("next.terminated", tensor({false, false, true}).reshape({3, 1}));
  const int act[3] = {0, 1, 1};
  const double rew[3] = {1, 0, -1};
  const bool term[3] = {false, false, true};
  for (bool dbl : {false, true}) {
    rl::DQNLoss loss_fn(online, target, rl::DQNLossOptions().gamma(0.9).double_dqn(dbl));
    auto out = loss_fn(td);
    double expect = 0;
    for (int i = 0; i < 3; ++i) {
      const double qa = q(Wv, obs[i][0], obs[i][1], act[i]);
      const auto& pick = dbl ? Wv : Wt;
      const int a_star = q(pick, nxt[i][0], nxt[i][1], 0) >= q(pick, nxt[i][0], nxt[i][1], 1) ? 0 : 1;
      const double y = rew[i] + (term[i] ? 0.0 : 0.9 * q(Wt, nxt[i][0], nxt[i][1], a_star));
      expect += huber(qa - y) / 3;
      EXPECT_NEAR(out.td_error.select(0, i).item<float>(), std::abs(qa - y), 1e-5) << "double " << dbl << " frame " << i;
    }
    EXPECT_NEAR(out.loss.item<float>(), expect, 1e-5) << "double " << dbl;
  }
}

TEST(DQNLoss, UsesMultiStepGammaTerminalAndWeights) {
  auto online = fixed_linear({1, 0, 0, 1}), target = fixed_linear({1, 0, 0, 1});
  TensorDict td({2});
  td.set("observation", tensor({0.0, 0.0, 0.0, 0.0}).reshape({2, 2}));
  td.set("next.observation", tensor({2.0, 1.0, 2.0, 1.0}).reshape({2, 2}));
  td.set("action", tensor({0, 0}).to(kInt64));
  td.set("next.reward", tensor({0.5, 0.5}));
  td.set("gamma", tensor({0.81, 0.729}).reshape({2, 1}));        // gamma^2, gamma^3
  td.set("next.terminated", tensor({false, false}).reshape({2, 1}));
  td.set("next.n_step_terminated", tensor({false, true}).reshape({2, 1}));  // wins over next.terminated
  td.set("_weight", tensor({1.0, 3.0}));
  rl::DQNLoss loss_fn(online, target, rl::DQNLossOptions().loss_function("l2"));
  auto out = loss_fn(td);
  // q = 0; targets 0.5 + 0.81 * 2 = 2.12 and 0.5 (terminal window)
  EXPECT_NEAR(out.td_error.select(0, 0).item<float>(), 2.12, 1e-5);
  EXPECT_NEAR(out.td_error.select(0, 1).item<float>(), 0.5, 1e-5);
  EXPECT_NEAR(out.loss.item<float>(), (1.0 * 2.12 * 2.12 + 3.0 * 0.25) / 2, 1e-4);
  // gradients reach the online network only
  online->zero_grad();
  target->zero_grad();
  out.loss.backward();
  EXPECT_TRUE(online->weight.grad().defined());
  EXPECT_FALSE(target->weight.grad().defined());
}

TEST(DQNLoss, Errors) {
  auto net = fixed_linear({1, 0, 0, 1});
  EXPECT_THROW(rl::DQNLoss(net, nullptr), std::invalid_argument);
  EXPECT_THROW(rl::DQNLoss(net, net, rl::DQNLossOptions().loss_function("l1")), std::invalid_argument);
  TensorDict td({2});
  td.set("observation", zeros({2, 2}));
  td.set("next.observation", zeros({2, 2}));
  td.set("action", zeros({3}, kInt64).narrow(0, 0, 2));
  td.set("next.reward", zeros({2}));
  EXPECT_THROW(rl::DQNLoss(net, net)(td), std::out_of_range);  // no terminal flag at all
}

// Target-network updates as TorchRL's: SoftUpdate is target = eps * target + (1 - eps) * online after
// every step; HardUpdate copies on the K-th, 2K-th, ... step. Also with an AveragedModel as the target.
TEST(TargetUpdates, SoftAndHardUpdatesWrittenOut) {
  const std::vector<double> Wv = {1.0, 0.5, -0.5, 2.0}, Wt = {0.2, 1.0, 1.5, -1.0};
  auto online = fixed_linear(Wv), target = fixed_linear(Wt);
  rl::DQNLoss loss(online, target);
  rl::SoftUpdate soft(loss, 0.9);
  soft.step();
  soft.step();
  for (int i = 0; i < 4; ++i) {
    // two steps: t2 = 0.81 t0 + 0.19 v
    EXPECT_NEAR(target->weight.reshape({-1})[i].item<double>(), 0.81 * Wt[i] + 0.19 * Wv[i], 1e-6) << i;
  }
  auto t2 = fixed_linear(Wt);
  rl::HardUpdate hard(online, t2, /*value_network_update_interval=*/3);
  hard.step();
  hard.step();
  EXPECT_EQ(hard.updates(), 0);
  EXPECT_NEAR(t2->weight.reshape({-1})[0].item<double>(), Wt[0], 1e-7);  // float32 weights: untouched
  hard.step();
  EXPECT_EQ(hard.updates(), 1);
  EXPECT_TRUE(equal(t2->weight, online->weight));
  {
    NoGradGuard g;
    online->weight.add_(1.0);
  }
  for (int i = 0; i < 2; ++i) hard.step();
  EXPECT_FALSE(equal(t2->weight, online->weight));
  hard.step();
  EXPECT_EQ(hard.updates(), 2);
  EXPECT_TRUE(equal(t2->weight, online->weight));
  // an AveragedModel of the online network as the target: its module's parameters are updated
  auto avg = std::make_shared<optim::swa_utils::AveragedModel>(fixed_linear(Wt));
  rl::SoftUpdate onto_avg(online, avg, 0.5);
  onto_avg.step();
  EXPECT_NEAR(avg->parameters()[0].reshape({-1})[1].item<double>(), 0.5 * Wt[1] + 0.5 * (Wv[1] + 1.0), 1e-6);
  // argument errors
  EXPECT_THROW(rl::SoftUpdate(online, target, 1.5), std::invalid_argument);
  EXPECT_THROW(rl::HardUpdate(online, target, 0), std::invalid_argument);
  auto wide = std::make_shared<nn::LinearImpl>(nn::LinearOptions(3, 2).bias(false));
  try {
    rl::HardUpdate(online, wide, 1);
    ADD_FAILURE() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "[HardUpdate] parameter 0 has shape (2, 2) in the online network and (2, 3) in the target");
  }
}
