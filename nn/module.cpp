// Module: registration, traversal, tree-wide operations, state_dict / load_state_dict, the forward
// call with its hooks, backward hooks (identity nodes around the module, as torch's BackwardHook),
// and printing.
#include <troupe/nn/module.h>

#include <cxxabi.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <typeinfo>
#include <unordered_set>

#include <troupe/tensor/autograd.h>
#include <troupe/tensor/ops.h>

namespace troupe::nn {

// -------------------------------------------------------------------------------------------------
// Parameter, skip_init

Tensor Parameter(const Tensor& t, bool requires_grad) {
  if (!t.defined()) return Tensor();
  Tensor p = t.detach();
  if (requires_grad) p.requires_grad_(true);
  return p;
}

namespace {
thread_local bool t_skip_init = false;
std::atomic<int64_t> g_next_hook_id{1};
int64_t next_hook_id() { return g_next_hook_id.fetch_add(1, std::memory_order_relaxed); }

std::string torch_size_str(IntArrayRef s) {
  std::string r = "torch.Size([";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "])";
}
}  // namespace

bool initialization_skipped() { return t_skip_init; }
SkipInitGuard::SkipInitGuard() : prev_(t_skip_init) { t_skip_init = true; }
SkipInitGuard::~SkipInitGuard() { t_skip_init = prev_; }

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
// Construction and identity

Module::Module() = default;
Module::Module(std::string name) : name_override_(std::move(name)) {}
Module::~Module() = default;

Module::Module(const Module& o)
    : std::enable_shared_from_this<Module>(),
      training_(o.training_),
      parameters_(o.parameters_),
      buffers_(o.buffers_),
      non_persistent_buffers_(o.non_persistent_buffers_),
      children_(o.children_),
      name_override_(o.name_override_),
      forward_pre_hooks_(o.forward_pre_hooks_),
      forward_hooks_(o.forward_hooks_),
      backward_pre_hooks_(o.backward_pre_hooks_),
      backward_hooks_(o.backward_hooks_),
      legacy_backward_hooks_(o.legacy_backward_hooks_),
      state_dict_pre_hooks_(o.state_dict_pre_hooks_),
      load_post_hooks_(o.load_post_hooks_),
      alive_(std::make_shared<int>(0)) {}

Module& Module::operator=(const Module& o) {
  if (this == &o) return *this;
  training_ = o.training_;
  parameters_ = o.parameters_;
  buffers_ = o.buffers_;
  non_persistent_buffers_ = o.non_persistent_buffers_;
  children_ = o.children_;
  name_override_ = o.name_override_;
  forward_pre_hooks_ = o.forward_pre_hooks_;
  forward_hooks_ = o.forward_hooks_;
  backward_pre_hooks_ = o.backward_pre_hooks_;
  backward_hooks_ = o.backward_hooks_;
  legacy_backward_hooks_ = o.legacy_backward_hooks_;
  state_dict_pre_hooks_ = o.state_dict_pre_hooks_;
  load_post_hooks_ = o.load_post_hooks_;
  return *this;  // keeps its own lifetime token
}

std::string Module::name() const {
  if (!name_override_.empty()) return name_override_;
  const char* mangled = typeid(*this).name();
  int status = 0;
  char* dem = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string full = (status == 0 && dem) ? dem : mangled;
  std::free(dem);
  // strip template arguments and namespaces: "troupe::nn::Linear" -> "Linear"
  size_t lt = full.find('<');
  std::string base = lt == std::string::npos ? full : full.substr(0, lt);
  size_t colon = base.rfind("::");
  return colon == std::string::npos ? base : base.substr(colon + 2);
}

namespace {
// _addindent: every line but the first gets `n` more spaces.
std::string add_indent(const std::string& s, int n) {
  std::string out;
  std::string pad(static_cast<size_t>(n), ' ');
  size_t start = 0;
  bool first = true;
  while (true) {
    size_t nl = s.find('\n', start);
    std::string line = s.substr(start, nl == std::string::npos ? std::string::npos : nl - start);
    if (!first) out += "\n" + pad;
    out += line;
    first = false;
    if (nl == std::string::npos) break;
    start = nl + 1;
  }
  return out;
}
std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    size_t nl = s.find('\n', start);
    out.push_back(s.substr(start, nl == std::string::npos ? std::string::npos : nl - start));
    if (nl == std::string::npos) break;
    start = nl + 1;
  }
  return out;
}
}  // namespace

std::string Module::repr() const {
  std::vector<std::string> extra_lines;
  std::string extra = extra_repr();
  if (!extra.empty()) extra_lines = split_lines(extra);
  std::vector<std::string> child_lines;
  for (const auto& [key, child] : children_) {
    std::string mod_str = child ? child->repr() : "None";
    child_lines.push_back("(" + key + "): " + add_indent(mod_str, 2));
  }
  std::string main = name() + "(";
  if (!extra_lines.empty() || !child_lines.empty()) {
    if (extra_lines.size() == 1 && child_lines.empty()) {
      main += extra_lines[0];
    } else {
      main += "\n  ";
      bool first = true;
      for (const auto* v : {&extra_lines, &child_lines})
        for (const auto& l : *v) {
          if (!first) main += "\n  ";
          main += l;
          first = false;
        }
      main += "\n";
    }
  }
  return main + ")";
}

std::ostream& operator<<(std::ostream& os, const Module& m) { return os << m.repr(); }

// -------------------------------------------------------------------------------------------------
// Forward

namespace {
thread_local const Module* t_default_forward = nullptr;
}

Tensor Module::forward(const Tensor& input) {
  if (t_default_forward == this) {
    t_default_forward = nullptr;
    throw std::runtime_error("Module [" + name() + "] is missing the required \"forward\" function");
  }
  const Module* prev = t_default_forward;
  t_default_forward = this;
  Value out;
  try {
    out = forward_args(Args{Value(input)}, {});
  } catch (...) {
    t_default_forward = prev;
    throw;
  }
  t_default_forward = prev;
  if (!out.is_tensor())
    throw std::runtime_error("[" + name() + "] forward returned " + out.kind() + ", not a Tensor");
  return out.tensor();
}

Value Module::forward_args(const Args& args, const Kwargs& kwargs) {
  if (args.size() == 1 && args[0].is_tensor() && kwargs.empty()) return forward(args[0].tensor());
  std::string got;
  for (const auto& a : args) got += (got.empty() ? "" : ", ") + a.kind();
  for (const auto& [k, v] : kwargs) got += (got.empty() ? "" : ", ") + k + "=" + v.kind();
  throw std::invalid_argument("[" + name() + "] forward takes one Tensor, got (" + got + ")");
}

Tensor Module::operator()(const Tensor& input) {
  if (forward_pre_hooks_.empty() && forward_hooks_.empty() && backward_hooks_.empty() &&
      backward_pre_hooks_.empty() && legacy_backward_hooks_.empty() &&
      globals().count.load(std::memory_order_relaxed) == 0)
    return forward(input);
  Value out = call(Args{Value(input)});
  if (!out.is_tensor())
    throw std::runtime_error("[" + name() + "] forward returned " + out.kind() + ", not a Tensor");
  return out.tensor();
}

Value Module::operator()(Args args, Kwargs kwargs) { return call(std::move(args), std::move(kwargs)); }

namespace {

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

}  // namespace

Value Module::call(Args args, Kwargs kwargs) {
  auto& g = globals();
  const bool any_global = g.count.load(std::memory_order_relaxed) != 0;
  std::vector<std::pair<int64_t, ForwardPreHook>> g_pre;
  std::vector<std::tuple<int64_t, ForwardHook, bool>> g_fwd;
  std::vector<BackwardPreHook> g_bpre;
  std::vector<BackwardHook> g_bwd;
  if (any_global) {
    std::lock_guard<std::mutex> lock(g.mu);
    g_pre = g.forward_pre;
    g_fwd = g.forward;
    for (auto& h : g.backward_pre) g_bpre.push_back(h.second);
    for (auto& h : g.backward) g_bwd.push_back(h.second);
  }

  // 1. forward pre-hooks: global first, then this module's (snapshot: a hook may remove itself)
  for (auto& [id, hook] : g_pre) {
    auto r = hook(*this, args);
    if (r) args = std::move(*r);
  }
  if (!forward_pre_hooks_.empty()) {
    auto hooks = forward_pre_hooks_;
    for (auto& h : hooks) {
      auto r = h.fn(*this, args, kwargs);
      if (r) {
        args = std::move(r->first);
        if (h.with_kwargs) kwargs = std::move(r->second);
      }
    }
  }

  // 2. full backward hooks: route the positional tensor inputs through an identity node
  std::shared_ptr<BackwardHookState> bw;
  if (!backward_hooks_.empty() || !backward_pre_hooks_.empty() || !g_bwd.empty() || !g_bpre.empty()) {
    if (!legacy_backward_hooks_.empty())
      throw std::runtime_error(
          "Using non-full backward hooks on a Module that does not return a single Tensor or a tuple of Tensors "
          "is deprecated and will be removed in future versions. This hook will be missing some of the "
          "grad_output. Please use register_full_backward_hook to get the documented behavior.");
    bw = std::make_shared<BackwardHookState>();
    bw->module = this;
    bw->alive = alive_;
    bw->user_hooks = g_bwd;
    for (auto& h : backward_hooks_) bw->user_hooks.push_back(h.fn);
    bw->user_pre_hooks = g_bpre;
    for (auto& h : backward_pre_hooks_) bw->user_pre_hooks.push_back(h.fn);
    bw->n_inputs = args.size();
    std::vector<size_t> idx;
    std::vector<Tensor> ts;
    for (size_t i = 0; i < args.size(); ++i)
      if (args[i].is_tensor() && args[i].tensor().defined() && args[i].tensor().requires_grad()) {
        idx.push_back(i);
        ts.push_back(args[i].tensor());
      }
    if (!ts.empty() && autograd::GradMode::is_enabled()) {
      auto node = identity_node(ts);
      if (node) {
        for (size_t k = 0; k < idx.size(); ++k) args[idx[k]] = Value(ts[k]);
        bw->input_index = idx;
        std::weak_ptr<BackwardHookState> wbw = bw;
        node->add_post_hook([wbw](const autograd::variable_list& grad_input,
                                  const autograd::variable_list&) -> autograd::variable_list {
          auto st = wbw.lock();
          if (!st) return {};
          std::lock_guard<std::mutex> lock(st->mu);
          if (!st->grad_outputs) return {};  // backward did not come through the outputs
          auto res = pack_with_none(*st->input_index, grad_input, st->n_inputs);
          if (st->alive.expired()) return {};
          for (auto& hook : st->user_hooks) {
            auto out = hook(*st->module, res, *st->grad_outputs);
            if (!out) continue;
            if (out->size() != res.size())
              throw std::runtime_error("Backward hook returned an invalid number of grad_input, got " +
                                       std::to_string(out->size()) + ", but expected " + std::to_string(res.size()));
            res = std::move(*out);
          }
          st->grad_outputs.reset();
          autograd::variable_list ret;
          for (size_t i : *st->input_index) ret.push_back(res[i]);
          return ret;
        });
        // the node holds the state alive until backward has run
        node->add_pre_hook([bw](const autograd::variable_list&) -> autograd::variable_list { return {}; });
      }
    }
  }

  // 3. forward, then forward hooks (global first); always_call hooks also run when forward throws
  Value result;
  std::set<int64_t> called_always;
  try {
    result = forward_args(args, kwargs);
    for (auto& [id, hook, always] : g_fwd) {
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
    for (auto& [id, hook, always] : g_fwd) {
      if (!always || called_always.count(id)) continue;
      try {
        auto r = hook(*this, args, result);
        if (r) result = std::move(*r);
      } catch (...) {  // silenced: the forward's error wins, as in PyTorch
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
    throw;
  }

  // 4. backward hooks on the outputs: an identity node whose pre-hook sees grad_output
  if (bw) {
    std::vector<size_t> idx;
    std::vector<Tensor> ts;
    bool is_tuple = result.is_tuple();
    std::vector<Tensor> outs = result.is_tuple() ? result.tuple() : std::vector<Tensor>{};
    if (result.is_tensor()) outs.push_back(result.tensor());
    bw->n_outputs = result.is_tuple() ? outs.size() : 1;
    for (size_t i = 0; i < outs.size(); ++i)
      if (outs[i].defined() && outs[i].requires_grad()) {
        idx.push_back(i);
        ts.push_back(outs[i]);
      }
    if (!ts.empty() && autograd::GradMode::is_enabled()) {
      auto node = identity_node(ts);
      if (node) {
        bw->output_index = idx;
        for (size_t k = 0; k < idx.size(); ++k) outs[idx[k]] = ts[k];
        result = is_tuple ? Value(outs) : Value(outs[0]);
        auto st = bw;
        node->add_pre_hook([st](const autograd::variable_list& grads) -> autograd::variable_list {
          std::lock_guard<std::mutex> lock(st->mu);
          st->grad_outputs = pack_with_none(st->output_index, grads, st->n_outputs);
          bool changed = false;
          if (!st->alive.expired()) {
            for (auto& hook : st->user_pre_hooks) {
              auto r = hook(*st->module, *st->grad_outputs);
              if (!r) continue;
              if (r->size() != st->grad_outputs->size())
                throw std::runtime_error("Backward pre hook returned an invalid number of grad_output, got " +
                                         std::to_string(r->size()) + ", but expected " +
                                         std::to_string(st->grad_outputs->size()));
              st->grad_outputs = std::move(*r);
              changed = true;
            }
            if (!st->input_index) {  // no input requires grad: call the hooks here, with None inputs
              std::vector<Tensor> grad_inputs(st->n_inputs);
              for (auto& hook : st->user_hooks) {
                auto r = hook(*st->module, grad_inputs, *st->grad_outputs);
                if (r && std::any_of(r->begin(), r->end(), [](const Tensor& t) { return t.defined(); }))
                  throw std::runtime_error(
                      "Backward hook for Modules where no input requires gradient should always return None or "
                      "None for all gradients.");
              }
            }
          }
          autograd::variable_list ret;
          if (changed) {
            for (size_t i : st->output_index) ret.push_back((*st->grad_outputs)[i]);
          }
          if (!st->input_index) st->grad_outputs.reset();
          return ret;
        });
      }
    }
  }

  // 5. legacy backward hooks: post-hooks on the grad_fn of the (first) output tensor
  if (!legacy_backward_hooks_.empty()) {
    Tensor var;
    if (result.is_tensor()) var = result.tensor();
    else if (result.is_tuple() && !result.tuple().empty()) var = result.tuple()[0];
    if (var.defined() && var.grad_fn()) {
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
  }
  return result;
}

// -------------------------------------------------------------------------------------------------
// Registration

namespace {
void check_member_name(const char* what, const std::string& name, bool module_style) {
  if (name.find('.') != std::string::npos) {
    if (module_style) throw std::invalid_argument(std::string(what) + " name can't contain \".\", got: " + name);
    throw std::invalid_argument(std::string(what) + " name can't contain \".\"");
  }
  if (name.empty()) throw std::invalid_argument(std::string(what) + " name can't be empty string \"\"");
}
}  // namespace

Tensor& Module::register_parameter(const std::string& name, Tensor param, bool requires_grad) {
  check_member_name("parameter", name, false);
  if (buffers_.contains(name) || children_.contains(name))
    throw std::invalid_argument("attribute '" + name + "' already exists");
  if (param.defined()) {
    if (param.grad_fn())
      throw std::invalid_argument("Cannot assign non-leaf Tensor to parameter '" + name +
                                  "'. Model parameters must be created explicitly. To express '" + name +
                                  "' as a function of another Tensor, compute the value in the forward() method.");
    if (requires_grad && !param.requires_grad()) param.requires_grad_(true);
  }
  return parameters_.insert_or_assign(name, std::move(param));
}

Tensor& Module::register_buffer(const std::string& name, Tensor tensor, bool persistent) {
  check_member_name("buffer", name, false);
  if (parameters_.contains(name) || children_.contains(name))
    throw std::invalid_argument("attribute '" + name + "' already exists");
  auto it = std::find(non_persistent_buffers_.begin(), non_persistent_buffers_.end(), name);
  if (persistent) {
    if (it != non_persistent_buffers_.end()) non_persistent_buffers_.erase(it);
  } else if (it == non_persistent_buffers_.end()) {
    non_persistent_buffers_.push_back(name);
  }
  return buffers_.insert_or_assign(name, std::move(tensor));
}

void Module::add_module_impl(const std::string& name, ModulePtr module) {
  check_member_name("module", name, true);
  if (parameters_.contains(name) || buffers_.contains(name))
    throw std::invalid_argument("attribute '" + name + "' already exists");
  if (module.get() == this) throw std::invalid_argument("[register_module] a module can't be its own child ('" + name + "')");
  children_.insert_or_assign(name, std::move(module));
}

bool Module::is_persistent_buffer(const std::string& name) const {
  return buffers_.contains(name) &&
         std::find(non_persistent_buffers_.begin(), non_persistent_buffers_.end(), name) == non_persistent_buffers_.end();
}

// -------------------------------------------------------------------------------------------------
// Traversal

namespace {
// A shared_ptr to `m`: the owning one when m is held by a shared_ptr, else a non-owning alias.
ModulePtr self_ptr(Module* m) {
  auto w = m->weak_from_this();
  if (auto p = w.lock()) return p;
  return ModulePtr(ModulePtr(), m);
}
}  // namespace

OrderedDict<ModulePtr> Module::named_modules(const std::string& prefix, bool remove_duplicate) {
  OrderedDict<ModulePtr> out;
  std::unordered_set<const Module*> memo;
  // iterative pre-order walk over (prefix, module)
  std::vector<std::pair<std::string, ModulePtr>> stack{{prefix, self_ptr(this)}};
  while (!stack.empty()) {
    auto [pfx, m] = std::move(stack.back());
    stack.pop_back();
    if (remove_duplicate && !memo.insert(m.get()).second) continue;
    const auto& kids = m->children_.items();
    for (auto it = kids.rbegin(); it != kids.rend(); ++it)
      if (it->second) stack.emplace_back(pfx.empty() ? it->first : pfx + "." + it->first, it->second);
    out.insert_or_assign(pfx, std::move(m));
  }
  return out;
}

std::vector<ModulePtr> Module::modules() { return named_modules().values(); }

OrderedDict<ModulePtr> Module::named_children() const {
  OrderedDict<ModulePtr> out;
  std::unordered_set<const Module*> memo;
  for (const auto& [k, c] : children_)
    if (c && memo.insert(c.get()).second) out.insert_or_assign(k, c);
  return out;
}

std::vector<ModulePtr> Module::children() const { return named_children().values(); }

namespace {
// _named_members: walks modules (pre-order, de-duplicated when remove_duplicate) and yields the
// members of each, de-duplicating tensors by identity when remove_duplicate.
template <class Get>
OrderedDict<Tensor> named_members(const Module& root, const std::string& prefix, bool recurse,
                                  bool remove_duplicate, Get get) {
  OrderedDict<Tensor> out;
  std::unordered_set<const TensorImpl*> seen;
  std::unordered_set<const Module*> memo;
  std::vector<std::pair<std::string, const Module*>> stack{{prefix, &root}};
  while (!stack.empty()) {
    auto [pfx, m] = stack.back();
    stack.pop_back();
    if (remove_duplicate && !memo.insert(m).second) continue;
    for (const auto& [k, t] : get(*m)) {
      if (!t.defined()) continue;
      if (remove_duplicate && !seen.insert(t.impl()).second) continue;
      out.insert_or_assign(pfx.empty() ? k : pfx + "." + k, t);
    }
    if (!recurse) break;
    const auto& kids = m->children_dict().items();
    for (auto it = kids.rbegin(); it != kids.rend(); ++it)
      if (it->second) stack.emplace_back(pfx.empty() ? it->first : pfx + "." + it->first, it->second.get());
  }
  return out;
}
}  // namespace

OrderedDict<Tensor> Module::named_parameters(const std::string& prefix, bool recurse, bool remove_duplicate) const {
  return named_members(*this, prefix, recurse, remove_duplicate,
                       [](const Module& m) -> const OrderedDict<Tensor>& { return m.parameters_dict(); });
}
std::vector<Tensor> Module::parameters(bool recurse) const { return named_parameters("", recurse).values(); }

OrderedDict<Tensor> Module::named_buffers(const std::string& prefix, bool recurse, bool remove_duplicate) const {
  return named_members(*this, prefix, recurse, remove_duplicate,
                       [](const Module& m) -> const OrderedDict<Tensor>& { return m.buffers_dict(); });
}
std::vector<Tensor> Module::buffers(bool recurse) const { return named_buffers("", recurse).values(); }

ModulePtr Module::get_submodule(const std::string& target) {
  if (target.empty()) return self_ptr(this);
  ModulePtr mod = self_ptr(this);
  size_t start = 0;
  while (true) {
    size_t dot = target.find('.', start);
    std::string item = target.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    const ModulePtr* child = mod->children_.find(item);
    if (!child) {
      if (mod->parameters_.contains(item) || mod->buffers_.contains(item))
        throw std::invalid_argument("`" + item + "` is not an nn.Module");
      throw std::invalid_argument(mod->name() + " has no attribute `" + item + "`");
    }
    if (!*child) throw std::invalid_argument("`" + item + "` is not an nn.Module");
    mod = *child;
    if (dot == std::string::npos) return mod;
    start = dot + 1;
  }
}

Tensor Module::get_parameter(const std::string& target) {
  size_t dot = target.rfind('.');
  std::string module_path = dot == std::string::npos ? "" : target.substr(0, dot);
  std::string param_name = dot == std::string::npos ? target : target.substr(dot + 1);
  ModulePtr mod = get_submodule(module_path);
  const Tensor* p = mod->parameters_.find(param_name);
  if (!p) {
    if (mod->buffers_.contains(param_name) || mod->children_.contains(param_name))
      throw std::invalid_argument("`" + param_name + "` is not an nn.Parameter");
    throw std::invalid_argument(mod->name() + " has no attribute `" + param_name + "`");
  }
  if (!p->defined()) throw std::invalid_argument("`" + param_name + "` is not an nn.Parameter");
  return *p;
}

Tensor Module::get_buffer(const std::string& target) {
  size_t dot = target.rfind('.');
  std::string module_path = dot == std::string::npos ? "" : target.substr(0, dot);
  std::string buffer_name = dot == std::string::npos ? target : target.substr(dot + 1);
  ModulePtr mod = get_submodule(module_path);
  const Tensor* b = mod->buffers_.find(buffer_name);
  if (!b) {
    if (mod->parameters_.contains(buffer_name) || mod->children_.contains(buffer_name))
      throw std::invalid_argument("`" + buffer_name + "` is not a buffer");
    throw std::invalid_argument(mod->name() + " has no attribute `" + buffer_name + "`");
  }
  if (!b->defined()) throw std::invalid_argument("`" + buffer_name + "` is not a buffer");
  return *b;
}

// -------------------------------------------------------------------------------------------------
// Tree-wide operations

Module& Module::apply(const ApplyFn& fn) {
  for (const auto& c : children()) c->apply(fn);
  fn(*this);
  return *this;
}

Module& Module::apply(const std::string& registered_fn) {
  const ApplyFn& fn = registry_detail::apply_fn(registered_fn);
  return apply(fn);
}

Module& Module::train(bool mode) {
  training_ = mode;
  for (const auto& c : children()) c->train(mode);
  return *this;
}

Module& Module::requires_grad_(bool requires_grad) {
  for (auto& p : parameters()) p.requires_grad_(requires_grad);
  return *this;
}

void Module::zero_grad(bool set_to_none) {
  for (auto& p : parameters()) {
    if (!p.grad().defined()) continue;
    if (set_to_none) {
      p.set_grad(Tensor());
    } else {
      Tensor& g = p.mutable_grad();
      if (g.grad_fn()) g = g.detach();
      else g.requires_grad_(false);
      g.zero_();
    }
  }
}

Module& Module::apply_to_tensors(const std::function<Tensor(const Tensor&)>& fn, bool recurse) {
  if (recurse)
    for (const auto& c : children()) c->apply_to_tensors(fn, true);
  NoGradGuard no_grad;
  for (auto& [k, p] : parameters_) {
    if (!p.defined()) continue;
    Tensor applied = fn(p);
    p.set_data(applied);
    const Tensor& g = p.grad();
    if (g.defined()) g.set_data(fn(g));
  }
  for (auto& [k, b] : buffers_) {
    if (!b.defined()) continue;
    b.set_data(fn(b));
  }
  return *this;
}

Module& Module::to(std::optional<Device> device, std::optional<ScalarType> dtype, bool /*non_blocking*/) {
  if (dtype && !is_floating_point(*dtype))
    throw std::invalid_argument(std::string("nn.Module.to only accepts floating point or complex dtypes, but got desired dtype=") +
                                std::string("torch.") + dtype_name(*dtype));
  return apply_to_tensors([&](const Tensor& t) {
    Device dev = device ? *device : t.device();
    ScalarType dt = (dtype && t.is_floating_point()) ? *dtype : t.dtype();
    return t.to(dev, dt);
  });
}

Module& Module::to(const Tensor& other, bool non_blocking) {
  return to(std::optional<Device>(other.device()), std::optional<ScalarType>(other.dtype()), non_blocking);
}

Module& Module::type(ScalarType dtype) {
  return apply_to_tensors([&](const Tensor& t) { return t.to(dtype); });
}

Module& Module::cuda(int index) { return to(Device(kCUDA, index)); }

Module& Module::to_empty(Device device, bool recurse) {
  return apply_to_tensors([&](const Tensor& t) { return empty_like(t, TensorOptions().dtype(t.dtype()).device(device)); },
                          recurse);
}

// -------------------------------------------------------------------------------------------------
// state_dict

void Module::save_to_state_dict(StateDict& out, const std::string& prefix, bool keep_vars) const {
  for (const auto& [k, p] : parameters_)
    if (p.defined()) out.insert_or_assign(prefix + k, keep_vars ? p : p.detach());
  for (const auto& [k, b] : buffers_)
    if (b.defined() && is_persistent_buffer(k)) out.insert_or_assign(prefix + k, keep_vars ? b : b.detach());
  if (auto extra = get_extra_state()) out.insert_or_assign(prefix + "_extra_state", *extra);
}

StateDict Module::state_dict(const std::string& prefix, bool keep_vars) {
  StateDict out;
  // recursive per module, iteratively: (module, prefix) in pre-order
  std::vector<std::pair<Module*, std::string>> stack{{this, prefix}};
  while (!stack.empty()) {
    auto [m, pfx] = stack.back();
    stack.pop_back();
    if (!m->state_dict_pre_hooks_.empty()) {
      auto hooks = m->state_dict_pre_hooks_;
      for (auto& h : hooks) h.fn(*m, pfx, keep_vars);
    }
    m->save_to_state_dict(out, pfx, keep_vars);
    const auto& kids = m->children_.items();
    for (auto it = kids.rbegin(); it != kids.rend(); ++it)
      if (it->second) stack.emplace_back(it->second.get(), pfx + it->first + ".");
  }
  return out;
}

void Module::set_extra_state(const Tensor&) {
  throw std::runtime_error(
      "Reached a code path in Module.set_extra_state() that should never be called. Please file an issue at "
      "https://github.com/pytorch/pytorch/issues/new?template=bug-report.yml to report this bug.");
}

namespace {
struct PendingCopy {
  Module* module;
  Tensor target;  // the module's tensor
  Tensor source;  // from the state dict
  bool is_param;
};
struct PendingExtra {
  Module* module;
  Tensor state;
};
}  // namespace

IncompatibleKeys Module::load_state_dict(const StateDict& sd, bool strict, bool assign) {
  IncompatibleKeys keys;
  std::vector<std::string> error_msgs;
  std::vector<PendingCopy> copies;
  std::vector<PendingExtra> extras;
  std::vector<Module*> post_order;  // modules in the order their post-hooks run (children first)
  bool any_post_hooks = false;

  // pass 1: validate everything, collect the copies (nothing is modified)
  struct Frame {
    Module* m;
    std::string prefix;
    bool expanded;
  };
  std::vector<Frame> stack{{this, "", false}};
  while (!stack.empty()) {
    Frame f = stack.back();
    stack.pop_back();
    Module* m = f.m;
    if (f.expanded) {
      post_order.push_back(m);
      any_post_hooks = any_post_hooks || !m->load_post_hooks_.empty();
      continue;
    }
    const std::string& prefix = f.prefix;
    // local state: non-null parameters and persistent buffers
    std::vector<std::pair<std::string, std::pair<Tensor, bool>>> local;
    for (const auto& [k, p] : m->parameters_)
      if (p.defined()) local.push_back({k, {p, true}});
    for (const auto& [k, b] : m->buffers_)
      if (b.defined() && m->is_persistent_buffer(k)) local.push_back({k, {b, false}});
    std::unordered_set<std::string> local_names;
    for (const auto& [k, v] : local) {
      local_names.insert(k);
      std::string key = prefix + k;
      const Tensor* in = sd.find(key);
      if (!in) {
        keys.missing_keys.push_back(key);
        continue;
      }
      Tensor input = *in;
      const Tensor& param = v.first;
      if (!input.defined()) {
        error_msgs.push_back("While copying the parameter named \"" + key + "\", the checkpoint holds None.");
        continue;
      }
      if (param.dim() == 0 && input.dim() == 1 && input.numel() >= 1) input = input.select(0, 0);
      if (std::vector<int64_t>(input.sizes().begin(), input.sizes().end()) !=
          std::vector<int64_t>(param.sizes().begin(), param.sizes().end())) {
        error_msgs.push_back("size mismatch for " + key + ": copying a param with shape " + torch_size_str(input.sizes()) +
                             " from checkpoint, the shape in current model is " + torch_size_str(param.sizes()) + ".");
        continue;
      }
      copies.push_back({m, param, input, v.second});
    }
    std::string extra_key = prefix + "_extra_state";
    bool has_extra = m->get_extra_state().has_value();
    if (has_extra) {
      if (const Tensor* e = sd.find(extra_key)) extras.push_back({m, *e});
      else keys.missing_keys.push_back(extra_key);
    } else if (sd.contains(extra_key)) {
      keys.unexpected_keys.push_back(extra_key);
    }
    for (const auto& [key, t] : sd) {
      if (key.compare(0, prefix.size(), prefix) != 0 || key == extra_key) continue;
      std::string rest = key.substr(prefix.size());
      std::string input_name = rest.substr(0, rest.find('.'));
      if (!m->children_.contains(input_name) && !local_names.count(input_name)) keys.unexpected_keys.push_back(key);
    }
    // post-hooks after the children: push a marker, then the children (reversed for pre-order)
    stack.push_back({m, prefix, true});
    const auto& kids = m->children_.items();
    for (auto it = kids.rbegin(); it != kids.rend(); ++it)
      if (it->second) stack.push_back({it->second.get(), prefix + it->first + ".", false});
  }

  auto fail = [&](std::vector<std::string> msgs, const IncompatibleKeys& k) {
    if (strict) {
      if (!k.unexpected_keys.empty()) {
        std::string s = "Unexpected key(s) in state_dict: ";
        for (size_t i = 0; i < k.unexpected_keys.size(); ++i)
          s += (i ? ", " : "") + ("\"" + k.unexpected_keys[i] + "\"");
        msgs.insert(msgs.begin(), s + ". ");
      }
      if (!k.missing_keys.empty()) {
        std::string s = "Missing key(s) in state_dict: ";
        for (size_t i = 0; i < k.missing_keys.size(); ++i) s += (i ? ", " : "") + ("\"" + k.missing_keys[i] + "\"");
        msgs.insert(msgs.begin(), s + ". ");
      }
    }
    if (msgs.empty()) return;
    std::string text = "Error(s) in loading state_dict for " + name() + ":\n\t";
    for (size_t i = 0; i < msgs.size(); ++i) text += (i ? "\n\t" : "") + msgs[i];
    throw std::runtime_error(text);
  };

  // errors that no hook can clear: fail before touching anything
  if (!error_msgs.empty()) fail(error_msgs, strict && !any_post_hooks ? keys : IncompatibleKeys{});
  bool key_errors = strict && (!keys.missing_keys.empty() || !keys.unexpected_keys.empty());
  if (key_errors && !any_post_hooks) fail({}, keys);

  // when post-hooks may clear key errors, keep a backup to restore if they do not
  std::vector<std::pair<Tensor, Tensor>> backup;  // (target, old data)
  if (key_errors) {
    for (auto& c : copies) backup.emplace_back(c.target, c.target.detach().clone());
  }

  // pass 2: copy (or adopt) the values
  {
    NoGradGuard no_grad;
    for (auto& c : copies) {
      if (assign) {
        bool rg = c.target.requires_grad();
        c.target.set_data(c.source.detach());
        if (c.is_param) c.target.requires_grad_(rg);
      } else {
        try {
          c.target.copy_(c.source);
        } catch (const std::exception& ex) {
          throw std::runtime_error("Error(s) in loading state_dict for " + name() +
                                   ":\n\tWhile copying a parameter, an exception occurred : " + ex.what() + ".");
        }
      }
    }
  }
  for (auto& e : extras) e.module->set_extra_state(e.state);

  // post-hooks, children first; they may edit the key lists
  for (Module* m : post_order) {
    if (m->load_post_hooks_.empty()) continue;
    auto hooks = m->load_post_hooks_;
    for (auto& h : hooks) h.fn(*m, keys);
  }
  if (strict && (!keys.missing_keys.empty() || !keys.unexpected_keys.empty())) {
    if (!assign) {
      NoGradGuard no_grad;
      for (auto& [target, old] : backup) target.copy_(old);
    } else {
      for (auto& [target, old] : backup) target.set_data(old);
    }
    fail({}, keys);
  }
  return keys;
}

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

// -------------------------------------------------------------------------------------------------
// Deep copy (clone): nn::Cloneable makes a fresh module with reset(), then copy_state_from_ fills it

ModulePtr Module::clone(const std::optional<Device>& /*device*/) const {
  throw std::runtime_error("[clone] clone() is not implemented for " + name() +
                           ": derive it from nn::Cloneable<YourModule> and register its parameters, buffers and "
                           "submodules in reset()");
}

ModulePtr Module::clone_with_memo(const std::optional<Device>& device, CloneMemo& memo) const {
  if (auto it = memo.modules.find(this); it != memo.modules.end()) return it->second;
  ModulePtr copy = clone(device);
  memo.modules.emplace(this, copy);
  return copy;
}

namespace {
// A detached copy of t with storage of its own, on `device` when one is given.
Tensor deep_copy_tensor(const Tensor& t, const std::optional<Device>& device) {
  Tensor d = t.detach();
  return (device && *device != d.device()) ? d.to(*device) : d.clone();
}
}  // namespace

void Module::copy_state_from_(const Module& src, const std::optional<Device>& device, CloneMemo& memo) {
  NoGradGuard no_grad;
  // Entries follow the source's order. A tensor that reset() registered keeps its identity (the
  // layer's member stays valid) and takes a copy of the source's data; one the source shares with
  // an entry copied before maps to that entry's copy (its member then aliases the copy's data).
  auto copy_entries = [&](const OrderedDict<Tensor>& from, OrderedDict<Tensor>& mine, const char* kind) {
    OrderedDict<Tensor> out;
    for (const auto& [key, s] : from) {
      const Tensor* slot = mine.find(key);
      Tensor d = slot ? *slot : Tensor();
      if (!s.defined()) {
        out.insert_or_assign(key, Tensor());
        continue;
      }
      if (d.defined() && !(d.sizes() == s.sizes()))
        throw std::runtime_error("[clone] " + name() + ".reset() registered " + kind + " '" + key + "' of shape " +
                                 shape_str(d.sizes()) + ", but the module being cloned has shape " +
                                 shape_str(s.sizes()));
      if (auto hit = memo.tensors.find(s.impl()); hit != memo.tensors.end()) {
        if (d.defined() && !d.is_same(hit->second)) d.set_data(hit->second);
        out.insert_or_assign(key, hit->second);
        continue;
      }
      Tensor data = deep_copy_tensor(s, device);
      if (d.defined() && !d.is_same(s)) {
        d.set_data(data);
      } else {
        d = data;  // reset() left no slot, or registered the source's own tensor (e.g. from options)
      }
      if (d.requires_grad() != s.requires_grad()) d.requires_grad_(s.requires_grad());
      const Tensor& g = s.grad();
      if (g.defined()) d.set_grad(deep_copy_tensor(g, device));
      else if (d.grad().defined()) d.set_grad(Tensor());
      memo.tensors.emplace(s.impl(), d);
      out.insert_or_assign(key, d);
    }
    mine = std::move(out);
  };
  copy_entries(src.parameters_, parameters_, "parameter");
  copy_entries(src.buffers_, buffers_, "buffer");
  non_persistent_buffers_ = src.non_persistent_buffers_;

  OrderedDict<ModulePtr> kids;
  for (const auto& [key, sc] : src.children_) {
    if (!sc) {
      kids.insert_or_assign(key, nullptr);
      continue;
    }
    if (auto hit = memo.modules.find(sc.get()); hit != memo.modules.end()) {
      kids.insert_or_assign(key, hit->second);
      continue;
    }
    const ModulePtr* slot = children_.find(key);
    ModulePtr mine = slot ? *slot : nullptr;
    if (mine && mine != sc && typeid(*mine) == typeid(*sc)) {
      // a child made by reset(): filled in place, so the member that holds it stays valid
      memo.modules.emplace(sc.get(), mine);
      mine->copy_state_from_(*sc, device, memo);
      kids.insert_or_assign(key, mine);
    } else {
      kids.insert_or_assign(key, sc->clone_with_memo(device, memo));
    }
  }
  children_ = std::move(kids);

  training_ = src.training_;
  name_override_ = src.name_override_;
  forward_pre_hooks_ = src.forward_pre_hooks_;
  forward_hooks_ = src.forward_hooks_;
  backward_pre_hooks_ = src.backward_pre_hooks_;
  backward_hooks_ = src.backward_hooks_;
  legacy_backward_hooks_ = src.legacy_backward_hooks_;
  state_dict_pre_hooks_ = src.state_dict_pre_hooks_;
  load_post_hooks_ = src.load_post_hooks_;
}

}  // namespace troupe::nn
