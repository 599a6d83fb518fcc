// Module: the base of every layer and model, with torch.nn.Module's API (parameters, buffers,
// submodules, hooks, apply, train/eval, to, state_dict / load_state_dict, printing).
//
// Every method that walks the tree is virtual, so that a proxy for a subtree hosted on another rank
// can implement it with messages. Hooks and apply() take a plain callable, or the name of a function
// registered in nn/registry.h (names resolve on every rank, since every rank runs the same binary).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include <troupe/nn/state_dict.h>
#include <troupe/nn/typed_forward.h>
#include <troupe/nn/value.h>
#include <troupe/util/ordered_dict.h>
#include <troupe/tensor/tensor.h>

namespace troupe::nn {

class Module;
using ModulePtr = std::shared_ptr<Module>;

namespace detail {
/// Whether M is a module holder (nn/pimpl.h: `nn::Linear` holding a LinearImpl).
template <class M, class = void>
struct is_module_holder : std::false_type {};
template <class M>
struct is_module_holder<M, std::void_t<typename M::ContainedType>> : std::true_type {};
/// The module class of T: T itself, or the class a holder T holds.
template <class T, bool = is_module_holder<T>::value>
struct held_class {
  using type = T;
};
template <class T>
struct held_class<T, true> {
  using type = typename T::ContainedType;
};
}  // namespace detail

/// nn.Parameter(t, requires_grad): a leaf sharing t's data, with requires_grad set.
Tensor Parameter(const Tensor& t, bool requires_grad = true);

/// What a deep copy has made so far (copy.deepcopy's memo): source module -> its copy, source
/// TensorImpl -> its copy, so that what is shared in the source is shared in the copy.
struct CloneMemo {
  std::unordered_map<const Module*, ModulePtr> modules;
  std::unordered_map<const void*, Tensor> tensors;
};

/// What load_state_dict returns (and what its post-hooks may edit).
struct IncompatibleKeys {
  std::vector<std::string> missing_keys;
  std::vector<std::string> unexpected_keys;
};

// ---- hook signatures (the return value, when present, replaces what the hook received)
using ApplyFn = std::function<void(Module&)>;
using ForwardPreHook = std::function<std::optional<Args>(Module&, const Args&)>;
using ForwardPreHookWithKwargs =
    std::function<std::optional<std::pair<Args, Kwargs>>(Module&, const Args&, const Kwargs&)>;
using ForwardHook = std::function<std::optional<Value>(Module&, const Args&, const Value&)>;
using ForwardHookWithKwargs = std::function<std::optional<Value>(Module&, const Args&, const Kwargs&, const Value&)>;
using BackwardPreHook = std::function<std::optional<std::vector<Tensor>>(Module&, const std::vector<Tensor>& grad_output)>;
using BackwardHook = std::function<std::optional<std::vector<Tensor>>(
    Module&, const std::vector<Tensor>& grad_input, const std::vector<Tensor>& grad_output)>;
using StateDictPreHook = std::function<void(Module&, const std::string& prefix, bool keep_vars)>;
using LoadStateDictPostHook = std::function<void(Module&, IncompatibleKeys&)>;

/// Returned by every register_*_hook; remove() unregisters the hook, and a second remove() does nothing.
class RemovableHandle {
 public:
  RemovableHandle() = default;
  explicit RemovableHandle(std::function<void()> remover)
      : remover_(std::make_shared<std::function<void()>>(std::move(remover))) {}
  void remove() {
    if (remover_ && *remover_) {
      auto f = std::move(*remover_);
      *remover_ = nullptr;
      f();
    }
  }
  /// True until remove() was called.
  bool active() const { return remover_ && *remover_; }

 private:
  std::shared_ptr<std::function<void()>> remover_;
};

/// What load_state_dict would find, without loading: the key lists and the other errors (size
/// mismatches, None entries), in PyTorch's texts.
struct StateDictCheck {
  IncompatibleKeys keys;
  std::vector<std::string> errors;
};

/// Options of a forward hook registration (prepend, always_call). with_kwargs follows from the
/// hook's signature.
struct HookOptions {
  bool prepend = false;
  bool always_call = false;
};

namespace detail {
template <class T> struct is_optional : std::false_type {};
template <class T> struct is_optional<std::optional<T>> : std::true_type {};
/// Wraps a hook returning R (void, nullopt-able optional, or a replacement value) into the canonical
/// signature returning std::optional<Out>.
template <class Out, class R>
std::optional<Out> to_optional(R&& r) {
  if constexpr (is_optional<std::decay_t<R>>::value) {
    if (!r) return std::nullopt;
    return std::optional<Out>(std::in_place, std::move(*r));
  } else {
    return std::optional<Out>(std::in_place, std::forward<R>(r));
  }
}
/// The global hooks of one call and the state of its full backward hooks (nn/module_hooks.cpp).
struct GlobalHookSnapshot;
struct BackwardHookState;
}  // namespace detail

/// Base class for all neural network modules.
class Module : public std::enable_shared_from_this<Module> {
 public:
  Module();
  /// `name` overrides the class name used when printing.
  explicit Module(std::string name);
  virtual ~Module();
  /// Copies the dicts (sharing the tensors and children) and the hooks; the copy gets its own
  /// lifetime token, so hooks of either never outlive their module.
  Module(const Module& other);
  Module& operator=(const Module& other);

  // ---------------------------------------------------------------------------------------------
  // Identity and printing

  /// The class name as printed ("Linear"); by default the demangled type name without namespaces.
  virtual std::string name() const;
  /// Extra text inside the parentheses of the printed form ("in_features=2, out_features=2, bias=True").
  virtual std::string extra_repr() const { return ""; }
  /// The printed tree, exactly as PyTorch's repr(module).
  virtual std::string repr() const;
  /// True for a proxy of a subtree hosted elsewhere (actors::RemoteModule): the tree walks of this class
  /// hand such a subtree to its virtual methods (named_parameters, named_modules, state_dict, to, apply,
  /// load_state_dict, ...) instead of walking into it.
  virtual bool is_remote() const { return false; }
  /// dynamic_cast to a subclass; null when this module is not one. A holder names its class:
  /// as<nn::Linear>() is as<nn::LinearImpl>().
  template <class M>
  auto* as() {
    if constexpr (detail::is_module_holder<M>::value) return dynamic_cast<typename M::ContainedType*>(this);
    else return dynamic_cast<M*>(this);
  }
  template <class M>
  const auto* as() const {
    if constexpr (detail::is_module_holder<M>::value) return dynamic_cast<const typename M::ContainedType*>(this);
    else return dynamic_cast<const M*>(this);
  }

  /// A deep copy (copy.deepcopy(module)) with its tensors on `device` when given. Implemented by
  /// nn::Cloneable; the default throws.
  virtual ModulePtr clone(const std::optional<Device>& device = std::nullopt) const;

  // ---------------------------------------------------------------------------------------------
  // Forward

  /// The computation of a module with one tensor in and one out. Override this, or forward_args.
  virtual Tensor forward(const Tensor& input);
  /// The computation for any arguments. The default calls the class's typed forward when one was
  /// bound (bind_forward), else passes a single tensor argument to forward().
  virtual Value forward_args(const Args& args, const Kwargs& kwargs);
  /// Makes forward_args reach M's own `forward(...)` when M declares one with other parameters than
  /// the virtual `forward(const Tensor&)` (libtorch's style: `Tensor forward(Tensor x, double s)`).
  /// Holders, register_module and the containers call it, since they know the class.
  template <class M>
  static void bind_forward(M& module) {
    if constexpr (detail::has_typed_forward<M>()) {
      Module& base = module;
      if (!base.typed_forward_) base.typed_forward_ = &detail::typed_forward_thunk<M>;
    }
  }
  /// Runs the forward pre-hooks, forward_args and the forward hooks (torch's __call__). A module that
  /// was placed elsewhere (placed()) passes the call to its proxy.
  virtual Value call(Args args, Kwargs kwargs = {});
  /// The proxy that runs this module's calls since actors::place() moved it to a host (a member holder
  /// such as `fc` in a parent's forward still reaches it); null normally.
  const ModulePtr& placed() const { return placed_; }
  /// Sets placed() (actors::place does).
  void set_placed(ModulePtr proxy) { placed_ = std::move(proxy); }
  /// call() with one tensor, returning the tensor output.
  Tensor operator()(const Tensor& input);
  /// call() with any arguments.
  Value operator()(Args args, Kwargs kwargs = {});

  // ---------------------------------------------------------------------------------------------
  // Registration

  /// Adds a parameter (undefined = None: reserves the name, left out of state_dict). Returns the
  /// stored handle. A defined tensor is made a leaf parameter with requires_grad (see Parameter()).
  Tensor& register_parameter(const std::string& name, Tensor param, bool requires_grad = true);
  /// Adds a buffer (undefined = None); non-persistent buffers are left out of state_dict.
  Tensor& register_buffer(const std::string& name, Tensor tensor, bool persistent = true);
  /// Adds (or replaces) a child module; null reserves the name. Returns the module.
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    if (module) bind_forward(*module);
    add_module_impl(name, module);
    return module;
  }
  /// register_module("fc", nn::Linear(4, 3)): registers the held module and returns it (assignable to
  /// a holder member: `fc = register_module("fc", nn::Linear(4, 3));`).
  template <class H, class = std::enable_if_t<detail::is_module_holder<H>::value>>
  std::shared_ptr<typename H::ContainedType> register_module(const std::string& name, H holder) {
    return register_module(name, holder.ptr());
  }
  /// Alias of register_module.
  template <class M>
  auto add_module(const std::string& name, M module) {
    return register_module(name, std::move(module));
  }
  /// Whether `name` is one of this module's buffers and persistent.
  bool is_persistent_buffer(const std::string& name) const;

  // ---------------------------------------------------------------------------------------------
  // Traversal (dotted names as in PyTorch: "net.l0.weight")

  virtual OrderedDict<std::string, Tensor> named_parameters(const std::string& prefix = "", bool recurse = true,
                                               bool remove_duplicate = true) const;
  std::vector<Tensor> parameters(bool recurse = true) const;
  virtual OrderedDict<std::string, Tensor> named_buffers(const std::string& prefix = "", bool recurse = true,
                                            bool remove_duplicate = true) const;
  std::vector<Tensor> buffers(bool recurse = true) const;
  /// Immediate children, without null entries.
  virtual OrderedDict<std::string, ModulePtr> named_children() const;
  std::vector<ModulePtr> children() const;
  /// Pre-order over the tree, this module first (as shared_ptr: call on a module held by shared_ptr).
  virtual OrderedDict<std::string, ModulePtr> named_modules(const std::string& prefix = "", bool remove_duplicate = true);
  std::vector<ModulePtr> modules();

  /// The module at a dotted path ("" is this module); errors as PyTorch's AttributeError texts.
  virtual ModulePtr get_submodule(const std::string& target);
  virtual Tensor get_parameter(const std::string& target);
  virtual Tensor get_buffer(const std::string& target);

  /// Direct members, including null entries (PyTorch's _parameters, _buffers, _modules).
  const OrderedDict<std::string, Tensor>& parameters_dict() const { return parameters_; }
  const OrderedDict<std::string, Tensor>& buffers_dict() const { return buffers_; }
  const OrderedDict<std::string, ModulePtr>& children_dict() const { return children_; }

  // ---------------------------------------------------------------------------------------------
  // Tree-wide operations

  /// Calls fn on every submodule (children first, recursively) and then on this module.
  virtual Module& apply(const ApplyFn& fn);
  /// apply() with a function registered by name (nn/registry.h).
  virtual Module& apply(const std::string& registered_fn);
  /// Sets training mode on this module and every descendant.
  virtual Module& train(bool mode = true);
  Module& eval() { return train(false); }
  bool is_training() const { return training_; }
  /// Sets requires_grad on every parameter.
  virtual Module& requires_grad_(bool requires_grad = true);
  /// Clears the gradients of every parameter (undefined when set_to_none, else zero-filled).
  virtual void zero_grad(bool set_to_none = true);

  /// Moves floating-point parameters and buffers to `dtype` (integral ones keep theirs) and all of
  /// them to `device`. Parameters keep their identity (their data is replaced, as param.data = ...).
  virtual Module& to(std::optional<Device> device, std::optional<ScalarType> dtype = std::nullopt,
                     bool non_blocking = false);
  Module& to(Device device, bool non_blocking = false) { return to(std::optional<Device>(device), std::nullopt, non_blocking); }
  Module& to(ScalarType dtype, bool non_blocking = false) { return to(std::nullopt, dtype, non_blocking); }
  /// to(tensor.device(), tensor.dtype()).
  Module& to(const Tensor& other, bool non_blocking = false);
  Module& float_() { return to(kFloat32); }
  Module& double_() { return to(kFloat64); }
  Module& half() { return to(kFloat16); }
  Module& bfloat16() { return to(kBFloat16); }
  /// Casts every parameter and buffer (integral ones too) to dtype.
  virtual Module& type(ScalarType dtype);
  Module& cpu() { return to(Device(kCPU)); }
  /// Moves to CUDA device `index`; a clear error without a CUDA build or device.
  Module& cuda(int index = 0);
  /// Replaces every parameter and buffer by uninitialised storage on `device`.
  virtual Module& to_empty(Device device, bool recurse = true);
  /// No-op on CPU tensors in one process (tensors live in process memory); kept for the API.
  Module& share_memory() { return *this; }
  /// Applies fn to every parameter, its gradient and every buffer (param.data = fn(param)).
  virtual Module& apply_to_tensors(const std::function<Tensor(const Tensor&)>& fn, bool recurse = true);

  // ---------------------------------------------------------------------------------------------
  // State

  /// Parameters, persistent buffers and extra state of the tree, in PyTorch's order. Detached
  /// unless keep_vars.
  virtual StateDict state_dict(const std::string& prefix = "", bool keep_vars = false);
  /// Copies (or with assign, adopts) the tensors of `state_dict`. Throws PyTorch's
  /// "Error(s) in loading state_dict for <Class>:" message; nothing is loaded when it throws.
  virtual IncompatibleKeys load_state_dict(const StateDict& state_dict, bool strict = true, bool assign = false);
  /// What load_state_dict(state_dict) would report (missing and unexpected keys, size mismatches),
  /// without changing anything. With a prefix, this module's entries are those under `prefix` (as
  /// PyTorch's _load_from_state_dict sees them inside a parent) and the keys reported keep it.
  virtual StateDictCheck check_state_dict(const StateDict& state_dict, const std::string& prefix = "");
  /// Extra state to store under "_extra_state"; nullopt (the default) means the module has none.
  virtual std::optional<Tensor> get_extra_state() const { return std::nullopt; }
  /// Receives the "_extra_state" entry on load; the default throws.
  virtual void set_extra_state(const Tensor& state);

  // ---------------------------------------------------------------------------------------------
  // Hooks. Each register_* accepts a callable (its return type may be void, std::optional<T> or T)
  // or the name of a registered function.

  /// hook(module, args) -> nullopt or replacement args (a Tensor or Value is wrapped into Args);
  /// or hook(module, args, kwargs) -> nullopt or (args, kwargs).
  template <class F>
    requires(!std::is_convertible_v<F, std::string>)
  RemovableHandle register_forward_pre_hook(F&& hook, bool prepend = false);
  RemovableHandle register_forward_pre_hook(const std::string& registered_hook, bool prepend = false);
  /// hook(module, args, output) -> nullopt or replacement output; or hook(module, args, kwargs, output).
  template <class F>
    requires(!std::is_convertible_v<F, std::string>)
  RemovableHandle register_forward_hook(F&& hook, HookOptions options = {});
  RemovableHandle register_forward_hook(const std::string& registered_hook, HookOptions options = {});
  /// hook(module, grad_output) -> nullopt or replacement grad_output (same count).
  template <class F>
    requires(!std::is_convertible_v<F, std::string>)
  RemovableHandle register_full_backward_pre_hook(F&& hook, bool prepend = false);
  RemovableHandle register_full_backward_pre_hook(const std::string& registered_hook, bool prepend = false);
  /// hook(module, grad_input, grad_output) -> nullopt or replacement grad_input (same count).
  template <class F>
    requires(!std::is_convertible_v<F, std::string>)
  RemovableHandle register_full_backward_hook(F&& hook, bool prepend = false);
  RemovableHandle register_full_backward_hook(const std::string& registered_hook, bool prepend = false);
  /// Legacy: hook on the grad_fn of the output; grad_input/grad_output are that node's (deprecated in
  /// PyTorch in favour of register_full_backward_hook). Can't be mixed with full backward hooks.
  template <class F>
    requires(!std::is_convertible_v<F, std::string>)
  RemovableHandle register_backward_hook(F&& hook);
  RemovableHandle register_backward_hook(const std::string& registered_hook);
  /// hook(module, prefix, keep_vars), called before this module's state_dict entries are written.
  virtual RemovableHandle register_state_dict_pre_hook(StateDictPreHook hook, const std::string& registered_name = "");
  RemovableHandle register_state_dict_pre_hook(const std::string& registered_hook);
  /// hook(module, incompatible_keys) after load_state_dict; may edit the key lists.
  virtual RemovableHandle register_load_state_dict_post_hook(LoadStateDictPostHook hook,
                                                             const std::string& registered_name = "");
  RemovableHandle register_load_state_dict_post_hook(const std::string& registered_hook);

  // Canonical registration (virtual, so a remote proxy can forward it; `registered_name` is the
  // registry name of the hook when it has one, else empty).
  virtual RemovableHandle add_forward_pre_hook(ForwardPreHookWithKwargs hook, bool prepend, bool with_kwargs,
                                               const std::string& registered_name);
  virtual RemovableHandle add_forward_hook(ForwardHookWithKwargs hook, HookOptions options, bool with_kwargs,
                                           const std::string& registered_name);
  virtual RemovableHandle add_backward_pre_hook(BackwardPreHook hook, bool prepend, const std::string& registered_name);
  virtual RemovableHandle add_backward_hook(BackwardHook hook, bool prepend, const std::string& registered_name);
  virtual RemovableHandle add_legacy_backward_hook(BackwardHook hook, const std::string& registered_name);

  /// Number of hooks of each kind on this module (for tests and proxies).
  size_t num_forward_pre_hooks() const { return forward_pre_hooks_.size(); }
  size_t num_forward_hooks() const { return forward_hooks_.size(); }
  size_t num_backward_hooks() const { return backward_hooks_.size() + backward_pre_hooks_.size(); }

 protected:
  /// Registers a child (the non-template part of register_module).
  void add_module_impl(const std::string& name, ModulePtr module);
  /// Writes this module's own entries (parameters, persistent buffers, extra state) into `out`.
  virtual void save_to_state_dict(StateDict& out, const std::string& prefix, bool keep_vars) const;
  /// clone() within one deep copy: returns the copy already in `memo`, else makes one. The default
  /// calls clone() (which throws unless overridden).
  virtual ModulePtr clone_with_memo(const std::optional<Device>& device, CloneMemo& memo) const;
  /// Makes this module (a fresh copy whose reset() ran) a deep copy of `src`: values, gradients,
  /// requires_grad, persistence, training flag and hooks, recursively; see nn/cloneable.h.
  void copy_state_from_(const Module& src, const std::optional<Device>& device, CloneMemo& memo);

  bool training_ = true;
  OrderedDict<std::string, Tensor> parameters_;
  OrderedDict<std::string, Tensor> buffers_;
  std::vector<std::string> non_persistent_buffers_;
  OrderedDict<std::string, ModulePtr> children_;

 private:
  template <class F>
  struct Hook {
    int64_t id;
    F fn;
    std::string registered_name;
    bool with_kwargs = false;
    bool always_call = false;
  };
  friend struct ModuleAccess;
  friend struct LoadPlanner;  // load_state_dict's validation pass (module_state.cpp)

  // The steps of call(), in PyTorch's order (nn/module_hooks.cpp).
  void run_forward_pre_hooks(const detail::GlobalHookSnapshot& global, Args& args, Kwargs& kwargs);
  std::shared_ptr<detail::BackwardHookState> route_inputs_to_backward_hooks(const detail::GlobalHookSnapshot& global,
                                                                            Args& args);
  Value run_forward_with_hooks(const detail::GlobalHookSnapshot& global, const Args& args, const Kwargs& kwargs);
  void run_always_call_hooks(const detail::GlobalHookSnapshot& global, const Args& args, const Kwargs& kwargs,
                             Value& result, const std::set<int64_t>& called_always);
  void route_outputs_to_backward_hooks(const std::shared_ptr<detail::BackwardHookState>& bw, Value& result);
  void attach_legacy_backward_hooks(const Value& result);

  std::string name_override_;
  ModulePtr placed_;
  /// Set by bind_forward: forward_args unpacks into the class's typed forward.
  Value (*typed_forward_)(Module&, const Args&, const Kwargs&) = nullptr;
  std::vector<Hook<ForwardPreHookWithKwargs>> forward_pre_hooks_;
  std::vector<Hook<ForwardHookWithKwargs>> forward_hooks_;
  std::vector<Hook<BackwardPreHook>> backward_pre_hooks_;
  std::vector<Hook<BackwardHook>> backward_hooks_;
  std::vector<Hook<BackwardHook>> legacy_backward_hooks_;
  std::vector<Hook<StateDictPreHook>> state_dict_pre_hooks_;
  std::vector<Hook<LoadStateDictPostHook>> load_post_hooks_;
  /// Hooks hold a weak reference to this block so that a handle outliving the module is harmless.
  std::shared_ptr<int> alive_ = std::make_shared<int>(0);
};

/// Prints repr(module).
std::ostream& operator<<(std::ostream& os, const Module& m);

/// While one lives on this thread, placed() does not redirect calls: a host actor that runs a module
/// actors::place() handed to it in the same process runs it here (actors/ uses it).
class PlacedBypass {
 public:
  PlacedBypass();
  ~PlacedBypass();
  PlacedBypass(const PlacedBypass&) = delete;
  PlacedBypass& operator=(const PlacedBypass&) = delete;
  /// True while a PlacedBypass lives on this thread.
  static bool active();

 private:
  bool prev_;
};

// ---- global hooks (torch.nn.modules.module.register_module_*): run before every module's own hooks
RemovableHandle register_module_forward_pre_hook(ForwardPreHook hook);
RemovableHandle register_module_forward_hook(ForwardHook hook, bool always_call = false);
RemovableHandle register_module_full_backward_pre_hook(BackwardPreHook hook);
RemovableHandle register_module_full_backward_hook(BackwardHook hook);

/// Creates a module without running its parameter initialisation (torch.nn.utils.skip_init): the
/// module is built with its parameters and buffers left uninitialised.
template <class M, class... A>
std::shared_ptr<M> skip_init(A&&... args);

/// True while skip_init is constructing a module: nn::init functions and reset_parameters() of the
/// built-in layers do nothing then.
bool initialization_skipped();

/// Scope that makes initialization_skipped() true (used by skip_init).
class SkipInitGuard {
 public:
  SkipInitGuard();
  ~SkipInitGuard();
  SkipInitGuard(const SkipInitGuard&) = delete;
  SkipInitGuard& operator=(const SkipInitGuard&) = delete;

 private:
  bool prev_;
};

template <class M, class... A>
std::shared_ptr<M> skip_init(A&&... args) {
  SkipInitGuard guard;
  return std::make_shared<M>(std::forward<A>(args)...);
}

/// The named function of kind Fn from the registry (defined in registry.cpp).
namespace registry_detail {
const ApplyFn& apply_fn(const std::string& name);
const ForwardPreHook& forward_pre_hook(const std::string& name);
const ForwardHook& forward_hook(const std::string& name);
const BackwardPreHook& backward_pre_hook(const std::string& name);
const BackwardHook& backward_hook(const std::string& name);
const StateDictPreHook& state_dict_pre_hook(const std::string& name);
const LoadStateDictPostHook& load_state_dict_post_hook(const std::string& name);
}  // namespace registry_detail

// ---- template definitions

template <class F>
  requires(!std::is_convertible_v<F, std::string>)
RemovableHandle Module::register_forward_pre_hook(F&& hook, bool prepend) {
  if constexpr (std::is_invocable_v<F&, Module&, const Args&, const Kwargs&>) {
    using R = std::invoke_result_t<F&, Module&, const Args&, const Kwargs&>;
    auto fn = [h = std::forward<F>(hook)](Module& m, const Args& a, const Kwargs& k)
        -> std::optional<std::pair<Args, Kwargs>> {
      if constexpr (std::is_void_v<R>) {
        h(m, a, k);
        return std::nullopt;
      } else {
        return detail::to_optional<std::pair<Args, Kwargs>>(h(m, a, k));
      }
    };
    return add_forward_pre_hook(std::move(fn), prepend, true, "");
  } else {
    static_assert(std::is_invocable_v<F&, Module&, const Args&>,
                  "forward pre-hook must be callable as hook(Module&, const Args&) or hook(Module&, const Args&, const Kwargs&)");
    using R = std::invoke_result_t<F&, Module&, const Args&>;
    auto fn = [h = std::forward<F>(hook)](Module& m, const Args& a, const Kwargs& k)
        -> std::optional<std::pair<Args, Kwargs>> {
      if constexpr (std::is_void_v<R>) {
        h(m, a);
        return std::nullopt;
      } else if constexpr (std::is_same_v<std::decay_t<R>, std::vector<Tensor>>) {
        auto r = h(m, a);
        return std::make_pair(Args(r.begin(), r.end()), k);
      } else if constexpr (std::is_convertible_v<R, Args> || detail::is_optional<std::decay_t<R>>::value) {
        auto r = detail::to_optional<Args>(h(m, a));
        if (!r) return std::nullopt;
        return std::make_pair(std::move(*r), k);
      } else {
        // a single value is wrapped into a one-element tuple, as PyTorch does
        return std::make_pair(Args{Value(h(m, a))}, k);
      }
    };
    return add_forward_pre_hook(std::move(fn), prepend, false, "");
  }
}

template <class F>
  requires(!std::is_convertible_v<F, std::string>)
RemovableHandle Module::register_forward_hook(F&& hook, HookOptions options) {
  if constexpr (std::is_invocable_v<F&, Module&, const Args&, const Kwargs&, const Value&>) {
    using R = std::invoke_result_t<F&, Module&, const Args&, const Kwargs&, const Value&>;
    auto fn = [h = std::forward<F>(hook)](Module& m, const Args& a, const Kwargs& k, const Value& out)
        -> std::optional<Value> {
      if constexpr (std::is_void_v<R>) {
        h(m, a, k, out);
        return std::nullopt;
      } else {
        return detail::to_optional<Value>(h(m, a, k, out));
      }
    };
    return add_forward_hook(std::move(fn), options, true, "");
  } else {
    static_assert(std::is_invocable_v<F&, Module&, const Args&, const Value&>,
                  "forward hook must be callable as hook(Module&, const Args&, const Value& output) or "
                  "hook(Module&, const Args&, const Kwargs&, const Value& output)");
    using R = std::invoke_result_t<F&, Module&, const Args&, const Value&>;
    auto fn = [h = std::forward<F>(hook)](Module& m, const Args& a, const Kwargs&, const Value& out)
        -> std::optional<Value> {
      if constexpr (std::is_void_v<R>) {
        h(m, a, out);
        return std::nullopt;
      } else {
        return detail::to_optional<Value>(h(m, a, out));
      }
    };
    return add_forward_hook(std::move(fn), options, false, "");
  }
}

namespace detail {
template <class F, class... A>
BackwardHook wrap_grad_hook(F&& hook) {
  using R = std::invoke_result_t<F&, Module&, const std::vector<Tensor>&, const std::vector<Tensor>&>;
  return [h = std::forward<F>(hook)](Module& m, const std::vector<Tensor>& gi,
                                     const std::vector<Tensor>& go) -> std::optional<std::vector<Tensor>> {
    if constexpr (std::is_void_v<R>) {
      h(m, gi, go);
      return std::nullopt;
    } else {
      return to_optional<std::vector<Tensor>>(h(m, gi, go));
    }
  };
}
}  // namespace detail

template <class F>
  requires(!std::is_convertible_v<F, std::string>)
RemovableHandle Module::register_full_backward_pre_hook(F&& hook, bool prepend) {
  static_assert(std::is_invocable_v<F&, Module&, const std::vector<Tensor>&>,
                "backward pre-hook must be callable as hook(Module&, const std::vector<Tensor>& grad_output)");
  using R = std::invoke_result_t<F&, Module&, const std::vector<Tensor>&>;
  BackwardPreHook fn = [h = std::forward<F>(hook)](Module& m, const std::vector<Tensor>& go)
      -> std::optional<std::vector<Tensor>> {
    if constexpr (std::is_void_v<R>) {
      h(m, go);
      return std::nullopt;
    } else {
      return detail::to_optional<std::vector<Tensor>>(h(m, go));
    }
  };
  return add_backward_pre_hook(std::move(fn), prepend, "");
}

template <class F>
  requires(!std::is_convertible_v<F, std::string>)
RemovableHandle Module::register_full_backward_hook(F&& hook, bool prepend) {
  static_assert(std::is_invocable_v<F&, Module&, const std::vector<Tensor>&, const std::vector<Tensor>&>,
                "backward hook must be callable as hook(Module&, grad_input, grad_output)");
  return add_backward_hook(detail::wrap_grad_hook(std::forward<F>(hook)), prepend, "");
}

template <class F>
  requires(!std::is_convertible_v<F, std::string>)
RemovableHandle Module::register_backward_hook(F&& hook) {
  static_assert(std::is_invocable_v<F&, Module&, const std::vector<Tensor>&, const std::vector<Tensor>&>,
                "backward hook must be callable as hook(Module&, grad_input, grad_output)");
  return add_legacy_backward_hook(detail::wrap_grad_hook(std::forward<F>(hook)), "");
}

}  // namespace troupe::nn
