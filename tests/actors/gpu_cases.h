#pragma once
// The GPU checks that the one-process and the mpirun tests share: a tree and its twin whose subtrees are
// hosted on other ranks (or placed on groups), both on the GPU, give the same outputs and gradients there,
// and the same parameters after SGD steps.
#include <gtest/gtest.h>

#include <troupe/optim/sgd.h>

#include "remote_models.h"

namespace troupe::actors::testing {

/// Forward of `x` (on the GPU) through `local` and `placed`, then backward of the sum of squares: the
/// outputs, the input's gradient and every parameter's gradient agree to 1e-12, and are CUDA tensors.
inline void expect_same_forward_and_backward_on_gpu(nn::Module& local, nn::Module& placed, const Tensor& x) {
  Tensor x1 = x.detach().clone().requires_grad_(true), x2 = x.detach().clone().requires_grad_(true);
  Tensor y1 = local.forward(x1);
  Tensor y2 = placed.forward(x2);
  EXPECT_TRUE(y2.is_cuda());
  EXPECT_LT(max_diff(y1.cpu(), y2.cpu()), 1e-12);
  (y1 * y1).sum().backward();
  (y2 * y2).sum().backward();
  ASSERT_TRUE(x2.grad().defined());
  EXPECT_TRUE(x2.grad().is_cuda());
  EXPECT_LT(max_diff(x1.grad().cpu(), x2.grad().cpu()), 1e-12);
  auto p1 = local.named_parameters();
  auto p2 = placed.named_parameters();
  ASSERT_EQ(p1.keys(), p2.keys());
  for (const auto& [k, p] : p1) {
    ASSERT_TRUE(p2[k].grad().defined()) << k;
    EXPECT_TRUE(p2[k].grad().is_cuda()) << k;
    EXPECT_LT(max_diff(p.grad().cpu(), p2[k].grad().cpu()), 1e-12) << k;
  }
}

/// SGD steps (lr 0.1, so that a step shows every gradient) on batches of the given sizes, on `gpu`:
/// `local` with optim::SGD, `placed` with a DistributedOptimizer; the outputs (CUDA tensors) and, after
/// each step, every state_dict entry agree to 1e-12.
inline void train_side_by_side_on_gpu(nn::Module& local, const nn::ModulePtr& placed, Device gpu,
                                      const std::vector<int64_t>& batches) {
  optim::SGD sgd(local.parameters(), optim::SGDOptions(0.1));
  DistributedOptimizer dopt(placed, optim::SGDOptions(0.1));
  for (int64_t b : batches) {
    manual_seed(11 + static_cast<uint64_t>(b));
    Tensor x = randn({b, 4}, kFloat64).to(gpu);
    sgd.zero_grad();
    dopt.zero_grad();
    Tensor y1 = local.forward(x);
    Tensor y2 = placed->forward(x);
    EXPECT_TRUE(y2.is_cuda());
    EXPECT_LT(max_diff(y1.cpu(), y2.cpu()), 1e-12) << b;
    (y1 * y1).sum().backward();
    (y2 * y2).sum().backward();
    sgd.step();
    dopt.step();
    auto a = local.state_dict();
    auto c = placed->state_dict();
    for (const auto& [k, t] : a) EXPECT_LT(max_diff(t.cpu(), c[k].cpu()), 1e-12) << k << " after a step of " << b;
  }
}

}  // namespace troupe::actors::testing
