// FSDP units (stage 3): which parameters each unit holds, gathering a unit's flat buffers before its
// forward and freeing them after, gathering again when backward reaches it (with prefetch of the next).
#include <troupe/parallel/shard_core.h>

#include <algorithm>
#include <limits>
#include <unordered_map>
#include <unordered_set>

#include <troupe/tensor/autograd.h>
#include <troupe/tensor/storage.h>
#include <troupe/tensor/tensor_impl.h>

namespace troupe::parallel::detail {

namespace {

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

}  // namespace

int64_t storage_bytes(const Tensor& t) {
  return t.defined() ? static_cast<int64_t>(t.impl()->storage->nbytes) : 0;
}

// Units: [0] the root, then the submodules the policy picks (pre-order) that end up with parameters.
// A parameter goes to the innermost unit whose subtree holds every module that holds it.
void ShardCore::make_units(const nn::ModulePtr& module) {
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

// Stage 3: forward pre- and post-hooks on the modules of the units other than the root (the root's run
// in FullyShardedDataParallel::forward_args).
void ShardCore::install_unit_hooks() {
  if (stage < 3) return;
  std::weak_ptr<ShardCore> weak = weak_from_this();
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

// Starts the all_gather of unit u's buffers into their storage (given back in place).
void ShardCore::start_gather(size_t u) {
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
void ShardCore::gather_unit(size_t u) {
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
void ShardCore::free_unit(size_t u) {
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

void ShardCore::gather_all() {
  for (size_t u = 0; u < units.size(); ++u) start_gather(u);
  for (size_t u = 0; u < units.size(); ++u) gather_unit(u);
}

void ShardCore::free_all() {
  for (size_t u = 0; u < units.size(); ++u) free_unit(u);
}

bool ShardCore::all_gathered() const {
  for (size_t u = 0; u < units.size(); ++u)
    if (!units[u].flat_shards.empty() && !ustate[u].gathered) return false;
  return true;
}

void ShardCore::root_pre_forward() {
  forward_order.clear();
  gather_unit(0);
}

void ShardCore::root_post_forward(const nn::Value& out) {
  if (autograd::GradMode::is_enabled()) hook_outputs(0, out);
}

void ShardCore::pre_forward(size_t u) {
  if (std::find(forward_order.begin(), forward_order.end(), u) == forward_order.end()) forward_order.push_back(u);
  gather_unit(u);
}

void ShardCore::post_forward(size_t u, const nn::Value& out) {
  if (autograd::GradMode::is_enabled()) hook_outputs(u, out);
  if (reshard_after_forward) free_unit(u);
}

// FSDP's pre-backward hook: a hook on the gradient of each output of unit u's forward.
void ShardCore::hook_outputs(size_t u, const nn::Value& out) {
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
void ShardCore::pre_backward(size_t u) {
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

}  // namespace troupe::parallel::detail
