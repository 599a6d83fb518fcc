// rl_bench: environment steps per second (batched CartPole through troupe's TensorDict interface vs the
// same equations in a bare loop over plain arrays: the hardware's bound for this arithmetic), and
// MultiStep on 1M frames vs a plain loop computing the same n-step sums. One thread.
//   rl_bench [--quick] [--samples N] [--filter S]
#include <cmath>
#include <cstdio>
#include <vector>

#include <troupe/troupe.h>

#include "harness.h"

using namespace troupe;

namespace {

// The bare loop: CartPole's Euler step on an array of states, actions from a counter.
struct RawCartPole {
  std::vector<double> s;
  std::vector<float> obs;
  std::vector<unsigned char> done;
  explicit RawCartPole(int64_t n) : s(static_cast<size_t>(4 * n), 0.01), obs(static_cast<size_t>(4 * n)), done(static_cast<size_t>(n)) {}
  void step(int64_t n, int64_t t) {
    const double total = 1.1, pml = 0.05, th_max = 12 * 2 * M_PI / 360;
    for (int64_t i = 0; i < n; ++i) {
      double* x = &s[static_cast<size_t>(4 * i)];
      const double force = ((i + t) & 1) ? 10.0 : -10.0;
      const double c = std::cos(x[2]), sn = std::sin(x[2]);
      const double temp = (force + pml * x[3] * x[3] * sn) / total;
      const double tacc = (9.8 * sn - c * temp) / (0.5 * (4.0 / 3.0 - 0.1 * c * c / total));
      const double xacc = temp - pml * tacc * c / total;
      x[0] += 0.02 * x[1];
      x[1] += 0.02 * xacc;
      x[2] += 0.02 * x[3];
      x[3] += 0.02 * tacc;
      for (int j = 0; j < 4; ++j) obs[static_cast<size_t>(4 * i + j)] = static_cast<float>(x[j]);
      const bool d = x[0] < -2.4 || x[0] > 2.4 || x[2] < -th_max || x[2] > th_max;
      done[static_cast<size_t>(i)] = d;
      if (d) x[0] = x[1] = x[2] = x[3] = 0.01;
    }
  }
};

}  // namespace

int main(int argc, char** argv) {
  cfg.threads = 1;
  if (int rc = parse_args(argc, argv, "rl_bench"); rc >= 0) return rc;
  set_num_threads(1);
  std::printf("rl_bench%s: %s; 1 thread; load average %s\n\n", cfg.quick ? " --quick" : "", cpu_name().c_str(),
              loadavg().c_str());
  print_header();

  for (int64_t n : {64, 4096}) {
    const std::string name = "CartPole step, " + std::to_string(n) + " envs (steps/s)";
    if (!selected(name)) continue;
    rl::CartPoleEnv env(n);
    rl::TensorDict td = env.reset();
    Tensor actions = env.rand_action();
    RawCartPole raw(n);
    int64_t t = 0;
    auto c = compare(
        [&] {
          td.set("action", actions);
          auto [full, next] = env.step_and_maybe_reset(td);
          td = next;
          do_not_optimize(td);
        },
        [&] {
          raw.step(n, t++);
          do_not_optimize(raw.obs[0]);
        });
    const double troupe_rate = n / (c.a_ms / 1e3), raw_rate = n / (c.b_ms / 1e3);
    row(name, fmt("%.2fM steps/s", troupe_rate / 1e6), fmt("bare loop %.2fM steps/s", raw_rate / 1e6), c.ratio, kNaN);
  }

  {
    const std::string name = "MultiStep n=4 on 1M frames (64 x 16384)";
    if (selected(name)) {
      const int64_t B = 64, T = cfg.quick ? 1024 : 16384;
      Generator gen(0);
      rl::TensorDict batch({B, T});
      batch.set("next.reward", rand({B, T, 1}, gen));
      batch.set("next.done", rand({B, T, 1}, gen).lt(0.01));
      batch.set("next.observation", rand({B, T, 4}, gen));
      rl::MultiStep ms(0.99, 4);
      Tensor rew = batch.get("next.reward").contiguous();
      Tensor dn = batch.get("next.done").contiguous();
      std::vector<double> out(static_cast<size_t>(B * T));
      std::vector<float> obs_out(static_cast<size_t>(B * T * 4));
      const float* obs = batch.get("next.observation").contiguous().data_ptr<float>();
      auto c = compare(
          [&] {
            auto o = ms(batch);
            do_not_optimize(o);
          },
          [&] {
            // the same sums and the same gather of next.observation, in a plain loop
            const float* r = rew.data_ptr<float>();
            const bool* d = dn.data_ptr<bool>();
            for (int64_t b = 0; b < B; ++b) {
              int64_t last = T - 1;
              for (int64_t tt = T - 1; tt >= 0; --tt) {
                if (d[b * T + tt]) last = tt;
                const int64_t idx = std::min(tt + 3, last);
                double acc = 0, g = 1;
                for (int64_t i = tt; i <= idx; ++i) {
                  acc += g * r[b * T + i];
                  g *= 0.99;
                }
                out[static_cast<size_t>(b * T + tt)] = acc;
                for (int j = 0; j < 4; ++j) obs_out[static_cast<size_t>(4 * (b * T + tt) + j)] = obs[4 * (b * T + idx) + j];
              }
            }
            do_not_optimize(out[0]);
          });
      row(name, fmt("%.1fM frames/s", B * T / (c.a_ms / 1e3) / 1e6), fmt("plain loop %.1fM frames/s", B * T / (c.b_ms / 1e3) / 1e6),
          c.ratio, kNaN);
    }
  }
  std::printf("\nratio = peer time / troupe time (above 1: troupe faster).\n");
  return 0;
}
