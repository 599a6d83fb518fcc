// Model parallel training with hosted subtrees: the digits MLP, written once as an ordinary Module, has its
// encoder moved to the last rank and its head to rank 1 by actors::place(); rank 0 trains it with
// DistributedOptimizer (each host steps its own parameters) and compares it, step for step, with the same
// model trained locally. Runs the same with `--ranks 2` (one process: the hosts get the modules themselves)
// and `mpirun -np 2` (two processes: the hosts rebuild them by class name and load their state).
//
//   ./model_parallel --ranks 2 [--epochs 6]
//   mpirun -np 2 ./model_parallel
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <troupe/troupe.h>
#include <troupe/tools/cli.h>

using namespace troupe;

// Flatten, Linear(64, 256), ReLU: 8x8 images to 256 features.
struct EncoderImpl : nn::Module {
  nn::Linear fc{nullptr};
  EncoderImpl() { fc = register_module("fc", nn::Linear(64, 256)); }
  Tensor forward(const Tensor& x) override { return relu(fc(x.flatten(1))); }
};
TROUPE_MODULE(Encoder);

// Linear(256, 64), ReLU, Linear(64, 10).
struct HeadImpl : nn::Module {
  nn::Linear fc1{nullptr}, fc2{nullptr};
  HeadImpl() {
    fc1 = register_module("fc1", nn::Linear(256, 64));
    fc2 = register_module("fc2", nn::Linear(64, 10));
  }
  Tensor forward(const Tensor& x) override { return fc2(relu(fc1(x))); }
};
TROUPE_MODULE(Head);

// The model as anyone would write it: its forward calls its members.
struct ClassifierImpl : nn::Module {
  Encoder encoder;
  Head head;
  ClassifierImpl() {
    register_module("encoder", encoder.ptr());
    register_module("head", head.ptr());
  }
  Tensor forward(const Tensor& x) override { return head(encoder(x)); }
};
TROUPE_MODULE(Classifier);

int main(int argc, char** argv) {
  int epochs = 6;
  cli::App app("model_parallel", "The digits MLP with its encoder and head hosted on other ranks.");
  cli::add_launch_flags(app);
  app.add_option("--epochs", epochs, "epochs")->check(cli::Positive);
  cli::parse(app, argc, argv);
  // Every rank registers the classes it may be asked to host (the same binary runs everywhere).
  actors::register_module<Encoder>("Encoder");
  actors::register_module<Head>("Head");
  return launch::run(argc, argv, [&](launch::Context& ctx) {
    if (ctx.rank == 0) {
      auto digits = data::Digits::load(data::default_digits_path());
      auto split = data::random_split(digits, {0.8, 0.2}, /*seed=*/42);
      data::DataLoader train(split[0], data::DataLoaderOptions().batch_size(64).shuffle(true).seed(1));
      data::DataLoader test(split[1], data::DataLoaderOptions().batch_size(256));

      manual_seed(0);
      Classifier local;
      manual_seed(0);
      Classifier model;
      auto hosts = actors::place(ctx.actors(), model.ptr(), {{"encoder", ctx.size - 1}, {"head", 1 % ctx.size}});
      std::printf("%s\n", model->repr().c_str());

      optim::SGD local_opt(local->parameters(), optim::SGDOptions(0.05).momentum(0.9));
      actors::DistributedOptimizer opt(model.ptr(), optim::SGDOptions(0.05).momentum(0.9));
      metrics::ProgressBar bar(epochs * static_cast<int64_t>(train.size()), metrics::ProgressOptions().desc("train").unit("batch"));
      for (int epoch = 0; epoch < epochs; ++epoch) {
        double loss_sum = 0;
        int64_t seen = 0;
        for (auto& b : train) {
          opt.zero_grad();
          Tensor loss = nn::functional::cross_entropy(model(b.data), b.target);
          loss.backward();  // through rank 0's graph and every host's part of it
          opt.step();
          local_opt.zero_grad();
          nn::functional::cross_entropy(local(b.data), b.target).backward();
          local_opt.step();
          loss_sum += loss.item<double>() * b.target.size(0);
          seen += b.target.size(0);
          bar.update();
        }
        bar.write("epoch " + std::to_string(epoch + 1) + ": loss " + std::to_string(loss_sum / seen));
      }
      bar.close();

      NoGradGuard no_grad;
      model->eval();
      int64_t correct = 0, total = 0;
      for (auto& b : test) {
        correct += model(b.data).argmax(1).eq(b.target).sum().item<int64_t>();
        total += b.target.size(0);
      }
      double diff = 0;
      auto mine = local->state_dict();
      for (const auto& [k, t] : model->state_dict()) diff = std::max(diff, (t - mine[k]).abs().max().item<double>());
      const double acc = 100.0 * correct / total;
      std::printf("held-out accuracy %.1f%% (encoder on rank %d, head on rank %d); largest difference from the local run: %.3g\n",
                  acc, hosts["encoder"]->host_rank(), hosts["head"]->host_rank(), diff);
      if (acc < 90.0 || diff > 1e-4) std::printf("WRONG: accuracy below 90%% or the hosted run drifted\n");
    }
    ctx.world->barrier();
    return 0;
  });
}
