// pipeline_bench: actors::Pipeline over p hosted stages (stage i on rank i), its efficiency against the
// fill-drain bound. Run as
//   pipeline_bench --ranks 2 [--quick]          (one process; also --ranks 4)
//   mpirun -np 2 pipeline_bench [--quick]       (also -np 4)
// Each stage: Linear(512, 512), ReLU, Linear(512, 512), ReLU (float32, 1 thread per rank); a batch of 256
// rows, MSE loss. For m = 4 and 8 micro-batches and both schedules:
//   serial     the m micro-batches one after another through every stage (a pipeline of one micro-batch:
//              two stages are busy at once only while a stage computes its weights' gradients after it
//              has sent its input's, and the stage before runs its backward)
//   pipelined  Pipeline(stages, m).train_step
//   efficiency = (serial / p) / pipelined: 1 when every stage is busy all the time; the fill-drain bound is
//              m / (m + p - 1) (a bubble of (p - 1) / (m + p - 1)). Stages share the machine's cores: with
//              more stages than cores the efficiency cannot pass cores / p.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include <troupe/tools/cli.h>
#include <troupe/actors/actors.h>
#include <troupe/launch/launch.h>
#include <troupe/nn/nn.h>
#include <troupe/tensor/ops.h>

extern "C" {
void openblas_set_num_threads(int num_threads) __attribute__((weak));
}

using namespace troupe;
using Clock = std::chrono::steady_clock;

namespace {
bool g_quick = false;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}
double secs(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

nn::ModulePtr make_stage() {
  return std::make_shared<nn::SequentialImpl>(nn::Linear(512, 512), nn::ReLU(), nn::Linear(512, 512), nn::ReLU());
}
Tensor mse(const Tensor& y, const Tensor& t) { return (y - t).pow(2).mean(); }

void drive(launch::Context& ctx) {
  auto& rt = ctx.actors();
  const int p = ctx.size;
  std::vector<actors::RemoteModulePtr> stages;
  for (int i = 0; i < p; ++i) stages.push_back(actors::host(rt, i, "PipeStage"));
  Tensor x = randn({256, 512}), t = randn({256, 512});
  const int samples = g_quick ? 3 : 7;
  std::printf("pipeline_bench: %d stages (%s), 256 x 512 batch, %u hardware threads\n", p,
              rt.networked() ? "mpirun" : "--ranks, one process", std::thread::hardware_concurrency());
  std::printf("  m  schedule     serial ms  pipelined ms  efficiency  bound m/(m+p-1)\n");
  for (int m : {4, 8}) {
    auto chunks_x = x.chunk(m, 0), chunks_t = t.chunk(m, 0);
    actors::Pipeline one(stages, 1);
    for (auto schedule : {actors::Pipeline::Schedule::FillDrain, actors::Pipeline::Schedule::OneFOneB}) {
      actors::Pipeline pipe(stages, m, schedule);
      pipe.train_step(x, t, mse);  // warm-up
      std::vector<double> ser, pip;
      for (int s = 0; s < samples; ++s) {
        auto t0 = Clock::now();
        for (int k = 0; k < m; ++k) one.train_step(chunks_x[k], chunks_t[k], mse);
        ser.push_back(secs(t0) * 1e3);
        t0 = Clock::now();
        pipe.train_step(x, t, mse);
        pip.push_back(secs(t0) * 1e3);
      }
      const double a = median(ser), b = median(pip);
      std::printf("  %d  %-11s  %9.2f  %12.2f  %10.2f  %.2f\n", m,
                  schedule == actors::Pipeline::Schedule::FillDrain ? "fill-drain" : "1F1B", a, b, (a / p) / b,
                  static_cast<double>(m) / (m + p - 1));
    }
  }
  for (auto& s : stages) s->zero_grad();
}
}  // namespace

int main(int argc, char** argv) {
  // --quick and launch's flags (tools/cli.h); Google Benchmark's --benchmark_* (scripts/bench.sh passes
  // them to every bench) are ignored
  troupe::cli::App app("pipeline_bench", "A benchmark against its peer (bench/README.md).");
  app.add_flag("--quick", g_quick, "few short samples");
  troupe::cli::add_launch_flags(app);
  app.allow_extras();
  troupe::cli::parse(app, argc, argv);
  for (const auto& extra : app.remaining())
    if (extra.rfind("--benchmark_", 0) != 0) troupe::cli::fail(app, "The following argument was not expected: " + extra);
  set_num_threads(1);
  if (openblas_set_num_threads) openblas_set_num_threads(1);
  actors::register_module_factory("PipeStage", [](const actors::List&) { return make_stage(); });
  return launch::run(argc, argv, [](launch::Context& ctx) {
    if (ctx.rank == 0) drive(ctx);
    ctx.world->barrier();
    return 0;
  });
}
