// The function registry: one name -> function table per kind, guarded by a mutex.
#include <troupe/nn/registry.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <stdexcept>

namespace troupe::nn {

namespace {

template <class F>
struct Table {
  const char* kind;
  std::map<std::string, F> fns;
};

std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}

template <class F>
Table<F>& table(const char* kind) {
  static Table<F> t{kind, {}};
  return t;
}

Table<ApplyFn>& apply_table() { return table<ApplyFn>("apply"); }
Table<ForwardPreHook>& fpre_table() { return table<ForwardPreHook>("forward_pre_hook"); }
Table<ForwardHook>& fwd_table() { return table<ForwardHook>("forward_hook"); }
Table<BackwardPreHook>& bpre_table() { return table<BackwardPreHook>("backward_pre_hook"); }
Table<BackwardHook>& bwd_table() { return table<BackwardHook>("backward_hook"); }
Table<StateDictPreHook>& sdpre_table() { return table<StateDictPreHook>("state_dict_pre_hook"); }
Table<LoadStateDictPostHook>& ldpost_table() { return table<LoadStateDictPostHook>("load_state_dict_post_hook"); }

template <class F>
void add(Table<F>& t, const std::string& name, F fn) {
  if (name.empty()) throw std::invalid_argument(std::string("[registry] a ") + t.kind + " needs a non-empty name");
  if (!fn) throw std::invalid_argument(std::string("[registry] ") + t.kind + " '" + name + "' is empty");
  std::lock_guard<std::mutex> lock(registry_mutex());
  if (!t.fns.emplace(name, std::move(fn)).second)
    throw std::invalid_argument(std::string("[registry] a ") + t.kind + " named '" + name + "' is already registered");
}

template <class F>
const F& get(Table<F>& t, const std::string& name) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  auto it = t.fns.find(name);
  if (it == t.fns.end()) {
    std::string known;
    for (const auto& [k, v] : t.fns) known += (known.empty() ? "" : ", ") + k;
    throw std::invalid_argument(std::string("[registry] no ") + t.kind + " is registered as '" + name +
                                "' (registered: " + (known.empty() ? "none" : known) + ")");
  }
  return it->second;  // std::map nodes are stable; entries are only removed by tests
}

template <class Fn>
auto with_table(const std::string& kind, Fn&& fn) {
  if (kind == "apply") return fn(apply_table());
  if (kind == "forward_pre_hook") return fn(fpre_table());
  if (kind == "forward_hook") return fn(fwd_table());
  if (kind == "backward_pre_hook") return fn(bpre_table());
  if (kind == "backward_hook") return fn(bwd_table());
  if (kind == "state_dict_pre_hook") return fn(sdpre_table());
  if (kind == "load_state_dict_post_hook") return fn(ldpost_table());
  throw std::invalid_argument("[registry] unknown kind '" + kind +
                              "' (apply, forward_pre_hook, forward_hook, backward_pre_hook, backward_hook, "
                              "state_dict_pre_hook, load_state_dict_post_hook)");
}

}  // namespace

namespace registry {
void add_apply_fn(const std::string& name, ApplyFn fn) { add(apply_table(), name, std::move(fn)); }
void add_forward_pre_hook(const std::string& name, ForwardPreHook fn) { add(fpre_table(), name, std::move(fn)); }
void add_forward_hook(const std::string& name, ForwardHook fn) { add(fwd_table(), name, std::move(fn)); }
void add_backward_pre_hook(const std::string& name, BackwardPreHook fn) { add(bpre_table(), name, std::move(fn)); }
void add_backward_hook(const std::string& name, BackwardHook fn) { add(bwd_table(), name, std::move(fn)); }
void add_state_dict_pre_hook(const std::string& name, StateDictPreHook fn) { add(sdpre_table(), name, std::move(fn)); }
void add_load_state_dict_post_hook(const std::string& name, LoadStateDictPostHook fn) {
  add(ldpost_table(), name, std::move(fn));
}

bool contains(const std::string& kind, const std::string& name) {
  return with_table(kind, [&](auto& t) {
    std::lock_guard<std::mutex> lock(registry_mutex());
    return t.fns.count(name) != 0;
  });
}
std::vector<std::string> names(const std::string& kind) {
  return with_table(kind, [&](auto& t) {
    std::lock_guard<std::mutex> lock(registry_mutex());
    std::vector<std::string> out;
    for (const auto& kv : t.fns) out.push_back(kv.first);
    return out;
  });
}
bool remove(const std::string& kind, const std::string& name) {
  return with_table(kind, [&](auto& t) {
    std::lock_guard<std::mutex> lock(registry_mutex());
    return t.fns.erase(name) != 0;
  });
}
}  // namespace registry

namespace registry_detail {
const ApplyFn& apply_fn(const std::string& name) { return get(apply_table(), name); }
const ForwardPreHook& forward_pre_hook(const std::string& name) { return get(fpre_table(), name); }
const ForwardHook& forward_hook(const std::string& name) { return get(fwd_table(), name); }
const BackwardPreHook& backward_pre_hook(const std::string& name) { return get(bpre_table(), name); }
const BackwardHook& backward_hook(const std::string& name) { return get(bwd_table(), name); }
const StateDictPreHook& state_dict_pre_hook(const std::string& name) { return get(sdpre_table(), name); }
const LoadStateDictPostHook& load_state_dict_post_hook(const std::string& name) { return get(ldpost_table(), name); }
}  // namespace registry_detail

}  // namespace troupe::nn
