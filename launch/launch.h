// Starting a distributed program: the same binary runs in one process, as N ranks on threads
// (`--ranks N`), or under `mpirun -np N` (one rank per process, over one host or a hostfile's).
//
//   int main(int argc, char** argv) {
//     return launch::run(argc, argv, [](launch::Context& ctx) {
//       Tensor t = full({4}, ctx.rank + 1.0);
//       ctx.world->all_reduce(t);            // size*(size+1)/2 on every rank
//       return 0;
//     });
//   }
#pragma once

#include <functional>
#include <memory>
#include <string>

#include <troupe/comm/process_group.h>
#include <troupe/tensor/device.h>

namespace troupe::actors {
class Runtime;  // <troupe/actors/runtime.h>
}

namespace troupe::launch {

/// What a rank knows about itself.
struct Context {
  /// This rank in the world, 0 <= rank < size.
  int rank = 0;
  /// Number of ranks in the world.
  int size = 1;
  /// This rank's index among the ranks on its host (OMPI_COMM_WORLD_LOCAL_RANK; the thread's rank
  /// with --ranks).
  int local_rank = 0;
  /// The world group's backend: "mpi" or "local" ("mpi+nccl" / "local+nccl" with a gpu_world).
  std::string backend;
  /// This host's name.
  std::string host;
  /// The device this rank computes on: cuda:<local_rank> when every rank has a GPU of its own, else cpu.
  Device device;
  /// The world group over MPI or threads, for CPU tensors (also comm::world()).
  comm::ProcessGroupPtr world;
  /// With GPUs (and NCCL built in): the same ranks as an NCCL group on `device`, for CUDA tensors (its
  /// unique id travels over `world`); null otherwise. TROUPE_NO_NCCL=1 turns it off.
  comm::ProcessGroupPtr gpu_world;
  /// This rank's actor runtime (one CAF actor system per process, shared by the ranks of --ranks N;
  /// under mpirun connected to the other processes'); null when troupe was built without CAF or with
  /// TROUPE_ACTORS=0.
  std::shared_ptr<actors::Runtime> actor_runtime;

  /// *actor_runtime (include <troupe/actors/runtime.h> to use it); throws when there is none.
  actors::Runtime& actors() const;
};

/// Sets up this process's world: over MPI when started by mpirun (OMPI_COMM_WORLD_RANK / SIZE /
/// LOCAL_RANK set), else a `local` group of one rank. Starts the process's actor system (connected to
/// the other ranks' under mpirun; TROUPE_ACTORS=0 leaves it off). Sets comm::world(), prints
/// "[troupe] rank 0/2 backend mpi device cpu host <hostname>" and registers finalize() with atexit.
/// Calling it again returns the same world.
Context init(int& argc, char**& argv);

/// Barrier on the world, stops the actor system, then MPI_Finalize when MPI is in use; clears
/// comm::world(). Idempotent. Runs by itself when the thread that called init() is the main thread and
/// it ends (main returns), else at exit.
void finalize();

/// Runs main_fn once per rank and returns the largest exit code. Takes `--ranks N` (or --ranks=N) out
/// of argv: without mpirun, main_fn then runs on N threads forming a `local` world of N (each thread
/// gets its own Context and comm::world(), and every rank's actor runtime shares one actor system, stopped
/// once the threads end); under mpirun it runs once per process. An exception in a
/// rank propagates (with threads: the first one, naming its rank, once every thread ended).
int run(int argc, char** argv, std::function<int(Context&)> main_fn);

}  // namespace troupe::launch
