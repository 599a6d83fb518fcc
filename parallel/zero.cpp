// ZeRO stages 1-3 over flat buffers (one per gradient bucket), FSDP units, and the sharded checkpoint
// (see zero.h).
#include <troupe/parallel/zero.h>

#include <troupe/parallel/grad_buckets.h>

#include <algorithm>
#include <deque>
#include <filesystem>
#include <limits>
#include <map>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include <troupe/nn/serialize.h>
#include <troupe/tensor/autograd.h>
#include <troupe/tensor/ops.h>
#include <troupe/tensor/storage.h>
#include <troupe/tensor/tensor_impl.h>

namespace troupe::parallel {

using comm::CommError;
using comm::ProcessGroupPtr;
using comm::ReduceOp;
using comm::WorkPtr;

namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

std::vector<int64_t> to_shape(IntArrayRef s) { return std::vector<int64_t>(s.begin(), s.end()); }

int64_t bytes_of(const Tensor& t) {
  return t.defined() ? t.numel() * static_cast<int64_t>(t.element_size()) : 0;
}

// [lo, lo + len) of member k's flattened tensor that rank r's slice of `g` covers (len may be 0).
std::pair<int64_t, int64_t> piece_of(const FlatShardInfo& g, int64_t member_numel, size_t k, int r) {
  const int64_t po = g.offsets[k], so = static_cast<int64_t>(r) * g.shard_numel;
  const int64_t lo = std::max(po, so), hi = std::min(po + member_numel, so + g.shard_numel);
  if (hi <= lo) return {0, 0};
  return {lo - po, hi - lo};
}

constexpr const char* kMeta = "__meta__.";
constexpr const char* kWorldSize = "__world_size__";

// FSDP's storage resize: a freed flat buffer keeps its StorageImpl (which the parameters' views, and
// the views autograd saved in forward, share) with 0 bytes; gathering gives it its bytes back in place.
void release_storage(const Tensor& t) {
  StorageImpl& s = *t.impl()->storage;
  if (s.nbytes == 0) return;
  StorageImpl none(0, s.device);  // takes the bytes and frees them as it goes
  std::swap(s.data, none.data);
  std::swap(s.nbytes, none.nbytes);
  std::swap(s.deleter, none.deleter);
}

void allocate_storage(const Tensor& t, size_t nbytes) {
  StorageImpl& s = *t.impl()->storage;
  if (s.nbytes == nbytes) return;
  StorageImpl fresh(nbytes, s.device);
  std::swap(s.data, fresh.data);
  std::swap(s.nbytes, fresh.nbytes);
  std::swap(s.deleter, fresh.deleter);
}

int64_t storage_bytes(const Tensor& t) {
  return t.defined() ? static_cast<int64_t>(t.impl()->storage->nbytes) : 0;
}

// The parameters some ZeroOptimizer or FullyShardedDataParallel wraps now (one wrapper at a time: both
// re-point the parameters' data and hook their gradients).
std::mutex& wrapped_mutex() {
  static std::mutex m;
  return m;
}
std::unordered_set<const TensorImpl*>& wrapped() {
  static std::unordered_set<const TensorImpl*> s;
  return s;
}

}  // namespace

AutoWrapPolicy children_wrap_policy() {
  return [](const std::string& name, const nn::Module&) { return name.find('.') == std::string::npos; };
}

AutoWrapPolicy modules_wrap_policy(std::vector<nn::ModulePtr> modules) {
  return [modules = std::move(modules)](const std::string&, const nn::Module& m) {
    return std::any_of(modules.begin(), modules.end(), [&](const nn::ModulePtr& x) { return x.get() == &m; });
  };
}

namespace detail {

struct ShardCore : std::enable_shared_from_this<ShardCore> {
  // ---- configuration
  ProcessGroupPtr group;
  int stage = 1;
  std::string who;  // "[ZeroOptimizer]", "[FullyShardedDataParallel]"
  double first_bucket_mb = 1, bucket_cap_mb = 25;
  bool overlap = true;
  bool reshard_after_forward = true;
  bool prefetch = true;
  AutoWrapPolicy policy;

  // ---- parameters and layout
  std::vector<std::string> names;
  std::vector<Tensor> params;  // parameters that require grad, registration order
  std::vector<std::vector<int64_t>> shapes;
  std::vector<size_t> unit_of_param;      // parameter -> unit
  std::vector<size_t> group_of, slot_of;  // parameter -> flat buffer, member index in it
  std::vector<FlatShardInfo> groups;
  std::vector<size_t> launch_order;  // flat buffers in reduction order (reverse registration)
  std::vector<Tensor> full;     // per buffer: the flat buffer (stage 3: storage released while freed)
  std::vector<Tensor> shards;   // per buffer: the shard the inner optimizer steps (stages 1-2: full's slice)
  std::vector<Tensor> views;    // per parameter: its view of its buffer
  std::vector<Tensor> empties;  // stage 3, per parameter: what it points at while freed
  std::unique_ptr<optim::Optimizer> opt;
  bool registered = false;

  // ---- units (stage 3; stages 1-2 have the root unit only)
  struct UnitState {
    nn::Module* module = nullptr;
    bool gathered = false;
    std::vector<WorkPtr> gathering;  // all_gathers in flight (prefetch)
    std::vector<uint32_t> versions;  // the buffers' version counters before the gather
    size_t pending = 0;              // parameters without their gradient in this reduction round
  };
  std::vector<ShardUnit> units;
  std::vector<UnitState> ustate;
  std::vector<size_t> forward_order;  // units in the order their forward started, since the root's
  std::vector<nn::RemovableHandle> module_hooks;
  std::vector<int64_t> acc_hooks;  // per parameter: post-accumulate-grad hook id, -1 when none

  // ---- gradient reduction (stages 2-3)
  struct Bucket {
    Tensor flat;  // this round's full gradient of the buffer (allocated at its first member)
    size_t pending = 0;
  };
  struct InFlight {
    size_t g = 0;
    Tensor flat, out;  // the reduce-scatter's input and output (out is flat when size() == 1)
    WorkPtr work;
  };
  std::vector<Bucket> buckets;
  bool round_active = false;
  std::vector<char> ready;
  size_t next_launch = 0;
  std::deque<std::unique_ptr<InFlight>> in_flight;  // launched, in launch order
  ShardMemory peak;

  ~ShardCore() {
    for (size_t i = 0; i < acc_hooks.size(); ++i)
      if (acc_hooks[i] >= 0) params[i].remove_post_accumulate_grad_hook(acc_hooks[i]);
    for (auto& h : module_hooks) h.remove();
    for (auto& f : in_flight) {
      if (!f->work) continue;
      try {
        f->work->wait();
      } catch (...) {
      }
    }
    for (auto& u : ustate)
      for (auto& w : u.gathering) {
        try {
          w->wait();
        } catch (...) {
        }
      }
    if (registered) {
      std::lock_guard<std::mutex> lock(wrapped_mutex());
      for (const auto& p : params) wrapped().erase(p.impl());
    }
  }

  // ---- construction

  void build(const nn::ModulePtr& module, const OptimizerFactory& factory) {
    if (!module) throw std::invalid_argument(who + " module is null");
    if (!group)
      throw std::invalid_argument(who + " no process group: pass one, or call launch::init / run under "
                                        "comm::run_local first (comm::world() is null)");
    if (!factory) throw std::invalid_argument(who + " the optimizer factory is empty");
    if (!(bucket_cap_mb > 0) || !(first_bucket_mb > 0))
      throw std::invalid_argument(who + " bucket_cap_mb and first_bucket_mb must be positive, got " +
                                  std::to_string(bucket_cap_mb) + " and " + std::to_string(first_bucket_mb));
    for (const auto& [n, p] : module->named_parameters()) {
      if (!p.defined() || !p.requires_grad()) continue;
      if (!is_floating_point(p.dtype()))
        throw std::invalid_argument(who + " parameter " + n + " has dtype " + dtype_name(p.dtype()) +
                                    "; only floating parameters can be averaged");
      names.push_back(n);
      params.push_back(p);
      shapes.push_back(to_shape(p.sizes()));
    }
    {
      std::lock_guard<std::mutex> lock(wrapped_mutex());
      for (size_t i = 0; i < params.size(); ++i)
        if (wrapped().count(params[i].impl()))
          throw std::invalid_argument(who + " parameter " + names[i] +
                                      " is already wrapped by another ZeroOptimizer or FullyShardedDataParallel "
                                      "(a parameter can be sharded by one at a time: destroy the other first)");
      for (const auto& p : params) wrapped().insert(p.impl());
      registered = true;
    }
    make_units(module);
    assign_buckets();
    const int size = group->size(), rank = group->rank();
    for (auto& g : groups) {
      g.padded_numel = (g.numel + size - 1) / size * size;
      g.shard_numel = g.padded_numel / size;
      g.shard_offset = static_cast<int64_t>(rank) * g.shard_numel;
    }
    for (size_t g = 0; g < groups.size(); ++g) {
      ShardUnit& u = units[groups[g].unit];
      u.flat_shards.push_back(g);
      u.full_bytes += groups[g].padded_numel * static_cast<int64_t>(element_size(groups[g].dtype));
    }
    verify_across_ranks();

    NoGradGuard no_grad;
    views.resize(params.size());
    for (size_t g = 0; g < groups.size(); ++g) {
      const FlatShardInfo& G = groups[g];
      const TensorOptions o = TensorOptions(G.dtype).device(params[G.params[0]].device());
      Tensor flat = zeros({G.padded_numel}, o);
      for (size_t k = 0; k < G.params.size(); ++k) {
        const Tensor& p = params[G.params[k]];
        flat.narrow(0, G.offsets[k], p.numel()).copy_(p.detach().reshape({p.numel()}));
      }
      if (size > 1) group->broadcast(flat, 0);
      for (size_t k = 0; k < G.params.size(); ++k) {
        const size_t i = G.params[k];
        views[i] = flat.narrow(0, G.offsets[k], numel_of(i)).view(shapes[i]);
      }
      Tensor shard = empty({0}, o);
      if (stage < 3)
        shard.set_data(flat.narrow(0, G.shard_offset, G.shard_numel));
      else
        shard.set_data(flat.narrow(0, G.shard_offset, G.shard_numel).clone());
      shard.requires_grad_(true);
      full.push_back(flat);
      shards.push_back(shard);
    }
    if (stage < 3) {
      for (size_t i = 0; i < params.size(); ++i) params[i].set_data(views[i]);
    } else {
      for (const auto& p : params) empties.push_back(empty({0}, TensorOptions(p.dtype()).device(p.device())));
      for (size_t u = 0; u < units.size(); ++u) {
        ustate[u].gathered = true;  // the parameters hold their original storage: free() lets it go
        free_unit(u);
      }
    }
    opt = factory(shards);
    if (!opt) throw std::invalid_argument(who + " the optimizer factory returned null");
    auto ps = opt->parameters();
    for (const auto& s : shards) {
      if (std::none_of(ps.begin(), ps.end(), [&](const Tensor& t) { return t.is_same(s); }))
        throw std::invalid_argument(who + " the optimizer the factory made does not hold every shard tensor it "
                                          "was given (build it over the shard_params argument)");
    }
    buckets.resize(groups.size());
    ready.assign(params.size(), 0);
    install_hooks();
    peak = memory();
  }

  // Units: [0] the root, then the submodules the policy picks (pre-order) that end up with parameters.
  // A parameter goes to the innermost unit whose subtree holds every module that holds it.
  void make_units(const nn::ModulePtr& module) {
    struct Candidate {
      std::string name;
      nn::Module* module;
      std::unordered_set<const nn::Module*> subtree;
    };
    std::vector<Candidate> cands;
    auto all = module->named_modules();
    if (stage == 3 && policy) {
      for (const auto& [name, m] : all) {
        if (name.empty() || !m || !policy(name, *m)) continue;
        Candidate c{name, m.get(), {}};
        for (const auto& sub : m->modules()) c.subtree.insert(sub.get());
        cands.push_back(std::move(c));
      }
    }
    std::unordered_map<const TensorImpl*, size_t> index_of;
    for (size_t i = 0; i < params.size(); ++i) index_of[params[i].impl()] = i;
    std::vector<std::vector<const nn::Module*>> owners(params.size());
    for (const auto& [name, m] : all) {
      if (!m) continue;
      for (const auto& [pn, p] : m->named_parameters("", /*recurse=*/false)) {
        auto it = index_of.find(p.impl());
        if (it != index_of.end()) owners[it->second].push_back(m.get());
      }
    }
    std::vector<int> cand_of(params.size(), -1);  // -1: the root
    for (size_t i = 0; i < params.size(); ++i) {
      size_t best = std::numeric_limits<size_t>::max();
      for (size_t c = 0; c < cands.size(); ++c) {
        const auto& sub = cands[c].subtree;
        const bool holds_all = std::all_of(owners[i].begin(), owners[i].end(), [&](const nn::Module* m) { return sub.count(m) > 0; });
        if (holds_all && !owners[i].empty() && sub.size() < best) {
          best = sub.size();
          cand_of[i] = static_cast<int>(c);
        }
      }
    }
    units.push_back(ShardUnit{"", {}, {}, 0});
    ustate.emplace_back();
    ustate.back().module = module.get();
    std::vector<int> unit_of_cand(cands.size(), -1);
    for (size_t c = 0; c < cands.size(); ++c) {
      if (std::find(cand_of.begin(), cand_of.end(), static_cast<int>(c)) == cand_of.end()) continue;
      unit_of_cand[c] = static_cast<int>(units.size());
      units.push_back(ShardUnit{cands[c].name, {}, {}, 0});
      ustate.emplace_back();
      ustate.back().module = cands[c].module;
    }
    unit_of_param.assign(params.size(), 0);
    for (size_t i = 0; i < params.size(); ++i) {
      if (cand_of[i] >= 0) unit_of_param[i] = static_cast<size_t>(unit_of_cand[static_cast<size_t>(cand_of[i])]);
      units[unit_of_param[i]].params.push_back(i);
    }
  }

  // DDP's bucket assignment per (unit, dtype, device): parameters in reverse registration order, a
  // bucket closes once it holds at least its limit (the first bucket of each key first_bucket_mb, the
  // others bucket_cap_mb). Each bucket is one flat buffer, its members in registration order.
  void assign_buckets() {
    const double mib = 1024.0 * 1024.0;
    const int64_t first_bytes = static_cast<int64_t>(first_bucket_mb * mib);
    const int64_t cap_bytes = static_cast<int64_t>(bucket_cap_mb * mib);
    std::vector<size_t> order;  // reverse registration order
    std::vector<std::string> keys(params.size());
    for (size_t i = params.size(); i-- > 0;) {
      order.push_back(i);
      keys[i] = std::to_string(unit_of_param[i]) + "/" + dtype_name(params[i].dtype()) + "@" + params[i].device().str();
    }
    auto done = detail::bucket_assignment_by_size(params, order, keys, first_bytes, cap_bytes);
    for (auto& vars : done) std::sort(vars.begin(), vars.end());
    std::sort(done.begin(), done.end(), [](const auto& a, const auto& b) { return a.front() < b.front(); });
    group_of.assign(params.size(), 0);
    slot_of.assign(params.size(), 0);
    for (auto& vars : done) {
      FlatShardInfo G;
      G.dtype = params[vars[0]].dtype();
      G.unit = unit_of_param[vars[0]];
      for (size_t k = 0; k < vars.size(); ++k) {
        group_of[vars[k]] = groups.size();
        slot_of[vars[k]] = k;
        G.params.push_back(vars[k]);
        G.offsets.push_back(G.numel);
        G.numel += params[vars[k]].numel();
      }
      groups.push_back(std::move(G));
    }
    // Reduction order: by the last member (the first whose gradient backward produces).
    for (size_t g = 0; g < groups.size(); ++g) launch_order.push_back(g);
    std::sort(launch_order.begin(), launch_order.end(),
              [&](size_t a, size_t b) { return groups[a].params.back() > groups[b].params.back(); });
  }

  // Every rank must wrap the same parameters with the same layout: [count, per parameter: dtype, ndim,
  // shape...; buffers, per buffer: unit, members, member indices...].
  void verify_across_ranks() {
    const int n = group->size();
    if (n == 1) return;
    std::vector<int64_t> mine{static_cast<int64_t>(params.size())};
    for (size_t i = 0; i < params.size(); ++i) {
      mine.push_back(static_cast<int64_t>(params[i].dtype()));
      mine.push_back(static_cast<int64_t>(shapes[i].size()));
      for (int64_t d : shapes[i]) mine.push_back(d);
    }
    mine.push_back(static_cast<int64_t>(groups.size()));
    for (const auto& G : groups) {
      mine.push_back(static_cast<int64_t>(G.unit));
      mine.push_back(static_cast<int64_t>(G.params.size()));
      for (size_t i : G.params) mine.push_back(static_cast<int64_t>(i));
    }
    Tensor len = tensor(std::vector<int64_t>{static_cast<int64_t>(mine.size())});
    Tensor lens = empty({n}, TensorOptions(kInt64));
    group->all_gather_into_tensor(lens, len);
    std::vector<int64_t> L = lens.to_vector<int64_t>();
    const int64_t max_len = *std::max_element(L.begin(), L.end());
    mine.resize(static_cast<size_t>(max_len), -1);
    Tensor all = empty({n * max_len}, TensorOptions(kInt64));
    group->all_gather_into_tensor(all, tensor(mine));
    std::vector<int64_t> A = all.to_vector<int64_t>();
    auto describe = [&](int r) {
      std::vector<std::string> items;
      const int64_t* s = A.data() + static_cast<size_t>(r) * max_len;
      size_t pos = 0;
      const size_t end = static_cast<size_t>(L[static_cast<size_t>(r)]);
      auto next = [&]() -> int64_t { return pos < end ? s[pos++] : -1; };
      const int64_t count = next();
      items.push_back(std::to_string(count) + " parameters that require grad");
      for (int64_t i = 0; i < count && pos < end; ++i) {
        const int64_t dt = next(), nd = next();
        std::vector<int64_t> sh;
        for (int64_t d = 0; d < nd; ++d) sh.push_back(next());
        std::string label = "parameter " + std::to_string(i);
        if (static_cast<size_t>(i) < names.size()) label += " (" + names[static_cast<size_t>(i)] + ")";
        items.push_back(label + " of shape " + shape_str(sh) + " and dtype " +
                        (dt >= 0 && dt < 64 ? dtype_name(static_cast<ScalarType>(dt)) : "?"));
      }
      const int64_t nb = next();
      items.push_back(std::to_string(nb) + " flat buffers (units and buckets)");
      for (int64_t b = 0; b < nb && pos < end; ++b) {
        const int64_t unit = next(), cnt = next();
        std::vector<int64_t> members;
        for (int64_t k = 0; k < cnt; ++k) members.push_back(next());
        items.push_back("flat buffer " + std::to_string(b) + " of unit " + std::to_string(unit) + " with parameters " +
                        shape_str(members));
      }
      return items;
    };
    const auto ref = describe(0);
    for (int r = 1; r < n; ++r) {
      const auto items = describe(r);
      for (size_t k = 0; k < std::max(ref.size(), items.size()); ++k) {
        const std::string a = k < ref.size() ? ref[k] : "nothing", b = k < items.size() ? items[k] : "nothing";
        if (a == b) continue;
        throw std::runtime_error(who + " the model on rank " + std::to_string(r) +
                                 " differs from rank 0's (every rank must wrap the same parameters, in the same "
                                 "order, with the same units and bucket options): rank 0 has " + a + ", rank " +
                                 std::to_string(r) + " has " + b);
      }
    }
  }

  void install_hooks() {
    std::weak_ptr<ShardCore> weak = weak_from_this();
    acc_hooks.assign(params.size(), -1);
    if (stage >= 2) {
      for (size_t i = 0; i < params.size(); ++i)
        acc_hooks[i] = params[i].register_post_accumulate_grad_hook([weak, i](const Tensor&) {
          if (auto self = weak.lock()) self->on_grad_ready(i);
        });
    }
    if (stage < 3) return;
    for (size_t u = 1; u < units.size(); ++u) {
      nn::Module* m = ustate[u].module;
      module_hooks.push_back(m->register_forward_pre_hook([weak, u](nn::Module&, const nn::Args&) {
        if (auto self = weak.lock()) self->pre_forward(u);
      }));
      module_hooks.push_back(m->register_forward_hook([weak, u](nn::Module&, const nn::Args&, const nn::Value& out) {
        if (auto self = weak.lock()) self->post_forward(u, out);
      }));
    }
  }

  int64_t numel_of(size_t i) const {
    int64_t n = 1;
    for (int64_t d : shapes[i]) n *= d;
    return n;
  }

  // ---- stage 3: units

  // Starts the all_gather of unit u's buffers into their storage (given back in place).
  void start_gather(size_t u) {
    UnitState& s = ustate[u];
    if (s.gathered || !s.gathering.empty()) return;
    NoGradGuard no_grad;
    s.versions.clear();
    for (size_t g : units[u].flat_shards) {
      s.versions.push_back(full[g]._version());
      allocate_storage(full[g], static_cast<size_t>(groups[g].padded_numel) * element_size(groups[g].dtype));
      s.gathering.push_back(group->all_gather_into_tensor_async(full[g], shards[g].detach()));
    }
    note_peak_params();
  }

  // Unit u's parameters view its gathered buffers (waits for a prefetch in flight).
  void gather_unit(size_t u) {
    UnitState& s = ustate[u];
    if (s.gathered || units[u].flat_shards.empty()) return;
    start_gather(u);
    auto works = std::move(s.gathering);
    s.gathering.clear();
    for (auto& w : works) w->wait();
    // The gather is no modification autograd must see: the views saved in forward stay valid.
    for (size_t k = 0; k < units[u].flat_shards.size(); ++k)
      full[units[u].flat_shards[k]].impl()->storage->version = s.versions[k];
    for (size_t i : units[u].params) params[i].set_data(views[i]);
    s.gathered = true;
  }

  // Unit u's parameters point at empty tensors; its buffers' storage is released.
  void free_unit(size_t u) {
    UnitState& s = ustate[u];
    if (!s.gathering.empty()) {
      auto works = std::move(s.gathering);
      s.gathering.clear();
      for (auto& w : works) w->wait();
    }
    if (stage < 3) return;
    for (size_t i : units[u].params) params[i].set_data(empties[i]);
    for (size_t g : units[u].flat_shards) release_storage(full[g]);
    s.gathered = false;
  }

  void gather_all() {
    for (size_t u = 0; u < units.size(); ++u) start_gather(u);
    for (size_t u = 0; u < units.size(); ++u) gather_unit(u);
  }
  void free_all() {
    for (size_t u = 0; u < units.size(); ++u) free_unit(u);
  }
  bool all_gathered() const {
    for (size_t u = 0; u < units.size(); ++u)
      if (!units[u].flat_shards.empty() && !ustate[u].gathered) return false;
    return true;
  }

  void root_pre_forward() {
    forward_order.clear();
    gather_unit(0);
  }
  void root_post_forward(const nn::Value& out) {
    if (autograd::GradMode::is_enabled()) hook_outputs(0, out);
  }
  void pre_forward(size_t u) {
    if (std::find(forward_order.begin(), forward_order.end(), u) == forward_order.end()) forward_order.push_back(u);
    gather_unit(u);
  }
  void post_forward(size_t u, const nn::Value& out) {
    if (autograd::GradMode::is_enabled()) hook_outputs(u, out);
    if (reshard_after_forward) free_unit(u);
  }

  // FSDP's pre-backward hook: a hook on the gradient of each output of unit u's forward.
  void hook_outputs(size_t u, const nn::Value& out) {
    std::weak_ptr<ShardCore> weak = weak_from_this();
    for (const auto& t : out.tensors()) {
      if (!t.defined() || !t.requires_grad() || !t.grad_fn()) continue;
      t.register_hook([weak, u](const Tensor&) {
        if (auto self = weak.lock()) self->pre_backward(u);
        return Tensor();
      });
    }
  }

  // Backward reached unit u: gather it; start gathering the unit backward reaches next (the unit whose
  // forward started before u's), so that its all_gather is queued before u's reduce-scatters.
  void pre_backward(size_t u) {
    gather_unit(u);
    if (!prefetch) return;
    std::vector<size_t> order{0};
    order.insert(order.end(), forward_order.rbegin(), forward_order.rend());
    auto it = std::find(order.begin(), order.end(), u);
    if (it == order.end()) return;
    for (++it; it != order.end(); ++it) {
      if (units[*it].flat_shards.empty()) continue;
      start_gather(*it);
      break;
    }
  }

  // ---- gradients (stages 2-3): buckets reduce-scattered from the post-accumulate-grad hooks

  void start_round() {
    round_active = true;
    next_launch = 0;
    ready.assign(params.size(), 0);
    for (size_t g = 0; g < groups.size(); ++g) buckets[g].pending = groups[g].params.size();
    for (size_t u = 0; u < units.size(); ++u) ustate[u].pending = units[u].params.size();
  }

  // The post-accumulate-grad hook of parameter i.
  void on_grad_ready(size_t i) {
    if (!round_active) {
      start_round();
    } else if (ready[i]) {
      // A second gradient before the round ended: the last backward did not reach every parameter (or
      // gradients accumulate over backward calls without overlap): finish that round with zeros.
      launch_remaining();
      start_round();
    }
    mark_ready(i);
    if (overlap) launch_ready();
    poll();
    if (next_launch == launch_order.size()) round_active = false;
  }

  Tensor& bucket_flat(size_t g) {
    Bucket& b = buckets[g];
    if (!b.flat.defined())
      b.flat = zeros({groups[g].padded_numel}, TensorOptions(groups[g].dtype).device(full[g].device()));
    return b.flat;
  }

  // Moves parameter i's .grad (or zeros) into its bucket and frees it.
  void take_grad(size_t i) {
    NoGradGuard no_grad;
    const size_t g = group_of[i];
    Tensor& flat = bucket_flat(g);
    const Tensor& grad = params[i].grad();
    const int64_t n = numel_of(i);
    if (grad.defined()) {
      if (grad.numel() != n)
        throw std::runtime_error(who + " the gradient of parameter " + names[i] + " has " +
                                 std::to_string(grad.numel()) + " elements; the parameter has " + std::to_string(n));
      flat.narrow(0, groups[g].offsets[slot_of[i]], n).copy_(grad.reshape({n}));
    }
    note_peak_grads(bytes_of(grad));
    params[i].set_grad(Tensor());
  }

  void mark_ready(size_t i) {
    ready[i] = 1;
    take_grad(i);
    --buckets[group_of[i]].pending;
    if (stage == 3) {
      const size_t u = unit_of_param[i];
      if (--ustate[u].pending == 0) free_unit(u);  // the unit's backward is done
    }
  }

  // Starts bucket g's reduce-scatter (AVG); members without a gradient this round add their .grad, if
  // any (set outside a hooked backward), else zeros.
  void launch(size_t g) {
    for (size_t i : groups[g].params)
      if (!ready[i]) take_grad(i);
    auto f = std::make_unique<InFlight>();
    f->g = g;
    f->flat = std::move(bucket_flat(g));
    buckets[g].flat = Tensor();
    if (group->size() > 1) {
      f->out = empty({groups[g].shard_numel}, TensorOptions(groups[g].dtype).device(f->flat.device()));
      f->work = group->reduce_scatter_tensor_async(f->out, f->flat, ReduceOp::AVG);
    } else {
      f->out = f->flat;
    }
    in_flight.push_back(std::move(f));
    note_peak_grads(0);
  }

  // Launches, in reduction order, every bucket whose members are all in.
  void launch_ready() {
    while (next_launch < launch_order.size() && buckets[launch_order[next_launch]].pending == 0)
      launch(launch_order[next_launch++]);
  }
  void launch_remaining() {
    while (next_launch < launch_order.size()) launch(launch_order[next_launch++]);
    round_active = false;
  }

  // A finished reduce-scatter: its result joins the shard's gradient; its full gradient goes.
  void complete(InFlight& f) {
    if (f.work) f.work->wait();
    Tensor& shard = shards[f.g];
    if (!shard.grad().defined()) {
      shard.set_grad(f.out);
    } else {
      NoGradGuard no_grad;
      shard.mutable_grad().add_(f.out);
    }
  }
  void poll() {
    while (!in_flight.empty() && (!in_flight.front()->work || in_flight.front()->work->is_completed())) {
      auto f = std::move(in_flight.front());
      in_flight.pop_front();
      complete(*f);
    }
  }
  void wait_all() {
    while (!in_flight.empty()) {
      auto f = std::move(in_flight.front());
      in_flight.pop_front();
      complete(*f);
    }
  }
  void finish_reduction() {
    if (round_active) launch_remaining();
    wait_all();
  }
  // Waits for the reductions in flight and drops them with the round's partial buckets.
  void drop_reduction() {
    while (!in_flight.empty()) {
      auto f = std::move(in_flight.front());
      in_flight.pop_front();
      if (f->work) f->work->wait();
    }
    round_active = false;
    for (auto& b : buckets) b.flat = Tensor();
  }

  // ---- stages 1-2: the full flat buffers

  // The updated shards back into every rank's flat buffer.
  void all_gather_full() {
    if (group->size() == 1) return;  // the shard is the whole buffer
    NoGradGuard no_grad;
    std::vector<Tensor> mine;
    std::vector<WorkPtr> works;
    for (size_t g = 0; g < groups.size(); ++g) {
      mine.push_back(shards[g].detach().clone());
      works.push_back(group->all_gather_into_tensor_async(full[g], mine.back()));
    }
    for (auto& w : works) w->wait();
  }

  // Stage 1: the gradients all-reduced (AVG) into .grad (full) and the shard's.
  void all_reduce_gradients() {
    NoGradGuard no_grad;
    for (size_t g = 0; g < groups.size(); ++g) {
      const FlatShardInfo& G = groups[g];
      Tensor flat = zeros({G.padded_numel}, TensorOptions(G.dtype).device(full[g].device()));
      for (size_t k = 0; k < G.params.size(); ++k) {
        const Tensor& grad = params[G.params[k]].grad();
        if (!grad.defined()) continue;
        const int64_t n = numel_of(G.params[k]);
        if (grad.numel() != n) {
          throw std::runtime_error(who + " the gradient of parameter " + names[G.params[k]] + " has " +
                                   std::to_string(grad.numel()) + " elements; the parameter has " + std::to_string(n));
        }
        flat.narrow(0, G.offsets[k], n).copy_(grad.reshape({n}));
      }
      if (group->size() > 1) group->all_reduce(flat, ReduceOp::AVG);
      for (size_t k = 0; k < G.params.size(); ++k) {
        const size_t i = G.params[k];
        Tensor avg = flat.narrow(0, G.offsets[k], numel_of(i)).view(shapes[i]);
        if (params[i].grad().defined())
          params[i].mutable_grad().copy_(avg);
        else
          params[i].set_grad(avg.clone());
      }
      shards[g].set_grad(flat.narrow(0, G.shard_offset, G.shard_numel).clone());
    }
  }

  // ---- zero_grad and step

  void zero_grad() {
    drop_reduction();
    for (auto& p : params) p.set_grad(Tensor());
    for (auto& s : shards) s.set_grad(Tensor());
  }

  void step() {
    note_peak(memory());
    if (stage == 1) {
      all_reduce_gradients();
      opt->step();
      for (auto& s : shards) s.set_grad(Tensor());  // the full .grad stays; the shard's copy goes
      all_gather_full();
    } else if (stage == 2) {
      finish_reduction();
      NoGradGuard no_grad;
      for (auto& s : shards)
        if (!s.grad().defined()) s.set_grad(zeros_like(s.detach()));  // no backward since the last step
      opt->step();
      all_gather_full();
    } else {
      finish_reduction();
      free_all();
      for (auto& p : params) p.set_grad(Tensor());
      opt->step();
    }
    note_peak(memory());
  }

  // ---- memory

  int64_t shard_bytes() const {
    int64_t b = 0;
    for (const auto& s : shards) b += bytes_of(s);
    return b;
  }
  int64_t param_bytes() const {
    int64_t b = 0;
    if (stage < 3) {
      for (const auto& f : full) b += bytes_of(f);
    } else {
      b = shard_bytes();
      for (const auto& f : full) b += storage_bytes(f);
    }
    return b;
  }
  // Gradients held besides the parameters' .grad: the shards', the buckets', those in flight.
  int64_t reduction_grad_bytes() const {
    int64_t b = 0;
    for (const auto& s : shards) b += bytes_of(s.grad());
    for (const auto& k : buckets) b += bytes_of(k.flat);
    for (const auto& f : in_flight) b += bytes_of(f->flat) + (f->out.is_same(f->flat) ? 0 : bytes_of(f->out));
    return b;
  }

  ShardMemory memory() const {
    ShardMemory m;
    m.params = param_bytes();
    for (const auto& p : params) m.grads += bytes_of(p.grad());
    m.grads += reduction_grad_bytes();
    for (const auto& [impl, st] : opt->state()) {
      if (!st) continue;
      nn::StateDict d;
      st->write(d, "");
      for (const auto& [k, t] : d) m.optimizer_state += bytes_of(t);
    }
    return m;
  }

  void note_peak_params() { peak.params = std::max(peak.params, param_bytes()); }
  void note_peak_grads(int64_t extra) { peak.grads = std::max(peak.grads, reduction_grad_bytes() + extra); }
  void note_peak(const ShardMemory& m) {
    peak.params = std::max(peak.params, m.params);
    peak.grads = std::max(peak.grads, m.grads);
    peak.optimizer_state = std::max(peak.optimizer_state, m.optimizer_state);
  }

  // ---- sharded state dict

  struct Entry {
    ShardedTensor t;
    int g = -1;   // flat buffer (sharded entries)
    int k = -1;   // member of the buffer
  };

  // Inner optimizer parameter index -> flat buffer.
  int group_of_opt_index(size_t idx) const {
    auto ps = opt->parameters();
    if (idx >= ps.size()) return -1;
    for (size_t g = 0; g < shards.size(); ++g)
      if (ps[idx].is_same(shards[g])) return static_cast<int>(g);
    return -1;
  }

  std::vector<Entry> entries() const {
    NoGradGuard no_grad;
    std::vector<Entry> out;
    const int rank = group->rank();
    // Parameter i's piece of a flat shard-sized tensor of its buffer.
    auto add_piece = [&](const std::string& prefix, const std::string& suffix, size_t i, const Tensor& flat_shard) {
      const size_t g = group_of[i], k = slot_of[i];
      const FlatShardInfo& G = groups[g];
      auto [off, len] = piece_of(G, numel_of(i), k, rank);
      Entry e;
      e.t.name = prefix + names[i] + suffix;
      e.t.full_shape = shapes[i];
      e.t.offset = off;
      e.t.length = len;
      const int64_t at = len > 0 ? G.offsets[k] + off - G.shard_offset : 0;
      e.t.shard = flat_shard.narrow(0, at, len).clone();
      e.g = static_cast<int>(g);
      e.k = static_cast<int>(k);
      out.push_back(std::move(e));
    };
    auto add_pieces = [&](const std::string& prefix, const std::string& suffix, size_t g, const Tensor& flat_shard) {
      for (size_t i : groups[g].params) add_piece(prefix, suffix, i, flat_shard);
    };
    for (size_t i = 0; i < params.size(); ++i) add_piece("model.", "", i, shards[group_of[i]].detach());
    const nn::StateDict sd = opt->state_dict();
    for (const auto& [key, t] : sd) {
      // "state.<idx>.<name>": sharded when it is a 1-d tensor of the shard's size.
      if (key.rfind("state.", 0) == 0) {
        const size_t dot = key.find('.', 6);
        if (dot != std::string::npos) {
          const int g = group_of_opt_index(static_cast<size_t>(std::stoll(key.substr(6, dot - 6))));
          if (g >= 0 && t.dim() == 1 && t.numel() == groups[static_cast<size_t>(g)].shard_numel) {
            add_pieces("optim.", "." + key.substr(dot + 1), static_cast<size_t>(g), t);
            continue;
          }
        }
      }
      Entry e;
      e.t.name = "optim." + key;
      e.t.shard = t.contiguous();
      e.t.full_shape = to_shape(t.sizes());
      e.t.offset = 0;
      e.t.length = t.numel();
      e.t.replicated = true;
      out.push_back(std::move(e));
    }
    return out;
  }

  void save(const std::string& dir) const {
    namespace fs = std::filesystem;
    const std::string fn = "[save_sharded]";
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) throw std::runtime_error(fn + " cannot create the directory " + dir + ": " + ec.message());
    const auto es = entries();
    const int rank = group->rank(), size = group->size();
    nn::StateDict mine;
    for (const auto& e : es) {
      mine.insert(e.t.name, e.t.shard);
      std::vector<int64_t> meta{e.t.offset, e.t.length, e.t.replicated ? 1 : 0,
                                static_cast<int64_t>(e.t.full_shape.size())};
      meta.insert(meta.end(), e.t.full_shape.begin(), e.t.full_shape.end());
      mine.insert(kMeta + e.t.name, tensor(meta));
    }
    nn::save(mine, (fs::path(dir) / ("rank" + std::to_string(rank) + ".troupe")).string());
    if (rank == 0) {
      nn::StateDict index;
      index.insert(kWorldSize, tensor(std::vector<int64_t>{size}));
      for (const auto& e : es) {
        std::vector<int64_t> v{e.t.replicated ? 1 : 0, static_cast<int64_t>(e.t.full_shape.size())};
        v.insert(v.end(), e.t.full_shape.begin(), e.t.full_shape.end());
        v.push_back(size);
        for (int r = 0; r < size; ++r) {
          if (e.t.replicated) {
            v.push_back(0);
            v.push_back(e.t.length);
          } else {
            const FlatShardInfo& G = groups[static_cast<size_t>(e.g)];
            auto [off, len] = piece_of(G, numel_of(G.params[static_cast<size_t>(e.k)]), static_cast<size_t>(e.k), r);
            v.push_back(off);
            v.push_back(len);
          }
        }
        index.insert(e.t.name, tensor(v));
      }
      nn::save(index, (fs::path(dir) / "index.troupe").string());
    }
    if (size > 1) group->barrier();
  }

  struct IndexEntry {
    bool replicated = false;
    std::vector<int64_t> shape;
    std::vector<std::pair<int64_t, int64_t>> ranges;  // per old rank
  };

  void load(const std::string& dir) {
    namespace fs = std::filesystem;
    const std::string fn = "[load_sharded]";
    const std::string index_path = (fs::path(dir) / "index.troupe").string();
    if (!fs::exists(index_path))
      throw std::runtime_error(fn + " no index file " + index_path +
                               ": not a sharded checkpoint directory (save_sharded writes index.troupe and "
                               "rank<r>.troupe there)");
    const nn::StateDict index = nn::load_state_dict_file(index_path);
    const Tensor* ws = index.find(kWorldSize);
    if (!ws) throw std::runtime_error(fn + " " + index_path + " has no " + kWorldSize + " entry");
    const int old_size = static_cast<int>(ws->to_vector<int64_t>().at(0));
    std::map<std::string, IndexEntry> idx;
    for (const auto& [name, t] : index) {
      if (name == kWorldSize) continue;
      const auto v = t.to_vector<int64_t>();
      IndexEntry e;
      size_t p = 0;
      auto next = [&]() {
        if (p >= v.size()) throw std::runtime_error(fn + " " + index_path + ": entry " + name + " is truncated");
        return v[p++];
      };
      e.replicated = next() != 0;
      const int64_t nd = next();
      for (int64_t d = 0; d < nd; ++d) e.shape.push_back(next());
      const int64_t n = next();
      if (n != old_size)
        throw std::runtime_error(fn + " " + index_path + ": entry " + name + " lists " + std::to_string(n) +
                                 " ranks, the checkpoint has " + std::to_string(old_size));
      for (int64_t r = 0; r < n; ++r) {
        const int64_t o = next(), l = next();
        e.ranges.push_back({o, l});
      }
      idx[name] = std::move(e);
    }

    std::map<int, nn::StateDict> files;
    auto file = [&](int r) -> const nn::StateDict& {
      auto it = files.find(r);
      if (it != files.end()) return it->second;
      const std::string path = (fs::path(dir) / ("rank" + std::to_string(r) + ".troupe")).string();
      if (!fs::exists(path))
        throw std::runtime_error(fn + " missing shard file " + path + " (the index says " +
                                 std::to_string(old_size) + " ranks saved this checkpoint)");
      return files.emplace(r, nn::load_state_dict_file(path)).first->second;
    };
    auto entry_of = [&](const std::string& name, const std::vector<int64_t>& shape) -> const IndexEntry& {
      auto it = idx.find(name);
      if (it == idx.end()) throw std::runtime_error(fn + " the checkpoint in " + dir + " has no entry " + name);
      if (!it->second.replicated && it->second.shape != shape)
        throw std::runtime_error(fn + " " + name + ": the checkpoint has shape " + shape_str(it->second.shape) +
                                 ", this model has " + shape_str(shape));
      return it->second;
    };
    // Elements [lo, lo + len) of entry `name`'s flattened tensor, from the old files, into dest (1-d).
    auto read_range = [&](const std::string& name, const IndexEntry& e, int64_t lo, int64_t len, Tensor dest) {
      int64_t covered = 0;
      for (int r = 0; r < old_size && len > 0; ++r) {
        const auto [o, l] = e.ranges[static_cast<size_t>(r)];
        const int64_t a = std::max(o, lo), b = std::min(o + l, lo + len);
        if (b <= a) continue;
        const nn::StateDict& f = file(r);
        const Tensor* t = f.find(name);
        if (!t || t->numel() != l)
          throw std::runtime_error(fn + " shard file rank" + std::to_string(r) + ".troupe in " + dir + ": entry " +
                                   name + (t ? " has " + std::to_string(t->numel()) + " elements, the index says " +
                                                   std::to_string(l)
                                             : std::string(" is missing")));
        dest.narrow(0, a - lo, b - a).copy_(t->reshape({l}).narrow(0, a - o, b - a));
        covered += b - a;
      }
      if (covered != len)
        throw std::runtime_error(fn + " " + name + ": the old shards cover " + std::to_string(covered) + " of the " +
                                 std::to_string(len) + " elements this rank needs");
    };

    NoGradGuard no_grad;
    drop_reduction();
    // Every model entry must exist, with this model's shapes; no extra ones.
    for (size_t i = 0; i < params.size(); ++i) entry_of("model." + names[i], shapes[i]);
    for (const auto& [name, e] : idx) {
      if (name.rfind("model.", 0) != 0) continue;
      const std::string p = name.substr(6);
      if (std::find(names.begin(), names.end(), p) == names.end())
        throw std::runtime_error(fn + " the checkpoint has " + name + ", which this model does not have");
    }
    const int rank = group->rank();
    std::vector<Tensor> new_shards;
    for (size_t g = 0; g < groups.size(); ++g) new_shards.push_back(load_flat(g, rank, "model.", "", idx, read_range));

    // The optimizer: replicated entries from rank 0's file; the "params" lists from this optimizer, and
    // the per-buffer scalars ("state.<g>.<key>") by index when the saved run had as many buffers, else
    // from the first saved buffer that has them (the buffers step together).
    nn::StateDict osd;
    const nn::StateDict current = opt->state_dict();
    for (const auto& [key, t] : current)
      if (key.rfind("param_groups.", 0) == 0 && key.size() > 7 && key.compare(key.size() - 7, 7, ".params") == 0)
        osd.insert(key, t);
    std::map<std::string, std::map<int64_t, Tensor>> scalars;  // key -> saved buffer index -> value
    int64_t saved_buffers = 0;
    for (const auto& [name, e] : idx) {
      if (name.rfind("optim.", 0) != 0 || !e.replicated) continue;
      const Tensor* t = file(0).find(name);
      if (!t) throw std::runtime_error(fn + " shard file rank0.troupe in " + dir + " has no entry " + name);
      const std::string key = name.substr(6);
      if (key.rfind("param_groups.", 0) == 0) {
        if (key.size() > 7 && key.compare(key.size() - 7, 7, ".params") == 0)
          saved_buffers += t->numel();
        else
          osd.insert(key, *t);
      } else if (key.rfind("state.", 0) == 0 && key.find('.', 6) != std::string::npos) {
        const size_t dot = key.find('.', 6);
        scalars[key.substr(dot + 1)][std::stoll(key.substr(6, dot - 6))] = *t;
      } else {
        osd.insert(key, *t);  // the inner optimizer's own check names it
      }
    }
    const auto ps = opt->parameters();
    for (size_t oi = 0; oi < ps.size(); ++oi) {
      const int g = group_of_opt_index(oi);
      if (g < 0) continue;
      const FlatShardInfo& G = groups[static_cast<size_t>(g)];
      std::vector<std::string> keys;
      for (const auto& [name, e] : idx) {
        if (name.rfind("optim.", 0) != 0 || e.replicated) continue;
        for (size_t i : G.params) {
          const std::string pre = "optim." + names[i] + ".";
          if (name.rfind(pre, 0) == 0) {
            const std::string key = name.substr(pre.size());
            if (std::find(keys.begin(), keys.end(), key) == keys.end()) keys.push_back(key);
          }
        }
      }
      for (const auto& key : keys)
        osd.insert("state." + std::to_string(oi) + "." + key,
                   load_flat(static_cast<size_t>(g), rank, "optim.", "." + key, idx, read_range));
      for (const auto& [key, by_index] : scalars) {
        auto it = saved_buffers == static_cast<int64_t>(ps.size()) ? by_index.find(static_cast<int64_t>(oi))
                                                                  : by_index.end();
        osd.insert("state." + std::to_string(oi) + "." + key,
                   it != by_index.end() ? it->second : by_index.begin()->second);
      }
    }
    opt->load_state_dict(osd);

    for (size_t g = 0; g < groups.size(); ++g) shards[g].detach().copy_(new_shards[g]);
    if (stage < 3) {
      all_gather_full();
    } else {
      free_all();
    }
  }

  template <class ReadRange>
  Tensor load_flat(size_t g, int rank, const std::string& prefix, const std::string& suffix,
                   const std::map<std::string, IndexEntry>& idx, ReadRange& read_range) {
    const FlatShardInfo& G = groups[g];
    Tensor out = zeros({G.shard_numel}, TensorOptions(G.dtype));
    for (size_t k = 0; k < G.params.size(); ++k) {
      const size_t i = G.params[k];
      auto [off, len] = piece_of(G, numel_of(i), k, rank);
      if (len == 0) continue;
      const std::string name = prefix + names[i] + suffix;
      auto it = idx.find(name);
      if (it == idx.end()) {
        if (prefix == "optim.") continue;  // state this parameter did not have (zeros)
        throw std::runtime_error("[load_sharded] the checkpoint has no entry " + name);
      }
      if (it->second.shape != shapes[i])
        throw std::runtime_error("[load_sharded] " + name + ": the checkpoint has shape " +
                                 shape_str(it->second.shape) + ", this model has " + shape_str(shapes[i]));
      read_range(name, it->second, off, len, out.narrow(0, G.offsets[k] + off - G.shard_offset, len));
    }
    return out;
  }
};

}  // namespace detail

// ------------------------------------------------------------------------------------------- ZeroOptimizer

ZeroOptimizer::ZeroOptimizer(nn::ModulePtr module, OptimizerFactory factory, int stage, ProcessGroupPtr group,
                             ZeroOptions options)
    : options_(std::move(options)), core_(std::make_shared<detail::ShardCore>()) {
  if (stage != 1 && stage != 2)
    throw std::invalid_argument("[ZeroOptimizer] stage must be 1 or 2, got " + std::to_string(stage) +
                                " (stage 3 is FullyShardedDataParallel)");
  core_->who = "[ZeroOptimizer]";
  core_->stage = stage;
  core_->group = std::move(group);
  core_->first_bucket_mb = options_.first_bucket_mb();
  core_->bucket_cap_mb = options_.bucket_cap_mb();
  core_->overlap = options_.overlap_comm();
  core_->build(module, factory);
}

ZeroOptimizer::~ZeroOptimizer() = default;

void ZeroOptimizer::zero_grad() { core_->zero_grad(); }
void ZeroOptimizer::step() { core_->step(); }
int ZeroOptimizer::stage() const { return core_->stage; }
const ProcessGroupPtr& ZeroOptimizer::process_group() const { return core_->group; }
const ZeroOptions& ZeroOptimizer::options() const { return options_; }
optim::Optimizer& ZeroOptimizer::inner() { return *core_->opt; }
std::vector<Tensor> ZeroOptimizer::shard_parameters() const { return core_->shards; }
const std::vector<FlatShardInfo>& ZeroOptimizer::flat_shards() const { return core_->groups; }
ShardMemory ZeroOptimizer::memory_per_rank() const { return core_->memory(); }
ShardMemory ZeroOptimizer::max_memory_per_rank() const { return core_->peak; }
void ZeroOptimizer::reset_peak_memory_stats() { core_->peak = core_->memory(); }

std::vector<ShardedTensor> ZeroOptimizer::sharded_state_dict() const {
  std::vector<ShardedTensor> out;
  for (auto& e : core_->entries()) out.push_back(std::move(e.t));
  return out;
}
void ZeroOptimizer::save_sharded(const std::string& dir) const { core_->save(dir); }
void ZeroOptimizer::load_sharded(const std::string& dir) { core_->load(dir); }

// ------------------------------------------------------------------------------ FullyShardedDataParallel

FullyShardedDataParallel::FullyShardedDataParallel(nn::ModulePtr module, OptimizerFactory factory,
                                                   ProcessGroupPtr group, FSDPOptions options)
    : module_(std::move(module)), options_(std::move(options)), core_(std::make_shared<detail::ShardCore>()) {
  core_->who = "[FullyShardedDataParallel]";
  core_->stage = 3;
  core_->group = std::move(group);
  core_->first_bucket_mb = options_.first_bucket_mb();
  core_->bucket_cap_mb = options_.bucket_cap_mb();
  core_->overlap = options_.overlap_comm();
  core_->reshard_after_forward = options_.reshard_after_forward();
  core_->prefetch = options_.backward_prefetch();
  core_->policy = options_.auto_wrap_policy();
  core_->build(module_, factory);
  register_module("module", module_);
}

FullyShardedDataParallel::~FullyShardedDataParallel() = default;

Tensor FullyShardedDataParallel::forward(const Tensor& input) {
  return forward_args({nn::Value(input)}, {}).tensor();
}

nn::Value FullyShardedDataParallel::forward_args(const nn::Args& args, const nn::Kwargs& kwargs) {
  core_->root_pre_forward();
  nn::Value out = module_->call(args, kwargs);
  core_->root_post_forward(out);
  return out;
}

void FullyShardedDataParallel::zero_grad() { core_->zero_grad(); }
void FullyShardedDataParallel::step() { core_->step(); }
void FullyShardedDataParallel::gather_parameters() { core_->gather_all(); }
void FullyShardedDataParallel::free_parameters() { core_->free_all(); }
bool FullyShardedDataParallel::parameters_gathered() const { return core_->all_gathered(); }
bool FullyShardedDataParallel::unit_gathered(size_t unit) const {
  if (unit >= core_->units.size())
    throw std::out_of_range("[FullyShardedDataParallel] unit_gathered(" + std::to_string(unit) + "): there are " +
                            std::to_string(core_->units.size()) + " units");
  return core_->ustate[unit].gathered;
}
const ProcessGroupPtr& FullyShardedDataParallel::process_group() const { return core_->group; }
const std::vector<ShardUnit>& FullyShardedDataParallel::units() const { return core_->units; }
optim::Optimizer& FullyShardedDataParallel::inner() { return *core_->opt; }
std::vector<Tensor> FullyShardedDataParallel::shard_parameters() const { return core_->shards; }
const std::vector<FlatShardInfo>& FullyShardedDataParallel::flat_shards() const { return core_->groups; }
ShardMemory FullyShardedDataParallel::memory_per_rank() const { return core_->memory(); }
ShardMemory FullyShardedDataParallel::max_memory_per_rank() const { return core_->peak; }
void FullyShardedDataParallel::reset_peak_memory_stats() { core_->peak = core_->memory(); }

std::vector<ShardedTensor> FullyShardedDataParallel::sharded_state_dict() const {
  std::vector<ShardedTensor> out;
  for (auto& e : core_->entries()) out.push_back(std::move(e.t));
  return out;
}
void FullyShardedDataParallel::save_sharded(const std::string& dir) const { core_->save(dir); }
void FullyShardedDataParallel::load_sharded(const std::string& dir) { core_->load(dir); }

}  // namespace troupe::parallel
