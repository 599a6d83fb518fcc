// Stochastic Weight Averaging and an EMA model on the 8x8 digits, following the recipe of
// torch.optim.swa_utils.AveragedModel's reference page: CosineAnnealingLR until swa_start, then SWALR
// with update_parameters once per epoch, update_bn at the end; an EMA copy (decay 0.999, buffers
// averaged too) updated after every step from epoch --ema-start on. Prints the held-out accuracy of the plain, SWA and EMA models.
//
// The EMA starts after epoch --ema-start (default 1): its first update copies the model, and with
// decay 0.999 a copy of the untrained net would still weigh 0.999^steps in the average.
//
// A progress bar over the batches (stderr); the per-epoch scalars and the final accuracies go to a
// metrics::SummaryWriter (default runs/swa; plot with troupe-plot runs/swa/metrics.jsonl).
//
// Usage: swa [--epochs N] [--swa-start S] [--swa-lr LR] [--ema-start E] [--seed S] [--data PATH]
//            [--min-accuracy A] [--metrics DIR|none]
#include <troupe/troupe.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>
#include <string>

#include <troupe/tools/cli.h>

#include "digits_models.h"

using namespace troupe;
namespace swa_utils = troupe::optim::swa_utils;

namespace {

double accuracy(nn::Module& model, data::DataLoader& loader) {
  NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  int64_t correct = 0, total = 0;
  for (auto& batch : loader) {
    correct += eq(argmax(model(batch.data), 1), batch.target).sum().item<int64_t>();
    total += batch.target.size(0);
  }
  model.train(was_training);
  return total ? static_cast<double>(correct) / static_cast<double>(total) : 0.0;
}

}  // namespace

int run(int argc, char** argv) {
  int epochs = 30, swa_start = 20, ema_start = 1;
  double lr = 0.05, swa_lr = 0.01, min_accuracy = 0.9;
  uint64_t seed = 0;
  std::string data_path, metrics_dir = "runs/swa";
  cli::App app("swa", "SWA and EMA averaged models on the 8x8 digits.");
  app.add_option("--epochs", epochs, "epochs")->check(cli::Positive);
  app.add_option("--swa-start", swa_start, "epoch the SWA phase starts (< --epochs)")->check(cli::NonNegative);
  app.add_option("--swa-lr", swa_lr, "SWALR's learning rate")->check(cli::Positive);
  app.add_option("--ema-start", ema_start, "epoch the EMA starts")->check(cli::NonNegative);
  app.add_option("--seed", seed, "seed")->check(cli::NonNegative);
  app.add_option("--data", data_path, "digits file (default: the shipped one)")
      ->check(cli::ReadableFile)
      ->check(cli::Decodes([](const std::string& p) { (void)data::Digits::load(p); }));
  app.add_option("--min-accuracy", min_accuracy, "exit 1 below this held-out accuracy")->check(CLI::Range(0.0, 1.0));
  app.add_option("--metrics", metrics_dir, "log directory, or none");
  cli::parse(app, argc, argv);
  if (swa_start >= epochs)
    cli::fail(app, "need --swa-start < --epochs (got " + std::to_string(swa_start) + " and " + std::to_string(epochs) + ")");
  manual_seed(seed);

  auto digits = data::Digits::load(data_path.empty() ? data::default_digits_path() : data_path);
  auto split = data::random_split(digits, {0.8, 0.2}, /*seed=*/42);
  data::DataLoader loader(split[0], data::DataLoaderOptions().batch_size(32).shuffle(true).seed(seed));
  data::DataLoader test_loader(split[1], data::DataLoaderOptions().batch_size(256));

  auto model = digits::make_conv_net();  // BatchNorm is what makes update_bn matter
  nn::CrossEntropyLoss loss_fn;
  optim::SGD optimizer(model->parameters(), optim::SGDOptions(lr).momentum(0.9).weight_decay(1e-4));

  // The reference page's recipe.
  swa_utils::AveragedModel swa_model(model);
  optim::CosineAnnealingLR scheduler(optimizer, /*T_max=*/epochs);
  swa_utils::SWALR swa_scheduler(optimizer, swa_lr);
  // EMA of parameters and buffers, updated after every optimizer step.
  swa_utils::AveragedModel ema_model(model, std::nullopt, nullptr, swa_utils::get_ema_multi_avg_fn(0.999),
                                     /*use_buffers=*/true);

  std::optional<metrics::SummaryWriter> writer;
  if (metrics_dir != "none") writer.emplace(metrics_dir);
  metrics::ProgressBar bar(epochs * static_cast<int64_t>(loader.size()),
                           metrics::ProgressOptions().desc("swa").unit("batch"));
  for (int epoch = 0; epoch < epochs; ++epoch) {
    const double lr_now = optimizer.param_groups()[0].options().get_lr();
    double loss_sum = 0;
    int64_t seen = 0;
    for (auto& batch : loader) {
      optimizer.zero_grad();
      Tensor loss = loss_fn(model(batch.data), batch.target);
      loss.backward();
      optimizer.step();
      if (epoch >= ema_start) ema_model.update_parameters(*model);
      loss_sum += loss.item<double>() * static_cast<double>(batch.target.size(0));
      seen += batch.target.size(0);
      bar.update();
    }
    const bool averaging = epoch > swa_start;
    if (averaging) {
      swa_model.update_parameters(*model);
      swa_scheduler.step();
    } else {
      scheduler.step();
    }
    const double test_acc = accuracy(*model, test_loader);
    char line[160];
    std::snprintf(line, sizeof line, "epoch %2d/%d  lr %.5f  loss %.4f  test acc %.4f%s", epoch + 1, epochs, lr_now,
                  loss_sum / static_cast<double>(seen), test_acc, averaging ? "  (averaged into SWA)" : "");
    bar.write(line);
    bar.set_postfix("epoch " + std::to_string(epoch + 1) + "/" + std::to_string(epochs));
    if (writer) {
      writer->add_scalar("train/loss", loss_sum / static_cast<double>(seen), epoch + 1);
      writer->add_scalar("test/accuracy", test_acc, epoch + 1);
      writer->add_scalar("lr", lr_now, epoch + 1);
    }
  }
  bar.close();
  // SWA weights never ran forward: recompute BatchNorm statistics for them.
  swa_utils::update_bn(loader, swa_model);

  const double plain = accuracy(*model, test_loader);
  const double swa = accuracy(swa_model, test_loader);
  const double ema = accuracy(ema_model, test_loader);
  std::printf("held-out accuracy: plain %.4f  SWA %.4f (%lld models averaged)  EMA %.4f\n", plain, swa,
              static_cast<long long>(swa_model.n_averaged.item<int64_t>()), ema);
  if (writer) {  // the three final accuracies at the last epoch
    writer->add_scalar("final/plain_accuracy", plain, epochs);
    writer->add_scalar("final/swa_accuracy", swa, epochs);
    writer->add_scalar("final/ema_accuracy", ema, epochs);
    writer->close();
    std::printf("metrics: %s/metrics.jsonl\n", metrics_dir.c_str());
  }
  if (plain < min_accuracy || swa < min_accuracy || ema < min_accuracy) {
    std::fprintf(stderr, "swa: an accuracy is below %.3f\n", min_accuracy);
    return 1;
  }
  return 0;
}

// A bad flag ends the program with one line and exit 2, a failure of the run (an unwritable --metrics
// directory) with one line and exit 1.
int main(int argc, char** argv) {
  return cli::run_main("swa", [&] { return run(argc, argv); });
}
