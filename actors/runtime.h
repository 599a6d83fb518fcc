// The actor runtime of a rank: spawning actors on any rank from registered factories, and the rank
// directory (which named actor lives where). One CAF actor system per process, started by launch:
// with --ranks N every rank's Runtime shares it (tensors in messages pass by handle); under mpirun each
// process has its own, connected to the others' (endpoints exchanged over the world group).
//
//   launch::run(argc, argv, [](launch::Context& ctx) {
//     auto& rt = ctx.actors();
//     if (ctx.rank == 0) {
//       auto c = rt.spawn_on(1, "counter", "Counter", 10);      // built on rank 1
//       c.request<int64_t>("add", 5).get();                     // 15
//     }
//     ...
//   });
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <troupe/actors/actor.h>
#include <troupe/actors/future.h>
#include <troupe/actors/value.h>
#include <troupe/comm/process_group.h>

namespace troupe::actors {

namespace detail {
class System;
}

/// A rank's view of the process's actor system.
class Runtime {
 public:
  /// @private (launch makes them: start_local / start_connected).
  Runtime(int rank, int size, std::shared_ptr<detail::System> sys);
  ~Runtime();

  /// This rank.
  int rank() const { return rank_; }
  /// Number of ranks.
  int size() const { return size_; }
  /// True when the ranks are processes connected over the network (mpirun), false with --ranks N.
  bool networked() const;

  /// Builds an actor named `name` on `rank` with the factory registered as `factory`, from `args`, and
  /// returns its handle (usable from any rank). Waits at most default_timeout(). Throws ActorError: an
  /// unknown factory (naming the registered ones), a name already used on that rank, a throwing factory.
  template <class... A>
  ActorRef spawn_on(int rank, const std::string& name, const std::string& factory, A&&... args) {
    return spawn_on_list(rank, name, factory, List{to_value(std::forward<A>(args))...});
  }
  /// spawn_on with the arguments as a List.
  ActorRef spawn_on_list(int rank, const std::string& name, const std::string& factory, List args);
  /// spawn_on, without waiting.
  Future<ActorRef> spawn_on_async(int rank, const std::string& name, const std::string& factory, List args);

  /// The actor named `name` (the lowest rank's, when several ranks have one); ActorError naming the
  /// names that exist when none has it.
  ActorRef lookup(const std::string& name) const;
  /// lookup(), or nothing.
  std::optional<ActorRef> find(const std::string& name) const;
  /// Every named actor as "name@rank", ordered by rank then name.
  std::vector<std::string> names() const;
  /// The runtime's own actor on `rank` (it spawns actors there and answers the directory).
  ActorRef service(int rank) const;
  /// Where rank `rank`'s actor system listens ("127.0.0.1:40123"); "" with --ranks N (nothing listens).
  /// Every connection to it must first prove the job's secret (actors/auth.h).
  std::string endpoint(int rank) const;
  /// Connections this rank's listener refused (no or a wrong secret, garbage, a timeout) and admitted.
  std::pair<int64_t, int64_t> gate_counts() const;

 private:
  int rank_;
  int size_;
  std::shared_ptr<detail::System> sys_;
};

/// Starts the process's actor system for `ranks` ranks living in this process (--ranks N; 1 for a
/// plain single process) and returns each rank's Runtime. Throws if one is running.
std::vector<std::shared_ptr<Runtime>> start_local(int ranks);
/// Starts this process's actor system as rank world->rank() of world->size() processes and connects it
/// to the other ranks' (collective over `world`: every rank calls it). Endpoints listen on loopback when
/// every rank is on this host. Every connection proves the job's secret before CAF reads from it: the
/// SHA-256 of TROUPE_SECRET when set, else 32 random bytes made by rank 0 and broadcast over `world`.
std::shared_ptr<Runtime> start_connected(const comm::ProcessGroupPtr& world);
/// Across processes, tensors of at least this many bytes travel beside the control message on the data
/// plane (comm point to point on a group of every rank, matched by an id) instead of inside it: 1 MB
/// unless TROUPE_ACTOR_DATA_PLANE_BYTES says otherwise (0: never). Per process; each sender decides.
int64_t data_plane_bytes();
/// Sets data_plane_bytes() for this process (<= 0: never).
void set_data_plane_bytes(int64_t bytes);
/// Stops the process's actor system: every actor is stopped, every pending request fails. Idempotent.
void stop();
/// True while an actor system runs in this process.
bool running();
/// How Calls and Replies cross between this process and the others: "lane" (MPI messages on a private
/// communicator of the job, the default under mpirun), "caf" (CAF's middleman over the gated TCP
/// connections; TROUPE_ACTOR_LANE=caf), or "local" (one process, --ranks N, or none running).
std::string cross_process_path();
/// Sends this process's later Calls to other processes on the lane ("lane") or through CAF ("caf"), so
/// that a benchmark can time both in one run. Call it at a quiet point: every Call sent before it
/// answered or run (a Call on the other path could overtake one still in flight). ActorError for "lane"
/// when this process has no lane (--ranks N, TROUPE_ACTOR_LANE=caf, a world that is not MPI's).
void set_cross_process_path(const std::string& path);
/// The CUDA device on which a CUDA tensor from another process arrives in this one: cuda:`index`, or -1
/// (the default) for the index it left from. Under mpirun launch::init sets its rank's device
/// (cuda:<local_rank>, when every rank has a GPU of its own): a device map from every peer's GPU to this
/// rank's, so that a pipeline stage's activations land on the GPU its module lives on (PyTorch's RPC asks
/// for such a map by hand, TensorPipeRpcBackendOptions.set_device_map). std::invalid_argument below -1.
void set_cuda_arrival_device(int index);
int cuda_arrival_device();

}  // namespace troupe::actors
