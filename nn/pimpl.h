// Module holders, as libtorch's ModuleHolder and TORCH_MODULE: each module class XImpl has a holder X
// that owns it through a shared_ptr, so that modules read as values:
//
//   nn::Linear fc(4, 3);                 // std::make_shared<nn::LinearImpl>(4, 3)
//   Tensor y = fc(x);                    // call: hooks, then forward
//   fc->weight;                          // the module's members
//   nn::Linear later{nullptr};           // empty until assigned
//
//   struct NetImpl : nn::Module {        // a user module behind TROUPE_MODULE(Net)
//     NetImpl() { fc = register_module("fc", nn::Linear(4, 3)); }
//     Tensor forward(Tensor x) { return fc(x); }
//     nn::Linear fc{nullptr};
//   };
//   TROUPE_MODULE(Net);
//
// `std::make_shared<nn::LinearImpl>(4, 3)` stays valid everywhere a module is taken; a holder converts
// to std::shared_ptr<nn::Module> (and to a shared_ptr of any base of its class).
#pragma once

#include <cstddef>
#include <memory>
#include <ostream>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include <troupe/nn/module.h>

namespace troupe::nn {

template <class Contained>
class ModuleHolder;

namespace detail {
template <class T, class Contained>
struct is_holder_of : std::false_type {};
template <class Contained>
struct is_holder_of<ModuleHolder<Contained>, Contained> : std::true_type {};
/// Whether T (a holder class made by TROUPE_MODULE derives from ModuleHolder) holds a Contained.
template <class T, class Contained>
inline constexpr bool holds_v = std::is_base_of_v<ModuleHolder<Contained>, std::decay_t<T>>;
}  // namespace detail

/// Owns a module of class Contained through a shared_ptr (libtorch's torch::nn::ModuleHolder).
template <class Contained>
class ModuleHolder {
  static_assert(std::is_base_of_v<Module, Contained>, "ModuleHolder holds a class derived from nn::Module");

 public:
  using ContainedType = Contained;

  /// A default-constructed module; a class without a default constructor must be given one, or
  /// nullptr for the empty state.
  ModuleHolder() : impl_(make_default()) {}
  /// The empty state: `nn::Linear fc{nullptr};` (or `= nullptr`), to be assigned later.
  ModuleHolder(std::nullptr_t) {}  // NOLINT(google-explicit-constructor)
  /// Constructs the module from these arguments: `nn::Linear fc(4, 3)`.
  template <class Head, class... Tail,
            class = std::enable_if_t<!(sizeof...(Tail) == 0 &&
                                       (detail::holds_v<Head, Contained> ||
                                        std::is_same_v<std::decay_t<Head>, std::nullptr_t> ||
                                        std::is_convertible_v<Head, std::shared_ptr<Contained>>))>>
  explicit ModuleHolder(Head&& head, Tail&&... tail)
      : impl_(std::make_shared<Contained>(std::forward<Head>(head), std::forward<Tail>(tail)...)) {
    Module::bind_forward(*impl_);
  }
  /// Holds an existing module (shared, not copied).
  ModuleHolder(std::shared_ptr<Contained> module) : impl_(std::move(module)) {  // NOLINT
    if (impl_) Module::bind_forward(*impl_);
  }

  /// Whether a module is held.
  explicit operator bool() const noexcept { return impl_ != nullptr; }
  bool is_empty() const noexcept { return impl_ == nullptr; }

  Contained* operator->() { return get(); }
  const Contained* operator->() const { return get(); }
  Contained& operator*() { return *get(); }
  const Contained& operator*() const { return *get(); }
  /// The module; throws "Accessing empty ModuleHolder" when empty.
  Contained* get() {
    check();
    return impl_.get();
  }
  const Contained* get() const {
    check();
    return impl_.get();
  }
  /// The shared_ptr that owns the module.
  const std::shared_ptr<Contained>& ptr() const {
    check();
    return impl_;
  }

  /// A shared_ptr to the module as any of its bases, std::shared_ptr<nn::Module> above all, so that a
  /// holder goes wherever a module pointer is taken.
  template <class Base, class = std::enable_if_t<std::is_base_of_v<Base, Contained>>>
  operator std::shared_ptr<Base>() const {  // NOLINT(google-explicit-constructor)
    return impl_;
  }

  /// Calls the module: its forward pre-hooks, forward and forward hooks (Module::call), with the result
  /// of the class's forward for these arguments. A forward whose arguments or result cannot travel as
  /// nn::Value is called directly.
  template <class... A>
  auto operator()(A&&... args) -> decltype(std::declval<Contained&>().forward(std::forward<A>(args)...)) {
    using R = decltype(std::declval<Contained&>().forward(std::forward<A>(args)...));
    check();
    if constexpr (detail::routes_through_call<Contained, R, A...>()) {
      Value out = impl_->call(Args{detail::to_value(std::forward<A>(args))...});
      return detail::value_conv<std::decay_t<R>>::from(std::move(out));
    } else {
      return impl_->forward(std::forward<A>(args)...);
    }
  }

  /// The module's operator[] (containers: `seq[0]`, `dict["fc"]`).
  template <class Arg>
  decltype(auto) operator[](Arg&& arg) {
    return (*get())[std::forward<Arg>(arg)];
  }

 protected:
  std::shared_ptr<Contained> impl_;

 private:
  static std::shared_ptr<Contained> make_default() {
    static_assert(std::is_default_constructible_v<Contained>,
                  "You are trying to default construct a module which has no default constructor. Use = nullptr "
                  "to give it the empty state (e.g. `Linear linear = nullptr;` instead of `Linear linear;`).");
    auto m = std::make_shared<Contained>();
    Module::bind_forward(*m);
    return m;
  }
  void check() const {
    if (!impl_) throw std::runtime_error("Accessing empty ModuleHolder");
  }
};

/// Prints repr() of the held module.
template <class C>
std::ostream& operator<<(std::ostream& os, const ModuleHolder<C>& holder) {
  return os << *holder;
}

}  // namespace troupe::nn

/// Defines the holder `Name` of the module class `Impl` (libtorch's TORCH_MODULE_IMPL).
#define TROUPE_MODULE_IMPL(Name, Impl)                                       \
  class Name : public ::troupe::nn::ModuleHolder<Impl> {                     \
   public:                                                                   \
    using ::troupe::nn::ModuleHolder<Impl>::ModuleHolder;                    \
  }

/// Defines the holder `Name` of the module class `NameImpl` (libtorch's TORCH_MODULE).
#define TROUPE_MODULE(Name) TROUPE_MODULE_IMPL(Name, Name##Impl)
