// ParallelEnv (torchrl.envs.ParallelEnv, on threads instead of processes): num_workers environments,
// each built by create_env_fn and stepped on a thread of its own, seen as one batch of all their copies.
//
//   rl::ParallelEnv env(4, [] { return std::make_shared<rl::CartPoleEnv>(16); });   // batch [64]
//   env.set_seed(0);                                   // workers seeded in a chain, every copy its own seed
//   rl::TensorDict td = env.reset();
//   td.set("action", env.rand_action());
//   auto [full, root] = env.step_and_maybe_reset(td);  // each worker steps and resets its done copies
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <troupe/rl/env.h>

namespace troupe::rl {

/// num_workers environments stepped at once on threads. Every worker's environment must have one
/// batch dim; the ParallelEnv's batch is their copies concatenated ([num_workers * n] for workers of
/// n copies: TorchRL's [num_workers, *sub batch] flattened, so a single-copy environment gives
/// [num_workers] as TorchRL's does). Worker w's slice of every TensorDict goes to its environment on
/// its own thread (the caller's thread serves worker 0); an exception in a worker reaches the caller,
/// naming the worker.
class ParallelEnv : public EnvBase {
 public:
  ParallelEnv(int64_t num_workers, const std::function<std::shared_ptr<EnvBase>()>& create_env_fn);
  ~ParallelEnv() override;
  ParallelEnv(const ParallelEnv&) = delete;
  ParallelEnv& operator=(const ParallelEnv&) = delete;

  TensorDict reset(const std::optional<TensorDict>& td = std::nullopt) override;
  TensorDict step(const TensorDict& td) override;
  /// Seeds worker 0 with `seed` and each next worker with the seed the one before returned (TorchRL's
  /// chaining: distinct seeds for every copy of every worker); returns the last worker's.
  uint64_t set_seed(uint64_t seed) override;
  Tensor rand_action() override;
  std::string name() const override;
  /// Each worker steps and resets its own done copies on its thread (one round trip for both).
  std::pair<TensorDict, TensorDict> step_and_maybe_reset(const TensorDict& td) override;

  int64_t num_workers() const { return static_cast<int64_t>(envs_.size()); }
  /// Worker w's environment.
  EnvBase& worker(int64_t w) { return *envs_.at(static_cast<size_t>(w)); }

 private:
  struct Pool;
  /// Runs fn(w) for every worker w at once and waits for all; rethrows the first failure.
  void run_all(const std::function<void(size_t)>& fn);

  std::vector<std::shared_ptr<EnvBase>> envs_;
  std::vector<int64_t> offsets_;  // worker w's copies: [offsets_[w], offsets_[w + 1])
  std::unique_ptr<Pool> pool_;
};

}  // namespace troupe::rl
