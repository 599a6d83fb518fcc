// Module: construction and identity, printing, the default forward, registration of parameters / buffers /
// children, traversal, tree-wide operations (train, to, apply, zero_grad) and deep copy. The hooks and the
// forward call are in module_hooks.cpp, state_dict / load_state_dict in module_state.cpp.
#include <troupe/nn/module.h>

#include <cxxabi.h>

#include <algorithm>
#include <cstdlib>
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
}  // namespace

bool initialization_skipped() { return t_skip_init; }
SkipInitGuard::SkipInitGuard() : prev_(t_skip_init) { t_skip_init = true; }
SkipInitGuard::~SkipInitGuard() { t_skip_init = prev_; }

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
      typed_forward_(o.typed_forward_),
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
  typed_forward_ = o.typed_forward_;
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
  // strip template arguments and namespaces: "troupe::nn::Linear" -> "Linear"; and the "Impl" of a
  // class behind a holder (TROUPE_MODULE(Net) names the class NetImpl): "NetImpl" -> "Net", as PyTorch
  // prints the class the user named
  size_t lt = full.find('<');
  std::string base = lt == std::string::npos ? full : full.substr(0, lt);
  size_t colon = base.rfind("::");
  std::string short_name = colon == std::string::npos ? base : base.substr(colon + 2);
  if (short_name.size() > 4 && short_name.compare(short_name.size() - 4, 4, "Impl") == 0)
    short_name.resize(short_name.size() - 4);
  return short_name;
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
  if (typed_forward_) return typed_forward_(*this, args, kwargs);
  if (args.size() == 1 && args[0].is_tensor() && kwargs.empty()) return forward(args[0].tensor());
  std::string got;
  for (const auto& a : args) got += (got.empty() ? "" : ", ") + a.kind();
  for (const auto& [k, v] : kwargs) got += (got.empty() ? "" : ", ") + k + "=" + v.kind();
  throw std::invalid_argument("[" + name() + "] forward takes one Tensor, got (" + got + ")");
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

OrderedDict<std::string, ModulePtr> Module::named_modules(const std::string& prefix, bool remove_duplicate) {
  OrderedDict<std::string, ModulePtr> out;
  std::unordered_set<const Module*> memo;
  // iterative pre-order walk over (prefix, module)
  std::vector<std::pair<std::string, ModulePtr>> stack{{prefix, self_ptr(this)}};
  while (!stack.empty()) {
    auto [pfx, m] = std::move(stack.back());
    stack.pop_back();
    if (remove_duplicate && !memo.insert(m.get()).second) continue;
    if (m->is_remote() && m.get() != this) {  // a hosted subtree lists its own modules
      for (auto& [k, sub] : m->named_modules(pfx, remove_duplicate)) out.insert_or_assign(k, sub);
      continue;
    }
    const auto& kids = m->children_.items();
    for (auto it = kids.rbegin(); it != kids.rend(); ++it)
      if (it->second) stack.emplace_back(pfx.empty() ? it->first : pfx + "." + it->first, it->second);
    out.insert_or_assign(pfx, std::move(m));
  }
  return out;
}

std::vector<ModulePtr> Module::modules() { return named_modules().values(); }

OrderedDict<std::string, ModulePtr> Module::named_children() const {
  OrderedDict<std::string, ModulePtr> out;
  std::unordered_set<const Module*> memo;
  for (const auto& [k, c] : children_)
    if (c && memo.insert(c.get()).second) out.insert_or_assign(k, c);
  return out;
}

std::vector<ModulePtr> Module::children() const { return named_children().values(); }

namespace {
// _named_members: walks modules (pre-order, de-duplicated when remove_duplicate) and yields the
// members of each, de-duplicating tensors by identity when remove_duplicate.
template <class Get, class Remote>
OrderedDict<std::string, Tensor> named_members(const Module& root, const std::string& prefix, bool recurse,
                                  bool remove_duplicate, Get get, Remote remote) {
  OrderedDict<std::string, Tensor> out;
  std::unordered_set<const TensorImpl*> seen;
  std::unordered_set<const Module*> memo;
  std::vector<std::pair<std::string, const Module*>> stack{{prefix, &root}};
  while (!stack.empty()) {
    auto [pfx, m] = stack.back();
    stack.pop_back();
    if (remove_duplicate && !memo.insert(m).second) continue;
    if (m != &root && m->is_remote()) {  // a hosted subtree lists its own members
      for (const auto& [k, t] : remote(*m, pfx)) {
        if (!t.defined()) continue;
        if (remove_duplicate && !seen.insert(t.impl()).second) continue;
        out.insert_or_assign(k, t);
      }
      continue;
    }
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

OrderedDict<std::string, Tensor> Module::named_parameters(const std::string& prefix, bool recurse, bool remove_duplicate) const {
  return named_members(
      *this, prefix, recurse, remove_duplicate,
      [](const Module& m) -> const OrderedDict<std::string, Tensor>& { return m.parameters_dict(); },
      [&](const Module& m, const std::string& pfx) { return m.named_parameters(pfx, true, remove_duplicate); });
}
std::vector<Tensor> Module::parameters(bool recurse) const { return named_parameters("", recurse).values(); }

OrderedDict<std::string, Tensor> Module::named_buffers(const std::string& prefix, bool recurse, bool remove_duplicate) const {
  return named_members(
      *this, prefix, recurse, remove_duplicate,
      [](const Module& m) -> const OrderedDict<std::string, Tensor>& { return m.buffers_dict(); },
      [&](const Module& m, const std::string& pfx) { return m.named_buffers(pfx, true, remove_duplicate); });
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
    if (mod->is_remote()) return mod->get_submodule(target.substr(start));  // the rest lives on its host
  }
}

Tensor Module::get_parameter(const std::string& target) {
  size_t dot = target.rfind('.');
  std::string module_path = dot == std::string::npos ? "" : target.substr(0, dot);
  std::string param_name = dot == std::string::npos ? target : target.substr(dot + 1);
  ModulePtr mod = get_submodule(module_path);
  if (mod->is_remote()) return mod->get_parameter(param_name);
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
  if (mod->is_remote()) return mod->get_buffer(buffer_name);
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

namespace {
// The first hosted subtree under `root` (pre-order; root itself excluded) and its path, or null.
const Module* first_remote(const Module& root, std::string& path) {
  std::vector<std::pair<std::string, const Module*>> stack{{"", &root}};
  while (!stack.empty()) {
    auto [pfx, m] = stack.back();
    stack.pop_back();
    if (m != &root && m->is_remote()) {
      path = pfx;
      return m;
    }
    const auto& kids = m->children_dict().items();
    for (auto it = kids.rbegin(); it != kids.rend(); ++it)
      if (it->second) stack.emplace_back(pfx.empty() ? it->first : pfx + "." + it->first, it->second.get());
  }
  return nullptr;
}

// Pre-order over the tree, each module once: local modules go to `local`; a hosted subtree (not walked
// into) goes to `remote`, which reaches it with its own virtual methods.
template <class L, class R>
void visit_split(Module& root, L local, R remote) {
  std::unordered_set<const Module*> memo;
  std::vector<Module*> stack{&root};
  while (!stack.empty()) {
    Module* m = stack.back();
    stack.pop_back();
    if (!memo.insert(m).second) continue;
    if (m != &root && m->is_remote()) {
      remote(*m);
      continue;
    }
    local(*m);
    const auto& kids = m->children_dict().items();
    for (auto it = kids.rbegin(); it != kids.rend(); ++it)
      if (it->second) stack.push_back(it->second.get());
  }
}
}  // namespace

Module& Module::apply(const ApplyFn& fn) {
  std::string path;
  if (first_remote(*this, path))
    throw std::invalid_argument("[apply] `" + path +
                                "` is hosted by an actor on another rank, where a callable cannot travel: register "
                                "the function (nn::registry::add_apply_fn(name, fn), on every rank) and call "
                                "apply(name)");
  for (const auto& c : children()) c->apply(fn);
  fn(*this);
  return *this;
}

Module& Module::apply(const std::string& registered_fn) {
  const ApplyFn& fn = registry_detail::apply_fn(registered_fn);
  for (const auto& c : children()) c->apply(registered_fn);
  fn(*this);
  return *this;
}

Module& Module::train(bool mode) {
  training_ = mode;
  for (const auto& c : children()) c->train(mode);
  return *this;
}

Module& Module::requires_grad_(bool requires_grad) {
  visit_split(
      *this,
      [&](Module& m) {
        for (auto& [k, p] : m.parameters_)
          if (p.defined()) p.requires_grad_(requires_grad);
      },
      [&](Module& m) { m.requires_grad_(requires_grad); });
  return *this;
}

void Module::zero_grad(bool set_to_none) {
  std::vector<Tensor> params;
  visit_split(
      *this,
      [&](Module& m) {
        for (auto& [k, p] : m.parameters_)
          if (p.defined()) params.push_back(p);
      },
      [&](Module& m) { m.zero_grad(set_to_none); });
  for (auto& p : params) {
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
  auto fn = [&](const Tensor& t) {
    Device dev = device ? *device : t.device();
    ScalarType dt = (dtype && t.is_floating_point()) ? *dtype : t.dtype();
    return t.to(dev, dt);
  };
  visit_split(*this, [&](Module& m) { m.apply_to_tensors(fn, false); }, [&](Module& m) { m.to(device, dtype); });
  return *this;
}

Module& Module::to(const Tensor& other, bool non_blocking) {
  return to(std::optional<Device>(other.device()), std::optional<ScalarType>(other.dtype()), non_blocking);
}

Module& Module::type(ScalarType dtype) {
  auto fn = [&](const Tensor& t) { return t.to(dtype); };
  visit_split(*this, [&](Module& m) { m.apply_to_tensors(fn, false); }, [&](Module& m) { m.type(dtype); });
  return *this;
}

Module& Module::cuda(int index) { return to(Device(kCUDA, index)); }

Module& Module::to_empty(Device device, bool recurse) {
  auto fn = [&](const Tensor& t) { return empty_like(t, TensorOptions().dtype(t.dtype()).device(device)); };
  if (!recurse) return apply_to_tensors(fn, false);
  visit_split(*this, [&](Module& m) { m.apply_to_tensors(fn, false); }, [&](Module& m) { m.to_empty(device, true); });
  return *this;
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
  auto copy_entries = [&](const OrderedDict<std::string, Tensor>& from, OrderedDict<std::string, Tensor>& mine, const char* kind) {
    OrderedDict<std::string, Tensor> out;
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

  OrderedDict<std::string, ModulePtr> kids;
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
