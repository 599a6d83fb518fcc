// SyncDataCollector (TorchRL's, semantics.md section 4): runs a policy in a batch of environment copies
// and hands out batches [num_envs, T] with collector.traj_ids, a policy version, and an optional
// postproc (MultiStep). Policies are functions TensorDict -> TensorDict that write "action";
// QValuePolicy and EGreedy make the DQN ones.
//
//   rl::SyncDataCollector collector(env, rl::EGreedy(rl::QValuePolicy(net), env, 1.0, 0.05, 10000),
//                                   rl::SyncDataCollectorOptions().frames_per_batch(256).total_frames(50000));
//   while (auto batch = collector.next()) { ... }
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>

#include <troupe/nn/module.h>
#include <troupe/rl/env.h>
#include <troupe/rl/tensordict.h>
#include <troupe/util/options.h>

namespace troupe::rl {

/// A policy: reads the root (observation, ...) and returns it with "action" set.
using Policy = std::function<TensorDict(TensorDict)>;

/// action = argmax_a net(observation)[a] (TorchRL's QValueActor), computed without a graph; the values
/// go to "action_value".
Policy QValuePolicy(nn::ModulePtr net);

/// Epsilon-greedy exploration around `policy` (TorchRL's EGreedyModule): each copy takes a random action
/// with probability eps, which falls linearly from eps_init to eps_end over annealing_num_steps calls of
/// step() (the collector calls it once per batch frame count via the returned handle's step).
class EGreedy {
 public:
  EGreedy(Policy policy, std::shared_ptr<EnvBase> env, double eps_init, double eps_end, int64_t annealing_num_steps,
          uint64_t seed = 0);
  TensorDict operator()(TensorDict td);
  /// Advances the schedule by `frames`.
  void step(int64_t frames = 1);
  double eps() const;

 private:
  struct State;
  std::shared_ptr<State> state_;  // shared, so that copies of the policy function see one schedule
};

struct SyncDataCollectorOptions {
  /// Frames per batch; T = ceil(frames_per_batch / num_envs) steps of every copy.
  TROUPE_ARG(int64_t, frames_per_batch) = 0;
  /// Stop after ceil(total_frames / frames_per_batch) batches; negative: never.
  TROUPE_ARG(int64_t, total_frames) = -1;
  /// Random actions (env.rand_action()) until this many frames were collected.
  TROUPE_ARG(int64_t, init_random_frames) = 0;
  /// Truncate a trajectory after this many steps (next.truncated and next.done set); negative: never.
  TROUPE_ARG(int64_t, max_frames_per_traj) = -1;
  /// Reset every copy at the start of every batch.
  TROUPE_ARG(bool, reset_at_each_iter) = false;
  /// Hand out batches split into trajectories (split_trajectories), before postproc.
  TROUPE_ARG(bool, split_trajs) = false;
};

/// TorchRL's split_trajectories: the frames of `batch` (batch [N, T] or [T], read row by row) cut where
/// collector.traj_ids changes, one trajectory per row, zero-padded at the end to the longest:
/// [num_trajectories, max_length], with collector.mask (bool) true on the real frames. A batch whose
/// rows are each one whole trajectory keeps its shape (mask all true).
TensorDict split_trajectories(const TensorDict& batch);

class SyncDataCollector {
 public:
  SyncDataCollector(std::shared_ptr<EnvBase> env, Policy policy, SyncDataCollectorOptions options,
                    std::function<TensorDict(TensorDict)> postproc = nullptr);

  /// The next batch [num_envs, T] (after postproc), or nullopt once total_frames were collected.
  std::optional<TensorDict> next();
  /// Replaces the policy (new weights) and bumps the version recorded in later batches.
  void update_policy_weights_(Policy policy);
  /// Bumps the version (the policy reads weights that were changed in place).
  void update_policy_weights_();
  int64_t policy_version() const { return version_; }
  int64_t frames() const { return frames_; }
  int64_t batches() const { return batches_; }
  /// Finished episodes' returns since the last call (from next.done), for progress lines.
  std::vector<double> take_episode_returns();

 private:
  std::shared_ptr<EnvBase> env_;
  Policy policy_;
  SyncDataCollectorOptions options_;
  std::function<TensorDict(TensorDict)> postproc_;
  int64_t num_envs_, T_, max_batches_;
  int64_t frames_ = 0, batches_ = 0, version_ = 0, next_traj_ = 0;
  std::optional<TensorDict> root_;
  Tensor traj_ids_, traj_steps_;
  std::vector<double> running_return_, finished_returns_;
  bool random_frames_keep_keys_ = true;
};

}  // namespace troupe::rl
