// Environments in TorchRL's form: reset() and step() exchange TensorDicts with torchrl's keys
// (observation, action, next.observation, next.reward, next.done / terminated / truncated), a batch of
// copies steps at once, and transforms (StepCounter, RewardSum) wrap any environment.
//
//   rl::CartPoleEnv env(/*num_envs=*/8);
//   env.set_seed(0);
//   rl::TensorDict td = env.reset();                 // observation [8, 4], done [8, 1], ...
//   td.set("action", env.rand_action());
//   td = env.step(td);                               // td["next", ...] filled
//   auto [full, next_root] = env.step_and_maybe_reset(td);  // done copies reset in next_root
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <troupe/rl/tensordict.h>
#include <troupe/tensor/random.h>

namespace troupe::rl {

/// An environment of batch_size() copies (torchrl.envs.EnvBase).
class EnvBase {
 public:
  explicit EnvBase(std::vector<int64_t> batch_size) : batch_size_(std::move(batch_size)) {}
  virtual ~EnvBase() = default;

  const std::vector<int64_t>& batch_size() const { return batch_size_; }

  /// Resets every copy, or with a "_reset" entry (bool, batch shape or batch + [1]) in `td` only the
  /// copies marked; returns observation and done / terminated / truncated (false) for every copy (the
  /// copies not reset keep what `td` holds).
  virtual TensorDict reset(const std::optional<TensorDict>& td = std::nullopt) = 0;
  /// Applies td["action"] and returns `td` with td["next"] = {observation, reward, done, terminated,
  /// truncated}.
  virtual TensorDict step(const TensorDict& td) = 0;
  /// Seeds the reset draws of every copy (copy i from seed + i); returns the next seed to use.
  virtual uint64_t set_seed(uint64_t seed) = 0;
  /// A uniformly random action for every copy.
  virtual Tensor rand_action() = 0;
  /// The environment's name for printing.
  virtual std::string name() const = 0;

  /// step(), then the root of the next step: next.* moved to the root (step_mdp), with the copies
  /// that are done reset (TorchRL's step_and_maybe_reset).
  virtual std::pair<TensorDict, TensorDict> step_and_maybe_reset(const TensorDict& td);
  /// Steps max_steps times with `policy` (random actions when empty) from a reset, stacking the frames
  /// along a new last batch dim; stops after the first frame in which any copy is done when
  /// break_when_any_done, else resets done copies and goes on.
  TensorDict rollout(int64_t max_steps, const std::function<TensorDict(TensorDict)>& policy = nullptr,
                     bool break_when_any_done = true);

 protected:
  std::vector<int64_t> batch_size_;
};

/// The root of the next step from a stepped TensorDict: next.* becomes the root, the action and
/// next.reward are dropped (torchrl.envs.utils.step_mdp with its defaults).
TensorDict step_mdp(const TensorDict& td);

/// A "_reset" mask for the copies whose root done is true: bool, the shape of done.
Tensor done_mask(const TensorDict& root);
/// Whether any entry of a done mask is true (a plain scan for a contiguous bool tensor).
bool any_done(const Tensor& mask);

/// A transform of an environment's outputs (torchrl.envs.transforms.Transform).
class Transform {
 public:
  virtual ~Transform() = default;
  /// Edits what reset() returns; `reset_mask` marks the copies reset (all when undefined).
  virtual void on_reset(TensorDict& td, const Tensor& reset_mask) = 0;
  /// Edits what step() returns (td holds the root and next).
  virtual void on_step(TensorDict& td) = 0;
};

/// Counts steps per copy into step_count (int64, [*batch, 1]), reset to 0 on reset; with max_steps,
/// sets next.truncated (and next.done) once step_count reaches it.
class StepCounter : public Transform {
 public:
  explicit StepCounter(std::optional<int64_t> max_steps = std::nullopt) : max_steps_(max_steps) {}
  void on_reset(TensorDict& td, const Tensor& reset_mask) override;
  void on_step(TensorDict& td) override;

 private:
  std::optional<int64_t> max_steps_;
  Tensor count_;
};

/// Sums the rewards of the current episode into episode_reward ([*batch, 1]), reset to 0 on reset.
class RewardSum : public Transform {
 public:
  void on_reset(TensorDict& td, const Tensor& reset_mask) override;
  void on_step(TensorDict& td) override;

 private:
  Tensor sum_;
};

/// An environment whose outputs go through transforms, in order (torchrl.envs.TransformedEnv).
class TransformedEnv : public EnvBase {
 public:
  TransformedEnv(std::shared_ptr<EnvBase> base, std::vector<std::shared_ptr<Transform>> transforms);
  TensorDict reset(const std::optional<TensorDict>& td = std::nullopt) override;
  TensorDict step(const TensorDict& td) override;
  uint64_t set_seed(uint64_t seed) override { return base_->set_seed(seed); }
  Tensor rand_action() override { return base_->rand_action(); }
  std::string name() const override { return "TransformedEnv(" + base_->name() + ")"; }
  EnvBase& base() { return *base_; }

 private:
  std::shared_ptr<EnvBase> base_;
  std::vector<std::shared_ptr<Transform>> transforms_;
};

}  // namespace troupe::rl
