// CartPole-v1 with Gymnasium's dynamics, as a batch of copies stepped in one loop.
#pragma once

#include <cstdint>
#include <vector>

#include <troupe/rl/env.h>

namespace troupe::rl {

/// Gymnasium's CartPole-v1: Euler integration with tau 0.02, force 10, gravity 9.8, cart 1.0, pole 0.1
/// (half-length 0.5); terminated when |x| > 2.4 or |theta| > 12 degrees, truncated after 500 steps;
/// reward 1 every step; reset uniform in [-0.05, 0.05] per state entry from each copy's generator.
/// observation float32 [N, 4] (x, x_dot, theta, theta_dot), action int64 [N] in {0, 1} (or one-hot
/// [N, 2]), reward float32 [N, 1], done / terminated / truncated bool [N, 1].
class CartPoleEnv : public EnvBase {
 public:
  static constexpr double kGravity = 9.8, kMassCart = 1.0, kMassPole = 0.1, kLength = 0.5, kForceMag = 10.0,
                          kTau = 0.02, kXThreshold = 2.4;
  static constexpr int64_t kMaxEpisodeSteps = 500;
  /// 12 degrees in radians, as Gymnasium computes it: 12 * 2 * pi / 360.
  static double theta_threshold();

  explicit CartPoleEnv(int64_t num_envs = 1, int64_t max_episode_steps = kMaxEpisodeSteps);

  TensorDict reset(const std::optional<TensorDict>& td = std::nullopt) override;
  TensorDict step(const TensorDict& td) override;
  /// EnvBase's step_and_maybe_reset in one pass: the done copies are reset while the next root is
  /// built (the same values and generator draws as step, step_mdp, then reset of the done copies).
  std::pair<TensorDict, TensorDict> step_and_maybe_reset(const TensorDict& td) override;
  uint64_t set_seed(uint64_t seed) override;
  Tensor rand_action() override;
  std::string name() const override { return "CartPoleEnv"; }

  int64_t num_envs() const { return n_; }
  /// The raw state (float64 [N, 4]) and step counts, for tests.
  const std::vector<double>& state() const { return state_; }
  void set_state(const std::vector<double>& state);

 private:
  int64_t n_;
  int64_t max_steps_;
  std::vector<double> state_;     // [N, 4]
  std::vector<int64_t> elapsed_;  // steps since reset
  std::vector<Generator> gens_;
  Generator action_gen_;
};

/// Gymnasium's Pendulum-v1: g 10, m 1, l 1, dt 0.05, torque clipped to [-2, 2], speed to [-8, 8];
/// reward -(angle_normalize(th)^2 + 0.1 thdot^2 + 0.001 u^2); never terminates, truncated after 200
/// steps; reset th ~ U(-pi, pi), thdot ~ U(-1, 1). observation float32 [N, 3] (cos th, sin th, thdot),
/// action float32 [N, 1].
class PendulumEnv : public EnvBase {
 public:
  static constexpr double kG = 10.0, kMass = 1.0, kLength = 1.0, kDt = 0.05, kMaxSpeed = 8.0, kMaxTorque = 2.0;
  static constexpr int64_t kMaxEpisodeSteps = 200;

  explicit PendulumEnv(int64_t num_envs = 1, int64_t max_episode_steps = kMaxEpisodeSteps);

  TensorDict reset(const std::optional<TensorDict>& td = std::nullopt) override;
  TensorDict step(const TensorDict& td) override;
  uint64_t set_seed(uint64_t seed) override;
  Tensor rand_action() override;
  std::string name() const override { return "PendulumEnv"; }

  const std::vector<double>& state() const { return state_; }
  void set_state(const std::vector<double>& state);

 private:
  int64_t n_;
  int64_t max_steps_;
  std::vector<double> state_;  // [N, 2]: th, thdot
  std::vector<int64_t> elapsed_;
  std::vector<Generator> gens_;
  Generator action_gen_;
};

}  // namespace troupe::rl
