// Private, CAF-free: what the rank service actor (rank_service.cpp) needs of the process's actor system
// (system.cpp), and the Actor internals both use.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include <troupe/actors/actor.h>
#include <troupe/actors/future.h>
#include <troupe/actors/introspect.h>
#include <troupe/actors/value.h>

namespace troupe::actors::detail {

/// Reaches into Actor (its handlers and self handle).
struct ActorAccess {
  static std::unordered_map<std::string, Handler>& handlers(Actor& a) { return a.handlers_; }
  static void set_self(Actor& a, ActorRef r) { a.self_ = std::move(r); }
  static bool own_thread(const Actor& a) { return a.own_thread_; }
  static bool inline_requests(const Actor& a) { return a.inline_requests_; }
};

/// The factory registered as `name`, or null (value.cpp).
Factory find_factory(const std::string& name);
/// Spawns `actor` as `name` on `rank` (a rank of this process) and returns its handle.
ActorRef spawn_host(int rank, const std::string& name, std::unique_ptr<Actor> actor);
/// Records `ref` as rank `rank`'s service actor (the "hello" of a connecting rank).
void set_service(int rank, const ActorRef& ref);
/// Records `router` as rank `rank`'s router and returns this process's (the hello of a connecting rank:
/// Calls that cross by CAF while the lane is on go to the routers).
ActorRef exchange_router(int rank, const ActorRef& router);
/// The rank service actor of `rank` (service.cpp), built for this process's system.
std::unique_ptr<Actor> make_rank_service(int rank);
/// The name of rank r's service actor: "troupe.rank<r>".
std::string service_name(int rank);

/// Messages queued for `ref` and not yet run, when it is an actor of this process (else -1); system.cpp.
int64_t queued_messages(const ActorRef& ref);

/// For tests (runtime_test.cpp): `hook(name)` runs on the thread of an actor of this process right after
/// it handled ActorRef::stop()'s marker, before the requests queued behind the marker fail and the actor
/// ends (an empty function: none). It widens the window in which a message sent after stop() must already
/// be refused. Process-wide: set it around one test only (system.cpp).
void set_stop_hook(std::function<void(const std::string& actor)> hook);

/// A thread that must keep something moving while it waits (system.cpp: the lane thread while it runs a
/// handler, since no other thread would receive the reply that ends the wait). CallState::wait_until on
/// such a thread calls it instead of sleeping on the state.
struct WaitProgress {
  virtual ~WaitProgress() = default;
  /// Waits until `s` completes or `tp`, working meanwhile; true when complete.
  virtual bool wait_until(const CallState& s, std::chrono::steady_clock::time_point tp) = 0;
};
/// This thread's WaitProgress (null: waits sleep); value.cpp.
WaitProgress*& wait_progress();

/// True while this thread runs a handler of a Call it read from the lane itself (the lane thread, or a
/// waiter polling the lane): a Call that came on the lane to an idle actor that allows inline requests
/// runs there (tests); system.cpp.
bool on_lane_thread();

/// Whether a module host answers a backward as soon as its input gradients are final (requests bwd1,
/// then bwdend); TROUPE_ACTOR_EARLY_INPUT_GRADS=0: one request (bwd), answered once the host's part is
/// all done, as before 2026-11-28 (remote_module.cpp).
bool early_input_grads();
/// Asks module host `host` for the backward of its forward `key` from `grads`: bwd1 (answered as soon as
/// the input gradients are final) with bwdend into `end`, or bwd (answered at the end) when
/// early_input_grads() is off, `end` then answered right after it (remote_module.cpp).
Future<List> request_backward(const ActorRef& host, int64_t key, List grads, Future<void>& end);
/// Waits for the bwdend answers `ends` when the backward pass under way on this thread ends (an engine
/// callback; outside a pass, at once); `on_error` sees an error first, then it is thrown.
void finish_backward_later(std::vector<Future<void>> ends, std::function<void(const ActorError&)> on_error);

/// A rank's report (introspect.h) as the Value its service replies with, and back (introspect.cpp).
Value encode_rank_info(const RankInfo& info);
RankInfo decode_rank_info(const Value& v);

}  // namespace troupe::actors::detail
