// ctest actors_mpi_dead_peer: under mpirun -np 2, rank 1's process is killed (SIGKILL) while rank 0 waits
// on a request to an actor there, and on one to an actor hosted as RemoteModule's host is, whose handler
// runs on rank 1's lane thread (the lane's inline runs, on by default; ctest
// actors_mpi_dead_peer_not_inline turns them off: TROUPE_ACTOR_LANE_RUN_INLINE_US=0). Rank 0 must see that request, and every later one, fail naming the
// actor and its rank, within seconds, and stop its actor system without hanging: "dead peer ok".
// ctest actors_mpi_stopped_peer (--stopped): rank 1 is stopped (SIGSTOP) instead: "stopped peer ok".
#include <signal.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <string>
#include <cstdlib>
#include <thread>

#include <troupe/actors/actors.h>
#include <troupe/launch/launch.h>
#include <troupe/tensor/ops.h>

using namespace troupe;
using namespace troupe::actors;

struct Victim : Actor {
  Victim() {
    handle("sleep_ms", [](int64_t ms) {
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
      return ms;
    });
    handle("die", [] { std::raise(SIGKILL); });
    // kills this process `ms` from now, from a thread of its own (the lane thread may be in a handler)
    handle("die_in", [](int64_t ms) {
      std::thread([ms] {
        std::this_thread::sleep_for(std::chrono::milliseconds(ms));
        std::raise(SIGKILL);
      }).detach();
      return ms;
    });
  }
};
// Hosted as RemoteModule's host is: a Call that comes on the lane to it idle runs on the lane thread.
struct InlineVictim : Victim {
  InlineVictim() {
    use_own_thread();
    allow_inline_requests();
  }
};

// --stopped: rank 1 is stopped (SIGSTOP) instead of killed; only the heartbeat can tell. Rank 0's
// requests must fail within the connection timeout (5 s), then rank 0 continues it (SIGCONT) and both
// finalize.
int stopped_peer(launch::Context& ctx) {
  auto& rt = ctx.actors();
  Tensor pid = full({1}, static_cast<double>(getpid()), TensorOptions().dtype(kInt64));
  ctx.world->broadcast(pid, 1);
  if (ctx.rank == 0) {
    ActorRef v = rt.spawn_on(1, "victim", "Victim");
    // Longer than detection takes (about 5.5 s), short enough that rank 1 finishes it soon after SIGCONT.
    auto pending = v.request<int64_t>("sleep_ms", 6500);
    auto t0 = std::chrono::steady_clock::now();
    kill(static_cast<pid_t>(pid.item<int64_t>()), SIGSTOP);
    std::string e;
    try {
      pending.get();
    } catch (const ActorError& err) {
      e = err.what();
    }
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("rank 0: pending request to a stopped rank failed after %.3f s: %s\n", s, e.c_str());
    kill(static_cast<pid_t>(pid.item<int64_t>()), SIGCONT);
    std::printf(!e.empty() && s < 10 ? "stopped peer ok\n" : "stopped peer WRONG\n");
    std::fflush(stdout);
  }
  auto t1 = std::chrono::steady_clock::now();
  ctx.world->barrier();
  std::printf("rank %d: barrier after %.3f s\n", ctx.rank, std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count());
  launch::finalize();
  std::printf("rank %d: finalized after %.3f s\n", ctx.rank, std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count());
  std::fflush(stdout);
  return 0;
}

int main(int argc, char** argv) {
  register_actor<Victim>("Victim");
  register_actor<InlineVictim>("InlineVictim");
  launch::Context ctx = launch::init(argc, argv);
  if (argc > 1 && std::string(argv[1]) == "--stopped") return stopped_peer(ctx);
  auto& rt = ctx.actors();
  if (ctx.rank == 0) {
    ActorRef v = rt.spawn_on(1, "victim", "Victim");
    ActorRef killer = rt.spawn_on(1, "killer", "Victim");  // another actor: v is busy sleeping
    ActorRef iv = rt.spawn_on(1, "inline_victim", "InlineVictim");
    for (int i = 0; i < 3; ++i) iv.request<int64_t>("sleep_ms", 0).get();  // short: later Calls run inline
    auto pending = v.request<int64_t>("sleep_ms", 30000);
    killer.request<int64_t>("die_in", 300).get();
    // on rank 1's lane thread with the inline runs on, which it holds until the process dies
    auto pending_inline = iv.request<int64_t>("sleep_ms", 30000);
    auto t0 = std::chrono::steady_clock::now();
    int failures = 0;
    try {
      pending.get();
    } catch (const ActorError& e) {
      std::printf("rank 0: pending request failed: %s\n", e.what());
      ++failures;
    }
    try {
      pending_inline.get();
    } catch (const ActorError& e) {
      std::printf("rank 0: pending request run on the lane thread failed: %s\n", e.what());
      ++failures;
    }
    try {
      v.request<int64_t>("sleep_ms", 1).get();
    } catch (const ActorError& e) {
      std::printf("rank 0: later request failed: %s\n", e.what());
      ++failures;
    }
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("rank 0: %d failures after %.3f s\n", failures, s);
    // The actor system stops without hanging although a peer is gone.
    auto t1 = std::chrono::steady_clock::now();
    v = {};
    killer = {};
    iv = {};
    ctx.actor_runtime.reset();
    actors::stop();
    double stop_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
    std::printf("rank 0: actor system stopped in %.3f s\n", stop_s);
    std::printf(failures == 3 && s < 10 && stop_s < 10 ? "dead peer ok\n" : "dead peer WRONG\n");
    std::fflush(stdout);
    std::_Exit(failures == 3 ? 0 : 1);  // the world cannot finalize with a dead rank
  }
  // Rank 1 serves until it is killed.
  std::this_thread::sleep_for(std::chrono::seconds(60));
  return 1;
}
