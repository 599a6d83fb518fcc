// SWA and EMA kept by averager actors on another rank while rank 0 trains the digits MLP: the trainer
// sends a snapshot of its weights after every step (EMA, decay 0.99) and after every epoch from
// --swa-start on (SWA), never waiting for the averagers (at most 2 updates in flight, newer ones
// coalesced); at the end it loads both averages and prints the held-out accuracy of the three models.
// Runs with `--ranks 2` (one process) and `mpirun -np 2` (the averagers rebuild the model by the factory
// name "DigitsMLP", registered on every rank).
//
//   ./swa_actor --ranks 2 [--epochs 12] [--swa-start 6]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <troupe/troupe.h>
#include <troupe/tools/cli.h>

#include "digits_models.h"

using namespace troupe;

namespace {
double accuracy(nn::Module& model, data::DataLoader& loader) {
  NoGradGuard no_grad;
  model.eval();
  int64_t correct = 0, total = 0;
  for (auto& b : loader) {
    correct += model.forward(b.data).argmax(1).eq(b.target).sum().item<int64_t>();
    total += b.target.size(0);
  }
  model.train();
  return 100.0 * correct / total;
}
}  // namespace

int main(int argc, char** argv) {
  int epochs = 12, swa_start = 6;
  cli::App app("swa_actor", "EMA and SWA averagers on another rank while rank 0 trains.");
  cli::add_launch_flags(app);
  app.add_option("--epochs", epochs, "epochs")->check(cli::Positive);
  app.add_option("--swa-start", swa_start, "epoch the SWA averaging starts (< --epochs)")->check(cli::NonNegative);
  cli::parse(app, argc, argv);
  if (swa_start >= epochs)
    cli::fail(app, "need --swa-start < --epochs (got " + std::to_string(swa_start) + " and " + std::to_string(epochs) + ")");
  actors::register_module_factory("DigitsMLP", [](const actors::List&) -> nn::ModulePtr { return digits::make_mlp().ptr(); });
  return launch::run(argc, argv, [&](launch::Context& ctx) {
    if (ctx.rank == 0) {
      auto& rt = ctx.actors();
      auto digits_set = data::Digits::load(data::default_digits_path());
      auto split = data::random_split(digits_set, {0.8, 0.2}, /*seed=*/42);
      data::DataLoader train(split[0], data::DataLoaderOptions().batch_size(32).shuffle(true).seed(1));
      data::DataLoader test(split[1], data::DataLoaderOptions().batch_size(256));
      manual_seed(0);
      nn::Sequential model = digits::make_mlp();
      optim::SGD opt(model->parameters(), optim::SGDOptions(0.05).momentum(0.9));
      const int avg_rank = ctx.size - 1;
      actors::AveragerOptions options;
      options.in_flight(2).factory = "DigitsMLP";  // how the averagers' rank builds the model
      auto ema = actors::Averager::spawn(rt, avg_rank, model.ptr(), actors::AveragerOptions(options).ema(0.99), "ema");
      auto swa = actors::Averager::spawn(rt, avg_rank, model.ptr(), actors::AveragerOptions(options).swa(), "swa");
      metrics::ProgressBar bar(epochs * static_cast<int64_t>(train.size()), metrics::ProgressOptions().desc("train").unit("batch"));
      for (int epoch = 0; epoch < epochs; ++epoch) {
        for (auto& b : train) {
          opt.zero_grad();
          nn::functional::cross_entropy(model->forward(b.data), b.target).backward();
          opt.step();
          if (epoch >= 1) ema.update(*model);  // returns at once
          bar.update();
        }
        if (epoch + 1 >= swa_start) swa.update(*model);
      }
      bar.close();
      ema.flush();
      swa.flush();
      swa.update_bn({});  // no BatchNorm in this MLP: nothing to recompute (runs on the averager's rank)
      nn::Sequential ema_model = digits::make_mlp(), swa_model = digits::make_mlp();
      ema.load_into(*ema_model);
      swa.load_into(*swa_model);
      const double a = accuracy(*model, test), e = accuracy(*ema_model, test), s = accuracy(*swa_model, test);
      std::printf("averagers on rank %d: EMA applied %zu of %lld updates (%lld coalesced), SWA averaged %zu models\n", avg_rank,
                  ema.applied_versions().size(), static_cast<long long>(ema.versions_sent()),
                  static_cast<long long>(ema.coalesced()), swa.applied_versions().size());
      std::printf("held-out accuracy: model %.1f%%, EMA %.1f%%, SWA %.1f%%\n", a, e, s);
      if (a < 90 || e < 90 || s < 90) std::printf("WRONG: an accuracy below 90%%\n");
    }
    ctx.world->barrier();
    return 0;
  });
}
