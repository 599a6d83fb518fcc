// Module holders, written as libtorch code is (`torch::nn::Linear fc(4, 3)`, TORCH_MODULE renamed
// TROUPE_MODULE, Sequential of holders, AnyModule, Functional, the containers) and compiled against troupe
// through `namespace torch = troupe;`. Each case checks a value (shapes, identities, closed forms,
// PyTorch's printed form), so a holder that compiles but misroutes fails.
#include <gtest/gtest.h>

#include <memory>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include <troupe/nn/nn.h>
#include <troupe/tensor/ops.h>

namespace torch = troupe;

namespace {

using Shape = std::vector<int64_t>;
Shape shape(const torch::Tensor& t) { return t.sizes().vec(); }

// ---- user modules as libtorch users write them

struct NetImpl : torch::nn::Module {
  NetImpl(int64_t in, int64_t hidden, int64_t out) {
    fc1 = register_module("fc1", torch::nn::Linear(in, hidden));
    fc2 = register_module("fc2", torch::nn::Linear(hidden, out));
    scale = register_parameter("scale", torch::ones({1}));
  }
  // a forward of its own signature (not the virtual one-tensor forward)
  torch::Tensor forward(torch::Tensor x, double shift) { return fc2(torch::relu(fc1(x) + shift)) * scale; }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  torch::Tensor scale;
};
TROUPE_MODULE(Net);

struct PairImpl : torch::nn::Module {
  PairImpl() { lin = register_module("lin", torch::nn::Linear(3, 3)); }
  std::tuple<torch::Tensor, torch::Tensor> forward(const torch::Tensor& a, const torch::Tensor& b) {
    return {lin(a), lin(b) * 2};
  }
  torch::nn::Linear lin{nullptr};
};
TROUPE_MODULE(Pair);

struct BlockImpl : torch::nn::Cloneable<BlockImpl> {
  BlockImpl() { reset(); }
  void reset() override { fc = register_module("fc", torch::nn::Linear(2, 2)); }
  torch::Tensor forward(const torch::Tensor& x) override { return torch::tanh(fc(x)); }
  torch::nn::Linear fc{nullptr};
};
TROUPE_MODULE(Block);

struct NoDefaultImpl : torch::nn::Module {
  explicit NoDefaultImpl(int n) : n(n) {}
  torch::Tensor forward(torch::Tensor x) { return x * n; }
  int n;
};
TROUPE_MODULE(NoDefault);

}  // namespace

TEST(Holder, ConstructsTheModuleFromItsArguments) {
  torch::nn::Linear fc(4, 3);
  EXPECT_EQ(shape(fc->weight), (Shape{3, 4}));
  EXPECT_EQ(shape(fc->bias), (Shape{3}));
  torch::nn::Linear no_bias(torch::nn::LinearOptions(4, 3).bias(false));
  EXPECT_FALSE(no_bias->bias.defined());
  torch::nn::Conv2d conv(torch::nn::Conv2dOptions(1, 2, 3).stride(1).padding(1));
  EXPECT_EQ(shape(conv(torch::randn({1, 1, 5, 5}))), (Shape{1, 2, 5, 5}));
  // the holder and the module it holds are one object: operator*, get() and ptr() agree
  EXPECT_EQ(&*fc, fc.get());
  EXPECT_EQ(fc.ptr().get(), fc.get());
  EXPECT_EQ(fc->name(), "Linear");
}

TEST(Holder, CallRunsForwardWithHooks) {
  torch::nn::Linear fc(2, 2);
  torch::Tensor x = torch::randn({5, 2});
  EXPECT_TRUE(torch::allclose(fc(x), torch::matmul(x, fc->weight.t()) + fc->bias));
  int calls = 0;
  fc->register_forward_hook([&](torch::nn::Module&, const torch::nn::Args&, const torch::nn::Value&) { ++calls; });
  fc(x);
  fc(x);
  EXPECT_EQ(calls, 2);  // the holder goes through call(), as PyTorch's __call__
  fc->forward(x);
  EXPECT_EQ(calls, 2);  // forward() itself runs no hooks
}

TEST(Holder, EmptyHolderIsNullUntilAssigned) {
  torch::nn::Linear fc{nullptr};
  EXPECT_TRUE(fc.is_empty());
  EXPECT_FALSE(static_cast<bool>(fc));
  try {
    fc->weight;
    FAIL() << "no throw";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "Accessing empty ModuleHolder");
  }
  fc = torch::nn::Linear(2, 3);
  EXPECT_FALSE(fc.is_empty());
  torch::nn::Linear other = nullptr;
  EXPECT_TRUE(other.is_empty());
  // copies share the module, as libtorch's holders (and shared_ptr) do
  torch::nn::Linear alias = fc;
  EXPECT_EQ(alias.get(), fc.get());
}

TEST(Holder, MakeSharedOfTheImplStillWorks) {
  auto fc = std::make_shared<torch::nn::LinearImpl>(4, 2);
  torch::nn::Linear held(fc);
  EXPECT_EQ(held.get(), fc.get());
  std::shared_ptr<torch::nn::Module> as_module = held;  // a holder converts to a module pointer
  EXPECT_EQ(as_module.get(), fc.get());
  EXPECT_EQ(as_module->as<torch::nn::Linear>(), fc.get());  // as<Holder>() names the Impl class
  EXPECT_EQ(as_module->as<torch::nn::Conv2d>(), nullptr);
}

TEST(Holder, UserModuleWithTypedForward) {
  torch::manual_seed(0);
  Net net(4, 8, 2);
  torch::Tensor x = torch::randn({3, 4});
  torch::Tensor y = net(x, 0.5);
  torch::Tensor expect = net->fc2->forward(torch::relu(net->fc1->forward(x) + 0.5)) * net->scale;
  EXPECT_TRUE(torch::allclose(y, expect));
  EXPECT_TRUE(torch::allclose(net->forward(x, 0.5), expect));
  // named as PyTorch names the class: "Net", not "NetImpl"
  EXPECT_EQ(net->name(), "Net");
  EXPECT_EQ(net->named_parameters().keys(),
            (std::vector<std::string>{"scale", "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}));
  // hooks see the typed call's arguments, and may replace them
  net->register_forward_pre_hook([](torch::nn::Module&, const torch::nn::Args& args) {
    return torch::nn::Args{args[0], torch::nn::Value(0.0)};
  });
  EXPECT_TRUE(torch::allclose(net(x, 0.5), net->forward(x, 0.0)));
  // wrong arity through the dynamic path is a clear error
  torch::nn::AnyModule any(Net(4, 8, 2));
  try {
    any.forward(x);
    FAIL() << "no throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "[Net] forward() takes 2 arguments but 1 was given");
  }
  // gradients flow through the typed call to every parameter
  net->zero_grad();
  net(x, 0.5).sum().backward();
  for (const auto& p : net->parameters()) EXPECT_TRUE(p.grad().defined());
}

TEST(Holder, TupleReturningForward) {
  Pair pair;
  torch::Tensor a = torch::randn({2, 3}), b = torch::randn({2, 3});
  auto [ya, yb] = pair(a, b);
  EXPECT_TRUE(torch::allclose(ya, pair->lin(a)));
  EXPECT_TRUE(torch::allclose(yb, pair->lin(b) * 2));
}

TEST(Holder, ModuleWithoutDefaultConstructor) {
  NoDefault m(3);
  EXPECT_TRUE(torch::equal(m(torch::ones({2})), torch::full({2}, 3.0)));
  NoDefault later = nullptr;  // `NoDefault later;` would not compile (static_assert)
  EXPECT_TRUE(later.is_empty());
}

TEST(Holder, CloneGivesAnIndependentCopy) {
  torch::nn::Linear fc(3, 3);
  auto copy = std::dynamic_pointer_cast<torch::nn::LinearImpl>(fc->clone());
  ASSERT_TRUE(copy);
  EXPECT_TRUE(torch::equal(copy->weight, fc->weight));
  { torch::NoGradGuard no_grad; copy->weight.fill_(0); }
  EXPECT_FALSE(torch::equal(copy->weight, fc->weight));
  // a user module that is Cloneable: the copy's holder members point into the copy
  Block block;
  auto block_copy = std::dynamic_pointer_cast<BlockImpl>(block->clone());
  ASSERT_TRUE(block_copy);
  EXPECT_EQ(block_copy->named_parameters().keys(), block->named_parameters().keys());
  EXPECT_NE(block_copy->fc.get(), block->fc.get());
  EXPECT_EQ(block_copy->fc.get(), block_copy->named_children()["fc"].get());
  EXPECT_TRUE(torch::equal(block_copy->fc->weight, block->fc->weight));
  torch::Tensor x = torch::randn({2, 2});
  EXPECT_TRUE(torch::allclose(block_copy->forward(x), block(x)));
  // a plain Module subclass can't be cloned, as in libtorch
  Net net(2, 2, 2);
  EXPECT_THROW(net->clone(), std::runtime_error);
}

TEST(Holder, PrintsAsPyTorch) {
  torch::nn::Sequential seq(torch::nn::Linear(2, 3), torch::nn::ReLU());
  std::ostringstream os;
  os << seq;
  EXPECT_EQ(os.str(),
            "Sequential(\n  (0): Linear(in_features=2, out_features=3, bias=True)\n  (1): ReLU()\n)");
}

// ---------------------------------------------------------------- Sequential

TEST(SequentialHolder, ConstructedFromHoldersPointersAndValues) {
  torch::nn::Sequential seq(torch::nn::Linear(3, 4), std::make_shared<torch::nn::ReLUImpl>(),
                            torch::nn::Linear(4, 2));
  EXPECT_EQ(seq->size(), 3u);
  torch::Tensor x = torch::randn({5, 3});
  torch::Tensor expect = seq->at<torch::nn::LinearImpl>(2).forward(torch::relu(seq->ptr<torch::nn::LinearImpl>(0)->forward(x)));
  EXPECT_TRUE(torch::allclose(seq(x), expect));
  EXPECT_TRUE(torch::allclose(seq->forward(x), expect));
  EXPECT_TRUE(torch::allclose(seq->forward<torch::Tensor>(x), expect));
  EXPECT_EQ(seq[1]->name(), "ReLU");
  EXPECT_EQ(seq->ptr(1)->name(), "ReLU");
  try {
    seq->ptr<torch::nn::Conv2dImpl>(0);
    FAIL() << "no throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()),
              "[Sequential] Attempted to cast module of type Linear to type troupe::nn::Conv2dImpl");
  }
}

TEST(SequentialHolder, NamedModulesAndPushBack) {
  torch::nn::Sequential seq({{"fc", torch::nn::Linear(2, 2)}, {"act", torch::nn::Tanh()}});
  EXPECT_EQ(seq->named_children().keys(), (std::vector<std::string>{"fc", "act"}));
  seq->push_back(torch::nn::Linear(2, 1));
  seq->push_back("out", torch::nn::Sigmoid());
  EXPECT_EQ(seq->named_children().keys(), (std::vector<std::string>{"fc", "act", "2", "out"}));
  torch::Tensor y = seq(torch::randn({4, 2}));
  EXPECT_EQ(shape(y), (Shape{4, 1}));
  EXPECT_TRUE((y > 0).all().item<bool>());
}

TEST(SequentialHolder, UserModulesAndFunctionalInside) {
  torch::manual_seed(1);
  torch::nn::Sequential seq(torch::nn::Linear(3, 3), torch::nn::Functional(torch::relu),
                            torch::nn::Functional(torch::leaky_relu, 0.5), NoDefault(2));
  torch::Tensor x = torch::randn({2, 3});
  torch::Tensor h = torch::relu(seq->ptr<torch::nn::LinearImpl>(0)->forward(x));
  EXPECT_TRUE(torch::allclose(seq(x), torch::leaky_relu(h, 0.5) * 2));
  EXPECT_EQ(seq[1]->name(), "Functional");
}

// ---------------------------------------------------------------- AnyModule

TEST(AnyModuleHolder, ForwardGetAndPtr) {
  torch::nn::AnyModule any(torch::nn::Linear(3, 2));
  torch::Tensor x = torch::randn({4, 3});
  torch::nn::Linear fc = any.get<torch::nn::Linear>();
  EXPECT_TRUE(torch::allclose(any.forward(x), fc(x)));
  EXPECT_TRUE(any.any_forward(x).is_tensor());
  EXPECT_EQ(any.ptr().get(), fc.get());
  EXPECT_EQ(any.ptr<torch::nn::LinearImpl>().get(), fc.get());
  EXPECT_EQ(&any.get<torch::nn::LinearImpl>(), fc.get());
  EXPECT_TRUE(any.type_info() == typeid(torch::nn::LinearImpl));
  EXPECT_THROW(any.get<torch::nn::Conv2d>(), std::invalid_argument);
  torch::nn::AnyModule copy = any.clone();
  EXPECT_NE(copy.ptr().get(), any.ptr().get());
  EXPECT_TRUE(torch::allclose(copy.forward(x), any.forward(x)));
  torch::nn::AnyModule empty;
  EXPECT_TRUE(empty.is_empty());
  EXPECT_THROW(empty.forward(x), std::runtime_error);
  // a typed user forward, with its own argument and result types
  torch::nn::AnyModule pair(Pair{});
  auto out = pair.forward<std::tuple<torch::Tensor, torch::Tensor>>(x.narrow(1, 0, 3), x.narrow(1, 0, 3));
  EXPECT_EQ(shape(std::get<1>(out)), (Shape{4, 3}));
}

// ---------------------------------------------------------------- ModuleList / ModuleDict

TEST(ModuleListHolder, LibtorchStyle) {
  torch::nn::ModuleList list(torch::nn::Linear(3, 4), torch::nn::BatchNorm1d(4), torch::nn::Dropout(0.5));
  EXPECT_EQ(list->size(), 3u);
  list->push_back(torch::nn::Linear(4, 1));
  EXPECT_EQ(list->size(), 4u);
  EXPECT_EQ(list->ptr<torch::nn::LinearImpl>(3)->weight.size(0), 1);
  EXPECT_EQ(list->at<torch::nn::BatchNorm1dImpl>(1).options.num_features(), 4);
  EXPECT_EQ(list[0]->as<torch::nn::Linear>()->options.out_features(), 4);
  std::vector<std::string> names;
  for (const auto& m : *list) names.push_back(m->name());
  EXPECT_EQ(names, (std::vector<std::string>{"Linear", "BatchNorm1d", "Dropout", "Linear"}));
  EXPECT_EQ(list->named_parameters().size(), 6u);
}

TEST(ModuleDictHolder, LibtorchStyle) {
  torch::OrderedDict<std::string, std::shared_ptr<torch::nn::Module>> ordered;
  ordered.insert("linear", torch::nn::Linear(10, 3).ptr());
  ordered.insert("conv", torch::nn::Conv2d(1, 2, 3).ptr());
  ordered.insert("dropout", torch::nn::Dropout(0.5).ptr());
  torch::nn::ModuleDict dict(ordered);
  EXPECT_EQ(dict->size(), 3u);
  EXPECT_EQ(dict->keys(), (std::vector<std::string>{"linear", "conv", "dropout"}));
  EXPECT_EQ(dict["conv"]->name(), "Conv2d");
  EXPECT_EQ(dict->at<torch::nn::LinearImpl>("linear").options.in_features(), 10);
  auto items = dict->items();
  EXPECT_EQ(items[2].first, "dropout");
  std::vector<std::string> keys;
  for (const auto& item : *dict) keys.push_back(item.key());
  EXPECT_EQ(keys, dict->keys());
  torch::nn::ModuleDict more(std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>>{
      {"lstm_like", torch::nn::Linear(2, 2).ptr()}});
  dict->update(more->items());
  EXPECT_TRUE(dict->contains("lstm_like"));
  EXPECT_THROW(dict["missing"], std::out_of_range);
}

// ---------------------------------------------------------------- ParameterList / ParameterDict

TEST(ParameterListHolder, LibtorchStyle) {
  torch::nn::ParameterList list(torch::randn({1, 2}), torch::randn({1, 3}));
  EXPECT_EQ(list->size(), 2u);
  list->append(torch::randn({1, 4}));
  EXPECT_EQ(shape(list[2]), (Shape{1, 4}));
  EXPECT_EQ(shape(list->at(1)), (Shape{1, 3}));
  EXPECT_TRUE(list[0].requires_grad());
  std::vector<std::string> keys;
  for (const auto& pair : *list) keys.push_back(pair.key());
  EXPECT_EQ(keys, (std::vector<std::string>{"0", "1", "2"}));
  torch::nn::ParameterList other(torch::randn({2}));
  list->extend(*other);
  EXPECT_EQ(list->size(), 4u);
  EXPECT_FALSE(list->is_empty());
}

TEST(ParameterDictHolder, LibtorchStyle) {
  torch::OrderedDict<std::string, torch::Tensor> params;
  params.insert("A", torch::ones({2}));
  params.insert("B", torch::zeros({3}));
  torch::nn::ParameterDict dict(params);
  EXPECT_EQ(dict->keys(), (std::vector<std::string>{"A", "B"}));  // the OrderedDict's order, unsorted
  dict->insert("C", torch::full({1}, 2.0));
  EXPECT_TRUE(dict->contains("C"));
  EXPECT_TRUE(torch::equal(dict["C"], torch::full({1}, 2.0)));
  EXPECT_TRUE(dict->get("A").requires_grad());
  torch::Tensor popped = dict->pop("B");
  EXPECT_EQ(shape(popped), (Shape{3}));
  EXPECT_EQ(dict->size(), 2u);
  torch::nn::ParameterDict other(params);
  dict->update(*other);
  EXPECT_EQ(dict->keys(), (std::vector<std::string>{"A", "C", "B"}));
  std::vector<std::string> keys;
  for (const auto& item : *dict) keys.push_back(item.key());
  EXPECT_EQ(keys, dict->keys());
}
