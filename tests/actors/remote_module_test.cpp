// RemoteModule in one process (ranks as threads, --ranks N): a tree with subtrees hosted on other ranks
// gives the same outputs, gradients, state_dict and errors as the same tree run locally; every Module
// method reaches the host; distributed autograd, hooks and apply by registered name, DistributedOptimizer,
// failures.
#include <gtest/gtest.h>

#include <troupe/optim/sgd.h>
#include <troupe/tensor/backend.h>

#include "actors_helpers.h"
#include "gpu_cases.h"
#include "remote_models.h"

using namespace troupe;
using namespace troupe::actors;
using namespace troupe::actors::testing;

namespace {

Tensor input(bool requires_grad = true) {
  manual_seed(11);
  return randn({5, 4}, kFloat64).requires_grad_(requires_grad);
}

void expect_same_tree(Net& local, Net& placed) {
  auto a = local->state_dict();
  auto b = placed->state_dict();
  ASSERT_EQ(a.keys(), b.keys());
  for (const auto& [k, t] : a) EXPECT_LT(max_diff(t, b[k]), 1e-12) << k;
}

std::string what_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(RemoteModule, HostedLinearFromAFactory) {
  register_remote_models();
  on_ranks(2, [](launch::Context& ctx) {
    if (ctx.rank == 0) {
      auto& rt = ctx.actors();
      auto lin = host(rt, 1, "Linear", {4, 3});
      EXPECT_TRUE(lin->is_remote());
      EXPECT_EQ(lin->host_rank(), 1);
      EXPECT_EQ(lin->name(), "Linear");
      EXPECT_EQ(lin->repr(), "[rank 1] Linear(in_features=4, out_features=3, bias=True)");
      auto params = lin->named_parameters();
      ASSERT_EQ(params.keys(), (std::vector<std::string>{"weight", "bias"}));
      Tensor x = randn({2, 4}).requires_grad_(true);
      Tensor y = (*lin)(x);
      Tensor expect = x.matmul(params["weight"].t()) + params["bias"];
      EXPECT_LT(max_diff(y, expect), 1e-6);
      EXPECT_EQ(y.grad_fn()->name(), "RemoteModuleBackward");
      y.sum().backward();
      // one process: the proxy's parameters are the host's tensors, with the gradient the host computed
      EXPECT_LT(max_diff(params["weight"].grad(), ones({3, 2}).matmul(x.detach())), 1e-6);
      EXPECT_LT(max_diff(params["bias"].grad(), full({3}, 2.0)), 1e-6);
      EXPECT_LT(max_diff(x.grad(), ones({2, 3}).matmul(params["weight"].detach())), 1e-6);
      // an unknown factory names the registered ones
      std::string e = what_of([&] { host(rt, 1, "Lineer", {4, 3}); });
      EXPECT_TRUE(contains(e, "no module factory 'Lineer'")) << e;
      EXPECT_TRUE(contains(e, "Linear")) << e;
    }
    ctx.world->barrier();
  });
}

TEST(RemoteModule, ThreeWaySplitMatchesTheLocalTree) {
  register_remote_models();
  on_ranks(3, [](launch::Context& ctx) {
    if (ctx.rank == 0) {
      auto [local, placed] = twin_nets();
      auto proxies = place(ctx.actors(), placed.ptr(), {{"enc", 1}, {"mid", 2}, {"dec", 1}});
      ASSERT_EQ(proxies.size(), 3u);
      EXPECT_EQ(proxies["mid"]->host_rank(), 2);
      EXPECT_TRUE(placed->children_dict()["enc"]->is_remote());

      Tensor x1 = input(), x2 = input();
      Tensor y1 = local->forward(x1);
      Tensor y2 = placed->forward(x2);  // enc/mid/dec members pass their calls to the proxies
      EXPECT_LT(max_diff(y1, y2), 1e-12);
      (y1 * y1).sum().backward();
      (y2 * y2).sum().backward();
      EXPECT_LT(max_diff(x1.grad(), x2.grad()), 1e-12);

      auto p1 = local->named_parameters();
      auto p2 = placed->named_parameters();
      ASSERT_EQ(p1.keys(), p2.keys());
      for (const auto& [k, p] : p1) {
        ASSERT_TRUE(p2[k].grad().defined()) << k;
        EXPECT_LT(max_diff(p.grad(), p2[k].grad()), 1e-12) << k;
      }
      EXPECT_EQ(local->named_buffers().keys(), placed->named_buffers().keys());
      EXPECT_EQ(local->named_modules().keys(), placed->named_modules().keys());
      expect_same_tree(local, placed);
      // paths cross the boundary
      EXPECT_LT(max_diff(placed->get_parameter("enc.fc1.weight"), local->get_parameter("enc.fc1.weight")), 1e-12);
      auto fc1 = placed->get_submodule("dec.fc1");
      EXPECT_TRUE(fc1->is_remote());
      EXPECT_EQ(fc1->name(), "Linear");
      EXPECT_EQ(fc1->named_parameters().keys(), (std::vector<std::string>{"weight", "bias"}));
      EXPECT_TRUE(contains(what_of([&] { placed->get_submodule("enc.fc9"); }), "Block has no attribute `fc9`"));
      // repr: the local tree's, with the hosted subtrees marked by rank
      std::string r = placed->repr();
      EXPECT_TRUE(contains(r, "(enc): [rank 1] Block(")) << r;
      EXPECT_TRUE(contains(r, "(mid): [rank 2] Mid(")) << r;
      EXPECT_TRUE(contains(r, "(fc1): Linear(in_features=4, out_features=6, bias=True)")) << r;
    }
    ctx.world->barrier();
  });
}

TEST(RemoteModule, StateDictLoadAndItsErrorsAsTheLocalTree) {
  register_remote_models();
  on_ranks(2, [](launch::Context& ctx) {
    if (ctx.rank == 0) {
      auto [local, placed] = twin_nets();
      place(ctx.actors(), placed.ptr(), {{"enc", 1}, {"dec", 1}});
      manual_seed(99);
      Net other;
      auto sd = other->state_dict();
      placed->load_state_dict(sd);
      local->load_state_dict(sd);
      expect_same_tree(local, placed);
      // missing and unexpected keys, size mismatches: the same text
      auto bad = sd;
      bad.erase("dec.fc2.bias");
      bad.insert_or_assign("enc.fc3.weight", zeros({1}));
      bad.insert_or_assign("enc.fc1.bias", zeros({7}, kFloat64));
      std::string e1 = what_of([&] { local->load_state_dict(bad); });
      std::string e2 = what_of([&] { placed->load_state_dict(bad); });
      EXPECT_FALSE(e1.empty());
      EXPECT_EQ(e1, e2);
      expect_same_tree(local, placed);  // nothing was loaded
      bad.erase("enc.fc1.bias");
      auto keys_local = local->check_state_dict(bad).keys;
      auto keys_placed = placed->check_state_dict(bad).keys;
      EXPECT_EQ(keys_local.missing_keys, keys_placed.missing_keys);
      EXPECT_EQ(keys_local.unexpected_keys, keys_placed.unexpected_keys);
    }
    ctx.world->barrier();
  });
}

TEST(RemoteModule, TrainEvalToZeroGradRequiresGrad) {
  register_remote_models();
  on_ranks(2, [](launch::Context& ctx) {
    if (ctx.rank == 0) {
      auto [local, placed] = twin_nets();
      auto proxies = place(ctx.actors(), placed.ptr(), {{"enc", 1}});
      placed->eval();
      for (const auto& [k, m] : placed->named_modules()) EXPECT_FALSE(m->is_training()) << k;
      EXPECT_FALSE(placed->get_submodule("enc.fc2")->is_training());
      placed->train();
      EXPECT_TRUE(placed->get_submodule("enc.fc2")->is_training());

      placed->forward(input()).sum().backward();
      EXPECT_TRUE(placed->get_parameter("enc.fc1.weight").grad().defined());
      placed->zero_grad();
      for (const auto& [k, p] : placed->named_parameters()) EXPECT_FALSE(p.grad().defined()) << k;

      placed->requires_grad_(false);
      for (const auto& [k, p] : placed->named_parameters()) EXPECT_FALSE(p.requires_grad()) << k;
      EXPECT_FALSE(placed->forward(input(false)).requires_grad());
      placed->requires_grad_(true);

      placed->to(kFloat32);
      for (const auto& [k, p] : placed->named_parameters()) EXPECT_EQ(p.dtype(), kFloat32) << k;
      EXPECT_EQ(placed->forward(input(false).to(kFloat32)).dtype(), kFloat32);
      placed->to(kFloat64);
      EXPECT_EQ(placed->get_parameter("enc.fc2.bias").dtype(), kFloat64);
      EXPECT_TRUE(contains(what_of([&] { proxies["enc"]->to(kInt64); }), "only accepts floating point"));
    }
    ctx.world->barrier();
  });
}

TEST(RemoteModule, ApplyAndHooksByRegisteredName) {
  register_remote_models();
  on_ranks(2, [](launch::Context& ctx) {
    if (ctx.rank == 0) {
      auto [local, placed] = twin_nets();
      place(ctx.actors(), placed.ptr(), {{"enc", 1}});
      // a callable cannot travel: refused before anything is applied
      auto before = placed->get_parameter("head.weight").clone();
      std::string e = what_of([&] { placed->apply([](nn::Module& m) { m.zero_grad(); }); });
      EXPECT_TRUE(contains(e, "`enc` is hosted by an actor on another rank")) << e;
      EXPECT_TRUE(contains(e, "add_apply_fn")) << e;
      EXPECT_LT(max_diff(before, placed->get_parameter("head.weight")), 0.0 + 1e-300);
      // by name: runs everywhere, the host included
      placed->apply("test.fill_half");
      local->apply("test.fill_half");
      expect_same_tree(local, placed);
      EXPECT_TRUE(contains(what_of([&] { placed->apply("test.nope"); }), "test.nope"));

      // a forward hook by name runs on the host and changes the output there
      Tensor y0 = placed->get_submodule("enc")->forward(input(false));
      auto enc = placed->get_submodule("enc");
      int calls = forward_hook_calls();
      auto h = enc->register_forward_hook("test.double_output");
      Tensor y1 = (*enc)(input(false));
      EXPECT_EQ(forward_hook_calls(), calls + 1);
      EXPECT_LT(max_diff(y1, y0 * 2.0), 1e-12);
      h.remove();
      Tensor y2 = (*enc)(input(false));
      EXPECT_LT(max_diff(y2, y0), 1e-12);
      // a closure hook cannot travel
      std::string eh = what_of([&] { enc->register_forward_hook([](nn::Module&, const nn::Args&, const nn::Value&) {}); });
      EXPECT_TRUE(contains(eh, "register the hook by name")) << eh;
      // a full backward hook by name fires on the host during the caller's backward
      int bcalls = backward_hook_calls();
      auto hb = enc->register_full_backward_hook("test.count_backward");
      placed->forward(input()).sum().backward();
      EXPECT_EQ(backward_hook_calls(), bcalls + 1);
      hb.remove();
    }
    ctx.world->barrier();
  });
}

// In one process tensors pass by handle and the host detaches only what needs it: an input that needs no
// grad is neither changed nor part of any graph afterwards, and the results are those of the local module.
TEST(RemoteModule, InputsThatNeedNoGradPassUnchanged) {
  register_remote_models();
  on_ranks(2, [](launch::Context& ctx) {
    if (ctx.rank == 0) {
      auto lin = host(ctx.actors(), 1, "Linear", {4, 3});
      auto params = lin->named_parameters();
      Tensor x = randn({2, 4});
      Tensor expect = x.matmul(params["weight"].detach().t()) + params["bias"].detach();
      {
        NoGradGuard g;
        Tensor y = (*lin)(x);
        EXPECT_FALSE(y.requires_grad());
        EXPECT_LT(max_diff(y, expect), 1e-6);
      }
      Tensor y = (*lin)(x);
      EXPECT_FALSE(x.requires_grad());
      EXPECT_TRUE(x.is_leaf());
      EXPECT_EQ(y.grad_fn()->name(), "RemoteModuleBackward");
      EXPECT_LT(max_diff(y, expect), 1e-6);
      y.sum().backward();
      EXPECT_FALSE(x.grad().defined());
      EXPECT_LT(max_diff(params["weight"].grad(), ones({3, 2}).matmul(x)), 1e-6);
      EXPECT_LT(max_diff(params["bias"].grad(), full({3}, 2.0)), 1e-6);
    }
    ctx.world->barrier();
  });
}

TEST(RemoteModule, NoGradRetainGraphAndBackwardTwice) {
  register_remote_models();
  on_ranks(2, [](launch::Context& ctx) {
    if (ctx.rank == 0) {
      auto [local, placed] = twin_nets();
      place(ctx.actors(), placed.ptr(), {{"enc", 1}, {"dec", 1}});
      {
        NoGradGuard g;
        Tensor y = placed->forward(input());
        EXPECT_FALSE(y.requires_grad());
      }
      Tensor y = placed->forward(input());
      Tensor loss = y.sum();
      loss.backward({}, /*retain_graph=*/true);
      Tensor g1 = placed->get_parameter("enc.fc1.weight").grad().clone();
      loss.backward();
      EXPECT_LT(max_diff(placed->get_parameter("enc.fc1.weight").grad(), g1 * 2.0), 1e-12);
      std::string e = what_of([&] { loss.backward(); });
      EXPECT_TRUE(contains(e, "Trying to backward through the graph a second time")) << e;
    }
    ctx.world->barrier();
  });
}

TEST(RemoteModule, ForwardAsyncRunsStagesAtOnce) {
  register_remote_models();
  on_ranks(3, [](launch::Context& ctx) {
    if (ctx.rank == 0) {
      auto a = host(ctx.actors(), 1, "Block");
      auto b = host(ctx.actors(), 2, "Block");
      Tensor x = input();
      auto fa = a->forward_async({x});
      auto fb = b->forward_async({x});
      Tensor ya = fa.get().tensor(), yb = fb.get().tensor();
      (ya.sum() + yb.sum()).backward();
      EXPECT_TRUE(a->get_parameter("fc1.weight").grad().defined());
      EXPECT_TRUE(b->get_parameter("fc1.weight").grad().defined());
      EXPECT_TRUE(x.grad().defined());
    }
    ctx.world->barrier();
  });
}

TEST(RemoteModule, DistributedOptimizerTrainsTheWholeTree) {
  register_remote_models();
  on_ranks(3, [](launch::Context& ctx) {
    if (ctx.rank == 0) {
      auto [local, placed] = twin_nets();
      place(ctx.actors(), placed.ptr(), {{"enc", 1}, {"mid", 2}, {"dec", 2}});
      optim::SGD sgd(local->parameters(), optim::SGDOptions(0.1).momentum(0.9));
      DistributedOptimizer dopt(placed.ptr(), optim::SGDOptions(0.1).momentum(0.9));
      EXPECT_EQ(dopt.num_hosts(), 3u);
      ASSERT_NE(dopt.local(), nullptr);
      for (int step = 0; step < 3; ++step) {
        sgd.zero_grad();
        dopt.zero_grad();
        local->forward(input()).pow(2).sum().backward();
        placed->forward(input()).pow(2).sum().backward();
        sgd.step();
        dopt.step();
      }
      expect_same_tree(local, placed);
    }
    ctx.world->barrier();
  });
}

TEST(RemoteModule, HostErrorsNameTheModuleAndAStoppedHostFails) {
  register_remote_models();
  on_ranks(2, [](launch::Context& ctx) {
    if (ctx.rank == 0) {
      auto blk = host(ctx.actors(), 1, "Block", {}, "blk");
      std::string e = what_of([&] { (*blk)(randn({2, 5}, kFloat64)); });
      EXPECT_TRUE(contains(e, "actor 'blk' (rank 1)")) << e;
      EXPECT_TRUE(contains(e, "module `<root>` (Block)")) << e;
      std::string e2 = what_of([&] { blk->get_submodule("fc1")->forward(randn({2, 5}, kFloat64)); });
      EXPECT_TRUE(contains(e2, "module `fc1` (Linear)")) << e2;
      blk->host_actor().stop();
      auto t0 = std::chrono::steady_clock::now();
      std::string e3 = what_of([&] { (*blk)(randn({2, 4}, kFloat64)); });
      EXPECT_FALSE(e3.empty());
      EXPECT_TRUE(contains(e3, "blk")) << e3;
      EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
    }
    ctx.world->barrier();
  });
}

// A tree placed on three ranks (one process) and moved to the GPU by to(): the hosts move their subtrees,
// forward and backward run on CUDA tensors through the proxies, and outputs, gradients and state_dict equal
// the local tree's on the GPU. Skips without a CUDA device.
TEST(RemoteModuleCuda, PlacedTreeOnTheGpuMatchesTheLocalTree) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  register_remote_models();
  on_ranks(3, [](launch::Context& ctx) {
    if (ctx.rank == 0) {
      const Device gpu(kCUDA, 0);
      auto [local, placed] = twin_nets();
      place(ctx.actors(), placed.ptr(), {{"enc", 1}, {"mid", 2}, {"dec", 1}});
      local->to(gpu);
      placed->to(gpu);  // reaches the hosted subtrees
      EXPECT_TRUE(placed->get_parameter("enc.fc1.weight").is_cuda());
      EXPECT_TRUE(placed->get_buffer("mid.scale").is_cuda());
      expect_same_forward_and_backward_on_gpu(*local, *placed, input().detach().to(gpu));
      // an SGD step on every host's parameters, then the trees still agree
      optim::SGD o1(local->parameters(), optim::SGDOptions(0.1)), o2(placed->parameters(), optim::SGDOptions(0.1));
      o1.step();
      o2.step();
      auto a = local->state_dict();
      auto b = placed->state_dict();
      ASSERT_EQ(a.keys(), b.keys());
      for (const auto& [k, t] : a) EXPECT_LT(max_diff(t.cpu(), b[k].cpu()), 1e-12) << k;
      // With an arrival device set (launch sets each rank's GPU under mpirun), a CUDA device that a caller
      // names is the host's own: cuda:5 puts the hosted subtree on cuda:0 here.
      set_cuda_arrival_device(0);
      placed->get_submodule("enc")->to(Device(kCUDA, 5));
      set_cuda_arrival_device(-1);
      EXPECT_EQ(placed->get_parameter("enc.fc1.weight").device().index, 0);
      placed->to(Device(kCPU));
      EXPECT_TRUE(placed->get_parameter("dec.fc2.bias").is_cpu());
    }
    ctx.world->barrier();
  });
}
