// Shared by the actors tests: the test actors (registered on every rank by register_test_actors) and
// on_ranks, which runs a body on N ranks as threads of this process (launch::run --ranks N).
#pragma once

#include <chrono>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <troupe/actors/actors.h>
#include <troupe/launch/launch.h>

namespace troupe::actors::testing {

/// A counter with every kind of handler the tests need.
struct Counter : Actor {
  int64_t n;
  std::vector<int64_t> seen;
  explicit Counter(int64_t start) : n(start) {
    handle("add", [this](int64_t k) { return n += k; });
    handle("get", [this] { return n; });
    handle("append", [this](int64_t k) { seen.push_back(k); });
    // append with an ActorRef in the message (across processes it crosses by CAF, not on the lane).
    handle("append_with", [this](ActorRef, int64_t k) { seen.push_back(k); });
    handle("append_get", [this](int64_t k) {
      seen.push_back(k);
      return static_cast<int64_t>(seen.size());
    });
    handle("seen", [this] { return seen; });
    handle("fail", [](std::string why) -> int64_t { throw std::runtime_error("counter refused: " + why); });
    handle("sleep_ms", [this](int64_t ms) {
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
      return n;
    });
    handle("echo", [](Value v) { return v; });
    handle("data_ptr", [](Tensor t) { return static_cast<int64_t>(reinterpret_cast<intptr_t>(t.data_ptr())); });
    handle("scale", [](Tensor t, double s) { return t * s; });
    // Calls `method` with `k` on `other` (an ActorRef that came in this message) and returns its result.
    handle("call_other", [](ActorRef other, std::string method, int64_t k) {
      return other.request<int64_t>(method, k).get();
    });
    handle("whoami", [this] { return self(); });
    handle("where", [this] { return static_cast<int64_t>(rank()); });
  }
};

/// Passes a number down a chain of relays, each waiting on the next one's reply (nested requests).
struct Relay : Actor {
  ActorRef next;
  Relay(bool own_thread, ActorRef next_relay) : next(std::move(next_relay)) {
    if (own_thread) use_own_thread();
    handle("relay", [this](int64_t k) { return next.valid() ? next.request<int64_t>("relay", k + 1).get() : k; });
  }
};

/// Registers the test actors (idempotent; every rank runs the same code).
inline void register_test_actors() {
  register_actor<Counter, int64_t>("Counter");
  register_actor<Relay, bool, ActorRef>("Relay");
  register_factory("Throwing", [](const List&) -> std::unique_ptr<Actor> {
    throw std::runtime_error("no resources for Throwing");
  });
}

/// Runs body(ctx) on n ranks as threads (launch::run --ranks n); rethrows a rank's exception.
inline void on_ranks(int n, const std::function<void(launch::Context&)>& body) {
  register_test_actors();
  std::string ns = std::to_string(n);
  std::string a0 = "actors_tests", a1 = "--ranks";
  char* argv[] = {a0.data(), a1.data(), ns.data(), nullptr};
  launch::run(3, argv, [&](launch::Context& c) {
    body(c);
    return 0;
  });
}

/// The text of the ActorError that fn throws, or "" when it throws none.
inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const ActorError& e) {
    return e.what();
  }
  return "";
}

/// True when `text` contains `part`.
inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace troupe::actors::testing
