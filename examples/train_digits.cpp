// Trains a classifier on the 8x8 handwritten digits shipped in datasets/digits (1,797 images), with the
// training loop of PyTorch's modules note: forward, loss, zero_grad, backward, optimizer.step(), plus
// an lr schedule, a held-out split, one line per epoch under a progress bar (stderr), scalars logged by
// metrics::SummaryWriter, and a checkpoint that --resume continues bit for bit.
//
// Usage: train_digits [--model mlp|conv] [--epochs N] [--batch-size B] [--lr LR] [--seed S]
//                     [--checkpoint PATH] [--resume] [--data PATH] [--min-accuracy A] [--stop-after K]
//                     [--metrics DIR|none]
// --metrics: where the scalars go (metrics.jsonl, metrics.csv, a TensorBoard event file; default
// runs/train_digits_<model>; --resume appends to them); plot them with `troupe-plot DIR/metrics.jsonl`.
// --stop-after K ends the run after epoch K as if it were interrupted (the schedule still spans
// --epochs); a later --resume with the same flags continues from the checkpoint.
#include <troupe/troupe.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>

#include <troupe/tools/cli.h>

#include "digits_models.h"

using namespace troupe;

namespace {

struct Config {
  std::string model = "mlp";
  int epochs = 20;
  int64_t batch_size = 32;
  double lr = 0.05;
  uint64_t seed = 0;
  std::string checkpoint = "train_digits.ckpt";
  bool resume = false;
  std::string data;
  double min_accuracy = 0.95;
  int stop_after = -1;  // stop after this many epochs (as if interrupted); -1: run them all
  std::string metrics;  // log directory; "" until parse() sets the default, "none": off
};

Config parse(int argc, char** argv) {
  Config c;
  cli::App app("train_digits", "Trains a classifier on the 8x8 digits (datasets/digits).");
  app.add_option("--model", c.model, "mlp or conv")->check(CLI::IsMember({"mlp", "conv"}));
  app.add_option("--epochs", c.epochs, "epochs (the lr schedule spans them)")->check(cli::Positive);
  app.add_option("--batch-size", c.batch_size, "images per batch")->check(cli::Positive);
  app.add_option("--lr", c.lr, "SGD learning rate")->check(cli::Positive);
  app.add_option("--seed", c.seed, "seed of the weights and the shuffling")->check(cli::NonNegative);
  app.add_option("--checkpoint", c.checkpoint, "checkpoint file (written after every epoch)");
  app.add_flag("--resume", c.resume, "continue from --checkpoint");
  app.add_option("--data", c.data, "digits file (default: the shipped one)")
      ->check(cli::ReadableFile)
      ->check(cli::Decodes([](const std::string& p) { (void)data::Digits::load(p); }));
  app.add_option("--min-accuracy", c.min_accuracy, "exit 1 below this held-out accuracy")->check(CLI::Range(0.0, 1.0));
  app.add_option("--stop-after", c.stop_after, "stop after epoch K as if interrupted")->check(cli::Positive);
  app.add_option("--metrics", c.metrics, "log directory, or none (default runs/train_digits_<model>)");
  cli::parse(app, argc, argv);
  if (c.metrics.empty()) c.metrics = "runs/train_digits_" + c.model;
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

// Prefixes every key of `part` with `prefix` into `out` (one checkpoint holds model, optimizer, scheduler).
void put(nn::StateDict& out, const std::string& prefix, const nn::StateDict& part) {
  for (const auto& [k, v] : part) out.insert(prefix + k, v);
}

// The entries of `all` under `prefix`, without it.
nn::StateDict take(const nn::StateDict& all, const std::string& prefix) {
  nn::StateDict out;
  for (const auto& [k, v] : all)
    if (k.compare(0, prefix.size(), prefix) == 0) out.insert(k.substr(prefix.size()), v);
  return out;
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

}  // namespace

int run(int argc, char** argv) {
  const Config cfg = parse(argc, argv);
  manual_seed(cfg.seed);

  auto digits = data::Digits::load(cfg.data.empty() ? data::default_digits_path() : cfg.data);
  // A fixed 80/20 held-out split: the same images are held out in every run and on --resume.
  auto split = data::random_split(digits, {0.8, 0.2}, /*seed=*/42);
  auto train_set = split[0];
  auto test_set = split[1];
  data::DataLoader train_loader(train_set, data::DataLoaderOptions().batch_size(cfg.batch_size).shuffle(true).seed(cfg.seed));
  data::DataLoader test_loader(test_set, data::DataLoaderOptions().batch_size(256));

  nn::Sequential model = cfg.model == "mlp" ? digits::make_mlp() : digits::make_conv_net();
  optim::SGD optimizer(model->parameters(), optim::SGDOptions(cfg.lr).momentum(0.9).weight_decay(1e-4));
  optim::CosineAnnealingLR scheduler(optimizer, /*T_max=*/cfg.epochs);
  nn::CrossEntropyLoss loss_fn;

  int start_epoch = 0;
  if (cfg.resume) {
    nn::StateDict ckpt;
    try {
      ckpt = nn::load_state_dict_file(cfg.checkpoint);
    } catch (const std::exception& e) {
      throw cli::BadInput(std::string("--resume: ") + e.what());
    }
    model->load_state_dict(take(ckpt, "model."));
    optimizer.load_state_dict(take(ckpt, "optimizer."));
    scheduler.load_state_dict(take(ckpt, "scheduler."));
    train_loader.load_state_dict(take(ckpt, "train_loader."));
    start_epoch = static_cast<int>(ckpt.at("epoch").item<int64_t>());
    std::printf("resumed from %s after epoch %d\n", cfg.checkpoint.c_str(), start_epoch);
  } else {
    std::printf("%s: %lld parameters; %lld training and %lld held-out images\n", cfg.model.c_str(),
                static_cast<long long>([&] { int64_t n = 0; for (auto& p : model->parameters()) n += p.numel(); return n; }()),
                static_cast<long long>(train_set->size()), static_cast<long long>(test_set->size()));
  }

  double test_acc = 0;
  const auto t0 = std::chrono::steady_clock::now();
  const int end_epoch = cfg.stop_after >= 0 && cfg.stop_after < cfg.epochs ? cfg.stop_after : cfg.epochs;
  // Scalars by global step (batches trained so far); a resumed run adds to the stopped run's files.
  std::optional<metrics::SummaryWriter> writer;
  if (cfg.metrics != "none") writer.emplace(cfg.metrics, metrics::SummaryWriterOptions().append(cfg.resume));
  const auto batches = static_cast<int64_t>(train_loader.size());
  int64_t step = static_cast<int64_t>(start_epoch) * batches;
  metrics::ProgressBar bar(std::max(end_epoch - start_epoch, 0) * batches,
                           metrics::ProgressOptions().desc("train").unit("batch"));
  for (int epoch = start_epoch; epoch < end_epoch; ++epoch) {
    const auto e0 = std::chrono::steady_clock::now();
    model->train();
    double loss_sum = 0;
    int64_t seen = 0, correct = 0;
    const double lr = optimizer.param_groups()[0].options().get_lr();
    for (auto& batch : train_loader) {
      Tensor output = model(batch.data);
      Tensor loss = loss_fn(output, batch.target);
      optimizer.zero_grad();
      loss.backward();
      optimizer.step();
      const int64_t n = batch.target.size(0);
      loss_sum += loss.item<double>() * static_cast<double>(n);
      seen += n;
      correct += eq(argmax(output.detach(), 1), batch.target).sum().item<int64_t>();
      ++step;
      if (writer) writer->add_scalar("train/batch_loss", loss.item<double>(), step);
      bar.update();
    }
    scheduler.step();
    model->eval();
    test_acc = accuracy(*model, test_loader);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - e0).count();
    const double train_loss = loss_sum / static_cast<double>(seen);
    const double train_acc = static_cast<double>(correct) / static_cast<double>(seen);
    char line[160];
    std::snprintf(line, sizeof line, "epoch %2d/%d  lr %.5f  loss %.4f  train acc %.4f  test acc %.4f  (%.2f s)",
                  epoch + 1, cfg.epochs, lr, train_loss, train_acc, test_acc, secs);
    bar.write(line);  // stdout, above the bar
    bar.set_postfix("epoch " + std::to_string(epoch + 1) + "/" + std::to_string(cfg.epochs) + ", test acc " +
                    std::to_string(test_acc).substr(0, 6));
    if (writer) {
      writer->add_scalar("train/loss", train_loss, step);
      writer->add_scalar("train/accuracy", train_acc, step);
      writer->add_scalar("test/accuracy", test_acc, step);
      writer->add_scalar("lr", lr, step);
      writer->flush();
    }

    nn::StateDict ckpt;
    put(ckpt, "model.", model->state_dict());
    put(ckpt, "optimizer.", optimizer.state_dict());
    put(ckpt, "scheduler.", scheduler.state_dict());
    put(ckpt, "train_loader.", train_loader.state_dict());
    ckpt.insert("epoch", scalar_tensor(static_cast<int64_t>(epoch + 1), TensorOptions().dtype(kInt64)));
    nn::save(ckpt, cfg.checkpoint);
  }
  bar.close();
  if (writer) {
    writer->close();
    std::printf("metrics: %s/metrics.jsonl (and .csv, TensorBoard events); plot with troupe-plot\n", cfg.metrics.c_str());
  }
  if (start_epoch >= end_epoch) {  // nothing left to train: just evaluate
    model->eval();
    test_acc = accuracy(*model, test_loader);
  }
  const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("held-out accuracy %.4f after %d epochs (%.2f s); checkpoint %s; parameter checksum %016llx\n",
              test_acc, end_epoch, total, cfg.checkpoint.c_str(),
              static_cast<unsigned long long>(checksum(model->state_dict())));
  if (end_epoch < cfg.epochs) {
    std::printf("stopped after epoch %d of %d; continue with --resume\n", end_epoch, cfg.epochs);
    return 0;
  }
  if (test_acc < cfg.min_accuracy) {
    std::fprintf(stderr, "train_digits: held-out accuracy %.4f is below %.4f\n", test_acc, cfg.min_accuracy);
    return 1;
  }
  return 0;
}

// A bad flag (a non-number, a missing or foreign --data file) ends the program with one line and exit 2,
// a failure of the run (an unwritable --metrics directory) with one line and exit 1.
int main(int argc, char** argv) {
  return cli::run_main("train_digits", [&] { return run(argc, argv); });
}
