// Supervision of module hosts (the actors behind RemoteModule proxies): a host that fails (stopped, its
// process gone, no answer within its timeout) is spawned again, on its rank or the next of
// RestartPolicy::ranks, after a back-off, from the last checkpoint of what it holds (its subtree's
// parameters, buffers, training and requires_grad flags, and its optimizers' state), and every proxy of
// it is re-pointed. Calls that cannot change training state (state queries, a forward under no_grad or
// in eval mode, train/eval, zero_grad) are retried on the new host; any other call made across the
// failure throws HostRestartedError naming the actor, its rank, the module and the checkpoint's step,
// and DistributedOptimizer::step() refuses to step a model one of whose hosts was restarted since its
// last step, so that no run goes on silently from a mixed state. Past max_restarts a call throws an
// ActorError naming the actor and its last failure. CAF-free.
//
//   auto policy = actors::RestartPolicy().restarts(3).every(50);     // checkpoint every 50 steps
//   actors::place(rt, model, {{"enc", 1}, {"dec", 2}}, policy);
//   actors::DistributedOptimizer opt(model, optim::SGDOptions(0.1));
//   for (int64_t step = 0; step < n;) {
//     try {
//       opt.zero_grad(); loss_of(model, batch(step)).backward(); opt.step(); ++step;
//     } catch (const actors::HostRestartedError& e) {
//       step = opt.restore();    // every part back to the cut the host was restarted from
//     }
//   }
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <troupe/actors/placement.h>
#include <troupe/actors/remote_module.h>

namespace troupe::actors {

/// When and where a failed actor is spawned again (Ray's max_restarts; Erlang's restart intensity).
struct RestartPolicy {
  /// Restarts allowed over the actor's life; the failure after the last one ends with an ActorError
  /// naming the actor and that failure. 0: not supervised (failures reach the callers).
  int max_restarts = 0;
  /// The wait before restart k: backoff * backoff_multiplier^(k - 1), at most max_backoff.
  std::chrono::milliseconds backoff{0};
  /// The back-off's growth per restart.
  double backoff_multiplier = 2.0;
  /// The longest back-off.
  std::chrono::milliseconds max_backoff{std::chrono::seconds(10)};
  /// Ranks a restarted actor may go to, tried in order until a spawn succeeds (a rank whose process is
  /// gone fails at once); empty: the rank it ran on.
  std::vector<int> ranks;
  /// A module host is checkpointed every this many DistributedOptimizer steps (0: only when
  /// DistributedOptimizer::checkpoint() is called, and once when it is built).
  int64_t checkpoint_every = 0;

  /// Sets max_restarts.
  RestartPolicy& restarts(int n) {
    max_restarts = n;
    return *this;
  }
  /// Sets the back-off: `first` before the first restart, times `multiplier` before each next one.
  RestartPolicy& wait(std::chrono::milliseconds first, double multiplier = 2.0) {
    backoff = first;
    backoff_multiplier = multiplier;
    return *this;
  }
  /// Sets the ranks a restart tries, in order.
  RestartPolicy& on_ranks(std::vector<int> r) {
    ranks = std::move(r);
    return *this;
  }
  /// Sets checkpoint_every.
  RestartPolicy& every(int64_t steps) {
    checkpoint_every = steps;
    return *this;
  }
};

/// A call to a supervised module host failed because the host died; it was spawned again from its
/// last checkpoint, and this call, which changes training state (or needed the lost host's autograd
/// graph), was not retried. Rewind to checkpoint_step() (DistributedOptimizer::restore) and go on.
class HostRestartedError : public ActorError {
 public:
  HostRestartedError(const std::string& what, std::string actor, int rank, std::string module, int64_t step)
      : ActorError(what), actor_(std::move(actor)), rank_(rank), module_(std::move(module)), step_(step) {}
  /// The actor that failed, and the rank it ran on.
  const std::string& actor() const { return actor_; }
  int rank() const { return rank_; }
  /// The module the call was for (its path in the placed model, or the hosted class).
  const std::string& module() const { return module_; }
  /// The optimizer step of the checkpoint the host was restarted from.
  int64_t checkpoint_step() const { return step_; }

 private:
  std::string actor_;
  int rank_;
  std::string module_;
  int64_t step_;
};

/// host(rt, rank, factory, args, name) supervised by `policy`.
RemoteModulePtr host(Runtime& rt, int rank, const std::string& factory, List args, std::string name,
                     const RestartPolicy& policy);
/// host(rt, module, rank, factory, args, name) supervised by `policy`. A restart builds the module from
/// `factory` (default: its class name when a module factory of that name exists; in one process,
/// otherwise, a clone taken now).
RemoteModulePtr host(Runtime& rt, const nn::ModulePtr& module, int rank, const std::string& factory, List args,
                     std::string name, const RestartPolicy& policy);
/// place(rt, model, placement) with every host supervised by `policy`.
/// Each subtree on one rank: a group (replicated / sharded) is refused (not supervised yet).
std::map<std::string, RemoteModulePtr> place(Runtime& rt, const nn::ModulePtr& model,
                                             const std::map<std::string, Placement>& placement, const RestartPolicy& policy);

/// Restarts of a supervised proxy's host so far (0 for an unsupervised one).
int restarts(const RemoteModule& proxy);

namespace detail {

/// @private The restart bookkeeping every supervised actor shares (module hosts, the Averager, the RL
/// collectors' workers): failures counted against the policy, the back-off, and the limit's text.
class RestartBudget {
 public:
  explicit RestartBudget(RestartPolicy policy = {}) : policy_(std::move(policy)) {}
  /// `who` ("[actors] averager 'a' (rank 1)") failed with `failure`. Past max_restarts throws ActorError
  /// "<who> failed <n> times, more than max_restarts = <m>; its last failure: <failure>"; else waits the
  /// back-off and returns the restart's number (1, 2, ...).
  int admit(const std::string& who, const std::string& failure);
  /// Restarts admitted so far.
  int restarts() const { return restarts_; }
  /// The policy it counts against.
  const RestartPolicy& policy() const { return policy_; }
  /// The ranks a restart of an actor that ran on `rank` tries, in order: policy().ranks, else `rank`.
  std::vector<int> ranks(int rank) const;

 private:
  RestartPolicy policy_;
  int restarts_ = 0;
};

/// @private The caller's side of one supervised host, shared by every proxy of it, the autograd nodes
/// of its forwards and DistributedOptimizer: the current actor, its generation (one per restart), the
/// last checkpoint, and the restart itself.
class HostSupervisor {
 public:
  HostSupervisor(Runtime& rt, ActorRef ref, List rebuild, nn::ModulePtr model_template, RestartPolicy policy,
                 std::string module);
  /// The current host and its generation; ActorError once the host is past its restarts.
  std::pair<ActorRef, uint64_t> current() const;
  /// The current generation (one more per restart).
  uint64_t generation() const;
  /// The policy it follows.
  const RestartPolicy& policy() const { return budget_.policy(); }
  /// The module's name in errors: its path in the placed model, or its class.
  const std::string& module() const { return module_; }
  /// Restarts so far.
  int restarts() const;
  /// The step of the checkpoint a restart resumes from.
  int64_t checkpoint_step() const;
  /// Keeps `ckpt` (the host's "ckpt" reply) as the state a restart resumes from, labelled `step`.
  void keep(Value ckpt, int64_t step);
  /// train(mode) on the module at `path` succeeded: a restart keeps that flag (the subtree's).
  void note_train(const std::string& path, bool mode);
  /// Called with the error of a call made to generation `gen`: false when it is not the host's failure
  /// (a handler's exception: rethrow it). Otherwise the host has been spawned again (by this call or an
  /// earlier one) and true is returned; past max_restarts the limit error is thrown (now and later).
  bool recover(uint64_t gen, const std::string& error);
  /// Throws HostRestartedError for `call` on `path` (inside the host), not retried after the restart.
  [[noreturn]] void throw_restarted(const std::string& call, const std::string& path) const;
  /// Throws HostRestartedError when the host was restarted since generation `gen` (a graph recorded
  /// then is lost): `what` names the module.
  void check_graph(uint64_t gen, const std::string& what) const;

 private:
  std::string label(const std::string& path) const;

  Runtime* rt_;
  mutable std::mutex mu_;
  ActorRef ref_;
  uint64_t gen_ = 0;
  List rebuild_;                  // a module spec to build the subtree again ("factory", name, args)
  nn::ModulePtr model_template_;  // one process without a factory: cloned into each new host
  RestartBudget budget_;
  std::string module_;   // its path in the placed model, or its class
  std::string name_;     // the first actor's name (restarts add ".r<k>")
  Value ckpt_;
  int64_t ckpt_step_ = 0;
  std::string last_failure_, last_failed_name_, final_error_;  // the failure a restart followed
  int last_failed_rank_ = -1;
};

/// @private True when `method` cannot change training state (retried on a restarted host).
bool idempotent_call(const std::string& method);

/// @private Runs `fn` (a blocking call to the host of `sup`) under supervision: a call that failed with
/// its host is retried on the restarted one when `idempotent`, else throws HostRestartedError.
template <class F>
auto supervised_call(HostSupervisor* sup, const std::string& method, const std::string& path, bool idempotent, F&& fn)
    -> decltype(fn()) {
  if (!sup) return fn();
  while (true) {
    const uint64_t gen = sup->current().second;
    try {
      return fn();
    } catch (const HostRestartedError&) {
      throw;
    } catch (const ActorError& e) {
      if (!sup->recover(gen, e.what())) throw;
      if (!idempotent) sup->throw_restarted(method, path);
    }
  }
}

/// @private A hosted module's checkpoint, taken on its host: [state_dict (copies), [[path, training]...],
/// names of parameters with requires_grad false].
Value module_checkpoint(nn::Module& root);
/// @private Loads what module_checkpoint took.
void module_restore(nn::Module& root, const Value& ckpt);

/// @private The model's own (not hosted) parameters, de-duplicated, with their names, and its hosted
/// subtrees with their paths, in named_parameters' order; persistent buffers of the local part.
struct TreeSplit {
  std::vector<std::pair<std::string, Tensor>> local_params;
  std::vector<std::pair<std::string, Tensor>> local_buffers;
  std::vector<std::pair<std::string, RemoteModule*>> hosts;
};
TreeSplit split_tree(nn::Module& root);

}  // namespace detail
}  // namespace troupe::actors
