// Autograd engine semantics: accumulation, graph freeing, error texts (PyTorch's), in-place checks and
// CopySlices, grad mode, detach, hooks, retain_grad, autograd::grad, double backward, execution order,
// node names, dtypes of gradients, and deep graphs.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "tensor/autograd.h"
#include "tensor/ops.h"

namespace {

using namespace troupe;
using autograd::variable_list;

Tensor leaf(std::vector<double> v) { return tensor(v, kFloat64).requires_grad_(true); }  // float64 leaf

std::vector<double> vals(const Tensor& t) { return t.to_vector<double>(); }

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "<no exception>";
}

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << "message: " << (haystack)

TEST(Autograd, GradientsAccumulateAcrossBackwardCalls) {
  Tensor x = leaf({1, 2, 3});
  (x * x).sum().backward();
  EXPECT_EQ(vals(x.grad()), (std::vector<double>{2, 4, 6}));
  (x * x).sum().backward();
  EXPECT_EQ(vals(x.grad()), (std::vector<double>{4, 8, 12}));
  (x * 3.0).sum().backward();
  EXPECT_EQ(vals(x.grad()), (std::vector<double>{7, 11, 15}));
}

TEST(Autograd, SetGradUndefinedZeroesTheGradient) {
  Tensor x = leaf({1, 2});
  (x * x).sum().backward();
  ASSERT_TRUE(x.grad().defined());
  x.set_grad(Tensor());
  EXPECT_FALSE(x.grad().defined());
  (x * 5.0).sum().backward();
  EXPECT_EQ(vals(x.grad()), (std::vector<double>{5, 5}));
  // a wrongly shaped grad is refused
  EXPECT_THROW(x.set_grad(zeros({3}, kFloat64)), std::invalid_argument);
}

TEST(Autograd, BackwardTwiceWithoutRetainGraphThrows) {
  Tensor x = leaf({1, 2});
  Tensor y = (x * x).sum();
  y.backward();
  std::string msg = error_of([&] { y.backward(); });
  EXPECT_CONTAINS(msg, "Trying to backward through the graph a second time");
  EXPECT_CONTAINS(msg, "retain_graph=True");
}

TEST(Autograd, RetainGraphAllowsASecondBackward) {
  Tensor x = leaf({1, 2});
  Tensor y = (x * x).sum();
  y.backward(Tensor(), true);
  y.backward();
  EXPECT_EQ(vals(x.grad()), (std::vector<double>{4, 8}));
}

TEST(Autograd, NonScalarOutputNeedsAGradient) {
  Tensor x = leaf({1, 2});
  Tensor y = x * 2.0;
  EXPECT_CONTAINS(error_of([&] { y.backward(); }), "grad can be implicitly created only for scalar outputs");
  y.backward(tensor(std::vector<double>{1.0, 10.0}, kFloat64));
  EXPECT_EQ(vals(x.grad()), (std::vector<double>{2, 20}));
  // a gradient of the wrong shape is refused
  EXPECT_CONTAINS(error_of([&] { (x * 2.0).backward(ones({3}, kFloat64)); }), "Mismatch in shape");
}

TEST(Autograd, BackwardOnATensorNotRequiringGradThrows) {
  Tensor x = tensor(std::vector<double>{1, 2}, kFloat64);
  EXPECT_CONTAINS(error_of([&] { x.sum().backward(); }), "does not require grad and does not have a grad_fn");
}

TEST(Autograd, ModifyingASavedTensorInPlaceIsDetected) {
  Tensor x = leaf({1, 2, 3});
  Tensor y = x * 2.0;   // MulBackward1, version 0
  Tensor z = y * y;     // saves y
  y.add_(1.0);          // version 1
  std::string msg = error_of([&] { z.sum().backward(); });
  EXPECT_CONTAINS(msg, "one of the variables needed for gradient computation has been modified by an inplace operation");
  EXPECT_CONTAINS(msg, "[torch.DoubleTensor [3]]");
  EXPECT_CONTAINS(msg, "is at version 1; expected version 0 instead");
  EXPECT_CONTAINS(msg, "output 0 of MulBackward1");
}

TEST(Autograd, ModifyingASavedOutputInPlaceIsDetected) {
  Tensor x = leaf({0.5, 1.0});
  Tensor y = x.exp();  // ExpBackward0 saves its output
  y.mul_(2.0);
  y.mul_(2.0);
  std::string msg = error_of([&] { y.sum().backward(); });
  EXPECT_CONTAINS(msg, "modified by an inplace operation");
  EXPECT_CONTAINS(msg, "is at version 2; expected version 0 instead");
  EXPECT_CONTAINS(msg, "ExpBackward0");
}

TEST(Autograd, InPlaceOnALeafRequiringGradThrows) {
  Tensor x = leaf({1, 2});
  EXPECT_CONTAINS(error_of([&] { x.add_(1.0); }), "a leaf Variable that requires grad is being used in an in-place operation");
  EXPECT_THROW(x.mul_(2.0), std::runtime_error);
  EXPECT_THROW(x.zero_(), std::runtime_error);
  EXPECT_THROW(x.slice(0, 0, 1).fill_(3.0), std::runtime_error);  // a view of the leaf
  EXPECT_EQ(vals(x), (std::vector<double>{1, 2}));
  {
    NoGradGuard ng;  // allowed without grad mode (optimizer updates)
    x.add_(1.0);
  }
  EXPECT_EQ(vals(x), (std::vector<double>{2, 3}));
  EXPECT_TRUE(x.is_leaf());
  EXPECT_TRUE(x.requires_grad());
}

TEST(Autograd, InPlaceOnAViewOfANonLeafUsesCopySlices) {
  Tensor x = leaf({1, 2, 3, 4, 5});
  Tensor y = x * 1.0;
  y.slice(0, 0, 2).mul_(3.0);
  EXPECT_EQ(vals(y), (std::vector<double>{3, 6, 3, 4, 5}));
  ASSERT_TRUE(y.grad_fn());
  EXPECT_EQ(y.grad_fn()->name(), "CopySlices");
  y.sum().backward();
  EXPECT_EQ(vals(x.grad()), (std::vector<double>{3, 3, 1, 1, 1}));
}

TEST(Autograd, InPlaceOnAViewWithATensorOperand) {
  Tensor x = leaf({1, 2, 3, 4});
  Tensor w = leaf({10, 20});
  Tensor y = x * 1.0;
  Tensor v = y.slice(0, 1, 3);
  v.mul_(w);  // y = [1, 20, 60, 4]
  EXPECT_EQ(vals(y), (std::vector<double>{1, 20, 60, 4}));
  (y * y).sum().backward();
  // d/dx: 2*y * (w where covered, else 1); d/dw: 2*y[1:3] * x[1:3]
  EXPECT_EQ(vals(x.grad()), (std::vector<double>{2, 400, 2400, 8}));
  EXPECT_EQ(vals(w.grad()), (std::vector<double>{80, 360}));
}

TEST(Autograd, NoGradGuardStopsRecordingAndNests) {
  Tensor x = leaf({1, 2});
  EXPECT_TRUE(autograd::GradMode::is_enabled());
  {
    NoGradGuard a;
    EXPECT_FALSE(autograd::GradMode::is_enabled());
    Tensor y = x * 2.0;
    EXPECT_FALSE(y.requires_grad());
    EXPECT_FALSE(y.grad_fn());
    {
      NoGradGuard b;
      EXPECT_FALSE((x + 1.0).requires_grad());
      {
        EnableGradGuard e;
        EXPECT_TRUE(autograd::GradMode::is_enabled());
        EXPECT_TRUE((x + 1.0).requires_grad());
      }
      EXPECT_FALSE(autograd::GradMode::is_enabled());
    }
    EXPECT_FALSE(autograd::GradMode::is_enabled());  // the inner guard restored "off", not "on"
  }
  EXPECT_TRUE(autograd::GradMode::is_enabled());
  EXPECT_TRUE((x * 2.0).requires_grad());
}

TEST(Autograd, RequiresGradFalseOnANonLeafThrows) {
  Tensor x = leaf({1, 2});
  Tensor y = x * 2.0;
  EXPECT_CONTAINS(error_of([&] { y.requires_grad_(false); }), "you can only change requires_grad flags of leaf variables");
  EXPECT_NO_THROW(y.requires_grad_(true));
  // integer tensors cannot require grad
  EXPECT_CONTAINS(error_of([] { tensor({1, 2}).requires_grad_(true); }), "floating point");
  // a leaf can switch it off
  x.requires_grad_(false);
  EXPECT_FALSE(x.requires_grad());
}

TEST(Autograd, DetachSharesStorageAndVersionCounter) {
  Tensor x = leaf({1, 2, 3});
  Tensor y = x * 2.0;
  Tensor d = y.detach();
  EXPECT_FALSE(d.requires_grad());
  EXPECT_TRUE(d.is_leaf());
  EXPECT_EQ(d.data_ptr(), y.data_ptr());
  uint32_t v0 = y._version();
  d.add_(1.0);
  EXPECT_EQ(y._version(), v0 + 1);
  EXPECT_EQ(d._version(), y._version());
  EXPECT_EQ(vals(y), (std::vector<double>{3, 5, 7}));
  // detach_ turns a non-leaf into a leaf without grad
  Tensor z = x * 3.0;
  z.detach_();
  EXPECT_FALSE(z.requires_grad());
  EXPECT_TRUE(z.is_leaf());
}

TEST(Autograd, HookOnANonLeafReplacesTheGradientAndCanBeRemoved) {
  Tensor x = leaf({1, 2});
  Tensor y = x * 2.0;
  std::vector<double> seen;
  int64_t id = y.register_hook([&](const Tensor& g) {
    seen = vals(g);
    return g * 10.0;
  });
  y.sum().backward(Tensor(), true);
  EXPECT_EQ(seen, (std::vector<double>{1, 1}));
  EXPECT_EQ(vals(x.grad()), (std::vector<double>{20, 20}));
  y.remove_hook(id);
  x.set_grad(Tensor());
  y.sum().backward();
  EXPECT_EQ(vals(x.grad()), (std::vector<double>{2, 2}));
}

TEST(Autograd, HookOnALeaf) {
  Tensor x = leaf({1, 2});
  int calls = 0;
  x.register_hook([&](const Tensor& g) {
    ++calls;
    return g * 3.0;
  });
  int64_t observe = x.register_hook([&](const Tensor& g) {
    EXPECT_EQ(vals(g), (std::vector<double>{6, 12}));  // sees the first hook's result
    return Tensor();                                     // undefined: keep the gradient
  });
  (x * x).sum().backward();
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(vals(x.grad()), (std::vector<double>{6, 12}));
  x.remove_hook(observe);
  // hooks on tensors that do not require grad are refused
  EXPECT_THROW(tensor(std::vector<double>{1}, kFloat64).register_hook([](const Tensor& g) { return g; }), std::runtime_error);
}

TEST(Autograd, PostAccumulateGradHookSeesTheAccumulatedGradInOrder) {
  Tensor x = leaf({1, 2});
  std::vector<std::string> log;
  x.register_post_accumulate_grad_hook([&](const Tensor& t) {
    auto g = vals(t.grad());
    log.push_back("first " + std::to_string(static_cast<int>(g[0])) + "," + std::to_string(static_cast<int>(g[1])));
  });
  int64_t id2 = x.register_post_accumulate_grad_hook([&](const Tensor& t) {
    log.push_back("second " + std::to_string(static_cast<int>(vals(t.grad())[1])));
  });
  (x * 2.0).sum().backward();
  (x * x).sum().backward();
  EXPECT_EQ(log, (std::vector<std::string>{"first 2,2", "second 2", "first 4,6", "second 6"}));
  x.remove_post_accumulate_grad_hook(id2);
  (x * 1.0).sum().backward();
  EXPECT_EQ(log.size(), 5u);
  EXPECT_EQ(log.back(), "first 5,7");
  // only on leaves
  EXPECT_THROW((x * 2.0).register_post_accumulate_grad_hook([](const Tensor&) {}), std::runtime_error);
}

TEST(Autograd, RetainGradOnANonLeaf) {
  Tensor x = leaf({1, 2});
  Tensor y = x * 3.0;
  Tensor w = x * 2.0;
  y.retain_grad();
  EXPECT_TRUE(y.retains_grad());
  EXPECT_FALSE(w.retains_grad());
  (y * y + w).sum().backward();
  ASSERT_TRUE(y.grad().defined());
  EXPECT_EQ(vals(y.grad()), (std::vector<double>{6, 12}));
  EXPECT_FALSE(w.grad().defined());
  EXPECT_EQ(vals(x.grad()), (std::vector<double>{20, 38}));
}

TEST(Autograd, GradWithAllowUnused) {
  Tensor a = leaf({1, 2});
  Tensor b = leaf({3, 4});
  Tensor unused = leaf({5});
  Tensor z = (a * b).sum();
  EXPECT_CONTAINS(error_of([&] { autograd::grad({z}, {a, unused}, {}, true); }),
                  "appears to not have been used in the graph");
  auto g = autograd::grad({z}, {a, b, unused}, {}, true, false, true);
  ASSERT_EQ(g.size(), 3u);
  EXPECT_EQ(vals(g[0]), (std::vector<double>{3, 4}));
  EXPECT_EQ(vals(g[1]), (std::vector<double>{1, 2}));
  EXPECT_FALSE(g[2].defined());
  // grad() does not touch .grad
  EXPECT_FALSE(a.grad().defined());
  EXPECT_FALSE(b.grad().defined());
  // with respect to a non-leaf
  Tensor m = a * 2.0;
  Tensor s = (m * m).sum();
  auto gm = autograd::grad({s}, {m});
  EXPECT_EQ(vals(gm[0]), (std::vector<double>{4, 8}));
}

TEST(Autograd, CreateGraphGivesSecondDerivatives) {
  Tensor x = leaf({1, 2});
  Tensor y = (x * x * x).sum();
  auto g = autograd::grad({y}, {x}, {}, std::nullopt, /*create_graph=*/true);
  EXPECT_EQ(vals(g[0]), (std::vector<double>{3, 12}));  // 3x^2
  ASSERT_TRUE(g[0].requires_grad());
  auto g2 = autograd::grad({g[0].sum()}, {x});
  EXPECT_EQ(vals(g2[0]), (std::vector<double>{6, 12}));  // 6x

  // through backward(create_graph=true): .grad carries a graph
  Tensor p = leaf({2});
  Tensor q = pow(p, 3.0);
  q.sum().backward(Tensor(), std::nullopt, true);
  ASSERT_TRUE(p.grad().requires_grad());
  EXPECT_DOUBLE_EQ(p.grad().item<double>(), 12.0);
  Tensor first = p.grad();
  p.set_grad(Tensor());
  first.sum().backward();
  EXPECT_DOUBLE_EQ(p.grad().item<double>(), 12.0);  // 6p
}

TEST(Autograd, BackwardWithInputsAccumulatesOnlyIntoThem) {
  Tensor a = leaf({1, 2});
  Tensor b = leaf({3, 4});
  Tensor z = (a * b).sum();
  z.backward(Tensor(), std::nullopt, false, {a});
  ASSERT_TRUE(a.grad().defined());
  EXPECT_EQ(vals(a.grad()), (std::vector<double>{3, 4}));
  EXPECT_FALSE(b.grad().defined());
}

TEST(Autograd, NodePreAndPostHooks) {
  Tensor x = leaf({1, 2});
  Tensor y = x * 2.0;
  auto fn = y.grad_fn();
  ASSERT_TRUE(fn);
  std::vector<double> pre_seen, post_in, post_out;
  fn->add_pre_hook([&](const variable_list& grads) {
    pre_seen = vals(grads[0]);
    return variable_list{grads[0] * 2.0};
  });
  int64_t post = fn->add_post_hook([&](const variable_list& grad_inputs, const variable_list& grad_outputs) {
    post_in = vals(grad_inputs[0]);
    post_out = vals(grad_outputs[0]);
    return variable_list{};
  });
  y.sum().backward(Tensor(), true);
  EXPECT_EQ(pre_seen, (std::vector<double>{1, 1}));
  EXPECT_EQ(post_out, (std::vector<double>{2, 2}));  // the gradient the node received (after the pre-hook)
  EXPECT_EQ(post_in, (std::vector<double>{4, 4}));   // what it produced for x
  EXPECT_EQ(vals(x.grad()), (std::vector<double>{4, 4}));
  // a post hook may replace the outputs
  fn->remove_hook(post);
  fn->add_post_hook([](const variable_list& gi, const variable_list&) { return variable_list{gi[0] * 0.0}; });
  x.set_grad(Tensor());
  y.sum().backward();
  EXPECT_EQ(vals(x.grad()), (std::vector<double>{0, 0}));
}

TEST(Autograd, DiamondGraphRunsEachNodeOnceWithSummedGradients) {
  Tensor x = leaf({1, 2});
  Tensor a = x * 2.0;
  Tensor b = x * 3.0;
  Tensor c = a + b;
  Tensor d = c * c;
  std::vector<std::string> order;
  int acc_calls = 0;
  for (auto [t, name] : {std::pair<Tensor, const char*>{a, "a"}, {b, "b"}, {c, "c"}, {d, "d"}}) {
    std::string n = name;
    t.grad_fn()->add_pre_hook([&order, n](const variable_list&) {
      order.push_back(n);
      return variable_list{};
    });
  }
  x.register_post_accumulate_grad_hook([&](const Tensor&) { ++acc_calls; });
  d.sum().backward();
  ASSERT_EQ(order.size(), 4u);
  EXPECT_EQ(order[0], "d");
  EXPECT_EQ(order[1], "c");
  // a and b both after c, each once
  EXPECT_TRUE((order[2] == "a" && order[3] == "b") || (order[2] == "b" && order[3] == "a"));
  EXPECT_EQ(acc_calls, 1);  // x's gradient is summed before it is accumulated
  // d/dx (5x)^2 = 50x
  EXPECT_EQ(vals(x.grad()), (std::vector<double>{50, 100}));
}

TEST(Autograd, GradFnNames) {
  Tensor x = leaf({1, 2});
  Tensor y = leaf({3, 4});
  EXPECT_FALSE(x.grad_fn());
  EXPECT_EQ((x * y).grad_fn()->name(), "MulBackward0");
  EXPECT_EQ((x + y).grad_fn()->name(), "AddBackward0");
  EXPECT_EQ((x - y).grad_fn()->name(), "SubBackward0");
  EXPECT_EQ((x / y).grad_fn()->name(), "DivBackward0");
  EXPECT_EQ(x.sum().grad_fn()->name(), "SumBackward0");
  EXPECT_EQ(x.sum({0}).grad_fn()->name(), "SumBackward1");
  EXPECT_EQ(x.exp().grad_fn()->name(), "ExpBackward0");
  EXPECT_EQ(x.neg().grad_fn()->name(), "NegBackward0");
  EXPECT_EQ(x.view({2, 1}).t().grad_fn()->name(), "TransposeBackward0");
  EXPECT_EQ(x.clone().grad_fn()->name(), "CloneBackward0");
  EXPECT_EQ(mm(x.view({1, 2}), y.view({2, 1})).grad_fn()->name(), "MmBackward0");
  EXPECT_EQ(x.to(kFloat32).grad_fn()->name(), "ToCopyBackward0");
  // the in-place node becomes the tensor's grad_fn
  Tensor z = x * 1.0;
  z.mul_(y);
  EXPECT_EQ(z.grad_fn()->name(), "MulBackward0");
  EXPECT_EQ(z.grad_fn()->next_edges.size(), 2u);
}

TEST(Autograd, OneLeafHasOneAccumulatorWhenThreadsRecordAtOnce) {
  // threads recording ops on the same fresh leaf at once all point at one AccumulateGrad (its lazy creation
  // raced: ThreadSanitizer saw it under RemoteModule's async forwards), so every gradient lands in .grad
  constexpr int kThreads = 4, kRounds = 200;
  for (int round = 0; round < kRounds; ++round) {
    Tensor x = tensor({1.0, 2.0}).requires_grad_(true);
    std::vector<Tensor> ys(kThreads);
    std::vector<std::thread> threads;
    for (int i = 0; i < kThreads; ++i) threads.emplace_back([&, i] { ys[i] = x * 1.0; });
    for (auto& t : threads) t.join();
    for (int i = 1; i < kThreads; ++i)
      ASSERT_EQ(ys[i].grad_fn()->next_edges[0].fn, ys[0].grad_fn()->next_edges[0].fn) << "round " << round;
    Tensor total = ys[0];
    for (int i = 1; i < kThreads; ++i) total = total + ys[i];
    total.sum().backward();
    EXPECT_DOUBLE_EQ(x.grad().sum().item<double>(), 2.0 * kThreads);  // d(sum of kThreads copies)/dx = kThreads per element
  }
}

TEST(Autograd, GradientDtypeFollowsTheLeaf) {
  Tensor h = tensor({1.0, 2.0}, kFloat16).requires_grad_(true);
  (h * h).sum().backward();
  ASSERT_TRUE(h.grad().defined());
  EXPECT_EQ(h.grad().dtype(), kFloat16);
  EXPECT_EQ(vals(h.grad()), (std::vector<double>{2, 4}));

  // a float32 leaf used through a float64 computation receives a float32 gradient
  Tensor f = tensor({1.0f, 3.0f}).requires_grad_(true);
  (f.to(kFloat64) * 2.5).sum().backward();
  EXPECT_EQ(f.grad().dtype(), kFloat32);
  EXPECT_EQ(vals(f.grad()), (std::vector<double>{2.5, 2.5}));

  // mixed dtypes in one op: each side gets its own dtype back
  Tensor a = tensor({1.0f, 2.0f}).requires_grad_(true);
  Tensor b = tensor(std::vector<double>{3.0, 4.0}, kFloat64).requires_grad_(true);
  (a * b).sum().backward();
  EXPECT_EQ(a.grad().dtype(), kFloat32);
  EXPECT_EQ(b.grad().dtype(), kFloat64);
  EXPECT_EQ(vals(a.grad()), (std::vector<double>{3, 4}));
}

TEST(Autograd, DeepChainDoesNotOverflowTheStack) {
  constexpr int kDepth = 10000;
  Tensor x = leaf({1.0, 2.0});
  {
    Tensor y = x;
    for (int i = 0; i < kDepth; ++i) y = y * 1.0 + 0.0;  // 2 nodes per step
    y.sum().backward();
    EXPECT_EQ(vals(x.grad()), (std::vector<double>{1, 1}));
    // autograd::grad on the same depth (capture mode walks the graph too)
    Tensor z = x;
    for (int i = 0; i < kDepth; ++i) z = z * 1.0;
    auto g = autograd::grad({z.sum()}, {x});
    EXPECT_EQ(vals(g[0]), (std::vector<double>{1, 1}));
  }  // the graphs of y and z are destroyed here
  // a retained graph destroyed without any backward
  {
    Tensor y = x;
    for (int i = 0; i < kDepth; ++i) y = y.exp().log();
  }
  SUCCEED();
}

// ---- backward_targets_first, output_wanted, queue_callback

// A two-layer perceptron on a leaf input x (float64, same values for the same seed).
struct Perceptron {
  Tensor x, w1, b1, w2, b2;
  Perceptron() {
    manual_seed(7);
    auto opt = TensorOptions().dtype(kFloat64);
    x = randn({4, 3}, opt).requires_grad_(true);
    w1 = randn({5, 3}, opt).requires_grad_(true);
    b1 = randn({5}, opt).requires_grad_(true);
    w2 = randn({2, 5}, opt).requires_grad_(true);
    b2 = randn({2}, opt).requires_grad_(true);
  }
  Tensor loss() const { return linear(relu(linear(x, w1, b1)), w2, b2).pow(2).sum(); }
  std::vector<Tensor> weights() const { return {w1, b1, w2, b2}; }
};

TEST(Autograd, TargetsFirstFinishesTheTargetsGradientBeforeAnyWeights) {
  Perceptron plain, early;
  plain.loss().backward();
  Tensor l = early.loss();
  int ready = 0;
  std::vector<int> posted;  // post-accumulate hooks of the weights, by index, in the order they fired
  for (int i = 0; i < 4; ++i)
    early.weights()[i].register_post_accumulate_grad_hook([&posted, &ready, i](const Tensor&) {
      EXPECT_EQ(ready, 1) << "weight " << i << " accumulated before on_ready";
      posted.push_back(i);
    });
  autograd::backward_targets_first({l}, {}, /*retain_graph=*/false, {early.x}, [&] {
    ++ready;
    ASSERT_TRUE(early.x.grad().defined());
    EXPECT_TRUE(equal(early.x.grad(), plain.x.grad()));
    for (const auto& w : early.weights()) EXPECT_FALSE(w.grad().defined());
  });
  EXPECT_EQ(ready, 1);
  EXPECT_EQ(posted.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(early.weights()[i].grad().defined()) << i;
    EXPECT_TRUE(equal(early.weights()[i].grad(), plain.weights()[i].grad())) << i;
  }
  // without retain_graph the whole graph is freed, the nodes run in two parts included
  EXPECT_CONTAINS(error_of([&] { l.backward(); }), "Trying to backward through the graph a second time");
}

TEST(Autograd, TargetsFirstSplitsMatmulsAndConvolutions) {
  auto opt = TensorOptions().dtype(kFloat64);
  struct Case {
    const char* name;
    std::vector<int64_t> x_sizes, w_sizes;
    std::function<Tensor(const Tensor&, const Tensor&, const Tensor&)> f;  // (x, w, b)
  };
  std::vector<Case> cases = {
      {"mm", {3, 4}, {4, 2}, [](const Tensor& x, const Tensor& w, const Tensor&) { return mm(x, w); }},
      {"bmm", {2, 3, 4}, {2, 4, 5}, [](const Tensor& x, const Tensor& w, const Tensor&) { return bmm(x, w); }},
      {"conv2d", {2, 3, 6, 6}, {4, 3, 3, 3},
       [](const Tensor& x, const Tensor& w, const Tensor& b) { return conv2d(x, w, b, {1, 1}, {1, 1}); }},
      {"conv_transpose2d", {2, 4, 5, 5}, {4, 3, 3, 3},
       [](const Tensor& x, const Tensor& w, const Tensor& b) { return conv_transpose2d(x, w, b, {2, 2}); }},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    manual_seed(5);
    Tensor x = randn(c.x_sizes, opt).requires_grad_(true);
    Tensor w = randn(c.w_sizes, opt).requires_grad_(true);
    Tensor b = randn({c.name == std::string("conv_transpose2d") ? c.w_sizes[1] : c.w_sizes[0]}, opt).requires_grad_(true);
    Tensor x2 = x.detach().clone().requires_grad_(true), w2 = w.detach().clone().requires_grad_(true),
           b2 = b.detach().clone().requires_grad_(true);
    c.f(x, w, b).pow(2).sum().backward();
    bool ready = false;
    autograd::backward_targets_first({c.f(x2, w2, b2).pow(2).sum()}, {}, false, {x2}, [&] {
      ready = true;
      ASSERT_TRUE(x2.grad().defined());
      EXPECT_TRUE(equal(x2.grad(), x.grad()));
      EXPECT_FALSE(w2.grad().defined());
      EXPECT_FALSE(b2.grad().defined());
    });
    EXPECT_TRUE(ready);
    EXPECT_TRUE(equal(w2.grad(), w.grad()));
    if (c.name == std::string("conv2d") || c.name == std::string("conv_transpose2d")) {
      EXPECT_TRUE(equal(b2.grad(), b.grad()));
    }
  }
}

TEST(Autograd, TargetsFirstAppliesANodeTwiceOnlyWhenItComputesWantedOutputs) {
  for (bool wanted : {true, false}) {
    SCOPED_TRACE(wanted ? "computes wanted outputs" : "computes all");
    Tensor x = leaf({1, 2}), w = leaf({3, 4});
    Tensor out = (x * 1.0) + (w * 1.0);  // stand-in forward; the node below replaces its backward
    std::vector<std::string> calls;       // which outputs each application was asked for
    Tensor y = out.detach();
    auto node = autograd::record(
        "Both", {x, w}, y,
        [&calls](const variable_list& g) {
          std::string asked = std::string(autograd::output_wanted(0) ? "x" : "") + (autograd::output_wanted(1) ? "w" : "");
          calls.push_back(asked);
          return variable_list{g[0] * 2.0, g[0] * 3.0};
        },
        /*saves=*/false);
    ASSERT_TRUE(node);
    node->computes_wanted_outputs = wanted;
    bool ready = false;
    autograd::backward_targets_first({y.sum()}, {}, false, {x}, [&] {
      ready = true;
      EXPECT_EQ(vals(x.grad()), (std::vector<double>{2, 2}));
      EXPECT_FALSE(w.grad().defined());  // held back either way
    });
    EXPECT_TRUE(ready);
    EXPECT_EQ(vals(w.grad()), (std::vector<double>{3, 3}));
    if (wanted) EXPECT_EQ(calls, (std::vector<std::string>{"x", "w"}));
    else EXPECT_EQ(calls, (std::vector<std::string>{"xw"}));
  }
  EXPECT_TRUE(autograd::output_wanted(0));  // outside the engine: everything
  EXPECT_TRUE(autograd::output_wanted(7));
}

TEST(Autograd, TargetsFirstWithoutTargetsInTheGraphStillRunsEverything) {
  Perceptron plain, early;
  plain.loss().backward();
  Tensor unrelated = leaf({1});
  bool ready = false;
  autograd::backward_targets_first({early.loss()}, {}, false, {unrelated}, [&] { ready = true; });
  EXPECT_TRUE(ready);
  EXPECT_FALSE(unrelated.grad().defined());
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(equal(early.weights()[i].grad(), plain.weights()[i].grad())) << i;
  EXPECT_TRUE(equal(early.x.grad(), plain.x.grad()));
  EXPECT_THROW(autograd::backward_targets_first({early.loss()}, {}, false, {leaf({1}).detach()}, [] {}),
               std::invalid_argument);
}

TEST(Autograd, QueueCallbackRunsAfterTheWholeGraphBeforeBackwardReturns) {
  Tensor x = leaf({1, 2});
  std::vector<std::string> log;
  Tensor y = x * 2.0;
  y.register_hook([&](const Tensor&) {
    log.push_back("hook");
    autograd::queue_callback([&] {
      log.push_back(x.grad().defined() ? "callback after x.grad" : "callback before x.grad");
      autograd::queue_callback([&] { log.push_back("queued by a callback"); });
    });
    return Tensor();
  });
  y.sum().backward();
  log.push_back("backward returned");
  EXPECT_EQ(log, (std::vector<std::string>{"hook", "callback after x.grad", "queued by a callback", "backward returned"}));
  // grad() runs them too; outside a pass it is PyTorch's error
  Tensor z = x * 3.0;
  int n = 0;
  z.register_hook([&](const Tensor&) {
    autograd::queue_callback([&] { ++n; });
    return Tensor();
  });
  autograd::grad({z.sum()}, {x});
  EXPECT_EQ(n, 1);
  EXPECT_EQ(error_of([] { autograd::queue_callback([] {}); }), "Final callbacks can only be installed during backward pass.");
  // a callback's exception ends the pass with it
  Tensor v = x * 4.0;
  v.register_hook([&](const Tensor&) {
    autograd::queue_callback([] { throw std::runtime_error("callback failed"); });
    return Tensor();
  });
  EXPECT_EQ(error_of([&] { v.sum().backward(); }), "callback failed");
  EXPECT_EQ(error_of([] { autograd::queue_callback([] {}); }), "Final callbacks can only be installed during backward pass.");
}

}  // namespace
