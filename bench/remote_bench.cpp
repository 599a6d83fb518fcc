// remote_bench: RemoteModule and distributed autograd across 2 processes (issue 12), beside their peers:
//   mpirun -np 2 remote_bench [--quick]     (scripts/remote_bench.sh runs it with bench/remote_torch.py)
//   remote_bench --ranks 2 [--quick]        two ranks as threads of one process (tensors by handle)
//   mpirun -np 2 remote_bench --loop=N [--bytes=B] [--loop-stream]
//                                           N lane transfers of B bytes (4 KB) back to back, then the same
//                                           on raw MPI, for a profiler or TROUPE_ACTOR_LANE_TRACE (the
//                                           stream: one-way, each 1000th a request)
// Rank 0 drives, rank 1 hosts; 1 troupe/OpenBLAS thread per rank. Cases:
//   rtt           proxy forward of a hosted Linear(16, 16), batch 4, under no_grad (PyTorch's peer:
//                 RemoteModule.forward outside a dist_autograd context); and with grad mode on (the call
//                 records a RemoteCallNode; the host keeps the graph until the node is freed)
//   transfer      a float32 tensor of 4 KB .. 64 MB to a sink actor that answers its element count, vs raw
//                 MPI: MPI_Send of the same buffer, MPI_Recv of an 8-byte answer (ratio = MPI / troupe). The
//                 sink is hosted as RemoteModule's host is (its own thread, allow_inline_requests: the
//                 realistic path of an activation, a `fwd` to a ModuleHost); a column beside it times a sink
//                 on CAF's shared threads without inline requests (the bench's sink up to 2026-11-27).
//                 Every timed loop starts warm on both sides: troupe's after one untimed transfer (its
//                 threads may have slept while the other paths ran), MPI's after a barrier (both ranks
//                 then spin in MPI). Up to 2026-11-28 troupe's loops started cold, after the raw-MPI loop
//                 of the previous sample: at 1 MB a wake-up or two in 20 transfers cost 10-30% of it
//   stream        the same sizes as n transfers back to back, one answer after the last (a pipeline's
//                 activations, where one transfer's latency overlaps the next): troupe's n-1 one-way
//                 sends and a request to the sink, against n MPI_Sends and an 8-byte answer
//   train step    two-stage MLP 784-1024-1024-10 (ReLU), batch 256: stage 1 local on rank 0, stage 2
//                 (1024-1024, ReLU, 1024-10) hosted on rank 1; zero_grad, cross_entropy(stage2(stage1(x)), y),
//                 backward through both ranks, DistributedOptimizer(SGD 0.01) step; and the same model run
//                 locally on rank 0 (the compute floor); under mpirun also through actors::Pipeline (1F1B,
//                 2 and 4 micro-batches; stage 1 then hosted on rank 0), "troupe_remote_step_pipe_ms" at 4
// Under mpirun each troupe case runs on both cross-process paths in the same run: the lane (Calls and
// Replies as MPI messages, the default) and CAF's middleman (actors::set_cross_process_path("caf")).
// Medians of samples; prints "troupe_remote_rtt_us", "troupe_remote_step_ms" (the lane) and the same with
// "_caf" for scripts/remote_bench.sh.
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <troupe/tools/cli.h>
#include <troupe/actors/actors.h>
#include <troupe/launch/launch.h>
#include <troupe/nn/nn.h>
#include <troupe/optim/sgd.h>
#include <troupe/tensor/ops.h>

extern "C" {
void openblas_set_num_threads(int num_threads) __attribute__((weak));
}

using namespace troupe;
using Clock = std::chrono::steady_clock;

namespace {

bool g_quick = false;
std::string g_only;  // --only=transfer: that case alone
int64_t g_bytes = 0;  // --bytes=N: the transfer case at that size alone
int64_t g_loop = 0;   // --loop=N: N lane transfers of --bytes (default 4 KB) back to back, for a profiler
bool g_loop_stream = false;  // --loop-stream: --loop's transfers one-way, a request after each 1,000

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}
double secs(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The sizes of the transfer and stream cases: 4 KB .. 64 MB (--quick: up to 16 MB; --bytes: that one).
std::vector<int64_t> transfer_sizes() {
  std::vector<int64_t> out;
  for (int64_t b : {int64_t(4) << 10, int64_t(64) << 10, int64_t(1) << 20, int64_t(4) << 20, int64_t(16) << 20,
                    int64_t(64) << 20}) {
    if (g_quick && b > (int64_t(16) << 20)) break;
    if (g_bytes <= 0 || b == g_bytes) out.push_back(b);
  }
  return out;
}

// Ends rank 1's raw-MPI server (serve_mpi).
void stop_mpi_server() {
  int stop[3] = {0, 0, 0};
  MPI_Send(stop, 3, MPI_INT, 1, 77, MPI_COMM_WORLD);
}

// On CAF's shared threads, no inline requests.
struct Sink : actors::Actor {
  Sink() {
    handle("take", [](Tensor t) { return t.numel(); });
  }
};
// Hosted as RemoteModule's ModuleHost is (remote_module.cpp): its own thread, inline requests allowed.
struct HostSink : actors::Actor {
  HostSink() {
    use_own_thread();
    allow_inline_requests();
    handle("take", [](Tensor t) { return t.numel(); });
  }
};

nn::ModulePtr make_stage1() {
  return std::make_shared<nn::SequentialImpl>(nn::Linear(784, 1024), nn::ReLU());
}
nn::ModulePtr make_stage2() {
  return std::make_shared<nn::SequentialImpl>(nn::Linear(1024, 1024), nn::ReLU(), nn::Linear(1024, 10));
}

struct TwoStage : nn::Module {
  nn::ModulePtr s1, s2;
  TwoStage(nn::ModulePtr a, nn::ModulePtr b) {
    s1 = register_module("s1", a);
    s2 = register_module("s2", b);
  }
  Tensor forward(const Tensor& x) override { return (*s2)((*s1)(x)); }
};

double rtt_us(actors::RemoteModule& m, const Tensor& x, int reps) {
  std::vector<double> us;
  us.reserve(reps);
  for (int i = 0; i < reps; ++i) {
    auto t0 = Clock::now();
    Tensor y = m(x);
    us.push_back(secs(t0) * 1e6);
  }
  return median(us);
}

void drive(launch::Context& ctx) {
  auto& rt = ctx.actors();
  const int samples = g_quick ? 3 : 7;
  std::printf("remote_bench: %s, 2 ranks, 1 thread each\n", rt.networked() ? "mpirun (2 processes)" : "--ranks 2 (one process)");

  // The paths to time: the one this process uses, and CAF's beside the lane.
  std::vector<std::string> paths{actors::cross_process_path()};
  if (paths[0] == "lane") paths.push_back("caf");
  auto use = [&](const std::string& p) {
    if (p != "local") actors::set_cross_process_path(p);
  };

  if (rt.networked() && g_loop > 0) {  // --loop: the lane's transfer alone, long enough to profile
    auto sink = rt.spawn_on(1, "bench.sink", "HostSink");
    Tensor t = randn({(g_bytes > 0 ? g_bytes : 4096) / 4});
    for (int i = 0; i < 100; ++i) sink.request<int64_t>("take", t).get();
    auto t0 = Clock::now();
    for (int64_t i = 0; i < g_loop; ++i) {
      if (g_loop_stream && i % 1000 != 999) {
        sink.send("take", t);
      } else {
        sink.request<int64_t>("take", t).get();
      }
    }
    const double lane_us = secs(t0) * 1e6 / static_cast<double>(g_loop);
    // The same on raw MPI (the stream: an answer after the last only).
    const int64_t n = std::min<int64_t>(g_loop, 1 << 30);
    int cmd[3] = {g_loop_stream ? 2 : 1, static_cast<int>(t.numel()), static_cast<int>(n)};
    MPI_Send(cmd, 3, MPI_INT, 1, 77, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = Clock::now();
    for (int64_t i = 0; i < n; ++i) {
      MPI_Send(t.data_ptr(), static_cast<int>(t.numel()), MPI_FLOAT, 1, 78, MPI_COMM_WORLD);
      if (!g_loop_stream || i == n - 1) {
        int64_t ack = 0;
        MPI_Recv(&ack, 1, MPI_INT64_T, 1, 79, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      }
    }
    const double mpi_us = secs(t0) * 1e6 / static_cast<double>(n);
    std::printf("loop  %lld %s of %lld bytes: lane %.2f us each, raw MPI %.2f us (MPI/lane %.2f)\n",
                static_cast<long long>(g_loop), g_loop_stream ? "one-way transfers (a request each 1000th)" : "transfers",
                static_cast<long long>(t.nbytes()), lane_us, mpi_us, mpi_us / lane_us);
    stop_mpi_server();
    return;
  }

  // ---- rtt
  auto lin = actors::host(rt, 1, "Linear", {16, 16});
  Tensor x = randn({4, 16});
  const int reps = g_quick ? 200 : 1000;
  std::vector<double> rtts;
  for (const auto& p : paths) {
    if (!g_only.empty() && g_only != "rtt") break;
    use(p);
    for (int i = 0; i < 100; ++i) (*lin)(x);
    std::vector<double> nog, withg;
    for (int s = 0; s < samples; ++s) {
      {
        NoGradGuard g;
        nog.push_back(rtt_us(*lin, x, reps));
      }
      withg.push_back(rtt_us(*lin, x, reps));
    }
    rtts.push_back(median(nog));
    std::printf("rtt  [%s] proxy forward Linear(16,16) batch 4, no_grad: %.1f us; grad mode on: %.1f us\n", p.c_str(),
                rtts.back(), median(withg));
  }
  use(paths[0]);
  double rtt = rtts.empty() ? 0 : rtts[0];

  // ---- transfer vs raw MPI (mpirun only: the MPI side needs two processes)
  if (rt.networked() && (g_only.empty() || g_only == "transfer")) {
    auto sink = rt.spawn_on(1, "bench.sink", "HostSink");
    auto shared_sink = rt.spawn_on(1, "bench.shared_sink", "Sink");
    std::printf("transfer  bytes        lane ms    caf ms     MPI ms   MPI/lane  MPI/caf   lane ms (shared-thread sink)\n");
    for (int64_t bytes : transfer_sizes()) {
      Tensor t = randn({bytes / 4});
      // At least 4 MB or 20 transfers a sample, at most 1,000 (4 KB: 20 transfers, 0.2 ms, made a wake-up
      // or a preemption of either side a tenth of the sample, up to 2026-11-28)
      const int n = bytes >= (int64_t(16) << 20) ? 5 : static_cast<int>(std::clamp<int64_t>((int64_t(4) << 20) / bytes, 20, 1000));
      std::vector<double> tr, tc, mp, tsh;
      for (const auto& p : paths) {  // warm-up: first calls, the caching allocator's blocks of this size
        use(p);
        for (int i = 0; i < 3; ++i) sink.request<int64_t>("take", t).get();
      }
      use(paths[0]);
      for (int i = 0; i < 3; ++i) shared_sink.request<int64_t>("take", t).get();
      for (int s = 0; s < samples; ++s) {
        for (size_t k = 0; k < paths.size(); ++k) {
          use(paths[k]);
          sink.request<int64_t>("take", t).get();  // warm, as MPI's side is after its barrier (see the file comment)
          auto t0 = Clock::now();
          for (int i = 0; i < n; ++i) sink.request<int64_t>("take", t).get();
          (k == 0 ? tr : tc).push_back(secs(t0) * 1e3 / n);
        }
        use(paths[0]);
        shared_sink.request<int64_t>("take", t).get();
        auto t1 = Clock::now();
        for (int i = 0; i < n; ++i) shared_sink.request<int64_t>("take", t).get();
        tsh.push_back(secs(t1) * 1e3 / n);
        int cmd[3] = {1, static_cast<int>(bytes / 4), n};
        MPI_Send(cmd, 3, MPI_INT, 1, 77, MPI_COMM_WORLD);
        MPI_Barrier(MPI_COMM_WORLD);
        auto t0 = Clock::now();
        for (int i = 0; i < n; ++i) {
          MPI_Send(t.data_ptr(), static_cast<int>(bytes / 4), MPI_FLOAT, 1, 78, MPI_COMM_WORLD);
          int64_t ack = 0;
          MPI_Recv(&ack, 1, MPI_INT64_T, 1, 79, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        }
        mp.push_back(secs(t0) * 1e3 / n);
      }
      double a = median(tr), c = median(tc), b = median(mp);
      std::printf("transfer  %-10lld  %9.3f  %9.3f  %9.3f   %6.2f   %6.2f   %9.3f\n", static_cast<long long>(bytes), a, c, b,
                  b / a, tc.empty() ? 0.0 : b / c, median(tsh));
    }
  }
  // ---- stream vs raw MPI: n transfers back to back, one answer at the end (a pipeline's activations)
  if (rt.networked() && (g_only.empty() || g_only == "transfer")) {
    auto sink = rt.spawn_on(1, "bench.stream_sink", "HostSink");
    use(paths[0]);
    std::printf("stream    bytes        lane ms     MPI ms   MPI/lane   (per transfer; n-1 one-way sends and a request)\n");
    for (int64_t bytes : transfer_sizes()) {
      Tensor t = randn({bytes / 4});
      // At least 16 MB or 50 transfers a sample, at most 1,000 (50 up to 2026-11-28: 0.15 ms at 4 KB)
      const int n = bytes >= (int64_t(16) << 20) ? 5
                    : bytes >= (int64_t(4) << 20) ? 20
                                                  : static_cast<int>(std::clamp<int64_t>((int64_t(16) << 20) / bytes, 50, 1000));
      std::vector<double> tr, mp;
      for (int i = 0; i < 3; ++i) sink.request<int64_t>("take", t).get();
      for (int s = 0; s < samples; ++s) {
        sink.request<int64_t>("take", t).get();  // warm
        auto t0 = Clock::now();
        for (int i = 0; i < n - 1; ++i) sink.send("take", t);
        sink.request<int64_t>("take", t).get();  // one sender's messages to one actor arrive in order
        tr.push_back(secs(t0) * 1e3 / n);
        int cmd[3] = {2, static_cast<int>(bytes / 4), n};
        MPI_Send(cmd, 3, MPI_INT, 1, 77, MPI_COMM_WORLD);
        MPI_Barrier(MPI_COMM_WORLD);
        t0 = Clock::now();
        for (int i = 0; i < n; ++i) MPI_Send(t.data_ptr(), static_cast<int>(bytes / 4), MPI_FLOAT, 1, 78, MPI_COMM_WORLD);
        int64_t ack = 0;
        MPI_Recv(&ack, 1, MPI_INT64_T, 1, 79, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        mp.push_back(secs(t0) * 1e3 / n);
      }
      double a = median(tr), b = median(mp);
      std::printf("stream    %-10lld  %9.4f  %9.4f   %6.2f\n", static_cast<long long>(bytes), a, b, b / a);
    }
  }
  if (rt.networked()) {  // rank 1's raw-MPI server ends
    stop_mpi_server();
  }

  if (!g_only.empty() && g_only != "step") return;
  // ---- two-stage train step
  manual_seed(1234);
  auto local_model = std::make_shared<TwoStage>(make_stage1(), make_stage2());
  manual_seed(1234);
  auto s1 = make_stage1();
  auto s2 = actors::host(rt, 1, "Stage2");
  auto split = std::make_shared<TwoStage>(s1, s2);
  Tensor xb = randn({256, 784});
  Tensor yb = randint(0, 10, {256});
  optim::SGD sgd(local_model->parameters(), optim::SGDOptions(0.01));
  actors::DistributedOptimizer dopt(split, optim::SGDOptions(0.01));
  auto step_local = [&] {
    sgd.zero_grad();
    nn::functional::cross_entropy(local_model->forward(xb), yb).backward();
    sgd.step();
  };
  auto step_split = [&] {
    dopt.zero_grad();
    nn::functional::cross_entropy(split->forward(xb), yb).backward();
    dopt.step();
  };
  for (int i = 0; i < 3; ++i) {
    step_local();
    step_split();
  }
  const int steps = g_quick ? 5 : 20;
  std::vector<double> tl;
  std::vector<std::vector<double>> ts(paths.size());
  for (int s = 0; s < samples; ++s) {
    auto t0 = Clock::now();
    for (int i = 0; i < steps; ++i) step_local();
    tl.push_back(secs(t0) * 1e3 / steps);
    for (size_t k = 0; k < paths.size(); ++k) {
      use(paths[k]);
      t0 = Clock::now();
      for (int i = 0; i < steps; ++i) step_split();
      ts[k].push_back(secs(t0) * 1e3 / steps);
    }
    use(paths[0]);
  }
  double step_ms = median(ts[0]);
  for (size_t k = 0; k < paths.size(); ++k) {
    std::printf("train step [%s] two-stage MLP 784-1024-1024-10 batch 256: split over 2 ranks %.2f ms, local %.2f ms\n",
                paths[k].c_str(), median(ts[k]), median(tl));
  }
  // The same split through actors::Pipeline (1F1B): stage 1 hosted on rank 0 (its actor's thread computes
  // while rank 1 computes stage 2 of the micro-batch before), both stepped by one DistributedOptimizer. Not
  // PyTorch's schedule (its peer runs the batch through the stages one after the other); it shows how close
  // troupe comes to the bound of a two-stage split, the slower stage's time alone.
  if (rt.networked()) {
    use(paths[0]);
    manual_seed(1234);
    auto p1 = actors::host(rt, 0, "Stage1");
    auto p2 = actors::host(rt, 1, "Stage2");
    auto piped = std::make_shared<TwoStage>(p1, p2);
    actors::DistributedOptimizer popt(piped, optim::SGDOptions(0.01));
    auto ce = [](const Tensor& out, const Tensor& t) { return nn::functional::cross_entropy(out, t); };
    for (int chunks : {2, 4}) {
      actors::Pipeline pipe({p1, p2}, chunks, actors::Pipeline::Schedule::OneFOneB);
      auto step_piped = [&] {
        popt.zero_grad();
        pipe.train_step(xb, yb, ce);
        popt.step();
      };
      for (int i = 0; i < 3; ++i) step_piped();
      std::vector<double> tp;
      for (int s = 0; s < samples; ++s) {
        auto t0 = Clock::now();
        for (int i = 0; i < steps; ++i) step_piped();
        tp.push_back(secs(t0) * 1e3 / steps);
      }
      std::printf("train step [%s] the same split through actors::Pipeline (1F1B, %d micro-batches): %.2f ms\n",
                  paths[0].c_str(), chunks, median(tp));
      if (chunks == 4) std::printf("troupe_remote_step_pipe_ms %.3f\n", median(tp));
    }
  }
  std::printf("troupe_remote_rtt_us %.2f\n", rtt);
  std::printf("troupe_remote_step_ms %.3f\n", step_ms);
  if (paths.size() > 1 && rtts.size() > 1) {
    std::printf("troupe_remote_rtt_caf_us %.2f\n", rtts[1]);
    std::printf("troupe_remote_step_caf_ms %.3f\n", median(ts[1]));
  }
}

// Waits for rank 0's next command without spinning: MPI_Iprobe, then 2 ms asleep. A blocking MPI_Probe or
// MPI_Recv busy-polls (Open MPI) for as long as it waits; rank 1 waiting so for its next command took a core
// and MPI's progress lock from its own lane thread while rank 0 timed the troupe cases (until 2026-11-27 it
// also spun 2 ms after each raw-MPI loop, into the lane's timed loop that came next). Until 2026-11-28 it
// slept 200 us: 5,000 wake-ups a second, each taking the core of rank 1's lane thread on 2 cores.
void wait_command(MPI_Status* st) {
  for (int flag = 0;;) {
    MPI_Iprobe(0, 77, MPI_COMM_WORLD, &flag, st);
    if (flag) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

// Rank 1 under mpirun: serves the raw-MPI side of the transfer case until told to stop. A command
// {1, floats, n} is followed by n sends, each answered by 8 bytes; {2, floats, n} (the stream) by n sends,
// the last one answered; MPI_Recv spins meanwhile, as raw MPI does.
void serve_mpi() {
  std::vector<float> buf;
  while (true) {
    MPI_Status cst;
    wait_command(&cst);
    int cmd[3];
    MPI_Recv(cmd, 3, MPI_INT, 0, 77, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    if (cmd[0] == 0) return;
    buf.resize(cmd[1]);
    MPI_Barrier(MPI_COMM_WORLD);
    for (int i = 0; i < cmd[2]; ++i) {
      MPI_Recv(buf.data(), cmd[1], MPI_FLOAT, 0, 78, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      int64_t ack = cmd[1];
      if (cmd[0] == 1 || i == cmd[2] - 1) MPI_Send(&ack, 1, MPI_INT64_T, 0, 79, MPI_COMM_WORLD);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  // --quick and launch's flags (tools/cli.h); Google Benchmark's --benchmark_* (scripts/bench.sh passes
  // them to every bench) are ignored
  troupe::cli::App app("remote_bench", "A benchmark against its peer (bench/README.md).");
  app.add_flag("--quick", g_quick, "few short samples");
  app.add_option("--only", g_only, "one case alone: rtt, transfer or step")->check(CLI::IsMember({"rtt", "transfer", "step"}));
  app.add_option("--bytes", g_bytes, "the transfer case at this size alone (4096 .. 67108864)");
  app.add_flag("--loop-stream", g_loop_stream, "--loop's transfers one-way, each 1000th a request (the stream case)");
  app.add_option("--loop", g_loop, "first N lane transfers of --bytes (4096 when not given) back to back, timed (for a profiler)");
  troupe::cli::add_launch_flags(app);
  app.allow_extras();
  troupe::cli::parse(app, argc, argv);
  for (const auto& extra : app.remaining())
    if (extra.rfind("--benchmark_", 0) != 0) troupe::cli::fail(app, "The following argument was not expected: " + extra);
  set_num_threads(1);
  if (openblas_set_num_threads) openblas_set_num_threads(1);
  actors::register_actor<Sink>("Sink");
  actors::register_actor<HostSink>("HostSink");
  actors::register_module<nn::Linear, int64_t, int64_t>("Linear");
  actors::register_module_factory("Stage1", [](const actors::List&) { return make_stage1(); });
  actors::register_module_factory("Stage2", [](const actors::List&) { return make_stage2(); });
  return launch::run(argc, argv, [](launch::Context& ctx) {
    if (ctx.rank == 0) drive(ctx);
    else if (ctx.rank == 1 && ctx.actors().networked()) serve_mpi();
    ctx.world->barrier();
    return 0;
  });
}
