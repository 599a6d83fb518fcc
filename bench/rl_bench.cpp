// rl_bench: environment steps per second (batched CartPole through troupe's TensorDict interface vs the
// same equations in a bare loop over plain arrays: the hardware's bound for this arithmetic), collector
// frames per second with an MLP policy 4-64-64-2 over 64 CartPole copies (troupe's SyncDataCollector
// with QValuePolicy, greedy and under EGreedy, against the same collector whose policy forward is
// libtorch 1.13's torch::nn::Sequential with the same weights, observations in and actions out copied;
// the environment is troupe's CartPole on both sides, so the ratio isolates the policy; and against a
// bare loop stepping the environment with a precomputed action, the ceiling), the MLP forward alone at
// batch 64 (troupe vs libtorch), and MultiStep on 1M frames vs a plain loop computing the same n-step
// sums. One thread.
//   rl_bench [--quick] [--samples=N] [--filter=S]
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include <troupe/troupe.h>

#if defined(TROUPE_HAVE_LIBTORCH)
#include <torch/torch.h>
#endif

#include "harness.h"
#include "torch_compat.h"

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

[[maybe_unused]] const char* kNoTorch = "n/a (built without libtorch)";

nn::Sequential make_mlp() {
  return nn::Sequential(nn::Linear(4, 64), nn::ReLU(), nn::Linear(64, 64), nn::ReLU(), nn::Linear(64, 2));
}

#if defined(TROUPE_HAVE_LIBTORCH)
// The peer policy: libtorch's forward of the same MLP; the observation goes in through from_blob (no
// copy), action_value and action are copied out into troupe tensors (what QValuePolicy writes).
rl::Policy torch_qvalue_policy(torch::nn::Sequential net) {
  return [net](rl::TensorDict td) mutable {
    torch::NoGradGuard no_grad;
    Tensor obs = td.get("observation").contiguous();
    const int64_t n = obs.size(0), d = obs.size(1);
    torch::Tensor x = torch::from_blob(obs.data_ptr<float>(), {n, d}, torch::kFloat32);
    torch::Tensor q = net->forward(x).contiguous();
    torch::Tensor a = q.argmax(-1).contiguous();
    Tensor qv = empty({n, q.size(1)}, TensorOptions().dtype(kFloat32));
    Tensor act = empty({n}, TensorOptions().dtype(kInt64));
    std::memcpy(qv.data_ptr<float>(), q.data_ptr<float>(), sizeof(float) * static_cast<size_t>(q.numel()));
    std::memcpy(act.data_ptr<int64_t>(), a.data_ptr<int64_t>(), sizeof(int64_t) * static_cast<size_t>(n));
    td.set("action_value", qv);
    td.set("action", act);
    return td;
  };
}
#endif

// Collector frames/s with the MLP policy over 64 CartPole copies, T steps a batch: troupe's policy vs
// libtorch's (same weights, same environment, same collector), greedy and under EGreedy; the bare
// environment loop as the ceiling; the MLP forward alone.
void collector_rows() {
  const int64_t N = 64, T = 16, frames = N * T;
  manual_seed(0);
  nn::Sequential tnet = make_mlp();
  tnet->eval();
  auto make_env = [&] {
    auto env = std::make_shared<rl::CartPoleEnv>(N);
    env->set_seed(0);
    return env;
  };
  auto opts = rl::SyncDataCollectorOptions().frames_per_batch(frames);
#if defined(TROUPE_HAVE_LIBTORCH)
  torch::nn::Sequential pnet(torch::nn::Linear(4, 64), torch::nn::ReLU(), torch::nn::Linear(64, 64), torch::nn::ReLU(),
                             torch::nn::Linear(64, 2));
  if (!copy_state(*tnet.ptr(), *pnet)) {
    std::printf("FAILED: could not copy the MLP's weights into libtorch's\n");
    ++check_failures;
  }
  pnet->eval();
#endif
  for (bool egreedy : {false, true}) {
    const std::string name = std::string("collector, MLP 4-64-64-2, 64 envs x 16") + (egreedy ? ", EGreedy" : "") +
                             " (frames/s)";
    if (!selected(name)) continue;
    auto tenv = make_env();
    rl::Policy tpol = rl::QValuePolicy(tnet.ptr());
    if (egreedy) tpol = rl::EGreedy(tpol, tenv, 0.5, 0.05, 1 << 30, 1);
    rl::SyncDataCollector tcol(tenv, tpol, opts);
#if defined(TROUPE_HAVE_LIBTORCH)
    auto penv = make_env();
    rl::Policy ppol = torch_qvalue_policy(pnet);
    if (egreedy) ppol = rl::EGreedy(ppol, penv, 0.5, 0.05, 1 << 30, 1);
    rl::SyncDataCollector pcol(penv, ppol, opts);
    {
      // both collect the same frames: same weights, same seeds (a float rounding that flips an argmax
      // would show here)
      auto a = tcol.next(), b = pcol.next();
      if (!equal(a->exclude({"action_value"}), b->exclude({"action_value"}))) {
        std::printf("FAILED: %s: troupe's and libtorch's policies collected different batches\n", name.c_str());
        ++check_failures;
      }
    }
    auto c = compare([&] { do_not_optimize(tcol.next()); }, [&] { do_not_optimize(pcol.next()); });
    const double rate = frames / (c.a_ms / 1e3);
    row(name, fmt("%.2fM frames/s", rate / 1e6), fmt("libtorch policy %.2fM/s", frames / (c.b_ms / 1e3) / 1e6),
        c.ratio, kNaN);
#else
    const double ms = time_one([&] { do_not_optimize(tcol.next()); });
    const double rate = frames / (ms / 1e3);
    row(name, fmt("%.2fM frames/s", rate / 1e6), kNoTorch, kNaN, kNaN);
#endif
    if (!egreedy)
      note(std::string("collector target (issue 14): >= 1M frames/s, greedy MLP policy over 64 envs: ") +
           (rate >= 1e6 ? "met" : "missed") + fmt(" (%.2fM frames/s)", rate / 1e6));
  }

  {
    const std::string name = "collector vs bare env loop (64 envs, no policy) (frames/s)";
    if (selected(name)) {
      auto tenv = make_env();
      rl::SyncDataCollector tcol(tenv, rl::QValuePolicy(tnet.ptr()), opts);
      auto benv = make_env();
      rl::TensorDict td = benv->reset();
      Tensor action = benv->rand_action();
      auto c = compare([&] { do_not_optimize(tcol.next()); },
                       [&] {
                         for (int64_t t = 0; t < T; ++t) {
                           td.set("action", action);
                           auto [full, next] = benv->step_and_maybe_reset(td);
                           td = next;
                           do_not_optimize(full);
                         }
                       });
      row(name, fmt("%.2fM frames/s", frames / (c.a_ms / 1e3) / 1e6),
          fmt("bare env loop %.2fM/s", frames / (c.b_ms / 1e3) / 1e6), c.ratio, kNaN);
    }
  }

  {
    const std::string name = "MLP 4-64-64-2 forward, batch 64, no_grad (us)";
    if (selected(name)) {
      Tensor x = randn({N, 4});
      auto tf = [&] {
        NoGradGuard ng;
        do_not_optimize(tnet(x));
      };
#if defined(TROUPE_HAVE_LIBTORCH)
      torch::Tensor px = to_torch(x);
      auto c = compare(tf, [&] {
        torch::NoGradGuard ng;
        do_not_optimize(pnet->forward(px));
      });
      row(name, fmt_time(c.a_ms), "libtorch " + fmt_time(c.b_ms), c.ratio, kNaN);
#else
      row(name, fmt_time(time_one(tf)), kNoTorch, kNaN, kNaN);
#endif
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  cfg.threads = 1;
  if (int rc = parse_args(argc, argv, "rl_bench"); rc >= 0) return rc;
  set_num_threads(1);
#if defined(TROUPE_HAVE_LIBTORCH)
  torch::set_num_threads(1);
#endif
  std::printf("rl_bench%s: %s; 1 thread; load average %s\n\n", cfg.quick ? " --quick" : "", cpu_name().c_str(),
              loadavg().c_str());
  kW0 = 62;
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

  collector_rows();

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
  return finish();
}
