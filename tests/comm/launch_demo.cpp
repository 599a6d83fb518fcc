// launch::run: every rank all-reduces rank + 1 and prints the sum, size*(size+1)/2. Runs unchanged as
// `launch_demo` (one rank), `launch_demo --ranks 3` (threads) and `mpirun -np 2 launch_demo`.
#include <troupe/launch/launch.h>
#include <troupe/tensor/ops.h>

#include <cstdio>

using namespace troupe;

int main(int argc, char** argv) {
  return launch::run(argc, argv, [](launch::Context& ctx) {
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
