// RemoteModule: an nn::Module whose subtree lives in a host actor on any rank. The proxy answers every
// method of the Module API with messages to its host (forward, parameters, named_modules, state_dict,
// load_state_dict, apply by registered name, hooks by registered name, train/eval, to, zero_grad,
// requires_grad_, repr), so a tree with hosted subtrees is used exactly as a local one. Forward through a
// proxy records one node in the caller's autograd graph; backward through it runs the host's part of the
// backward pass (its parameters' .grad fill on the host), so `loss.backward()` on the caller spans every
// host. CAF-free.
//
//   actors::register_module<nn::LinearImpl, int64_t, int64_t>("Linear");  // every rank, at start-up
//   auto enc = actors::host(rt, /*rank=*/1, "Linear", {784, 128});        // built on rank 1
//   net->register_module("enc", enc);                                     // a child like any other
//   auto y = net->forward(x); y.sum().backward();                         // grads land on rank 1
//   actors::DistributedOptimizer opt(net, optim::SGDOptions(0.1));        // steps every host
//
// Tensors: with --ranks N (one process) they pass by handle, so parameters() of a proxy are the host's
// own tensors; across processes they are copies made when the call returns (a snapshot): train hosted
// parameters through DistributedOptimizer (or an optimizer on the host), not through these copies.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <troupe/actors/actor.h>
#include <troupe/actors/future.h>
#include <troupe/actors/runtime.h>
#include <troupe/actors/value.h>
#include <troupe/jit/script_module.h>
#include <troupe/nn/module.h>

namespace troupe::optim {
class OptimizerOptions;
class Optimizer;
}

namespace troupe::actors {

/// nn::Value <-> Value: a tuple of tensors is a list of tensors.
template <>
struct ValueTraits<nn::Value> {
  static Value to(const nn::Value& v);
  static nn::Value from(const Value& v);
};

/// Builds a module from arguments (as spawn_on's factories build actors).
using ModuleFactory = std::function<nn::ModulePtr(const List& args)>;
/// Registers `factory` as `name` (every rank registers the same names: the same binary runs everywhere).
void register_module_factory(const std::string& name, ModuleFactory factory);
/// True when `name` is a registered module factory.
bool has_module_factory(const std::string& name);
/// The registered module factory names, sorted.
std::vector<std::string> module_factory_names();
/// Registers M built as M(A...) (holder or Impl class) under `name`.
template <class M, class... A>
void register_module(const std::string& name) {
  register_module_factory(name, [name](const List& args) -> nn::ModulePtr {
    const std::string what = "module factory '" + name + "'";
    if (args.size() != sizeof...(A)) detail::throw_arity(what, sizeof...(A), args.size());
    using Impl = typename nn::detail::held_class<M>::type;
    auto typed = detail::convert_args<std::tuple<A...>>(what, args, std::index_sequence_for<A...>{});
    auto m = std::apply([](auto&&... a) { return std::make_shared<Impl>(std::move(a)...); }, std::move(typed));
    nn::Module::bind_forward(*m);
    return m;
  });
}

class RemoteModule;
using RemoteModulePtr = std::shared_ptr<RemoteModule>;

namespace detail {
class HostSupervisor;  // supervisor.h
/// @private How a module reaches another rank's actor: ("handoff", id, []) in one process (the object
/// itself), ("factory", name, args) across processes (built there; the caller then loads its state).
List module_spec(Runtime& rt, const nn::ModulePtr& module, int rank, const std::string& factory, List args);
/// @private Builds (or takes over) the module a spec names, on the receiving rank.
nn::ModulePtr build_module(const List& spec);
/// @private Forgets a hand-off that was never taken (the spawn failed).
void drop_handoff(const List& spec);
/// @private Before a copy built on its host (on the CPU, in the factory's dtype) loads `source`'s state:
/// moves it to the device and floating dtype of `source`'s first floating parameter (else buffer), so
/// that a subtree on a GPU, or in float64, stays so (a no-op for a CPU float32 source).
void match_placement(nn::Module& copy, const nn::Module& source);
/// @private A state_dict as a message value ([[key, tensor], ...], in order) and back.
List state_pairs(const nn::StateDict& d);
nn::StateDict state_dict_from(const Value& v);
/// @private load_state_dict on hosts: `load` asks them ("load", whose answer is [missing, unexpected]);
/// a host's "Error(s) in loading state_dict" is rethrown with that text at its front, then "(on `where`)".
nn::IncompatibleKeys load_on_hosts(const std::function<List()>& load, const std::string& where);
/// @private The options of optimizer class `kind` ("SGD", "Adam", "AdamW", "RMSprop") read from `sd`
/// (what an "opt_new" message carries); an unknown class is an ActorError naming the known ones.
std::unique_ptr<optim::OptimizerOptions> options_of(const std::string& kind, const nn::StateDict& sd);
}  // namespace detail

/// Hosts the module `factory(args)` on `rank` in a new host actor (named `name`, or "host<n>") and
/// returns its proxy.
RemoteModulePtr host(Runtime& rt, int rank, const std::string& factory, List args = {}, std::string name = "");
/// Moves `module` to `rank`: in one process (--ranks N) the object itself is handed to the host (no
/// copy); across processes the host builds `factory(args)` (default: the module's class name, no
/// arguments), moves it to the module's device and floating dtype (a CUDA device is the host's own,
/// set_cuda_arrival_device) and loads the module's state_dict, training flag and requires_grad flags.
RemoteModulePtr host(Runtime& rt, const nn::ModulePtr& module, int rank, const std::string& factory = "",
                     List args = {}, std::string name = "");

/// The module factory a ScriptModule travels through: arguments (archive bytes as a string, compile as a
/// bool); it loads the archive with jit::load (the host needs no C++ class) and compiles it when asked.
inline constexpr const char* kScriptModuleFactory = "jit::ScriptModule";
/// Hosts a traced module on `rank` (`actors::host(rt, jit::trace(net, x), rank)`): its archive (save()'s
/// bytes) travels to the host, which loads it, compiled there when it was compiled here. In one process too
/// the host gets its own copy from the bytes. host(rt, module, rank) and place() take this path for every
/// ScriptModule. A host that cannot load the archive fails naming its rank and the archive's problem.
RemoteModulePtr host(Runtime& rt, const jit::ScriptModulePtr& module, int rank, std::string name = "");

// place() (a subtree to a rank, or replicated / sharded over a group of ranks): placement.h.

/// A proxy of the module at `path` inside a host actor.
class RemoteModule : public nn::Module {
 public:
  /// @private (host() and the proxy's own walks make them)
  RemoteModule(ActorRef host, std::string path, std::string class_name, int64_t caller_rank, bool training);
  ~RemoteModule() override;

  /// The host actor (the current one, after a supervised restart).
  ActorRef host_actor() const;
  /// The rank the subtree lives on.
  int host_rank() const { return host_actor().rank(); }
  /// The module's path inside its host ("" for the hosted root).
  const std::string& path() const { return path_; }

  bool is_remote() const override { return true; }
  std::string name() const override { return class_name_; }
  /// The host's repr of the subtree, its first line marked "[rank r]".
  std::string repr() const override;
  nn::ModulePtr clone(const std::optional<Device>& device = std::nullopt) const override;

  // forward: the host runs call() (its hooks) or forward_args
  Tensor forward(const Tensor& input) override;
  nn::Value forward_args(const nn::Args& args, const nn::Kwargs& kwargs) override;
  nn::Value call(nn::Args args, nn::Kwargs kwargs = {}) override;
  /// call() without waiting: several hosted stages can run at once. The result's autograd node is
  /// recorded when it arrives (grad mode as it was when forward_async was called).
  Future<nn::Value> forward_async(nn::Args args, nn::Kwargs kwargs = {});

  // traversal
  OrderedDict<std::string, Tensor> named_parameters(const std::string& prefix = "", bool recurse = true,
                                                    bool remove_duplicate = true) const override;
  OrderedDict<std::string, Tensor> named_buffers(const std::string& prefix = "", bool recurse = true,
                                                 bool remove_duplicate = true) const override;
  OrderedDict<std::string, nn::ModulePtr> named_children() const override;
  OrderedDict<std::string, nn::ModulePtr> named_modules(const std::string& prefix = "",
                                                        bool remove_duplicate = true) override;
  nn::ModulePtr get_submodule(const std::string& target) override;
  Tensor get_parameter(const std::string& target) override;
  Tensor get_buffer(const std::string& target) override;

  // tree-wide operations
  Module& apply(const nn::ApplyFn& fn) override;
  Module& apply(const std::string& registered_fn) override;
  Module& train(bool mode = true) override;
  Module& requires_grad_(bool requires_grad = true) override;
  void zero_grad(bool set_to_none = true) override;
  using nn::Module::to;
  Module& to(std::optional<Device> device, std::optional<ScalarType> dtype = std::nullopt,
             bool non_blocking = false) override;
  Module& type(ScalarType dtype) override;
  Module& to_empty(Device device, bool recurse = true) override;
  Module& apply_to_tensors(const std::function<Tensor(const Tensor&)>& fn, bool recurse = true) override;

  // state
  nn::StateDict state_dict(const std::string& prefix = "", bool keep_vars = false) override;
  nn::IncompatibleKeys load_state_dict(const nn::StateDict& state_dict, bool strict = true, bool assign = false) override;
  nn::StateDictCheck check_state_dict(const nn::StateDict& state_dict, const std::string& prefix = "") override;

  // hooks: by registered name only (the host runs them)
  nn::RemovableHandle register_state_dict_pre_hook(nn::StateDictPreHook hook, const std::string& registered_name = "") override;
  nn::RemovableHandle register_load_state_dict_post_hook(nn::LoadStateDictPostHook hook,
                                                         const std::string& registered_name = "") override;
  nn::RemovableHandle add_forward_pre_hook(nn::ForwardPreHookWithKwargs hook, bool prepend, bool with_kwargs,
                                           const std::string& registered_name) override;
  nn::RemovableHandle add_forward_hook(nn::ForwardHookWithKwargs hook, nn::HookOptions options, bool with_kwargs,
                                       const std::string& registered_name) override;
  nn::RemovableHandle add_backward_pre_hook(nn::BackwardPreHook hook, bool prepend, const std::string& registered_name) override;
  nn::RemovableHandle add_backward_hook(nn::BackwardHook hook, bool prepend, const std::string& registered_name) override;
  nn::RemovableHandle add_legacy_backward_hook(nn::BackwardHook hook, const std::string& registered_name) override;

  // The pieces of a recorded call, for schedulers that drive backward themselves (actors::Pipeline).
  /// A fresh key for a recorded forward.
  int64_t next_key() const;
  /// Forward with grad mode on under `key`, without recording a node here: the reply is [recorded
  /// (bool), output]; `needs` gives each input tensor's requires_grad.
  Future<List> forward_keyed(const nn::Args& args, int64_t key, const std::vector<bool>& needs);
  /// The host's backward of forward `key` from `grads` (one per output tensor; undefined: none), keeping
  /// its graph; the reply lists the inputs' gradients (none where not needed).
  Future<List> backward_keyed(int64_t key, const std::vector<Tensor>& grads);
  /// The same, answered as soon as the inputs' gradients are final: the host then computes its
  /// parameters' gradients, and `finished` completes (or fails with that part's error) once it has.
  Future<List> backward_keyed(int64_t key, const std::vector<Tensor>& grads, Future<void>& finished);
  /// Frees what the host kept for `key`.
  void release_key(int64_t key);

  /// The proxies of the hosts this proxy's calls reach (DistributedOptimizer builds an optimizer on
  /// each): itself; every copy or shard of a RemoteGroupModule (placement.h).
  virtual std::vector<RemoteModule*> host_proxies() { return {this}; }

  /// Asks the host to build an optimizer (by the options' class: SGD, Adam, AdamW, RMSprop) over this
  /// subtree's parameters; returns its id on the host (DistributedOptimizer uses it).
  Future<int64_t> make_optimizer(const optim::OptimizerOptions& options);

  /// @private
  int64_t caller_rank() const { return caller_rank_; }
  /// @private: the proxy host() returned stops its host actor when it is destroyed.
  void set_owner(bool owner) { owner_ = owner; }
  /// @private: supervision of the host (supervisor.h); proxies made from this one share it.
  void set_supervisor(std::shared_ptr<detail::HostSupervisor> s) { sup_ = std::move(s); }
  const std::shared_ptr<detail::HostSupervisor>& supervisor() const { return sup_; }

 protected:
  void save_to_state_dict(nn::StateDict& out, const std::string& prefix, bool keep_vars) const override;
  /// Every register_*_hook above lands here: `kind` names the host's hook list ("forward_pre", ...),
  /// `api` the public method for errors; RemoteGroupModule sends it to every host of its group.
  virtual nn::RemovableHandle add_hook(const char* kind, const std::string& registered_name, const char* api,
                                       bool prepend, bool always_call);

 private:
  template <class R = Value, class... A>
  R ask(const std::string& method, A&&... args) const;
  Future<nn::Value> send_forward(const nn::Args& args, const nn::Kwargs& kwargs, bool hooks, nn::Value* result = nullptr);
  nn::Value forward_now(const nn::Args& args, const nn::Kwargs& kwargs, bool hooks);
  RemoteModulePtr sub(const std::string& path, const std::string& class_name, bool training) const;

  ActorRef host_;
  std::string path_;
  std::string class_name_;
  int64_t caller_rank_;
  bool owner_ = false;
  std::shared_ptr<detail::HostSupervisor> sup_;
  std::shared_ptr<const std::string> what_;  // "Linear `fc` on rank 1" (RemoteCallNode's errors)
};

/// torch.distributed.optim.DistributedOptimizer: one optimizer per host over the parameters it holds,
/// plus one over the model's local parameters, all built from the same options; step() and zero_grad()
/// reach every host at once and return when all are done.
///
///   actors::DistributedOptimizer opt(model, optim::SGDOptions(0.05).momentum(0.9));
///   opt.zero_grad(); model->forward(x).sum().backward(); opt.step();
class DistributedOptimizer {
 public:
  DistributedOptimizer(const nn::ModulePtr& model, const optim::OptimizerOptions& options);
  ~DistributedOptimizer();
  /// One step of every optimizer (the hosts' in parallel).
  void step();
  /// zero_grad on every optimizer.
  void zero_grad(bool set_to_none = true);
  /// Number of hosts with an optimizer.
  size_t num_hosts() const { return remote_.size(); }
  /// The optimizer of the local parameters (null when the model has none).
  optim::Optimizer* local() const { return local_.get(); }

  // Consistent cuts (supervisor.cpp): taken between steps, so no step is in flight.
  /// Checkpoints every host's subtree and optimizer state (a supervised host restarts from it) and the
  /// model's local parameters, buffers and optimizer state, labelled steps(). Also done when built and,
  /// when a host's RestartPolicy says checkpoint_every K, after every K-th step.
  void checkpoint();
  /// Rewinds every part of the model and every optimizer to the last checkpoint() (after a
  /// HostRestartedError, the one the host was restarted from) and returns its step.
  int64_t restore();
  /// step() calls made (restore() sets it back to the checkpoint's).
  int64_t steps() const { return steps_; }
  /// The step of the last checkpoint (-1: none taken).
  int64_t checkpoint_step() const { return ckpt_step_; }
  /// @private: the optimizers' state by parameter name ("state.<name>.<key>", "param_groups.0.<option>"),
  /// and its load (actors::save_checkpoint / load_checkpoint).
  nn::StateDict named_state_dict();
  void load_named_state_dict(const nn::StateDict& state, int64_t steps);

 private:
  struct Remote {
    ActorRef host;
    int64_t id;
    std::shared_ptr<detail::HostSupervisor> sup;  // null: not supervised
    uint64_t gen = 0;                             // the host's generation at the last step / restore
    std::string prefix;                           // the subtree's path in the model
    std::string path;                             // and inside its host
    Value ckpt;                                   // its part of the last cut
    ActorRef target() const;
  };
  void check_restarts();
  std::vector<Remote> remote_;
  std::unique_ptr<optim::Optimizer> local_;
  std::vector<std::string> local_names_;
  std::weak_ptr<nn::Module> model_;
  int64_t steps_ = 0, ckpt_step_ = -1, checkpoint_every_ = 0;
  nn::StateDict local_ckpt_, local_opt_ckpt_;
};

/// Builds the optimizer `options` belongs to (SGDOptions -> SGD, ...) over `params`; ActorError for an
/// options class it does not know.
std::unique_ptr<optim::Optimizer> make_optimizer(std::vector<Tensor> params, const optim::OptimizerOptions& options);

}  // namespace troupe::actors
