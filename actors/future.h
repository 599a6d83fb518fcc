// Future<T>: the result of a request to an actor, CAF-free. Every wait is bounded: by the request's own
// deadline (ActorRef::timeout(), default_timeout()), past which the request fails naming the actor, its
// rank and the method. `then(fn)` chains work that runs when the result arrives.
//
//   Future<int64_t> f = counter.request<int64_t>("add", 5);
//   auto g = f.then([](int64_t n) { return 2 * n; });   // Future<int64_t>
//   int64_t v = g.get();                                // throws ActorError on failure or timeout
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <troupe/actors/value.h>

namespace troupe::actors {
namespace detail {

class CallState;

/// @private: what a thread waiting for a request may do itself before it sleeps: run the request when its
/// actor lives in this process (system.cpp's mailbox; see Actor::allow_inline_requests), or progress the
/// lane its reply comes back on (a request to another process).
class InlineRunner {
 public:
  virtual ~InlineRunner() = default;
  /// Runs request `id` (whose state is `waiting`) here, or works towards its reply; true when it did.
  virtual bool run_inline(uint64_t id, const CallState& waiting) = 0;
};

/// The shared state of one request: completed once (a value or an error), by the reply, by the peer's
/// death or by the deadline, whichever comes first.
class CallState {
 public:
  using Clock = std::chrono::steady_clock;
  /// `what`: "request 'add' to actor 'counter' (rank 1)"; `deadline`: when it fails unanswered.
  CallState(std::string what, Clock::time_point deadline, std::chrono::milliseconds timeout)
      : what_(std::move(what)), has_what_(true), deadline_(deadline), timeout_(timeout) {}
  /// The request `method` to `to`: what() is made from them when first asked for (most requests never are).
  CallState(std::string method, const ActorRef& to, Clock::time_point deadline, std::chrono::milliseconds timeout)
      : method_(std::move(method)), to_name_(to.name()), to_rank_(to.rank()), deadline_(deadline), timeout_(timeout) {}
  /// Completes with a value; false when it was already complete.
  bool complete(Value v);
  /// Completes with an error (the full text thrown to waiters); false when it was already complete.
  bool fail(std::string error);
  /// Fails with the timeout error unless complete; false when it was already complete.
  bool expire();
  /// True once complete.
  bool done() const;
  /// Waits until complete or `tp`; true when complete.
  bool wait_until(Clock::time_point tp) const;
  /// Runs `fn` once complete (at once, on this thread, if it is; else on the completing thread).
  void on_done(std::function<void()> fn);
  /// True when it completed with an error.
  bool failed() const;
  /// The value (valid once done() and !failed()).
  const Value& value() const { return value_; }
  /// The error text (valid once failed()).
  const std::string& error() const { return error_; }
  /// What the request was, for error texts.
  const std::string& what() const;
  /// When the request fails unanswered.
  Clock::time_point deadline() const { return deadline_; }
  /// The request's timeout.
  std::chrono::milliseconds timeout() const { return timeout_; }
  /// Lets a waiter run request `id` itself on `runner` (set before the Future is handed out).
  void set_inline(std::weak_ptr<InlineRunner> runner, uint64_t id) {
    runner_ = std::move(runner);
    runner_id_ = id;
  }
  /// Lets a waiter on this state run `from`'s request inline as a waiter on `from` would (then(): the
  /// continuation of a request to an idle inline host then also runs on the waiting thread).
  void inherit_inline(const CallState& from) {
    runner_ = from.runner_;
    runner_id_ = from.runner_id_;
  }
  /// Runs the request on this thread when its actor allows it, is idle and has it first; else nothing.
  void try_inline() const {
    if (runner_id_ == 0) return;
    if (auto r = runner_.lock()) r->run_inline(runner_id_, *this);
  }

 private:
  bool finish(bool failed, Value v, std::string error);

  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::atomic<bool> ready_{false};         // done_, read without the lock
  mutable std::atomic<int> sleepers_{0};  // waiters blocked on cv_ (finish notifies only when there are any)
  bool done_ = false;
  bool failed_ = false;
  Value value_;
  std::string error_;
  std::vector<std::function<void()>> callbacks_;
  std::string method_;  // no ActorRef: a Future kept after its actor ended must not keep the actor alive
  std::string to_name_;
  int to_rank_ = -1;
  mutable std::string what_;
  mutable bool has_what_ = false;
  Clock::time_point deadline_;
  std::chrono::milliseconds timeout_;
  std::weak_ptr<InlineRunner> runner_;
  uint64_t runner_id_ = 0;
};
using CallStatePtr = std::shared_ptr<CallState>;

/// Converts a completed state's value to T, or throws ActorError naming the request.
template <class T>
T result_as(const CallState& s) {
  try {
    return from_value<T>(s.value());
  } catch (const ActorError& e) {
    throw ActorError("[actors] " + s.what() + ": result: " + e.what());
  }
}

/// Sends method(args) to `to`; with want_reply, registers it and returns its state (else null).
CallStatePtr issue(const ActorRef& to, const std::string& method, List args, bool want_reply);
/// A request waited for at once: runs method(args) on this thread when `to` lives in this process, allows
/// inline requests, is idle and has nothing queued (Actor::allow_inline_requests), with no request state;
/// true with its value in `result`, ActorError (the text a Future would throw) when the handler failed,
/// false when it did not run (then issue() it).
bool call_inline(const ActorRef& to, const std::string& method, const List& args, Value& result);
/// Fails `s` at its deadline even when nobody waits (then() continuations depend on it).
void watch_deadline(const CallStatePtr& s);

}  // namespace detail

/// The result of a request, of type T (void: none).
template <class T>
class Future {
 public:
  /// An empty future (valid() is false).
  Future() = default;
  /// @private
  explicit Future(detail::CallStatePtr s) : s_(std::move(s)) {}

  /// True when it belongs to a request.
  bool valid() const { return s_ != nullptr; }
  /// True once the result (or the error) is there; never blocks.
  bool ready() const { return s_ && s_->done(); }
  /// Waits at most `d` (and never past the request's deadline); true when the result or error is there.
  /// Never throws.
  bool wait_for(std::chrono::milliseconds d) const {
    auto tp = std::min(detail::CallState::Clock::now() + d, s_->deadline());
    if (s_->wait_until(tp)) return true;
    if (detail::CallState::Clock::now() >= s_->deadline()) s_->expire();
    return s_->done();
  }
  /// Waits for the result, at most until the request's deadline; throws ActorError if the request
  /// failed, timed out or its actor is gone. (An actor that allow_inline_requests() runs the request on
  /// this thread instead when it is idle and has nothing queued before it.)
  void wait() const {
    if (!s_) throw ActorError("[actors] wait() on an empty Future");
    s_->try_inline();
    if (!s_->wait_until(s_->deadline())) s_->expire();
    if (s_->failed()) throw ActorError(s_->error());
  }
  /// wait(), then the result.
  T get() const {
    wait();
    if constexpr (std::is_void_v<T>) {
      return;
    } else {
      return detail::result_as<T>(*s_);
    }
  }
  /// A Future of fn(result) (fn() for Future<void>), completed on the thread that completes this one
  /// (fn must not block); an error of this one, or an exception of fn, fails it.
  template <class F>
  auto then(F fn) const {
    using R = decltype(call(fn, std::declval<const detail::CallState&>()));
    auto next = std::make_shared<detail::CallState>(s_->what(), s_->deadline(), s_->timeout());
    next->inherit_inline(*s_);
    detail::watch_deadline(s_);
    s_->on_done([s = s_, next, fn = std::move(fn)]() mutable {
      if (s->failed()) {
        next->fail(s->error());
        return;
      }
      try {
        if constexpr (std::is_void_v<R>) {
          call(fn, *s);
          next->complete(Value());
        } else {
          next->complete(to_value(call(fn, *s)));
        }
      } catch (const std::exception& e) {
        next->fail("[actors] " + s->what() + ": its continuation threw: " + e.what());
      }
    });
    return Future<R>(next);
  }

 private:
  template <class F>
  static decltype(auto) call(F& fn, const detail::CallState& s) {
    if constexpr (std::is_void_v<T>) {
      return fn();
    } else {
      return fn(detail::result_as<T>(s));
    }
  }

  detail::CallStatePtr s_;
};

template <class R>
Future<R> ActorRef::request_list(const std::string& method, List args) const {
  return Future<R>(detail::issue(*this, method, std::move(args), true));
}

template <class R, class... A>
Future<R> ActorRef::request(const std::string& method, A&&... args) const {
  return request_list<R>(method, List{to_value(std::forward<A>(args))...});
}

namespace detail {
/// request_list<R>(method, args).get(), run on this thread with no request state when call_inline can.
template <class R>
R call_now(const ActorRef& to, const std::string& method, List args) {
  Value v;
  if (!call_inline(to, method, args, v)) return to.request_list<R>(method, std::move(args)).get();
  if constexpr (!std::is_void_v<R>) {
    try {
      return from_value<R>(std::move(v));
    } catch (const ActorError& e) {
      throw ActorError("[actors] request '" + method + "' to actor " + to.str() + ": result: " + e.what());
    }
  }
}
}  // namespace detail

template <class... A>
void ActorRef::send(const std::string& method, A&&... args) const {
  detail::issue(*this, method, List{to_value(std::forward<A>(args))...}, false);
}

}  // namespace troupe::actors
