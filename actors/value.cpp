// The CAF-free parts of the actor layer: Value kinds, timeouts, CallState, the factory registry.
#include <troupe/actors/actor.h>
#include <troupe/actors/future.h>
#include <troupe/actors/value.h>
#include <troupe/actors/internal/services.h>
#include <troupe/util/env.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <map>

namespace troupe::actors {

const char* value_kind_name(size_t index) {
  static const char* names[] = {"none", "bool", "int", "float", "string", "Tensor", "ActorRef", "list"};
  return index < 8 ? names[index] : "?";
}

const char* Value::kind() const { return value_kind_name(v_.index()); }

namespace detail {
void throw_kind_mismatch(const char* expected, const Value& got) {
  throw ActorError(std::string("expected ") + expected + ", got " + got.kind());
}

void throw_arity(const std::string& method, size_t want, size_t got) {
  throw ActorError("'" + method + "' takes " + std::to_string(want) + " argument" + (want == 1 ? "" : "s") +
                   ", got " + std::to_string(got));
}

void throw_argument(const std::string& method, size_t i, const std::exception& e) {
  throw ActorError("'" + method + "' argument " + std::to_string(i) + ": " + e.what());
}
}  // namespace detail

// ---- timeouts

namespace {
// -1: not read yet. TROUPE_ACTOR_TIMEOUT is read on first use (the runtime's start uses it), so that a
// bad value is an ActorError naming it rather than a silent 60 s or a throw during static init.
std::atomic<int64_t> g_timeout_ms{-1};
}  // namespace

std::chrono::milliseconds default_timeout() {
  int64_t ms = g_timeout_ms.load();
  if (ms > 0) return std::chrono::milliseconds(ms);
  double s = 60;
  try {
    s = util::env_number("TROUPE_ACTOR_TIMEOUT", 60.0);
  } catch (const std::invalid_argument& e) {
    throw ActorError(std::string("[actors] ") + e.what() + " (seconds before a request fails)");
  }
  ms = std::max<int64_t>(1, static_cast<int64_t>(std::llround(s * 1000)));
  int64_t unset = -1;
  g_timeout_ms.compare_exchange_strong(unset, ms);  // set_default_timeout() may have won the race
  return std::chrono::milliseconds(g_timeout_ms.load());
}
void set_default_timeout(std::chrono::milliseconds t) {
  if (t.count() <= 0)
    throw ActorError("[actors::set_default_timeout] timeout must be positive, got " + std::to_string(t.count()) + " ms");
  g_timeout_ms.store(t.count());
}

// ---- CallState

namespace detail {

bool CallState::finish(bool failed, Value v, std::string error) {
  std::vector<std::function<void()>> cbs;
  {
    std::lock_guard<std::mutex> g(mu_);
    if (done_) return false;
    done_ = true;
    failed_ = failed;
    value_ = std::move(v);
    error_ = std::move(error);
    cbs.swap(callbacks_);
    ready_.store(true, std::memory_order_release);
  }
  if (sleepers_.load(std::memory_order_acquire) > 0) cv_.notify_all();
  for (auto& f : cbs) f();
  return true;
}

bool CallState::complete(Value v) { return finish(false, std::move(v), {}); }
bool CallState::fail(std::string error) { return finish(true, Value(), std::move(error)); }
bool CallState::expire() {
  return fail("[actors] " + what() + " timed out after " + std::to_string(timeout_.count()) +
              " ms (no reply; TROUPE_ACTOR_TIMEOUT sets the default, in seconds)");
}

bool CallState::done() const { return ready_.load(std::memory_order_acquire); }

bool CallState::failed() const {
  std::lock_guard<std::mutex> g(mu_);
  return failed_;
}

WaitProgress*& wait_progress() {
  static thread_local WaitProgress* p = nullptr;
  return p;
}

bool CallState::wait_until(Clock::time_point tp) const {
  if (WaitProgress* p = wait_progress()) return p->wait_until(*this, tp);
  std::unique_lock<std::mutex> g(mu_);
  if (done_) return true;
  sleepers_.fetch_add(1, std::memory_order_acq_rel);
  bool r = cv_.wait_until(g, tp, [&] { return done_; });
  sleepers_.fetch_sub(1, std::memory_order_acq_rel);
  return r;
}

const std::string& CallState::what() const {
  std::lock_guard<std::mutex> g(mu_);
  if (!has_what_) {
    what_ = "request '" + method_ + "' to actor '" + to_name_ + "' (rank " + std::to_string(to_rank_) + ")";
    has_what_ = true;
  }
  return what_;
}

void CallState::on_done(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> g(mu_);
    if (!done_) {
      callbacks_.push_back(std::move(fn));
      return;
    }
  }
  fn();
}

}  // namespace detail

// ---- Actor and the factory registry

std::vector<std::string> Actor::methods() const {
  std::vector<std::string> out;
  for (const auto& [k, v] : handlers_) out.push_back(k);
  std::sort(out.begin(), out.end());
  return out;
}

namespace {
std::mutex g_registry_mu;
std::map<std::string, Factory>& registry() {
  static std::map<std::string, Factory> r;
  return r;
}
}  // namespace

void register_factory(const std::string& name, Factory factory) {
  std::lock_guard<std::mutex> g(g_registry_mu);
  registry()[name] = std::move(factory);
}

std::vector<std::string> factory_names() {
  std::lock_guard<std::mutex> g(g_registry_mu);
  std::vector<std::string> out;
  for (const auto& [k, v] : registry()) out.push_back(k);
  return out;
}

bool has_factory(const std::string& name) {
  std::lock_guard<std::mutex> g(g_registry_mu);
  return registry().count(name) != 0;
}

namespace detail {
/// The factory registered as `name`, or null.
Factory find_factory(const std::string& name) {
  std::lock_guard<std::mutex> g(g_registry_mu);
  auto it = registry().find(name);
  return it == registry().end() ? Factory() : it->second;
}
}  // namespace detail

}  // namespace troupe::actors
