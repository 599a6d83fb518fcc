// actors_bench: troupe's actor layer against raw CAF 0.17 in the same run (same settings: sharing
// scheduler, 4 threads, no middleman workers), alternating samples, medians.
//   actors_bench [--quick]                       one process: one-way control messages per second, request
//                                                round trip
//   mpirun -np 2 actors_bench [--quick]          two processes over loopback: request round trip, one-way
//                                                messages per second, and a tensor echo (4 KB .. 64 MB)
//                                                against an MPI send/recv round trip of the same tensor
// Under mpirun troupe runs on both cross-process paths in the same run: the lane (MPI messages, the
// default) and CAF's middleman (actors::set_cross_process_path("caf")).
// ratio = troupe / raw CAF for rates, raw CAF / troupe for times (> 1: troupe faster). Target for the
// control-message rate: >= 0.9.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <sys/resource.h>

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include <troupe/tools/cli.h>
#include <troupe/actors/actors.h>
#include <troupe/launch/launch.h>
#include <troupe/tensor/ops.h>

using namespace troupe;
using Clock = std::chrono::steady_clock;

namespace {

bool g_quick = false;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}
double secs(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// ---- troupe side

struct Sink : actors::Actor {
  int64_t n = 0;
  Sink() {
    handle("inc", [this](int64_t k) { n += k; });
    handle("get", [this] { return n; });
    handle("echo", [](Tensor t) { return t; });
  }
};

// ---- raw CAF side

using raw_get_atom = caf::atom_constant<caf::atom("rb_get")>;
using raw_inc_atom = caf::atom_constant<caf::atom("rb_inc")>;  // a control message: an atom and an int

caf::behavior raw_sink(caf::event_based_actor* self) {
  auto n = std::make_shared<int64_t>(0);
  return {
      [=](raw_inc_atom, int64_t k) { *n += k; },
      [=](raw_get_atom) { return *n; },
  };
}

void configure(caf::actor_system_config& cfg, bool network) {
  cfg.set("scheduler.policy", caf::atom("sharing"));
  cfg.set("scheduler.max-threads", int64_t{4});
  if (network) {
    cfg.load<caf::io::middleman>();
    cfg.set("middleman.workers", int64_t{0});
  }
}

int64_t raw_get(caf::actor_system& sys, const caf::actor& a) {
  caf::scoped_actor self{sys};
  int64_t out = -1;
  self->request(a, caf::infinite, raw_get_atom::value).receive([&](int64_t v) { out = v; }, [&](caf::error&) {});
  return out;
}

// This thread's CPU time (user + system) in ns.
double thread_cpu_ns() {
  rusage r{};
  getrusage(RUSAGE_THREAD, &r);
  auto ns = [](const timeval& t) { return (static_cast<double>(t.tv_sec) * 1e6 + static_cast<double>(t.tv_usec)) * 1e3; };
  return ns(r.ru_utime) + ns(r.ru_stime);
}

// One-way messages: the rate (send n, then wait until the receiver counted them all) and the sending
// thread's CPU time per message in its send loop (which side of the pair limits the rate: with the
// receiver keeping up, the rate is the sender's).
struct Rate {
  double per_s;
  double send_cpu_ns;
};

Rate raw_rate(caf::actor_system& sys, const caf::actor& a, int64_t n) {
  int64_t before = raw_get(sys, a);
  const double c0 = thread_cpu_ns();
  auto t0 = Clock::now();
  for (int64_t i = 0; i < n; ++i) caf::anon_send(a, raw_inc_atom::value, int64_t{1});
  const double cpu = (thread_cpu_ns() - c0) / static_cast<double>(n);
  while (raw_get(sys, a) < before + n) {
  }
  return {n / secs(t0), cpu};
}

Rate troupe_rate(const actors::ActorRef& a, int64_t n) {
  int64_t before = a.request<int64_t>("get").get();
  const double c0 = thread_cpu_ns();
  auto t0 = Clock::now();
  for (int64_t i = 0; i < n; ++i) a.send("inc", int64_t{1});
  const double cpu = (thread_cpu_ns() - c0) / static_cast<double>(n);
  while (a.request<int64_t>("get").get() < before + n) {
  }
  return {n / secs(t0), cpu};
}

// Median round trip of a request, in microseconds.
double raw_rtt(caf::actor_system& sys, const caf::actor& a, int reps) {
  caf::scoped_actor self{sys};
  std::vector<double> us;
  for (int i = 0; i < reps; ++i) {
    auto t0 = Clock::now();
    self->request(a, caf::infinite, raw_get_atom::value).receive([](int64_t) {}, [](caf::error&) {});
    us.push_back(secs(t0) * 1e6);
  }
  return median(us);
}

double troupe_rtt(const actors::ActorRef& a, int reps) {
  std::vector<double> us;
  for (int i = 0; i < reps; ++i) {
    auto t0 = Clock::now();
    a.request<int64_t>("get").get();
    us.push_back(secs(t0) * 1e6);
  }
  return median(us);
}

void row(const char* what, double troupe, double raw, const char* unit, double ratio, const char* target) {
  std::printf("%-58s | troupe %12.2f %-6s | raw CAF %12.2f %-6s | ratio %5.2f | %s\n", what, troupe, unit, raw, unit, ratio,
              target);
  std::fflush(stdout);
}

void single_process() {
  const int64_t n = g_quick ? 20000 : 200000;
  const int samples = g_quick ? 3 : 7;
  const int reps = g_quick ? 500 : 5000;
  std::vector<double> rate_t, rate_r, pair_ratio, rtt_t, rtt_r, cpu_t, cpu_r;
  for (int s = 0; s < samples; ++s) {
    Rate rr{1, 0}, tr{1, 0};
    double rl = 1;
    const char* only = std::getenv("ACTORS_BENCH_ONLY");  // "troupe" or "raw": one side (for a profiler)
    if (!only || std::strcmp(only, "raw") == 0) {
      caf::actor_system_config cfg;
      configure(cfg, false);
      caf::actor_system sys{cfg};
      auto a = sys.spawn(raw_sink);
      rr = raw_rate(sys, a, n);
      rl = raw_rtt(sys, a, reps);
      caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
    }
    double tl = 1;
    if (!only || std::strcmp(only, "troupe") == 0) {
      auto rts = actors::start_local(1);
      auto a = rts[0]->spawn_on(0, "sink", "Sink");
      tr = troupe_rate(a, n);
      tl = troupe_rtt(a, reps);
      a = {};
      rts.clear();
      actors::stop();
    }
    rate_r.push_back(rr.per_s), rate_t.push_back(tr.per_s), pair_ratio.push_back(tr.per_s / rr.per_s);
    cpu_r.push_back(rr.send_cpu_ns), cpu_t.push_back(tr.send_cpu_ns);
    rtt_r.push_back(rl), rtt_t.push_back(tl);
  }
  std::printf("one process, %d samples alternating raw CAF and troupe (fresh system each)\n", samples);
  row("one-way control messages per second (1 sender, 1 actor)", median(rate_t), median(rate_r), "msg/s", median(pair_ratio),
      ">= 0.90");
  row("the sender's CPU time a one-way message, in its send loop", median(cpu_t), median(cpu_r), "ns", median(cpu_r) / median(cpu_t),
      "info");
  row("request round trip from a thread, median", median(rtt_t), median(rtt_r), "us", median(rtt_r) / median(rtt_t), "info");
}

void two_processes() {
  int argc = 1;
  char a0[] = "actors_bench";
  char* args[] = {a0, nullptr};
  char** argv = args;
  launch::Context ctx = launch::init(argc, argv);
  auto& rt = ctx.actors();
  const int64_t n = g_quick ? 20000 : 200000;
  const int reps = g_quick ? 300 : 3000;

  // Raw CAF: rank 1 publishes a sink on loopback; rank 0 connects.
  caf::actor_system_config cfg;
  configure(cfg, true);
  caf::actor_system sys{cfg};
  caf::actor raw_local = sys.spawn(raw_sink);
  Tensor port = zeros({1}, TensorOptions().dtype(kInt64));
  if (ctx.rank == 1) port.data_ptr<int64_t>()[0] = *sys.middleman().publish(raw_local, 0, "127.0.0.1");
  ctx.world->broadcast(port, 1);
  actors::ActorRef sink;
  if (ctx.rank == 0) sink = rt.spawn_on(1, "sink", "Sink");
  ctx.world->barrier();
  if (ctx.rank == 0) {
    auto remote = sys.middleman().remote_actor("127.0.0.1", static_cast<uint16_t>(port.data_ptr<int64_t>()[0]));
    if (!remote) {
      std::printf("raw CAF: remote_actor failed: %s\n", sys.render(remote.error()).c_str());
      std::exit(1);
    }
    const int samples = g_quick ? 3 : 5;
    std::vector<std::string> paths{actors::cross_process_path()};
    if (paths[0] == "lane") paths.push_back("caf");
    const size_t np = paths.size();
    std::vector<std::vector<double>> rtt_t(np), rate_t(np), pair_ratio(np);
    std::vector<double> rtt_r, rate_r;
    for (int s = 0; s < samples; ++s) {
      rtt_r.push_back(raw_rtt(sys, *remote, reps));
      double rr = raw_rate(sys, *remote, n / 4).per_s;
      rate_r.push_back(rr);
      for (size_t k = 0; k < np; ++k) {
        actors::set_cross_process_path(paths[k]);
        rtt_t[k].push_back(troupe_rtt(sink, reps));
        double tr = troupe_rate(sink, n / 4).per_s;
        rate_t[k].push_back(tr), pair_ratio[k].push_back(tr / rr);
      }
      actors::set_cross_process_path(paths[0]);
    }
    std::printf("two processes over loopback (mpirun -np 2), %d samples alternating\n", samples);
    for (size_t k = 0; k < np; ++k) {
      std::string what = "[" + paths[k] + "] request round trip rank 0 -> rank 1, median";
      row(what.c_str(), median(rtt_t[k]), median(rtt_r), "us", median(rtt_r) / median(rtt_t[k]), "info");
      what = "[" + paths[k] + "] one-way control messages per second rank 0 -> rank 1";
      row(what.c_str(), median(rate_t[k]), median(rate_r), "msg/s", median(pair_ratio[k]), ">= 0.90");
    }
  }
  ctx.world->barrier();

  // Tensor echo through an actor: the tensor inside the control message (CAF/BASP over loopback) or on
  // the data plane (MPI point to point beside it), against an MPI send/recv round trip of the same tensor.
  if (ctx.rank == 0) {
    std::printf("tensor round trip through an actor: on the lane; by CAF in the message and on the data plane; vs MPI "
                "send+recv\n");
  }
  const bool lane = actors::cross_process_path() == "lane";
  const int64_t threshold = actors::data_plane_bytes();
  for (int64_t bytes = 4096; bytes <= (int64_t{64} << 20); bytes *= g_quick ? 16 : 4) {
    Tensor t = ones({bytes / 4});
    Tensor back = empty_like(t);
    const int r = std::max<int>(3, static_cast<int>((g_quick ? 2e6 : 2e7) / bytes));
    std::vector<double> t_msg, t_dp, t_lane, t_mpi;
    for (int i = 0; i < r; ++i) {
      for (int mode = 0; mode < (lane ? 3 : 2); ++mode) {  // the same setting on both ranks: the reply follows it too
        if (lane) actors::set_cross_process_path(mode == 2 ? "lane" : "caf");
        actors::set_data_plane_bytes(mode == 0 ? 0 : 1);
        ctx.world->barrier();
        if (ctx.rank == 0) {
          auto t0 = Clock::now();
          sink.request<Tensor>("echo", t).get();
          (mode == 0 ? t_msg : mode == 1 ? t_dp : t_lane).push_back(secs(t0) * 1e6);
        }
      }
      ctx.world->barrier();
      if (ctx.rank == 0) {
        auto t0 = Clock::now();
        ctx.world->send(t, 1, 7);
        ctx.world->recv(back, 1, 8);
        t_mpi.push_back(secs(t0) * 1e6);
      } else {
        ctx.world->recv(back, 0, 7);
        ctx.world->send(back, 0, 8);
      }
    }
    if (ctx.rank == 0) {
      std::printf("tensor echo %8lld KB | lane %9.1f us | CAF message %9.1f us | CAF data plane %9.1f us | MPI "
                  "send+recv %9.1f us | MPI/lane %5.2f\n",
                  static_cast<long long>(bytes / 1024), median(t_lane), median(t_msg), median(t_dp), median(t_mpi),
                  t_lane.empty() ? 0.0 : median(t_mpi) / median(t_lane));
    }
  }
  actors::set_data_plane_bytes(threshold);
  std::fflush(stdout);
  ctx.world->barrier();
  sink = {};
  caf::anon_send_exit(raw_local, caf::exit_reason::user_shutdown);
  launch::finalize();
}

}  // namespace

int main(int argc, char** argv) {
  // --quick and launch's flags (tools/cli.h); Google Benchmark's --benchmark_* (scripts/bench.sh passes
  // them to every bench) are ignored
  troupe::cli::App app("actors_bench", "A benchmark against its peer (bench/README.md).");
  app.add_flag("--quick", g_quick, "few short samples");
  troupe::cli::add_launch_flags(app);
  app.allow_extras();
  troupe::cli::parse(app, argc, argv);
  for (const auto& extra : app.remaining())
    if (extra.rfind("--benchmark_", 0) != 0) troupe::cli::fail(app, "The following argument was not expected: " + extra);
  actors::register_actor<Sink>("Sink");
  if (std::getenv("OMPI_COMM_WORLD_SIZE")) two_processes();
  else single_process();
  return 0;
}
