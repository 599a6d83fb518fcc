// Models and registered functions shared by the RemoteModule tests (one process and mpirun): a tree whose
// subtrees are hosted on other ranks must give what the same tree gives locally.
#pragma once

#include <atomic>
#include <chrono>
#include <cmath>
#include <string>
#include <thread>

#include <troupe/actors/actors.h>
#include <troupe/nn/nn.h>
#include <troupe/nn/registry.h>
#include <troupe/tensor/ops.h>

namespace troupe::actors::testing {

/// fc2(tanh(fc1(x))): 4 -> 6 -> 4, float64. Default-constructible, so that a move across processes can
/// rebuild it by its class name.
struct BlockImpl : nn::Module {
  nn::Linear fc1{nullptr}, fc2{nullptr};
  BlockImpl() {
    fc1 = register_module("fc1", nn::Linear(4, 6));
    fc2 = register_module("fc2", nn::Linear(6, 4));
    to(kFloat64);
  }
  Tensor forward(const Tensor& x) override { return fc2(tanh(fc1(x))); }
};
TROUPE_MODULE(Block);

/// A Linear(4, 4) with a buffer, default-constructible.
struct MidImpl : nn::Module {
  nn::Linear lin{nullptr};
  MidImpl() {
    lin = register_module("lin", nn::Linear(4, 4));
    register_buffer("scale", full({1}, 0.5, kFloat64));
    to(kFloat64);
  }
  Tensor forward(const Tensor& x) override { return lin(x) * get_buffer("scale"); }
};
TROUPE_MODULE(Mid);

/// enc -> mid with a skip connection around it -> dec called twice: with enc, mid, dec on different ranks
/// the skip crosses ranks and dec's subtree is called twice in one graph.
struct NetImpl : nn::Module {
  Block enc;
  Mid mid;
  Block dec;
  nn::Linear head{nullptr};
  NetImpl() {
    register_module("enc", enc.ptr());
    register_module("mid", mid.ptr());
    register_module("dec", dec.ptr());
    head = register_module("head", nn::Linear(4, 2));
    head->to(kFloat64);
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = enc(x);
    Tensor z = mid(h) + h;
    return head(dec(z) + dec(h).sin());
  }
};
TROUPE_MODULE(Net);

/// enc -> mid with a skip connection around it -> dec -> head, each subtree called once per forward (a
/// replicated or sharded subtree runs once per backward, as under DDP).
struct GroupNetImpl : nn::Module {
  Block enc;
  Mid mid;
  Block dec;
  nn::Linear head{nullptr};
  GroupNetImpl() {
    register_module("enc", enc.ptr());
    register_module("mid", mid.ptr());
    register_module("dec", dec.ptr());
    head = register_module("head", nn::Linear(4, 2));
    head->to(kFloat64);
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = enc(x);
    Tensor z = mid(h) + h;
    return head(dec(z));
  }
};
TROUPE_MODULE(GroupNet);

/// Counts forward-hook calls in this process (the host's process runs the hook).
inline std::atomic<int>& forward_hook_calls() {
  static std::atomic<int> n{0};
  return n;
}
inline std::atomic<int>& backward_hook_calls() {
  static std::atomic<int> n{0};
  return n;
}

inline std::atomic<int>& late_grad_failures() {
  static std::atomic<int> n{0};
  return n;
}

/// Registers the modules and functions on every rank (idempotent).
inline void register_remote_models() {
  static const bool done = [] {
    register_module<Block>("Block");
    register_module<Mid>("Mid");
    register_module<Net>("Net");
    register_module<nn::Linear, int64_t, int64_t>("Linear");
    nn::registry::add_apply_fn("test.fill_half", [](nn::Module& m) {
      NoGradGuard g;
      for (auto p : m.parameters(false)) p.fill_(0.5);
    });
    nn::registry::add_forward_hook("test.double_output", [](nn::Module&, const nn::Args&, const nn::Value& out) {
      forward_hook_calls()++;
      return std::optional<nn::Value>(std::in_place, out.tensor() * 2.0);
    });
    // every parameter's gradient hook sleeps 100 ms: a host that is slow to finish its weights
    nn::registry::add_apply_fn("test.slow_grads", [](nn::Module& m) {
      for (auto p : m.parameters(false))
        p.register_post_accumulate_grad_hook([](const Tensor&) { std::this_thread::sleep_for(std::chrono::milliseconds(100)); });
    });
    // the first parameter's gradient hook fails once (late_grad_failures() counts down)
    nn::registry::add_apply_fn("test.fail_grads_once", [](nn::Module& m) {
      auto ps = m.parameters(false);
      if (ps.empty()) return;
      late_grad_failures() = 1;
      ps.front().register_post_accumulate_grad_hook([](const Tensor&) {
        if (late_grad_failures().fetch_sub(1) > 0) throw std::runtime_error("the weight's hook failed");
      });
    });
    nn::registry::add_backward_hook("test.count_backward",
                                    [](nn::Module&, const std::vector<Tensor>&, const std::vector<Tensor>&) {
                                      backward_hook_calls()++;
                                      return std::optional<std::vector<Tensor>>();
                                    });
    return true;
  }();
  (void)done;
}

/// Two identical nets (same seed); the test place()s `placed`.
inline std::pair<Net, Net> twin_nets() {
  manual_seed(7);
  Net local;
  manual_seed(7);
  Net placed;
  return {local, placed};
}

/// Largest |a - b| over two tensors of the same shape.
inline double max_diff(const Tensor& a, const Tensor& b) {
  return (a.to(kFloat64) - b.to(kFloat64)).abs().max().item<double>();
}

}  // namespace troupe::actors::testing
