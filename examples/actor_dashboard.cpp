// A run to watch on the live page: rank 0 trains the digits MLP whose hidden layer is hosted on the last
// rank (actors::host, a RemoteModule; DistributedOptimizer steps it there), a Tally actor on the last rank
// averages the batch losses, and a SummaryWriter logs the curves. With --dashboard PORT, open the URL it
// prints ("[troupe] dashboard http://127.0.0.1:PORT/?token=...") to see the ranks, actors, hosted module
// paths, parameter placement, collectives and curves while it trains.
//
// Usage: actor_dashboard [--ranks N] [--dashboard PORT|ADDR:PORT] [--epochs N] [--lr LR]
//                        [--metrics DIR|none] [--stop-file PATH]
// --stop-file: end after the epoch during which PATH appeared (tests stop the run when they are done).
#include <troupe/troupe.h>
#include <troupe/tools/cli.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>

using namespace troupe;

namespace {

struct Config {
  int epochs = 8;
  double lr = 0.05;
  std::string metrics = "runs/actor_dashboard";
  std::string stop_file;
};

Config parse(int argc, char** argv) {
  Config c;
  cli::App app("actor_dashboard", "A hosted hidden layer and a Tally actor to watch on the live page.");
  cli::add_launch_flags(app);
  app.add_option("--epochs", c.epochs, "epochs")->check(cli::Positive);
  app.add_option("--lr", c.lr, "SGD learning rate")->check(cli::Positive);
  app.add_option("--metrics", c.metrics, "log directory, or none");
  app.add_option("--stop-file", c.stop_file, "end after the epoch during which this file appeared");
  cli::parse(app, argc, argv);
  return c;
}

/// Averages what it is sent: "add"(x) per batch, "take"() the mean so far (and starts again).
struct Tally : actors::Actor {
  double sum = 0;
  int64_t n = 0;
  Tally() {
    handle("add", [this](double x) { sum += x, ++n; });
    handle("take", [this] {
      double mean = n ? sum / static_cast<double>(n) : 0.0;
      sum = 0, n = 0;
      return mean;
    });
  }
};

/// Flatten, hidden (a hosted Linear(64, 128)), ReLU, Linear(128, 10).
struct SplitNetImpl : nn::Module {
  nn::ModulePtr hidden;
  nn::Linear head{nullptr};
  explicit SplitNetImpl(nn::ModulePtr h) : hidden(std::move(h)) {
    register_module("hidden", hidden);
    head = register_module("head", nn::Linear(128, 10));
  }
  Tensor forward(const Tensor& x) override { return head(relu(hidden->forward(x.flatten(1)))); }
};
TROUPE_MODULE(SplitNet);

double accuracy(nn::Module& model, data::DataLoader& loader) {
  NoGradGuard no_grad;
  int64_t correct = 0, total = 0;
  for (auto& batch : loader) {
    correct += eq(argmax(model.forward(batch.data), 1), batch.target).sum().item<int64_t>();
    total += batch.target.size(0);
  }
  return total ? static_cast<double>(correct) / static_cast<double>(total) : 0.0;
}

int train(const Config& cfg, launch::Context& ctx) {
  auto& rt = ctx.actors();
  const int last = ctx.size - 1;
  if (ctx.rank != 0) {  // the other ranks serve their actors until rank 0 is done
    ctx.world->barrier();
    return 0;
  }
  manual_seed(0);
  auto digits = data::Digits::load(data::default_digits_path());
  auto split = data::random_split(digits, {0.8, 0.2}, /*seed=*/42);
  data::DataLoader train_loader(split[0], data::DataLoaderOptions().batch_size(32).shuffle(true));
  data::DataLoader test_loader(split[1], data::DataLoaderOptions().batch_size(256));

  SplitNet model(actors::host(rt, last, "Linear", {int64_t{64}, int64_t{128}}, "hidden"));
#ifdef TROUPE_HAVE_DASHBOARD
  launch::watch_model("digits MLP", model.ptr());  // the page's parameter placement
#endif
  actors::ActorRef tally = rt.spawn_on(last, "tally", "Tally");
  actors::DistributedOptimizer opt(model.ptr(), optim::SGDOptions(cfg.lr).momentum(0.9));
  nn::CrossEntropyLoss loss_fn;

  std::optional<metrics::SummaryWriter> writer;
  if (cfg.metrics != "none") writer.emplace(cfg.metrics);
  const auto batches = static_cast<int64_t>(train_loader.size());
  metrics::ProgressBar bar(cfg.epochs * batches, metrics::ProgressOptions().desc("train").unit("batch"));
  int64_t step = 0;
  double test_acc = 0;
  int epoch = 0;
  for (; epoch < cfg.epochs; ++epoch) {
    const bool stop = !cfg.stop_file.empty() && std::filesystem::exists(cfg.stop_file);
    for (auto& batch : train_loader) {
      Tensor loss = loss_fn(model(batch.data), batch.target);
      opt.zero_grad();
      loss.backward();
      opt.step();
      const double l = loss.item<double>();
      tally.send("add", l);
      if (writer) writer->add_scalar("train/batch_loss", l, ++step);
      bar.update();
    }
    const double train_loss = tally.request<double>("take").get();
    model->eval();
    test_acc = accuracy(*model, test_loader);
    model->train();
    char line[120];
    std::snprintf(line, sizeof line, "epoch %2d/%d  loss %.4f  test acc %.4f", epoch + 1, cfg.epochs, train_loss, test_acc);
    bar.write(line);
    if (writer) {
      writer->add_scalar("train/loss", train_loss, step);
      writer->add_scalar("test/accuracy", test_acc, step);
      writer->flush();
    }
    if (stop) {
      ++epoch;
      break;
    }
  }
  bar.close();
  std::printf("held-out accuracy %.4f after %d epochs; hidden layer on rank %d\n", test_acc, epoch, last);
  ctx.world->barrier();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  actors::register_actor<Tally>("Tally");
  actors::register_module<nn::LinearImpl, int64_t, int64_t>("Linear");
  const Config cfg = parse(argc, argv);  // a bad flag: one line, exit 2
  // a failure of the run (the dashboard's port taken, a missing dataset): one line, exit 1
  return cli::run_main("actor_dashboard", [&] {
    return launch::run(argc, argv, [&](launch::Context& ctx) { return train(cfg, ctx); });
  });
}
