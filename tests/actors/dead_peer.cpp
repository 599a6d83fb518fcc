// ctest actors_mpi_dead_peer (dead_peer_check.cmake): under mpirun -np 2, rank 1's process is killed
// (SIGKILL) while rank 0 waits on a request to an actor there. Rank 0 must see that request, and every
// later one, fail naming the actor and its rank, within seconds; then it prints "dead peer ok".
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include <troupe/actors/actors.h>
#include <troupe/launch/launch.h>

using namespace troupe;
using namespace troupe::actors;

struct Victim : Actor {
  Victim() {
    handle("sleep_ms", [](int64_t ms) {
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
      return ms;
    });
    handle("die", [] { std::raise(SIGKILL); });
  }
};

int main(int argc, char** argv) {
  register_actor<Victim>("Victim");
  launch::Context ctx = launch::init(argc, argv);
  auto& rt = ctx.actors();
  if (ctx.rank == 0) {
    ActorRef v = rt.spawn_on(1, "victim", "Victim");
    ActorRef killer = rt.spawn_on(1, "killer", "Victim");  // another actor: v is busy sleeping
    auto pending = v.request<int64_t>("sleep_ms", 30000);
    auto t0 = std::chrono::steady_clock::now();
    killer.send("die");
    int failures = 0;
    try {
      pending.get();
    } catch (const ActorError& e) {
      std::printf("rank 0: pending request failed: %s\n", e.what());
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
    ctx.actor_runtime.reset();
    actors::stop();
    double stop_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
    std::printf("rank 0: actor system stopped in %.3f s\n", stop_s);
    std::printf(failures == 2 && s < 10 && stop_s < 10 ? "dead peer ok\n" : "dead peer WRONG\n");
    std::fflush(stdout);
    std::_Exit(failures == 2 ? 0 : 1);  // the world cannot finalize with a dead rank
  }
  // Rank 1 serves until it is killed.
  std::this_thread::sleep_for(std::chrono::seconds(60));
  return 1;
}
