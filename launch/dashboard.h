// The live page of a run (`--dashboard PORT`): the launching process (rank 0) serves, on loopback
// unless told otherwise, a page that shows the topology (hosts, ranks, the actors on each rank and the
// module paths they host), per-actor messages, rate, busy time and last error, each rank's collective
// timings, the parameter placement of the models given to watch_model(), and the training curves of
// every SummaryWriter of the run; it polls JSON endpoints, so it follows the run and survives a reload.
//
//   ddp_digits --ranks 2 --dashboard 8080           # any program that uses launch::run
//   [troupe] dashboard http://127.0.0.1:8080/?token=3f0c...   (printed at start)
//
// Every request must carry the job's token (the `token` query parameter, or the cookie the page sets):
// one derived from the job's secret (actors/auth.h), so only who can read the launcher's output (or
// knows TROUPE_SECRET) gets in; a wrong or missing token gets 403 and no data. cpp-httplib (Debian's
// libcpp-httplib-dev) serves it on two threads of its own; Chart.js comes from Debian's libjs-chart.js
// at /usr/share/javascript/chart.js (nothing is downloaded).
#pragma once

#include <memory>
#include <string>

#include <troupe/nn/module.h>

namespace troupe::actors {
class Runtime;
}

namespace troupe::launch {

/// Where the page listens: --dashboard PORT (loopback) or --dashboard ADDR:PORT.
struct DashboardOptions {
  /// The address to bind: "127.0.0.1" unless --dashboard named one ("0.0.0.0": every interface).
  std::string bind = "127.0.0.1";
  /// The port; 0 picks a free one (printed with the URL).
  int port = 0;
};

/// Parses --dashboard's value ("8080", "0.0.0.0:8080"); std::invalid_argument naming the value when
/// the port is not a number in [0, 65535] or the address is empty.
DashboardOptions parse_dashboard_option(const std::string& value);

/// What the page describes: the run as the launching process knows it.
struct DashboardSource {
  /// Ranks of the world, their backend, the launching host.
  int size = 1;
  std::string backend;
  std::string host;
  /// Rank 0's actor runtime (null without actors: the page then shows only this process).
  std::shared_ptr<actors::Runtime> runtime;
};

/// The server. launch::run / init make one on rank 0 when --dashboard is given; a program may make its
/// own.
class Dashboard {
 public:
  /// Listens on `options` and starts serving; std::runtime_error naming the address and the reason
  /// when it cannot listen ("[dashboard] cannot listen on 127.0.0.1:8080: Address already in use").
  /// Turns metrics::LiveLog on.
  Dashboard(DashboardOptions options, DashboardSource source);
  /// Stops serving (waits for requests in flight).
  ~Dashboard();
  Dashboard(const Dashboard&) = delete;
  Dashboard& operator=(const Dashboard&) = delete;

  /// The port it listens on.
  int port() const;
  /// The page's address with its token ("http://127.0.0.1:8080/?token=...").
  std::string url() const;
  /// The token every request must carry.
  const std::string& token() const;

  /// The JSON the page polls (also for tests): the run, its ranks and actors, collectives, models.
  std::string topology_json();
  /// The scalars written since (cursor, generation) (metrics::LiveLog::since), by tag.
  std::string curves_json(int64_t cursor, int64_t generation);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

/// Shows `model`'s parameters on the page under `name`, each with where it lives: "local (rank r)",
/// "replicated over 'world' (2 ranks, DDP)", "sharded over 'world' (2 ranks, FSDP)", or "hosted on rank 1
/// by 'troupe.host0'" (a RemoteModule). A snapshot taken now (the same name again replaces it); cheap,
/// and kept whether or not a dashboard runs.
void watch_model(const std::string& name, const nn::ModulePtr& model);

/// The dashboard launch started in this process, or null.
Dashboard* dashboard();

}  // namespace troupe::launch
