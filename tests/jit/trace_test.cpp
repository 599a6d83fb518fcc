// jit::trace: a traced module's forward and backward equal the eager module's bit for bit for nn's layers
// (Linear, Conv2d, BatchNorm in train and eval, pooling, activations, Embedding, LayerNorm, Dropout under
// the same generator state, losses); check_trace catches data-dependent control flow; untraceable ops
// fail with a message naming them.
#include <gtest/gtest.h>

#include <troupe/jit/jit.h>
#include <troupe/nn/nn.h>
#include <troupe/tensor/ops.h>
#include <troupe/tensor/random.h>

#include "jit_models.h"

namespace troupe::jit {
namespace {

namespace F = nn::functional;

// The module's and the traced module's outputs and every gradient (inputs and parameters, matched by
// name) are equal bit for bit, after one forward and backward of sum(out * w) under the same generator
// state; with `buffers`, the buffers after the step are equal too.
void expect_same_step(const std::shared_ptr<nn::Module>& eager, const ScriptModulePtr& traced,
                      const std::vector<Tensor>& inputs, uint64_t seed = 5) {
  eager->zero_grad();
  traced->zero_grad();
  auto run = [&](nn::Module& m, std::vector<Tensor>& grads) {
    std::vector<Tensor> xs;
    nn::Args args;
    for (const Tensor& x : inputs) {
      Tensor c = x.detach().clone();
      if (c.is_floating_point()) c.requires_grad_(true);
      xs.push_back(c);
      args.emplace_back(c);
    }
    default_generator().manual_seed(seed);
    Tensor out = m.call(args).tensor();
    Tensor w = arange(out.numel(), TensorOptions().dtype(out.dtype())).reshape(out.sizes()).div(7.0).cos();
    (out * w).sum().backward();
    for (const Tensor& x : xs)
      if (x.requires_grad()) grads.push_back(x.grad());
    return out.detach();
  };
  std::vector<Tensor> ge, gt;
  Tensor oe = run(*eager, ge);
  Tensor ot = run(*traced, gt);
  ASSERT_TRUE(equal(oe, ot)) << "forward differs:\n" << oe << "\n" << ot << "\n" << traced->inlined_graph();
  ASSERT_EQ(ge.size(), gt.size());
  for (size_t i = 0; i < ge.size(); ++i) EXPECT_TRUE(equal(ge[i], gt[i])) << "input grad " << i;
  auto pe = eager->named_parameters();
  auto pt = traced->named_parameters();
  ASSERT_EQ(pe.keys(), pt.keys());
  for (const auto& [k, p] : pe) {
    const Tensor& q = pt[k];
    ASSERT_NE(p.impl(), q.impl()) << k << " is shared with the eager module";
    if (!p.grad().defined()) {
      EXPECT_FALSE(q.grad().defined()) << k;
      continue;
    }
    ASSERT_TRUE(q.grad().defined()) << k;
    EXPECT_TRUE(equal(p.grad(), q.grad())) << "grad of " << k;
  }
  auto be = eager->named_buffers();
  auto bt = traced->named_buffers();
  ASSERT_EQ(be.keys(), bt.keys());
  for (const auto& [k, b] : be) EXPECT_TRUE(equal(b, bt[k])) << "buffer " << k;
}

TEST(Trace, MlpForwardBackwardBitForBit) {
  default_generator().manual_seed(0);
  auto net = std::make_shared<testing::MLP>();
  Tensor x = randn({16, 32});
  auto traced = trace(net, x);
  expect_same_step(net, traced, {x});
}

TEST(Trace, ConvNetEvalBitForBit) {
  default_generator().manual_seed(1);
  auto net = std::make_shared<testing::Conv>();
  net->eval();
  Tensor x = randn({2, 1, 8, 8});
  auto traced = trace(net, x);
  EXPECT_FALSE(traced->get_submodule("bn")->is_training());
  expect_same_step(net, traced, {x});
}

TEST(Trace, ConvNetTrainBatchNormAndDropoutBitForBit) {
  default_generator().manual_seed(2);
  auto net = std::make_shared<testing::Conv>();
  Tensor x = randn({2, 1, 8, 8});
  // dropout draws from the generator: the check cannot compare runs; the trace itself must still work
  auto traced = trace(net, x, /*check_trace=*/false);
  // the traced run updated the running statistics of both (the copies took the values after it)
  EXPECT_TRUE(equal(net->named_buffers()["bn.running_mean"], traced->named_buffers()["bn.running_mean"]));
  EXPECT_EQ(traced->named_buffers()["bn.num_batches_tracked"].item<int64_t>(), 1);
  expect_same_step(net, traced, {x}, 11);
  EXPECT_EQ(traced->named_buffers()["bn.num_batches_tracked"].item<int64_t>(), 2);
}

TEST(Trace, CheckTraceLeavesBuffersAndGeneratorAsTheTracedRunDid) {
  default_generator().manual_seed(3);
  auto net = std::make_shared<testing::Conv>();
  net->drop->options.p(0.0);  // deterministic, so check_trace can compare
  Tensor x = randn({2, 1, 8, 8});
  auto ref = std::make_shared<testing::Conv>();
  ref->load_state_dict(net->state_dict());
  ref->drop->options.p(0.0);
  default_generator().manual_seed(9);
  ref->forward(x);
  std::vector<uint8_t> after_eager = default_generator().get_state();
  default_generator().manual_seed(9);
  auto traced = trace(net, x);  // check_trace on
  EXPECT_EQ(default_generator().get_state(), after_eager);
  EXPECT_TRUE(equal(net->named_buffers()["bn.running_var"], ref->named_buffers()["bn.running_var"]));
  EXPECT_TRUE(equal(traced->named_buffers()["bn.running_var"], ref->named_buffers()["bn.running_var"]));
}

struct Layers : nn::Module {
  Layers() {
    emb = register_module("emb", std::make_shared<nn::EmbeddingImpl>(10, 6));
    norm = register_module("norm", std::make_shared<nn::LayerNormImpl>(std::vector<int64_t>{6}));
    fc = register_module("fc", std::make_shared<nn::LinearImpl>(6, 8));
    act = register_module("act", std::make_shared<nn::GELUImpl>());
    tanh = register_module("tanh", std::make_shared<nn::TanhImpl>());
    drop = register_module("drop", std::make_shared<nn::DropoutImpl>(0.5));
  }
  Tensor forward(const Tensor& idx) override {
    Tensor h = (*norm)((*emb)(idx));                        // (2, 4, 6)
    h = (*drop)((*act)((*fc)(h)));                          // (2, 4, 8)
    h = (*tanh)(h) + troupe::sigmoid(h) * 0.5 - h / 3.0;    // elementwise ops on tensors and numbers
    h = troupe::leaky_relu(h, 0.1);
    Tensor img = h.reshape({2, 1, 4, 8});
    Tensor a = troupe::avg_pool2d(img, {2, 2});
    Tensor b = F::adaptive_avg_pool2d(img, F::AdaptiveAvgPool2dFuncOptions({2, 4}));
    Tensor s = troupe::softmax(a.flatten(1), 1) + troupe::log_softmax(b.view({2, 8}), -1);
    return troupe::matmul(s, s.transpose(0, 1));
  }
  std::shared_ptr<nn::EmbeddingImpl> emb;
  std::shared_ptr<nn::LayerNormImpl> norm;
  std::shared_ptr<nn::LinearImpl> fc;
  std::shared_ptr<nn::GELUImpl> act;
  std::shared_ptr<nn::TanhImpl> tanh;
  std::shared_ptr<nn::DropoutImpl> drop;
};

TEST(Trace, EmbeddingLayerNormActivationsPoolingDropoutBitForBit) {
  default_generator().manual_seed(4);
  auto net = std::make_shared<Layers>();
  Tensor idx = randint(0, 10, {2, 4}, TensorOptions().dtype(kInt64));
  auto traced = trace(net, idx, /*check_trace=*/false);
  expect_same_step(net, traced, {idx}, 21);
  // a trace keeps the mode it was traced in (dropout's `train` is a constant of the graph), as PyTorch's
  net->eval();
  traced->eval();
  default_generator().manual_seed(22);
  Tensor still_training = traced->forward(idx);
  default_generator().manual_seed(22);
  EXPECT_FALSE(equal(still_training, net->forward(idx)));
  auto traced_eval = trace(net, idx);  // deterministic in eval mode: check_trace on
  expect_same_step(net, traced_eval, {idx}, 23);
}

struct LossNet : nn::Module {
  explicit LossNet(std::string kind) : kind(std::move(kind)) {
    fc = register_module("fc", std::make_shared<nn::LinearImpl>(5, 3));
  }
  nn::Value forward_args(const nn::Args& args, const nn::Kwargs&) override {
    Tensor y = (*fc)(args[0].tensor());
    const Tensor& t = args[1].tensor();
    if (kind == "mse") return F::mse_loss(y, t, F::MSELossFuncOptions(kSum));
    if (kind == "l1") return F::l1_loss(y, t);
    if (kind == "smooth_l1") return F::smooth_l1_loss(y, t, F::SmoothL1LossFuncOptions().beta(0.5));
    if (kind == "bce") return F::binary_cross_entropy(troupe::sigmoid(y), t);
    if (kind == "bce_logits") return F::binary_cross_entropy_with_logits(y, t);
    if (kind == "ce") return F::cross_entropy(y, t, F::CrossEntropyFuncOptions().label_smoothing(0.1));
    return F::nll_loss(troupe::log_softmax(y, 1), t);
  }
  std::string kind;
  std::shared_ptr<nn::LinearImpl> fc;
};

TEST(Trace, LossesBitForBit) {
  for (std::string kind : {"mse", "l1", "smooth_l1", "bce", "bce_logits", "ce", "nll"}) {
    SCOPED_TRACE(kind);
    default_generator().manual_seed(6);
    auto net = std::make_shared<LossNet>(kind);
    Tensor x = randn({4, 5});
    Tensor t = (kind == "ce" || kind == "nll") ? tensor({0, 2, 1, 2}).to(kInt64) : rand({4, 3});
    auto traced = trace(net, {x, t});
    const std::string g = traced->graph();
    const char* op = kind == "ce" ? "aten::cross_entropy_loss" : kind == "nll" ? "aten::nll_loss_nd" : nullptr;
    if (op) {
      EXPECT_NE(g.find(op), std::string::npos) << g;
    }
    expect_same_step(net, traced, {x, t});
  }
}

// forward's path depends on the values of x
struct Branchy : nn::Module {
  Branchy() { fc = register_module("fc", std::make_shared<nn::LinearImpl>(4, 4)); }
  Tensor forward(const Tensor& x) override {
    Tensor y = (*fc)(x);
    if (x.sum().item<double>() > 0) return troupe::relu(y);
    return troupe::sigmoid(y);
  }
  std::shared_ptr<nn::LinearImpl> fc;
};

TEST(Trace, CheckTraceCatchesDataDependentControlFlow) {
  default_generator().manual_seed(7);
  auto net = std::make_shared<Branchy>();
  Tensor x = rand({3, 4});  // positive: the relu branch
  try {
    trace(net, x);
    FAIL() << "check_trace did not catch the branch";
  } catch (const std::runtime_error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("[jit::trace] check_trace"), std::string::npos) << msg;
    EXPECT_NE(msg.find("data-dependent control flow"), std::string::npos) << msg;
    EXPECT_NE(msg.find("other inputs of the same shapes"), std::string::npos) << msg;
  }
  auto traced = trace(net, x, /*check_trace=*/false);  // kept on request: the relu path
  EXPECT_NE(traced->graph().find("aten::relu"), std::string::npos);
  EXPECT_EQ(traced->graph().find("aten::sigmoid"), std::string::npos);
}

struct Untraced : nn::Module {
  Untraced() { fc = register_module("fc", std::make_shared<nn::LinearImpl>(4, 4)); }
  Tensor forward(const Tensor& x) override { return troupe::relu((*fc)(x).abs()); }
  std::shared_ptr<nn::LinearImpl> fc;
};

TEST(Trace, AnOpTheTracerDoesNotRecordIsNamed) {
  auto net = std::make_shared<Untraced>();
  try {
    trace(net, randn({2, 4}));
    FAIL() << "the untraced abs went unnoticed";
  } catch (const std::runtime_error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("aten::relu"), std::string::npos) << msg;
    EXPECT_NE(msg.find("AbsBackward0"), std::string::npos) << msg;
  }
}

TEST(Trace, ArgumentErrors) {
  EXPECT_THROW(trace(std::shared_ptr<nn::Module>(), randn({2})), std::invalid_argument);
  auto net = std::make_shared<testing::MLP>();
  EXPECT_THROW(trace(net, Tensor()), std::invalid_argument);
  auto traced = trace(net, randn({16, 32}));
  try {
    traced->forward_args({nn::Value(randn({1, 32})), nn::Value(randn({1, 32}))}, {});
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "[jit] MLP.forward expected 1 argument(s), got 2");
  }
}

TEST(Trace, OtherBatchSizesRunThroughTheSameGraph) {
  auto net = std::make_shared<testing::MLP>();
  auto traced = trace(net, randn({16, 32}));
  Tensor x = randn({3, 32});
  EXPECT_TRUE(equal(net->forward(x), traced->forward(x)));
}

}  // namespace
}  // namespace troupe::jit
