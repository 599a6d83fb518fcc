// The multi-host fault probe (tests/multihost/run_case.sh): every rank loops over work that needs every
// other rank, printing a line per round, until the test cuts one host's link; then each rank must fail
// with an error that names the missing rank (or actor) within the configured timeout, and exit 3.
//
//   mh_probe --mode collective --timeout-ms 4000   # all-reduces on a group whose timeout is 4 s
//   mh_probe --mode actor --timeout-ms 4000        # rank 0 calls an actor on the last rank
//   mh_probe --mode ... --rounds N                 # stops by itself after N rounds (exit 0)
//
// Output: "[mh_probe] rank R ready", "[mh_probe] rank R round K ok", and at the failure
// "[mh_probe] rank R failed after T ms: <error>" (T from the start of the round that failed).
#include <troupe/actors/actors.h>
#include <troupe/launch/launch.h>
#include <troupe/tensor/ops.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <thread>

using namespace troupe;

namespace {

struct Echo : actors::Actor {
  Echo() {
    handle("echo", [](Tensor t) { return t + 1.0; });
  }
};

struct Args {
  std::string mode = "collective";
  long timeout_ms = 4000;
  long rounds = 1000000;  // the test stops it by cutting a link long before
};

bool parse(int argc, char** argv, Args& a) {
  for (int i = 1; i < argc; ++i) {
    std::string f = argv[i];
    auto value = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    if (f == "--ranks") {
      value();  // launch's own flag
    } else if (f == "--mode") {
      const char* v = value();
      if (!v || (std::strcmp(v, "collective") != 0 && std::strcmp(v, "actor") != 0)) {
        std::fprintf(stderr, "mh_probe: --mode takes collective or actor\n");
        return false;
      }
      a.mode = v;
    } else if (f == "--timeout-ms" || f == "--rounds") {
      const char* v = value();
      char* end = nullptr;
      long n = v ? std::strtol(v, &end, 10) : 0;
      if (!v || *end != '\0' || n <= 0) {
        std::fprintf(stderr, "mh_probe: %s takes a positive whole number, got '%s'\n", f.c_str(), v ? v : "");
        return false;
      }
      (f == "--timeout-ms" ? a.timeout_ms : a.rounds) = n;
    } else {
      std::fprintf(stderr, "mh_probe: unknown flag '%s'\n", f.c_str());
      return false;
    }
  }
  return true;
}

using Clock = std::chrono::steady_clock;
long ms_since(Clock::time_point t0) {
  return static_cast<long>(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count());
}

int run_collective(launch::Context& ctx, const Args& a) {
  std::vector<int> all(ctx.size);
  for (int r = 0; r < ctx.size; ++r) all[r] = r;
  comm::GroupOptions opts;
  opts.timeout = std::chrono::milliseconds(a.timeout_ms);
  opts.name = "probe";
  auto group = ctx.world->new_group(all, opts);
  std::printf("[mh_probe] rank %d ready\n", ctx.rank);
  std::fflush(stdout);
  const double want = ctx.size * (ctx.size + 1) / 2.0;
  for (long k = 0; k < a.rounds; ++k) {
    auto t0 = Clock::now();
    try {
      Tensor t = full({1 << 14}, ctx.rank + 1.0);  // 64 KB: crosses the links every round
      group->all_reduce(t);
      double got = t.to_vector<float>()[0];
      if (got != want) {
        std::printf("[mh_probe] rank %d round %ld WRONG: %g, want %g\n", ctx.rank, k, got, want);
        return 1;
      }
    } catch (const std::exception& e) {
      std::printf("[mh_probe] rank %d failed after %ld ms: %s\n", ctx.rank, ms_since(t0), e.what());
      std::fflush(stdout);
      std::_Exit(3);  // the group is broken: no clean finalize across a cut link
    }
    if (k % 50 == 0) {
      std::printf("[mh_probe] rank %d round %ld ok\n", ctx.rank, k);
      std::fflush(stdout);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return 0;
}

int run_actor(launch::Context& ctx, const Args& a) {
  auto& rt = ctx.actors();
  if (ctx.rank == 0) rt.spawn_on(ctx.size - 1, "probe.echo", "Echo");
  ctx.world->barrier();
  std::printf("[mh_probe] rank %d ready\n", ctx.rank);
  std::fflush(stdout);
  if (ctx.rank != 0) {
    // The other ranks only host: they wait for rank 0's verdict, or are cut off.
    ctx.world->barrier();
    return 0;
  }
  auto echo = rt.lookup("probe.echo").with_timeout(std::chrono::milliseconds(a.timeout_ms));
  for (long k = 0; k < a.rounds; ++k) {
    auto t0 = Clock::now();
    try {
      Tensor y = echo.request<Tensor>("echo", full({256}, 1.0)).get();
      if (y.sum().item<double>() != 512.0) {
        std::printf("[mh_probe] rank 0 round %ld WRONG\n", k);
        return 1;
      }
    } catch (const std::exception& e) {
      std::printf("[mh_probe] rank %d failed after %ld ms: %s\n", ctx.rank, ms_since(t0), e.what());
      std::fflush(stdout);
      std::_Exit(3);
    }
    if (k % 50 == 0) {
      std::printf("[mh_probe] rank 0 round %ld ok\n", k);
      std::fflush(stdout);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ctx.world->barrier();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (!parse(argc, argv, a)) return 2;
  actors::register_actor<Echo>("Echo");
  return launch::run(argc, argv, [&a](launch::Context& ctx) {
    return a.mode == "collective" ? run_collective(ctx, a) : run_actor(ctx, a);
  });
}
