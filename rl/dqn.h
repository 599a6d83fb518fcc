// The DQN loss (TorchRL's DQNLoss): Q(s, a) regressed on r + discount * (1 - terminal) * Q'(s', a*),
// with a* from the target network (DQN) or the online one (double DQN), n-step aware through the keys
// MultiStep writes (gamma, next.n_step_terminated), importance weights from a prioritized replay.
#pragma once

#include <string>
#include <vector>

#include <troupe/nn/module.h>
#include <troupe/rl/tensordict.h>
#include <troupe/util/options.h>

namespace troupe::rl {

struct DQNLossOptions {
  /// The one-step discount, used when the frames hold no "gamma" (MultiStep writes one per frame).
  TROUPE_ARG(double, gamma) = 0.99;
  /// Pick a* with the online network and evaluate it with the target one (van Hasselt et al. 2016).
  TROUPE_ARG(bool, double_dqn) = true;
  /// "smooth_l1" (Huber with delta 1, TorchRL's default) or "l2".
  TROUPE_ARG(std::string, loss_function) = "smooth_l1";
};

/// What one evaluation gives: the loss to backpropagate and the per-frame |TD error| (detached, float32
/// [B]) to feed a prioritized replay's update_priority.
struct DQNLossOutput {
  Tensor loss;
  Tensor td_error;
};

/// Reads observation, action (int64 [B] or [B, 1], or one-hot [B, A]), next.observation, next.reward
/// ([B] or [B, 1]), the terminal flag (next.n_step_terminated, else next.terminated, else next.done),
/// gamma (optional) and _weight (optional). The networks map [B, obs] to [B, A].
class DQNLoss {
 public:
  DQNLoss(nn::ModulePtr value_network, nn::ModulePtr target_network, DQNLossOptions options = {});
  DQNLossOutput operator()(const TensorDict& frames) const;
  const DQNLossOptions& options() const { return options_; }
  const nn::ModulePtr& value_network() const { return value_; }
  const nn::ModulePtr& target_network() const { return target_; }

 private:
  nn::ModulePtr value_, target_;
  DQNLossOptions options_;
};

/// Soft target-network updates (TorchRL's SoftUpdate): every step() (call it after each optimizer step)
/// sets target = eps * target + (1 - eps) * online, parameter by parameter. The target may be a copy of
/// the online network or an AveragedModel of it (its "module" parameters, in the same order).
class SoftUpdate {
 public:
  explicit SoftUpdate(const DQNLoss& loss, double eps = 0.999);
  SoftUpdate(nn::ModulePtr online, nn::ModulePtr target, double eps = 0.999);
  void step();
  double eps() const { return eps_; }

 private:
  std::vector<Tensor> online_, target_;
  double eps_;
};

/// Hard target-network updates (TorchRL's HardUpdate): the K-th, 2K-th, ... step() copies the online
/// parameters into the target (K = value_network_update_interval); the other calls do nothing.
class HardUpdate {
 public:
  explicit HardUpdate(const DQNLoss& loss, int64_t value_network_update_interval = 1000);
  HardUpdate(nn::ModulePtr online, nn::ModulePtr target, int64_t value_network_update_interval = 1000);
  void step();
  /// Copies done so far.
  int64_t updates() const { return updates_; }

 private:
  std::vector<Tensor> online_, target_;
  int64_t interval_, steps_ = 0, updates_ = 0;
};

}  // namespace troupe::rl
