// AnyModule and NamedAnyModule (libtorch's torch::nn::AnyModule): a module of any class behind one
// type, as Sequential and ModuleList store them. Built from a holder, a shared_ptr or a module value.
//
//   nn::AnyModule any(nn::Linear(3, 4));
//   Tensor y = any.forward(x);                      // forward<Tensor> by default
//   nn::Value v = any.any_forward(x);               // the dynamic result
//   nn::Linear fc = any.get<nn::Linear>();          // back to the holder (throws on another class)
#pragma once

#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <utility>

#include <troupe/nn/module.h>
#include <troupe/nn/pimpl.h>

namespace troupe::nn {

namespace detail {
/// The class name of T for error messages ("LinearImpl").
std::string demangled_name(const std::type_info& type);
}  // namespace detail

/// Any module, held by a shared_ptr<Module>, called through Module::call (hooks run).
class AnyModule {
 public:
  /// The empty state.
  AnyModule() = default;
  /// Holds `module` (shared).
  template <class M, class = std::enable_if_t<std::is_base_of_v<Module, M>>>
  explicit AnyModule(std::shared_ptr<M> module) : module_(bind(std::move(module))), type_(&typeid(M)) {}
  /// Holds the module of a holder (shared).
  template <class M>
  explicit AnyModule(const ModuleHolder<M>& holder) : AnyModule(holder.ptr()) {}
  /// Holds a copy of a module value (libtorch moves the value into a new shared_ptr).
  template <class M, class = std::enable_if_t<std::is_base_of_v<Module, std::decay_t<M>>>>
  explicit AnyModule(M&& module) : AnyModule(std::make_shared<std::decay_t<M>>(std::forward<M>(module))) {}

  template <class M>
  AnyModule& operator=(std::shared_ptr<M> module) {
    return *this = AnyModule(std::move(module));
  }

  /// Calls the module with these arguments and returns its result as an nn::Value.
  template <class... A>
  Value any_forward(A&&... args) {
    return module()->call(Args{detail::to_value(std::forward<A>(args))...});
  }
  /// Calls the module and converts its result to R (Tensor by default).
  template <class R = Tensor, class... A>
  R forward(A&&... args) {
    return detail::value_conv<R>::from(any_forward(std::forward<A>(args)...));
  }

  /// The module as class T (a module class gives T&, a holder class gives the holder); throws naming
  /// both classes when the module is not a T.
  template <class T>
  decltype(auto) get() const {
    if constexpr (detail::is_module_holder<T>::value) {
      return T(ptr<typename T::ContainedType>());
    } else {
      return static_cast<T&>(*ptr<T>());
    }
  }
  /// The shared_ptr to the module.
  std::shared_ptr<Module> ptr() const { return module(); }
  /// The shared_ptr as class T; throws naming both classes when the module is not a T.
  template <class T>
  std::shared_ptr<T> ptr() const {
    auto p = std::dynamic_pointer_cast<T>(module());
    if (!p)
      throw std::invalid_argument("Attempted to cast module of type " + detail::demangled_name(*type_) + " to type " +
                                  detail::demangled_name(typeid(T)));
    return p;
  }
  /// The dynamic class of the module as given.
  const std::type_info& type_info() const {
    module();
    return *type_;
  }
  /// A deep copy of the module (Module::clone), on `device` when given.
  AnyModule clone(const std::optional<Device>& device = std::nullopt) const {
    AnyModule copy;
    copy.module_ = module()->clone(device);
    copy.type_ = type_;
    return copy;
  }
  bool is_empty() const noexcept { return module_ == nullptr; }

 private:
  template <class M>
  static std::shared_ptr<M> bind(std::shared_ptr<M> m) {
    if (m) Module::bind_forward(*m);
    return m;
  }
  const std::shared_ptr<Module>& module() const {
    if (!module_) throw std::runtime_error("Cannot call forward() on an empty AnyModule");
    return module_;
  }

  std::shared_ptr<Module> module_;
  const std::type_info* type_ = &typeid(void);
};

/// A name and a module: Sequential({{"fc", nn::Linear(3, 4)}, {"act", nn::ReLU()}}).
class NamedAnyModule {
 public:
  template <class M>
  NamedAnyModule(std::string name, M&& module) : name_(std::move(name)), module_(to_any(std::forward<M>(module))) {}

  const std::string& name() const noexcept { return name_; }
  AnyModule& module() noexcept { return module_; }
  const AnyModule& module() const noexcept { return module_; }

 private:
  template <class M>
  static AnyModule to_any(M&& m) {
    if constexpr (std::is_same_v<std::decay_t<M>, AnyModule>) return std::forward<M>(m);
    else if constexpr (detail::is_module_holder<std::decay_t<M>>::value) return AnyModule(m.ptr());
    else return AnyModule(std::forward<M>(m));
  }

  std::string name_;
  AnyModule module_;
};

/// Any module argument as a shared_ptr<Module>: a shared_ptr, a holder, an AnyModule, or a module
/// value (copied into a new shared_ptr); its typed forward (if any) is bound.
template <class M>
ModulePtr to_module_ptr(M&& m) {
  using D = std::decay_t<M>;
  if constexpr (std::is_same_v<D, AnyModule>) {
    return m.ptr();
  } else if constexpr (detail::is_module_holder<D>::value) {
    return m.ptr();
  } else if constexpr (std::is_convertible_v<D, ModulePtr> && !std::is_base_of_v<Module, D>) {
    if constexpr (!std::is_same_v<D, ModulePtr> && !std::is_same_v<D, std::nullptr_t>) {
      if (m) Module::bind_forward(*m);
    }
    return ModulePtr(std::forward<M>(m));
  } else {
    static_assert(std::is_base_of_v<Module, D>, "expected a module: a holder, a shared_ptr or a Module value");
    auto p = std::make_shared<D>(std::forward<M>(m));
    Module::bind_forward(*p);
    return p;
  }
}

/// Whether T is something to_module_ptr takes.
template <class T>
inline constexpr bool is_module_like_v =
    std::is_same_v<std::decay_t<T>, AnyModule> || detail::is_module_holder<std::decay_t<T>>::value ||
    (std::is_convertible_v<std::decay_t<T>, ModulePtr> && !std::is_same_v<std::decay_t<T>, std::nullptr_t>) ||
    std::is_base_of_v<Module, std::decay_t<T>>;

}  // namespace troupe::nn
