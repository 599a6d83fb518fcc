// DQN on CartPole-v1, in one process: a SyncDataCollector over 8 CartPole copies with epsilon-greedy
// exploration and 3-step returns (MultiStep), a replay buffer, double DQN, and a target network kept
// as an EMA of the online one by AveragedModel. Stops when the mean return of the last 100 episodes
// reaches 475 (Gymnasium's threshold), or after --frames.
//   dqn_cartpole [--frames N] [--seed S] [--target R] [--metrics DIR|none]
// R: the mean return to reach, 475 by default. A progress bar counts the collected frames (stderr); the
// mean return, loss, epsilon and frame rate go to a metrics::SummaryWriter by frame count (default
// runs/dqn_cartpole; plot with troupe-plot runs/dqn_cartpole/metrics.jsonl).
// (The actor version, with collector, replay and averager actors on other ranks, builds on this.)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <cstring>
#include <deque>
#include <numeric>
#include <optional>
#include <string>

#include <troupe/troupe.h>

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

int run(int argc, char** argv) {
  int64_t max_frames = 150000;
  double target_return = 475;  // Gymnasium's threshold for CartPole-v1
  uint64_t seed = 0;
  std::string metrics_dir = "runs/dqn_cartpole";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--frames")) max_frames = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--seed")) seed = std::strtoull(argv[i + 1], nullptr, 10);
    else if (!std::strcmp(argv[i], "--target")) target_return = std::atof(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--metrics")) metrics_dir = argv[i + 1];
    else {
      std::fprintf(stderr, "usage: dqn_cartpole [--frames N] [--seed S] [--target R] [--metrics DIR|none]\n");
      return 2;
    }
  }
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

// A bad flag value (an unwritable --metrics directory, a missing --data file) ends the program with one line.
int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dqn_cartpole: %s\n", e.what());
    return 1;
  }
}
