// proxy_bench: the overhead a RemoteModule proxy adds to a forward in one process (--ranks 2 as
// threads: the host actor on rank 1, the caller on rank 0) against calling the same module directly,
// alternating samples, medians.
//   proxy_bench [--quick] [--samples=N]
// Rows: Linear(16, 16) on a (4, 16) input, under no_grad and with grad mode on (the proxy then records a
// RemoteModuleBackward node, and dropping it sends the host a release message). added = proxy - direct;
// target: at most 5 us added. An info row times the actor layer alone: a request with an empty handler.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

#include <troupe/actors/remote_module.h>
#include <troupe/nn/modules/linear.h>
#include <troupe/tensor/autograd.h>
#include <troupe/tensor/ops.h>

#include "harness.h"

using namespace troupe;

namespace {

// The actor layer alone: a request whose handler does nothing, to an actor that lets an idle request
// run on the waiting thread (as RemoteModule's host does).
struct Echo : actors::Actor {
  Echo() {
    allow_inline_requests();
    handle("id", [](int64_t k) { return k; });
  }
};

void overhead_row(const std::string& name, const Comparison& c, double target_us) {
  const double added_us = (c.b_ms - c.a_ms) * 1000;
  std::string res = "info";
  if (!std::isnan(target_us)) {
    const bool ok = added_us <= target_us;
    res = ok ? "PASS" : "MISS";
    (ok ? passes : misses)++;
  }
  std::printf("%-*s | %-*s | %-*s | %*s | %-*s | %s\n", kW0, name.c_str(), kW1,
              ("proxy " + fmt_time(c.b_ms) + " (+" + fmt("%.2f", added_us) + " us)").c_str(), kW2,
              ("direct " + fmt_time(c.a_ms)).c_str(), kW3, fmt("%.2f", 1 / c.ratio).c_str(), kW4,
              std::isnan(target_us) ? "-" : fmt("<= %.0f us", target_us).c_str(), res.c_str());
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  if (int rc = parse_args(argc, argv, "remote_bench"); rc >= 0) return rc;
  actors::register_module<nn::Linear, int64_t, int64_t>("Linear");
  actors::register_actor<Echo>("Echo");
  std::printf("remote_bench: %s, load average %s; ratio = direct / proxy time\n", cpu_name().c_str(), loadavg().c_str());
  kW1 = 30;
  kW2 = 20;
  print_header();
  {
    auto rts = actors::start_local(2);
    nn::Linear direct(16, 16);
    nn::Linear moved(16, 16);
    {
      NoGradGuard ng;
      moved->weight.copy_(direct->weight);
      moved->bias.copy_(direct->bias);
    }
    auto proxy = actors::host(*rts[0], moved.ptr(), 1);
    Tensor x = randn({4, 16});
    {
      // correctness: the same weights give the same output, with and without grad mode
      Tensor a = direct->forward(x), b = proxy->forward(x);
      NoGradGuard ng;
      Tensor c = proxy->forward(x);
      if (!allclose(a, b) || !allclose(a, c)) {
        std::printf("CHECK FAILED: proxy output differs from the direct one\n");
        ++check_failures;
      }
    }
    Tensor sink;
    if (selected("no_grad")) {
      NoGradGuard ng;
      auto c = compare([&] { sink = direct->forward(x); }, [&] { sink = proxy->forward(x); });
      overhead_row("Linear(16,16) batch 4 forward, no_grad, --ranks 2", c, 5);
    }
    if (selected("grad")) {
      auto c = compare([&] { sink = direct->forward(x); }, [&] { sink = proxy->forward(x); });
      overhead_row("Linear(16,16) batch 4 forward, grad mode, --ranks 2", c, 5);
    }
    if (selected("request")) {
      auto echo = rts[0]->spawn_on(1, "echo", "Echo");
      int64_t got = 0;
      auto c = compare([&] { got += 1; }, [&] { got += echo.request<int64_t>("id", got).get(); });
      overhead_row("request round trip, empty handler, inline host, --ranks 2", c, kNaN);
      echo.stop();
    }
    sink = Tensor();
    proxy.reset();
    rts.clear();
    actors::stop();
  }
  return finish();
}
