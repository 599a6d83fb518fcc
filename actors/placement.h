// place(): moves subtrees of an existing model to hosts, each on one rank, or replicated (DDP) or sharded
// (FSDP) over a group of ranks, and registers their proxies in their place, so that the same model code
// runs local, hosted, replicated or sharded, unchanged. CAF-free.
//
//   actors::place(rt, model, {{"encoder", 1},                              // a host on rank 1
//                             {"body", actors::replicated({1, 2})},        // a copy on ranks 1 and 2
//                             {"head", actors::sharded({2, 3})}});         // one shard on 2, one on 3
//   Tensor y = model->forward(x);      // body: x split along dim 0 over its copies, run at once, joined
//   y.sum().backward();                // the copies' gradients summed over their group (all-reduce)
//   actors::DistributedOptimizer opt(model, optim::SGDOptions(0.1));       // steps every copy / shard
//
// A group's hosts reduce gradients over a comm group of their ranks (DDP's bucketed all-reduce for
// replicated, FSDP's reduce-scatter for sharded). With --ranks N, place() makes that group itself (a
// `local` group of threads); under mpirun every rank's actor system makes it (a sub-group of a group of
// every rank made at start-up, "actors-groups"), so place() runs on one rank while the others serve.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <troupe/actors/remote_module.h>

namespace troupe::actors {

/// Where place() puts a subtree: one rank (an int converts), or a group of ranks (replicated(),
/// sharded()).
struct Placement {
  /// How the subtree is hosted.
  enum class Kind { kRank, kReplicated, kSharded };
  /// A host on `rank`.
  Placement(int rank) : kind(Kind::kRank), ranks{rank} {}  // NOLINT: implicit, so {"enc", 1} reads as before
  /// A group placement (replicated() and sharded() make them).
  Placement(Kind k, std::vector<int> group) : kind(k), ranks(std::move(group)) {}
  /// The kind.
  Kind kind;
  /// The rank (kRank), or the group's ranks in order (the first holds replica 0 / shard 0).
  std::vector<int> ranks;
  /// "rank 1", "replicated({1, 2})", "sharded({1, 2})".
  std::string str() const;
};

/// A copy of the subtree on every rank of `ranks` (DistributedDataParallel among the copies): a forward
/// splits the batch along dim 0 over them (torch.chunk's sizes), backward sums their gradients.
Placement replicated(std::vector<int> ranks);
/// The subtree's parameters sharded over `ranks` (FullyShardedDataParallel among the hosts): a forward
/// splits the batch as replicated(); each host gathers the full parameters for its part.
Placement sharded(std::vector<int> ranks);

/// place(rt, model, {{"encoder", 1}, {"decoder", replicated({1, 2})}}): moves each subtree (by its
/// path) to its host(s) and registers the proxy in its place; a holder member of the parent (`encoder`
/// in its forward) keeps working, since the moved module passes its calls to the proxy. Returns the
/// proxies by path (a group's is a RemoteGroupModule).
std::map<std::string, RemoteModulePtr> place(Runtime& rt, const nn::ModulePtr& model,
                                             const std::map<std::string, Placement>& placement);

/// The proxy of a subtree hosted by a group of ranks (replicated() or sharded()): every Module method
/// reaches every host; reads of a replicated subtree ask the first copy.
///   - forward: each Tensor argument is split along dim 0 (all must have the same size there), the
///     hosts run their parts at once, the outputs are concatenated along dim 0; backward gives each host
///     its slice of the gradient, and the hosts' parameter gradients are summed over the group
///     (the caller's loss is over the whole batch). A host whose part is empty runs an empty batch, so
///     that every host takes part in the group's collectives.
///   - as with DDP, the subtree runs once per backward (a second forward before backward fails on the
///     hosts with DDP's "Expected to have finished reduction ..."); no create_graph.
///   - state_dict() gives one copy (sharded: the full tensors, gathered), load_state_dict() reaches
///     every host; train/eval, zero_grad, apply and hooks by name reach every host; to()/type() rebuild
///     a replicated group's DDP (collective among the hosts), a sharded group refuses them, and
///     requires_grad_ is refused (the buckets were built at place()).
///   - DistributedOptimizer builds an optimizer on every host (sharded: over its shard, stepped by FSDP).
///   - a submodule of it (named_modules, get_submodule) is a RemoteGroupModule too: reads, train/eval
///     and hooks work; forward through it is refused, as are other writes below a sharded group's root.
class RemoteGroupModule : public RemoteModule {
 public:
  /// @private (place() makes them)
  RemoteGroupModule(Placement placement, std::vector<RemoteModulePtr> replicas, std::string path, std::string class_name,
                    int64_t caller_rank, bool training);

  /// The placement (kind and ranks).
  const Placement& placement() const { return placement_; }
  /// The proxy of each host, in the group's rank order.
  const std::vector<RemoteModulePtr>& replicas() const { return replicas_; }
  std::vector<RemoteModule*> host_proxies() override;

  std::string repr() const override;

  Tensor forward(const Tensor& input) override;
  nn::Value forward_args(const nn::Args& args, const nn::Kwargs& kwargs) override;
  nn::Value call(nn::Args args, nn::Kwargs kwargs = {}) override;
  /// call() (the hosts run at once; the Future is complete when it returns).
  Future<nn::Value> forward_async(nn::Args args, nn::Kwargs kwargs = {});

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

  Module& apply(const std::string& registered_fn) override;
  using RemoteModule::apply;
  Module& train(bool mode = true) override;
  Module& requires_grad_(bool requires_grad = true) override;
  void zero_grad(bool set_to_none = true) override;
  using nn::Module::to;
  Module& to(std::optional<Device> device, std::optional<ScalarType> dtype = std::nullopt,
             bool non_blocking = false) override;
  Module& type(ScalarType dtype) override;
  Module& to_empty(Device device, bool recurse = true) override;

  nn::StateDict state_dict(const std::string& prefix = "", bool keep_vars = false) override;
  nn::IncompatibleKeys load_state_dict(const nn::StateDict& state_dict, bool strict = true, bool assign = false) override;
  nn::StateDictCheck check_state_dict(const nn::StateDict& state_dict, const std::string& prefix = "") override;

 protected:
  void save_to_state_dict(nn::StateDict& out, const std::string& prefix, bool keep_vars) const override;
  /// Hooks by name (RemoteModule's register_*_hook methods end here): registered on every host.
  nn::RemovableHandle add_hook(const char* kind, const std::string& registered_name, const char* api, bool prepend,
                               bool always_call) override;

 private:
  bool sharded() const { return placement_.kind == Placement::Kind::kSharded; }
  std::string what() const;
  /// Sends method(path(), args...) to every host at once and returns the replies in group order.
  std::vector<Value> fan(const std::string& method, List args) const;
  /// fan() at another path of the hosts' modules.
  std::vector<Value> fan_at(const std::string& method, const std::string& path, List args) const;
  /// Replica 0's answer (a replicated group), or every host's (sharded: they gather together).
  Value first(const std::string& method, List args) const;
  /// The entries of the subtree root's dict `root` that lie below path(), renamed under `prefix`.
  OrderedDict<std::string, Tensor> from_root(const OrderedDict<std::string, Tensor>& root, const std::string& prefix,
                                             bool recurse) const;
  void refuse_below_sharded_root(const char* api) const;
  void refuse_below_root(const char* api) const;
  nn::Value run(const nn::Args& args, const nn::Kwargs& kwargs, bool hooks);
  RemoteModulePtr sub(const std::string& path, const std::string& class_name, bool training) const;

  Placement placement_;
  std::vector<RemoteModulePtr> replicas_;
};
using RemoteGroupModulePtr = std::shared_ptr<RemoteGroupModule>;

}  // namespace troupe::actors
