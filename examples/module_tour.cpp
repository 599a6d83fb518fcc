// A tour of troupe::nn: a Module with children, a forward hook, training a small classifier with plain
// SGD (under a progress bar, the loss logged by step), and a checkpoint round trip through safetensors.
// Usage: module_tour [steps (default 500)] [--metrics DIR|none (default runs/module_tour)]
#include <troupe/troupe.h>
#include <troupe/tools/cli.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <optional>
#include <string>

using namespace troupe;

// Two Linear layers and a ReLU, written as for libtorch (`class Net(nn.Module)` in PyTorch): the class is
// NetImpl, TROUPE_MODULE(Net) makes the holder Net that owns one.
struct NetImpl : nn::Module {
  NetImpl() {
    fc1 = register_module("fc1", nn::Linear(2, 32));
    fc2 = register_module("fc2", nn::Linear(32, 2));
  }
  Tensor forward(Tensor x) { return fc2(relu(fc1(x))); }
  nn::Linear fc1{nullptr}, fc2{nullptr};
};
TROUPE_MODULE(Net);

int run(int argc, char** argv) {
  int steps = 500;
  std::string metrics_dir = "runs/module_tour";
  troupe::cli::App app("module_tour", "A tour of troupe::nn: a small classifier, a hook, a safetensors round trip.");
  app.add_option("steps", steps, "steps (default 500)")->check(troupe::cli::Positive);
  app.add_option("--metrics", metrics_dir, "log directory, or none");
  troupe::cli::parse(app, argc, argv);
  std::optional<metrics::SummaryWriter> writer;
  if (metrics_dir != "none") writer.emplace(metrics_dir);
  manual_seed(0);
  Net net;
  std::cout << net << "\n";

  // Two interleaved half-moons of points, labelled by which side of a sine curve they lie on.
  Tensor x = rand({512, 2}) * 4.0 - 2.0;
  Tensor y = gt(x.select(1, 1), sin(x.select(1, 0) * 2.0)).to(kInt64);

  int64_t hook_calls = 0;
  auto handle = net->fc1->register_forward_hook([&](nn::Module&, const nn::Args&, const nn::Value&) { ++hook_calls; });
  nn::CrossEntropyLoss loss_fn;
  metrics::ProgressBar bar(steps + 1, metrics::ProgressOptions().desc("train").unit("step"));
  for (int step = 0; step <= steps; ++step) {
    Tensor loss = loss_fn(net(x), y);
    net->zero_grad();
    loss.backward();
    NoGradGuard no_grad;
    for (auto& p : net->parameters()) p.sub_(p.grad() * 0.5);
    if (writer) writer->add_scalar("loss", loss.item<double>(), step);
    if (step % (steps / 5 > 0 ? steps / 5 : 1) == 0) {
      char line[64];
      std::snprintf(line, sizeof line, "step %4d  loss %.4f", step, loss.item<float>());
      bar.write(line);
    }
    bar.update();
  }
  bar.close();
  handle.remove();

  net->eval();
  Tensor accuracy = eq(argmax(net(x), 1), y).to(kFloat32).mean();
  std::printf("train accuracy %.3f (forward hook ran %lld times)\n", accuracy.item<float>(),
              static_cast<long long>(hook_calls));

  // Checkpoint: safetensors out, into a fresh model, same outputs.
  std::string path = "module_tour.safetensors";
  nn::save_safetensors(net->state_dict(), path);
  Net restored;
  restored->load_state_dict(nn::load_safetensors(path));
  restored->eval();
  bool same = equal(restored(x), net(x));
  std::printf("restored from %s: outputs %s\n", path.c_str(), same ? "identical" : "DIFFER");
  std::remove(path.c_str());
  return same && accuracy.item<float>() > 0.8f ? 0 : 1;
}

// A bad flag ends the program with one line and exit 2, a failure of the run (an unwritable --metrics
// directory) with one line and exit 1.
int main(int argc, char** argv) {
  return troupe::cli::run_main("module_tour", [&] { return run(argc, argv); });
}
