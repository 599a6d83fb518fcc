// Averager: torch.optim.swa_utils.AveragedModel as an actor of its own. A trainer feeds it its model's
// parameters and buffers (a snapshot per update, tagged with a version) and never waits for it: at most
// `max_in_flight` updates travel at once, and while they do the newest snapshot waits in their place
// (older waiting ones are dropped: coalesced), so a slow averager never makes memory grow. Anyone may ask
// it for the averaged weights, a forward pass of the averaged model, or update_bn over batches they send.
// Given the updates it applied (applied_versions()), its model is bit for bit the in-process
// AveragedModel's fed the same snapshots. CAF-free.
//
//   auto ema = actors::Averager::spawn(rt, /*rank=*/1, model, actors::AveragerOptions().ema(0.999));
//   for (...) { train_step(); ema.update(*model); }     // returns at once
//   ema.flush();                                       // every update sent has been applied
//   ema.load_into(*eval_model);                        // the averaged weights
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <troupe/actors/future.h>
#include <troupe/actors/runtime.h>
#include <troupe/actors/value.h>
#include <troupe/nn/module.h>
#include <troupe/optim/swa_utils.h>

namespace troupe::actors {

/// How the averager averages and how far the trainer may run ahead.
struct AveragerOptions {
  /// "swa" (the equal-weight running mean, AveragedModel's default), "ema", "copy" (the averaged model
  /// becomes the latest snapshot: a hard target-network update), or the name of a function registered
  /// with register_avg_fn (on every rank).
  std::string avg = "swa";
  /// EMA decay (avg == "ema").
  double decay = 0.999;
  /// Average the buffers too (else they are copied from the trainer's model), as AveragedModel.
  bool use_buffers = false;
  /// Updates travelling at once; more wait as one coalesced snapshot.
  int max_in_flight = 1;
  /// Module factory that builds the model on the averager's rank across processes (default: the
  /// model's class name) and its arguments; in one process the model is cloned there.
  std::string factory;
  List factory_args;
  /// Supervision: an averager whose actor fails (stopped, its process gone) is spawned again on its
  /// rank from the last checkpoint() up to this many times; the updates in flight then are lost (counted
  /// by lost()). 0: a failure is reported by flush().
  int max_restarts = 0;
  /// Take a checkpoint (without waiting) after every this many applied updates (0: only checkpoint()).
  int64_t checkpoint_every = 0;
  /// update() sends a snapshot only on every this many calls (the others return at once, no copy made).
  int64_t update_every = 1;

  AveragerOptions& ema(double d) {
    avg = "ema";
    decay = d;
    return *this;
  }
  AveragerOptions& swa() {
    avg = "swa";
    return *this;
  }
  /// Hard target-network updates (TorchRL's HardUpdate): a copy of the model every `every` update() calls.
  AveragerOptions& hard(int64_t every) {
    avg = "copy";
    update_every = every;
    return *this;
  }
  AveragerOptions& with_buffers(bool b = true) {
    use_buffers = b;
    return *this;
  }
  AveragerOptions& in_flight(int n) {
    max_in_flight = n;
    return *this;
  }
};

/// Registers an averaging function under `name` (every rank): Averagers made with avg = name use it.
void register_avg_fn(const std::string& name, optim::swa_utils::MultiAvgFn fn);

/// A trainer's handle on an averager actor. Copies share the queue.
class Averager {
 public:
  /// Spawns an averager for `model` on `rank` (named `name`, or "troupe.averager<n>"). The model's class
  /// must be clonable (nn::Cloneable) or, across processes, have a module factory.
  static Averager spawn(Runtime& rt, int rank, const nn::ModulePtr& model, AveragerOptions options = {},
                        std::string name = "");
  /// The handle of an averager that already runs (for other ranks: rt.lookup(name)).
  explicit Averager(ActorRef ref, int max_in_flight = 1);
  Averager() = default;

  /// Sends a snapshot of `model`'s parameters and buffers as the next version, without waiting; when
  /// max_in_flight updates are travelling it waits in their place (replacing a waiting one). Returns
  /// the version it was given (with update_every K, only every K-th call sends; the others return the
  /// last version sent).
  int64_t update(const nn::Module& model);
  /// Waits until every update made so far has been applied or dropped as coalesced; throws the
  /// averager's error if one failed.
  void flush();
  /// Versions sent, applied by the averager (after flush: exactly those), and coalesced away.
  int64_t versions_sent() const;
  std::vector<int64_t> applied_versions();
  int64_t coalesced() const;
  /// Updates lost with a failed averager, and how many times it was spawned again.
  int64_t lost() const;
  int restarts() const;
  /// Waits for the updates in flight and keeps the averager's state (its AveragedModel and the versions
  /// it applied): a consistent cut that a restart resumes from.
  void checkpoint();

  /// The AveragedModel's state_dict ("n_averaged", "module.<name>").
  nn::StateDict state_dict() const;
  /// Loads an AveragedModel state_dict and the versions it had applied (actors::load_checkpoint); a
  /// restart then resumes from it, and later versions are numbered after them.
  void load_state_dict(const nn::StateDict& state, const std::vector<int64_t>& applied = {});
  /// Loads the averaged weights ("module.*") into `model` (same architecture).
  void load_into(nn::Module& model) const;
  /// A forward pass of the averaged model (in its current train/eval mode).
  Tensor forward(const Tensor& x) const;
  /// Sets the averaged model's training flag.
  void train(bool mode = true) const;
  /// update_bn over `batches` (inputs), run by the averager.
  void update_bn(const std::vector<Tensor>& batches) const;
  /// The actor (the current one, after a restart).
  ActorRef ref() const;

 private:
  struct Queue;
  void send_locked(std::unique_lock<std::mutex>& lock, int64_t version, List snapshot);
  void prune_locked(std::unique_lock<std::mutex>& lock);
  void restart_locked(const std::string& why);
  std::shared_ptr<Queue> q_;
};

}  // namespace troupe::actors
