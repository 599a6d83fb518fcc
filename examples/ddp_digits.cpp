// Trains the digits MLP (or conv net) data-parallel with DistributedDataParallel: every rank walks the
// same shuffled global batches (same loader seed everywhere) and takes its own rows of each, so that N
// ranks with --batch-size B train as one process with batches of N*B. Rank 0 prints one line per epoch
// (loss and accuracy summed over the ranks with all_reduce) under a progress bar, and the held-out
// accuracy. Every rank logs its own batch losses to a metrics::SummaryWriter over the world group; rank
// 0 writes them all (gathered at each epoch's flush) with the epoch figures.
//
//   ddp_digits --ranks 2                 # 2 ranks as threads of this process (local backend)
//   mpirun -np 2 ddp_digits              # 2 processes (mpi backend): the same numbers
//   ddp_digits --ranks 2 --dashboard 8080   # and the live page (launch/dashboard.h) at the URL it prints
//
// Usage: ddp_digits [--ranks N] [--dashboard PORT] [--model mlp|conv] [--epochs N] [--batch-size B (per rank)]
//                   [--lr LR] [--seed S] [--data PATH] [--min-accuracy A] [--metrics DIR|none]
// --metrics: the log directory (default runs/ddp_digits_<model>), see train_digits.
#include <troupe/troupe.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <optional>
#include <string>

#include <troupe/tools/cli.h>

#include "digits_models.h"

using namespace troupe;

namespace {

struct Config {
  std::string model = "mlp";
  int epochs = 20;
  int64_t batch_size = 16;  // per rank (32 in all on 2 ranks, as train_digits)
  double lr = 0.1;
  uint64_t seed = 0;
  std::string data;
  double min_accuracy = 0.95;
  std::string metrics;  // log directory ("none": off)
};

Config parse(int argc, char** argv) {
  Config c;
  cli::App app("ddp_digits", "The digits classifier trained data-parallel (DistributedDataParallel).");
  cli::add_launch_flags(app);
  app.add_option("--model", c.model, "mlp or conv")->check(CLI::IsMember({"mlp", "conv"}));
  app.add_option("--epochs", c.epochs, "epochs")->check(cli::Positive);
  app.add_option("--batch-size", c.batch_size, "images per batch and rank")->check(cli::Positive);
  app.add_option("--lr", c.lr, "SGD learning rate")->check(cli::Positive);
  app.add_option("--seed", c.seed, "seed")->check(cli::NonNegative);
  app.add_option("--data", c.data, "digits file (default: the shipped one)")
      ->check(cli::ReadableFile)
      ->check(cli::Decodes([](const std::string& p) { (void)data::Digits::load(p); }));
  app.add_option("--min-accuracy", c.min_accuracy, "exit 1 below this held-out accuracy")->check(CLI::Range(0.0, 1.0));
  app.add_option("--metrics", c.metrics, "log directory, or none (default runs/ddp_digits_<model>)");
  cli::parse(app, argc, argv);
  if (c.metrics.empty()) c.metrics = "runs/ddp_digits_" + c.model;
  return c;
}

// Fraction of correct predictions over a loader (eval mode, no graph).
double accuracy(nn::Module& model, data::DataLoader& loader) {
  NoGradGuard no_grad;
  int64_t correct = 0, total = 0;
  for (auto& batch : loader) {
    Tensor pred = argmax(model(batch.data), 1);
    correct += eq(pred, batch.target).sum().item<int64_t>();
    total += batch.target.size(0);
  }
  return total ? static_cast<double>(correct) / static_cast<double>(total) : 0.0;
}

// FNV-1a over the bytes of every parameter and buffer: equal runs print equal checksums.
uint64_t checksum(const nn::StateDict& sd) {
  uint64_t h = 1469598103934665603ull;
  for (const auto& [k, v] : sd) {
    Tensor c = v.contiguous();
    const auto* p = static_cast<const unsigned char*>(c.data_ptr());
    for (size_t i = 0, n = c.numel() * c.element_size(); i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  }
  return h;
}

int train(const Config& cfg, launch::Context& ctx) {
  const bool lead = ctx.rank == 0;
  auto digits = data::Digits::load(cfg.data.empty() ? data::default_digits_path() : cfg.data);
  auto split = data::random_split(digits, {0.8, 0.2}, /*seed=*/42);  // the same split on every rank
  auto train_set = split[0];
  auto test_set = split[1];
  // Global batches of size * B, shuffled alike on every rank; rank r takes rows [r*B, (r+1)*B).
  data::DataLoader train_loader(
      train_set, data::DataLoaderOptions().batch_size(cfg.batch_size * ctx.size).shuffle(true).drop_last(true).seed(cfg.seed));
  data::DataLoader test_loader(test_set, data::DataLoaderOptions().batch_size(256));

  nn::Sequential model{nullptr};
  {
    // Ranks on threads share the default generator: build each model from the seed alone, so rank 0's
    // (which DistributedDataParallel broadcasts) is the same in both modes.
    static std::mutex init;
    std::lock_guard<std::mutex> lock(init);
    manual_seed(cfg.seed);
    model = cfg.model == "mlp" ? digits::make_mlp() : digits::make_conv_net();
  }
  auto ddp = std::make_shared<parallel::DistributedDataParallel>(model, ctx.world);
#ifdef TROUPE_HAVE_DASHBOARD
  launch::watch_model("ddp_digits " + cfg.model, ddp);  // the live page's parameter placement (rank 0's)
#endif
  optim::SGD optimizer(ddp->parameters(), optim::SGDOptions(cfg.lr).momentum(0.9).weight_decay(1e-4));
  optim::CosineAnnealingLR scheduler(optimizer, /*T_max=*/cfg.epochs);
  nn::CrossEntropyLoss loss_fn;
  if (lead) {
    std::printf("ddp_digits: %s on %d ranks (%s); %lld training images in %lld global batches of %lld; %lld held out\n",
                cfg.model.c_str(), ctx.size, ctx.backend.c_str(), static_cast<long long>(train_set->size()),
                static_cast<long long>(train_loader.size()), static_cast<long long>(cfg.batch_size * ctx.size),
                static_cast<long long>(test_set->size()));
    std::fflush(stdout);
  }

  double test_acc = 0;
  const auto t0 = std::chrono::steady_clock::now();
  // Every rank's scalars, written by rank 0; flush() at the end of each epoch is a collective.
  std::optional<metrics::SummaryWriter> writer;
  if (cfg.metrics != "none") writer.emplace(cfg.metrics, metrics::SummaryWriterOptions().group(ctx.world));
  const auto batches = static_cast<int64_t>(train_loader.size());
  int64_t step = 0;
  metrics::ProgressBar bar(cfg.epochs * batches, metrics::ProgressOptions().desc("train").unit("batch").disable(!lead));
  for (int epoch = 0; epoch < cfg.epochs; ++epoch) {
    const auto e0 = std::chrono::steady_clock::now();
    ddp->train();
    double loss_sum = 0, seen = 0, correct = 0;
    const double lr = optimizer.param_groups()[0].options().get_lr();
    for (auto& batch : train_loader) {
      const int64_t rows = batch.target.size(0) / ctx.size;
      Tensor x = batch.data.narrow(0, ctx.rank * rows, rows);
      Tensor y = batch.target.narrow(0, ctx.rank * rows, rows);
      Tensor output = (*ddp)(x);
      Tensor loss = loss_fn(output, y);
      optimizer.zero_grad();
      loss.backward();  // gradients averaged over the ranks, bucket by bucket
      optimizer.step();
      loss_sum += loss.item<double>() * static_cast<double>(rows);
      seen += static_cast<double>(rows);
      correct += static_cast<double>(eq(argmax(output.detach(), 1), y).sum().item<int64_t>());
      ++step;
      if (writer) writer->add_scalar("train/batch_loss", loss.item<double>(), step);  // this rank's shard
      bar.update();
    }
    scheduler.step();
    Tensor stats = tensor(std::vector<double>{loss_sum, seen, correct}, kFloat64);
    ctx.world->all_reduce(stats);  // over every rank's shard
    auto s = stats.to_vector<double>();
    // Through ddp: its first forward broadcasts rank 0's buffers (BatchNorm's running statistics, which
    // each rank updated on its own shard), so every rank evaluates the same model.
    ddp->eval();
    test_acc = accuracy(*ddp, test_loader);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - e0).count();
    if (lead) {
      char line[160];
      std::snprintf(line, sizeof line, "epoch %2d/%d  lr %.5f  loss %.4f  train acc %.4f  test acc %.4f  (%.2f s)",
                    epoch + 1, cfg.epochs, lr, s[0] / s[1], s[2] / s[1], test_acc, secs);
      bar.write(line);
      bar.set_postfix("epoch " + std::to_string(epoch + 1) + "/" + std::to_string(cfg.epochs) + ", test acc " +
                      std::to_string(test_acc).substr(0, 6));
      if (writer) {
        writer->add_scalar("train/loss", s[0] / s[1], step);
        writer->add_scalar("train/accuracy", s[2] / s[1], step);
        writer->add_scalar("test/accuracy", test_acc, step);
        writer->add_scalar("lr", lr, step);
      }
    }
    if (writer) writer->flush();  // on every rank
  }
  bar.close();
  if (writer) {
    writer->close();  // on every rank
    if (lead) std::printf("metrics: %s/metrics.jsonl (every rank's batch losses, rank 0's epoch figures)\n", cfg.metrics.c_str());
  }
  const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const uint64_t sum = checksum(model->state_dict());
  // Every rank must hold the same parameters and buffers: compare the checksums.
  Tensor sums = tensor(std::vector<int64_t>{static_cast<int64_t>(sum)});
  Tensor lo = sums.clone(), hi = sums.clone();
  ctx.world->all_reduce(lo, comm::ReduceOp::MIN);
  ctx.world->all_reduce(hi, comm::ReduceOp::MAX);
  const bool same = equal(lo, hi);
  if (lead) {
    std::printf("held-out accuracy %.4f after %d epochs on %d ranks (%s, %.2f s); parameter checksum %016llx%s\n",
                test_acc, cfg.epochs, ctx.size, ctx.backend.c_str(), total, static_cast<unsigned long long>(sum),
                same ? " on every rank" : "");
    std::fflush(stdout);
  }
  if (!same) {
    std::fprintf(stderr, "ddp_digits: rank %d: the ranks' parameters differ (checksum %016llx)\n", ctx.rank,
                 static_cast<unsigned long long>(sum));
    return 1;
  }
  if (test_acc < cfg.min_accuracy) {
    if (lead) std::fprintf(stderr, "ddp_digits: held-out accuracy %.4f is below %.4f\n", test_acc, cfg.min_accuracy);
    return 1;
  }
  return 0;
}

}  // namespace

// A bad flag: one line and exit 2 (cli::parse); the first rank's error (an unwritable --metrics
// directory, ...): one line and exit 1.
int main(int argc, char** argv) {
  const Config cfg = parse(argc, argv);
  return cli::run_main("ddp_digits", [&] {
    return launch::run(argc, argv, [&](launch::Context& ctx) { return train(cfg, ctx); });
  });
}
