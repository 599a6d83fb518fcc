// A ScriptModule hosted from its archive bytes on another rank, ranks as threads of one process
// (jit_host_cases.h; actors_mpi_tests runs the same checks across a real connection), and through place().
#include <gtest/gtest.h>

#include "jit_host_cases.h"

using namespace troupe;
using namespace troupe::actors;
using namespace troupe::actors::testing;

TEST(JitHost, ScriptModuleFromItsArchiveMatchesTheLocalOne) {
  register_remote_models();
  on_ranks(2, [](launch::Context& ctx) {
    if (ctx.rank == 0) check_hosted_script_module(ctx.actors(), 1);
    ctx.world->barrier();
  });
}

// place() moves a traced child by its archive too: the host loads it without the C++ class.
TEST(JitHost, PlaceMovesATracedChildByItsArchive) {
  register_remote_models();
  on_ranks(2, [](launch::Context& ctx) {
    if (ctx.rank == 0) {
      jit::ScriptModulePtr enc = traced_jit_net();
      jit::ScriptModulePtr local_enc = traced_jit_net();
      auto model = std::make_shared<nn::SequentialImpl>(enc, std::make_shared<nn::TanhImpl>());
      auto local = std::make_shared<nn::SequentialImpl>(local_enc, std::make_shared<nn::TanhImpl>());
      auto proxies = place(ctx.actors(), model, {{"0", 1}});
      ASSERT_EQ(proxies.size(), 1u);
      EXPECT_TRUE(model->children_dict()["0"]->is_remote());
      manual_seed(40);
      Tensor x = randn({3, 4}, kFloat64);
      Tensor x1 = x.clone().requires_grad_(true), x2 = x.clone().requires_grad_(true);
      Tensor y1 = local->forward(x1), y2 = model->forward(x2);
      EXPECT_LT(max_diff(y1, y2), 1e-12);
      y1.sum().backward();
      y2.sum().backward();
      EXPECT_LT(max_diff(x1.grad(), x2.grad()), 1e-12);
    }
    ctx.world->barrier();
  });
}
