// A tour of troupe's tensor layer: a two-layer network fitted to sin(x) by plain gradient descent,
// using broadcasting, matmul, autograd and NoGradGuard, with a progress bar and the loss logged by step.
// Usage: tensor_tour [steps (default 2000)] [--metrics DIR|none (default runs/tensor_tour)]
#include <troupe/troupe.h>
#include <troupe/tools/cli.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>

int run(int argc, char** argv) {
  using namespace troupe;
  int steps = 2000;
  std::string metrics_dir = "runs/tensor_tour";
  troupe::cli::App app("tensor_tour", "A two-layer network fitted to sin(x) with troupe's tensors and autograd.");
  app.add_option("steps", steps, "steps (default 2000)")->check(troupe::cli::Positive);
  app.add_option("--metrics", metrics_dir, "log directory, or none");
  troupe::cli::parse(app, argc, argv);
  std::optional<metrics::SummaryWriter> writer;
  if (metrics_dir != "none") writer.emplace(metrics_dir);
  metrics::ProgressBar bar(steps, metrics::ProgressOptions().desc("fit").unit("step"));
  manual_seed(0);
  Tensor x = linspace(-3.0, 3.0, 128).unsqueeze(1);  // (128, 1)
  Tensor y = sin(x);                                  // the target
  Tensor w1 = (randn({1, 32}) * 0.5).requires_grad_();
  Tensor b1 = zeros({32}).requires_grad_();
  Tensor w2 = (randn({32, 1}) * 0.2).requires_grad_();
  Tensor b2 = zeros({1}).requires_grad_();
  double first = 0, last = 0;
  for (int step = 0; step < steps; ++step) {
    Tensor h = tanh(x.matmul(w1) + b1);             // (128, 32)
    Tensor loss = (h.matmul(w2) + b2 - y).square().mean();
    loss.backward();
    {
      NoGradGuard no_grad;  // the update itself is not part of the graph
      for (Tensor* p : {&w1, &b1, &w2, &b2}) {
        p->sub_(p->grad() * 0.1);
        p->set_grad(Tensor());
      }
    }
    last = loss.item<double>();
    if (step == 0) first = last;
    if (writer) writer->add_scalar("loss", last, step);
    if (step % (steps / 5 > 0 ? steps / 5 : 1) == 0) {
      std::ostringstream line;
      line << "step " << step << "  loss " << last;
      bar.write(line.str());
    }
    bar.update();
  }
  bar.close();
  std::cout << "loss " << first << " -> " << last << "\n";
  return last < first ? 0 : 1;
}

// A bad flag ends the program with one line and exit 2, a failure of the run (an unwritable --metrics
// directory) with one line and exit 1.
int main(int argc, char** argv) {
  return troupe::cli::run_main("tensor_tour", [&] { return run(argc, argv); });
}
