// A tour of troupe's tensor layer: a two-layer network fitted to sin(x) by plain gradient descent,
// using broadcasting, matmul, autograd and NoGradGuard. Run with a step count (default 2000).
#include <troupe/troupe.h>

#include <cstdlib>
#include <iostream>

int main(int argc, char** argv) {
  using namespace troupe;
  int steps = argc > 1 ? std::atoi(argv[1]) : 2000;
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
    if (step % (steps / 5 > 0 ? steps / 5 : 1) == 0) std::cout << "step " << step << "  loss " << last << "\n";
  }
  std::cout << "loss " << first << " -> " << last << "\n";
  return last < first ? 0 : 1;
}
