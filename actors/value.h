// What travels in an actor message: Value (none, bool, int, float, string, Tensor, ActorRef or a list of
// Values), the ActorRef handle, ActorError, and the conversions between C++ types and Values that typed
// requests and handlers use (ValueTraits<T>). CAF-free.
//
//   Value v = to_value(std::vector<Tensor>{a, b});    // a list of two tensors
//   auto ts = from_value<std::vector<Tensor>>(v);
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include <troupe/tensor/tensor.h>

namespace troupe::actors {

/// What every failure of the actor layer throws: a request that failed or timed out, a dead peer, an
/// unknown factory or method, a value of the wrong kind. The text names the actor, its rank and the request.
class ActorError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

template <class T>
class Future;
class Value;
using List = std::vector<Value>;

namespace detail {
struct RefImpl;
}

/// A handle on an actor on any rank: copyable, comparable, and itself a Value (it can be sent to other
/// ranks). Requests through it return Futures; every wait on them is bounded by its timeout.
class ActorRef {
 public:
  /// An empty handle (valid() is false).
  ActorRef() = default;
  /// True when it names an actor.
  bool valid() const { return impl_ != nullptr; }
  /// The actor's name ("" for an empty handle).
  const std::string& name() const;
  /// The rank the actor lives on (-1 for an empty handle).
  int rank() const;
  /// "'name' (rank r)", as errors print it.
  std::string str() const;
  /// How long requests through this handle wait (the default: default_timeout()).
  std::chrono::milliseconds timeout() const;
  /// A copy whose requests wait at most `t` (> 0; ActorError otherwise).
  ActorRef with_timeout(std::chrono::milliseconds t) const;

  /// Asks the actor to run `method(args...)`; the Future yields its result as R (void: none).
  template <class R = void, class... A>
  Future<R> request(const std::string& method, A&&... args) const;
  /// request() with the arguments as a List.
  template <class R = void>
  Future<R> request_list(const std::string& method, List args) const;
  /// Sends `method(args...)` without waiting for a result (a failure is printed on the host's stderr).
  template <class... A>
  void send(const std::string& method, A&&... args) const;
  /// Stops the actor (its pending and later requests fail, naming it).
  void stop() const;

  /// Same actor.
  bool operator==(const ActorRef& o) const;
  bool operator!=(const ActorRef& o) const { return !(*this == o); }

  /// @private
  explicit ActorRef(std::shared_ptr<const detail::RefImpl> impl) : impl_(std::move(impl)) {}
  /// @private
  const std::shared_ptr<const detail::RefImpl>& impl() const { return impl_; }

 private:
  std::shared_ptr<const detail::RefImpl> impl_;
  std::chrono::milliseconds timeout_{0};  // 0: default_timeout()
};

/// One value of a message.
class Value {
 public:
  /// The alternatives, in wire-tag order.
  using Variant = std::variant<std::monostate, bool, int64_t, double, std::string, Tensor, ActorRef, List>;
  /// None.
  Value() = default;
  Value(bool b) : v_(b) {}
  Value(int x) : v_(static_cast<int64_t>(x)) {}
  Value(int64_t x) : v_(x) {}
  Value(double x) : v_(x) {}
  Value(const char* s) : v_(std::string(s)) {}
  Value(std::string s) : v_(std::move(s)) {}
  Value(Tensor t) : v_(std::move(t)) {}
  Value(ActorRef r) : v_(std::move(r)) {}
  Value(List l) : v_(std::move(l)) {}

  /// The variant.
  const Variant& get() const { return v_; }
  Variant& get() { return v_; }
  /// True for none.
  bool is_none() const { return v_.index() == 0; }
  /// "none", "bool", "int", "float", "string", "Tensor", "ActorRef" or "list".
  const char* kind() const;
  /// True when the alternative is T.
  template <class T>
  bool is() const { return std::holds_alternative<T>(v_); }
  /// The alternative T, or ActorError "expected <T's kind>, got <kind>".
  template <class T>
  const T& as() const;

 private:
  Variant v_;
};

/// The kind names of Value::kind() by variant index.
const char* value_kind_name(size_t index);

namespace detail {
template <class T, class V>
struct variant_index;
template <class T, class... Ts>
struct variant_index<T, std::variant<Ts...>> {
  static constexpr size_t value = [] {
    constexpr bool same[] = {std::is_same_v<T, Ts>...};
    for (size_t i = 0; i < sizeof...(Ts); ++i)
      if (same[i]) return i;
    return sizeof...(Ts);
  }();
};
[[noreturn]] void throw_kind_mismatch(const char* expected, const Value& got);
}

template <class T>
const T& Value::as() const {
  if (auto p = std::get_if<T>(&v_)) return *p;
  detail::throw_kind_mismatch(value_kind_name(detail::variant_index<T, Variant>::value), *this);
}

/// Conversions between a C++ type and a Value: to(x) and from(v); from throws ActorError when v holds
/// another kind. Defined for Value, bool, integers, float/double, std::string, Tensor, ActorRef,
/// std::vector<T>, std::pair<A, B> (a list of two), std::map<std::string, T> (a list of pairs) and void.
template <class T, class = void>
struct ValueTraits;

template <>
struct ValueTraits<Value> {
  static Value to(Value v) { return v; }
  static Value from(const Value& v) { return v; }
};
template <>
struct ValueTraits<bool> {
  static Value to(bool b) { return Value(b); }
  static bool from(const Value& v) { return v.as<bool>(); }
};
template <class T>
struct ValueTraits<T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>>> {
  static Value to(T x) { return Value(static_cast<int64_t>(x)); }
  static T from(const Value& v) { return static_cast<T>(v.as<int64_t>()); }
};
template <class T>
struct ValueTraits<T, std::enable_if_t<std::is_floating_point_v<T>>> {
  static Value to(T x) { return Value(static_cast<double>(x)); }
  static T from(const Value& v) {
    if (v.is<int64_t>()) return static_cast<T>(v.as<int64_t>());
    return static_cast<T>(v.as<double>());
  }
};
template <>
struct ValueTraits<std::string> {
  static Value to(std::string s) { return Value(std::move(s)); }
  static std::string from(const Value& v) { return v.as<std::string>(); }
};
template <>
struct ValueTraits<const char*> {
  static Value to(const char* s) { return Value(std::string(s)); }
};
template <>
struct ValueTraits<Tensor> {
  static Value to(Tensor t) { return Value(std::move(t)); }
  static Tensor from(const Value& v) { return v.as<Tensor>(); }
};
template <>
struct ValueTraits<ActorRef> {
  static Value to(ActorRef r) { return Value(std::move(r)); }
  static ActorRef from(const Value& v) { return v.as<ActorRef>(); }
};
template <class T>
struct ValueTraits<std::vector<T>> {
  static Value to(const std::vector<T>& xs) {
    List l;
    l.reserve(xs.size());
    for (const auto& x : xs) l.push_back(ValueTraits<T>::to(x));
    return Value(std::move(l));
  }
  static std::vector<T> from(const Value& v) {
    const List& l = v.as<List>();
    std::vector<T> out;
    out.reserve(l.size());
    for (const auto& x : l) out.push_back(ValueTraits<T>::from(x));
    return out;
  }
};
template <class A, class B>
struct ValueTraits<std::pair<A, B>> {
  static Value to(const std::pair<A, B>& p) {
    return Value(List{ValueTraits<A>::to(p.first), ValueTraits<B>::to(p.second)});
  }
  static std::pair<A, B> from(const Value& v) {
    const List& l = v.as<List>();
    if (l.size() != 2) throw ActorError("[actors] expected a pair (a list of 2), got a list of " + std::to_string(l.size()));
    return {ValueTraits<A>::from(l[0]), ValueTraits<B>::from(l[1])};
  }
};
template <class T>
struct ValueTraits<std::map<std::string, T>> {
  static Value to(const std::map<std::string, T>& m) {
    List l;
    for (const auto& [k, x] : m) l.push_back(ValueTraits<std::pair<std::string, T>>::to({k, x}));
    return Value(std::move(l));
  }
  static std::map<std::string, T> from(const Value& v) {
    std::map<std::string, T> out;
    for (const auto& e : v.as<List>()) out.insert(ValueTraits<std::pair<std::string, T>>::from(e));
    return out;
  }
};
template <>
struct ValueTraits<void> {
  static void from(const Value&) {}
};

/// `x` as a Value.
template <class T>
Value to_value(T&& x) {
  return ValueTraits<std::decay_t<T>>::to(std::forward<T>(x));
}
/// `v` as a T (ActorError when v holds another kind).
template <class T>
T from_value(const Value& v) {
  return ValueTraits<std::decay_t<T>>::from(v);
}

/// How long a request waits before it fails: TROUPE_ACTOR_TIMEOUT (seconds, a positive number) when set,
/// else 60 s; a set value that is not a positive number throws ActorError naming it.
std::chrono::milliseconds default_timeout();
/// Sets default_timeout() for the process (`t` > 0; ActorError otherwise).
void set_default_timeout(std::chrono::milliseconds t);

}  // namespace troupe::actors
