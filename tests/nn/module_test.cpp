// The examples of the modules note and the Module reference page, written as in C++, checked against
// PyTorch 1.13 (tests/fixtures/gen_nn_module.py -> nn_module.txt, nn_module_text.txt).
// (Over 800 lines, kept whole: it follows the reference page section by section, with one set of
// fixture readers and example modules.)
#include <gtest/gtest.h>

#include <sstream>

#include <troupe/nn/module.h>
#include <troupe/nn/modules/activation.h>
#include <troupe/nn/modules/container.h>
#include <troupe/nn/modules/linear.h>
#include <troupe/nn/registry.h>
#include <troupe/tensor/autograd.h>
#include <troupe/tensor/ops.h>

#include "common/fixtures.h"
#include "common/text_cases.h"

using namespace troupe;
using troupe::testing::Fixtures;
using troupe::testing::tensors_close;

namespace {

const Fixtures& fx() {
  static Fixtures f = Fixtures::load("nn_module.txt");
  return f;
}
const std::string& text(const std::string& name) {
  static auto cases = troupe::testing::load_text_cases("nn_module_text.txt");
  auto it = cases.find(name);
  if (it == cases.end()) throw std::runtime_error("no text case " + name);
  return it->second;
}
std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "\n" : "") + v[i];
  return s;
}
template <class V>
std::string keys_of(const troupe::OrderedDict<std::string, V>& d) {
  return join(d.keys());
}

// class MyLinear(nn.Module): weight = randn(in, out), bias = randn(out); forward: input @ weight + bias
class MyLinear : public nn::Module {
 public:
  MyLinear(int64_t in_features, int64_t out_features) {
    weight = register_parameter("weight", randn({in_features, out_features}));
    bias = register_parameter("bias", randn({out_features}));
  }
  Tensor forward(const Tensor& input) override { return input.matmul(weight) + bias; }
  Tensor weight, bias;
};

class Net : public nn::Module {
 public:
  Net() {
    l0 = register_module("l0", std::make_shared<MyLinear>(4, 3));
    l1 = register_module("l1", std::make_shared<MyLinear>(3, 1));
  }
  Tensor forward(const Tensor& x) override { return (*l1)(relu((*l0)(x))); }
  std::shared_ptr<MyLinear> l0, l1;
};

class BigNet : public nn::Module {
 public:
  BigNet() {
    l1 = register_module("l1", std::make_shared<MyLinear>(5, 4));
    net = register_module("net", std::make_shared<Net>());
  }
  Tensor forward(const Tensor& x) override { return (*net)((*l1)(x)); }
  std::shared_ptr<MyLinear> l1;
  std::shared_ptr<Net> net;
};

// forward(x, act): two arguments, so it overrides forward_args
class DynamicNet : public nn::Module {
 public:
  explicit DynamicNet(int num_layers) {
    std::vector<nn::ModulePtr> layers;
    for (int i = 0; i < num_layers; ++i) layers.push_back(std::make_shared<MyLinear>(4, 4));
    linears = register_module("linears", std::make_shared<nn::ModuleListImpl>(layers));
    activations = register_module(
        "activations", std::make_shared<nn::ModuleDictImpl>(std::initializer_list<std::pair<std::string, nn::ModulePtr>>{
                           {"relu", std::make_shared<nn::ReLUImpl>()}, {"lrelu", std::make_shared<nn::LeakyReLUImpl>()}}));
    final = register_module("final", std::make_shared<MyLinear>(4, 1));
  }
  nn::Value forward_args(const nn::Args& args, const nn::Kwargs&) override {
    Tensor x = args.at(0).tensor();
    const std::string& act = args.at(1).str();
    for (const auto& linear : *linears) x = (*linear)(x);
    x = (*(*activations)[act])(x);
    return (*final)(x);
  }
  std::shared_ptr<nn::ModuleListImpl> linears;
  std::shared_ptr<nn::ModuleDictImpl> activations;
  std::shared_ptr<MyLinear> final;
};

class RunningMean : public nn::Module {
 public:
  explicit RunningMean(int64_t num_features, double momentum = 0.9) : momentum(momentum) {
    mean = register_buffer("mean", zeros({num_features}));
  }
  Tensor forward(const Tensor& x) override {
    mean.set_data(momentum * mean + (1.0 - momentum) * x);  // self.mean = ...
    return mean;
  }
  double momentum;
  Tensor mean;
};

class StatefulModule : public nn::Module {
 public:
  StatefulModule() {
    param1 = register_parameter("param1", randn({2}));
    register_parameter("param2", randn({3}));
    register_parameter("param3", Tensor());
    std::vector<Tensor> plist;
    for (int i = 0; i < 3; ++i) plist.push_back(nn::Parameter(randn({2})));
    param_list = register_module("param_list", std::make_shared<nn::ParameterListImpl>(plist));
    Tensor foo = randn({3}), bar = randn({4});  // {'foo': ..., 'bar': ...} evaluates foo first
    param_dict = register_module("param_dict", std::make_shared<nn::ParameterDictImpl>(
                                                   std::map<std::string, Tensor>{{"foo", foo}, {"bar", bar}}));
    register_buffer("buffer1", randn({4}), /*persistent=*/true);
    register_buffer("buffer2", randn({5}), /*persistent=*/false);
    register_buffer("buffer3", Tensor());
    linear = register_module("linear", std::make_shared<nn::LinearImpl>(2, 3));
  }
  Tensor param1;
  std::shared_ptr<nn::ParameterListImpl> param_list;
  std::shared_ptr<nn::ParameterDictImpl> param_dict;
  std::shared_ptr<nn::LinearImpl> linear;
};

class ModalModule : public nn::Module {
 public:
  Tensor forward(const Tensor& x) override { return is_training() ? x + 1. : x; }
};

}  // namespace

// ---------------------------------------------------------------------------------------------------
// A Simple Custom Module

TEST(ModulesNote, MyLinearForwardAndNamedParameters) {
  manual_seed(0);
  auto m = std::make_shared<MyLinear>(4, 3);
  Tensor x = randn({4});
  EXPECT_TRUE(tensors_close(m->weight, fx().get("mylinear_weight"), 0, 0));
  EXPECT_TRUE(tensors_close(m->bias, fx().get("mylinear_bias"), 0, 0));
  EXPECT_TRUE(tensors_close(x, fx().get("mylinear_x"), 0, 0));
  Tensor y = (*m)(x);
  EXPECT_TRUE(tensors_close(y, fx().get("mylinear_out"), 1e-6, 1e-6));
  EXPECT_TRUE(y.requires_grad());
  EXPECT_EQ(keys_of(m->named_parameters()), "weight\nbias");
  for (const auto& [name, p] : m->named_parameters()) EXPECT_TRUE(p.requires_grad()) << name;
}

TEST(ModulesNote, SequentialOfMyLinear) {
  manual_seed(0);
  auto first = std::make_shared<MyLinear>(4, 3);  // (C++ evaluates arguments in no fixed order: draw in order)
  auto second = std::make_shared<MyLinear>(3, 1);
  auto net = std::make_shared<nn::SequentialImpl>(first, std::make_shared<nn::ReLUImpl>(), second);
  Tensor x = randn({4});
  EXPECT_TRUE(tensors_close(x, fx().get("seq_x"), 0, 0));
  EXPECT_TRUE(tensors_close((*net)(x), fx().get("seq_out"), 1e-6, 1e-6));
  EXPECT_EQ(net->repr(), text("seq_repr"));
  std::ostringstream os;
  os << *net;
  EXPECT_EQ(os.str(), text("seq_repr"));
}

TEST(ModulesNote, NetChildrenAndBigNetNamedModules) {
  auto net = std::make_shared<Net>();
  EXPECT_EQ(keys_of(net->named_children()), "l0\nl1");
  ASSERT_EQ(net->children().size(), 2u);
  EXPECT_EQ(net->children()[0].get(), net->l0.get());

  manual_seed(0);
  auto big = std::make_shared<BigNet>();
  auto mods = big->named_modules();
  EXPECT_EQ(keys_of(mods), text("bignet_named_modules"));
  EXPECT_EQ(mods.at("").get(), big.get());
  EXPECT_EQ(mods.at("net.l1").get(), big->net->l1.get());
  EXPECT_EQ(big->repr(), text("bignet_repr"));
  EXPECT_EQ(keys_of(big->named_children()), text("bignet_named_children"));
  EXPECT_EQ(big->modules().size(), 5u);
  // named_modules with a prefix
  EXPECT_EQ(keys_of(big->named_modules("model")), "model\nmodel.l1\nmodel.net\nmodel.net.l0\nmodel.net.l1");
}

TEST(ModulesNote, DynamicNetParameterNamesAndForward) {
  manual_seed(0);
  auto dyn = std::make_shared<DynamicNet>(3);
  Tensor x = randn({4});
  EXPECT_EQ(keys_of(dyn->named_parameters()), text("dynamic_param_names"));
  EXPECT_EQ(dyn->repr(), text("dynamic_repr"));
  Tensor relu_out = (*dyn)({x, "relu"});
  Tensor lrelu_out = (*dyn)({x, "lrelu"});
  EXPECT_TRUE(tensors_close(relu_out, fx().get("dynamic_out_relu"), 1e-5, 1e-6));
  EXPECT_TRUE(tensors_close(lrelu_out, fx().get("dynamic_out_lrelu"), 1e-5, 1e-6));
  // dynamic_net.to(dtype=torch.float64)
  dyn->to(kFloat64);
  for (const auto& p : dyn->parameters()) EXPECT_EQ(p.dtype(), kFloat64);
  Tensor y = (*dyn)({x.to(kFloat64), "relu"});
  EXPECT_EQ(y.dtype(), kFloat64);
  EXPECT_TRUE(tensors_close(y, fx().get("dynamic_out_relu"), 1e-5, 1e-6));
}

TEST(ModulesNote, ApplyInitWeights) {
  // @torch.no_grad() def init_weights(m): if type(m) == nn.Linear: m.weight.fill_(1.0)
  auto net = std::make_shared<nn::SequentialImpl>(std::make_shared<nn::LinearImpl>(2, 2), std::make_shared<nn::LinearImpl>(2, 2));
  std::vector<std::string> printed;
  net->apply([&](nn::Module& m) {
    NoGradGuard no_grad;
    printed.push_back(m.repr());
    if (auto* lin = m.as<nn::Linear>()) lin->weight.fill_(1.0);
  });
  ASSERT_EQ(printed.size(), 3u);  // children first, then the Sequential itself
  EXPECT_EQ(printed[0], "Linear(in_features=2, out_features=2, bias=True)");
  EXPECT_EQ(printed[1], "Linear(in_features=2, out_features=2, bias=True)");
  EXPECT_EQ(printed[2], text("apply_seq_repr"));
  for (const auto& [name, p] : net->named_parameters()) {
    if (name.find("weight") != std::string::npos) {
      EXPECT_TRUE(equal(p, ones({2, 2}))) << name;
    }
  }
}

TEST(ModulesNote, ModalModuleTrainAndEval) {
  auto m = std::make_shared<ModalModule>();
  Tensor x = randn({4});
  EXPECT_TRUE(m->is_training());
  EXPECT_TRUE(equal((*m)(x), x + 1.));
  m->eval();
  EXPECT_FALSE(m->is_training());
  EXPECT_TRUE(equal((*m)(x), x));
  m->train();
  EXPECT_TRUE(equal((*m)(x), x + 1.));
}

TEST(ModulesNote, RunningMeanStateDictRoundTrip) {
  manual_seed(0);
  auto m = std::make_shared<RunningMean>(4);
  for (int i = 0; i < 10; ++i) (*m)(randn({4}));
  auto sd = m->state_dict();
  EXPECT_EQ(keys_of(sd), "mean");
  EXPECT_TRUE(tensors_close(sd.at("mean"), fx().get("running_mean_mean"), 1e-6, 1e-7));
  auto loaded = std::make_shared<RunningMean>(4);
  loaded->load_state_dict(sd);
  EXPECT_TRUE(equal(m->mean, loaded->mean));
  // buffers are moved by to() as well
  m->to(kFloat64);
  EXPECT_EQ(m->mean.dtype(), kFloat64);
  EXPECT_EQ(m->named_buffers().at("mean").dtype(), kFloat64);
}

TEST(ModulesNote, StatefulModuleStateDict) {
  manual_seed(0);
  auto m = std::make_shared<StatefulModule>();
  auto sd = m->state_dict();
  EXPECT_EQ(keys_of(sd), text("stateful_keys"));
  for (const auto& [k, v] : sd) {
    EXPECT_TRUE(tensors_close(v, fx().get("stateful_" + k), 1e-7, 0)) << k;
    EXPECT_FALSE(v.requires_grad()) << k;  // detached unless keep_vars
  }
  EXPECT_TRUE(tensors_close(m->get_buffer("buffer2"), fx().get("stateful_buffer2"), 0, 0));
  EXPECT_EQ(keys_of(m->named_buffers()), text("stateful_named_buffers"));
  EXPECT_EQ(m->repr(), text("stateful_repr"));
  // keep_vars returns the parameters themselves
  auto kv = m->state_dict("", /*keep_vars=*/true);
  EXPECT_TRUE(kv.at("param1").is_same(m->param1));
  // m_loaded.load_state_dict(...)
  manual_seed(1);
  auto loaded = std::make_shared<StatefulModule>();
  auto r = loaded->load_state_dict(sd);
  EXPECT_TRUE(r.missing_keys.empty());
  EXPECT_TRUE(r.unexpected_keys.empty());
  for (const auto& [k, v] : loaded->state_dict()) EXPECT_TRUE(equal(v, sd.at(k))) << k;
  // the non-persistent buffer keeps the new module's own value
  EXPECT_FALSE(equal(loaded->get_buffer("buffer2"), m->get_buffer("buffer2")));
}

// ---------------------------------------------------------------------------------------------------
// Module hooks: the example of the modules note

TEST(ModulesNote, HooksExample) {
  manual_seed(1);
  auto m = std::make_shared<nn::LinearImpl>(3, 3);
  Tensor x = randn({2, 3}, requires_grad());
  EXPECT_TRUE(tensors_close(m->weight, fx().get("hooks_weight"), 0, 0));
  EXPECT_TRUE(tensors_close(x, fx().get("hooks_x"), 0, 0));
  EXPECT_TRUE(tensors_close((*m)(x), fx().get("hooks_out_none"), 1e-6, 1e-6));

  auto forward_pre_hook = [](nn::Module&, const nn::Args& inputs) { return inputs[0].tensor() + 1.; };
  auto forward_hook = [](nn::Module&, const nn::Args& inputs, const nn::Value& output) {
    return output.tensor() + inputs[0].tensor();  // residual, a la ResNet
  };
  auto backward_hook = [](nn::Module&, const std::vector<Tensor>& grad_inputs, const std::vector<Tensor>&) {
    std::vector<Tensor> out;
    for (const auto& gi : grad_inputs) out.push_back(ones_like(gi) * 42.);
    return out;
  };

  auto pre = m->register_forward_pre_hook(forward_pre_hook);
  EXPECT_TRUE(tensors_close((*m)(x), fx().get("hooks_out_pre"), 1e-6, 1e-6));
  auto post = m->register_forward_hook(forward_hook);
  EXPECT_TRUE(tensors_close((*m)(x), fx().get("hooks_out_both"), 1e-6, 1e-6));
  pre.remove();
  post.remove();
  post.remove();  // idempotent
  EXPECT_TRUE(tensors_close((*m)(x), fx().get("hooks_out_removed"), 1e-6, 1e-6));

  (*m)(x).sum().backward();
  EXPECT_TRUE(tensors_close(x.grad(), fx().get("hooks_grad_none"), 1e-6, 1e-6));
  m->zero_grad();
  x.mutable_grad().zero_();
  m->register_full_backward_hook(backward_hook);
  (*m)(x).sum().backward();
  EXPECT_TRUE(equal(x.grad(), full({2, 3}, 42.)));
  EXPECT_TRUE(tensors_close(x.grad(), fx().get("hooks_grad_42"), 0, 0));
}

// ---------------------------------------------------------------------------------------------------
// Traversal with shared modules, nested containers

TEST(Module, SharedModuleAppearsOnce) {
  auto l = std::make_shared<nn::LinearImpl>(2, 2);
  auto net = std::make_shared<nn::SequentialImpl>(l, l);
  EXPECT_EQ(keys_of(net->named_modules()), text("shared_named_modules"));
  EXPECT_EQ(keys_of(net->named_modules("", /*remove_duplicate=*/false)), text("shared_named_modules_dup"));
  EXPECT_EQ(keys_of(net->named_parameters()), text("shared_named_parameters"));
  EXPECT_EQ(keys_of(net->named_parameters("", true, /*remove_duplicate=*/false)), "0.weight\n0.bias\n1.weight\n1.bias");
  EXPECT_EQ(keys_of(net->state_dict()), text("shared_state_dict_keys"));
  EXPECT_EQ(net->parameters().size(), 2u);
  EXPECT_EQ(net->modules().size(), 2u);
  EXPECT_EQ(net->children().size(), 1u);  // children() de-duplicates too
}

TEST(Module, NestedContainersKeyOrderAndPrinting) {
  manual_seed(0);
  auto nested = std::make_shared<nn::SequentialImpl>(std::vector<std::pair<std::string, nn::ModulePtr>>{
      {"enc", std::make_shared<nn::SequentialImpl>(std::make_shared<nn::LinearImpl>(4, 8), std::make_shared<nn::ReLUImpl>(),
                                               std::make_shared<nn::LinearImpl>(8, 8))},
      {"heads", std::make_shared<nn::ModuleDictImpl>(std::initializer_list<std::pair<std::string, nn::ModulePtr>>{
                    {"b", std::make_shared<nn::LinearImpl>(8, 2)}, {"a", std::make_shared<nn::LinearImpl>(8, 3)}})},
      {"blocks", std::make_shared<nn::ModuleListImpl>(std::initializer_list<nn::ModulePtr>{
                     std::make_shared<nn::LinearImpl>(nn::LinearOptions(8, 8).bias(false)),
                     std::make_shared<nn::SequentialImpl>(std::make_shared<nn::LinearImpl>(8, 8))})},
      {"scales", std::make_shared<nn::ParameterListImpl>(std::initializer_list<Tensor>{ones({2}), zeros({3})})},
  });
  EXPECT_EQ(keys_of(nested->state_dict()), text("nested_keys"));
  EXPECT_EQ(keys_of(nested->named_modules()), text("nested_named_modules"));
  EXPECT_EQ(nested->repr(), text("nested_repr"));
  // the ParameterList turned plain tensors into parameters
  EXPECT_TRUE(nested->get_parameter("scales.1").requires_grad());
}

TEST(Module, ContainersIndexInsertPop) {
  auto a = std::make_shared<nn::ReLUImpl>();
  auto b = std::make_shared<nn::TanhImpl>();
  auto c = std::make_shared<nn::SigmoidImpl>();
  nn::Sequential seq{a, b};
  seq->insert(1, c);
  EXPECT_EQ(keys_of(seq->named_children()), "0\n1\n2");
  EXPECT_EQ(seq[1].get(), c.get());
  EXPECT_EQ(seq[-1].get(), b.get());
  EXPECT_EQ(seq->pop(0).get(), a.get());
  EXPECT_EQ(seq[0].get(), c.get());
  EXPECT_EQ(seq->slice(1, 5)->size(), 1u);
  EXPECT_THROW(seq[7], std::out_of_range);
  Tensor x = randn({3});
  EXPECT_TRUE(allclose(seq(x), tanh(sigmoid(x))));

  nn::ModuleList list{a};
  list->append(b).extend({c});
  EXPECT_EQ(list->size(), 3u);
  EXPECT_EQ(list[-1].get(), c.get());
  EXPECT_THROW(list(x), std::runtime_error);  // not callable: no forward
  try {
    list(x);
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "Module [ModuleList] is missing the required \"forward\" function");
  }

  nn::ModuleDict dict{{"x", a}, {"y", b}};
  EXPECT_TRUE(dict->contains("y"));
  EXPECT_EQ(dict["x"].get(), a.get());
  EXPECT_THROW(dict["z"], std::out_of_range);
  EXPECT_EQ(dict->pop("x").get(), a.get());
  EXPECT_EQ(join(dict->keys()), "y");

  nn::ParameterDict pd{{"b", ones({1})}, {"a", zeros({2})}};  // a dict literal: sorted, as PyTorch 1.13
  EXPECT_EQ(join(pd->keys()), "a\nb");
  EXPECT_TRUE(pd["a"].requires_grad());
  nn::ParameterDict ordered(std::vector<std::pair<std::string, Tensor>>{{"b", ones({1})}, {"a", zeros({2})}});
  EXPECT_EQ(join(ordered->keys()), "b\na");
  nn::ParameterList pl{ones({2})};
  EXPECT_THROW(pl(x), std::runtime_error);
}

// ---------------------------------------------------------------------------------------------------
// Registration and lookup errors

TEST(Module, RegistrationErrors) {
  nn::Module m;
  auto expect_msg = [](auto fn, const std::string& msg) {
    try {
      fn();
      ADD_FAILURE() << "no error, expected: " << msg;
    } catch (const std::exception& e) {
      EXPECT_EQ(std::string(e.what()), msg);
    }
  };
  expect_msg([&] { m.register_parameter("a.b", ones({1})); }, "parameter name can't contain \".\"");
  expect_msg([&] { m.register_parameter("", ones({1})); }, "parameter name can't be empty string \"\"");
  expect_msg([&] { m.register_buffer("a.b", ones({1})); }, "buffer name can't contain \".\"");
  expect_msg([&] { m.register_module("a.b", std::make_shared<nn::ReLUImpl>()); }, "module name can't contain \".\", got: a.b");
  m.register_buffer("buf", ones({1}));
  expect_msg([&] { m.register_parameter("buf", ones({1})); }, "attribute 'buf' already exists");
  Tensor leaf = ones({2}, requires_grad());
  expect_msg([&] { m.register_parameter("w", leaf * 2); },
             "Cannot assign non-leaf Tensor to parameter 'w'. Model parameters must be created explicitly. To express "
             "'w' as a function of another Tensor, compute the value in the forward() method.");
  // re-registering a parameter replaces it in place (keeps its position)
  m.register_parameter("p", ones({1}));
  m.register_parameter("q", ones({1}));
  m.register_parameter("p", zeros({3}));
  EXPECT_EQ(keys_of(m.named_parameters()), "p\nq");
  EXPECT_EQ(m.get_parameter("p").numel(), 3);
}

TEST(Module, GetSubmoduleParameterBufferErrors) {
  manual_seed(0);
  auto big = std::make_shared<BigNet>();
  EXPECT_EQ(big->get_submodule("").get(), big.get());
  EXPECT_EQ(big->get_submodule("net.l0").get(), big->net->l0.get());
  EXPECT_TRUE(big->get_parameter("net.l0.weight").is_same(big->net->l0->weight));
  auto msg = [](auto fn) {
    try {
      fn();
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string("<no error>");
  };
  EXPECT_EQ(msg([&] { big->get_submodule("net.l2"); }), text("getsub_missing"));
  EXPECT_EQ(msg([&] { big->get_submodule("net.l0.weight"); }), text("getsub_not_module"));
  EXPECT_EQ(msg([&] { big->get_parameter("net.l0.nope"); }), text("getparam_missing"));
  EXPECT_EQ(msg([&] { big->get_parameter("net.l0"); }), text("getparam_not_param"));
  auto sm = std::make_shared<StatefulModule>();
  EXPECT_EQ(msg([&] { sm->get_buffer("param1"); }), text("getbuffer_not_buffer"));
  EXPECT_TRUE(sm->get_buffer("buffer1").defined());
}

// ---------------------------------------------------------------------------------------------------
// load_state_dict: errors, strict, hooks, assign, nothing half-loaded

namespace {
std::shared_ptr<nn::SequentialImpl> two_linears() {
  manual_seed(0);
  return std::make_shared<nn::SequentialImpl>(std::make_shared<nn::LinearImpl>(2, 2), std::make_shared<nn::LinearImpl>(2, 3));
}
std::string load_error(nn::Module& m, const nn::StateDict& sd, bool strict = true) {
  try {
    m.load_state_dict(sd, strict);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "<no error>";
}
}  // namespace

TEST(LoadStateDict, ErrorTextsMatchPyTorch) {
  auto tgt = two_linears();
  auto good = tgt->state_dict();
  nn::StateDict bad = good;
  bad.erase("1.bias");
  bad.insert_or_assign("2.weight", zeros({1}));
  bad.insert_or_assign("extra", zeros({1}));
  EXPECT_EQ(load_error(*tgt, bad), text("load_err_missing_unexpected"));
  nn::StateDict bad2 = good;
  bad2.insert_or_assign("0.weight", zeros({3, 2}));
  bad2.insert_or_assign("1.bias", zeros({4}));
  EXPECT_EQ(load_error(*tgt, bad2), text("load_err_size"));
  nn::StateDict bad3 = bad2;
  bad3.erase("0.bias");
  EXPECT_EQ(load_error(*tgt, bad3), text("load_err_size_and_missing"));
  // a size mismatch is an error even when not strict
  EXPECT_NE(load_error(*tgt, bad2, /*strict=*/false).find("size mismatch for 0.weight"), std::string::npos);

  auto r = tgt->load_state_dict(bad, /*strict=*/false);
  EXPECT_EQ(join(r.missing_keys), text("load_nonstrict_missing"));
  EXPECT_EQ(join(r.unexpected_keys), text("load_nonstrict_unexpected"));
}

TEST(LoadStateDict, NothingHalfLoadedOnError) {
  auto tgt = two_linears();
  auto before = tgt->state_dict();
  nn::StateDict snapshot;
  for (const auto& [k, v] : before) snapshot.insert_or_assign(k, v.clone());
  nn::StateDict sd;
  for (const auto& [k, v] : before) sd.insert_or_assign(k, full(v.sizes(), 7.0));
  sd.insert_or_assign("1.bias", zeros({5}));  // the last entry is wrong: nothing may be copied
  EXPECT_THROW(tgt->load_state_dict(sd), std::runtime_error);
  for (const auto& [k, v] : tgt->state_dict()) EXPECT_TRUE(equal(v, snapshot.at(k))) << k;
  // a missing key with strict: nothing copied either
  sd.insert_or_assign("1.bias", full({3}, 7.0));
  sd.erase("0.bias");
  EXPECT_THROW(tgt->load_state_dict(sd), std::runtime_error);
  for (const auto& [k, v] : tgt->state_dict()) EXPECT_TRUE(equal(v, snapshot.at(k))) << k;
  // non-strict loads what matches
  auto r = tgt->load_state_dict(sd, false);
  EXPECT_EQ(join(r.missing_keys), "0.bias");
  EXPECT_TRUE(equal(tgt->get_parameter("0.weight"), full({2, 2}, 7.0)));
  EXPECT_TRUE(equal(tgt->get_parameter("0.bias"), snapshot.at("0.bias")));
}

TEST(LoadStateDict, PostHooksRunChildrenFirstAndMayClearKeys) {
  auto tgt = two_linears();
  std::vector<std::string> order;
  (*tgt)[0]->register_load_state_dict_post_hook([&](nn::Module&, nn::IncompatibleKeys&) { order.push_back("0"); });
  (*tgt)[1]->register_load_state_dict_post_hook([&](nn::Module&, nn::IncompatibleKeys&) { order.push_back("1"); });
  auto h = tgt->register_load_state_dict_post_hook([&](nn::Module&, nn::IncompatibleKeys& k) {
    order.push_back("root");
    k.missing_keys.clear();
    k.unexpected_keys.clear();
  });
  nn::StateDict sd = tgt->state_dict();
  nn::StateDict changed;
  for (const auto& [k, v] : sd) changed.insert_or_assign(k, full(v.sizes(), 3.0));
  changed.erase("1.bias");
  changed.insert_or_assign("junk", zeros({1}));
  auto r = tgt->load_state_dict(changed);  // strict, but the hook cleared the keys: no error
  EXPECT_EQ(join(order), "0\n1\nroot");
  EXPECT_TRUE(r.missing_keys.empty());
  EXPECT_TRUE(equal(tgt->get_parameter("0.weight"), full({2, 2}, 3.0)));
  // a hook that leaves the keys: error, and the values are restored
  h.remove();
  auto w0 = tgt->get_parameter("0.weight").clone();
  nn::StateDict again = changed;
  again.insert_or_assign("0.weight", full({2, 2}, 9.0));
  EXPECT_THROW(tgt->load_state_dict(again), std::runtime_error);
  EXPECT_TRUE(equal(tgt->get_parameter("0.weight"), w0));
}

TEST(LoadStateDict, AssignAdoptsTheTensorsAndKeepsRequiresGrad) {
  auto tgt = two_linears();
  nn::StateDict sd;
  for (const auto& [k, v] : tgt->state_dict()) sd.insert_or_assign(k, full(v.sizes(), 2.0, kFloat64));
  Tensor w = tgt->get_parameter("0.weight");
  tgt->load_state_dict(sd, true, /*assign=*/true);
  EXPECT_TRUE(w.is_same(tgt->get_parameter("0.weight")));  // the same parameter object
  EXPECT_EQ(w.dtype(), kFloat64);                          // with the state dict's properties
  EXPECT_TRUE(w.requires_grad());
  sd.at("0.weight").fill_(5.0);  // shares storage with the state dict's tensor
  EXPECT_EQ(w.sum().item<double>(), 20.0);
}

TEST(LoadStateDict, StateDictPreHookAndExtraState) {
  class WithExtra : public nn::Module {
   public:
    WithExtra() { register_parameter("w", ones({2})); }
    std::optional<Tensor> get_extra_state() const override { return tensor({counter}, kFloat64); }
    void set_extra_state(const Tensor& s) override { counter = s.item<double>(); }
    double counter = 0;
  };
  auto outer = std::make_shared<nn::SequentialImpl>();
  auto inner = std::make_shared<WithExtra>();
  inner->counter = 41;
  outer->push_back(inner);
  std::vector<std::string> seen;
  inner->register_state_dict_pre_hook([&](nn::Module&, const std::string& prefix, bool keep_vars) {
    seen.push_back(prefix + (keep_vars ? "|keep" : "|detach"));
  });
  auto sd = outer->state_dict();
  EXPECT_EQ(keys_of(sd), "0.w\n0._extra_state");
  EXPECT_EQ(join(seen), "0.|detach");
  auto other = std::make_shared<nn::SequentialImpl>();
  auto inner2 = std::make_shared<WithExtra>();
  other->push_back(inner2);
  other->load_state_dict(sd);
  EXPECT_EQ(inner2->counter, 41);
  sd.erase("0._extra_state");
  EXPECT_NE(load_error(*other, sd).find("Missing key(s) in state_dict: \"0._extra_state\"."), std::string::npos);
}

// ---------------------------------------------------------------------------------------------------
// train/eval, requires_grad_, zero_grad, to

TEST(Module, TrainEvalRequiresGradZeroGrad) {
  manual_seed(0);
  auto big = std::make_shared<BigNet>();
  big->eval();
  for (const auto& m : big->modules()) EXPECT_FALSE(m->is_training()) << m->name();
  big->net->train();
  EXPECT_FALSE(big->is_training());
  EXPECT_TRUE(big->net->l0->is_training());

  big->requires_grad_(false);
  for (const auto& p : big->parameters()) EXPECT_FALSE(p.requires_grad());
  big->requires_grad_(true);
  (*big)(randn({5})).sum().backward();
  for (const auto& p : big->parameters()) EXPECT_TRUE(p.grad().defined());
  big->zero_grad(/*set_to_none=*/false);
  for (const auto& p : big->parameters()) EXPECT_EQ(p.grad().abs().sum().item<double>(), 0.0);
  big->zero_grad();
  for (const auto& p : big->parameters()) EXPECT_FALSE(p.grad().defined());
}

TEST(Module, ToKeepsParameterIdentityAndSkipsIntegerBuffers) {
  manual_seed(0);
  auto m = std::make_shared<nn::LinearImpl>(3, 2);
  m->register_buffer("steps", zeros({}, kInt64));
  Tensor w = m->weight;
  (*m)(randn({4, 3})).sum().backward();
  Tensor before = w.detach().clone();
  m->to(kFloat64);
  EXPECT_TRUE(w.is_same(m->weight));
  EXPECT_EQ(w.dtype(), kFloat64);
  EXPECT_EQ(w.grad().dtype(), kFloat64);
  EXPECT_TRUE(w.requires_grad());
  EXPECT_TRUE(allclose(w, before.to(kFloat64)));
  EXPECT_EQ(m->get_buffer("steps").dtype(), kInt64);
  m->half();
  EXPECT_EQ(m->weight.dtype(), kFloat16);
  m->float_();
  EXPECT_EQ(m->weight.dtype(), kFloat32);
  m->to(randn({1}, kFloat64));
  EXPECT_EQ(m->bias.dtype(), kFloat64);
  EXPECT_THROW(m->to(kInt64), std::invalid_argument);
  m->type(kInt32);  // type() casts everything, integer buffers too
  EXPECT_EQ(m->get_buffer("steps").dtype(), kInt32);
  m->to_empty(Device(kCPU));
  EXPECT_EQ(m->weight.sizes().vec(), (std::vector<int64_t>{2, 3}));
#ifndef TROUPE_WITH_CUDA
  EXPECT_THROW(m->cuda(), std::exception);
#endif
}

// ---------------------------------------------------------------------------------------------------
// Forward hooks: order, prepend, kwargs, global hooks, always_call

TEST(ModuleHooks, OrderPrependKwargsAndGlobal) {
  auto m = std::make_shared<ModalModule>();
  std::vector<std::string> calls;
  auto g1 = nn::register_module_forward_pre_hook([&](nn::Module&, const nn::Args&) -> std::optional<nn::Args> {
    calls.push_back("global_pre");
    return std::nullopt;
  });
  auto g2 = nn::register_module_forward_hook([&](nn::Module&, const nn::Args&, const nn::Value&) -> std::optional<nn::Value> {
    calls.push_back("global_fwd");
    return std::nullopt;
  });
  m->register_forward_pre_hook([&](nn::Module&, const nn::Args&) { calls.push_back("pre_a"); });
  m->register_forward_pre_hook([&](nn::Module&, const nn::Args&) { calls.push_back("pre_b"); }, /*prepend=*/true);
  m->register_forward_hook([&](nn::Module&, const nn::Args&, const nn::Value&) { calls.push_back("fwd_a"); });
  m->register_forward_hook([&](nn::Module&, const nn::Args&, const nn::Value&) { calls.push_back("fwd_b"); },
                           nn::HookOptions{.prepend = true});
  Tensor x = zeros({2});
  (*m)(x);
  EXPECT_EQ(join(calls), "global_pre\npre_b\npre_a\nglobal_fwd\nfwd_b\nfwd_a");
  g1.remove();
  g2.remove();
  g2.remove();
  calls.clear();
  (*m)(x);
  EXPECT_EQ(join(calls), "pre_b\npre_a\nfwd_b\nfwd_a");
}

TEST(ModuleHooks, WithKwargsReplaceArgsAndKwargs) {
  class Scale : public nn::Module {
   public:
    nn::Value forward_args(const nn::Args& args, const nn::Kwargs& kwargs) override {
      double s = kwargs.count("scale") ? kwargs.at("scale").to_double() : 1.0;
      return args.at(0).tensor() * s;
    }
  };
  auto m = std::make_shared<Scale>();
  m->register_forward_pre_hook([](nn::Module&, const nn::Args& a, const nn::Kwargs& k) {
    nn::Kwargs k2 = k;
    k2["scale"] = 10.0;
    return std::make_pair(a, k2);
  });
  std::string seen;
  m->register_forward_hook([&](nn::Module&, const nn::Args&, const nn::Kwargs& k, const nn::Value& out) {
    seen = std::to_string(k.at("scale").to_double());
    return out.tensor() + 1.;
  });
  Tensor y = (*m)({ones({2})}, {{"scale", 2.0}});
  EXPECT_TRUE(equal(y, full({2}, 11.0)));
  EXPECT_EQ(seen.substr(0, 4), "10.0");
}

TEST(ModuleHooks, AlwaysCallRunsWhenForwardThrows) {
  class Boom : public nn::Module {
   public:
    Tensor forward(const Tensor&) override { throw std::runtime_error("boom"); }
  };
  auto m = std::make_shared<Boom>();
  int always = 0, normal = 0;
  m->register_forward_hook([&](nn::Module&, const nn::Args&, const nn::Value& out) {
    EXPECT_TRUE(out.is_none());
    ++always;
  }, nn::HookOptions{.always_call = true});
  m->register_forward_hook([&](nn::Module&, const nn::Args&, const nn::Value&) { ++normal; });
  try {
    (*m)(ones({1}));
    ADD_FAILURE() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "boom");  // the original error is re-thrown
  }
  EXPECT_EQ(always, 1);
  EXPECT_EQ(normal, 0);
}

TEST(ModuleHooks, HookRemovingItselfDuringCall) {
  auto m = std::make_shared<ModalModule>();
  int n = 0;
  nn::RemovableHandle h;
  h = m->register_forward_hook([&](nn::Module&, const nn::Args&, const nn::Value&) {
    ++n;
    h.remove();
  });
  (*m)(ones({1}));
  (*m)(ones({1}));
  EXPECT_EQ(n, 1);
  EXPECT_EQ(m->num_forward_hooks(), 0u);
}

// ---------------------------------------------------------------------------------------------------
// Backward hooks

TEST(ModuleHooks, FullBackwardPreHookReplacesGradOutput) {
  manual_seed(0);
  auto m = std::make_shared<nn::LinearImpl>(3, 2);
  Tensor x = randn({4, 3}, requires_grad());
  std::vector<Tensor> seen_go, seen_gi;
  m->register_full_backward_pre_hook([&](nn::Module&, const std::vector<Tensor>& go) {
    seen_go = go;
    return std::vector<Tensor>{go[0] * 2.};
  });
  m->register_full_backward_hook([&](nn::Module&, const std::vector<Tensor>& gi, const std::vector<Tensor>& go) {
    seen_gi = gi;
    EXPECT_TRUE(equal(go[0], full({4, 2}, 2.0)));  // the hook sees the replaced grad_output
  });
  (*m)(x).sum().backward();
  ASSERT_EQ(seen_go.size(), 1u);
  EXPECT_TRUE(equal(seen_go[0], ones({4, 2})));
  // d(sum(2 * (x W^T + b)))/dx = 2 * ones @ W
  Tensor expected = (full({4, 2}, 2.0)).matmul(m->weight.detach());
  EXPECT_TRUE(allclose(x.grad(), expected));
  ASSERT_EQ(seen_gi.size(), 1u);
  EXPECT_TRUE(allclose(seen_gi[0], expected));
  // the parameter gradients follow the replaced grad_output too
  EXPECT_TRUE(allclose(m->bias.grad(), full({2}, 8.0)));
}

TEST(ModuleHooks, BackwardHookCountMismatchAndNoInputGrad) {
  manual_seed(0);
  auto m = std::make_shared<nn::LinearImpl>(3, 2);
  auto h = m->register_full_backward_hook(
      [](nn::Module&, const std::vector<Tensor>& gi, const std::vector<Tensor>&) { return std::vector<Tensor>{gi[0], gi[0]}; });
  Tensor x = randn({4, 3}, requires_grad());
  try {
    (*m)(x).sum().backward();
    ADD_FAILURE() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("Backward hook returned an invalid number of grad_input, got 2, but expected 1"),
              std::string::npos)
        << e.what();
  }
  h.remove();
  // no input requires grad: the hook runs with None (undefined) grad_input when the output's gradient arrives
  int calls = 0;
  m->register_full_backward_hook([&](nn::Module&, const std::vector<Tensor>& gi, const std::vector<Tensor>& go) {
    ++calls;
    EXPECT_EQ(gi.size(), 1u);
    EXPECT_FALSE(gi[0].defined());
    EXPECT_TRUE(go[0].defined());
  });
  (*m)(randn({4, 3})).sum().backward();
  EXPECT_EQ(calls, 1);
  // no output requires grad: never fires
  m->requires_grad_(false);
  Tensor y = (*m)(randn({4, 3}));
  EXPECT_FALSE(y.requires_grad());
  EXPECT_EQ(calls, 1);
}

TEST(ModuleHooks, LegacyBackwardHookAndMixingError) {
  manual_seed(0);
  auto m = std::make_shared<nn::LinearImpl>(3, 2);
  int calls = 0;
  m->register_backward_hook([&](nn::Module&, const std::vector<Tensor>&, const std::vector<Tensor>& go) {
    ++calls;
    EXPECT_EQ(go.size(), 1u);
  });
  (*m)(randn({4, 3}, requires_grad())).sum().backward();
  EXPECT_EQ(calls, 1);
  EXPECT_THROW(m->register_full_backward_hook([](nn::Module&, const std::vector<Tensor>&, const std::vector<Tensor>&) {}),
               std::runtime_error);
}

// ---------------------------------------------------------------------------------------------------
// Registry: apply and hooks by name

TROUPE_REGISTER_APPLY_FN(test_fill_linear_weights_with_one, [](nn::Module& m) {
  NoGradGuard no_grad;
  if (auto* l = m.as<nn::Linear>()) l->weight.fill_(1.0);
});

TEST(Registry, ApplyAndHooksByName) {
  auto net = std::make_shared<nn::SequentialImpl>(std::make_shared<nn::LinearImpl>(2, 2), std::make_shared<nn::ReLUImpl>());
  net->apply("test_fill_linear_weights_with_one");
  EXPECT_TRUE(equal(net->get_parameter("0.weight"), ones({2, 2})));
  EXPECT_TRUE(nn::registry::contains("apply", "test_fill_linear_weights_with_one"));

  try {
    net->apply("no_such_fn");
    ADD_FAILURE() << "no error";
  } catch (const std::invalid_argument& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("no apply is registered as 'no_such_fn'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("test_fill_linear_weights_with_one"), std::string::npos) << msg;
  }
  EXPECT_THROW(nn::registry::add_apply_fn("test_fill_linear_weights_with_one", [](nn::Module&) {}),
               std::invalid_argument);

  nn::registry::add_forward_hook("test_double_output", [](nn::Module&, const nn::Args&, const nn::Value& out) {
    return std::optional<nn::Value>(out.tensor() * 2.);
  });
  auto relu = std::make_shared<nn::ReLUImpl>();
  auto h = relu->register_forward_hook("test_double_output");
  EXPECT_TRUE(equal((*relu)(ones({2})), full({2}, 2.0)));
  h.remove();
  EXPECT_TRUE(equal((*relu)(ones({2})), ones({2})));
  nn::registry::remove("forward_hook", "test_double_output");
}

// ---------------------------------------------------------------------------------------------------
// skip_init, missing forward

TEST(Module, SkipInitDoesNotTouchTheGenerator) {
  manual_seed(0);
  auto m = nn::skip_init<nn::LinearImpl>(5, 3);
  EXPECT_EQ(m->weight.sizes().vec(), (std::vector<int64_t>{3, 5}));
  Tensor after = randn({4});
  manual_seed(0);
  EXPECT_TRUE(equal(after, randn({4})));  // no random numbers were drawn for the skipped init
}

TEST(Module, MissingForward) {
  class NoForward : public nn::Module {};
  auto m = std::make_shared<NoForward>();
  try {
    (*m)(ones({1}));
    ADD_FAILURE() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "Module [NoForward] is missing the required \"forward\" function");
  }
}
