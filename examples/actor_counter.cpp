// Actors across ranks: rank 0 spawns a Counter on the last rank from a factory registered by name (the
// same binary runs everywhere), every rank finds it in the directory and adds its rank + 1, and a tensor
// travels in a request. Runs the same with `--ranks 2` (threads, one actor system) and `mpirun -np 2`.
#include <cstdio>

#include <troupe/actors/actors.h>
#include <troupe/launch/launch.h>
#include <troupe/tensor/ops.h>
#include <troupe/tools/cli.h>

using namespace troupe;

struct Counter : actors::Actor {
  int64_t total = 0;
  Counter() {
    handle("add", [this](int64_t k) { return total += k; });
    handle("total", [this] { return total; });
    handle("scale", [](Tensor t, double s) { return t * s; });  // runs on the counter's rank
  }
};

int main(int argc, char** argv) {
  cli::App app("actor_counter", "An actor on another rank, found by name and called from every rank.");
  cli::add_launch_flags(app);
  cli::parse(app, argc, argv);
  actors::register_actor<Counter>("Counter");  // on every rank, before any spawn_on
  return launch::run(argc, argv, [](launch::Context& ctx) {
    auto& rt = ctx.actors();
    if (ctx.rank == 0) rt.spawn_on(ctx.size - 1, "counter", "Counter");
    ctx.world->barrier();
    actors::ActorRef counter = rt.lookup("counter");
    counter.request<int64_t>("add", ctx.rank + 1).get();  // a Future; get() waits (with a timeout)
    ctx.world->barrier();
    if (ctx.rank == 0) {
      int64_t total = counter.request<int64_t>("total").get();
      Tensor y = counter.request<Tensor>("scale", ones({3}), 2.0).get();
      bool ok = total == int64_t{ctx.size} * (ctx.size + 1) / 2 && y.sum().item<double>() == 6.0;
      std::printf("counter on rank %d: total %lld, scaled sum %g %s\n", counter.rank(), static_cast<long long>(total),
                  y.sum().item<double>(), ok ? "ok" : "WRONG");
    }
    ctx.world->barrier();
    return 0;
  });
}
