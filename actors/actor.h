// Actor: the base of troupe's actors, and the factory registry that spawn_on builds them from. An actor
// handles one message at a time; its handlers are named methods with typed arguments (converted from
// the message's Values). The same binary runs on every rank, so a factory registered by name at start-up
// exists on every rank.
//
//   struct Counter : actors::Actor {
//     int64_t n = 0;
//     explicit Counter(int64_t start) : n(start) {
//       handle("add", [this](int64_t k) { return n += k; });
//       handle("get", [this] { return n; });
//     }
//   };
//   actors::register_actor<Counter, int64_t>("Counter");    // before spawn_on, on every rank
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include <troupe/actors/value.h>

namespace troupe::actors {

namespace detail {
struct ActorAccess;

template <class F>
struct fn_traits : fn_traits<decltype(&F::operator())> {};
template <class C, class R, class... A>
struct fn_traits<R (C::*)(A...) const> {
  using result = R;
  using args = std::tuple<std::decay_t<A>...>;
};
template <class C, class R, class... A>
struct fn_traits<R (C::*)(A...)> : fn_traits<R (C::*)(A...) const> {};
template <class R, class... A>
struct fn_traits<R (*)(A...)> : fn_traits<R (std::function<void()>::*)(A...) const> {};

/// ActorError "takes N argument(s), got M".
[[noreturn]] void throw_arity(const std::string& method, size_t want, size_t got);
/// Rethrows a conversion error of argument `i` with its position.
[[noreturn]] void throw_argument(const std::string& method, size_t i, const std::exception& e);

/// args converted to the types of Tuple; an argument that does not convert throws naming `what` and
/// its position.
template <class Tuple, size_t... I>
Tuple convert_args(const std::string& what, const List& args, std::index_sequence<I...>) {
  Tuple typed;
  auto convert = [&](auto idx) {
    constexpr size_t i = decltype(idx)::value;
    try {
      std::get<i>(typed) = from_value<std::tuple_element_t<i, Tuple>>(args[i]);
    } catch (const std::exception& e) {
      throw_argument(what, i, e);
    }
  };
  (convert(std::integral_constant<size_t, I>{}), ...);
  (void)convert;  // no arguments
  return typed;
}

template <class Tuple, size_t... I, class F>
Value invoke_with(const std::string& method, F& fn, const List& args, std::index_sequence<I...> seq) {
  Tuple typed = convert_args<Tuple>(method, args, seq);
  using R = decltype(fn(std::move(std::get<I>(typed))...));
  if constexpr (std::is_void_v<R>) {
    fn(std::move(std::get<I>(typed))...);
    return Value();
  } else {
    return to_value(fn(std::move(std::get<I>(typed))...));
  }
}
template <class T, class Tuple, size_t... I>
std::unique_ptr<T> construct(const std::string& what, const List& args, std::index_sequence<I...> seq) {
  [[maybe_unused]] Tuple typed = convert_args<Tuple>(what, args, seq);
  return std::make_unique<T>(std::move(std::get<I>(typed))...);
}
}  // namespace detail

/// A method of an actor: the message's arguments in, the reply out.
using Handler = std::function<Value(const List& args)>;

/// Base class of actors. Handlers registered with handle() run one at a time on the actor; an exception
/// thrown by one reaches the caller's Future with its text, the actor's name, rank and the method.
class Actor {
 public:
  virtual ~Actor() = default;
  /// This actor's handle (valid once spawned, i.e. in every handler; not in the constructor).
  const ActorRef& self() const { return self_; }
  /// The rank this actor lives on.
  int rank() const { return self_.rank(); }
  /// This actor's name.
  const std::string& name() const { return self_.name(); }
  /// The names of its methods, sorted.
  std::vector<std::string> methods() const;

 protected:
  /// Registers `method`: fn's parameters are converted from the message's Values (bool, integers,
  /// double, std::string, Tensor, ActorRef, vectors, maps, Value, List), its result to the reply.
  template <class F>
  void handle(const std::string& method, F fn) {
    using Args = typename detail::fn_traits<std::decay_t<F>>::args;
    constexpr size_t n = std::tuple_size_v<Args>;
    handlers_[method] = [method, fn = std::move(fn)](const List& args) mutable -> Value {
      if (args.size() != n) detail::throw_arity(method, n, args.size());
      return detail::invoke_with<Args>(method, fn, args, std::make_index_sequence<n>{});
    };
  }
  /// Registers `method` with a handler that takes the raw argument list.
  void handle_list(const std::string& method, Handler fn) { handlers_[method] = std::move(fn); }
  /// Answers the message being handled with `result` before the handler returns: the caller's Future
  /// completes while the handler goes on working (RemoteModule's host answers a backward with its input
  /// gradients, then computes its weights'). The handler's own result is then dropped, and an exception
  /// it throws afterwards is only printed, as for a one-way message: keep such an error for a later
  /// request. Messages to this actor still wait until the handler returns. On a one-way message it does
  /// nothing. Throws ActorError outside a handler of this actor, or when called twice in one.
  void reply_now(Value result);
  /// Runs this actor on a thread of its own (call it in the constructor). For actors whose handlers wait
  /// on other actors' replies: a handler that waits holds its thread, and the shared scheduler has 4
  /// (TROUPE_ACTOR_THREADS), so chains of waiting handlers deeper than that would wait until timeout.
  void use_own_thread() { own_thread_ = true; }
  /// Lets a request from this process run on the thread that waits for it (Future::wait / get), when
  /// this actor is idle and the request is first in its mailbox: one message at a time and each
  /// sender's order still hold, and the caller skips two thread hand-offs (RemoteModule's host uses it).
  /// The handler then runs with grad mode on and inference mode off, as on the actor's own threads, but
  /// the wait is not bounded by the request's deadline while it runs: only for handlers that end.
  void allow_inline_requests() { inline_requests_ = true; }

 private:
  friend struct detail::ActorAccess;
  std::unordered_map<std::string, Handler> handlers_;
  ActorRef self_;
  bool own_thread_ = false;
  bool inline_requests_ = false;
};

/// Builds an actor from spawn_on's arguments.
using Factory = std::function<std::unique_ptr<Actor>(const List& args)>;

/// Registers `factory` under `name` in this process's registry (replacing one of that name). Every rank
/// must register the same names (same binary): spawn_on(rank, ...) builds the actor on `rank`.
void register_factory(const std::string& name, Factory factory);
/// The registered factory names, sorted.
std::vector<std::string> factory_names();
/// True when `name` is registered.
bool has_factory(const std::string& name);

/// Registers T built as T(A...) from spawn_on's arguments (converted from Values).
template <class T, class... A>
void register_actor(const std::string& name) {
  register_factory(name, [name](const List& args) -> std::unique_ptr<Actor> {
    const std::string what = "factory '" + name + "'";
    if (args.size() != sizeof...(A)) detail::throw_arity(what, sizeof...(A), args.size());
    return detail::construct<T, std::tuple<A...>>(what, args, std::index_sequence_for<A...>{});
  });
}

}  // namespace troupe::actors
