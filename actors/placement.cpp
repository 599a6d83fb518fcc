// place() and the group placements (placement.h). A replicated or sharded subtree is k host actors, one
// per rank of its group, each a ModuleHost (remote_module.cpp) built by the factory "troupe.GroupHost"
// here: its root module is a GroupMember, which mirrors the subtree's tree (same children, parameters
// and buffers, so every message of the host sees the subtree's names) and runs its forward through
// DistributedDataParallel or FullyShardedDataParallel over the group's comm group; the host's optimizer
// messages of a sharded member step FSDP's shards. The caller holds a RemoteGroupModule, which sends each
// Module method to every host at once and, in forward, splits the batch and records one GroupCallNode.
// CAF-free.
#include <troupe/actors/placement.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

#include <unistd.h>

#include <troupe/actors/internal/groups.h>
#include <troupe/actors/internal/services.h>
#include <troupe/comm/local.h>
#include <troupe/comm/staged.h>
#ifdef TROUPE_HAVE_NCCL
#include <troupe/comm/nccl.h>
#endif
#include <troupe/nn/registry.h>
#include <troupe/optim/adam.h>
#include <troupe/optim/adamw.h>
#include <troupe/optim/rmsprop.h>
#include <troupe/optim/sgd.h>
#include <troupe/parallel/ddp.h>
#include <troupe/parallel/zero.h>
#include <troupe/tensor/autograd.h>
#include <troupe/tensor/ops.h>

namespace troupe::actors {

// ------------------------------------------------------------------------------------------------
// Placement

std::string Placement::str() const {
  if (kind == Kind::kRank) return "rank " + std::to_string(ranks.empty() ? -1 : ranks[0]);
  std::string s = kind == Kind::kReplicated ? "replicated({" : "sharded({";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s + "})";
}

Placement replicated(std::vector<int> ranks) { return Placement(Placement::Kind::kReplicated, std::move(ranks)); }
Placement sharded(std::vector<int> ranks) { return Placement(Placement::Kind::kSharded, std::move(ranks)); }

namespace detail {
comm::ProcessGroupPtr& groups_world() {
  static comm::ProcessGroupPtr g;
  return g;
}
}  // namespace detail

namespace {

constexpr const char* kMemberFactory = "troupe.GroupMember";
constexpr const char* kGroupHost = "troupe.GroupHost";
constexpr const char* kGroupMaker = "troupe.GroupMaker";

std::atomic<int64_t> g_next_group{1};

std::string join_path(const std::string& a, const std::string& b) {
  if (a.empty()) return b;
  if (b.empty()) return a;
  return a + "." + b;
}

// ---- comm groups waiting for their host (made by place() in one process, by the makers under mpirun)

std::mutex g_parked_mu;
std::map<std::pair<int64_t, int64_t>, comm::ProcessGroupPtr>& parked() {
  static std::map<std::pair<int64_t, int64_t>, comm::ProcessGroupPtr> m;
  return m;
}
void park(int64_t id, int64_t index, comm::ProcessGroupPtr g) {
  std::lock_guard<std::mutex> l(g_parked_mu);
  parked()[{id, index}] = std::move(g);
}
comm::ProcessGroupPtr unpark(int64_t id, int64_t index) {
  std::lock_guard<std::mutex> l(g_parked_mu);
  auto it = parked().find({id, index});
  if (it == parked().end())
    throw ActorError("no comm group " + std::to_string(id) + " for member " + std::to_string(index) + " on this rank");
  auto g = std::move(it->second);
  parked().erase(it);
  return g;
}

/// FSDP's inner optimizer on a sharded member: steps the optimizer DistributedOptimizer made over the
/// same shard tensors (set for the duration of FullyShardedDataParallel::step), nothing otherwise.
struct StepSlot {
  optim::Optimizer* target = nullptr;
};
class DeferredStep final : public optim::Optimizer {
 public:
  DeferredStep(std::vector<Tensor> shards, std::shared_ptr<StepSlot> slot)
      : Optimizer(std::move(shards), std::make_unique<optim::SGDOptions>(0.0)), slot_(std::move(slot)) {}
  Tensor step(LossClosure closure) override {
    return slot_->target ? slot_->target->step(std::move(closure)) : Tensor();
  }
  std::string name() const override { return "DeferredStep"; }

 protected:
  std::unique_ptr<optim::OptimizerParamState> make_param_state() const override { return nullptr; }

 private:
  std::shared_ptr<StepSlot> slot_;
};

// ------------------------------------------------------------------------------------------------
// GroupMember: a host's root module for one member of a group

class GroupMember final : public nn::Module {
 public:
  GroupMember(nn::ModulePtr inner, bool sharded) : inner_(std::move(inner)), sharded_(sharded) {
    // The subtree's own tree, shared: every walk of this module gives the subtree's names and tensors.
    for (const auto& [k, c] : inner_->children_dict()) register_module(k, c);
    for (const auto& [k, p] : inner_->parameters_dict()) register_parameter(k, p, p.defined() && p.requires_grad());
    for (const auto& [k, b] : inner_->buffers_dict()) register_buffer(k, b, inner_->is_persistent_buffer(k));
    training_ = inner_->is_training();
  }

  bool sharded() const { return sharded_; }

  /// Wraps the subtree in DDP / FSDP over `group` (collective among the members).
  void join(comm::ProcessGroupPtr group) {
    if (ddp_ || fsdp_) throw ActorError("this host already joined its group");
    group_ = std::move(group);
    wrap();
  }

  std::string name() const override { return inner_->name(); }
  std::string repr() const override { return inner_->repr(); }

  Tensor forward(const Tensor& input) override { return forward_args({nn::Value(input)}, {}).tensor(); }
  nn::Value forward_args(const nn::Args& args, const nn::Kwargs& kwargs) override {
    if (ddp_) return ddp_->forward_args(args, kwargs);
    if (fsdp_) return fsdp_->forward_args(args, kwargs);
    return inner_->call(args, kwargs);
  }

  OrderedDict<std::string, Tensor> named_parameters(const std::string& prefix, bool recurse,
                                                    bool remove_duplicate) const override {
    if (!fsdp_ || full_depth_) return Module::named_parameters(prefix, recurse, remove_duplicate);
    Full f(*this);
    return cloned(Module::named_parameters(prefix, recurse, remove_duplicate));
  }
  Tensor get_parameter(const std::string& target) override {
    if (!fsdp_ || full_depth_) return Module::get_parameter(target);
    Full f(*this);
    Tensor t = Module::get_parameter(target);
    return t.defined() ? t.detach().clone() : t;
  }
  nn::StateDict state_dict(const std::string& prefix, bool keep_vars) override {
    if (!fsdp_ || full_depth_) return Module::state_dict(prefix, keep_vars);
    Full f(*this);
    return cloned(Module::state_dict(prefix, keep_vars));
  }
  nn::StateDictCheck check_state_dict(const nn::StateDict& sd, const std::string& prefix) override {
    if (!fsdp_) return Module::check_state_dict(sd, prefix);
    Full f(*this);
    return Module::check_state_dict(sd, prefix);
  }
  nn::IncompatibleKeys load_state_dict(const nn::StateDict& sd, bool strict, bool assign) override {
    if (!fsdp_) return Module::load_state_dict(sd, strict, assign);
    nn::IncompatibleKeys k;
    changing([&] { k = Module::load_state_dict(sd, strict, assign); });
    return k;
  }
  Module& apply(const nn::ApplyFn& fn) override {
    changing([&] { inner_->apply(fn); });
    return *this;
  }
  Module& apply(const std::string& registered_fn) override {
    changing([&] { inner_->apply(registered_fn); });
    return *this;
  }
  Module& train(bool mode) override {
    inner_->train(mode);
    training_ = mode;
    return *this;
  }
  void zero_grad(bool set_to_none) override {
    if (fsdp_) fsdp_->zero_grad();
    inner_->zero_grad(set_to_none);
  }
  Module& requires_grad_(bool requires_grad) override {
    if (ddp_ || fsdp_)
      throw ActorError(std::string("requires_grad_ on a ") + (sharded_ ? "sharded" : "replicated") +
                       " subtree: its " + (sharded_ ? "FSDP shards" : "DDP buckets") +
                       " were built at place() from the parameters that required grad then; freeze parameters before "
                       "placing the subtree");
    inner_->requires_grad_(requires_grad);
    return *this;
  }
  Module& to(std::optional<Device> device, std::optional<ScalarType> dtype, bool non_blocking) override {
    if (fsdp_) {
      for (const auto& p : inner_->parameters())
        if ((dtype && p.dtype() != *dtype) || (device && p.device() != *device))
          throw ActorError("to() on a sharded subtree: its flat shards keep the dtype and device they were made with; "
                           "call to() before placing it");
      return *this;
    }
    inner_->to(device, dtype, non_blocking);
    rewrap();
    return *this;
  }
  Module& type(ScalarType dtype) override { return to(std::nullopt, dtype, false); }
  Module& to_empty(Device device, bool recurse) override {
    if (fsdp_) throw ActorError("to_empty() on a sharded subtree: its flat shards cannot be replaced");
    inner_->to_empty(device, recurse);
    rewrap();
    return *this;
  }

  /// A sharded member's optimizer step: FSDP finishes the reduce-scatters and steps the shards with `opt`.
  void step(optim::Optimizer& opt) {
    slot_->target = &opt;
    try {
      fsdp_->step();
    } catch (...) {
      slot_->target = nullptr;
      throw;
    }
    slot_->target = nullptr;
  }
  /// This member's shard tensors (a sharded member's optimizer steps them).
  std::vector<Tensor> shards() const { return fsdp_->shard_parameters(); }
  bool joined_sharded() const { return fsdp_ != nullptr; }

 private:
  /// Gathers a sharded member's full parameters for its scope (collective) unless they are gathered.
  // Inside one, the tree walks of this module give the gathered parameters themselves (load_state_dict
  // and apply write into them).
  struct Full {
    const GroupMember& m;
    parallel::FullyShardedDataParallel& f;
    bool was;
    explicit Full(const GroupMember& member)
        : m(member), f(*member.fsdp_), was(f.parameters_gathered()) {
      if (!was) f.gather_parameters();
      ++m.full_depth_;
    }
    ~Full() {
      --m.full_depth_;
      if (was) return;
      try {
        f.free_parameters();
      } catch (const std::exception&) {
      }
    }
  };

  // Runs fn, which may change parameters in place: on a sharded member with the full parameters
  // gathered, and the changes written back into this rank's shards.
  template <class F>
  void changing(F fn) {
    if (!fsdp_) {
      fn();
      return;
    }
    Full f(*this);
    fn();
    write_shards();
  }

  static OrderedDict<std::string, Tensor> cloned(const OrderedDict<std::string, Tensor>& d) {
    OrderedDict<std::string, Tensor> out;
    for (const auto& [k, t] : d) out.insert_or_assign(k, t.defined() ? t.detach().clone() : t);
    return out;
  }

  void wrap() {
    comm::ProcessGroupPtr g = group_for_parameters();
    if (!sharded_) {
      ddp_ = std::make_shared<parallel::DistributedDataParallel>(inner_, g);
      return;
    }
    auto slot = slot_;
    fsdp_ = std::make_shared<parallel::FullyShardedDataParallel>(
        inner_, [slot](std::vector<Tensor> shards) { return std::make_unique<DeferredStep>(std::move(shards), slot); },
        g);
  }

  /// The device of the subtree's parameters (else its buffers'; the CPU when it has neither).
  Device parameters_device() const {
    for (const auto& p : inner_->parameters())
      if (p.defined()) return p.device();
    for (const auto& b : inner_->buffers())
      if (b.defined()) return b.device();
    return Device(kCPU);
  }

  /// The group DDP / FSDP run on (collective among the members): the member group itself (mpi or local:
  /// CPU tensors) for parameters on the CPU; for parameters on a CUDA device, an NCCL group over it when
  /// troupe was built with NCCL and every member's device is a device of its own (NCCL refuses two ranks
  /// of a communicator on one GPU), else the member group staged to that device (comm/staged.h: each
  /// collective copies through host memory, as torch's gloo does with CUDA tensors). Made once per device.
  comm::ProcessGroupPtr group_for_parameters() {
    const Device dev = parameters_device();
    // Every member says where its parameters are and on which host: all must agree on CPU or CUDA.
    const int n = group_->size();
    Tensor mine = tensor(std::vector<int64_t>{dev.is_cuda() ? 1 : 0, dev.index(), host_id()}, kInt64);
    Tensor all = zeros({3 * n}, TensorOptions().dtype(kInt64));
    group_->all_gather_into_tensor(all, mine);
    const std::vector<int64_t> v = all.to_vector<int64_t>();
    for (int r = 0; r < n; ++r) {
      if (v[static_cast<size_t>(3 * r)] != v[0]) {
        throw ActorError("the members of this " + std::string(sharded_ ? "sharded" : "replicated") +
                         " subtree have their parameters on different kinds of device: member 0 on " +
                         (v[0] ? "cuda" : "cpu") + ", member " + std::to_string(r) + " on " +
                         (v[static_cast<size_t>(3 * r)] ? "cuda" : "cpu") + " (move every member with one to())");
      }
    }
    if (!dev.is_cuda()) return group_;
    if (gpu_group_ && gpu_group_->device() == dev) return gpu_group_;
    bool own_devices = true;
    for (int a = 0; a < n; ++a)
      for (int b = a + 1; b < n; ++b)
        if (v[static_cast<size_t>(3 * a + 1)] == v[static_cast<size_t>(3 * b + 1)] &&
            v[static_cast<size_t>(3 * a + 2)] == v[static_cast<size_t>(3 * b + 2)])
          own_devices = false;
#ifdef TROUPE_HAVE_NCCL
    if (own_devices) {
      comm::GroupOptions o = group_->options();
      o.name += "/nccl";
      gpu_group_ = comm::make_nccl_group(group_, dev.index(), o);
      return gpu_group_;
    }
#else
    (void)own_devices;
#endif
    gpu_group_ = comm::make_staged_group(group_, dev);
    return gpu_group_;
  }
  /// This host's name, hashed (members on one host with one device index share a GPU).
  static int64_t host_id() {
    char name[256] = {};
    gethostname(name, sizeof(name) - 1);
    return static_cast<int64_t>(std::hash<std::string>()(name) & 0x7fffffffffffffffULL);
  }
  // A replicated member after to()/to_empty(): DDP's buckets follow the new dtype (collective).
  void rewrap() {
    if (!ddp_) return;
    ddp_.reset();
    wrap();
  }

  // The full parameters (gathered) into this rank's shard of every flat buffer (FSDP's layout: zero.h).
  void write_shards() {
    NoGradGuard no_grad;
    std::vector<Tensor> wrapped;
    for (const auto& [k, p] : inner_->named_parameters())
      if (p.defined() && p.requires_grad()) wrapped.push_back(p);
    std::vector<Tensor> shard = fsdp_->shard_parameters();
    const auto& infos = fsdp_->flat_shards();
    for (size_t g = 0; g < infos.size(); ++g) {
      const parallel::FlatShardInfo& in = infos[g];
      for (size_t m = 0; m < in.params.size(); ++m) {
        Tensor p = wrapped.at(in.params[m]).contiguous().reshape({-1});
        const int64_t o = in.offsets[m], n = p.numel();
        const int64_t lo = std::max(o, in.shard_offset), hi = std::min(o + n, in.shard_offset + in.shard_numel);
        if (lo >= hi) continue;
        narrow(shard[g], 0, lo - in.shard_offset, hi - lo).copy_(narrow(p, 0, lo - o, hi - lo));
      }
    }
  }

  nn::ModulePtr inner_;
  bool sharded_;
  comm::ProcessGroupPtr group_;
  comm::ProcessGroupPtr gpu_group_;  // group_for_parameters(): NCCL or staged, for parameters on a GPU
  std::shared_ptr<parallel::DistributedDataParallel> ddp_;
  std::shared_ptr<parallel::FullyShardedDataParallel> fsdp_;
  std::shared_ptr<StepSlot> slot_ = std::make_shared<StepSlot>();
  mutable int full_depth_ = 0;
};

thread_local std::shared_ptr<GroupMember> t_last_member;  // the member the module factory just built

// ------------------------------------------------------------------------------------------------
// troupe.GroupHost: a ModuleHost over a GroupMember, with "join" and a sharded member's optimizers

std::unique_ptr<Actor> make_group_host(const List& a) {
  if (a.size() != 2) detail::throw_arity(std::string("factory '") + kGroupHost + "'", 2, a.size());
  const std::string& kind = a[0].as<std::string>();
  Factory base = detail::find_factory("troupe.ModuleHost");
  if (!base) throw ActorError("the module host factory is not registered");
  t_last_member.reset();
  std::unique_ptr<Actor> host = base(List{Value("factory"), Value(kMemberFactory), Value(List{Value(kind), a[1]})});
  std::shared_ptr<GroupMember> w = std::move(t_last_member);
  t_last_member.reset();
  if (!w) throw ActorError("the group member was not built");
  auto& hs = detail::ActorAccess::handlers(*host);
  hs["join"] = [w](const List& args) -> Value {
    if (args.size() != 2) detail::throw_arity("join", 2, args.size());
    w->join(unpark(args[0].as<int64_t>(), args[1].as<int64_t>()));
    return Value();
  };
  if (!w->sharded()) return host;
  // A sharded member: DistributedOptimizer's optimizer steps the shards through FSDP (ids of its own).
  struct Opts {
    std::map<int64_t, std::unique_ptr<optim::Optimizer>> by_id;
    int64_t next = int64_t{1} << 40;
  };
  auto opts = std::make_shared<Opts>();
  auto wrap = [&hs](const std::string& m, std::function<Value(const List&, Handler&)> fn) {
    Handler orig = hs.at(m);
    hs[m] = [orig, fn](const List& args) mutable { return fn(args, orig); };
  };
  wrap("opt_new", [w, opts](const List& args, Handler& orig) -> Value {
    if (args.size() != 3 || !args[0].is<std::string>() || !args[0].as<std::string>().empty() || !w->joined_sharded())
      return orig(args);
    auto o = detail::options_of(args[1].as<std::string>(), detail::state_dict_from(args[2]));
    int64_t id = opts->next++;
    opts->by_id[id] = make_optimizer(w->shards(), *o);
    return Value(id);
  });
  wrap("opt_step", [w, opts](const List& args, Handler& orig) -> Value {
    auto it = args.size() == 1 && args[0].is<int64_t>() ? opts->by_id.find(args[0].as<int64_t>()) : opts->by_id.end();
    if (it == opts->by_id.end()) return orig(args);
    w->step(*it->second);
    return Value();
  });
  wrap("opt_zero", [w, opts](const List& args, Handler& orig) -> Value {
    if (args.size() != 2 || !args[0].is<int64_t>() || !opts->by_id.count(args[0].as<int64_t>())) return orig(args);
    w->zero_grad(args[1].as<bool>());
    return Value();
  });
  wrap("opt_drop", [opts](const List& args, Handler& orig) -> Value {
    if (args.size() != 1 || !args[0].is<int64_t>() || !opts->by_id.erase(args[0].as<int64_t>())) return orig(args);
    return Value();
  });
  return host;
}

// ------------------------------------------------------------------------------------------------
// troupe.GroupMaker: under mpirun, one per rank makes a placed group's comm group with the others

struct GroupMaker : Actor {
  GroupMaker() {
    use_own_thread();  // its handler waits for every rank
    handle("make", [this](int64_t id, std::vector<int64_t> ranks, std::string name) {
      comm::ProcessGroupPtr world = detail::groups_world();
      if (!world) throw ActorError("this rank has no 'actors-groups' group (start_connected makes it)");
      // Every rank must be making the same group: two place() calls from different ranks at once would
      // otherwise pair the wrong requests.
      Tensor mine = full({1}, id, TensorOptions().dtype(kInt64));
      std::vector<Tensor> all;
      for (int r = 0; r < world->size(); ++r) all.push_back(zeros({1}, TensorOptions().dtype(kInt64)));
      world->all_gather(all, mine);
      for (int r = 0; r < world->size(); ++r)
        if (all[r].item<int64_t>() != id)
          throw ActorError("[actors] place(): rank " + std::to_string(r) +
                           " was making another group at the same time; place() groups from one rank at a time");
      std::vector<int> rk(ranks.begin(), ranks.end());
      comm::GroupOptions o;
      o.name = name;
      o.timeout = default_timeout();
      comm::ProcessGroupPtr g = world->new_group(rk, o);
      auto at = std::find(rk.begin(), rk.end(), rank());
      if (g && at != rk.end()) park(id, at - rk.begin(), std::move(g));
    });
  }
};

const bool g_registered = [] {
  register_factory(kGroupHost, make_group_host);
  register_factory(kGroupMaker, [](const List&) -> std::unique_ptr<Actor> { return std::make_unique<GroupMaker>(); });
  register_module_factory(kMemberFactory, [](const List& args) -> nn::ModulePtr {
    if (args.size() != 2) detail::throw_arity(std::string("module factory '") + kMemberFactory + "'", 2, args.size());
    auto w = std::make_shared<GroupMember>(detail::build_module(args[1].as<List>()), args[0].as<std::string>() == "sharded");
    t_last_member = w;
    return w;
  });
  return true;
}();

// ------------------------------------------------------------------------------------------------
// the caller's side of a group forward

std::vector<Tensor> flat_tensors(const nn::Args& args, const nn::Kwargs& kwargs) {
  std::vector<Tensor> out;
  for (const auto& a : args)
    for (auto& t : a.tensors()) out.push_back(t);
  for (const auto& [k, v] : kwargs)
    for (auto& t : v.tensors()) out.push_back(t);
  return out;
}

/// Waits for every future (so that no host is left mid-collective unwatched), then rethrows the first error.
template <class T>
std::vector<T> wait_all(std::vector<Future<T>>& fs) {
  std::vector<T> out(fs.size());
  std::exception_ptr first;
  for (size_t i = 0; i < fs.size(); ++i) {
    try {
      out[i] = fs[i].get();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
  return out;
}

/// The hosts' keys of one recorded group forward; dropping the last reference frees them.
struct GroupCall {
  std::vector<ActorRef> hosts;
  std::vector<int64_t> keys;
  ~GroupCall() {
    for (size_t j = 0; j < hosts.size(); ++j) {
      try {
        if (running()) hosts[j].send("rel", keys[j]);
      } catch (const std::exception&) {
      }
    }
  }
};

/// The node a group forward records: backward gives each host its rows of the output gradients (times
/// k: DDP and FSDP average over the group, the caller's loss sums over the batch) and joins the inputs'
/// gradients the hosts return (divided by k).
struct GroupCallNode : autograd::Node {
  std::shared_ptr<GroupCall> call;
  std::string what;
  std::vector<std::vector<int64_t>> out_rows;  // [output][host]
  std::vector<int64_t> in_rows;                // [host]
  std::vector<std::vector<int64_t>> in_shapes;  // [input]: its shape
  GroupCallNode(std::shared_ptr<GroupCall> c, std::string w) : call(std::move(c)), what(std::move(w)) {}
  ~GroupCallNode() override { teardown(); }
  std::string name() const override { return "RemoteGroupModuleBackward"; }
  bool materializes_grads() const override { return false; }
  void release_variables() override { call.reset(); }
  void clear_captures() override { call.reset(); }
  autograd::variable_list apply(autograd::variable_list&& grads) override {
    if (!call) autograd::throw_backward_twice();
    if (autograd::GradMode::is_enabled())
      throw ActorError("[actors] backward with create_graph=True through " + what + " is not supported");
    const size_t k = call->hosts.size();
    const double scale = static_cast<double>(k);
    std::vector<Future<List>> fs;
    std::vector<Future<void>> ends;
    ends.reserve(k);
    for (size_t j = 0; j < k; ++j) {
      List g;
      for (size_t i = 0; i < grads.size(); ++i) {
        if (!grads[i].defined()) {
          g.emplace_back();
          continue;
        }
        int64_t off = 0;
        for (size_t h = 0; h < j; ++h) off += out_rows[i][h];
        g.emplace_back(narrow(grads[i], 0, off, out_rows[i][j]) * scale);
      }
      // as RemoteCallNode: each host answers with its inputs' gradients early (bwd1) and finishes its
      // weights' (their all-reduce or reduce-scatter among the hosts included) while this backward goes on
      ends.emplace_back();
      fs.push_back(detail::request_backward(call->hosts[j], call->keys[j], std::move(g), ends.back()));
    }
    std::vector<List> r = wait_all(fs);
    detail::finish_backward_later(std::move(ends), nullptr);
    autograd::variable_list out(num_outputs());
    for (size_t t = 0; t < out.size(); ++t) {
      if (!next_edges[t].fn) continue;
      bool any = false;
      std::vector<Tensor> parts;
      for (size_t j = 0; j < k; ++j) {
        if (t < r[j].size() && !r[j][t].is_none()) {
          parts.push_back(r[j][t].as<Tensor>());
          any = true;
        } else {
          std::vector<int64_t> shape = in_shapes[t];
          shape[0] = in_rows[j];
          parts.push_back(zeros(shape, TensorOptions().dtype(input_dtype(t))));
        }
      }
      if (any) out[t] = cat(parts, 0) / scale;
    }
    return out;
  }
  std::vector<ScalarType> in_dtypes;
  ScalarType input_dtype(size_t t) const { return in_dtypes[t]; }
};

}  // namespace

// ------------------------------------------------------------------------------------------------
// RemoteGroupModule

RemoteGroupModule::RemoteGroupModule(Placement placement, std::vector<RemoteModulePtr> replicas, std::string path,
                                     std::string class_name, int64_t caller_rank, bool training)
    : RemoteModule(replicas.at(0)->host_actor(), path, std::move(class_name), caller_rank, training),
      placement_(std::move(placement)),
      replicas_(std::move(replicas)) {
  (void)g_registered;
}

std::vector<RemoteModule*> RemoteGroupModule::host_proxies() {
  std::vector<RemoteModule*> out;
  for (auto& r : replicas_) out.push_back(r.get());
  return out;
}

std::string RemoteGroupModule::what() const {
  return name() + " `" + (path().empty() ? std::string("<root>") : path()) + "` (" + placement_.str() + ")";
}

std::vector<Value> RemoteGroupModule::fan(const std::string& method, List args) const {
  return fan_at(method, path(), std::move(args));
}

std::vector<Value> RemoteGroupModule::fan_at(const std::string& method, const std::string& path, List args) const {
  std::vector<Future<Value>> fs;
  fs.reserve(replicas_.size());
  for (const auto& r : replicas_) {
    List a;
    a.reserve(args.size() + 1);
    a.emplace_back(path);
    a.insert(a.end(), args.begin(), args.end());
    fs.push_back(r->host_actor().request_list<Value>(method, std::move(a)));
  }
  return wait_all(fs);
}

Value RemoteGroupModule::first(const std::string& method, List args) const {
  if (sharded()) return fan(method, std::move(args)).at(0);  // the hosts gather the parameters together
  List a;
  a.reserve(args.size() + 1);
  a.emplace_back(path());
  a.insert(a.end(), args.begin(), args.end());
  return replicas_[0]->host_actor().request_list<Value>(method, std::move(a)).get();
}

void RemoteGroupModule::refuse_below_sharded_root(const char* api) const {
  if (sharded() && !path().empty())
    throw ActorError(std::string("[actors] ") + api + " on " + what() +
                     ", inside a sharded subtree: its parameters are sharded as a whole; call it on the subtree's root");
}

void RemoteGroupModule::refuse_below_root(const char* api) const {
  if (!path().empty())
    throw ActorError(std::string("[actors] ") + api + " on " + what() + ", inside a " +
                     (sharded() ? "sharded" : "replicated") + " subtree: call it on the subtree's root, whose hosts " +
                     (sharded() ? "hold its shards" : "rebuild their DDP buckets"));
}

OrderedDict<std::string, Tensor> RemoteGroupModule::from_root(const OrderedDict<std::string, Tensor>& root,
                                                             const std::string& prefix, bool recurse) const {
  OrderedDict<std::string, Tensor> out;
  const std::string head = path() + ".";
  for (const auto& [k, t] : root) {
    if (k.compare(0, head.size(), head) != 0) continue;
    std::string rest = k.substr(head.size());
    if (!recurse && rest.find('.') != std::string::npos) continue;
    out.insert_or_assign(join_path(prefix, rest), t);
  }
  return out;
}

RemoteModulePtr RemoteGroupModule::sub(const std::string& full, const std::string& class_name, bool training) const {
  std::vector<RemoteModulePtr> reps;
  for (const auto& r : replicas_)
    reps.push_back(std::make_shared<RemoteModule>(r->host_actor(), full, class_name, caller_rank(), training));
  return std::make_shared<RemoteGroupModule>(placement_, std::move(reps), full, class_name, caller_rank(), training);
}

std::string RemoteGroupModule::repr() const {
  return "[" + placement_.str() + "] " + first("repr", {}).as<std::string>();
}

// ---- forward

nn::Value RemoteGroupModule::run(const nn::Args& args, const nn::Kwargs& kwargs, bool hooks) {
  if (!path().empty())
    throw ActorError("[actors] forward through " + what() +
                     ", inside a group-placed subtree: its hosts run forward together at the subtree's root");
  const bool grad = autograd::GradMode::is_enabled();
  const size_t k = replicas_.size();
  std::vector<Tensor> inputs = flat_tensors(args, kwargs);
  int64_t n = -1;
  for (const auto& t : inputs) {
    if (!t.defined()) continue;
    if (t.dim() == 0)
      throw ActorError("[actors] forward through " + what() + ": a 0-dim tensor argument cannot be split over the group");
    if (n < 0) n = t.size(0);
    else if (t.size(0) != n)
      throw ActorError("[actors] forward through " + what() + ": the tensor arguments are split along dim 0, but their sizes there differ (" +
                       std::to_string(n) + " and " + std::to_string(t.size(0)) + ")");
  }
  if (n < 0) throw ActorError("[actors] forward through " + what() + ": no tensor argument to split over the group");
  // torch.chunk's sizes: ceil(n / k) rows each, the last ones fewer; hosts past the last chunk get none.
  const int64_t c = (n + static_cast<int64_t>(k) - 1) / static_cast<int64_t>(k);
  std::vector<int64_t> off(k), rows(k);
  for (size_t j = 0; j < k; ++j) {
    off[j] = std::min<int64_t>(n, static_cast<int64_t>(j) * c);
    rows[j] = std::min<int64_t>(c, n - off[j]);
  }
  std::vector<bool> needs;
  for (const auto& t : inputs) needs.push_back(grad && t.defined() && t.requires_grad());
  std::vector<int64_t> keys(k);
  std::vector<Future<List>> fs;
  {
    NoGradGuard no_grad;  // the slices travel as values
    auto slice = [&](const nn::Value& v, size_t j) -> Value {
      if (v.is_tensor()) return v.tensor().defined() ? Value(narrow(v.tensor(), 0, off[j], rows[j])) : Value(v.tensor());
      if (v.is_tuple()) {
        List l;
        for (const auto& t : v.tuple()) l.emplace_back(t.defined() ? narrow(t, 0, off[j], rows[j]) : t);
        return Value(std::move(l));
      }
      return to_value(v);
    };
    const int64_t flags = (grad ? 1 : 0) | (hooks ? 2 : 0);
    for (size_t j = 0; j < k; ++j) {
      List a, kw;
      for (const auto& v : args) a.push_back(slice(v, j));
      for (const auto& [name, v] : kwargs) kw.emplace_back(List{Value(name), slice(v, j)});
      keys[j] = replicas_[j]->next_key();
      fs.push_back(replicas_[j]->host_actor().request_list<List>(
          "fwd", List{Value(path()), Value(std::move(a)), Value(std::move(kw)), Value(flags), Value(keys[j]), to_value(needs)}));
    }
  }
  auto call = std::make_shared<GroupCall>();
  for (size_t j = 0; j < k; ++j) {
    call->hosts.push_back(replicas_[j]->host_actor());
    call->keys.push_back(keys[j]);
  }
  std::vector<List> r = wait_all(fs);  // on an error, `call` frees what the hosts kept
  bool recorded = false;
  std::vector<nn::Value> outs;
  for (size_t j = 0; j < k; ++j) {
    recorded = recorded || r[j].at(0).as<bool>();
    outs.push_back(from_value<nn::Value>(r[j].at(1)));
  }
  // join the outputs along dim 0
  auto rows_of = [&](size_t i, size_t j) { return outs[j].tensors().at(i).size(0); };
  nn::Value out;
  if (outs[0].is_tensor()) {
    std::vector<Tensor> parts;
    for (auto& o : outs) parts.push_back(o.tensor());
    out = nn::Value(cat(parts, 0));
  } else if (outs[0].is_tuple()) {
    nn::Value::TensorTuple ts;
    for (size_t i = 0; i < outs[0].tuple().size(); ++i) {
      std::vector<Tensor> parts;
      for (auto& o : outs) parts.push_back(o.tuple().at(i));
      ts.push_back(cat(parts, 0));
    }
    out = nn::Value(std::move(ts));
  } else {
    throw ActorError("[actors] forward through " + what() + " returned " + outs[0].kind() +
                     ": a group's outputs are joined along dim 0, so they must be tensors (or a tuple of them)");
  }
  if (!grad || !recorded) return out;
  auto node = std::make_shared<GroupCallNode>(call, what());
  std::vector<Tensor> joined = out.tensors();
  node->out_rows.resize(joined.size());
  for (size_t i = 0; i < joined.size(); ++i)
    for (size_t j = 0; j < k; ++j) node->out_rows[i].push_back(rows_of(i, j));
  node->in_rows = rows;
  autograd::set_next_edges(*node, inputs);
  for (const auto& t : inputs) {
    node->in_shapes.push_back(t.defined() ? t.sizes().vec() : std::vector<int64_t>{});
    node->in_dtypes.push_back(t.defined() ? t.dtype() : kFloat32);
  }
  autograd::set_history(node, joined);
  return out;
}

nn::Value RemoteGroupModule::call(nn::Args args, nn::Kwargs kwargs) { return run(args, kwargs, true); }
nn::Value RemoteGroupModule::forward_args(const nn::Args& args, const nn::Kwargs& kwargs) { return run(args, kwargs, false); }
Tensor RemoteGroupModule::forward(const Tensor& input) {
  nn::Value out = forward_args(nn::Args{nn::Value(input)}, {});
  if (!out.is_tensor()) throw ActorError("[" + name() + "] forward returned " + out.kind() + ", not a Tensor");
  return out.tensor();
}

Future<nn::Value> RemoteGroupModule::forward_async(nn::Args args, nn::Kwargs kwargs) {
  auto s = std::make_shared<detail::CallState>("forward through " + what(), std::chrono::steady_clock::now() + default_timeout(),
                                               default_timeout());
  try {
    s->complete(to_value(call(std::move(args), std::move(kwargs))));
  } catch (const std::exception& e) {
    s->fail(e.what());
  }
  return Future<nn::Value>(s);
}

// ---- traversal

OrderedDict<std::string, Tensor> RemoteGroupModule::named_parameters(const std::string& prefix, bool recurse,
                                                                     bool remove_duplicate) const {
  if (sharded() && !path().empty())
    return from_root(detail::state_dict_from(fan_at("members", "", {Value(""), Value(true), Value(remove_duplicate), Value(false)}).at(0)),
                     prefix, recurse);
  return detail::state_dict_from(first("members", {Value(prefix), Value(recurse), Value(remove_duplicate), Value(false)}));
}

OrderedDict<std::string, Tensor> RemoteGroupModule::named_buffers(const std::string& prefix, bool recurse,
                                                                  bool remove_duplicate) const {
  return detail::state_dict_from(first("members", {Value(prefix), Value(recurse), Value(remove_duplicate), Value(true)}));
}

OrderedDict<std::string, nn::ModulePtr> RemoteGroupModule::named_children() const {
  OrderedDict<std::string, nn::ModulePtr> out;
  for (const auto& [k, c] : replicas_[0]->named_children()) out.insert_or_assign(k, sub(join_path(path(), k), c->name(), c->is_training()));
  return out;
}

OrderedDict<std::string, nn::ModulePtr> RemoteGroupModule::named_modules(const std::string& prefix, bool remove_duplicate) {
  OrderedDict<std::string, nn::ModulePtr> out;
  out.insert_or_assign(prefix, shared_from_this());
  for (const auto& [k, m] : replicas_[0]->named_modules(prefix, remove_duplicate)) {
    auto* r = dynamic_cast<RemoteModule*>(m.get());
    if (k == prefix || !r) continue;
    out.insert_or_assign(k, sub(r->path(), m->name(), m->is_training()));
  }
  return out;
}

nn::ModulePtr RemoteGroupModule::get_submodule(const std::string& target) {
  if (target.empty()) return shared_from_this();
  nn::ModulePtr m = replicas_[0]->get_submodule(target);
  return sub(join_path(path(), target), m->name(), m->is_training());
}

Tensor RemoteGroupModule::get_parameter(const std::string& target) {
  if (sharded()) {
    auto all = detail::state_dict_from(fan_at("members", "", {Value(""), Value(true), Value(true), Value(false)}).at(0));
    const std::string key = join_path(path(), target);
    if (all.contains(key)) return all[key];
  }
  return first("getp", {Value(target), Value(false)}).as<Tensor>();
}

Tensor RemoteGroupModule::get_buffer(const std::string& target) { return first("getp", {Value(target), Value(true)}).as<Tensor>(); }

// ---- tree-wide operations

nn::Module& RemoteGroupModule::apply(const std::string& registered_fn) {
  refuse_below_sharded_root("apply");
  nn::registry_detail::apply_fn(registered_fn);  // an unknown name fails here, with the registry's text
  fan("apply", {Value(registered_fn)});
  return *this;
}

nn::Module& RemoteGroupModule::train(bool mode) {
  fan("train", {Value(mode)});
  training_ = mode;
  return *this;
}

nn::Module& RemoteGroupModule::requires_grad_(bool) {
  throw ActorError("[actors] requires_grad_ on " + what() + ": its hosts' " + (sharded() ? "FSDP shards" : "DDP buckets") +
                   " were built at place() from the parameters that required grad then; freeze parameters before placing "
                   "the subtree");
}

void RemoteGroupModule::zero_grad(bool set_to_none) {
  refuse_below_sharded_root("zero_grad");
  fan("zgrad", {Value(set_to_none)});
}

nn::Module& RemoteGroupModule::to(std::optional<Device> device, std::optional<ScalarType> dtype, bool) {
  if (dtype && !is_floating_point(*dtype))
    throw std::invalid_argument(std::string("nn.Module.to only accepts floating point or complex dtypes, but got desired dtype=") +
                                "torch." + dtype_name(*dtype));
  refuse_below_root("to()");
  fan("to", {Value(device ? device->str() : std::string()), Value(int64_t(dtype ? static_cast<int>(*dtype) : -1))});
  return *this;
}

nn::Module& RemoteGroupModule::type(ScalarType dtype) {
  refuse_below_root("type()");
  fan("type", {Value(int64_t(static_cast<int>(dtype)))});
  return *this;
}

nn::Module& RemoteGroupModule::to_empty(Device device, bool recurse) {
  refuse_below_root("to_empty()");
  fan("toempty", {Value(device.str()), Value(recurse)});
  return *this;
}

// ---- state

nn::StateDict RemoteGroupModule::state_dict(const std::string& prefix, bool keep_vars) {
  nn::StateDict out;
  save_to_state_dict(out, prefix, keep_vars);
  return out;
}

void RemoteGroupModule::save_to_state_dict(nn::StateDict& out, const std::string& prefix, bool keep_vars) const {
  nn::StateDict d = sharded() && !path().empty()
                        ? from_root(detail::state_dict_from(fan_at("sd", "", {Value(""), Value(keep_vars)}).at(0)), prefix, true)
                        : detail::state_dict_from(first("sd", {Value(prefix), Value(keep_vars)}));
  for (auto& [k, t] : d) out.insert_or_assign(k, t);
}

nn::StateDictCheck RemoteGroupModule::check_state_dict(const nn::StateDict& sd, const std::string& prefix) {
  refuse_below_sharded_root("check_state_dict");
  List r = first("sdcheck", {Value(detail::state_pairs(sd)), Value(prefix)}).as<List>();
  nn::StateDictCheck c;
  c.keys.missing_keys = from_value<std::vector<std::string>>(r.at(0));
  c.keys.unexpected_keys = from_value<std::vector<std::string>>(r.at(1));
  c.errors = from_value<std::vector<std::string>>(r.at(2));
  return c;
}

nn::IncompatibleKeys RemoteGroupModule::load_state_dict(const nn::StateDict& sd, bool strict, bool assign) {
  refuse_below_sharded_root("load_state_dict");
  return detail::load_on_hosts(
      [&] { return fan("load", {Value(detail::state_pairs(sd)), Value(strict), Value(assign)}).at(0).as<List>(); },
      placement_.str());
}

// ---- hooks: registered by name on every host

nn::RemovableHandle RemoteGroupModule::add_hook(const char* kind, const std::string& registered_name, const char* api,
                                            bool prepend, bool always_call) {
  if (registered_name.empty())
    throw std::invalid_argument(std::string("[") + api + "] " + what() +
                                " is hosted by actors, which run its hooks: a callable cannot travel there; register the "
                                "hook by name (nn::registry, on every rank) and pass the name");
  std::vector<Value> ids = fan("hook", {Value(kind), Value(registered_name), Value(prepend), Value(always_call)});
  std::vector<std::pair<ActorRef, int64_t>> handles;
  for (size_t j = 0; j < replicas_.size(); ++j) handles.emplace_back(replicas_[j]->host_actor(), ids[j].as<int64_t>());
  return nn::RemovableHandle([handles] {
    for (const auto& [h, id] : handles) {
      try {
        if (running()) h.send("unhook", id);
      } catch (const std::exception&) {
      }
    }
  });
}

// ------------------------------------------------------------------------------------------------
// place()

namespace {

void check_placement(Runtime& rt, const std::string& path, const Placement& p) {
  const std::string at = "[actors] place(): `" + path + "` -> " + p.str();
  if (p.kind == Placement::Kind::kRank) {
    const int r = p.ranks.empty() ? -1 : p.ranks[0];
    if (r < 0 || r >= rt.size())
      throw ActorError("[actors] place(): `" + path + "` -> rank " + std::to_string(r) + ", but there are " +
                       std::to_string(rt.size()) + " ranks");
    return;
  }
  if (p.ranks.empty()) throw ActorError(at + ": the group has no ranks");
  for (size_t i = 0; i < p.ranks.size(); ++i) {
    if (p.ranks[i] < 0 || p.ranks[i] >= rt.size())
      throw ActorError(at + ": rank " + std::to_string(p.ranks[i]) + " is out of range (there are " +
                       std::to_string(rt.size()) + " ranks)");
    for (size_t j = 0; j < i; ++j)
      if (p.ranks[j] == p.ranks[i]) throw ActorError(at + ": rank " + std::to_string(p.ranks[i]) + " appears twice");
  }
}

RemoteModulePtr spawn_member(Runtime& rt, int rank, const std::string& name, const std::string& kind, const List& spec) {
  ActorRef ref;
  try {
    ref = rt.spawn_on_list(rank, name, kGroupHost, List{Value(kind), Value(spec)});
  } catch (...) {
    detail::drop_handoff(spec);
    throw;
  }
  List info = ref.request<List>("submod", std::string()).get();
  auto p = std::make_shared<RemoteModule>(ref, "", info.at(0).as<std::string>(), rt.rank(), info.at(1).as<bool>());
  p->set_owner(true);
  return p;
}

// Hosts `child` on every rank of the group, makes the group's comm group, and has the hosts wrap their
// copies in DDP / FSDP over it.
RemoteModulePtr place_group(Runtime& rt, const std::string& path, const nn::ModulePtr& child, const Placement& p) {
  (void)g_registered;
  const bool shard = p.kind == Placement::Kind::kSharded;
  const std::string kind = shard ? "sharded" : "replicated";
  for (const auto& [k, m] : child->named_modules())
    if (m->is_remote())
      throw ActorError("[actors] place(): `" + path + "` -> " + p.str() + " holds `" + join_path(path, k) +
                       "`, which is hosted already: a group's hosts each need a whole copy (place the inner subtree "
                       "on its own, or the outer one only)");
  const int64_t k = static_cast<int64_t>(p.ranks.size());
  const int64_t id = (static_cast<int64_t>(rt.rank()) << 40) | g_next_group++;
  const std::string tag = "troupe.group" + std::to_string(id);
  // 1. a copy per host: in one process the module itself on the first and clones (or builds by class
  //    name, then its state) on the others; across processes each host builds it and loads its state
  std::vector<RemoteModulePtr> reps;
  std::vector<bool> needs_state;
  std::vector<List> specs;
  for (int64_t j = 0; j < k; ++j) {
    nn::ModulePtr copy = child;
    bool load = rt.networked();
    if (!rt.networked() && j > 0) {
      try {
        copy = child->clone();
      } catch (const std::exception&) {
        copy = nullptr;
      }
      if (!copy) {
        if (!has_module_factory(child->name()))
          throw ActorError("[actors] place(): `" + path + "` -> " + p.str() + " needs a copy of the " + child->name() +
                           " per rank: make it cloneable (nn::Cloneable) or register a module factory on every rank "
                           "(actors::register_module<M, Args...>(\"" + child->name() + "\"))");
        specs.push_back(List{Value("factory"), Value(child->name()), Value(List{})});
        needs_state.push_back(true);
        continue;
      }
    }
    specs.push_back(detail::module_spec(rt, copy, p.ranks[j], "", {}));
    needs_state.push_back(load);
  }
  try {
    for (int64_t j = 0; j < k; ++j) {
      reps.push_back(spawn_member(rt, p.ranks[j], tag + "." + std::to_string(j), kind, specs[j]));
      specs[j].clear();
    }
  } catch (...) {
    for (auto& s : specs) detail::drop_handoff(s);
    throw;
  }
  nn::StateDict state;
  for (int64_t j = 0; j < k; ++j) {
    if (!needs_state[j]) continue;
    if (state.empty()) state = child->state_dict();
    detail::match_placement(*reps[j], *child);
    reps[j]->load_state_dict(state, true, false);
    reps[j]->train(child->is_training());
  }
  // 2. the comm group of the hosts' ranks, parked on each rank under (id, index) until its host joins
  comm::GroupOptions o;
  o.timeout = default_timeout();
  o.name = kind + "[" + path + "]";
  if (!rt.networked()) {
    auto groups = comm::make_local_groups(static_cast<int>(k), o);
    for (int64_t j = 0; j < k; ++j) park(id, j, groups[j]);
  } else {
    std::vector<ActorRef> makers;
    std::vector<Future<ActorRef>> spawning;
    for (int r = 0; r < rt.size(); ++r) spawning.push_back(rt.spawn_on_async(r, tag + ".maker", kGroupMaker, List{}));
    makers = wait_all(spawning);
    std::vector<int64_t> ranks(p.ranks.begin(), p.ranks.end());
    std::vector<Future<void>> making;
    for (auto& m : makers) making.push_back(m.request<void>("make", id, ranks, o.name));
    std::exception_ptr first;
    for (auto& f : making) {
      try {
        f.get();
      } catch (...) {
        if (!first) first = std::current_exception();
      }
    }
    for (auto& m : makers) m.stop();
    if (first) std::rethrow_exception(first);
  }
  // 3. every host wraps its copy (collective among them)
  std::vector<Future<void>> joining;
  for (int64_t j = 0; j < k; ++j) joining.push_back(reps[j]->host_actor().request<void>("join", id, j));
  std::exception_ptr first;
  for (auto& f : joining) {
    try {
      f.get();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) {
    for (int64_t j = 0; j < k; ++j) {  // the groups of this process that no host took
      try {
        unpark(id, j);
      } catch (const ActorError&) {
      }
    }
    std::rethrow_exception(first);
  }
  return std::make_shared<RemoteGroupModule>(p, std::move(reps), "", child->name(), rt.rank(), child->is_training());
}

}  // namespace

std::map<std::string, RemoteModulePtr> place(Runtime& rt, const nn::ModulePtr& model,
                                             const std::map<std::string, Placement>& placement) {
  if (!model) throw ActorError("[actors] place(): the model is null");
  for (const auto& [a, pa] : placement) {
    if (a.empty()) throw ActorError("[actors] place(): the root itself cannot be placed (use actors::host)");
    for (const auto& [b, pb] : placement)
      if (a != b && b.compare(0, a.size() + 1, a + ".") == 0)
        throw ActorError("[actors] place(): `" + b + "` lies inside `" + a + "`, which is placed as a whole");
    check_placement(rt, a, pa);
  }
  std::map<std::string, RemoteModulePtr> out;
  for (const auto& [path, where] : placement) {
    nn::ModulePtr child = model->get_submodule(path);  // PyTorch's error text for a bad path
    if (child->is_remote()) throw ActorError("[actors] place(): `" + path + "` is already hosted");
    auto dot = path.rfind('.');
    nn::ModulePtr parent = dot == std::string::npos ? model : model->get_submodule(path.substr(0, dot));
    std::string name = dot == std::string::npos ? path : path.substr(dot + 1);
    RemoteModulePtr proxy = where.kind == Placement::Kind::kRank ? host(rt, child, where.ranks[0])
                                                                 : place_group(rt, path, child, where);
    parent->register_module(name, proxy);
    child->set_placed(proxy);
    out[path] = proxy;
  }
  return out;
}

}  // namespace troupe::actors
