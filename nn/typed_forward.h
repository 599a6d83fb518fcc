// Typed forward signatures: a module may declare `Tensor forward(Tensor x, double scale)` (libtorch's
// style, not an override of the virtual one-tensor forward). These helpers convert between such a
// signature and the dynamic Args -> Value call that hooks, containers and remote hosts use, so that
// `net(x, 0.5)` through a holder, a Sequential or AnyModule reaches the typed forward with its hooks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <troupe/nn/value.h>
#include <troupe/tensor/tensor.h>

namespace troupe::nn {

class Module;

namespace detail {

/// value_conv<T>::to(T) -> Value and value_conv<T>::from(Value) -> T for the types a typed forward
/// may take or return; undefined for any other T (such a forward is called directly, without hooks).
template <class T, class = void>
struct value_conv;

template <>
struct value_conv<Value> {
  static Value to(Value v) { return v; }
  static Value from(Value v) { return v; }
};
template <>
struct value_conv<Tensor> {
  static Value to(Tensor t) { return Value(std::move(t)); }
  static Tensor from(const Value& v) { return v.tensor(); }
};
template <class T>
struct value_conv<T, std::enable_if_t<std::is_floating_point_v<T>>> {
  static Value to(T d) { return Value(static_cast<double>(d)); }
  static T from(const Value& v) { return static_cast<T>(v.to_double()); }
};
template <class T>
struct value_conv<T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>>> {
  static Value to(T i) { return Value(static_cast<int64_t>(i)); }
  static T from(const Value& v) { return static_cast<T>(v.to_int()); }
};
template <>
struct value_conv<bool> {
  static Value to(bool b) { return Value(b); }
  static bool from(const Value& v) { return v.to_bool(); }
};
template <>
struct value_conv<std::string> {
  static Value to(std::string s) { return Value(std::move(s)); }
  static std::string from(const Value& v) { return v.str(); }
};
template <>
struct value_conv<std::vector<Tensor>> {
  static Value to(std::vector<Tensor> ts) { return Value(std::move(ts)); }
  static std::vector<Tensor> from(const Value& v) { return v.tuple(); }
};
template <>
struct value_conv<std::optional<Tensor>> {
  static Value to(std::optional<Tensor> t) { return t ? Value(std::move(*t)) : Value(); }
  static std::optional<Tensor> from(const Value& v) {
    if (v.is_none()) return std::nullopt;
    return v.tensor();
  }
};
/// A tensor or a (nested) tuple of tensors: `std::tuple<Tensor, std::tuple<Tensor, Tensor>>` (LSTM's
/// output) travels as the flat tuple of its tensors, in order.
template <class T>
struct tensor_tree : std::false_type {};
template <>
struct tensor_tree<Tensor> : std::true_type {
  static constexpr size_t count = 1;
  static void flatten(const Tensor& t, std::vector<Tensor>& out) { out.push_back(t); }
  static Tensor build(const std::vector<Tensor>& ts, size_t& pos) { return ts[pos++]; }
};
template <class... Ts>
struct tensor_tree<std::tuple<Ts...>> : std::bool_constant<(tensor_tree<Ts>::value && ...)> {
  static constexpr size_t count = (size_t{0} + ... + tensor_tree<Ts>::count);
  static void flatten(const std::tuple<Ts...>& t, std::vector<Tensor>& out) {
    std::apply([&](const auto&... x) { (tensor_tree<std::decay_t<decltype(x)>>::flatten(x, out), ...); }, t);
  }
  static std::tuple<Ts...> build(const std::vector<Tensor>& ts, size_t& pos) {
    return std::tuple<Ts...>{tensor_tree<Ts>::build(ts, pos)...};  // braces: left to right
  }
};

template <class... Ts>
struct value_conv<std::tuple<Ts...>, std::enable_if_t<tensor_tree<std::tuple<Ts...>>::value>> {
  using Tree = tensor_tree<std::tuple<Ts...>>;
  static Value to(const std::tuple<Ts...>& t) {
    std::vector<Tensor> out;
    out.reserve(Tree::count);
    Tree::flatten(t, out);
    return Value(std::move(out));
  }
  static std::tuple<Ts...> from(const Value& v) {
    const auto& ts = v.tuple();
    if (ts.size() != Tree::count)
      throw std::invalid_argument("forward returned a tuple of " + std::to_string(ts.size()) + " tensors, expected " +
                                  std::to_string(Tree::count));
    size_t pos = 0;
    return Tree::build(ts, pos);
  }
};
/// An optional tuple of tensors (LSTM's initial state): None or the tuple.
template <class... Ts>
struct value_conv<std::optional<std::tuple<Ts...>>, std::enable_if_t<tensor_tree<std::tuple<Ts...>>::value>> {
  static Value to(const std::optional<std::tuple<Ts...>>& t) {
    return t ? value_conv<std::tuple<Ts...>>::to(*t) : Value();
  }
  static std::optional<std::tuple<Ts...>> from(const Value& v) {
    if (v.is_none()) return std::nullopt;
    return value_conv<std::tuple<Ts...>>::from(v);
  }
};
template <>
struct value_conv<const char*> {
  static Value to(const char* s) { return Value(std::string(s)); }
};

template <class T, class = void>
struct has_to_value : std::false_type {};
template <class T>
struct has_to_value<T, std::void_t<decltype(value_conv<T>::to(std::declval<T>()))>> : std::true_type {};
template <class T, class = void>
struct has_from_value : std::false_type {};
template <class T>
struct has_from_value<T, std::void_t<decltype(value_conv<T>::from(std::declval<const Value&>()))>> : std::true_type {};

/// Whether a value of type T (as passed) can travel as a Value.
template <class T>
inline constexpr bool to_value_v = has_to_value<std::decay_t<T>>::value;
/// Whether T can be rebuilt from a Value (a typed forward's parameter or result type).
template <class T>
inline constexpr bool from_value_v = has_from_value<std::decay_t<T>>::value;

template <class T>
Value to_value(T&& x) {
  return value_conv<std::decay_t<T>>::to(std::forward<T>(x));
}

// ---- member-function traits
template <class F>
struct member_fn {
  static constexpr bool valid = false;
};
template <class R, class C, class... P>
struct member_fn<R (C::*)(P...)> {
  static constexpr bool valid = true;
  using result = R;
  using cls = C;
  using params = std::tuple<P...>;
};
template <class R, class C, class... P>
struct member_fn<R (C::*)(P...) const> : member_fn<R (C::*)(P...)> {};

/// &M::forward when it names exactly one function (not overloaded, not a template).
template <class M, class = void>
struct unique_forward {
  static constexpr bool valid = false;
};
template <class M>
struct unique_forward<M, std::void_t<decltype(&M::forward)>> : member_fn<decltype(&M::forward)> {};

template <class Tuple>
struct all_from_value;
template <class... P>
struct all_from_value<std::tuple<P...>> : std::bool_constant<(from_value_v<P> && ...)> {};

/// M declares a forward of its own that is not the virtual `Tensor forward(const Tensor&)`, and its
/// parameters and result convert to and from Value: such a forward gets a thunk (typed_forward_thunk).
template <class M>
constexpr bool has_typed_forward() {
  using F = unique_forward<M>;
  if constexpr (!F::valid) {
    return false;
  } else if constexpr (std::is_same_v<typename F::cls, Module>) {
    return false;
  } else if constexpr (std::is_same_v<typename F::params, std::tuple<const Tensor&>> &&
                       std::is_same_v<typename F::result, Tensor>) {
    return false;  // the virtual forward, overridden
  } else {
    return all_from_value<typename F::params>::value && to_value_v<typename F::result> &&
           !std::is_void_v<typename F::result>;
  }
}

/// M overrides Module::forward_args (it takes any arguments itself).
template <class M, class = void>
struct overrides_forward_args : std::false_type {};
template <class M>
struct overrides_forward_args<M, std::void_t<decltype(&M::forward_args)>>
    : std::bool_constant<!std::is_same_v<typename member_fn<decltype(&M::forward_args)>::cls, Module>> {};

/// Whether `module(args...)` on a holder of M goes through Module::call (hooks run) rather than a
/// direct M::forward call: the arguments and result must travel as Values, and M's forward must be
/// reachable from forward_args (the virtual one, a typed one with a thunk, or forward_args itself).
template <class M, class R, class... A>
constexpr bool routes_through_call() {
  if constexpr (!(to_value_v<A> && ...) || !from_value_v<R>) {
    return false;
  } else {
    using F = unique_forward<M>;
    if constexpr (F::valid) {
      if constexpr (std::is_same_v<typename F::cls, Module>) return true;
      else if constexpr (std::is_same_v<typename F::params, std::tuple<const Tensor&>>) return true;
      else return has_typed_forward<M>();
    } else {
      return overrides_forward_args<M>::value;
    }
  }
}

template <class M, class Params, size_t... I>
Value call_typed_forward(M& m, const Args& args, std::index_sequence<I...>) {
  return to_value(m.forward(value_conv<std::decay_t<std::tuple_element_t<I, Params>>>::from(args[I])...));
}

/// Whether M declares the defaults of its forward's trailing parameters (TROUPE_FORWARD_HAS_DEFAULT_ARGS).
template <class M, class = void>
struct has_forward_defaults : std::false_type {};
template <class M>
struct has_forward_defaults<M, std::void_t<decltype(M::_forward_default_args())>> : std::true_type {};

/// forward_args for a module whose forward is typed: unpacks args into M::forward's parameters (trailing
/// ones left out take the defaults M declares with TROUPE_FORWARD_HAS_DEFAULT_ARGS).
template <class M>
Value typed_forward_thunk(Module& self, const Args& args, const Kwargs& kwargs) {
  auto& m = static_cast<M&>(self);
  using Params = typename unique_forward<M>::params;
  constexpr size_t n = std::tuple_size_v<Params>;
  if (!kwargs.empty())
    throw std::invalid_argument("[" + m.name() + "] forward() got an unexpected keyword argument '" +
                                kwargs.begin()->first + "'");
  if constexpr (has_forward_defaults<M>::value) {
    if (args.size() < n) {
      Args full = args;
      for (const auto& [index, value] : M::_forward_default_args())
        if (index >= full.size() && index < n) {
          if (index != full.size()) break;  // defaults cover a trailing run only
          full.push_back(value);
        }
      if (full.size() == n) return call_typed_forward<M, Params>(m, full, std::make_index_sequence<n>{});
    }
  }
  if (args.size() != n)
    throw std::invalid_argument("[" + m.name() + "] forward() takes " + std::to_string(n) + " argument" +
                                (n == 1 ? "" : "s") + " but " + std::to_string(args.size()) +
                                (args.size() == 1 ? " was" : " were") + " given");
  return call_typed_forward<M, Params>(m, args, std::make_index_sequence<n>{});
}

}  // namespace detail
}  // namespace troupe::nn

/// Declares the defaults of a typed forward's trailing parameters, as libtorch's FORWARD_HAS_DEFAULT_ARGS,
/// so that a call through hooks, containers or AnyModule may leave them out:
///   std::tuple<Tensor, Tensor> forward(const Tensor& input, Tensor hx = {});
///   TROUPE_FORWARD_HAS_DEFAULT_ARGS({1, ::troupe::nn::Value(Tensor())})
#define TROUPE_FORWARD_HAS_DEFAULT_ARGS(...)                                                       \
 public:                                                                                          \
  static std::vector<std::pair<size_t, ::troupe::nn::Value>> _forward_default_args() { return {__VA_ARGS__}; }
