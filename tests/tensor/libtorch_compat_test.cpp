// The tensor- and autograd-level pieces of libtorch's API, written as libtorch code writes them (torch
// renamed troupe): device and options queries, resize_ and random_, InferenceMode, custom autograd
// Functions, var/std's correction overload, warnings, torch::tensor of a std::vector, and the opt-in c10
// helpers. Expected values and error texts were probed against Debian's libtorch 1.13.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <troupe/tensor/autograd.h>
#include <troupe/tensor/custom_function.h>
#include <troupe/tensor/gradcheck.h>
#include <troupe/tensor/ops.h>
#include <troupe/tensor/warning.h>
#include <troupe/util/c10_compat.h>

namespace {

namespace torch = troupe;  // written in libtorch's spelling
using torch::autograd::AutogradContext;
using torch::autograd::Variable;
using torch::autograd::variable_list;

template <class Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "no exception";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

std::vector<double> values(const torch::Tensor& t) { return t.to_vector<double>(); }

/// Collects the warnings raised while it is installed.
struct CollectWarnings : torch::WarningHandler {
  std::vector<std::string> msgs;
  std::vector<std::string> functions;
  void process(const torch::Warning& w) override {
    msgs.push_back(w.msg());
    functions.push_back(w.source_location().function);
  }
};

// ============================================================ 1. device and options

TEST(LibtorchDevice, TypeComparesWithDeviceTypeConstants) {
  auto x = torch::ones({2, 3});
  ASSERT_EQ(x.device().type(), torch::kCPU);
  EXPECT_EQ(x.device().type(), torch::DeviceType::CPU);
  EXPECT_NE(x.device().type(), torch::kCUDA);
  EXPECT_TRUE(x.device() == torch::Device(torch::kCPU));
  EXPECT_TRUE(x.device().is_cpu());
  EXPECT_TRUE(x.is_cpu());
  EXPECT_FALSE(x.is_cuda());
  EXPECT_FALSE(x.device().has_index());
  std::ostringstream os;
  os << x.device().type() << " " << torch::kCUDA << " " << x.device();
  EXPECT_EQ(os.str(), "cpu cuda cpu");
}

TEST(LibtorchDevice, ParsesLibtorchsStrings) {
  EXPECT_TRUE(torch::Device("cpu:0") == torch::Device(torch::kCPU, 0));
  EXPECT_TRUE(torch::Device("cpu") == torch::Device(torch::kCPU));
  EXPECT_TRUE(torch::Device("cuda:3") == torch::Device(torch::kCUDA, 3));
  EXPECT_EQ(torch::Device("cuda:3").index, 3);
  EXPECT_EQ(torch::Device("cuda").type(), torch::kCUDA);
  // libtorch spells the index as a method; the field reads and assigns as before
  EXPECT_EQ(torch::Device("cuda:3").index(), 3);
  EXPECT_EQ(torch::Device("cuda").index(), -1);
  EXPECT_EQ(torch::ones({2}).device().index(), -1);
  torch::Device d(torch::kCUDA);
  d.set_index(2);
  EXPECT_TRUE(d.has_index());
  EXPECT_EQ(d.index(), 2);
  EXPECT_EQ(d.str(), "cuda:2");
  d.index = 5;
  const int i = d.index();
  EXPECT_EQ(i, 5);
  EXPECT_TRUE(torch::Device(torch::kCUDA, 1) != torch::Device(torch::kCUDA, 2));
  EXPECT_TRUE(torch::Device(torch::kCUDA, 1) == torch::Device(torch::kCUDA));
  for (const char* bad : {"", "cud:1", "cuda:", "cpu::1", ":1", "3", "tpu:4", "??"})
    EXPECT_THROW(torch::Device{std::string(bad)}, std::invalid_argument) << bad;
}

TEST(LibtorchOptions, TensorOptionsCompareAsLibtorchTestsDo) {
  auto t = torch::ones({2, 3}, torch::requires_grad());
  ASSERT_EQ(t.options().dtype(), torch::kFloat);
  EXPECT_EQ(t.options().device(), torch::Device(torch::kCPU));
  EXPECT_EQ(t.options().device().type(), torch::kCPU);
  EXPECT_FALSE(t.options().requires_grad());  // not part of a tensor's options, as in libtorch
  EXPECT_EQ(t.options().layout(), torch::kStrided);
  EXPECT_EQ(t.layout(), torch::kStrided);
  EXPECT_EQ(torch::empty({5}, torch::kDouble).options().dtype(), torch::kDouble);
  std::ostringstream os;
  os << t.options();
  EXPECT_EQ(os.str(),
            "TensorOptions(dtype=float, device=cpu, layout=Strided, requires_grad=false (default), "
            "pinned_memory=false (default), memory_format=(nullopt))");
}

TEST(LibtorchOptions, BuildersAndDefaults) {
  torch::TensorOptions options;
  EXPECT_EQ(options.device().type(), torch::kCPU);
  EXPECT_EQ(options.device().index, -1);
  EXPECT_EQ(options.dtype(), torch::kFloat);
  EXPECT_EQ(options.layout(), torch::kStrided);
  options = torch::dtype(torch::kByte).layout(torch::kStrided).device(torch::kCUDA, 2).device_index(3);
  EXPECT_EQ(options.device().type(), torch::kCUDA);
  EXPECT_EQ(options.device().index, 3);
  EXPECT_EQ(options.device().index(), 3);
  EXPECT_EQ(options.dtype(), torch::kByte);
  EXPECT_EQ(torch::device_index(1).device(), torch::Device(torch::kCUDA, 1));
  EXPECT_EQ(torch::TensorOptions().dtype<double>().dtype(), torch::kDouble);
  EXPECT_EQ(torch::dtype<int64_t>().dtype(), torch::kLong);
  EXPECT_EQ(torch::zeros({2}, torch::TensorOptions().dtype<int32_t>()).dtype(), torch::kInt);
}

// ============================================================ 2. resize_ and random fills

TEST(LibtorchResize, KeepsThePrefixAndGrowsTheStorage) {
  auto x = torch::arange(6).reshape({2, 3});
  x.resize_({2, 2});
  EXPECT_EQ(x.sizes().vec(), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(values(x), (std::vector<double>{0, 1, 2, 3}));
  x.resize_({3, 3});
  EXPECT_EQ(x.sizes().vec(), (std::vector<int64_t>{3, 3}));
  EXPECT_TRUE(x.is_contiguous());
  EXPECT_EQ(values(x.flatten().slice(0, 0, 6)), (std::vector<double>{0, 1, 2, 3, 4, 5}));
  x.resize_({0});
  EXPECT_EQ(x.numel(), 0);
}

TEST(LibtorchResize, GrowingIsSeenByEveryTensorOnTheStorage) {
  auto a = torch::arange(4.0);
  auto alias = a.view({2, 2});
  a.resize_({100});
  a.fill_(7);
  EXPECT_EQ(values(alias), (std::vector<double>{7, 7, 7, 7}));
}

TEST(LibtorchResize, SameSizesKeepTheStridesOthersAreContiguous) {
  auto t = torch::zeros({3, 2}).t();
  t.resize_({2, 3});
  EXPECT_EQ(t.strides().vec(), (std::vector<int64_t>{1, 2}));
  t.resize_({2, 2});
  EXPECT_EQ(t.strides().vec(), (std::vector<int64_t>{2, 1}));
  auto u = torch::ones({4});
  u.resize_as_(torch::empty({2, 3}));
  EXPECT_EQ(u.sizes().vec(), (std::vector<int64_t>{2, 3}));
}

TEST(LibtorchResize, RefusesTensorsThatRequireGrad) {
  auto leaf = torch::ones({2}, torch::requires_grad());
  EXPECT_EQ(error_of([&] { leaf.resize_({3}); }), "[resize_] cannot resize variables that require grad");
  {
    torch::NoGradGuard no_grad;  // PyTorch refuses in no-grad mode too
    EXPECT_EQ(error_of([&] { leaf.resize_({3}); }), "[resize_] cannot resize variables that require grad");
  }
  auto nonleaf = leaf * 2;
  EXPECT_EQ(error_of([&] { nonleaf.resize_({3}); }), "[resize_] cannot resize variables that require grad");
  EXPECT_EQ(error_of([] { torch::ones({2}).resize_({-1, 3}); }),
            "[resize_] Trying to create tensor with negative dimension -1: [-1, 3]");
  float buf[4] = {1, 2, 3, 4};
  auto blob = torch::from_blob(buf, {4});
  EXPECT_TRUE(contains(error_of([&] { blob.resize_({8}); }), "[resize_] Trying to resize storage that is not resizable"));
  blob.resize_({2});  // shrinking needs no new memory
  EXPECT_EQ(values(blob), (std::vector<double>{1, 2}));
}

TEST(LibtorchRandom, RandomDrawsTheDtypesFullIntegerRange) {
  struct Case {
    torch::ScalarType dtype;
    double hi;
  };
  for (const Case& c : {Case{torch::kFloat, 16777216.0}, Case{torch::kDouble, 9007199254740992.0},
                        Case{torch::kHalf, 2048.0}, Case{torch::kBFloat16, 256.0}, Case{torch::kInt, 2147483647.0},
                        Case{torch::kLong, 9223372036854775807.0}, Case{torch::kByte, 255.0}, Case{torch::kBool, 1.0}}) {
    auto t = torch::empty({20000}, c.dtype).random_();
    auto d = t.to(torch::kDouble);
    EXPECT_GE(d.min().item<double>(), 0.0) << c.dtype;
    EXPECT_LE(d.max().item<double>(), c.hi) << c.dtype;
    EXPECT_GT(d.max().item<double>(), c.hi / 2) << c.dtype;
    for (double v : values(t.slice(0, 0, 100))) EXPECT_EQ(v, std::floor(v)) << c.dtype;
  }
}

TEST(LibtorchRandom, RandomGivesLibtorchsNumbersAfterTheSameSeed) {
  // torch::manual_seed(0); torch::empty({5}, dtype).random_() in libtorch 1.13
  struct Case {
    torch::ScalarType dtype;
    std::vector<double> want;
  };
  for (const Case& c : {Case{torch::kFloat, {8325664, 12888472, 1484222, 2214888, 5157545}},
                        Case{torch::kDouble, {8737460674930124, 6375474555111176, 4137753702977065, 8293357854226700,
                                              5809860774058864}},
                        Case{torch::kHalf, {1277, 1017, 1661, 999, 982}},
                        Case{torch::kBFloat16, {149, 179, 47, 62, 69}},
                        Case{torch::kInt, {209652396, 398764591, 924231285, 1478610112, 441365315}},
                        Case{torch::kByte, {172, 47, 117, 192, 67}}, Case{torch::kBool, {0, 1, 1, 0, 1}}}) {
    torch::manual_seed(0);
    EXPECT_EQ(values(torch::empty({5}, c.dtype).random_()), c.want) << c.dtype;
  }
  torch::manual_seed(0);
  EXPECT_EQ(values(torch::empty({5}).random_(10)), (std::vector<double>{4, 9, 3, 0, 3}));
  torch::manual_seed(0);
  auto nc = torch::empty({3, 2}).t();  // filled in memory order, as TensorIterator does
  nc.random_();
  EXPECT_EQ(values(nc), (std::vector<double>{8325664, 1484222, 5157545, 12888472, 2214888, 10637856}));
}

TEST(LibtorchRandom, RangesAndErrors) {
  auto a = torch::empty({5000}, torch::kLong).random_(7);
  EXPECT_EQ(a.min().item<int64_t>(), 0);
  EXPECT_EQ(a.max().item<int64_t>(), 6);
  auto b = torch::empty({5000}).random_(-3, 4);
  EXPECT_EQ(b.min().item<float>(), -3.0f);
  EXPECT_EQ(b.max().item<float>(), 3.0f);
  EXPECT_EQ(error_of([] { torch::empty({3}).random_(0); }),
            "[random_] random_ expects 'from' to be less than 'to', but got from=0 >= to=0");
  EXPECT_EQ(error_of([] { torch::empty({3}).random_(5, 3); }),
            "[random_] random_ expects 'from' to be less than 'to', but got from=5 >= to=3");
  EXPECT_EQ(error_of([] { torch::empty({3}, torch::kByte).random_(-1, 3); }),
            "[random_] from is out of bounds for unsigned char");
  EXPECT_EQ(error_of([] { torch::empty({3}, torch::kBool).random_(0, 3); }), "[random_] to - 1 is out of bounds for bool");
  EXPECT_EQ(error_of([] { torch::empty({3}, torch::requires_grad()).random_(); }),
            "[random_] a leaf Variable that requires grad is being used in an in-place operation.");
  auto u = torch::empty({1000}).uniform_(2, 3);
  EXPECT_GE(u.min().item<float>(), 2.0f);
  EXPECT_LT(u.max().item<float>(), 3.0f);
  auto n = torch::empty({1000}, torch::kDouble).normal_(5, 0.1);
  EXPECT_NEAR(n.mean().item<double>(), 5.0, 0.05);
  auto k = torch::empty({1000}).bernoulli_(0.5);
  EXPECT_EQ(((k == 0).logical_not() == (k == 1)).all().item<bool>(), true);
}

TEST(LibtorchRandom, FloatRangesPastTheMantissaWarnAsPyTorchDoes) {
  CollectWarnings w;
  torch::WarningUtils::WarningHandlerGuard guard(&w);
  torch::empty({3}).random_(0, (int64_t(1) << 24) + 2);
  ASSERT_EQ(w.msgs.size(), 1u);
  EXPECT_EQ(w.msgs[0],
            "to - 1 is out of bounds [-(2^24), 2^24]. Due to precision limitations float can support discrete uniform "
            "distribution only within this range. This warning will become an error in version 1.7 release, please "
            "fix the code in advance");
  torch::empty({3}, torch::kDouble).random_(0, (int64_t(1) << 24) + 2);  // within float64's 2^53
  EXPECT_EQ(w.msgs.size(), 1u);
}

// ============================================================ 3. InferenceMode

TEST(LibtorchInferenceMode, RecordsNothingAndMarksNewTensors) {
  auto x = torch::ones({2, 3}, torch::requires_grad());
  EXPECT_FALSE(torch::InferenceMode::is_enabled());
  torch::Tensor made, y;
  {
    torch::InferenceMode guard;
    EXPECT_TRUE(torch::InferenceMode::is_enabled());
    EXPECT_TRUE(torch::autograd::InferenceMode::is_enabled());
    EXPECT_FALSE(torch::autograd::GradMode::is_enabled());
    made = torch::ones({2});
    y = x * 2;
    EXPECT_FALSE(y.requires_grad());
    EXPECT_EQ(y.grad_fn(), nullptr);
    EXPECT_TRUE(y.is_inference());
    EXPECT_FALSE(x.is_inference());
    made.add_(1);  // in place inside the mode is fine
    {
      torch::InferenceMode off(false);
      EXPECT_FALSE(torch::InferenceMode::is_enabled());
      EXPECT_TRUE(torch::autograd::GradMode::is_enabled());
      EXPECT_FALSE(torch::ones({1}).is_inference());
    }
    EXPECT_TRUE(torch::InferenceMode::is_enabled());
  }
  EXPECT_FALSE(torch::InferenceMode::is_enabled());
  EXPECT_TRUE(torch::autograd::GradMode::is_enabled());
  EXPECT_TRUE(made.is_inference());
  EXPECT_TRUE(made.view({2, 1}).is_inference());  // views of inference tensors are inference tensors
  EXPECT_FALSE((made * 2).is_inference());        // a new result outside the mode is a normal tensor
  EXPECT_EQ(values(made), (std::vector<double>{2, 2}));
}

TEST(LibtorchInferenceMode, InferenceTensorsStayOutOfAutogradOutsideTheMode) {
  torch::Tensor inf;
  {
    torch::InferenceMode guard;
    inf = torch::ones({2});
  }
  EXPECT_TRUE(contains(error_of([&] { inf.add_(1); }),
                       "Inplace update to inference tensor outside InferenceMode is not allowed.You can make a clone to "
                       "get a normal tensor before doing inplace update.See https://github.com/pytorch/rfcs/pull/17 for "
                       "more details."));
  EXPECT_TRUE(contains(error_of([&] { inf.fill_(3); }), "Inplace update to inference tensor"));
  EXPECT_EQ(error_of([&] { inf.requires_grad_(); }),
            "[requires_grad_] Setting requires_grad=True on inference tensor outside InferenceMode is not allowed.");
  auto w = torch::ones({2, 1}, torch::requires_grad());
  EXPECT_EQ(error_of([&] { auto z = w * inf; }),
            "Inference tensors cannot be saved for backward. To work around you can make a clone to get a normal "
            "tensor and use it in autograd.");
  auto ok = w * inf.clone();  // a clone is a normal tensor
  EXPECT_TRUE(ok.requires_grad());
  EXPECT_EQ(values(inf * 3), (std::vector<double>{3, 3}));
}

// ============================================================ 4. custom autograd Functions

struct MulConst : public torch::autograd::Function<MulConst> {
  static Variable forward(AutogradContext* ctx, Variable x, double c) {
    ctx->saved_data["c"] = c;
    return x * c;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    return {grad_out[0] * ctx->saved_data["c"].toDouble(), Variable()};
  }
};

// a * b + k * a, saving both inputs; backward written with differentiable ops, so double backward works.
struct MulAddScaled : public torch::autograd::Function<MulAddScaled> {
  static Variable forward(AutogradContext* ctx, Variable a, Variable b, int64_t k) {
    ctx->save_for_backward({a, b});
    ctx->saved_data["k"] = k;
    return a * b + a * static_cast<double>(k);
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    auto saved = ctx->get_saved_variables();
    auto a = saved[0], b = saved[1];
    const double k = static_cast<double>(ctx->saved_data["k"].toInt());
    Variable ga, gb;
    if (ctx->needs_input_grad(0)) ga = g[0] * (b + k);
    if (ctx->needs_input_grad(1)) gb = g[0] * a;
    return {ga, gb, Variable()};
  }
};

// exp(x), saving the output (as PyTorch's tutorial Exp does).
struct Exp : public torch::autograd::Function<Exp> {
  static Variable forward(AutogradContext* ctx, Variable x) {
    auto y = x.exp();
    ctx->save_for_backward({y});
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    return {g[0] * ctx->get_saved_variables()[0]};
  }
};

std::string node_name(const std::string& fn) { return "troupe::autograd::CppNode<(anonymous namespace)::" + fn + ">"; }

TEST(LibtorchCustomFunction, ForwardAndBackwardAsLibtorchWritesThem) {
  auto x = torch::tensor({1.0, -2.0, 3.0}, torch::dtype(torch::kDouble).requires_grad(true));
  Variable y = MulConst::apply(x, 2.5);
  EXPECT_TRUE(y.requires_grad());
  ASSERT_NE(y.grad_fn(), nullptr);
  EXPECT_EQ(y.grad_fn()->name(), node_name("MulConst"));
  EXPECT_EQ(values(y), (std::vector<double>{2.5, -5.0, 7.5}));
  y.sum().backward();
  EXPECT_EQ(values(x.grad()), (std::vector<double>{2.5, 2.5, 2.5}));
}

TEST(LibtorchCustomFunction, GradcheckOfTheExamples) {
  using torch::autograd::gradcheck;
  using torch::autograd::gradgradcheck;
  auto a = torch::randn({3, 4}, torch::dtype(torch::kDouble).requires_grad(true));
  auto b = torch::randn({3, 4}, torch::dtype(torch::kDouble).requires_grad(true));
  EXPECT_TRUE(gradcheck([](const variable_list& in) { return variable_list{MulConst::apply(in[0], -1.5)}; }, {a}));
  auto muladd = [](const variable_list& in) { return variable_list{MulAddScaled::apply(in[0], in[1], int64_t{3})}; };
  EXPECT_TRUE(gradcheck(muladd, {a, b}));
  EXPECT_TRUE(gradgradcheck(muladd, {a, b}));
  auto exp = [](const variable_list& in) { return variable_list{Exp::apply(in[0])}; };
  EXPECT_TRUE(gradcheck(exp, {a}));
  EXPECT_TRUE(gradgradcheck(exp, {a}));  // through the saved output, re-attached to its node
}

TEST(LibtorchCustomFunction, NeedsInputGradFollowsRequiresGrad) {
  auto a = torch::randn({3}, torch::dtype(torch::kDouble).requires_grad(true));
  auto b = torch::randn({3}, torch::kDouble);
  MulAddScaled::apply(a, b, int64_t{1}).sum().backward();
  EXPECT_TRUE(torch::allclose(a.grad(), b + 1.0));
  EXPECT_FALSE(b.grad().defined());
}

struct TwoOutputs : public torch::autograd::Function<TwoOutputs> {
  static variable_list forward(AutogradContext* ctx, Variable x, bool materialize) {
    ctx->set_materialize_grads(materialize);
    return {x * 2, x * 3};
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    ctx->saved_data["second_defined"] = g[1].defined();
    Variable gx = g[0] * 2;
    if (g[1].defined()) gx = gx + g[1] * 3;
    last_second_defined = g[1].defined();
    return {gx, Variable()};
  }
  static inline bool last_second_defined = false;
};

TEST(LibtorchCustomFunction, VariableListOutputsAndMaterializeGrads) {
  auto x = torch::ones({2}, torch::requires_grad());
  auto outs = TwoOutputs::apply(x, true);
  ASSERT_EQ(outs.size(), 2u);
  EXPECT_EQ(outs[1].output_nr(), 1u);
  outs[0].sum().backward();
  EXPECT_TRUE(TwoOutputs::last_second_defined);  // zeros by default
  EXPECT_EQ(values(x.grad()), (std::vector<double>{2, 2}));
  x.mutable_grad() = torch::Tensor();
  TwoOutputs::apply(x, false)[0].sum().backward();
  EXPECT_FALSE(TwoOutputs::last_second_defined);  // set_materialize_grads(false): undefined
  EXPECT_EQ(values(x.grad()), (std::vector<double>{2, 2}));
  x.mutable_grad() = torch::Tensor();
  auto both = TwoOutputs::apply(x, false);
  (both[0] + both[1]).sum().backward();
  EXPECT_EQ(values(x.grad()), (std::vector<double>{5, 5}));
}

struct AddOneInPlace : public torch::autograd::Function<AddOneInPlace> {
  static Variable forward(AutogradContext* ctx, Variable x) {
    x.add_(1);
    ctx->mark_dirty({x});
    return x;
  }
  static variable_list backward(AutogradContext*, variable_list g) { return {g[0]}; }
};

TEST(LibtorchCustomFunction, MarkDirtyRebasesTheInput) {
  auto leaf = torch::ones({3}, torch::requires_grad());
  auto x = leaf.clone();
  const auto version = x._version();
  auto y = AddOneInPlace::apply(x);
  EXPECT_TRUE(y.is_same(x));
  EXPECT_EQ(x._version(), version + 2);  // add_ and mark_dirty each bump it, as in libtorch
  EXPECT_EQ(x.grad_fn()->name(), node_name("AddOneInPlace"));
  (y * y).sum().backward();
  EXPECT_EQ(values(leaf.grad()), (std::vector<double>{4, 4, 4}));
  EXPECT_EQ(error_of([&] { AddOneInPlace::apply(leaf); }),
            "a leaf Variable that requires grad has been used in an in-place operation.");
}

struct ValueAndIndex : public torch::autograd::Function<ValueAndIndex> {
  static variable_list forward(AutogradContext* ctx, Variable x) {
    auto idx = x.argmax();
    auto mask = (x > 0).to(torch::kFloat);
    ctx->mark_non_differentiable({idx, mask});
    return {x * 2, idx, mask};
  }
  static variable_list backward(AutogradContext*, variable_list g) { return {g[0] * 2}; }
};

TEST(LibtorchCustomFunction, MarkNonDifferentiableOutputsDoNotRequireGrad) {
  auto x = torch::tensor({1.0, 3.0, -2.0}, torch::requires_grad());
  auto outs = ValueAndIndex::apply(x);
  EXPECT_TRUE(outs[0].requires_grad());
  EXPECT_FALSE(outs[1].requires_grad());
  EXPECT_FALSE(outs[2].requires_grad());
  EXPECT_EQ(outs[1].item<int64_t>(), 1);
  outs[0].sum().backward();
  EXPECT_EQ(values(x.grad()), (std::vector<double>{2, 2, 2}));
}

struct Identity : public torch::autograd::Function<Identity> {
  static Variable forward(AutogradContext*, Variable x) { return x; }
  static variable_list backward(AutogradContext*, variable_list g) { return {g[0] * 10}; }
};

TEST(LibtorchCustomFunction, ReturningAnInputGivesANewTensorWithHistory) {
  auto x = torch::ones({2}, torch::requires_grad());
  auto y = Identity::apply(x);
  EXPECT_FALSE(y.is_same(x));
  EXPECT_TRUE(x.is_leaf());
  EXPECT_EQ(y.grad_fn()->name(), node_name("Identity"));
  y.sum().backward();
  EXPECT_EQ(values(x.grad()), (std::vector<double>{10, 10}));
}

// Sums a list of tensors (each a tensor argument) and returns a view of the result.
struct SumListAsRow : public torch::autograd::Function<SumListAsRow> {
  static Variable forward(AutogradContext* ctx, torch::TensorList xs, int64_t n) {
    ctx->saved_data["n"] = n;
    auto total = xs[0].clone();
    for (size_t i = 1; i < xs.size(); ++i) total += xs[i];
    return total.view({1, -1});
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    variable_list out;
    auto flat = g[0].view({-1});
    for (int64_t i = 0; i < ctx->saved_data["n"].toInt(); ++i) out.push_back(flat * static_cast<double>(i + 1));
    out.push_back(Variable());
    return out;
  }
};

TEST(LibtorchCustomFunction, TensorListArgumentsAndViewOutputs) {
  auto a = torch::ones({3}, torch::requires_grad());
  auto b = torch::ones({3}, torch::requires_grad());
  std::vector<torch::Tensor> xs{a, b};
  auto y = SumListAsRow::apply(torch::TensorList(xs), int64_t{2});
  EXPECT_EQ(y.sizes().vec(), (std::vector<int64_t>{1, 3}));
  y.sum().backward();
  EXPECT_EQ(values(a.grad()), (std::vector<double>{1, 1, 1}));
  EXPECT_EQ(values(b.grad()), (std::vector<double>{2, 2, 2}));
}

struct TooFew : public torch::autograd::Function<TooFew> {
  static Variable forward(AutogradContext*, Variable x, Variable y) { return x * y; }
  static variable_list backward(AutogradContext*, variable_list g) { return {g[0]}; }
};
struct GradForDouble : public torch::autograd::Function<GradForDouble> {
  static Variable forward(AutogradContext*, Variable x, double c) { return x * c; }
  static variable_list backward(AutogradContext*, variable_list g) { return {g[0], torch::ones({1})}; }
};
struct ExtraUndefined : public torch::autograd::Function<ExtraUndefined> {
  static Variable forward(AutogradContext*, Variable x) { return x * 1; }
  static variable_list backward(AutogradContext*, variable_list g) { return {g[0], Variable(), Variable()}; }
};

TEST(LibtorchCustomFunction, BackwardResultsAreCheckedWithLibtorchsMessages) {
  auto x = torch::ones({3}, torch::requires_grad());
  EXPECT_EQ(error_of([&] { TooFew::apply(x, x).sum().backward(); }),
            "function " + node_name("TooFew") + " returned an incorrect number of gradients (expected 2, got 1)");
  EXPECT_EQ(error_of([&] { GradForDouble::apply(x, 2.0).sum().backward(); }),
            "function " + node_name("GradForDouble") +
                " returned a gradient different that is defined at position 2, but the corresponding forward input "
                "was not a Variable");
  ExtraUndefined::apply(x).sum().backward();  // trailing undefined gradients are dropped
  EXPECT_EQ(values(x.grad()), (std::vector<double>{1, 1, 1}));
}

TEST(LibtorchCustomFunction, NothingIsRecordedWithoutGrad) {
  auto x = torch::ones({2}, torch::requires_grad());
  {
    torch::NoGradGuard no_grad;
    auto y = MulConst::apply(x, 2.0);
    EXPECT_EQ(y.grad_fn(), nullptr);
    EXPECT_FALSE(y.requires_grad());
  }
  auto z = MulConst::apply(torch::ones({2}), 2.0);
  EXPECT_EQ(z.grad_fn(), nullptr);
  EXPECT_FALSE(z.requires_grad());
  EXPECT_EQ(values(z), (std::vector<double>{2, 2}));
}

TEST(LibtorchCustomFunction, SavedTensorsAreCheckedAndFreed) {
  auto a = torch::randn({3}, torch::requires_grad());
  auto b = torch::randn({3});
  auto y = MulAddScaled::apply(a, b, int64_t{0});
  y.sum().backward(torch::Tensor(), /*retain_graph=*/true);
  y.sum().backward();  // the retained graph runs again, then is freed
  EXPECT_TRUE(contains(error_of([&] { y.sum().backward(); }), "Trying to backward through the graph a second time"));
  auto y2 = MulAddScaled::apply(a, b, int64_t{0});
  b.add_(1);  // changes a tensor saved for backward
  EXPECT_TRUE(contains(error_of([&] { y2.sum().backward(); }),
                       "one of the variables needed for gradient computation has been modified by an inplace operation"));
}

struct OptionalBias : public torch::autograd::Function<OptionalBias> {
  static Variable forward(AutogradContext* ctx, Variable x, std::optional<Variable> bias) {
    ctx->saved_data["has_bias"] = bias.has_value();
    return bias ? x + *bias : x * 1;
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    return {g[0], ctx->saved_data["has_bias"].toBool() ? g[0] : Variable()};
  }
};

TEST(LibtorchCustomFunction, OptionalTensorArguments) {
  auto x = torch::ones({2}, torch::requires_grad());
  auto bias = torch::ones({2}, torch::requires_grad());
  OptionalBias::apply(x, std::optional<Variable>(bias)).sum().backward();
  EXPECT_EQ(values(bias.grad()), (std::vector<double>{1, 1}));
  OptionalBias::apply(x, std::optional<Variable>()).sum().backward();
  EXPECT_EQ(values(x.grad()), (std::vector<double>{2, 2}));
}

TEST(LibtorchCustomFunction, SavedDataHoldsLibtorchsValueKinds) {
  AutogradContext ctx;
  ctx.saved_data["d"] = 2.5;
  ctx.saved_data["i"] = 7;
  ctx.saved_data["n"] = size_t{9};
  ctx.saved_data["b"] = true;
  ctx.saved_data["s"] = "mode";
  ctx.saved_data["t"] = torch::ones({2});
  ctx.saved_data["sizes"] = torch::ones({2, 3}).sizes();
  EXPECT_EQ(ctx.saved_data["d"].toDouble(), 2.5);
  EXPECT_EQ(ctx.saved_data["i"].toInt(), 7);
  EXPECT_EQ(ctx.saved_data["n"].toInt(), 9);
  EXPECT_TRUE(ctx.saved_data["b"].toBool());
  EXPECT_EQ(ctx.saved_data["s"].toStringRef(), "mode");
  EXPECT_EQ(ctx.saved_data["t"].toTensor().numel(), 2);
  EXPECT_EQ(ctx.saved_data["sizes"].toIntVector(), (std::vector<int64_t>{2, 3}));
  EXPECT_TRUE(ctx.saved_data["d"].isDouble());
  EXPECT_FALSE(ctx.saved_data["d"].isInt());
  EXPECT_EQ(ctx.saved_data["i"].toScalar().to<double>(), 7.0);
  EXPECT_EQ(error_of([&] { ctx.saved_data["d"].toInt(); }), "[IValue::toInt] expected Int but got Double");
  EXPECT_EQ(error_of([&] { ctx.saved_data["missing"].toTensor(); }), "[IValue::toTensor] expected Tensor but got None");
}

// ============================================================ 5. var / std: libtorch's correction overload

TEST(LibtorchVar, CorrectionIsSpelledAsAnOptional) {
  auto x = torch::tensor({{1.0, 2.0, 3.0, 4.0}, {2.0, 2.0, 2.0, 6.0}}, torch::kDouble);
  // squared deviations per row: 5 and 12
  EXPECT_EQ(values(torch::var(x, {1}, std::optional<int64_t>(2), false)), (std::vector<double>{2.5, 6.0}));
  EXPECT_EQ(values(torch::var(x, {1}, std::optional<int64_t>(0), false)), (std::vector<double>{1.25, 3.0}));
  EXPECT_TRUE(torch::allclose(torch::var(x, {1}, std::nullopt, false), torch::var(x, {1}, true, false)));
  // as in libtorch, a plain number there is `unbiased`: 2 means true
  EXPECT_TRUE(torch::allclose(torch::var(x, {1}, 2, false), torch::var(x, {1}, true, false)));
  EXPECT_EQ(torch::var(x, {1}, std::optional<int64_t>(2), true).sizes().vec(), (std::vector<int64_t>{2, 1}));
  EXPECT_TRUE(torch::allclose(torch::std(x, {1}, std::optional<int64_t>(2)), torch::var(x, {1}, std::optional<int64_t>(2)).sqrt()));
  EXPECT_TRUE(torch::allclose(x.var({1}, std::optional<int64_t>(2)), torch::var(x, {1}, std::optional<int64_t>(2))));
  EXPECT_TRUE(torch::allclose(x.std({0}, std::optional<int64_t>(0), true), x.std({0}, false, true)));
  auto [v, m] = torch::var_mean(x, {1}, std::optional<int64_t>(2));
  EXPECT_EQ(values(v), (std::vector<double>{2.5, 6.0}));
  EXPECT_EQ(values(m), (std::vector<double>{2.5, 3.0}));
  auto xg = x.clone().requires_grad_();
  EXPECT_TRUE(torch::autograd::gradcheck(
      [](const variable_list& in) { return variable_list{torch::std(in[0], {1}, std::optional<int64_t>(2))}; }, {xg}));
}

// ============================================================ 6. warnings

TEST(LibtorchWarnings, HandlerReceivesWarningsAndTheGuardRestoresIt) {
  auto* before = torch::WarningUtils::get_warning_handler();
  CollectWarnings outer;
  {
    torch::WarningUtils::WarningHandlerGuard g1(&outer);
    TROUPE_WARN("value ", 3, " is ", 1.5);
    {
      CollectWarnings inner;
      torch::WarningUtils::WarningHandlerGuard g2(&inner);
      TROUPE_WARN("inner");
      ASSERT_EQ(inner.msgs.size(), 1u);
    }
    TROUPE_WARN("again");
  }
  EXPECT_EQ(torch::WarningUtils::get_warning_handler(), before);
  EXPECT_EQ(outer.msgs, (std::vector<std::string>{"value 3 is 1.5", "again"}));
  EXPECT_EQ(outer.functions[0], "TestBody");
}

void warn_once_here() { TROUPE_WARN_ONCE("only once"); }

TEST(LibtorchWarnings, WarnOnceAndWarnAlways) {
  CollectWarnings w;
  torch::WarningUtils::WarningHandlerGuard guard(&w);
  warn_once_here();
  warn_once_here();
  EXPECT_EQ(w.msgs.size(), 1u);
  torch::WarningUtils::set_warnAlways(true);
  warn_once_here();
  torch::WarningUtils::set_warnAlways(false);
  EXPECT_EQ(w.msgs.size(), 2u);
}

TEST(LibtorchWarnings, TheBaseHandlerPrintsUserWarning) {
  testing::internal::CaptureStderr();
  TROUPE_WARN("printed");
  TROUPE_WARN_DEPRECATION("old");
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "UserWarning: printed\nDeprecationWarning: old\n");
}

// ============================================================ 7. torch::tensor of a std::vector / ArrayRef

TEST(LibtorchTensorOfVector, DtypesFollowLibtorch) {
  std::vector<double> d{1, 2};
  EXPECT_EQ(torch::tensor(d).dtype(), torch::kFloat);  // torch::tensor, unlike at::tensor, gives the default dtype
  EXPECT_EQ(torch::tensor(torch::ArrayRef<double>(d)).dtype(), torch::kFloat);
  EXPECT_EQ(torch::tensor({1.0, 2.0}).dtype(), torch::kFloat);
  EXPECT_EQ(torch::tensor(d, torch::kDouble).dtype(), torch::kDouble);
  EXPECT_EQ(torch::tensor(std::vector<float>{1, 2}).dtype(), torch::kFloat);
  EXPECT_EQ(torch::tensor(std::vector<int>{1, 2}).dtype(), torch::kLong);
  EXPECT_EQ(torch::tensor(std::vector<int64_t>{1, 2}).dtype(), torch::kLong);
  EXPECT_EQ(torch::tensor(std::vector<uint8_t>{1, 2}).dtype(), torch::kByte);
  EXPECT_EQ(values(torch::tensor(std::vector<double>{0.5, 1.5})), (std::vector<double>{0.5, 1.5}));
  auto g = torch::tensor(d, torch::dtype(torch::kDouble).requires_grad(true));
  EXPECT_TRUE(g.requires_grad());
}

// ============================================================ 8. the opt-in c10 helpers

TEST(LibtorchC10, IrangeAndStr) {
  int64_t sum = 0;
  for (const auto i : c10::irange(5)) sum += i;
  EXPECT_EQ(sum, 10);
  std::vector<size_t> seen;
  for (const auto i : c10::irange(2, size_t{5})) seen.push_back(i);
  EXPECT_EQ(seen, (std::vector<size_t>{2, 3, 4}));
  int count = 0;
  for (const auto i : c10::irange(-3)) count += 1 + static_cast<int>(i);
  EXPECT_EQ(count, 0);
  EXPECT_EQ(c10::str("got ", 3, " of ", 2.5), "got 3 of 2.5");
  c10::optional<int64_t> none = c10::nullopt;
  EXPECT_FALSE(none.has_value());
  c10::IValue v = 4.0;
  EXPECT_EQ(v.toDouble(), 4.0);
}

}  // namespace
