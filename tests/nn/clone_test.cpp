// Module::clone(), PyTorch's copy.deepcopy(module): every built-in layer copies with equal values and
// storage of its own, gradients, requires_grad, buffers, training flags and hooks come along, what is
// shared stays shared (deepcopy's memo), no random numbers are drawn, and a module that is not
// nn::Cloneable says so.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <stdexcept>
#include <typeinfo>
#include <string>
#include <utility>
#include <vector>

#include <troupe/nn/nn.h>
#include <troupe/tensor/autograd.h>
#include <troupe/tensor/ops.h>

namespace {

using namespace troupe;

// Every parameter and buffer of a module tree by dotted name (undefined entries left out).
std::vector<std::pair<std::string, Tensor>> tensors_of(const nn::Module& m) {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& [k, t] : m.named_parameters()) out.emplace_back("param " + k, t);
  for (const auto& [k, t] : m.named_buffers()) out.emplace_back("buffer " + k, t);
  return out;
}

// Fills every tensor of the tree with `v` (in place, outside autograd).
void fill_all(const nn::Module& m, double v) {
  NoGradGuard no_grad;
  for (auto& [k, t] : tensors_of(m)) t.fill_(v);
}

// Checks that `copy` is a deep copy of `orig`: same printed form, same names, equal values, no
// tensor shared; and that writing either leaves the other alone.
void expect_deep_copy(nn::Module& orig, nn::Module& copy, const std::string& what) {
  SCOPED_TRACE(what);
  EXPECT_EQ(copy.repr(), orig.repr());
  EXPECT_EQ(copy.name(), orig.name());
  EXPECT_EQ(copy.is_training(), orig.is_training());
  auto a = tensors_of(orig), b = tensors_of(copy);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(orig.state_dict().keys(), copy.state_dict().keys());
  std::vector<Tensor> snapshot;
  for (size_t i = 0; i < a.size(); ++i) {
    SCOPED_TRACE(a[i].first);
    EXPECT_EQ(a[i].first, b[i].first);
    const Tensor &x = a[i].second, &y = b[i].second;
    EXPECT_FALSE(x.is_same(y));
    EXPECT_EQ(x.dtype(), y.dtype());
    EXPECT_TRUE(equal(x, y));
    EXPECT_EQ(x.requires_grad(), y.requires_grad());
    if (x.numel() > 0) {
      EXPECT_NE(x.data_ptr(), y.data_ptr());
    }
    snapshot.push_back(x.clone());
  }
  // writing the copy leaves the original alone, and the other way round
  fill_all(copy, 7);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(equal(a[i].second, snapshot[i])) << a[i].first;
  fill_all(orig, -3);
  for (size_t i = 0; i < b.size(); ++i)
    EXPECT_TRUE(equal(b[i].second, full_like(b[i].second, 7))) << b[i].first;
}

// Random values in U(0.5, 1.5) in every floating parameter and buffer (positive, for running_var),
// so that a copy made by re-initialising would differ from the original.
void randomize(const nn::Module& m) {
  for (auto& [k, t] : tensors_of(m))
    if (t.is_floating_point()) nn::init::uniform_(t, 0.5, 1.5);
}

struct LayerCase {
  std::string name;
  std::function<nn::ModulePtr()> make;
  Tensor input;  // undefined: not callable with one tensor
};

std::vector<LayerCase> layer_cases() {
  manual_seed(3);
  Tensor x = randn({4, 6});
  Tensor img = randn({2, 3, 6, 6});
  using namespace nn;
  return {
      {"Linear", [] { return std::make_shared<LinearImpl>(6, 3); }, x},
      {"Linear(bias=False)", [] { return std::make_shared<LinearImpl>(6, 3, false); }, x},
      {"Identity", [] { return std::make_shared<IdentityImpl>(); }, x},
      {"Flatten", [] { return std::make_shared<FlattenImpl>(); }, img},
      {"Unflatten", [] { return std::make_shared<UnflattenImpl>(1, std::vector<int64_t>{2, 3}); }, x},
      {"ReLU", [] { return std::make_shared<ReLUImpl>(); }, x},
      {"LeakyReLU", [] { return std::make_shared<LeakyReLUImpl>(0.2); }, x},
      {"ELU", [] { return std::make_shared<ELUImpl>(0.5); }, x},
      {"GELU", [] { return std::make_shared<GELUImpl>("tanh"); }, x},
      {"SiLU", [] { return std::make_shared<SiLUImpl>(); }, x},
      {"Tanh", [] { return std::make_shared<TanhImpl>(); }, x},
      {"Sigmoid", [] { return std::make_shared<SigmoidImpl>(); }, x},
      {"Softmax", [] { return std::make_shared<SoftmaxImpl>(1); }, x},
      {"LogSoftmax", [] { return std::make_shared<LogSoftmaxImpl>(1); }, x},
      {"Dropout", [] { return std::make_shared<DropoutImpl>(0.3); }, Tensor()},
      {"Embedding", [] { return std::make_shared<EmbeddingImpl>(10, 4, 2); }, Tensor()},
      {"Conv2d", [] { return std::make_shared<Conv2dImpl>(3, 4, 3, 1, 1); }, img},
      {"MaxPool2d", [] { return std::make_shared<MaxPool2dImpl>(2); }, img},
      {"AvgPool2d", [] { return std::make_shared<AvgPool2dImpl>(3, 2, 1); }, img},
      {"LayerNorm", [] { return std::make_shared<LayerNormImpl>(6); }, x},
      {"BatchNorm1d", [] { return std::make_shared<BatchNorm1dImpl>(6); }, x},
      {"BatchNorm2d", [] { return std::make_shared<BatchNorm2dImpl>(3, 1e-3, std::nullopt); }, img},
      {"MSELoss", [] { return std::make_shared<MSELossImpl>(); }, Tensor()},
      {"L1Loss", [] { return std::make_shared<L1LossImpl>(); }, Tensor()},
      {"SmoothL1Loss", [] { return std::make_shared<SmoothL1LossImpl>(); }, Tensor()},
      {"HuberLoss", [] { return std::make_shared<HuberLossImpl>(); }, Tensor()},
      {"CrossEntropyLoss", [] { return std::make_shared<CrossEntropyLossImpl>(CrossEntropyLossOptions().weight(rand({5}))); },
       Tensor()},
      {"NLLLoss", [] { return std::make_shared<NLLLossImpl>(NLLLossOptions().weight(rand({5}))); }, Tensor()},
      {"BCELoss", [] { return std::make_shared<BCELossImpl>(BCELossOptions().weight(rand({6}))); }, Tensor()},
      {"BCEWithLogitsLoss",
       [] {
         return std::make_shared<BCEWithLogitsLossImpl>(BCEWithLogitsLossOptions().weight(rand({6})).pos_weight(rand({6})));
       },
       Tensor()},
      {"Sequential",
       [] { return std::make_shared<SequentialImpl>(std::make_shared<LinearImpl>(6, 5), std::make_shared<ReLUImpl>(),
                                                std::make_shared<BatchNorm1dImpl>(5), std::make_shared<LinearImpl>(5, 2)); },
       x},
      {"ModuleList", [] { return std::make_shared<ModuleListImpl>(ModuleListImpl{std::make_shared<LinearImpl>(2, 2), std::make_shared<TanhImpl>()}); },
       Tensor()},
      {"ModuleDict",
       [] { return std::make_shared<ModuleDictImpl>(ModuleDictImpl{{"fc", std::make_shared<LinearImpl>(2, 3)}, {"act", std::make_shared<ReLUImpl>()}}); },
       Tensor()},
      {"ParameterList", [] { return std::make_shared<ParameterListImpl>(ParameterListImpl{randn({2, 3}), randn({4})}); }, Tensor()},
      {"ParameterDict",
       [] { return std::make_shared<ParameterDictImpl>(std::vector<std::pair<std::string, Tensor>>{{"b", randn({3})}, {"a", randn({2, 2})}}); },
       Tensor()},
  };
}

TEST(Clone, EveryBuiltInLayerCopiesValuesIntoStorageOfItsOwn) {
  for (const auto& c : layer_cases()) {
    auto orig = c.make();
    randomize(*orig);
    auto copy = orig->clone();
    ASSERT_TRUE(copy);
    EXPECT_NE(copy.get(), orig.get());
    EXPECT_EQ(typeid(*copy), typeid(*orig)) << c.name;
    if (c.input.defined()) {
      orig->eval();
      copy->eval();
      EXPECT_TRUE(equal((*copy)(c.input), (*orig)(c.input))) << c.name;
    }
    expect_deep_copy(*orig, *copy, c.name);
  }
}

TEST(Clone, LayerMembersPointIntoTheCopy) {
  auto lin = std::make_shared<nn::LinearImpl>(3, 2);
  auto lin2 = std::dynamic_pointer_cast<nn::LinearImpl>(lin->clone());
  ASSERT_TRUE(lin2);
  EXPECT_TRUE(lin2->weight.is_same(lin2->get_parameter("weight")));
  EXPECT_TRUE(lin2->bias.is_same(lin2->get_parameter("bias")));
  EXPECT_EQ(lin2->options.in_features(), 3);
  EXPECT_EQ(lin2->options.out_features(), 2);

  auto bn = std::make_shared<nn::BatchNorm2dImpl>(3);
  auto bn2 = std::dynamic_pointer_cast<nn::BatchNorm2dImpl>(bn->clone());
  ASSERT_TRUE(bn2);
  EXPECT_TRUE(bn2->running_mean.is_same(bn2->get_buffer("running_mean")));
  EXPECT_TRUE(bn2->num_batches_tracked.is_same(bn2->get_buffer("num_batches_tracked")));

  // a loss weight given in the options is the module's own buffer; the copy's is a separate tensor
  Tensor w = rand({4});
  auto ce = std::make_shared<nn::CrossEntropyLossImpl>(nn::CrossEntropyLossOptions().weight(w));
  EXPECT_TRUE(ce->weight.is_same(w));
  auto ce2 = std::dynamic_pointer_cast<nn::CrossEntropyLossImpl>(ce->clone());
  EXPECT_FALSE(ce2->weight.is_same(w));
  EXPECT_TRUE(ce2->weight.is_same(ce2->get_buffer("weight")));
  EXPECT_TRUE(equal(ce2->weight, w));

  // Embedding built on a given table: the copy's table is its own
  Tensor table = randn({5, 3});
  auto emb = nn::Embedding::from_pretrained(table, false);
  auto emb2 = std::dynamic_pointer_cast<nn::EmbeddingImpl>(emb->clone());
  EXPECT_TRUE(emb2->weight.is_same(emb2->get_parameter("weight")));
  EXPECT_NE(emb2->weight.data_ptr(), table.data_ptr());
  EXPECT_TRUE(equal(emb2->weight, table));
  EXPECT_TRUE(emb2->weight.requires_grad());
}

TEST(Clone, RequiresGradAndGradientsAreCopied) {
  manual_seed(0);
  auto lin = std::make_shared<nn::LinearImpl>(4, 3);
  nn::functional::mse_loss((*lin)(randn({5, 4})), zeros({5, 3})).backward();
  lin->bias.requires_grad_(false);  // the bias keeps the gradient it has
  auto copy = std::dynamic_pointer_cast<nn::LinearImpl>(lin->clone());
  EXPECT_TRUE(copy->weight.requires_grad());
  EXPECT_FALSE(copy->bias.requires_grad());
  ASSERT_TRUE(copy->weight.grad().defined());
  EXPECT_TRUE(equal(copy->weight.grad(), lin->weight.grad()));
  EXPECT_NE(copy->weight.grad().data_ptr(), lin->weight.grad().data_ptr());
  EXPECT_TRUE(equal(copy->bias.grad(), lin->bias.grad()));
  EXPECT_TRUE(copy->weight.is_leaf());

  lin->zero_grad();
  auto copy2 = std::dynamic_pointer_cast<nn::LinearImpl>(lin->clone());
  EXPECT_FALSE(copy2->weight.grad().defined());
  // the copy's gradients accumulate on their own
  nn::functional::mse_loss((*copy2)(ones({2, 4})), zeros({2, 3})).backward();
  EXPECT_TRUE(copy2->weight.grad().defined());
  EXPECT_FALSE(lin->weight.grad().defined());
}

TEST(Clone, BatchNormRunningStatsAndTrainingFlag) {
  manual_seed(1);
  auto bn = std::make_shared<nn::BatchNorm1dImpl>(4, 1e-5, 0.3);
  for (int i = 0; i < 3; ++i) (*bn)(randn({8, 4}));
  bn->eval();
  auto copy = std::dynamic_pointer_cast<nn::BatchNorm1dImpl>(bn->clone());
  EXPECT_FALSE(copy->is_training());
  EXPECT_EQ(copy->num_batches_tracked.item<int64_t>(), 3);
  EXPECT_EQ(copy->num_batches_tracked.dtype(), kInt64);
  EXPECT_TRUE(equal(copy->running_mean, bn->running_mean));
  EXPECT_TRUE(equal(copy->running_var, bn->running_var));
  EXPECT_EQ(*copy->options.momentum(), 0.3);
  Tensor x = randn({5, 4});
  EXPECT_TRUE(equal((*copy)(x), (*bn)(x)));
  // training the copy moves only its statistics
  copy->train();
  (*copy)(randn({8, 4}));
  EXPECT_EQ(copy->num_batches_tracked.item<int64_t>(), 4);
  EXPECT_EQ(bn->num_batches_tracked.item<int64_t>(), 3);
  EXPECT_FALSE(equal(copy->running_mean, bn->running_mean));
}

TEST(Clone, TrainingFlagAtEveryLevel) {
  auto net = std::make_shared<nn::SequentialImpl>(std::make_shared<nn::LinearImpl>(2, 2), std::make_shared<nn::DropoutImpl>(),
                                              std::make_shared<nn::SequentialImpl>(std::make_shared<nn::ReLUImpl>()));
  net->eval();
  (*net)[1]->train();
  auto copy = std::dynamic_pointer_cast<nn::SequentialImpl>(net->clone());
  auto a = net->modules(), b = copy->modules();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i]->is_training(), b[i]->is_training()) << i;
    EXPECT_NE(a[i].get(), b[i].get());
  }
}

TEST(Clone, SharedSubmodulesAndParametersMapToOneCopy) {
  // copy.deepcopy(nn.Sequential(lin, lin)): both entries are the one copy of lin
  auto lin = std::make_shared<nn::LinearImpl>(3, 3);
  auto net = std::make_shared<nn::SequentialImpl>(lin, std::make_shared<nn::TanhImpl>(), lin);
  auto copy = std::dynamic_pointer_cast<nn::SequentialImpl>(net->clone());
  EXPECT_EQ((*copy)[0].get(), (*copy)[2].get());
  EXPECT_NE((*copy)[0].get(), lin.get());
  EXPECT_EQ(copy->parameters().size(), 2u);  // deduplicated, as in the original
  EXPECT_EQ(copy->state_dict().keys(), net->state_dict().keys());
  Tensor x = randn({2, 3});
  EXPECT_TRUE(equal((*copy)(x), (*net)(x)));

  // one tensor under two names
  Tensor p = randn({2}).requires_grad_();
  auto plist = std::make_shared<nn::ParameterListImpl>(nn::ParameterListImpl{p, p});
  EXPECT_TRUE((*plist)[0].is_same((*plist)[1]));
  auto pcopy = std::dynamic_pointer_cast<nn::ParameterListImpl>(plist->clone());
  EXPECT_TRUE((*pcopy)[0].is_same((*pcopy)[1]));
  EXPECT_FALSE((*pcopy)[0].is_same(p));
  EXPECT_EQ(pcopy->parameters().size(), 1u);
}

// A user module as in the modules note: options, children and tensors registered in reset().
struct NetOptions {
  int64_t hidden = 5;
};

class Net : public nn::Cloneable<Net> {
 public:
  explicit Net(NetOptions o = {}) : options(o) { reset(); }
  void reset() override {
    fc1 = register_module("fc1", std::make_shared<nn::LinearImpl>(4, options.hidden));
    bn = register_module("bn", std::make_shared<nn::BatchNorm1dImpl>(options.hidden));
    // a plain Module child made here: filled in place by clone()
    block = register_module("block", std::make_shared<nn::Module>("Block"));
    block_w = block->register_parameter("w", randn({options.hidden, 2}));
    scale = register_parameter("scale", ones({1}));
    steps = register_buffer("steps", zeros({}, kInt64));
    scratch = register_buffer("scratch", zeros({3}), /*persistent=*/false);
  }
  Tensor forward(const Tensor& x) override {
    steps.add_(1);
    return (*bn)((*fc1)(x)).relu().matmul(block_w) * scale;
  }
  NetOptions options;
  std::shared_ptr<nn::LinearImpl> fc1;
  std::shared_ptr<nn::BatchNorm1dImpl> bn;
  nn::ModulePtr block;
  Tensor block_w, scale, steps, scratch;
};

TEST(Clone, UserModuleWithChildrenMadeInReset) {
  manual_seed(4);
  auto net = std::make_shared<Net>(NetOptions{6});
  (*net)(randn({8, 4}));
  (*net)(randn({8, 4}));
  {
    NoGradGuard no_grad;
    net->scale.fill_(1.5);
    net->scratch.fill_(2);
  }
  net->eval();
  auto copy = std::dynamic_pointer_cast<Net>(net->clone());
  ASSERT_TRUE(copy);
  EXPECT_EQ(copy->options.hidden, 6);
  // the members are the copy's own children and tensors
  EXPECT_EQ(copy->fc1.get(), copy->get_submodule("fc1").get());
  EXPECT_EQ(copy->bn.get(), copy->get_submodule("bn").get());
  EXPECT_EQ(copy->block.get(), copy->get_submodule("block").get());
  EXPECT_NE(copy->fc1.get(), net->fc1.get());
  EXPECT_TRUE(copy->block_w.is_same(copy->get_parameter("block.w")));
  EXPECT_TRUE(copy->steps.is_same(copy->get_buffer("steps")));
  EXPECT_EQ(copy->steps.item<int64_t>(), 2);
  EXPECT_EQ(copy->block->name(), "Block");
  // persistence kept: scratch is a buffer but not in the state_dict
  EXPECT_FALSE(copy->is_persistent_buffer("scratch"));
  EXPECT_TRUE(equal(copy->scratch, full({3}, 2.0)));
  EXPECT_EQ(copy->state_dict().keys(), net->state_dict().keys());
  Tensor x = randn({3, 4});
  EXPECT_TRUE(equal((*copy)(x), (*net)(x)));
  expect_deep_copy(*net, *copy, "Net");
}

TEST(Clone, SequentialOfLayersPrintsAndRunsAsTheOriginal) {
  manual_seed(5);
  auto net = std::make_shared<nn::SequentialImpl>(
      std::make_shared<nn::Conv2dImpl>(1, 2, 3), std::make_shared<nn::BatchNorm2dImpl>(2), std::make_shared<nn::ReLUImpl>(),
      std::make_shared<nn::MaxPool2dImpl>(2), std::make_shared<nn::FlattenImpl>(), std::make_shared<nn::LinearImpl>(8, 3),
      std::make_shared<nn::LogSoftmaxImpl>(1));
  Tensor x = randn({4, 1, 6, 6});
  (*net)(x);
  auto copy = net->clone();
  EXPECT_EQ(copy->repr(), net->repr());
  EXPECT_TRUE(equal((*copy)(x), (*net)(x)));  // both in training mode: batch statistics, same updates
  expect_deep_copy(*net, *copy, "Sequential");
}

TEST(Clone, ModuleListIteratesTheCopysChildren) {
  auto list = std::make_shared<nn::ModuleListImpl>(nn::ModuleListImpl{std::make_shared<nn::LinearImpl>(2, 2), std::make_shared<nn::ReLUImpl>()});
  auto copy = std::dynamic_pointer_cast<nn::ModuleListImpl>(list->clone());
  std::vector<nn::ModulePtr> seen(copy->begin(), copy->end());
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].get(), (*copy)[0].get());
  EXPECT_EQ(seen[1].get(), (*copy)[1].get());
  EXPECT_NE(seen[0].get(), (*list)[0].get());
}

TEST(Clone, ToDeviceAndDtype) {
  auto lin = std::make_shared<nn::LinearImpl>(3, 2);
  lin->to(kFloat64);
  auto copy = lin->clone(Device(kCPU));
  for (const auto& t : copy->parameters()) {
    EXPECT_EQ(t.dtype(), kFloat64);
    EXPECT_EQ(t.device(), Device(kCPU));
  }
  expect_deep_copy(*lin, *copy, "Linear to cpu");
}

TEST(Clone, HooksComeAlong) {
  int calls = 0;
  auto lin = std::make_shared<nn::LinearImpl>(2, 2);
  lin->register_forward_hook([&calls](nn::Module&, const nn::Args&, const nn::Value&) { ++calls; });
  auto copy = lin->clone();
  (*copy)(ones({1, 2}));
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(copy->num_forward_hooks(), 1u);
}

TEST(Clone, DrawsNoRandomNumbers) {
  auto net = std::make_shared<nn::SequentialImpl>(std::make_shared<nn::LinearImpl>(50, 40), std::make_shared<nn::EmbeddingImpl>(30, 8),
                                              std::make_shared<nn::Conv2dImpl>(3, 4, 3));
  auto user = std::make_shared<Net>();
  manual_seed(11);
  Tensor expected = randn({4});
  manual_seed(11);
  auto copy = net->clone();
  auto user_copy = user->clone();
  EXPECT_TRUE(equal(randn({4}), expected));
}

class Plain : public nn::Module {
 public:
  Plain() { register_parameter("w", zeros({2})); }
};

TEST(Clone, ModuleThatIsNotCloneableThrows) {
  auto plain = std::make_shared<Plain>();
  try {
    plain->clone();
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()),
              "[clone] clone() is not implemented for Plain: derive it from nn::Cloneable<YourModule> and register "
              "its parameters, buffers and submodules in reset()");
  }
  // inside a container, the plain module is named
  auto net = std::make_shared<nn::SequentialImpl>(std::make_shared<nn::LinearImpl>(2, 2), plain);
  EXPECT_THROW(net->clone(), std::runtime_error);
}

TEST(Clone, ResetThatDisagreesWithTheModuleThrows) {
  auto lin = std::make_shared<nn::LinearImpl>(3, 2);
  lin->weight.set_data(zeros({5, 3}));  // no longer the shape the options describe
  try {
    lin->clone();
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()),
              "[clone] Linear.reset() registered parameter 'weight' of shape (2, 3), but the module being cloned has "
              "shape (5, 3)");
  }
}

}  // namespace
