// The nn::Module API on a ScriptModule (torch.jit.ScriptModule's reference page): the traced tree,
// names, state dicts, modes, dtype moves, gradients, hooks, registration, repr.
#include <gtest/gtest.h>

#include <troupe/jit/jit.h>
#include <troupe/nn/nn.h>
#include <troupe/tensor/random.h>

#include "jit_models.h"

namespace troupe::jit {
namespace {

ScriptModulePtr traced_mlp(std::shared_ptr<troupe::testing::MLP>* eager = nullptr) {
  default_generator().manual_seed(0);
  auto net = std::make_shared<troupe::testing::MLP>();
  if (eager) *eager = net;
  return trace(net, randn({16, 32}));
}

TEST(ModuleApi, TreeNamesAndTypes) {
  std::shared_ptr<troupe::testing::MLP> net;
  auto t = traced_mlp(&net);
  EXPECT_EQ(t->name(), "MLP");
  EXPECT_EQ(t->qualified_name(), "__torch__.MLP");
  EXPECT_EQ(t->named_parameters().keys(), net->named_parameters().keys());
  EXPECT_EQ(t->named_children().keys(), (std::vector<std::string>{"fc1", "fc2", "fc3"}));
  EXPECT_EQ(t->named_modules().keys(), (std::vector<std::string>{"", "fc1", "fc2", "fc3"}));
  EXPECT_EQ(t->children().size(), 3u);
  EXPECT_EQ(t->modules().size(), 4u);
  auto fc2 = std::dynamic_pointer_cast<ScriptModule>(t->get_submodule("fc2"));
  ASSERT_TRUE(fc2);  // one ScriptModule per traced child
  EXPECT_EQ(fc2->name(), "Linear");
  EXPECT_EQ(fc2->qualified_name(), "__torch__.torch.nn.modules.linear.___torch_mangle_0.Linear");
  EXPECT_TRUE(equal(t->get_parameter("fc2.weight"), net->fc2->weight));
  EXPECT_NE(t->get_parameter("fc2.weight").impl(), net->fc2->weight.impl());  // shared with nothing
  EXPECT_THROW(t->get_submodule("fc9"), std::exception);
  EXPECT_THROW(t->get_buffer("fc1.weight"), std::exception);
}

TEST(ModuleApi, ParametersAreItsOwn) {
  std::shared_ptr<troupe::testing::MLP> net;
  auto t = traced_mlp(&net);
  Tensor x = randn({2, 32});
  Tensor before = t->forward(x);
  {
    NoGradGuard g;
    net->fc1->weight.zero_();  // the eager module changes; the traced one does not
  }
  EXPECT_TRUE(equal(t->forward(x), before));
  {
    NoGradGuard g;
    t->get_parameter("fc1.weight").zero_();
  }
  EXPECT_TRUE(equal(t->forward(x), net->forward(x)));  // both see their own zeroed weight
}

TEST(ModuleApi, StateDictRoundTrip) {
  std::shared_ptr<troupe::testing::MLP> net;
  auto t = traced_mlp(&net);
  auto other = std::make_shared<troupe::testing::MLP>();  // other weights
  Tensor x = randn({3, 32});
  EXPECT_FALSE(equal(t->forward(x), other->forward(x)));
  auto r = t->load_state_dict(other->state_dict());
  EXPECT_TRUE(r.missing_keys.empty());
  EXPECT_TRUE(r.unexpected_keys.empty());
  EXPECT_TRUE(equal(t->forward(x), other->forward(x)));
  EXPECT_EQ(t->state_dict().keys(), net->state_dict().keys());
  nn::StateDict bad = other->state_dict();
  bad.erase("fc3.bias");
  EXPECT_THROW(t->load_state_dict(bad), std::exception);
}

TEST(ModuleApi, TrainEvalZeroGradRequiresGrad) {
  auto t = traced_mlp();
  EXPECT_TRUE(t->is_training());
  t->eval();
  for (const auto& m : t->modules()) EXPECT_FALSE(m->is_training());
  t->train();
  t->forward(randn({4, 32})).sum().backward();
  EXPECT_TRUE(t->get_parameter("fc3.bias").grad().defined());
  t->zero_grad();
  EXPECT_FALSE(t->get_parameter("fc3.bias").grad().defined());
  t->requires_grad_(false);
  for (const auto& p : t->parameters()) EXPECT_FALSE(p.requires_grad());
  EXPECT_FALSE(t->forward(randn({4, 32})).requires_grad());
}

TEST(ModuleApi, ToDoubleRunsTheGraphInDouble) {
  std::shared_ptr<troupe::testing::MLP> net;
  auto t = traced_mlp(&net);
  t->to(kFloat64);
  net->to(kFloat64);
  Tensor x = randn({5, 32}, TensorOptions().dtype(kFloat64));
  Tensor y = t->forward(x);
  EXPECT_EQ(y.dtype(), kFloat64);
  EXPECT_TRUE(equal(y, net->forward(x)));
  t->to(kFloat32);
  EXPECT_EQ(t->get_parameter("fc1.weight").dtype(), kFloat32);
}

TEST(ModuleApi, HooksOnTheScriptModuleAndItsChildren) {
  auto t = traced_mlp();
  int top = 0, child = 0;
  auto h1 = t->register_forward_hook([&](nn::Module&, const nn::Args&, const nn::Value&) { ++top; });
  auto h2 = t->get_submodule("fc2")->register_forward_pre_hook([&](nn::Module&, const nn::Args&) { ++child; });
  (*t)(randn({2, 32}));
  EXPECT_EQ(top, 1);
  EXPECT_EQ(child, 1);  // the graph calls its children through their hooks
  h1.remove();
  h2.remove();
  (*t)(randn({2, 32}));
  EXPECT_EQ(top, 1);
  EXPECT_EQ(child, 1);
}

TEST(ModuleApi, ApplyRegistrationAndRepr) {
  auto t = traced_mlp();
  int n = 0;
  t->apply([&](nn::Module&) { ++n; });
  EXPECT_EQ(n, 4);
  t->register_buffer("steps", zeros({1}));
  EXPECT_TRUE(t->named_buffers().contains("steps"));
  t->register_parameter("scale", ones({1}));
  EXPECT_TRUE(t->named_parameters().contains("scale"));
  t->add_module("extra", std::make_shared<nn::LinearImpl>(2, 2));
  EXPECT_TRUE(t->named_children().contains("extra"));
  const std::string r = t->repr();
  EXPECT_NE(r.find("MLP(\n  original_name=MLP"), std::string::npos) << r;
  EXPECT_NE(r.find("(fc1): Linear(original_name=Linear)"), std::string::npos) << r;
}

TEST(ModuleApi, UncalledChildHasNoForward) {
  struct Partial : nn::Module {
    Partial() {
      used = register_module("used", std::make_shared<nn::LinearImpl>(3, 3));
      unused = register_module("unused", std::make_shared<nn::LinearImpl>(3, 3));
    }
    Tensor forward(const Tensor& x) override { return (*used)(x); }
    std::shared_ptr<nn::LinearImpl> used, unused;
  };
  auto t = trace(std::make_shared<Partial>(), randn({2, 3}));
  EXPECT_TRUE(t->named_parameters().contains("unused.weight"));
  try {
    t->get_submodule("unused")->forward(randn({2, 3}));
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("it was not called while the module was traced"), std::string::npos);
  }
}

}  // namespace
}  // namespace troupe::jit
