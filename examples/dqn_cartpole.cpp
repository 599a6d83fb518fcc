// DQN on CartPole-v1 (double DQN, 3-step returns by MultiStep, epsilon-greedy, a target network kept as
// an EMA of the online one). Stops when the mean return of the last 100 episodes reaches --target (475,
// Gymnasium's threshold), or after --frames.
//
// With several ranks (`--ranks 4`, or `mpirun -np 4`) it runs on actors: the learner on rank 0;
// collector workers (each a SyncDataCollector over 8 CartPole copies with MultiStep) on ranks 1 .. N-2,
// which store their batches in a replay actor and report returns; the replay actor and an averager actor
// (the target network, EMA) on rank N-1. The learner samples the replay actor, trains, feeds the averager
// and pushes versioned weights to the workers. `--kill-collector B` stops worker 0 after B batches: it is
// spawned again and the run goes on. Alone (one rank) everything runs in this process, as before.
//   dqn_cartpole [--frames N] [--seed S] [--target R] [--metrics DIR|none] [--ranks N] [--kill-collector B]
// A progress bar counts the collected frames (stderr); the mean return, loss, epsilon and frame rate go to
// a metrics::SummaryWriter by frame count (default runs/dqn_cartpole; plot with troupe-plot).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <cstring>
#include <deque>
#include <numeric>
#include <optional>
#include <string>
#include <cmath>
#include <vector>

#include <troupe/troupe.h>
#include <troupe/tools/cli.h>

using namespace troupe;

struct QNetImpl : nn::Cloneable<QNetImpl> {
  QNetImpl() { reset(); }
  void reset() override {
    net = register_module("net", nn::Sequential{nn::Linear(4, 256), nn::ReLU(), nn::Linear(256, 256), nn::ReLU(),
                                                nn::Linear(256, 2)});
  }
  Tensor forward(const Tensor& x) override { return net(x); }
  nn::Sequential net{nullptr};
};
TROUPE_MODULE(QNet);

struct Config {
  int64_t max_frames = 150000;
  double target_return = 475;  // Gymnasium's threshold for CartPole-v1
  uint64_t seed = 0;
  std::string metrics_dir = "runs/dqn_cartpole";
  int kill_collector = -1;
};

Config parse(int argc, char** argv) {
  Config c;
  cli::App app("dqn_cartpole", "DQN on CartPole-v1, alone or on actors over several ranks.");
  cli::add_launch_flags(app);
  app.add_option("--frames", c.max_frames, "stop after this many frames")->check(cli::Positive);
  app.add_option("--seed", c.seed, "seed")->check(cli::NonNegative);
  app.add_option("--target", c.target_return, "stop at this mean return of the last 100 episodes")
      ->check(cli::Positive);
  app.add_option("--metrics", c.metrics_dir, "log directory, or none");
  app.add_option("--kill-collector", c.kill_collector, "stop collector worker 0 after B batches (it must come back)")
      ->check(cli::Positive);
  cli::parse(app, argc, argv);
  return c;
}

int run_alone(const Config& cfg) {
  const int64_t max_frames = cfg.max_frames;
  const double target_return = cfg.target_return;
  const uint64_t seed = cfg.seed;
  const std::string& metrics_dir = cfg.metrics_dir;
  manual_seed(seed);
  set_num_threads(1);
  const int64_t num_envs = 8, frames_per_batch = 256, batch_size = 64, gradient_steps = 64;
  auto env = std::make_shared<rl::CartPoleEnv>(num_envs);
  env->set_seed(seed);

  QNet online;
  auto target = std::make_shared<optim::swa_utils::AveragedModel>(online.ptr(), std::nullopt, nullptr,
                                                                  optim::swa_utils::get_ema_multi_avg_fn(0.995));
  optim::Adam opt(online->parameters(), optim::AdamOptions(1e-3));
  rl::DQNLoss loss_fn(online.ptr(), target, rl::DQNLossOptions().double_dqn(true));
  rl::EGreedy explore(rl::QValuePolicy(online.ptr()), env, 1.0, 0.01, 10000, seed);
  rl::MultiStep multistep(0.99, 3);
  rl::SyncDataCollector collector(
      env, [&](rl::TensorDict td) { return explore(std::move(td)); },
      rl::SyncDataCollectorOptions().frames_per_batch(frames_per_batch).total_frames(max_frames).init_random_frames(1000),
      [&](rl::TensorDict b) { return multistep(b); });
  rl::TensorDictReplayBuffer replay(100000, {}, seed);

  std::deque<double> last100;
  const auto t0 = std::chrono::steady_clock::now();
  double loss_value = 0;
  bool solved = false;
  std::optional<metrics::SummaryWriter> writer;
  if (metrics_dir != "none") writer.emplace(metrics_dir);
  // The collector stops after the batch that reaches total_frames: whole batches.
  metrics::ProgressBar bar((max_frames + frames_per_batch - 1) / frames_per_batch * frames_per_batch,
                           metrics::ProgressOptions().desc("collect").unit("frames"));
  while (auto batch = collector.next()) {
    explore.step(frames_per_batch);
    replay.extend(batch->exclude({"action_value"}).reshape({-1}));
    for (double r : collector.take_episode_returns()) {
      last100.push_back(r);
      if (last100.size() > 100) last100.pop_front();
    }
    if (collector.frames() >= 1000) {
      for (int64_t g = 0; g < gradient_steps; ++g) {
        auto out = loss_fn(replay.sample(batch_size));
        opt.zero_grad();
        out.loss.backward();
        nn::utils::clip_grad_norm_(online->parameters(), 10.0);
        opt.step();
        target->update_parameters(*online);
        loss_value = out.loss.item<double>();
      }
      collector.update_policy_weights_();
    }
    const double mean = last100.empty() ? 0 : std::accumulate(last100.begin(), last100.end(), 0.0) / last100.size();
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    bar.update(frames_per_batch);
    char postfix[64];
    std::snprintf(postfix, sizeof postfix, "mean return %.1f", mean);
    bar.set_postfix(postfix);
    if (writer) {
      const int64_t frames = collector.frames();
      if (!last100.empty()) writer->add_scalar("rollout/mean_return_last100", mean, frames);
      if (frames >= 1000) writer->add_scalar("train/loss", loss_value, frames);
      writer->add_scalar("explore/eps", explore.eps(), frames);
      writer->add_scalar("perf/frames_per_s", frames / secs, frames);
    }
    if (collector.batches() % 10 == 0 || (last100.size() == 100 && mean >= target_return)) {
      char line[200];
      std::snprintf(line, sizeof line,
                    "frames %6lld  %7.0f frames/s  mean return (last %3zu) %6.1f  loss %.4f  eps %.3f  policy v%lld",
                    static_cast<long long>(collector.frames()), collector.frames() / secs, last100.size(), mean,
                    loss_value, explore.eps(), static_cast<long long>(collector.policy_version()));
      bar.write(line);
    }
    if (last100.size() == 100 && mean >= target_return) {
      solved = true;
      break;
    }
  }
  bar.close();
  if (solved) {
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double mean = std::accumulate(last100.begin(), last100.end(), 0.0) / last100.size();
    std::printf("reached: mean return %.1f over the last 100 episodes after %lld frames in %.1f s\n", mean,
                static_cast<long long>(collector.frames()), secs);
  }
  if (writer) {
    writer->close();
    std::printf("metrics: %s/metrics.jsonl\n", metrics_dir.c_str());
  }
  if (!solved) std::printf("mean return %.0f not reached within %lld frames\n", target_return, static_cast<long long>(max_frames));
  return solved ? 0 : 1;
}

// The actor version: rank 0's learner; workers on ranks 1 .. N-2 (rank 1 when N = 2 or 3); the replay
// and the target averager on rank N-1.
int run_actors(launch::Context& ctx, const Config& cfg) {
  auto& rt = ctx.actors();
  const int last = ctx.size - 1;
  std::vector<int> worker_ranks;
  for (int r = 1; r < std::max(2, last); ++r) worker_ranks.push_back(r);
  const int64_t batch_size = 64, gradient_steps = 64, frames_per_batch = 256, learn_after = 1000;
  manual_seed(cfg.seed);
  set_num_threads(1);

  QNet online;
  QNet target;
  optim::Adam opt(online->parameters(), optim::AdamOptions(1e-3));
  rl::DQNLoss loss_fn(online.ptr(), target.ptr(), rl::DQNLossOptions().double_dqn(true));
  const int k = static_cast<int>(worker_ranks.size());
  rl::CollectorSpec spec;
  spec.env = "CartPole";
  spec.num_envs = 8;
  spec.seed = cfg.seed;
  spec.policy = "QNet";
  spec.eps_init = 1.0;
  spec.eps_end = 0.01;
  spec.annealing_frames = 10000 / k;
  spec.gamma = 0.99;
  spec.n_steps = 3;
  spec.frames_per_batch = frames_per_batch;
  spec.init_random_frames = learn_after / k;
  auto replay = rl::RemoteReplayBuffer::spawn(rt, last, 100000, cfg.seed, "replay");
  // The target network: an EMA kept by an averager actor, fed once per batch of 64 gradient steps
  // (decay 0.995 per step: 0.995^64 per batch).
  auto averager = actors::Averager::spawn(rt, last, online.ptr(),
                                          [] { actors::AveragerOptions o; o.ema(std::pow(0.995, 64)).factory = "QNet"; return o; }(),
                                          "target");
  rl::MultiaSyncDataCollector collectors(rt, worker_ranks, spec, online.ptr(), cfg.max_frames, replay);
  std::printf("learner on rank 0; %d collector worker(s) on rank(s)", k);
  for (int r : worker_ranks) std::printf(" %d", r);
  std::printf("; replay and target averager on rank %d\n", last);

  std::deque<double> last100;
  const auto t0 = std::chrono::steady_clock::now();
  double loss_value = 0;
  bool solved = false;
  int64_t batches = 0;
  std::optional<metrics::SummaryWriter> writer;
  if (cfg.metrics_dir != "none") writer.emplace(cfg.metrics_dir);
  metrics::ProgressBar bar(cfg.max_frames, metrics::ProgressOptions().desc("collect").unit("frames"));
  bool averaged = false;
  while (auto b = collectors.next()) {
    ++batches;
    if (cfg.kill_collector >= 0 && batches == cfg.kill_collector) {
      collectors.workers()[0].stop();
      bar.write("stopped collector worker 0 after " + std::to_string(batches) + " batches");
    }
    for (double r : b->episode_returns) {
      last100.push_back(r);
      if (last100.size() > 100) last100.pop_front();
    }
    if (collectors.frames() >= learn_after) {
      if (averaged) averager.load_into(*target);  // the target as the averager has it now
      rl::TensorDict data = replay.sample(batch_size * gradient_steps);
      for (int64_t g = 0; g < gradient_steps; ++g) {
        auto out = loss_fn(data.slice(0, g * batch_size, (g + 1) * batch_size));
        opt.zero_grad();
        out.loss.backward();
        nn::utils::clip_grad_norm_(online->parameters(), 10.0);
        opt.step();
        loss_value = out.loss.item<double>();
      }
      averager.update(*online);  // never waits
      averaged = true;
      collectors.update_policy_weights_(*online);
    }
    const double mean = last100.empty() ? 0 : std::accumulate(last100.begin(), last100.end(), 0.0) / last100.size();
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    bar.update(b->frames);
    if (writer) {
      const int64_t frames = collectors.frames();
      if (!last100.empty()) writer->add_scalar("rollout/mean_return_last100", mean, frames);
      if (frames >= learn_after) writer->add_scalar("train/loss", loss_value, frames);
      writer->add_scalar("perf/frames_per_s", frames / secs, frames);
    }
    if (batches % 10 == 0 || (last100.size() == 100 && mean >= cfg.target_return)) {
      char line[220];
      std::snprintf(line, sizeof line,
                    "frames %6lld  %7.0f frames/s  mean return (last %3zu) %6.1f  loss %.4f  policy v%lld (batch from v%lld)",
                    static_cast<long long>(collectors.frames()), collectors.frames() / secs, last100.size(), mean, loss_value,
                    static_cast<long long>(collectors.policy_version()), static_cast<long long>(b->policy_version));
      bar.write(line);
    }
    if (last100.size() == 100 && mean >= cfg.target_return) {
      solved = true;
      break;
    }
  }
  bar.close();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (solved) {
    const double mean = std::accumulate(last100.begin(), last100.end(), 0.0) / last100.size();
    std::printf("reached: mean return %.1f over the last 100 episodes after %lld frames in %.1f s (%d worker restart(s))\n",
                mean, static_cast<long long>(collectors.frames()), secs, collectors.restarts());
  } else {
    std::printf("mean return %.0f not reached within %lld frames\n", cfg.target_return, static_cast<long long>(cfg.max_frames));
  }
  if (writer) writer->close();
  collectors.shutdown();
  return solved ? 0 : 1;
}

// A bad flag ends the program with one line and exit 2, a failure of the run (an unwritable --metrics
// directory) with one line and exit 1.
int main(int argc, char** argv) {
  actors::register_module<QNet>("QNet");  // every rank: the workers and the averager build it by name
  const Config cfg = parse(argc, argv);
  try {
    int rc = 0;
    launch::run(argc, argv, [&](launch::Context& ctx) {
      if (ctx.size == 1) {
        rc = run_alone(cfg);
      } else if (ctx.rank == 0) {
        try {
          rc = run_actors(ctx, cfg);
        } catch (const std::exception& e) {  // reach the barrier: the other ranks wait there
          std::fprintf(stderr, "dqn_cartpole: %s\n", e.what());
          rc = 1;
        }
      }
      ctx.world->barrier();
      return 0;
    });
    return rc;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dqn_cartpole: %s\n", e.what());
    return 1;
  }
}
