// The optimizers (SGD, Adam, AdamW, RMSprop) and the Optimizer base, against PyTorch 1.13
// (tests/fixtures/optim.txt from gen_optim.py): 20-step trajectories of every configuration and the
// final state_dicts, keys and values; param groups, zero_grad, closures, parameters without a
// gradient; a run resumed from a checkpoint file continues bit for bit; failed loads change nothing;
// constructor errors with PyTorch's texts; the fused float32/float64 path against the slow path.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <unistd.h>

#include "fixtures.h"
#include <troupe/nn/modules/linear.h>
#include <troupe/optim/optim.h>
#include <troupe/nn/serialize.h>
#include <troupe/tensor/autograd.h>
#include <troupe/tensor/backend.h>
#include <troupe/tensor/ops.h>
#include <troupe/tensor/random.h>

namespace {

using namespace troupe;
using troupe::testing::Fixtures;
using troupe::testing::tensors_close;
using troupe::nn::StateDict;

const Fixtures& fx() {
  static Fixtures f = Fixtures::load("optim.txt");
  return f;
}

bool bits_equal(const Tensor& a, const Tensor& b) { return tensors_close(a, b, 0, 0, true); }

template <class Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "no exception";
}

// ------------------------------------------------------------------------------------- the problem

// gen_optim.py's problem: w (3, 4), b (4,) and the loss 0.5*((w-tw)^2*cw).sum() + 0.5*((b-tb)^2*cb).sum().
struct Problem {
  Tensor w, b, tw, tb, cw, cb;
  explicit Problem(bool float32) {
    const std::string tag = float32 ? "init32." : "init.";
    w = fx().get(tag + "w").requires_grad_(true);
    b = fx().get(tag + "b").requires_grad_(true);
    tw = fx().get(tag + "tw");
    tb = fx().get(tag + "tb");
    cw = fx().get(tag + "cw");
    cb = fx().get(tag + "cb");
  }
  Tensor loss() const {
    Tensor ew = w - tw, eb = b - tb;
    return 0.5 * (ew * ew * cw).sum() + 0.5 * (eb * eb * cb).sum();
  }
};

using Factory = std::function<std::unique_ptr<optim::Optimizer>(const Tensor& w, const Tensor& b)>;
struct Config {
  std::string name;
  bool float32;
  Factory make;
};

template <class Opt, class Options>
Factory one_group(Options o) {
  return [o](const Tensor& w, const Tensor& b) { return std::make_unique<Opt>(std::vector<Tensor>{w, b}, o); };
}

// Group 0 {w} with the defaults, group 1 {b} with its own options.
template <class Opt, class Options>
Factory two_groups(Options defaults, Options second) {
  return [defaults, second](const Tensor& w, const Tensor& b) {
    std::vector<optim::OptimizerParamGroup> groups;
    groups.emplace_back(std::vector<Tensor>{w});
    groups.emplace_back(std::vector<Tensor>{b}, std::make_unique<Options>(second));
    return std::make_unique<Opt>(std::move(groups), defaults);
  };
}

// The configurations of gen_optim.py, by optimizer.
std::vector<Config> sgd_configs() {
  using optim::SGD, optim::SGDOptions;
  return {
      {"sgd_plain", false, one_group<SGD>(SGDOptions(0.1))},
      {"sgd_momentum", false, one_group<SGD>(SGDOptions(0.05).momentum(0.9))},
      {"sgd_dampening", false, one_group<SGD>(SGDOptions(0.05).momentum(0.9).dampening(0.3))},
      {"sgd_nesterov", false, one_group<SGD>(SGDOptions(0.05).momentum(0.9).nesterov(true))},
      {"sgd_weight_decay", false, one_group<SGD>(SGDOptions(0.05).momentum(0.5).weight_decay(0.1))},
      {"sgd_maximize", false, one_group<SGD>(SGDOptions(0.02).momentum(0.9).maximize(true))},
      {"sgd_groups", false, two_groups<SGD>(SGDOptions(0.1).momentum(0.9), SGDOptions(0.01).momentum(0.5))},
  };
}

std::vector<Config> adam_configs() {
  using optim::Adam, optim::AdamOptions;
  return {
      {"adam_default", false, one_group<Adam>(AdamOptions())},
      {"adam_weight_decay", false, one_group<Adam>(AdamOptions(0.05).weight_decay(0.1))},
      {"adam_amsgrad", false, one_group<Adam>(AdamOptions(0.05).betas({0.8, 0.9}).amsgrad(true))},
      {"adam_maximize", false, one_group<Adam>(AdamOptions(0.05).maximize(true))},
      {"adam_groups", false,
       two_groups<Adam>(AdamOptions(0.05).betas({0.8, 0.9}), AdamOptions(0.01).betas({0.8, 0.9}).amsgrad(true))},
      {"adam_float32", true, one_group<Adam>(AdamOptions(0.05).betas({0.8, 0.9}).weight_decay(0.1).amsgrad(true))},
  };
}

std::vector<Config> adamw_configs() {
  using optim::AdamW, optim::AdamWOptions;
  return {
      {"adamw_default", false, one_group<AdamW>(AdamWOptions())},
      {"adamw_amsgrad", false, one_group<AdamW>(AdamWOptions(0.05).betas({0.8, 0.9}).weight_decay(0.1).amsgrad(true))},
  };
}

std::vector<Config> rmsprop_configs() {
  using optim::RMSprop, optim::RMSpropOptions;
  return {
      {"rmsprop_default", false, one_group<RMSprop>(RMSpropOptions())},
      {"rmsprop_momentum", false, one_group<RMSprop>(RMSpropOptions(0.01).momentum(0.9))},
      {"rmsprop_centered", false, one_group<RMSprop>(RMSpropOptions(0.01).alpha(0.9).centered(true).momentum(0.3))},
      {"rmsprop_weight_decay", false, one_group<RMSprop>(RMSpropOptions(0.01).weight_decay(0.1))},
      {"rmsprop_maximize", false, one_group<RMSprop>(RMSpropOptions(0.01).alpha(0.9).maximize(true))},
  };
}

// Largest |a - e| over the elements.
double max_abs_diff(const Tensor& a, const Tensor& e) {
  return (a.detach().to(kFloat64) - e.to(kFloat64)).abs().max().item<double>();
}

// Runs `c` for 20 steps as gen_optim.py did; compares w and b after the recorded steps and the final
// state_dict (keys, dtypes, values) with PyTorch's. The fused loops round as ATen's CPU kernels do and
// compute the bias corrections with the same libm, so everything agrees bit for bit (both the AVX2+FMA
// and the generic variant of the loops; a libm whose pow() rounds otherwise would show 1-ulp
// differences in Adam's rows).
void check_against_pytorch(const Config& c) {
  SCOPED_TRACE(c.name);
  const double tol = 0;
  Problem pb(c.float32);
  auto opt = c.make(pb.w, pb.b);
  double worst = 0;
  for (int step = 1; step <= 20; ++step) {
    opt->zero_grad();
    pb.loss().backward();
    // the gradient is exactly cw * (w - tw): what PyTorch's autograd gave (asserted by the generator)
    ASSERT_TRUE(bits_equal(pb.w.grad(), pb.cw * (pb.w.detach() - pb.tw)));
    ASSERT_TRUE(bits_equal(pb.b.grad(), pb.cb * (pb.b.detach() - pb.tb)));
    opt->step();
    const std::string key = c.name + ".w." + std::to_string(step);
    if (!fx().has(key)) continue;
    const Tensor ew = fx().get(key), eb = fx().get(c.name + ".b." + std::to_string(step));
    EXPECT_TRUE(tensors_close(pb.w, ew, tol, tol, true)) << "step " << step;
    EXPECT_TRUE(tensors_close(pb.b, eb, tol, tol, true)) << "step " << step;
    worst = std::max({worst, max_abs_diff(pb.w, ew), max_abs_diff(pb.b, eb)});
  }
  // state_dict: the same keys as PyTorch's (flattened), state before groups, same dtypes and values.
  const StateDict sd = opt->state_dict();
  const std::string prefix = c.name + ".";
  std::set<std::string> expected, actual;
  for (const auto& n : fx().names()) {
    if (n.rfind(prefix, 0) != 0) continue;
    const std::string rest = n.substr(prefix.size());
    if (rest.rfind("state.", 0) == 0 || rest.rfind("param_groups.", 0) == 0) expected.insert(rest);
  }
  bool in_groups = false;
  for (const auto& [k, v] : sd) {
    actual.insert(k);
    if (k.rfind("param_groups.", 0) == 0) in_groups = true;
    else EXPECT_FALSE(in_groups) << "state key " << k << " after the param_groups keys";
  }
  EXPECT_EQ(actual, expected);
  for (const auto& k : expected) {
    if (!sd.contains(k)) continue;
    const Tensor e = fx().get(prefix + k);
    EXPECT_TRUE(tensors_close(sd.at(k), e, tol, tol, true)) << k;
    if (e.is_floating_point()) worst = std::max(worst, max_abs_diff(sd.at(k), e));
  }
  std::printf("[ optim    ] %-22s max |troupe - PyTorch| over w, b and the state: %.3g\n", c.name.c_str(), worst);
}

// ------------------------------------------------------------------------------------- trajectories

TEST(SGD, TrajectoriesAndStateDictsMatchPyTorch) {
  for (const auto& c : sgd_configs()) check_against_pytorch(c);
}

TEST(Adam, TrajectoriesAndStateDictsMatchPyTorch) {
  for (const auto& c : adam_configs()) check_against_pytorch(c);
}

TEST(AdamW, TrajectoriesAndStateDictsMatchPyTorch) {
  for (const auto& c : adamw_configs()) check_against_pytorch(c);
}

TEST(RMSprop, TrajectoriesAndStateDictsMatchPyTorch) {
  for (const auto& c : rmsprop_configs()) check_against_pytorch(c);
}

// ------------------------------------------------------------------------------------- constructors

TEST(SGD, ConstructorErrorsAsPyTorch) {
  using optim::SGD, optim::SGDOptions;
  Tensor w = randn({2, 2}).requires_grad_(true);
  EXPECT_EQ(error_of([&] { SGD({w}, SGDOptions(-1)); }), "Invalid learning rate: -1");
  EXPECT_EQ(error_of([&] { SGD({w}, SGDOptions(-0.1)); }), "Invalid learning rate: -0.1");
  EXPECT_EQ(error_of([&] { SGD({w}, SGDOptions(0.1).momentum(-0.5)); }), "Invalid momentum value: -0.5");
  EXPECT_EQ(error_of([&] { SGD({w}, SGDOptions(0.1).weight_decay(-1e-05)); }), "Invalid weight_decay value: -1e-05");
  EXPECT_EQ(error_of([&] { SGD({w}, SGDOptions(0.1).nesterov(true)); }),
            "Nesterov momentum requires a momentum and zero dampening");
  EXPECT_EQ(error_of([&] { SGD({w}, SGDOptions(0.1).momentum(0.9).dampening(0.1).nesterov(true)); }),
            "Nesterov momentum requires a momentum and zero dampening");
  // the options are checked before the parameters, as in PyTorch
  EXPECT_EQ(error_of([&] { SGD(std::vector<Tensor>{}, SGDOptions(-1)); }), "Invalid learning rate: -1");
  EXPECT_EQ(error_of([&] { SGD(std::vector<Tensor>{}, SGDOptions(0.1)); }), "optimizer got an empty parameter list");
  EXPECT_NO_THROW(SGD({w}, SGDOptions(0.1).momentum(0.9).nesterov(true)));
}

TEST(Adam, ConstructorErrorsAsPyTorch) {
  using optim::Adam, optim::AdamOptions;
  Tensor w = randn({2, 2}).requires_grad_(true);
  EXPECT_EQ(error_of([&] { Adam({w}, AdamOptions(-1)); }), "Invalid learning rate: -1");
  EXPECT_EQ(error_of([&] { Adam({w}, AdamOptions(std::nan(""))); }), "Invalid learning rate: nan");
  EXPECT_EQ(error_of([&] { Adam({w}, AdamOptions().eps(-1e-8)); }), "Invalid epsilon value: -1e-08");
  EXPECT_EQ(error_of([&] { Adam({w}, AdamOptions().betas({1.5, 0.999})); }), "Invalid beta parameter at index 0: 1.5");
  EXPECT_EQ(error_of([&] { Adam({w}, AdamOptions().betas({0.9, -0.25})); }),
            "Invalid beta parameter at index 1: -0.25");
  EXPECT_EQ(error_of([&] { Adam({w}, AdamOptions().betas({0.9, 1})); }), "Invalid beta parameter at index 1: 1");
  EXPECT_EQ(error_of([&] { Adam({w}, AdamOptions().weight_decay(-0.5)); }), "Invalid weight_decay value: -0.5");
  const optim::AdamOptions d;
  EXPECT_EQ(d.lr(), 1e-3);
  EXPECT_EQ(std::get<0>(d.betas()), 0.9);
  EXPECT_EQ(std::get<1>(d.betas()), 0.999);
  EXPECT_EQ(d.eps(), 1e-8);
  EXPECT_EQ(d.weight_decay(), 0);
  EXPECT_FALSE(d.amsgrad());
  EXPECT_FALSE(d.maximize());
}

TEST(AdamW, ConstructorErrorsAndDefaultsAsPyTorch) {
  using optim::AdamW, optim::AdamWOptions;
  Tensor w = randn({2, 2}).requires_grad_(true);
  EXPECT_EQ(error_of([&] { AdamW({w}, AdamWOptions(-0.001)); }), "Invalid learning rate: -0.001");
  EXPECT_EQ(error_of([&] { AdamW({w}, AdamWOptions().betas({-0.1, 0.9})); }),
            "Invalid beta parameter at index 0: -0.1");
  EXPECT_EQ(error_of([&] { AdamW({w}, AdamWOptions().weight_decay(-1)); }), "Invalid weight_decay value: -1");
  EXPECT_EQ(AdamWOptions().weight_decay(), 1e-2);  // unlike Adam's 0
  EXPECT_EQ(AdamWOptions().lr(), 1e-3);
}

TEST(RMSprop, ConstructorErrorsAndDefaultsAsPyTorch) {
  using optim::RMSprop, optim::RMSpropOptions;
  Tensor w = randn({2, 2}).requires_grad_(true);
  EXPECT_EQ(error_of([&] { RMSprop({w}, RMSpropOptions(-1)); }), "Invalid learning rate: -1");
  EXPECT_EQ(error_of([&] { RMSprop({w}, RMSpropOptions().eps(-1)); }), "Invalid epsilon value: -1");
  EXPECT_EQ(error_of([&] { RMSprop({w}, RMSpropOptions().momentum(-0.9)); }), "Invalid momentum value: -0.9");
  EXPECT_EQ(error_of([&] { RMSprop({w}, RMSpropOptions().weight_decay(-0.1)); }), "Invalid weight_decay value: -0.1");
  EXPECT_EQ(error_of([&] { RMSprop({w}, RMSpropOptions().alpha(-0.5)); }), "Invalid alpha value: -0.5");
  const RMSpropOptions d;
  EXPECT_EQ(d.lr(), 1e-2);
  EXPECT_EQ(d.alpha(), 0.99);
  EXPECT_EQ(d.eps(), 1e-8);
  EXPECT_EQ(d.momentum(), 0);
  EXPECT_FALSE(d.centered());
}

// ------------------------------------------------------------------------------------- the base

TEST(OptimParamGroups, OwnOptionsDefaultsAndAddParamGroup) {
  using optim::SGD, optim::SGDOptions;
  Tensor w = randn({3}).requires_grad_(true), b = randn({2}).requires_grad_(true);
  Tensor c = randn({4}).requires_grad_(true), d = randn({1}).requires_grad_(true);
  std::vector<optim::OptimizerParamGroup> groups;
  groups.emplace_back(std::vector<Tensor>{w});
  groups.emplace_back(std::vector<Tensor>{b}, std::make_unique<SGDOptions>(SGDOptions(0.5).momentum(0.1)));
  SGD opt(std::move(groups), SGDOptions(0.1).momentum(0.9));
  auto opts = [&](size_t g) { return static_cast<const SGDOptions&>(opt.param_groups()[g].options()); };
  ASSERT_EQ(opt.param_groups().size(), 2u);
  EXPECT_EQ(opts(0).lr(), 0.1);  // filled from the defaults
  EXPECT_EQ(opts(0).momentum(), 0.9);
  EXPECT_EQ(opts(1).lr(), 0.5);
  EXPECT_EQ(opts(1).momentum(), 0.1);

  opt.add_param_group(optim::OptimizerParamGroup({c}));
  opt.add_param_group(optim::OptimizerParamGroup({d}, std::make_unique<SGDOptions>(SGDOptions(0.25))));
  ASSERT_EQ(opt.param_groups().size(), 4u);
  EXPECT_EQ(opts(2).lr(), 0.1);
  EXPECT_EQ(opts(2).momentum(), 0.9);
  EXPECT_EQ(opts(3).lr(), 0.25);
  EXPECT_EQ(opts(3).momentum(), 0);
  EXPECT_EQ(opt.size(), 4u);
  EXPECT_TRUE(opt.parameters()[2].is_same(c));
  // the defaults are copied into a group, not shared
  opt.param_groups()[2].options().set_lr(7);
  EXPECT_EQ(opt.defaults().get_lr(), 0.1);
  EXPECT_EQ(opts(2).get_lr(), 7);
}

// print(optimizer): PyTorch's layout (class name, "Parameter Group <g>", each option sorted by name
// with Python's text of its value; initial_lr once a scheduler set it). troupe's groups hold the
// options it implements, so PyTorch's foreach / differentiable / fused / capturable keys are absent.
TEST(OptimPrint, PyTorchLayoutFromTheOptionFields) {
  Tensor w = randn({3}).requires_grad_(true), b = randn({2}).requires_grad_(true);
  std::vector<optim::OptimizerParamGroup> groups;
  groups.emplace_back(std::vector<Tensor>{w});
  groups.emplace_back(std::vector<Tensor>{b}, std::make_unique<optim::SGDOptions>(optim::SGDOptions(0.5).nesterov(true).momentum(0.25)));
  optim::SGD sgd(std::move(groups), optim::SGDOptions(0.1).momentum(0.9).weight_decay(1e-4));
  EXPECT_EQ(sgd.repr(),
            "SGD (\n"
            "Parameter Group 0\n"
            "    dampening: 0\n    lr: 0.1\n    maximize: False\n    momentum: 0.9\n    nesterov: False\n"
            "    weight_decay: 0.0001\n"
            "\n"  // Python's loop opens every group after the first with a blank line
            "Parameter Group 1\n"
            "    dampening: 0\n    lr: 0.5\n    maximize: False\n    momentum: 0.25\n    nesterov: True\n"
            "    weight_decay: 0\n"
            ")");
  optim::Adam adam({w}, optim::AdamOptions(1e-3).amsgrad(true));
  optim::StepLR sched(adam, /*step_size=*/2);
  std::ostringstream os;
  os << adam;
  EXPECT_EQ(os.str(),
            "Adam (\n"
            "Parameter Group 0\n"
            "    amsgrad: True\n    betas: (0.9, 0.999)\n    eps: 1e-08\n    initial_lr: 0.001\n    lr: 0.001\n"
            "    maximize: False\n    weight_decay: 0\n"
            ")");
  optim::RMSprop rms({w}, optim::RMSpropOptions(0.01).centered(true));
  EXPECT_EQ(rms.repr(),
            "RMSprop (\n"
            "Parameter Group 0\n"
            "    alpha: 0.99\n    centered: True\n    eps: 1e-08\n    lr: 0.01\n    maximize: False\n"
            "    momentum: 0\n    weight_decay: 0\n"
            ")");
}

// The one field list drives state_dict: every option of every optimizer is written under its name
// and read back into a fresh options struct.
TEST(OptimOptionFields, WriteThenReadRestoresEveryOption) {
  optim::AdamWOptions a(0.02);
  a.betas({0.8, 0.95}).eps(1e-6).weight_decay(0.3).amsgrad(true).maximize(true);
  StateDict sd;
  a.write(sd, "g.");
  EXPECT_EQ(sd.keys(), (std::vector<std::string>{"g.lr", "g.betas.0", "g.betas.1", "g.eps", "g.weight_decay",
                                                 "g.amsgrad", "g.maximize"}));
  optim::AdamWOptions b;
  b.read(sd, "g.");
  EXPECT_EQ(b.repr_items(), a.repr_items());
  EXPECT_EQ(std::get<1>(b.betas()), 0.95);
  optim::RMSpropOptions r(0.5);
  StateDict rs;
  r.write(rs, "");
  // PyTorch's group order, not the declaration order: centered comes before weight_decay.
  EXPECT_EQ(rs.keys(),
            (std::vector<std::string>{"lr", "momentum", "alpha", "eps", "centered", "weight_decay", "maximize"}));
  rs.erase("eps");
  EXPECT_EQ(error_of([&] { optim::RMSpropOptions().read(rs, ""); }),
            "[Optimizer.load_state_dict] missing key 'eps'");
}

TEST(OptimParamGroups, EachGroupStepsWithItsOwnLr) {
  using optim::SGD, optim::SGDOptions;
  Tensor w = tensor({1.0, 2.0}, kFloat64).requires_grad_(true);
  Tensor b = tensor({3.0}, kFloat64).requires_grad_(true);
  std::vector<optim::OptimizerParamGroup> groups;
  groups.emplace_back(std::vector<Tensor>{w});
  groups.emplace_back(std::vector<Tensor>{b}, std::make_unique<SGDOptions>(SGDOptions(0.5)));
  SGD opt(std::move(groups), SGDOptions(0.25));
  w.set_grad(tensor({1.0, -2.0}, kFloat64));
  b.set_grad(tensor({4.0}, kFloat64));
  opt.step();
  EXPECT_TRUE(bits_equal(w.detach(), tensor({0.75, 2.5}, kFloat64)));
  EXPECT_TRUE(bits_equal(b.detach(), tensor({1.0}, kFloat64)));
  // set_lr changes the group's lr (what a scheduler does)
  opt.param_groups()[1].options().set_lr(0.125);
  opt.step();
  EXPECT_TRUE(bits_equal(b.detach(), tensor({0.5}, kFloat64)));
}

TEST(OptimParamGroups, Errors) {
  using optim::SGD, optim::SGDOptions;
  Tensor w = randn({3}).requires_grad_(true), b = randn({2}).requires_grad_(true);
  SGD opt({w}, SGDOptions(0.1));
  EXPECT_EQ(error_of([&] { opt.add_param_group(optim::OptimizerParamGroup({b, w})); }),
            "some parameters appear in more than one parameter group");
  EXPECT_EQ(opt.param_groups().size(), 1u);  // a refused group is not added
  Tensor nonleaf = w * 2;
  EXPECT_EQ(error_of([&] { SGD({nonleaf}, SGDOptions(0.1)); }), "can't optimize a non-leaf Tensor");
  EXPECT_EQ(error_of([&] { opt.add_param_group(optim::OptimizerParamGroup({nonleaf})); }),
            "can't optimize a non-leaf Tensor");
  EXPECT_EQ(error_of([&] { SGD(std::vector<Tensor>{}, SGDOptions(0.1)); }), "optimizer got an empty parameter list");
  EXPECT_EQ(error_of([&] { SGD(std::vector<optim::OptimizerParamGroup>{}, SGDOptions(0.1)); }),
            "optimizer got an empty parameter list");
  EXPECT_NE(error_of([&] { SGD({b, b}, SGDOptions(0.1)); }), "no exception");
  EXPECT_NE(error_of([&] { SGD({arange(3)}, SGDOptions(0.1)); }), "no exception");  // int64: not floating
}

TEST(OptimZeroGrad, SetToNoneAndZeroInPlace) {
  Tensor w = randn({3}).requires_grad_(true);
  optim::SGD opt({w}, optim::SGDOptions(0.1));
  (w * w).sum().backward();
  ASSERT_TRUE(w.grad().defined());
  opt.zero_grad(false);
  ASSERT_TRUE(w.grad().defined());
  EXPECT_TRUE(bits_equal(w.grad(), zeros({3})));
  (w * 3).sum().backward();  // accumulates into the zeroed gradient
  EXPECT_TRUE(bits_equal(w.grad(), full({3}, 3.0)));
  opt.zero_grad();  // set_to_none = true
  EXPECT_FALSE(w.grad().defined());
  opt.zero_grad(false);  // nothing to zero
  EXPECT_FALSE(w.grad().defined());
}

TEST(OptimClosure, StepRunsTheClosureWithGradientsAndReturnsItsLoss) {
  Problem pb(false), ref(false);
  optim::SGD opt({pb.w, pb.b}, optim::SGDOptions(0.1).momentum(0.9));
  optim::SGD ref_opt({ref.w, ref.b}, optim::SGDOptions(0.1).momentum(0.9));
  int calls = 0;
  for (int step = 0; step < 3; ++step) {
    NoGradGuard no_grad;  // step enables gradients for the closure itself
    Tensor loss = opt.step([&] {
      ++calls;
      EXPECT_TRUE(autograd::GradMode::is_enabled());
      opt.zero_grad();
      Tensor l = pb.loss();
      l.backward();
      return l;
    });
    Tensor ref_loss;
    {
      EnableGradGuard enable;
      ref_opt.zero_grad();
      ref_loss = ref.loss();
      ref_loss.backward();
    }
    ref_opt.step();
    ASSERT_TRUE(loss.defined());
    EXPECT_TRUE(bits_equal(loss.detach(), ref_loss.detach()));
    EXPECT_FALSE(autograd::GradMode::is_enabled());  // the guard is back after step
  }
  EXPECT_EQ(calls, 3);
  EXPECT_TRUE(bits_equal(pb.w.detach(), ref.w.detach()));
  EXPECT_FALSE(opt.step().defined());  // no closure: no loss
}

TEST(OptimNoGrad, ParametersWithoutAGradientAreSkipped) {
  Problem pb(false);
  Tensor unused = randn({5}, kFloat64).requires_grad_(true);
  const Tensor before = unused.detach().clone();
  optim::Adam opt({pb.w, unused, pb.b}, optim::AdamOptions(0.1));
  for (int i = 0; i < 3; ++i) {
    opt.zero_grad();
    pb.loss().backward();
    opt.step();
  }
  EXPECT_TRUE(bits_equal(unused.detach(), before));
  EXPECT_EQ(opt.state().size(), 2u);
  EXPECT_EQ(opt.state().count(unused.impl()), 0u);
  const StateDict sd = opt.state_dict();
  EXPECT_TRUE(sd.contains("state.0.exp_avg"));
  EXPECT_FALSE(sd.contains("state.1.step"));  // PyTorch numbers the parameters, with or without state
  EXPECT_TRUE(sd.contains("state.2.exp_avg"));
  EXPECT_EQ(sd.at("param_groups.0.params").to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2}));
  // ... and the others step as if it were not there
  Problem ref(false);
  optim::Adam ref_opt({ref.w, ref.b}, optim::AdamOptions(0.1));
  for (int i = 0; i < 3; ++i) {
    ref_opt.zero_grad();
    ref.loss().backward();
    ref_opt.step();
  }
  EXPECT_TRUE(bits_equal(pb.w.detach(), ref.w.detach()));
  EXPECT_TRUE(bits_equal(pb.b.detach(), ref.b.detach()));
}

TEST(SGD, NoMomentumKeepsNoBufferAndUpdatesInPlace) {
  Problem pb(false);
  optim::SGD opt({pb.w, pb.b}, optim::SGDOptions(0.1));
  TensorImpl* impl = pb.w.impl();
  const auto version = pb.w._version();
  pb.loss().backward();
  opt.step();
  EXPECT_EQ(pb.w.impl(), impl);
  EXPECT_GT(pb.w._version(), version);  // an in-place update, as PyTorch's p.add_
  for (const auto& [k, v] : opt.state_dict()) EXPECT_EQ(k.rfind("state.", 0), std::string::npos) << k;
}

// ------------------------------------------------------------------------------------- checkpoints

// A small regression model: Linear(4, 3) on fixed data, mean squared error.
struct Regression {
  Tensor x, y;
  Regression() {
    manual_seed(7);
    x = randn({8, 4});
    y = randn({8, 3});
  }
  std::shared_ptr<nn::LinearImpl> model(uint64_t seed) const {
    manual_seed(seed);
    return std::make_shared<nn::LinearImpl>(4, 3);
  }
  void train(nn::LinearImpl& m, optim::Optimizer& opt, int steps) const {
    for (int i = 0; i < steps; ++i) {
      opt.zero_grad();
      Tensor e = m.forward(x) - y;
      (e * e).mean().backward();
      opt.step();
    }
  }
};

// 10 steps, then model + optimizer state_dicts into one checkpoint file (nn::save), read back
// (nn::load_state_dict_file) into a fresh model and a fresh optimizer made with other options, 10 more
// steps: the same parameters, bit for bit, as 20 uninterrupted steps.
template <class Opt, class Options>
void check_resume(const Options& options, const Options& other_options) {
  const Regression r;
  auto m1 = r.model(1);
  Opt o1(m1->parameters(), options);
  r.train(*m1, o1, 20);

  auto m2 = r.model(1);
  Opt o2(m2->parameters(), options);
  r.train(*m2, o2, 10);
  StateDict ckpt;
  for (const auto& [k, v] : m2->state_dict()) ckpt.insert_or_assign("model." + k, v);
  for (const auto& [k, v] : o2.state_dict()) ckpt.insert_or_assign("optim." + k, v);
  const auto path = (std::filesystem::temp_directory_path() /
                     ("troupe_optim_resume_" + std::to_string(::getpid()) + ".ckpt"))
                        .string();
  nn::save(ckpt, path);
  const StateDict loaded = nn::load_state_dict_file(path);
  std::filesystem::remove(path);

  auto m3 = r.model(2);  // other initial weights, other options: everything comes from the file
  Opt o3(m3->parameters(), other_options);
  StateDict model_sd, optim_sd;
  for (const auto& [k, v] : loaded) {
    if (k.rfind("model.", 0) == 0) model_sd.insert_or_assign(k.substr(6), v);
    else optim_sd.insert_or_assign(k.substr(6), v);
  }
  m3->load_state_dict(model_sd);
  o3.load_state_dict(optim_sd);
  EXPECT_EQ(o3.param_groups()[0].options().get_lr(), options.lr());
  r.train(*m3, o3, 10);
  EXPECT_TRUE(bits_equal(m3->weight.detach(), m1->weight.detach()));
  EXPECT_TRUE(bits_equal(m3->bias.detach(), m1->bias.detach()));
  // and the optimizers' states agree too
  const StateDict s1 = o1.state_dict(), s3 = o3.state_dict();
  ASSERT_EQ(s1.size(), s3.size());
  for (const auto& [k, v] : s1) {
    ASSERT_TRUE(s3.contains(k)) << k;
    EXPECT_TRUE(bits_equal(s3.at(k), v)) << k;
  }
}

TEST(SGD, ResumedFromACheckpointContinuesBitForBit) {
  check_resume<optim::SGD>(optim::SGDOptions(0.1).momentum(0.9).nesterov(true).weight_decay(0.01),
                           optim::SGDOptions(0.5));
}

TEST(Adam, ResumedFromACheckpointContinuesBitForBit) {
  check_resume<optim::Adam>(optim::AdamOptions(0.05).weight_decay(0.01).amsgrad(true), optim::AdamOptions(0.5));
}

TEST(AdamW, ResumedFromACheckpointContinuesBitForBit) {
  check_resume<optim::AdamW>(optim::AdamWOptions(0.05).amsgrad(true), optim::AdamWOptions(0.5).amsgrad(true));
}

TEST(RMSprop, ResumedFromACheckpointContinuesBitForBit) {
  check_resume<optim::RMSprop>(optim::RMSpropOptions(0.01).momentum(0.5).centered(true).weight_decay(0.01),
                               optim::RMSpropOptions(0.1).momentum(0.5).centered(true));
}

// Bit-for-bit equality of two state_dicts.
void expect_same_dict(const StateDict& a, const StateDict& b) {
  ASSERT_EQ(a.size(), b.size());
  auto ia = a.begin();
  for (const auto& [k, v] : b) {
    EXPECT_EQ(ia->first, k);
    EXPECT_TRUE(bits_equal(ia->second, v)) << k;
    ++ia;
  }
}

TEST(OptimLoadStateDict, ErrorsLeaveTheOptimizerUnchanged) {
  using optim::Adam, optim::AdamOptions;
  auto two_groups = [](const Tensor& w, const Tensor& b, double lr) {
    std::vector<optim::OptimizerParamGroup> g;
    g.emplace_back(std::vector<Tensor>{w});
    g.emplace_back(std::vector<Tensor>{b});
    return std::make_unique<Adam>(std::move(g), AdamOptions(lr).amsgrad(true));
  };
  Problem src(false);
  auto saved_opt = two_groups(src.w, src.b, 0.1);
  for (int i = 0; i < 3; ++i) {
    saved_opt->zero_grad();
    src.loss().backward();
    saved_opt->step();
  }
  const StateDict saved = saved_opt->state_dict();

  Problem dst(false);
  auto target = two_groups(dst.w, dst.b, 0.2);
  target->zero_grad();
  dst.loss().backward();
  target->step();  // some state of its own
  const StateDict before = target->state_dict();

  // a different number of groups
  Adam one_group({dst.w, dst.b}, AdamOptions(0.2));
  EXPECT_EQ(error_of([&] { one_group.load_state_dict(saved); }),
            "loaded state dict has a different number of parameter groups");
  EXPECT_TRUE(one_group.state_dict().contains("param_groups.0.lr"));
  EXPECT_TRUE(one_group.state().empty());

  // a group of another size
  Tensor extra = randn({2}, kFloat64).requires_grad_(true);
  std::vector<optim::OptimizerParamGroup> g;
  g.emplace_back(std::vector<Tensor>{dst.w});
  g.emplace_back(std::vector<Tensor>{dst.b, extra});
  Adam bigger(std::move(g), AdamOptions(0.2));
  EXPECT_EQ(error_of([&] { bigger.load_state_dict(saved); }),
            "loaded state dict contains a parameter group that doesn't match the size of optimizer's group");

  // a missing option, a missing state tensor, a malformed step
  StateDict no_lr = saved, no_exp_avg = saved, bad_step = saved;
  no_lr.erase("param_groups.1.lr");
  no_exp_avg.erase("state.1.exp_avg");
  bad_step.insert_or_assign("state.0.step", tensor({1.0, 2.0}));
  EXPECT_EQ(error_of([&] { target->load_state_dict(no_lr); }),
            "[Optimizer.load_state_dict] missing key 'param_groups.1.lr'");
  expect_same_dict(target->state_dict(), before);
  EXPECT_EQ(error_of([&] { target->load_state_dict(no_exp_avg); }),
            "[Optimizer.load_state_dict] missing key 'state.1.exp_avg'");
  expect_same_dict(target->state_dict(), before);
  EXPECT_NE(error_of([&] { target->load_state_dict(bad_step); }), "no exception");
  expect_same_dict(target->state_dict(), before);

  // a good load replaces options and state
  target->load_state_dict(saved);
  expect_same_dict(target->state_dict(), saved);
}

TEST(OptimLoadStateDict, StateIsCastToTheParametersDtype) {
  // PyTorch's load_state_dict casts floating state to its parameter's dtype (and device).
  Problem pb(false);
  optim::Adam opt({pb.w, pb.b}, optim::AdamOptions(0.1));
  pb.loss().backward();
  opt.step();
  StateDict sd = opt.state_dict();
  for (auto& [k, v] : sd)
    if (k.find("exp_avg") != std::string::npos) v = v.to(kFloat32);
  opt.load_state_dict(sd);
  const StateDict back = opt.state_dict();
  EXPECT_EQ(back.at("state.0.exp_avg").dtype(), kFloat64);
  EXPECT_EQ(back.at("state.0.step").dtype(), kFloat32);  // the step stays PyTorch's float32 scalar
  EXPECT_EQ(back.at("state.0.step").item<double>(), 1.0);
}

// ------------------------------------------------------------------------------------- fused vs slow

// The same updates on a contiguous parameter (the fused loop, several parallel chunks) and on a
// non-contiguous one with the same values (the slow path of tensor ops): they agree to rounding.
template <class Opt, class Options>
void check_fused_vs_slow(const Options& options, ScalarType dtype) {
  SCOPED_TRACE(dtype_name(dtype));
  manual_seed(3);
  const Tensor base = randn({300, 250}, dtype);  // 75000 elements: three chunks of kFusedGrain
  const Tensor target = randn({300, 250}, dtype), scale = rand({300, 250}, dtype) + 0.5;
  Tensor fast = base.clone().requires_grad_(true);
  Tensor slow = base.t().contiguous().t().detach().requires_grad_(true);  // column-major storage
  ASSERT_TRUE(fast.is_contiguous());
  ASSERT_FALSE(slow.is_contiguous());
  Opt of({fast}, options), os({slow}, options);
  for (int step = 0; step < 6; ++step) {
    NoGradGuard no_grad;
    fast.set_grad(scale * (fast.detach() - target));
    slow.set_grad((scale * (slow.detach() - target)).t().contiguous().t());
    of.step();
    os.step();
  }
  const double tol = dtype == kFloat32 ? 2e-5 : 1e-12;
  EXPECT_TRUE(tensors_close(slow.detach(), fast.detach(), tol, tol));
  EXPECT_FALSE(bits_equal(fast.detach(), base));
  const StateDict sf = of.state_dict(), ss = os.state_dict();
  for (const auto& [k, v] : sf) EXPECT_TRUE(tensors_close(ss.at(k), v, tol, tol)) << k;
}

TEST(SGD, FusedAndSlowPathsAgree) {
  for (ScalarType dt : {kFloat32, kFloat64}) {
    check_fused_vs_slow<optim::SGD>(optim::SGDOptions(0.05).momentum(0.9).nesterov(true).weight_decay(0.1), dt);
    check_fused_vs_slow<optim::SGD>(optim::SGDOptions(0.05).momentum(0.9).dampening(0.2).maximize(true), dt);
  }
}

TEST(Adam, FusedAndSlowPathsAgree) {
  for (ScalarType dt : {kFloat32, kFloat64}) {
    check_fused_vs_slow<optim::Adam>(optim::AdamOptions(0.05).weight_decay(0.1).amsgrad(true), dt);
    check_fused_vs_slow<optim::Adam>(optim::AdamOptions(0.05).maximize(true), dt);
  }
}

TEST(AdamW, FusedAndSlowPathsAgree) {
  for (ScalarType dt : {kFloat32, kFloat64})
    check_fused_vs_slow<optim::AdamW>(optim::AdamWOptions(0.05).weight_decay(0.1).amsgrad(true), dt);
}

TEST(RMSprop, FusedAndSlowPathsAgree) {
  for (ScalarType dt : {kFloat32, kFloat64}) {
    check_fused_vs_slow<optim::RMSprop>(
        optim::RMSpropOptions(0.01).momentum(0.5).centered(true).weight_decay(0.1).maximize(true), dt);
    check_fused_vs_slow<optim::RMSprop>(optim::RMSpropOptions(0.01), dt);
  }
}

TEST(OptimCuda, AdamOnCudaAgreesWithTheCpu) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  Problem cpu(false);
  Tensor w = cpu.w.detach().cuda().requires_grad_(true), b = cpu.b.detach().cuda().requires_grad_(true);
  const Tensor tw = cpu.tw.cuda(), cw = cpu.cw.cuda(), tb = cpu.tb.cuda(), cb = cpu.cb.cuda();
  const optim::AdamOptions o = optim::AdamOptions(0.05).weight_decay(0.1).amsgrad(true);
  optim::Adam oc({cpu.w, cpu.b}, o), og({w, b}, o);
  for (int i = 0; i < 5; ++i) {
    oc.zero_grad();
    og.zero_grad();
    cpu.loss().backward();
    Tensor ew = w - tw, eb = b - tb;
    (0.5 * (ew * ew * cw).sum() + 0.5 * (eb * eb * cb).sum()).backward();
    oc.step();
    og.step();
  }
  EXPECT_TRUE(tensors_close(w.detach().cpu(), cpu.w.detach(), 1e-12, 1e-12));
  EXPECT_TRUE(og.state_dict().at("state.0.exp_avg").is_cuda());
}

// The CUDA backend's fused Adam step (one kernel a parameter) in each of its forms against the CPU's fused
// loop: Adam without weight decay, Adam maximizing, AdamW with and without amsgrad; float64 to 1e-12 and
// float32 to 1e-6.
TEST(OptimCuda, FusedAdamFormsAgreeWithTheCpu) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  EXPECT_TRUE(backend(kCUDA).fuses(FusedKernel::AdamStep));
  EXPECT_FALSE(backend(kCPU).fuses(FusedKernel::AdamStep));
  using Make = std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)>;
  const std::vector<std::pair<std::string, Make>> forms = {
      {"Adam", [](std::vector<Tensor> p) { return std::make_unique<optim::Adam>(p, optim::AdamOptions(0.05)); }},
      {"Adam maximize", [](std::vector<Tensor> p) {
         return std::make_unique<optim::Adam>(p, optim::AdamOptions(0.05).maximize(true).weight_decay(0.1));
       }},
      {"AdamW", [](std::vector<Tensor> p) { return std::make_unique<optim::AdamW>(p, optim::AdamWOptions(0.05)); }},
      {"AdamW amsgrad", [](std::vector<Tensor> p) {
         return std::make_unique<optim::AdamW>(p, optim::AdamWOptions(0.05).amsgrad(true).weight_decay(0.3));
       }},
  };
  for (bool f32 : {false, true}) {
    for (const auto& [name, make] : forms) {
      SCOPED_TRACE(name + (f32 ? " float32" : " float64"));
      Problem cpu(f32);
      Tensor w = cpu.w.detach().cuda().requires_grad_(true), b = cpu.b.detach().cuda().requires_grad_(true);
      const Tensor tw = cpu.tw.cuda(), cw = cpu.cw.cuda(), tb = cpu.tb.cuda(), cb = cpu.cb.cuda();
      auto oc = make({cpu.w, cpu.b});
      auto og = make({w, b});
      for (int i = 0; i < 5; ++i) {
        oc->zero_grad();
        og->zero_grad();
        cpu.loss().backward();
        Tensor ew = w - tw, eb = b - tb;
        (0.5 * (ew * ew * cw).sum() + 0.5 * (eb * eb * cb).sum()).backward();
        oc->step();
        og->step();
      }
      const double tol = f32 ? 1e-6 : 1e-12;
      EXPECT_TRUE(tensors_close(w.detach().cpu(), cpu.w.detach(), tol, tol));
      EXPECT_TRUE(tensors_close(b.detach().cpu(), cpu.b.detach(), tol, tol));
      EXPECT_TRUE(tensors_close(og->state_dict().at("state.0.exp_avg_sq").cpu(), oc->state_dict().at("state.0.exp_avg_sq"),
                                tol, tol));
    }
  }
  // the backend's checks name what was wrong
  Tensor p = zeros({4}).cuda(), g = zeros({5}).cuda();
  try {
    backend(kCUDA).adam_step(p, g, p.clone(), p.clone(), Tensor(), AdamStepConsts{});
    ADD_FAILURE() << "expected an error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("[adam_step] the gradient must be a contiguous float32 tensor of shape (4), got float32 (5)"),
              std::string::npos) << e.what();
  }
}

}  // namespace
