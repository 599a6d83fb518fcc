// ScriptModule::compile() and its passes (jit/passes.h): a compiled module's forward and gradients equal the
// eager module's (bit for bit in float32 where the fused kernels run the eager kernels in the eager order;
// to 1e-12 in float64), and each pass fires on a graph where it must and leaves alone one where it must not.
#include <gtest/gtest.h>

#include <sstream>

#include <troupe/jit/jit.h>
#include <troupe/jit/passes.h>
#include <troupe/nn/nn.h>
#include <troupe/tensor/ops.h>
#include <troupe/tensor/gradcheck.h>
#include <troupe/tensor/random.h>

#include "jit_models.h"

namespace troupe::jit {
namespace {

namespace F = nn::functional;

double max_diff(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined()) return a.defined() == b.defined() ? 0 : 1e300;
  if (a.sizes().vec() != b.sizes().vec()) return 1e300;
  if (a.numel() == 0) return 0;
  return (a.to(kFloat64) - b.to(kFloat64)).abs().max().item<double>();
}

// One forward and backward of sum(out * w) on the eager module and on the compiled one (same seed): the
// outputs, the input gradient and every parameter gradient (by name) agree to `tol` (0: equal bit for bit).
void expect_same_step(const std::shared_ptr<nn::Module>& eager, const ScriptModulePtr& compiled, const Tensor& x,
                      double tol, uint64_t seed = 5) {
  eager->zero_grad();
  compiled->zero_grad();
  auto run = [&](nn::Module& m, Tensor& gx) {
    Tensor c = x.detach().clone().requires_grad_(true);
    default_generator().manual_seed(seed);
    Tensor out = m.call({nn::Value(c)}).tensor();
    Tensor w = arange(out.numel(), TensorOptions().dtype(out.dtype())).reshape(out.sizes()).div(7.0).cos();
    (out * w).sum().backward();
    gx = c.grad();
    return out.detach();
  };
  Tensor ge, gc;
  Tensor oe = run(*eager, ge);
  Tensor oc = run(*compiled, gc);
  if (tol == 0) {
    ASSERT_TRUE(equal(oe, oc)) << "forward differs by " << max_diff(oe, oc) << "\n" << compiled->compiled_graph();
    EXPECT_TRUE(equal(ge, gc)) << "input grad differs by " << max_diff(ge, gc);
  } else {
    ASSERT_LE(max_diff(oe, oc), tol) << compiled->compiled_graph();
    EXPECT_LE(max_diff(ge, gc), tol) << "input grad";
  }
  auto pe = eager->named_parameters();
  auto pc = compiled->named_parameters();
  ASSERT_EQ(pe.keys(), pc.keys());
  for (const auto& [k, p] : pe) {
    const Tensor& q = pc[k];
    ASSERT_EQ(p.grad().defined(), q.grad().defined()) << k;
    if (!p.grad().defined()) continue;
    if (tol == 0) EXPECT_TRUE(equal(p.grad(), q.grad())) << "grad of " << k << " differs by " << max_diff(p.grad(), q.grad());
    else EXPECT_LE(max_diff(p.grad(), q.grad()), tol) << "grad of " << k;
  }
}

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

ScriptModulePtr compiled_copy(const std::shared_ptr<nn::Module>& net, const Tensor& x) {
  ScriptModulePtr t = trace(net, x);
  t->compile();
  return t;
}

TEST(Compile, MlpFloat32SameBits) {
  default_generator().manual_seed(0);
  auto net = std::make_shared<troupe::testing::MLP>();
  Tensor x = randn({16, 32});
  ScriptModulePtr c = compiled_copy(net, x);
  ASSERT_TRUE(c->is_compiled());
  const std::string g = c->compiled_graph();
  // the three Linear-headed chains became one stack node
  EXPECT_EQ(count(g, "prim::FusedLinearStack[ops=\"aten::linear, aten::relu | aten::linear, aten::relu | aten::linear\"]"),
            1u)
      << g;
  EXPECT_EQ(count(g, "prim::FusedChain"), 0u) << g;
  EXPECT_EQ(count(g, "prim::CallMethod"), 0u) << g;  // inlined
  EXPECT_EQ(count(g, "aten::relu"), 2u) << g;         // only inside the fused stack's name
  // graph() and code() still show the traced graph
  EXPECT_NE(c->graph().find("prim::CallMethod"), std::string::npos);
  // the fused path ran: the output's node is the stack's, and it is the only node before the leaves
  Tensor xr = x.clone().requires_grad_(true);
  Tensor y = c->forward(xr);
  ASSERT_EQ(y.grad_fn()->name(), "FusedLinearStackBackward");
  for (const autograd::Edge& e : y.grad_fn()->next_edges) {
    if (e.valid()) {
      EXPECT_EQ(e.fn->name(), "AccumulateGrad");
    }
  }
  expect_same_step(net, c, x, 0);
  expect_same_step(net, c, randn({3, 32}), 0);  // another batch size: the plan does not depend on shapes
}

// The passes by hand on the MLP's inlined graph: fuse_elementwise makes one chain per Linear (+ ReLU), and
// fuse_linear_stacks joins the three into one node.
TEST(Compile, LinearChainsJoinIntoOneStack) {
  default_generator().manual_seed(0);
  auto net = std::make_shared<troupe::testing::MLP>();
  ScriptModulePtr t = trace(net, randn({4, 32}));
  std::shared_ptr<Graph> g = t->inline_graph();
  eliminate_dead_code(*g);
  fold_constants(*g);
  eliminate_dead_code(*g);
  EXPECT_EQ(fuse_elementwise(*g), 3u);
  std::string s = g->str();
  EXPECT_EQ(count(s, "prim::FusedChain[ops=\"aten::linear, aten::relu\"]"), 2u) << s;
  EXPECT_EQ(count(s, "prim::FusedChain[ops=\"aten::linear\"]"), 1u) << s;
  EXPECT_EQ(fuse_linear_stacks(*g), 1u);
  eliminate_dead_code(*g);
  s = g->str();
  EXPECT_EQ(count(s, "prim::FusedChain"), 0u) << s;
  EXPECT_EQ(count(s, "prim::FusedLinearStack"), 1u) << s;
  // inputs: x, then weight and bias of each layer
  for (const Node* n : g->nodes())
    if (n->kind == "prim::FusedLinearStack") {
      ASSERT_EQ(n->inputs.size(), 7u);
      EXPECT_EQ(n->inputs[0], g->inputs()[1]);
    }
  EXPECT_EQ(fuse_linear_stacks(*g), 0u);  // nothing left to join
}

// A Linear whose output is used twice (returned, or read by something else) or feeds a later Linear as its
// weight ends the stack there.
TEST(Compile, LinearStackStopsAtASharedValue) {
  auto make = [](int variant) {
    auto g = std::make_shared<Graph>();
    g->add_input(Type{Type::Module, "__torch__.M", std::nullopt}, "self.1");
    Value* x = g->add_input(Type{}, "x");
    Value* w1 = g->add_input(Type{}, "w1");
    Value* w2 = g->add_input(Type{}, "w2");
    Value* w3 = g->add_input(Type{}, "w3");
    Node* none = g->append("prim::Constant", {});
    Value* nb = none->outputs[0];
    nb->type = Type{Type::None, "", std::nullopt};
    Node* l1 = g->append("aten::linear", {x, w1, nb});
    Node* r1 = g->append("aten::relu", {l1->outputs[0]});
    Node* l2 = variant == 2 ? g->append("aten::linear", {w2, r1->outputs[0], nb})  // r1 as the weight
                            : g->append("aten::linear", {r1->outputs[0], w2, nb});
    Node* l3 = g->append("aten::linear", {l2->outputs[0], w3, nb});
    if (variant == 0) g->set_outputs({l3->outputs[0]});
    if (variant == 1) g->set_outputs({l3->outputs[0], l2->outputs[0]});  // the middle layer's output is returned
    if (variant == 2) g->set_outputs({l3->outputs[0]});
    if (variant == 3) {  // the first layer's output is read twice
      Node* s = g->append("aten::sigmoid", {r1->outputs[0]});
      g->set_outputs({l3->outputs[0], s->outputs[0]});
    }
    EXPECT_EQ(fuse_elementwise(*g), 3u);
    return g;
  };
  auto stacks = [](const Graph& g) {
    std::vector<std::string> r;
    for (const Node* n : g.nodes())
      if (n->kind == "prim::FusedLinearStack") r.push_back(n->attr);
    return r;
  };
  auto g0 = make(0);
  EXPECT_EQ(fuse_linear_stacks(*g0), 1u);
  EXPECT_EQ(stacks(*g0), std::vector<std::string>{"aten::linear, aten::relu | aten::linear | aten::linear"}) << g0->str();
  auto g1 = make(1);
  EXPECT_EQ(fuse_linear_stacks(*g1), 1u);  // layers 1 and 2 join; the third reads a returned value
  EXPECT_EQ(stacks(*g1), std::vector<std::string>{"aten::linear, aten::relu | aten::linear"}) << g1->str();
  auto g2 = make(2);
  EXPECT_EQ(fuse_linear_stacks(*g2), 1u);  // layer 2 takes layer 1 as its weight: only 2 and 3 join
  EXPECT_EQ(stacks(*g2), std::vector<std::string>{"aten::linear | aten::linear"}) << g2->str();
  auto g3 = make(3);
  EXPECT_EQ(fuse_linear_stacks(*g3), 1u);
  EXPECT_EQ(stacks(*g3), std::vector<std::string>{"aten::linear | aten::linear"}) << g3->str();
}

// Every step kind between the layers, a layer without bias, and only some inputs requiring grad: the stack
// equals the eager ops bit for bit in float32 (forward and every gradient) and passes gradcheck in float64.
struct Deep : nn::Module {
  Deep() {
    fc1 = register_module("fc1", std::make_shared<nn::LinearImpl>(6, 5));
    fc2 = register_module("fc2", std::make_shared<nn::LinearImpl>(nn::LinearOptions(5, 7).bias(false)));
    fc3 = register_module("fc3", std::make_shared<nn::LinearImpl>(7, 4));
    fc4 = register_module("fc4", std::make_shared<nn::LinearImpl>(4, 3));
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = troupe::tanh((*fc1)(x) * 2.0 + 0.5);
    h = troupe::leaky_relu((*fc2)(h) / 3.0, 0.2);
    h = troupe::sigmoid((*fc3)(h) - 0.25);
    return troupe::relu((*fc4)(h));
  }
  std::shared_ptr<nn::LinearImpl> fc1, fc2, fc3, fc4;
};

TEST(Compile, LinearStackEveryStepSameBitsAsEager) {
  default_generator().manual_seed(11);
  auto net = std::make_shared<Deep>();
  Tensor x = randn({9, 6});
  ScriptModulePtr c = compiled_copy(net, x);
  const std::string g = c->compiled_graph();
  EXPECT_EQ(count(g, "prim::FusedLinearStack"), 1u) << g;
  EXPECT_EQ(count(g, " | "), 3u) << g;
  expect_same_step(net, c, x, 0);
  expect_same_step(net, c, randn({1, 6}), 0);
  expect_same_step(net, c, randn({700, 6}), 0);  // 700 x 7 > one block of the chain loop
  // frozen first layer: no gradient for it, and the input's gradient is still taken through it
  net->fc1->weight.requires_grad_(false);
  c->get_parameter("fc1.weight").requires_grad_(false);
  expect_same_step(net, c, x, 0);
  EXPECT_FALSE(c->get_parameter("fc1.weight").grad().defined());
  net->to(kFloat64);
  Tensor x64 = randn({5, 6}, TensorOptions().dtype(kFloat64));
  expect_same_step(net, compiled_copy(net, x64), x64, 1e-12);
}

TEST(Compile, LinearStackGradcheck) {
  using S = FusedChain::Step;
  auto l1 = std::make_shared<FusedChain>(), l2 = std::make_shared<FusedChain>(), l3 = std::make_shared<FusedChain>();
  l1->linear_head = l2->linear_head = l3->linear_head = true;
  l1->steps = {{S::Tanh}, {S::MulScalar, 1.5}};
  l2->steps = {{S::LeakyRelu, 0.3}, {S::AddScalar, 0.1, 2.0}, {S::Relu}};
  l3->steps = {{S::Sigmoid}};
  auto stack = std::make_shared<LinearStack>();
  stack->layers = {l1, l2, l3};
  stack->ops = "test";
  default_generator().manual_seed(12);
  const TensorOptions f64 = TensorOptions().dtype(kFloat64);
  Tensor x = randn({4, 5}, f64).requires_grad_(true), w1 = randn({6, 5}, f64).requires_grad_(true),
         b1 = randn({6}, f64).requires_grad_(true), w2 = randn({3, 6}, f64).requires_grad_(true),
         w3 = randn({2, 3}, f64).requires_grad_(true), b3 = randn({2}, f64).requires_grad_(true);
  EXPECT_TRUE(autograd::gradcheck(
      [&](const autograd::variable_list& in) {
        return autograd::variable_list{run_linear_stack(*stack, {IValue(in[0]), IValue(in[1]), IValue(in[2]), IValue(in[3]),
                                                                 IValue(), IValue(in[4]), IValue(in[5])})
                                           .toTensor()};
      },
      {x, w1, b1, w2, w3, b3}));
  Tensor y = run_linear_stack(*stack, {IValue(x), IValue(w1), IValue(b1), IValue(w2), IValue(), IValue(w3), IValue(b3)})
                 .toTensor();
  EXPECT_EQ(y.grad_fn()->name(), "FusedLinearStackBackward");
  // operands the kernel does not take (a transposed input): layer by layer, same values
  Tensor xt = randn({5, 4}, f64).t();
  Tensor a = run_linear_stack(*stack, {IValue(xt), IValue(w1), IValue(b1), IValue(w2), IValue(), IValue(w3), IValue(b3)})
                 .toTensor();
  Tensor e = run_linear_stack(*stack, {IValue(xt.contiguous()), IValue(w1), IValue(b1), IValue(w2), IValue(), IValue(w3),
                                       IValue(b3)})
                 .toTensor();
  EXPECT_LE(max_diff(a, e), 1e-12);
  EXPECT_THROW(run_linear_stack(*stack, {IValue(x)}), std::invalid_argument);
  // a weight changed in place between forward and backward is caught, as eager's saved tensors are
  Tensor y2 = run_linear_stack(*stack, {IValue(x), IValue(w1), IValue(b1), IValue(w2), IValue(), IValue(w3), IValue(b3)})
                  .toTensor();
  {
    NoGradGuard ng;
    w3.mul_(2.0);
  }
  EXPECT_THROW(y2.sum().backward(), std::runtime_error);
}

TEST(Compile, MlpFloat64To1e12) {
  default_generator().manual_seed(1);
  auto net = std::make_shared<troupe::testing::MLP>();
  net->to(kFloat64);
  Tensor x = randn({16, 32}, TensorOptions().dtype(kFloat64));
  expect_same_step(net, compiled_copy(net, x), x, 1e-12);
}

// A chain of every fusable op after a Linear: one prim::FusedChain, same bits in float32 (the same backend
// kernels in the same order), 1e-12 in float64.
struct Chain : nn::Module {
  Chain() { fc = register_module("fc", std::make_shared<nn::LinearImpl>(8, 6)); }
  Tensor forward(const Tensor& x) override {
    Tensor h = (*fc)(x);
    h = troupe::tanh(h * 2.0 + 0.5);
    h = troupe::sigmoid(h - 0.25);
    h = troupe::leaky_relu(h / 3.0, 0.2);
    return troupe::relu(h);
  }
  std::shared_ptr<nn::LinearImpl> fc;
};

TEST(Compile, ElementwiseChainFusesIntoOneNode) {
  default_generator().manual_seed(2);
  auto net = std::make_shared<Chain>();
  Tensor x = randn({5, 8});
  ScriptModulePtr c = compiled_copy(net, x);
  const std::string g = c->compiled_graph();
  EXPECT_EQ(count(g, "prim::FusedChain"), 1u) << g;
  EXPECT_NE(g.find("ops=\"aten::linear, aten::mul, aten::add, aten::tanh, aten::sub, aten::sigmoid, aten::div, "
                   "aten::leaky_relu, aten::relu\""),
            std::string::npos)
      << g;
  EXPECT_EQ(count(g, "prim::Constant"), 0u) << g;  // the scalars went into the chain; dead code removed
  expect_same_step(net, c, x, 0);
  // larger than one block of the kernel's loop (16384 elements): the blocks join up
  expect_same_step(net, c, randn({3000, 8}), 0);
  net->to(kFloat64);
  Tensor x64 = randn({5, 8}, TensorOptions().dtype(kFloat64));
  expect_same_step(net, compiled_copy(net, x64), x64, 1e-12);
}

// A value used twice is not fused away: the Linear's output feeds relu and the residual add.
struct Residual : nn::Module {
  Residual() { fc = register_module("fc", std::make_shared<nn::LinearImpl>(4, 4)); }
  Tensor forward(const Tensor& x) override {
    Tensor h = (*fc)(x);
    return troupe::sigmoid(troupe::relu(h)) + h;
  }
  std::shared_ptr<nn::LinearImpl> fc;
};

TEST(Compile, ValueUsedTwiceEndsTheChain) {
  default_generator().manual_seed(3);
  auto net = std::make_shared<Residual>();
  Tensor x = randn({3, 4});
  ScriptModulePtr c = compiled_copy(net, x);
  const std::string g = c->compiled_graph();
  EXPECT_NE(g.find("prim::FusedChain[ops=\"aten::linear\"]"), std::string::npos) << g;
  // relu -> sigmoid is a chain of its own, starting from the shared value
  EXPECT_NE(g.find("prim::FusedChain[ops=\"aten::relu, aten::sigmoid\"]"), std::string::npos) << g;
  EXPECT_EQ(count(g, "aten::add("), 1u) << g;
  expect_same_step(net, c, x, 0);
}

TEST(Compile, InPlaceOpOnAnOutsideValueDoesNotStartAChain) {
  // relu_(x) changes the caller's x: fusing it would make it out of place; relu_ after a fused op is fine
  auto g = std::make_shared<Graph>();
  g->add_input(Type{Type::Module, "__torch__.M", std::nullopt}, "self.1");
  Value* x = g->add_input(Type{}, "x");
  Node* a = g->append("aten::relu_", {x});
  Node* b = g->append("aten::sigmoid", {a->outputs[0]});
  Node* c = g->append("aten::tanh", {b->outputs[0]});
  Node* d = g->append("aten::relu_", {c->outputs[0]});
  g->set_outputs({d->outputs[0]});
  EXPECT_EQ(fuse_elementwise(*g), 1u);
  ASSERT_EQ(g->nodes().size(), 2u);
  EXPECT_EQ(g->nodes()[0]->kind, "aten::relu_");
  EXPECT_EQ(g->nodes()[1]->attr, "aten::sigmoid, aten::tanh, aten::relu_");
}

TEST(Compile, SingleElementwiseOpIsNotFused) {
  auto g = std::make_shared<Graph>();
  g->add_input(Type{Type::Module, "__torch__.M", std::nullopt}, "self.1");
  Value* x = g->add_input(Type{}, "x");
  Node* r = g->append("aten::relu", {x});
  g->set_outputs({r->outputs[0]});
  EXPECT_EQ(fuse_elementwise(*g), 0u);
  EXPECT_EQ(g->nodes().size(), 1u);
}

TEST(Compile, ChainStopsAtAGraphOutput) {
  auto g = std::make_shared<Graph>();
  g->add_input(Type{Type::Module, "__torch__.M", std::nullopt}, "self.1");
  Value* x = g->add_input(Type{}, "x");
  Node* a = g->append("aten::relu", {x});
  Node* b = g->append("aten::sigmoid", {a->outputs[0]});
  Node* t = g->append("aten::tanh", {b->outputs[0]});
  g->set_outputs({a->outputs[0], t->outputs[0]});  // relu's result is returned: sigmoid -> tanh fuse, relu stays
  EXPECT_EQ(fuse_elementwise(*g), 1u);
  ASSERT_EQ(g->nodes().size(), 2u);
  EXPECT_EQ(g->nodes()[0]->kind, "aten::relu");
  EXPECT_EQ(g->nodes()[1]->kind, "prim::FusedChain");
  EXPECT_EQ(g->nodes()[1]->attr, "aten::sigmoid, aten::tanh");
  EXPECT_EQ(g->outputs()[0], a->outputs[0]);
  EXPECT_EQ(g->outputs()[1], g->nodes()[1]->outputs[0]);
}

TEST(Compile, DeadCodeEliminationRemovesOnlyPureUnusedNodes) {
  auto g = std::make_shared<Graph>();
  g->add_input(Type{Type::Module, "__torch__.M", std::nullopt}, "self.1");
  Value* x = g->add_input(Type{}, "x");
  Node* c = g->append("prim::Constant", {});
  c->constant = IValue(2.0);
  Node* dead = g->append("aten::mul", {x, c->outputs[0]});       // unused, pure: removed (then its constant)
  Node* p = g->append("prim::Constant", {});
  p->constant = IValue(0.5);
  Node* t = g->append("prim::Constant", {});
  t->constant = IValue(true);
  Node* drop = g->append("aten::dropout", {x, p->outputs[0], t->outputs[0]});  // unused but random: kept
  Node* inplace = g->append("aten::relu_", {x});                              // unused but in place: kept
  Node* live = g->append("aten::sigmoid", {x});
  g->set_outputs({live->outputs[0]});
  EXPECT_EQ(eliminate_dead_code(*g), 2u);  // the mul and its constant
  std::vector<const Node*> left(g->nodes().begin(), g->nodes().end());
  EXPECT_EQ(std::count(left.begin(), left.end(), dead), 0);
  EXPECT_EQ(std::count(left.begin(), left.end(), drop), 1);
  EXPECT_EQ(std::count(left.begin(), left.end(), inplace), 1);
  EXPECT_EQ(std::count(left.begin(), left.end(), live), 1);
  EXPECT_EQ(eliminate_dead_code(*g), 0u);  // nothing more to do
}

TEST(Compile, BatchNormInTrainingIsNotDeadCode) {
  // an unused batch_norm with training=True still updates the running statistics
  auto g = std::make_shared<Graph>();
  g->add_input(Type{Type::Module, "__torch__.M", std::nullopt}, "self.1");
  Value* x = g->add_input(Type{}, "x");
  std::vector<Value*> args{x, x, x, x, x};
  Node* tr = g->append("prim::Constant", {});
  tr->constant = IValue(true);
  args.push_back(tr->outputs[0]);
  g->append("aten::batch_norm", args);
  g->set_outputs({x});
  EXPECT_EQ(eliminate_dead_code(*g), 0u);
  tr->constant = IValue(false);
  EXPECT_EQ(eliminate_dead_code(*g), 2u);  // in eval mode it is pure: it and its flag go
}

// Folding: mul(constant tensor, 2.0) becomes one constant; mul(parameter, 2.0) stays (parameters change).
TEST(Compile, ConstantFoldingFoldsConstantsNotParameters) {
  ScriptModule m("M", "__torch__.M");
  m.register_parameter("weight", full({3}, 1.5));
  auto g = std::make_shared<Graph>();
  Value* self = g->add_input(Type{Type::Module, "__torch__.M", std::nullopt}, "self.1");
  Value* x = g->add_input(Type{}, "x");
  Node* ct = g->append("prim::Constant", {});
  ct->constant = IValue(full({3}, 4.0));
  Node* two = g->append("prim::Constant", {});
  two->constant = IValue(2.0);
  Node* folded = g->append("aten::mul", {ct->outputs[0], two->outputs[0]});
  Node* w = g->append("prim::GetAttr", {self});
  w->attr = "weight";
  Node* kept = g->append("aten::mul", {w->outputs[0], two->outputs[0]});
  Node* one = g->append("prim::Constant", {});
  one->constant = IValue(int64_t{1});
  Node* a = g->append("aten::add", {x, folded->outputs[0], one->outputs[0]});
  Node* b = g->append("aten::add", {a->outputs[0], kept->outputs[0], one->outputs[0]});
  g->set_outputs({b->outputs[0]});
  Tensor in = full({3}, 0.25);
  const Tensor before = run_graph(*g, m, {IValue(in)})[0].toTensor();
  EXPECT_EQ(fold_constants(*g), 1u);
  std::vector<const Node*> left(g->nodes().begin(), g->nodes().end());
  EXPECT_EQ(std::count(left.begin(), left.end(), folded), 0);
  EXPECT_EQ(std::count(left.begin(), left.end(), kept), 1);
  EXPECT_EQ(a->inputs[1]->node->kind, "prim::Constant");
  EXPECT_TRUE(equal(a->inputs[1]->node->constant.toTensor(), full({3}, 8.0)));
  EXPECT_EQ(eliminate_dead_code(*g), 1u);  // the unused tensor constant
  EXPECT_TRUE(equal(run_graph(*g, m, {IValue(in)})[0].toTensor(), before));
  // the parameter changes after compile: the unfolded graph sees it (0.25 + 8 + 2 * 3)
  NoGradGuard ng;
  m.named_parameters()["weight"].fill_(3.0);
  EXPECT_TRUE(equal(run_graph(*g, m, {IValue(in)})[0].toTensor(), full({3}, 14.25)));
}

TEST(Compile, RandomOpsAreNotFolded) {
  ScriptModule m("M", "__torch__.M");
  auto g = std::make_shared<Graph>();
  g->add_input(Type{Type::Module, "__torch__.M", std::nullopt}, "self.1");
  g->add_input(Type{}, "x");
  Node* ct = g->append("prim::Constant", {});
  ct->constant = IValue(full({4}, 1.0));
  Node* p = g->append("prim::Constant", {});
  p->constant = IValue(0.5);
  Node* t = g->append("prim::Constant", {});
  t->constant = IValue(true);
  Node* d = g->append("aten::dropout", {ct->outputs[0], p->outputs[0], t->outputs[0]});
  g->set_outputs({d->outputs[0]});
  EXPECT_EQ(fold_constants(*g), 0u);
}

TEST(Compile, LastUsesFreeIntermediatesNotOutputs) {
  auto g = std::make_shared<Graph>();
  g->add_input(Type{Type::Module, "__torch__.M", std::nullopt}, "self.1");
  Value* x = g->add_input(Type{}, "x");
  Node* a = g->append("aten::relu", {x});
  Node* b = g->append("aten::sigmoid", {a->outputs[0]});
  Node* c = g->append("aten::add", {b->outputs[0], a->outputs[0]});
  g->set_outputs({c->outputs[0]});
  auto frees = last_uses(*g);
  ASSERT_EQ(frees.size(), 3u);
  EXPECT_TRUE(frees[0].empty());  // x is an input: the caller's
  EXPECT_TRUE(frees[1].empty());  // relu's result is used again by the add
  EXPECT_EQ(frees[2], (std::vector<size_t>{a->outputs[0]->id, b->outputs[0]->id}));
}

TEST(Compile, ConvNetTrainModeSameBits) {
  default_generator().manual_seed(4);
  auto net = std::make_shared<troupe::testing::Conv>();
  net->train();
  Tensor x = randn({2, 1, 8, 8});
  ScriptModulePtr c = compiled_copy(net, x);
  const std::string g = c->compiled_graph();
  EXPECT_NE(g.find("aten::batch_norm"), std::string::npos) << g;  // training: kept
  EXPECT_NE(g.find("aten::dropout"), std::string::npos) << g;
  expect_same_step(net, c, x, 0);  // same dropout mask (same seed), same running statistics afterwards
  auto be = net->named_buffers();
  auto bc = c->named_buffers();
  for (const auto& [k, v] : be) EXPECT_TRUE(equal(v, bc[k])) << k;
}

TEST(Compile, SubmoduleHooksStillFire) {
  default_generator().manual_seed(5);
  auto net = std::make_shared<troupe::testing::MLP>();
  Tensor x = randn({4, 32});
  ScriptModulePtr c = compiled_copy(net, x);
  int calls = 0;
  auto h = c->get_submodule("fc2")->register_forward_hook([&](nn::Module&, const nn::Args&, const nn::Value&) { ++calls; });
  Tensor y = c->forward(x);
  EXPECT_EQ(calls, 1);
  h.remove();
  EXPECT_TRUE(equal(c->forward(x), y));
  EXPECT_EQ(calls, 1);
}

TEST(Compile, StateChangesAfterCompileAreSeen) {
  default_generator().manual_seed(6);
  auto net = std::make_shared<troupe::testing::MLP>();
  Tensor x = randn({4, 32});
  ScriptModulePtr c = compiled_copy(net, x);
  {
    NoGradGuard ng;
    for (auto& [k, p] : net->named_parameters()) p.mul_(0.5);
  }
  c->load_state_dict(net->state_dict());
  EXPECT_TRUE(equal(c->forward(x), net->forward(x)));
  c->to(kFloat64);  // the fused chains run in float64 too
  net->to(kFloat64);
  Tensor x64 = x.to(kFloat64);
  EXPECT_LE(max_diff(c->forward(x64), net->forward(x64)), 0.0);
}

TEST(Compile, DoubleBackwardIsRefusedClearly) {
  default_generator().manual_seed(7);
  auto net = std::make_shared<troupe::testing::MLP>();
  Tensor x = randn({2, 32});
  ScriptModulePtr c = compiled_copy(net, x);
  Tensor xi = x.clone().requires_grad_(true);
  Tensor y = c->forward(xi).sum();
  try {
    autograd::grad({y}, {xi}, {}, std::nullopt, /*create_graph=*/true);
    FAIL() << "expected an error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("cannot be differentiated again"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("aten::linear"), std::string::npos) << e.what();
  }
}

TEST(Compile, NoGradForwardKeepsNothing) {
  default_generator().manual_seed(8);
  auto net = std::make_shared<troupe::testing::MLP>();
  Tensor x = randn({4, 32});
  ScriptModulePtr c = compiled_copy(net, x);
  NoGradGuard ng;
  Tensor y = c->forward(x);
  EXPECT_FALSE(y.requires_grad());
  EXPECT_TRUE(equal(y, net->forward(x)));
}

// The fused chain's own backward against finite differences (float64), with every step kind, after a
// Linear head and on its own; the second one larger than a block, so the blocked loops are checked too.
TEST(Compile, FusedChainGradcheck) {
  using S = FusedChain::Step;
  auto lin = std::make_shared<FusedChain>();
  lin->linear_head = true;
  lin->steps = {{S::MulScalar, 2.0}, {S::AddScalar, 0.5, 1.0}, {S::Tanh},      {S::SubScalar, 0.25, 2.0},
                {S::LeakyRelu, 0.2}, {S::Sigmoid},            {S::DivScalar, 3.0}, {S::Relu}};
  lin->ops = "test";
  default_generator().manual_seed(10);
  const TensorOptions f64 = TensorOptions().dtype(kFloat64);
  Tensor x = randn({4, 5}, f64).requires_grad_(true), w = randn({3, 5}, f64).requires_grad_(true),
         b = randn({3}, f64).requires_grad_(true);
  EXPECT_TRUE(autograd::gradcheck(
      [&](const autograd::variable_list& in) {
        return autograd::variable_list{run_fused_chain(*lin, {IValue(in[0]), IValue(in[1]), IValue(in[2])}).toTensor()};
      },
      {x, w, b}));
  auto ew = std::make_shared<FusedChain>();
  ew->steps = {{S::LeakyRelu, 0.1}, {S::Tanh}, {S::MulScalar, -1.5}, {S::Relu}, {S::Sigmoid}};
  ew->ops = "test";
  Tensor small = randn({6, 7}, f64).requires_grad_(true);
  EXPECT_TRUE(autograd::gradcheck(
      [&](const autograd::variable_list& in) { return autograd::variable_list{run_fused_chain(*ew, {IValue(in[0])}).toTensor()}; },
      {small}));
  // larger than one block (16384 elements): the blocked loops give the eager ops' bits, forward and backward
  Tensor big = randn({170, 100}), a = big.clone().requires_grad_(true), e = big.clone().requires_grad_(true);
  Tensor fa = run_fused_chain(*ew, {IValue(a)}).toTensor();
  Tensor fe = troupe::sigmoid(troupe::relu(troupe::mul(troupe::tanh(troupe::leaky_relu(e, 0.1)), -1.5)));
  EXPECT_TRUE(equal(fa, fe));
  Tensor gw = randn({170, 100});
  (fa * gw).sum().backward();
  (fe * gw).sum().backward();
  EXPECT_TRUE(equal(a.grad(), e.grad())) << max_diff(a.grad(), e.grad());
}

// The compiled interpreter reuses its slots between calls: nothing it held outlives a call, whether the
// call returned or threw, and calls after a failed one still give eager's results.
TEST(Compile, CompiledCallsKeepNothingAliveAfterReturnOrThrow) {
  default_generator().manual_seed(13);
  auto net = std::make_shared<troupe::testing::MLP>();
  ScriptModulePtr c = compiled_copy(net, randn({4, 32}));
  NoGradGuard ng;
  std::weak_ptr<TensorImpl> seen;
  {
    Tensor x = randn({4, 32});
    seen = x.impl_ptr();
    Tensor y = c->forward(x);
    EXPECT_TRUE(equal(y, net->forward(x)));
  }
  EXPECT_TRUE(seen.expired());
  {
    Tensor bad = randn({4, 31});
    seen = bad.impl_ptr();
    EXPECT_THROW(c->forward(bad), std::exception);
  }
  EXPECT_TRUE(seen.expired());
  Tensor x = randn({5, 32});
  EXPECT_TRUE(equal(c->forward(x), net->forward(x)));
}

// The compiled interpreter finds each attribute through a hint (its index in the owner's dict, checked against
// the name): whatever changes the module's state after compile() (a parameter re-registered, a state dict
// loaded, assign=true's new tensors, to(kFloat64), a submodule replaced, a parameter added before the one read)
// shows in the next forward and gradients, equal to the eager module changed the same way.
TEST(Compile, CompiledModuleFollowsItsStateAfterCompile) {
  default_generator().manual_seed(0);
  auto net = std::make_shared<troupe::testing::MLP>();
  Tensor x = randn({16, 32});
  ScriptModulePtr c = compiled_copy(net, x);
  expect_same_step(net, c, x, 0);  // the hints are set
  // the eager reference: a fresh MLP (in `dtype`) holding the compiled module's state as it is now
  auto reference = [&](ScalarType dtype = kFloat32) {
    auto r = std::make_shared<troupe::testing::MLP>();
    r->to(dtype);
    r->load_state_dict(c->state_dict(), /*strict=*/false);
    return r;
  };
  auto sc = [&](const std::string& name) { return c->child(name); };

  // register_parameter over an existing name: a new tensor with new values
  Tensor w1 = randn({64, 32});
  sc("fc1")->register_parameter("weight", w1.clone());
  expect_same_step(reference(), c, x, 0);
  EXPECT_TRUE(equal(reference()->forward(x), troupe::linear(troupe::relu(troupe::linear(troupe::relu(
      troupe::linear(x, w1, net->fc1->bias)), net->fc2->weight, net->fc2->bias)), net->fc3->weight, net->fc3->bias)));

  // load_state_dict (copies into the tensors) and load_state_dict(assign=true) (new tensors)
  default_generator().manual_seed(1);
  auto other = std::make_shared<troupe::testing::MLP>();
  c->load_state_dict(other->state_dict());
  expect_same_step(other, c, x, 0);
  default_generator().manual_seed(2);
  auto third = std::make_shared<troupe::testing::MLP>();
  c->load_state_dict(third->state_dict(), true, /*assign=*/true);
  expect_same_step(third, c, x, 0);

  // a submodule replaced by another traced Linear: its parameters are read, not the old one's
  default_generator().manual_seed(3);
  auto lin = std::make_shared<nn::LinearImpl>(64, 64);
  c->register_module("fc2", trace(lin, randn({2, 64})));
  third->fc2->weight.detach().copy_(lin->weight.detach());
  third->fc2->bias.detach().copy_(lin->bias.detach());
  expect_same_step(third, c, x, 0);

  // a parameter registered in front of the one read (a new name; the read one moves to a later index)
  auto fresh = std::make_shared<ScriptModule>("Linear", "__torch__.torch.nn.modules.linear.Linear");
  fresh->register_parameter("extra", zeros({1}));
  fresh->register_parameter("weight", randn({10, 64}));
  fresh->register_parameter("bias", randn({10}));
  fresh->set_forward_graph(sc("fc3")->forward_graph());
  c->register_module("fc3", fresh);
  third->fc3->weight.detach().copy_(fresh->tensor_attr("weight").detach());
  third->fc3->bias.detach().copy_(fresh->tensor_attr("bias").detach());
  EXPECT_TRUE(equal(c->forward(x), third->forward(x)));

  // to(kFloat64): every parameter is a new float64 tensor
  c->register_module("fc3", trace(third->fc3, randn({2, 64})));
  c->to(kFloat64);
  expect_same_step(reference(kFloat64), c, x.to(kFloat64), 0);
  EXPECT_EQ(c->forward(x.to(kFloat64)).dtype(), kFloat64);
}

// An attribute that disappears after compile() (a submodule replaced by one without it) is an error naming
// the module and the attribute, not a stale read.
TEST(Compile, CompiledModuleReportsAnAttributeGoneAfterCompile) {
  default_generator().manual_seed(0);
  auto net = std::make_shared<troupe::testing::MLP>();
  Tensor x = randn({4, 32});
  ScriptModulePtr c = compiled_copy(net, x);
  c->forward(x);
  auto empty_linear = std::make_shared<ScriptModule>("Linear", "__torch__.torch.nn.modules.linear.Linear");
  empty_linear->register_parameter("weight", randn({64, 64}));  // no bias
  c->register_module("fc2", empty_linear);
  try {
    c->forward(x);
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("module 'Linear' has no attribute 'bias'"), std::string::npos) << e.what();
  }
}

// A loss whose gradient reaches the stack as an expanded (stride-0) tensor, as mean() and sum() give it: the
// bias gradient of the top layer must still be eager's bits (eager's sum_to sums one copy and scales it).
TEST(Compile, LinearStackExpandedOutputGradientSameBits) {
  default_generator().manual_seed(0);
  auto net = std::make_shared<troupe::testing::MLP>();
  Tensor x = randn({16, 32});
  ScriptModulePtr c = compiled_copy(net, x);
  for (int loss_kind = 0; loss_kind < 2; ++loss_kind) {
    net->zero_grad();
    c->zero_grad();
    for (nn::Module* m : {static_cast<nn::Module*>(net.get()), static_cast<nn::Module*>(c.get())}) {
      Tensor out = m->call({nn::Value(x)}).tensor();
      (loss_kind == 0 ? out.mean() : out.sum().mul(0.3)).backward();
    }
    auto pe = net->named_parameters();
    auto pc = c->named_parameters();
    for (const auto& [k, p] : pe)
      EXPECT_TRUE(equal(p.grad(), pc[k].grad())) << (loss_kind == 0 ? "mean: " : "sum * 0.3: ") << "grad of " << k
                                                 << " differs by " << max_diff(p.grad(), pc[k].grad());
  }
}

TEST(Compile, CompiledGraphBeforeCompileThrows) {
  default_generator().manual_seed(9);
  auto net = std::make_shared<troupe::testing::MLP>();
  ScriptModulePtr t = trace(net, randn({2, 32}));
  EXPECT_FALSE(t->is_compiled());
  EXPECT_THROW(t->compiled_graph(), std::runtime_error);
}

}  // namespace
}  // namespace troupe::jit
