// Module hooks: the global hook tables, the forward call with its hooks (Module::call, cut into its steps),
// the full backward hooks' plumbing (identity nodes around the module, as torch's BackwardHook), the legacy
// backward hooks, and hook registration.
#include <troupe/nn/module.h>
#include <troupe/tensor/tracing.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <set>
#include <stdexcept>

#include <troupe/nn/registry.h>
#include <troupe/tensor/autograd.h>

namespace troupe::nn {

namespace {
std::atomic<int64_t> g_next_hook_id{1};
int64_t next_hook_id() { return g_next_hook_id.fetch_add(1, std::memory_order_relaxed); }
}  // namespace

// -------------------------------------------------------------------------------------------------
// Global hooks

namespace {
struct GlobalHooks {
  std::mutex mu;
  std::vector<std::pair<int64_t, ForwardPreHook>> forward_pre;
  std::vector<std::tuple<int64_t, ForwardHook, bool>> forward;  // (id, hook, always_call)
  std::vector<std::pair<int64_t, BackwardPreHook>> backward_pre;
  std::vector<std::pair<int64_t, BackwardHook>> backward;
  std::atomic<int> count{0};  // fast path: no global hook at all
};
GlobalHooks& globals() {
  static GlobalHooks* g = new GlobalHooks();  // leaked: hooks may run during static destruction
  return *g;
}

template <class Vec>
RemovableHandle global_handle(Vec GlobalHooks::*member, int64_t id) {
  return RemovableHandle([member, id] {
    auto& g = globals();
    std::lock_guard<std::mutex> lock(g.mu);
    auto& v = g.*member;
    auto it = std::find_if(v.begin(), v.end(), [id](const auto& e) { return std::get<0>(e) == id; });
    if (it != v.end()) {
      v.erase(it);
      g.count.fetch_sub(1);
    }
  });
}
}  // namespace

namespace {
// Appends an entry (id first) to one of the global tables and returns its handle.
template <class Vec, class... Rest>
RemovableHandle add_global(Vec GlobalHooks::*member, Rest&&... rest) {
  auto& g = globals();
  int64_t id = next_hook_id();
  {
    std::lock_guard<std::mutex> lock(g.mu);
    (g.*member).emplace_back(id, std::forward<Rest>(rest)...);
    g.count.fetch_add(1);
  }
  return global_handle(member, id);
}
}  // namespace

RemovableHandle register_module_forward_pre_hook(ForwardPreHook hook) {
  return add_global(&GlobalHooks::forward_pre, std::move(hook));
}
RemovableHandle register_module_forward_hook(ForwardHook hook, bool always_call) {
  return add_global(&GlobalHooks::forward, std::move(hook), always_call);
}
RemovableHandle register_module_full_backward_pre_hook(BackwardPreHook hook) {
  return add_global(&GlobalHooks::backward_pre, std::move(hook));
}
RemovableHandle register_module_full_backward_hook(BackwardHook hook) {
  return add_global(&GlobalHooks::backward, std::move(hook));
}

// -------------------------------------------------------------------------------------------------
// The forward call: call() runs its steps in PyTorch's order (Module._call_impl)

namespace {
thread_local bool t_placed_bypass = false;
}
PlacedBypass::PlacedBypass() : prev_(t_placed_bypass) { t_placed_bypass = true; }
PlacedBypass::~PlacedBypass() { t_placed_bypass = prev_; }
bool PlacedBypass::active() { return t_placed_bypass; }

Tensor Module::operator()(const Tensor& input) {
  if ((!placed_ || t_placed_bypass) && forward_pre_hooks_.empty() && forward_hooks_.empty() && backward_hooks_.empty() &&
      backward_pre_hooks_.empty() && legacy_backward_hooks_.empty() &&
      globals().count.load(std::memory_order_relaxed) == 0 && !is_remote() && tracing::state() == nullptr)
    return forward(input);
  Value out = call(Args{Value(input)});
  if (!out.is_tensor())
    throw std::runtime_error("[" + name() + "] forward returned " + out.kind() + ", not a Tensor");
  return out.tensor();
}

Value Module::operator()(Args args, Kwargs kwargs) { return call(std::move(args), std::move(kwargs)); }

namespace detail {

// The global hooks as they were when a call began (a hook may remove itself while it runs).
struct GlobalHookSnapshot {
  std::vector<std::pair<int64_t, ForwardPreHook>> forward_pre;
  std::vector<std::tuple<int64_t, ForwardHook, bool>> forward;  // (id, hook, always_call)
  std::vector<BackwardPreHook> backward_pre;
  std::vector<BackwardHook> backward;
};

// Shared state of one forward call's backward hooks (torch.utils.hooks.BackwardHook).
struct BackwardHookState {
  Module* module = nullptr;
  std::weak_ptr<int> alive;
  std::vector<BackwardHook> user_hooks;
  std::vector<BackwardPreHook> user_pre_hooks;
  size_t n_inputs = 0, n_outputs = 0;
  std::optional<std::vector<size_t>> input_index;  // positions of the hooked input tensors
  std::vector<size_t> output_index;
  std::optional<std::vector<Tensor>> grad_outputs;  // packed with None (undefined), n_outputs long
  std::mutex mu;
};

}  // namespace detail

namespace {

detail::GlobalHookSnapshot snapshot_global_hooks() {
  detail::GlobalHookSnapshot s;
  auto& g = globals();
  if (g.count.load(std::memory_order_relaxed) == 0) return s;
  std::lock_guard<std::mutex> lock(g.mu);
  s.forward_pre = g.forward_pre;
  s.forward = g.forward;
  for (auto& h : g.backward_pre) s.backward_pre.push_back(h.second);
  for (auto& h : g.backward) s.backward.push_back(h.second);
  return s;
}

std::vector<Tensor> pack_with_none(const std::vector<size_t>& idx, const std::vector<Tensor>& vals, size_t n) {
  std::vector<Tensor> out(n);
  for (size_t i = 0; i < idx.size() && i < vals.size(); ++i) out[idx[i]] = vals[i];
  return out;
}

// Routes the tensors at `idx` through one identity node; returns the new tensors and the node.
std::shared_ptr<autograd::Node> identity_node(std::vector<Tensor>& tensors) {
  std::vector<Tensor> outs;
  outs.reserve(tensors.size());
  for (const auto& t : tensors) outs.push_back(t.detach());
  auto node = autograd::record(
      "BackwardHookFunctionBackward", tensors, outs,
      [](const autograd::variable_list& grads) { return grads; }, /*saves=*/false);
  if (!node) return nullptr;
  tensors = std::move(outs);
  return node;
}

// The positions and tensors of the defined, grad-requiring tensors among `values`.
void grad_requiring(const std::vector<Tensor>& values, std::vector<size_t>& idx, std::vector<Tensor>& ts) {
  for (size_t i = 0; i < values.size(); ++i)
    if (values[i].defined() && values[i].requires_grad()) {
      idx.push_back(i);
      ts.push_back(values[i]);
    }
}

// Post-hook of the inputs' identity node: the full backward hooks see (grad_input, grad_output) and may
// replace grad_input.
autograd::variable_list run_backward_hooks(detail::BackwardHookState& st, const autograd::variable_list& grad_input) {
  std::lock_guard<std::mutex> lock(st.mu);
  if (!st.grad_outputs) return {};  // backward did not come through the outputs
  auto res = pack_with_none(*st.input_index, grad_input, st.n_inputs);
  if (st.alive.expired()) return {};
  for (auto& hook : st.user_hooks) {
    auto out = hook(*st.module, res, *st.grad_outputs);
    if (!out) continue;
    if (out->size() != res.size())
      throw std::runtime_error("Backward hook returned an invalid number of grad_input, got " +
                               std::to_string(out->size()) + ", but expected " + std::to_string(res.size()));
    res = std::move(*out);
  }
  st.grad_outputs.reset();
  autograd::variable_list ret;
  for (size_t i : *st.input_index) ret.push_back(res[i]);
  return ret;
}

// Pre-hook of the outputs' identity node: records grad_output, runs the backward pre-hooks (which may
// replace it) and, when no input requires grad, the backward hooks with None grad_inputs.
autograd::variable_list run_backward_pre_hooks(detail::BackwardHookState& st, const autograd::variable_list& grads) {
  std::lock_guard<std::mutex> lock(st.mu);
  st.grad_outputs = pack_with_none(st.output_index, grads, st.n_outputs);
  bool changed = false;
  if (!st.alive.expired()) {
    for (auto& hook : st.user_pre_hooks) {
      auto r = hook(*st.module, *st.grad_outputs);
      if (!r) continue;
      if (r->size() != st.grad_outputs->size())
        throw std::runtime_error("Backward pre hook returned an invalid number of grad_output, got " +
                                 std::to_string(r->size()) + ", but expected " +
                                 std::to_string(st.grad_outputs->size()));
      st.grad_outputs = std::move(*r);
      changed = true;
    }
    if (!st.input_index) {  // no input requires grad: call the hooks here, with None inputs
      std::vector<Tensor> grad_inputs(st.n_inputs);
      for (auto& hook : st.user_hooks) {
        auto r = hook(*st.module, grad_inputs, *st.grad_outputs);
        if (r && std::any_of(r->begin(), r->end(), [](const Tensor& t) { return t.defined(); }))
          throw std::runtime_error(
              "Backward hook for Modules where no input requires gradient should always return None or "
              "None for all gradients.");
      }
    }
  }
  autograd::variable_list ret;
  if (changed) {
    for (size_t i : st.output_index) ret.push_back((*st.grad_outputs)[i]);
  }
  if (!st.input_index) st.grad_outputs.reset();
  return ret;
}

}  // namespace

Value Module::call(Args args, Kwargs kwargs) {
  if (placed_ && !t_placed_bypass) return placed_->call(std::move(args), std::move(kwargs));
  const detail::GlobalHookSnapshot global = snapshot_global_hooks();
  run_forward_pre_hooks(global, args, kwargs);
  std::shared_ptr<detail::BackwardHookState> bw = route_inputs_to_backward_hooks(global, args);
  Value result = run_forward_with_hooks(global, args, kwargs);
  if (bw) route_outputs_to_backward_hooks(bw, result);
  attach_legacy_backward_hooks(result);
  return result;
}

// 1. forward pre-hooks: global first, then this module's (snapshot: a hook may remove itself)
void Module::run_forward_pre_hooks(const detail::GlobalHookSnapshot& global, Args& args, Kwargs& kwargs) {
  for (auto& [id, hook] : global.forward_pre) {
    auto r = hook(*this, args);
    if (r) args = std::move(*r);
  }
  if (forward_pre_hooks_.empty()) return;
  auto hooks = forward_pre_hooks_;
  for (auto& h : hooks) {
    auto r = h.fn(*this, args, kwargs);
    if (r) {
      args = std::move(r->first);
      if (h.with_kwargs) kwargs = std::move(r->second);
    }
  }
}

// 2. full backward hooks: route the positional tensor inputs through an identity node whose post-hook
// runs the hooks. Null when no full backward hook (global or this module's) is registered.
std::shared_ptr<detail::BackwardHookState> Module::route_inputs_to_backward_hooks(
    const detail::GlobalHookSnapshot& global, Args& args) {
  if (backward_hooks_.empty() && backward_pre_hooks_.empty() && global.backward.empty() &&
      global.backward_pre.empty())
    return nullptr;
  if (!legacy_backward_hooks_.empty())
    throw std::runtime_error(
        "Using non-full backward hooks on a Module that does not return a single Tensor or a tuple of Tensors "
        "is deprecated and will be removed in future versions. This hook will be missing some of the "
        "grad_output. Please use register_full_backward_hook to get the documented behavior.");
  auto bw = std::make_shared<detail::BackwardHookState>();
  bw->module = this;
  bw->alive = alive_;
  bw->user_hooks = global.backward;
  for (auto& h : backward_hooks_) bw->user_hooks.push_back(h.fn);
  bw->user_pre_hooks = global.backward_pre;
  for (auto& h : backward_pre_hooks_) bw->user_pre_hooks.push_back(h.fn);
  bw->n_inputs = args.size();
  std::vector<Tensor> inputs(args.size());
  for (size_t i = 0; i < args.size(); ++i)
    if (args[i].is_tensor()) inputs[i] = args[i].tensor();
  std::vector<size_t> idx;
  std::vector<Tensor> ts;
  grad_requiring(inputs, idx, ts);
  if (ts.empty() || !autograd::GradMode::is_enabled()) return bw;
  auto node = identity_node(ts);
  if (!node) return bw;
  for (size_t k = 0; k < idx.size(); ++k) args[idx[k]] = Value(ts[k]);
  bw->input_index = idx;
  std::weak_ptr<detail::BackwardHookState> wbw = bw;
  node->add_post_hook([wbw](const autograd::variable_list& grad_input,
                            const autograd::variable_list&) -> autograd::variable_list {
    auto st = wbw.lock();
    return st ? run_backward_hooks(*st, grad_input) : autograd::variable_list{};
  });
  // the node holds the state alive until backward has run
  node->add_pre_hook([bw](const autograd::variable_list&) -> autograd::variable_list { return {}; });
  return bw;
}

// 3. forward, then forward hooks (global first); always_call hooks also run when forward throws
Value Module::run_forward_with_hooks(const detail::GlobalHookSnapshot& global, const Args& args,
                                     const Kwargs& kwargs) {
  Value result;
  std::set<int64_t> called_always;
  try {
    if (auto* tracer = tracing::state()) {  // jit::trace: this call is a scope of its own
      std::vector<Tensor> inputs;
      for (const Value& a : args)
        for (const Tensor& t : a.tensors()) inputs.push_back(t);
      tracer->enter_module(this, inputs);
      result = forward_args(args, kwargs);
      tracer->exit_module(this, result.tensors());
    } else {
      result = forward_args(args, kwargs);
    }
    for (auto& [id, hook, always] : global.forward) {
      if (always) called_always.insert(id);
      auto r = hook(*this, args, result);
      if (r) result = std::move(*r);
    }
    if (!forward_hooks_.empty()) {
      auto hooks = forward_hooks_;
      for (auto& h : hooks) {
        if (h.always_call) called_always.insert(h.id);
        auto r = h.fn(*this, args, kwargs, result);
        if (r) result = std::move(*r);
      }
    }
  } catch (...) {
    run_always_call_hooks(global, args, kwargs, result, called_always);
    throw;
  }
  return result;
}

// After forward (or a forward hook) threw: the always_call forward hooks that have not run, their own
// errors silenced (the forward's error wins, as in PyTorch).
void Module::run_always_call_hooks(const detail::GlobalHookSnapshot& global, const Args& args, const Kwargs& kwargs,
                                   Value& result, const std::set<int64_t>& called_always) {
  for (auto& [id, hook, always] : global.forward) {
    if (!always || called_always.count(id)) continue;
    try {
      auto r = hook(*this, args, result);
      if (r) result = std::move(*r);
    } catch (...) {
    }
  }
  auto hooks = forward_hooks_;
  for (auto& h : hooks) {
    if (!h.always_call || called_always.count(h.id)) continue;
    try {
      auto r = h.fn(*this, args, kwargs, result);
      if (r) result = std::move(*r);
    } catch (...) {
    }
  }
}

// 4. backward hooks on the outputs: an identity node whose pre-hook sees grad_output
void Module::route_outputs_to_backward_hooks(const std::shared_ptr<detail::BackwardHookState>& bw, Value& result) {
  const bool is_tuple = result.is_tuple();
  std::vector<Tensor> outs = is_tuple ? result.tuple() : std::vector<Tensor>{};
  if (result.is_tensor()) outs.push_back(result.tensor());
  bw->n_outputs = is_tuple ? outs.size() : 1;
  std::vector<size_t> idx;
  std::vector<Tensor> ts;
  grad_requiring(outs, idx, ts);
  if (ts.empty() || !autograd::GradMode::is_enabled()) return;
  auto node = identity_node(ts);
  if (!node) return;
  bw->output_index = idx;
  for (size_t k = 0; k < idx.size(); ++k) outs[idx[k]] = ts[k];
  result = is_tuple ? Value(outs) : Value(outs[0]);
  node->add_pre_hook([st = bw](const autograd::variable_list& grads) { return run_backward_pre_hooks(*st, grads); });
}

// 5. legacy backward hooks: post-hooks on the grad_fn of the (first) output tensor
void Module::attach_legacy_backward_hooks(const Value& result) {
  if (legacy_backward_hooks_.empty()) return;
  Tensor var;
  if (result.is_tensor()) var = result.tensor();
  else if (result.is_tuple() && !result.tuple().empty()) var = result.tuple()[0];
  if (!var.defined() || !var.grad_fn()) return;
  std::weak_ptr<int> alive = alive_;
  Module* self = this;
  for (auto& h : legacy_backward_hooks_) {
    BackwardHook fn = h.fn;
    var.grad_fn()->add_post_hook([fn, alive, self](const autograd::variable_list& grad_input,
                                                   const autograd::variable_list& grad_output) {
      if (alive.expired()) return autograd::variable_list{};
      auto r = fn(*self, grad_input, grad_output);
      return r ? *r : autograd::variable_list{};
    });
  }
}

// -------------------------------------------------------------------------------------------------
// -------------------------------------------------------------------------------------------------
// Hook registration

namespace {
template <class V>
void insert_hook(V& vec, typename V::value_type h, bool prepend) {
  if (prepend) vec.insert(vec.begin(), std::move(h));
  else vec.push_back(std::move(h));
}
}  // namespace

struct ModuleAccess {
  template <class V>
  static RemovableHandle handle(Module& m, V Module::*member, int64_t id) {
    std::weak_ptr<int> alive = m.alive_;
    Module* self = &m;
    return RemovableHandle([alive, self, member, id] {
      if (alive.expired()) return;
      auto& v = self->*member;
      auto it = std::find_if(v.begin(), v.end(), [id](const auto& h) { return h.id == id; });
      if (it != v.end()) v.erase(it);
    });
  }
};

RemovableHandle Module::add_forward_pre_hook(ForwardPreHookWithKwargs hook, bool prepend, bool with_kwargs,
                                             const std::string& registered_name) {
  int64_t id = next_hook_id();
  insert_hook(forward_pre_hooks_, {id, std::move(hook), registered_name, with_kwargs, false}, prepend);
  return ModuleAccess::handle(*this, &Module::forward_pre_hooks_, id);
}

RemovableHandle Module::add_forward_hook(ForwardHookWithKwargs hook, HookOptions options, bool with_kwargs,
                                         const std::string& registered_name) {
  int64_t id = next_hook_id();
  insert_hook(forward_hooks_, {id, std::move(hook), registered_name, with_kwargs, options.always_call}, options.prepend);
  return ModuleAccess::handle(*this, &Module::forward_hooks_, id);
}

RemovableHandle Module::add_backward_pre_hook(BackwardPreHook hook, bool prepend, const std::string& registered_name) {
  int64_t id = next_hook_id();
  insert_hook(backward_pre_hooks_, {id, std::move(hook), registered_name, false, false}, prepend);
  return ModuleAccess::handle(*this, &Module::backward_pre_hooks_, id);
}

RemovableHandle Module::add_backward_hook(BackwardHook hook, bool prepend, const std::string& registered_name) {
  if (!legacy_backward_hooks_.empty())
    throw std::runtime_error("Cannot use both regular backward hooks and full backward hooks on a single Module. "
                             "Please use only one of them.");
  int64_t id = next_hook_id();
  insert_hook(backward_hooks_, {id, std::move(hook), registered_name, false, false}, prepend);
  return ModuleAccess::handle(*this, &Module::backward_hooks_, id);
}

RemovableHandle Module::add_legacy_backward_hook(BackwardHook hook, const std::string& registered_name) {
  if (!backward_hooks_.empty() || !backward_pre_hooks_.empty())
    throw std::runtime_error("Cannot use both regular backward hooks and full backward hooks on a single Module. "
                             "Please use only one of them.");
  int64_t id = next_hook_id();
  legacy_backward_hooks_.push_back({id, std::move(hook), registered_name, false, false});
  return ModuleAccess::handle(*this, &Module::legacy_backward_hooks_, id);
}

RemovableHandle Module::register_state_dict_pre_hook(StateDictPreHook hook, const std::string& registered_name) {
  int64_t id = next_hook_id();
  state_dict_pre_hooks_.push_back({id, std::move(hook), registered_name, false, false});
  return ModuleAccess::handle(*this, &Module::state_dict_pre_hooks_, id);
}

RemovableHandle Module::register_load_state_dict_post_hook(LoadStateDictPostHook hook,
                                                           const std::string& registered_name) {
  int64_t id = next_hook_id();
  load_post_hooks_.push_back({id, std::move(hook), registered_name, false, false});
  return ModuleAccess::handle(*this, &Module::load_post_hooks_, id);
}

// by registered name
RemovableHandle Module::register_forward_pre_hook(const std::string& registered_hook, bool prepend) {
  ForwardPreHook fn = registry_detail::forward_pre_hook(registered_hook);
  return add_forward_pre_hook(
      [fn](Module& m, const Args& a, const Kwargs& k) -> std::optional<std::pair<Args, Kwargs>> {
        auto r = fn(m, a);
        if (!r) return std::nullopt;
        return std::make_pair(std::move(*r), k);
      },
      prepend, false, registered_hook);
}
RemovableHandle Module::register_forward_hook(const std::string& registered_hook, HookOptions options) {
  ForwardHook fn = registry_detail::forward_hook(registered_hook);
  return add_forward_hook([fn](Module& m, const Args& a, const Kwargs&, const Value& out) { return fn(m, a, out); },
                          options, false, registered_hook);
}
RemovableHandle Module::register_full_backward_pre_hook(const std::string& registered_hook, bool prepend) {
  return add_backward_pre_hook(registry_detail::backward_pre_hook(registered_hook), prepend, registered_hook);
}
RemovableHandle Module::register_full_backward_hook(const std::string& registered_hook, bool prepend) {
  return add_backward_hook(registry_detail::backward_hook(registered_hook), prepend, registered_hook);
}
RemovableHandle Module::register_backward_hook(const std::string& registered_hook) {
  return add_legacy_backward_hook(registry_detail::backward_hook(registered_hook), registered_hook);
}
RemovableHandle Module::register_state_dict_pre_hook(const std::string& registered_hook) {
  return register_state_dict_pre_hook(registry_detail::state_dict_pre_hook(registered_hook), registered_hook);
}
RemovableHandle Module::register_load_state_dict_post_hook(const std::string& registered_hook) {
  return register_load_state_dict_post_hook(registry_detail::load_state_dict_post_hook(registered_hook),
                                            registered_hook);
}
}  // namespace troupe::nn
