// What a run's actors are doing, for the live page (launch/dashboard.h) and anyone else: every rank's
// host and process, its named actors with their factory, message counts, busy time and last error, the
// module paths a host actor (troupe.ModuleHost) holds, and the process's collective counters
// (comm/stats.h). Each rank's service actor answers for its own rank; inspect() asks them all. CAF-free.
//
//   for (const auto& r : actors::inspect(ctx.actors()))
//     for (const auto& a : r.actors) std::printf("%s@%d: %lld messages\n", a.name.c_str(), r.rank, (long long)a.messages);
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <troupe/actors/runtime.h>
#include <troupe/comm/stats.h>

namespace troupe::actors {

/// One named actor, as its rank's service counts it (every handler call of an actor spawned by spawn_on).
struct ActorInfo {
  std::string name;
  /// The factory it was built from ("Counter", "troupe.ModuleHost").
  std::string factory;
  /// Messages handled, and how many of them threw (the caller got the error).
  int64_t messages = 0;
  /// Messages waiting in its mailbox now (sent, not yet started; actors of this process count exactly).
  int64_t queued = 0;
  int64_t errors = 0;
  /// Seconds spent in its handlers, and whether one runs now (and which).
  double busy_seconds = 0;
  bool busy = false;
  std::string current_method;
  /// Wall time (seconds since the Unix epoch) it was spawned, and of its last message (0: none yet).
  double spawned_at = 0;
  double last_message_at = 0;
  /// "method: text" of the last handler that threw ("" when none did).
  std::string last_error;
  /// For a module host: "path (Class)" of every module it holds, the root first as "(root) (Class)".
  std::vector<std::string> modules;
};

/// One rank's report.
struct RankInfo {
  int rank = 0;
  std::string host;
  int64_t pid = 0;
  /// Its named actors, by name.
  std::vector<ActorInfo> actors;
  /// The collective counters of its process (with --ranks N every rank shares one process: compare pid).
  std::vector<comm::CollectiveStats> collectives;
};

/// Every rank's report, in rank order (one request to each rank's service, bounded by default_timeout()).
std::vector<RankInfo> inspect(const Runtime& rt);

namespace detail {
/// Called by a module host's constructor: the module paths it holds (the rank service picks them up
/// when the factory returns, keyed by the actor's address).
void note_hosted_modules(const void* actor, std::vector<std::string> modules);
/// The paths noted for `actor` (removing them), or none.
std::vector<std::string> take_hosted_modules(const void* actor);
}  // namespace detail

}  // namespace troupe::actors
