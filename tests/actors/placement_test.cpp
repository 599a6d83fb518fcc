// place() with group placements in one process (ranks as threads, --ranks N): a model with a replicated
// subtree and a sharded one gives the outputs, gradients, state_dict and parameters after SGD steps of the
// same model run locally (float64, to 1e-12), with batches that split unevenly over the hosts; every
// Module method reaches every host; the placement errors.
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

std::pair<GroupNet, GroupNet> twin_group_nets() {
  manual_seed(7);
  GroupNet local;
  manual_seed(7);
  GroupNet placed;
  return {local, placed};
}

std::string what_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

void expect_same_state(nn::Module& local, nn::Module& placed) {
  auto a = local.state_dict();
  auto b = placed.state_dict();
  ASSERT_EQ(a.keys(), b.keys());
  for (const auto& [k, t] : a) EXPECT_LT(max_diff(t, b[k]), 1e-12) << k;
}

// Trains `local` with SGD and `placed` with DistributedOptimizer (lr 0.1: a step shows every gradient) on
// batches of the given sizes; every step compares outputs, the input's gradient, the gradients that live
// on this rank or on a replicated group's copies (one process: the proxies' tensors are the hosts'), and
// the parameters after the step.
// `copies` is the replicated `enc`.
void train_side_by_side(GroupNet& local, GroupNet& placed, const RemoteGroupModulePtr& copies,
                        const std::vector<int64_t>& batches) {
  optim::SGD sgd(local->parameters(), optim::SGDOptions(0.1));
  DistributedOptimizer dopt(placed.ptr(), optim::SGDOptions(0.1));
  int step = 0;
  for (int64_t b : batches) {
    SCOPED_TRACE("batch " + std::to_string(b));
    manual_seed(11 + step++);
    Tensor x1 = randn({b, 4}, kFloat64).requires_grad_(true);
    Tensor x2 = x1.detach().clone().requires_grad_(true);
    sgd.zero_grad();
    dopt.zero_grad();
    Tensor y1 = local->forward(x1);
    Tensor y2 = placed->forward(x2);
    ASSERT_EQ(y2.sizes().vec(), y1.sizes().vec());
    EXPECT_LT(max_diff(y1, y2), 1e-12);
    (y1 * y1).sum().backward();
    (y2 * y2).sum().backward();
    EXPECT_LT(max_diff(x1.grad(), x2.grad()), 1e-12);
    if (copies) {
      // every copy holds the whole batch's gradient (the sum of the copies' parts)
      for (const auto& rep : copies->replicas()) {
        auto g = rep->named_parameters();
        for (const auto& [k, t] : g) {
          Tensor want = local->get_parameter("enc." + k).grad();
          ASSERT_TRUE(t.grad().defined()) << k;
          EXPECT_LT(max_diff(t.grad(), want), 1e-12) << k << " on rank " << rep->host_rank();
        }
      }
    }
    for (const std::string k : {"head.weight", "head.bias"})
      EXPECT_LT(max_diff(placed->get_parameter(k).grad(), local->get_parameter(k).grad()), 1e-12) << k;
    sgd.step();
    dopt.step();
    expect_same_state(*local, *placed);
  }
}

}  // namespace

TEST(Placement, ReplicatedAndShardedMatchTheLocalTree) {
  register_remote_models();
  on_ranks(4, [](launch::Context& ctx) {
    if (ctx.rank == 0) {
      auto [local, placed] = twin_group_nets();
      auto proxies =
          place(ctx.actors(), placed.ptr(), {{"enc", replicated({1, 2})}, {"mid", 3}, {"dec", sharded({2, 3})}});
      auto enc = std::dynamic_pointer_cast<RemoteGroupModule>(proxies["enc"]);
      auto dec = std::dynamic_pointer_cast<RemoteGroupModule>(proxies["dec"]);
      ASSERT_TRUE(enc && dec);
      EXPECT_FALSE(std::dynamic_pointer_cast<RemoteGroupModule>(proxies["mid"]));
      EXPECT_EQ(enc->placement().ranks, (std::vector<int>{1, 2}));
      EXPECT_EQ(enc->replicas()[1]->host_rank(), 2);
      EXPECT_EQ(dec->replicas()[0]->host_rank(), 2);
      EXPECT_TRUE(placed->children_dict()["dec"]->is_remote());
      // one copy's state (the sharded one's gathered) is the local tree's, under the same names
      expect_same_state(*local, *placed);
      EXPECT_EQ(local->named_parameters().keys(), placed->named_parameters().keys());
      EXPECT_EQ(local->named_buffers().keys(), placed->named_buffers().keys());
      EXPECT_EQ(local->named_modules().keys(), placed->named_modules().keys());
      EXPECT_EQ(DistributedOptimizer(placed.ptr(), optim::SGDOptions(0.1)).num_hosts(), 5u);
      // 5 rows: 3 + 2 per host; 3: 2 + 1; 1: 1 + 0 (the second host runs an empty batch)
      train_side_by_side(local, placed, enc, {5, 3, 1});
      // the copies stayed identical
      auto a = enc->replicas()[0]->state_dict();
      auto b = enc->replicas()[1]->state_dict();
      for (const auto& [k, t] : a) EXPECT_EQ(max_diff(t, b[k]), 0.0) << k;
      // no_grad: nothing recorded, the same values
      {
        NoGradGuard g;
        Tensor x = randn({4, 4}, kFloat64);
        EXPECT_LT(max_diff(local->forward(x), placed->forward(x)), 1e-12);
      }
    }
    ctx.world->barrier();
  });
}

// The same on the GPU (one process): the model on cuda:0 before place(); the hosts of each group share the
// device, so DDP and FSDP run over the member group staged through host memory (comm/staged.h), and the
// replicated subtree moved back to the CPU by to() runs over the member group itself. Skips without CUDA.
TEST(PlacementCuda, ReplicatedAndShardedOnTheGpuMatchTheLocalTree) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  register_remote_models();
  on_ranks(4, [](launch::Context& ctx) {
    if (ctx.rank == 0) {
      const Device gpu(kCUDA, 0);
      auto [local, placed] = twin_group_nets();
      local->to(gpu);
      placed->to(gpu);
      place(ctx.actors(), placed.ptr(), {{"enc", replicated({1, 2})}, {"mid", 3}, {"dec", sharded({2, 3})}});
      for (const auto& [k, t] : placed->state_dict()) EXPECT_TRUE(t.is_cuda()) << k;
      train_side_by_side_on_gpu(*local, placed.ptr(), gpu, {5, 3, 1});
      placed->get_submodule("enc")->to(Device(kCPU));  // DDP rewraps over the member group
      local->get_submodule("enc")->to(Device(kCPU));
      EXPECT_TRUE(placed->get_parameter("enc.fc1.weight").is_cpu());
    }
    ctx.world->barrier();
  });
}

TEST(Placement, ThreeHostsIncludingTheCallersRank) {
  register_remote_models();
  on_ranks(3, [](launch::Context& ctx) {
    if (ctx.rank == 0) {
      auto [local, placed] = twin_group_nets();
      auto proxies = place(ctx.actors(), placed.ptr(), {{"enc", replicated({2, 0, 1})}, {"dec", sharded({0, 1, 2})}});
      EXPECT_EQ(proxies["enc"]->host_rank(), 2);  // the first of the group holds copy 0
      // 7 rows: 3 + 3 + 1; 4: 2 + 2 + 0; 2: 1 + 1 + 0 (torch.chunk's sizes)
      train_side_by_side(local, placed, std::dynamic_pointer_cast<RemoteGroupModule>(proxies["enc"]), {7, 4, 2});
    }
    ctx.world->barrier();
  });
}

TEST(Placement, EveryModuleMethodReachesEveryHost) {
  register_remote_models();
  on_ranks(3, [](launch::Context& ctx) {
    if (ctx.rank == 0) {
      auto [local, placed] = twin_group_nets();
      auto proxies = place(ctx.actors(), placed.ptr(), {{"enc", replicated({1, 2})}, {"dec", sharded({1, 2})}});
      auto enc = std::dynamic_pointer_cast<RemoteGroupModule>(proxies["enc"]);
      auto dec = std::dynamic_pointer_cast<RemoteGroupModule>(proxies["dec"]);
      EXPECT_TRUE(contains(enc->repr(), "[replicated({1, 2})] Block(")) << enc->repr();
      EXPECT_TRUE(contains(placed->repr(), "(dec): [sharded({1, 2})] Block(")) << placed->repr();

      // load_state_dict reaches every copy and every shard
      manual_seed(3);
      GroupNet fresh;
      local->load_state_dict(fresh->state_dict());
      placed->load_state_dict(fresh->state_dict());
      expect_same_state(*local, *placed);
      for (const auto& rep : enc->replicas())
        for (const auto& [k, t] : rep->state_dict()) EXPECT_LT(max_diff(t, local->get_parameter("enc." + k)), 1e-12) << k;
      Tensor x = randn({5, 4}, kFloat64);
      NoGradGuard no_grad;  // (a grad-mode forward of a DDP group must be followed by its backward)
      EXPECT_LT(max_diff(local->forward(x), placed->forward(x)), 1e-12);
      // the same error text as the local tree
      auto bad = fresh->state_dict();
      bad.erase("dec.fc2.bias");
      bad.insert_or_assign("enc.fc1.bias", zeros({7}, kFloat64));
      EXPECT_EQ(what_of([&] { local->load_state_dict(bad); }), what_of([&] { placed->load_state_dict(bad); }));

      // a sharded subtree's submodules: the full tensors, under their names
      auto fc1 = placed->get_submodule("dec.fc1");
      EXPECT_TRUE(std::dynamic_pointer_cast<RemoteGroupModule>(fc1));
      auto lp = local->get_submodule("dec.fc1")->named_parameters();
      auto pp = fc1->named_parameters();
      ASSERT_EQ(lp.keys(), pp.keys());
      for (const auto& [k, t] : lp) EXPECT_LT(max_diff(t, pp[k]), 1e-12) << k;
      EXPECT_LT(max_diff(placed->get_parameter("dec.fc2.weight"), local->get_parameter("dec.fc2.weight")), 1e-12);
      auto sd = placed->get_submodule("dec.fc2")->state_dict();
      EXPECT_EQ(sd.keys(), (std::vector<std::string>{"weight", "bias"}));

      // train / eval on every copy
      placed->eval();
      for (const auto& rep : enc->replicas()) EXPECT_FALSE(rep->get_submodule("fc2")->is_training());
      for (const auto& rep : dec->replicas()) EXPECT_FALSE(rep->get_submodule("fc1")->is_training());
      EXPECT_FALSE(placed->get_submodule("enc.fc1")->is_training());
      placed->train();
      for (const auto& rep : enc->replicas()) EXPECT_TRUE(rep->get_submodule("fc2")->is_training());

      // a forward hook by name runs on every copy, on its part of the batch
      const int before = forward_hook_calls().load();
      Tensor h0 = (*enc)(x);
      auto h = enc->register_forward_hook("test.double_output");
      EXPECT_LT(max_diff((*enc)(x), h0 * 2.0), 1e-12);
      EXPECT_EQ(forward_hook_calls().load() - before, 2);
      h.remove();
      EXPECT_LT(max_diff((*enc)(x), h0), 1e-12);
      EXPECT_TRUE(contains(what_of([&] { enc->register_forward_hook([](nn::Module&, const nn::Args&, const nn::Value&) {
                             return std::optional<nn::Value>();
                           }); }),
                           "register the hook by name"));

      // apply by name on every copy and shard, then zero_grad
      placed->apply("test.fill_half");
      for (const auto& [k, t] : placed->state_dict())
        if (k != "mid.scale") {
          EXPECT_LT(max_diff(t, full_like(t, 0.5)), 1e-12) << k;
        }
      for (const auto& rep : enc->replicas())
        for (const auto& [k, t] : rep->state_dict()) EXPECT_LT(max_diff(t, full_like(t, 0.5)), 1e-12) << k;
      {
        EnableGradGuard grad;
        (placed->forward(x)).sum().backward();
      }
      for (const auto& rep : enc->replicas()) EXPECT_TRUE(rep->get_parameter("fc1.weight").grad().defined());
      placed->zero_grad();
      for (const auto& rep : enc->replicas())
        for (const auto& [k, t] : rep->named_parameters()) EXPECT_FALSE(t.grad().defined()) << k;

      // to(): a no-op to the same dtype is fine; a sharded group keeps its dtype; requires_grad_ refused
      placed->to(kFloat64);
      std::string e = what_of([&] { dec->to(kFloat32); });
      EXPECT_TRUE(contains(e, "sharded subtree") && contains(e, "before placing it")) << e;
      e = what_of([&] { enc->requires_grad_(false); });
      EXPECT_TRUE(contains(e, "DDP buckets") && contains(e, "replicated({1, 2})")) << e;
      // a replicated group follows to(): its copies and their DDP buckets change dtype together
      enc->to(kFloat32);
      for (const auto& rep : enc->replicas()) EXPECT_EQ(rep->get_parameter("fc1.weight").dtype(), kFloat32);
      {
        EnableGradGuard grad;
        Tensor y32 = (*enc)(x.to(kFloat32).requires_grad_(true));
        y32.sum().backward();
      }
      for (const auto& rep : enc->replicas()) EXPECT_TRUE(rep->get_parameter("fc1.weight").grad().defined());
      enc->to(kFloat64);
      for (const auto& rep : enc->replicas()) EXPECT_EQ(rep->get_parameter("fc1.weight").dtype(), kFloat64);

      // forward through a submodule of a group is refused, as are writes below a sharded root
      e = what_of([&] { (*placed->get_submodule("enc.fc1"))(randn({2, 4}, kFloat64)); });
      EXPECT_TRUE(contains(e, "forward through Linear `fc1`") && contains(e, "subtree's root")) << e;
      e = what_of([&] { placed->get_submodule("dec.fc1")->apply("test.fill_half"); });
      EXPECT_TRUE(contains(e, "inside a sharded subtree")) << e;
    }
    ctx.world->barrier();
  });
}

TEST(Placement, ErrorsNameThePathAndTheGroup) {
  register_remote_models();
  on_ranks(3, [](launch::Context& ctx) {
    if (ctx.rank == 0) {
      auto& rt = ctx.actors();
      GroupNet net;
      auto e = what_of([&] { place(rt, net.ptr(), {{"enc", replicated({})}}); });
      EXPECT_EQ(e, "[actors] place(): `enc` -> replicated({}): the group has no ranks");
      e = what_of([&] { place(rt, net.ptr(), {{"enc", sharded({1, 3})}}); });
      EXPECT_EQ(e, "[actors] place(): `enc` -> sharded({1, 3}): rank 3 is out of range (there are 3 ranks)");
      e = what_of([&] { place(rt, net.ptr(), {{"enc", replicated({1, 2, 1})}}); });
      EXPECT_EQ(e, "[actors] place(): `enc` -> replicated({1, 2, 1}): rank 1 appears twice");
      e = what_of([&] { place(rt, net.ptr(), {{"enc", replicated({1, 2})}, {"enc.fc1", 1}}); });
      EXPECT_EQ(e, "[actors] place(): `enc.fc1` lies inside `enc`, which is placed as a whole");
      e = what_of([&] { place(rt, net.ptr(), {{"mid", -1}}); });
      EXPECT_EQ(e, "[actors] place(): `mid` -> rank -1, but there are 3 ranks");
      // a subtree that holds a hosted one cannot be copied
      place(rt, net.ptr(), {{"enc.fc1", 1}});
      e = what_of([&] { place(rt, net.ptr(), {{"enc", replicated({1, 2})}}); });
      EXPECT_TRUE(contains(e, "`enc` -> replicated({1, 2}) holds `enc.fc1`, which is hosted already")) << e;
      // nothing was placed by the refused calls
      EXPECT_FALSE(net->children_dict()["enc"]->is_remote());
      EXPECT_FALSE(net->children_dict()["dec"]->is_remote());
      // a batch that does not split: tensors of different sizes along dim 0
      GroupNet two;
      auto p = place(rt, two.ptr(), {{"dec", replicated({1, 2})}});
      e = what_of([&] { (*p["dec"])(nn::Args{nn::Value(randn({3, 4}, kFloat64)), nn::Value(randn({2, 4}, kFloat64))}); });
      EXPECT_TRUE(contains(e, "split along dim 0, but their sizes there differ (3 and 2)")) << e;
      // a group is not a pipeline stage
      e = what_of([&] { Pipeline({p["dec"]}, 2); });
      EXPECT_TRUE(contains(e, "stage 0 is hosted by a group of ranks")) << e;
    }
    ctx.world->barrier();
  });
}
