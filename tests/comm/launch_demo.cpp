// launch::run: every rank all-reduces rank + 1 and prints the sum, size*(size+1)/2. Runs unchanged as
// `launch_demo` (one rank), `launch_demo --ranks 3` (threads) and `mpirun -np 2 launch_demo`.
// `--kill-rank R` makes rank R die by SIGKILL before the all-reduce (the dead-peer test: the others must
// not hang).
#include <troupe/launch/launch.h>
#include <troupe/tensor/ops.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>

using namespace troupe;

int main(int argc, char** argv) {
  int kill_rank = -1;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--kill-rank") == 0) kill_rank = std::atoi(argv[i + 1]);
  return launch::run(argc, argv, [kill_rank](launch::Context& ctx) {
    if (ctx.rank == kill_rank) {
      std::printf("[launch_demo] rank %d kills itself\n", ctx.rank);
      std::fflush(stdout);
      std::raise(SIGKILL);
    }
    Tensor t = full({4}, ctx.rank + 1.0);
    ctx.world->all_reduce(t);
    double want = ctx.size * (ctx.size + 1) / 2.0;
    double got = t.to_vector<float>()[0];
    std::printf("[launch_demo] rank %d/%d (%s) all_reduce = %g %s\n", ctx.rank, ctx.size, ctx.backend.c_str(), got,
                got == want ? "ok" : "WRONG");
    std::fflush(stdout);
    return got == want ? 0 : 1;
  });
}
