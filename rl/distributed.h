// RL on actors: collector workers and a replay buffer as actors on any rank, and the learner's side of
// them (TorchRL's MultiSyncDataCollector / MultiaSyncDataCollector, a remote TensorDictReplayBuffer).
// Each worker runs a SyncDataCollector over its own batch of environments with an epsilon-greedy
// Q-value policy and MultiStep; it sends its batches to the replay actor (or returns them), and reports
// frames, episode returns and the policy version that collected them. Every worker has at most one
// batch in flight (the learner asks for the next one): a slow learner makes workers wait, never memory
// grow. A worker whose actor dies is spawned again on its rank with the latest weights (up to a limit).
//
//   rl::RemoteReplayBuffer replay = rl::RemoteReplayBuffer::spawn(rt, 3, 100000);
//   rl::MultiaSyncDataCollector collectors(rt, {1, 2}, spec, qnet.ptr(), /*total_frames=*/200000, replay);
//   while (auto info = collectors.next()) { ... replay.sample(64) ...; collectors.update_policy_weights_(*qnet); }
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <troupe/actors/averager.h>
#include <troupe/actors/remote_module.h>
#include <troupe/actors/runtime.h>
#include <troupe/rl/env.h>
#include <troupe/rl/tensordict.h>

namespace troupe::actors {
/// A TensorDict travels as [batch_size, [[key, tensor], ...]] (leaves, nested keys dotted).
template <>
struct ValueTraits<rl::TensorDict> {
  static Value to(const rl::TensorDict& td);
  static rl::TensorDict from(const Value& v);
};
}  // namespace troupe::actors

namespace troupe::rl {

/// Builds num_envs copies of an environment; registered by name on every rank.
using EnvFactory = std::function<std::shared_ptr<EnvBase>(int64_t num_envs)>;
/// Registers `factory` as `name` ("CartPole" and "Pendulum" are built in).
void register_env(const std::string& name, EnvFactory factory);
/// The environment `name` with num_envs copies; an unknown name lists the registered ones.
std::shared_ptr<EnvBase> make_env(const std::string& name, int64_t num_envs);

/// What every collector worker runs: the environment, the Q-network (a module factory registered with
/// actors::register_module on every rank; its weights come from the learner), epsilon-greedy
/// exploration, MultiStep and the batch shape.
struct CollectorSpec {
  std::string env = "CartPole";
  int64_t num_envs = 8;
  /// Worker i seeds its environments and exploration from seed + 1000 * i (+ 100000 per restart).
  uint64_t seed = 0;
  /// Module factory of the policy network (QValuePolicy over it).
  std::string policy;
  double eps_init = 1.0, eps_end = 0.05;
  /// Frames over which each worker anneals epsilon.
  int64_t annealing_frames = 10000;
  /// MultiStep(gamma, n_steps); n_steps 0: none.
  double gamma = 0.99;
  int64_t n_steps = 0;
  int64_t frames_per_batch = 256;
  /// Random actions for each worker's first frames.
  int64_t init_random_frames = 0;
  int64_t max_frames_per_traj = -1;
};

/// What the learner gets for each batch a worker collected.
struct CollectedBatch {
  int worker = 0;
  int64_t frames = 0;          // in this batch
  int64_t policy_version = 0;  // of the weights that collected it
  std::vector<double> episode_returns;  // episodes that ended in it
  /// The batch [num_envs * T] (after MultiStep), when no replay actor takes it.
  std::optional<TensorDict> batch;
};

/// Prioritized sampling for a replay actor (PrioritizedSampler's alpha, beta and eps).
struct PrioritizedReplayOptions {
  double alpha = 0.6, beta = 0.4, eps = 1e-8;
};

/// A TensorDictReplayBuffer in an actor (uniform or prioritized sampling): collectors extend it, learners
/// sample it and send it new priorities. Its state_dict() is a checkpoint a fresh replay actor loads.
class RemoteReplayBuffer {
 public:
  /// Spawns the replay actor on `rank` (named `name`, or "troupe.replay<n>"), sampling uniformly.
  static RemoteReplayBuffer spawn(actors::Runtime& rt, int rank, int64_t capacity, uint64_t seed = 0, std::string name = "");
  /// The same with prioritized sampling (sample() adds "_weight"; update_priority() sets priorities).
  static RemoteReplayBuffer spawn(actors::Runtime& rt, int rank, int64_t capacity, PrioritizedReplayOptions prioritized,
                                  uint64_t seed = 0, std::string name = "");
  RemoteReplayBuffer() = default;
  explicit RemoteReplayBuffer(actors::ActorRef ref) : ref_(std::move(ref)) {}
  /// Appends frames (batch [N]); returns the buffer's size after.
  int64_t extend(const TensorDict& frames) const;
  /// batch_size frames drawn with replacement, with "index" (and "_weight" when prioritized).
  TensorDict sample(int64_t batch_size) const;
  /// Sends new priorities for frames `index` (one-way, so the learner never waits; a later sample()
  /// from the same sender sees them, messages being ordered per sender). Errors (an index outside the
  /// stored frames, a uniform buffer) show in the actor's last error and fail the next request.
  void update_priority(const Tensor& index, const Tensor& priority) const;
  /// Sets the importance-sampling exponent beta (annealed towards 1 by the learner); one-way (a uniform
  /// buffer's refusal fails the next sample()).
  void set_beta(double beta) const;
  int64_t size() const;
  nn::StateDict state_dict() const;
  void load_state_dict(const nn::StateDict& state) const;
  const actors::ActorRef& ref() const { return ref_; }

 private:
  actors::ActorRef ref_;
};

/// Collector workers as actors, batches handed out as they arrive (TorchRL's MultiaSyncDataCollector):
/// each worker always has one batch request in flight.
class MultiaSyncDataCollector {
 public:
  /// One worker per entry of `ranks` (a rank may appear several times). `policy` gives the first weights
  /// (in one process each worker gets a copy). With a valid `replay`, workers extend it themselves and
  /// CollectedBatch::batch stays empty. Stops after total_frames (negative: never); batches the other
  /// workers had in flight then are not handed out (with a replay actor they were stored already).
  MultiaSyncDataCollector(actors::Runtime& rt, std::vector<int> ranks, CollectorSpec spec, const nn::ModulePtr& policy,
                          int64_t total_frames = -1, RemoteReplayBuffer replay = {}, int max_restarts = 3);
  virtual ~MultiaSyncDataCollector();
  MultiaSyncDataCollector(const MultiaSyncDataCollector&) = delete;
  MultiaSyncDataCollector& operator=(const MultiaSyncDataCollector&) = delete;

  /// The next batch any worker finished, or nullopt once total_frames were collected. A worker that
  /// died is spawned again (its batch is lost); past max_restarts the error names it and its failure.
  virtual std::optional<CollectedBatch> next();
  /// Sends `policy`'s weights to every worker as the next version (one-way; workers load them before
  /// their next batch).
  void update_policy_weights_(const nn::Module& policy);
  int64_t frames() const { return frames_; }
  int64_t policy_version() const { return version_; }
  /// Workers spawned again so far.
  int restarts() const { return restarts_; }
  /// The workers' actors.
  std::vector<actors::ActorRef> workers() const;
  /// Stops the workers.
  void shutdown();

 protected:
  struct Worker;
  void start(size_t i);
  std::optional<CollectedBatch> take(size_t i);
  bool done() const { return total_frames_ >= 0 && frames_ >= total_frames_; }

  actors::Runtime& rt_;
  std::vector<int> ranks_;
  CollectorSpec spec_;
  nn::ModulePtr policy_;
  int64_t total_frames_;
  RemoteReplayBuffer replay_;
  int max_restarts_;
  std::vector<std::unique_ptr<Worker>> workers_;
  int64_t frames_ = 0, version_ = 0;
  int restarts_ = 0;
  size_t next_ = 0;
  nn::StateDict weights_;  // the latest weights sent (given to a restarted worker)
};

/// The synchronous form (TorchRL's MultiSyncDataCollector): next() waits for one batch from every
/// worker and returns them together (batches concatenated; returns and frames summed; the oldest
/// policy version).
class MultiSyncDataCollector : public MultiaSyncDataCollector {
 public:
  using MultiaSyncDataCollector::MultiaSyncDataCollector;
  std::optional<CollectedBatch> next() override;
};

}  // namespace troupe::rl
