// lr schedulers and SWALR against PyTorch 1.13 (tests/fixtures/lr_scheduler.txt, from
// gen_lr_scheduler.py): each case builds the same schedulers as the generator on an optimizer with two
// groups (lr 0.1 and 0.037), steps them, and compares every group's lr after every step (relative
// 1e-12: the sequences are doubles computed in the same order). Also the error texts, the resumable
// cases through state_dict / load_state_dict (and a checkpoint file), and the state_dict keys.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "fixtures.h"
#include <troupe/optim/lr_scheduler.h>
#include <troupe/optim/optimizer.h>
#include <troupe/optim/swalr.h>
#include <troupe/nn/serialize.h>
#include <troupe/tensor/ops.h>

namespace {

using namespace troupe;
using namespace troupe::optim;
using troupe::optim::swa_utils::SWALR;
using troupe::testing::Fixtures;

const Fixtures& fx() {
  static Fixtures f = Fixtures::load("lr_scheduler.txt");
  return f;
}

// ---- an optimizer whose step() does nothing: the schedulers only read and write the groups' lr.

struct LrOnlyOptions : public OptimizerCloneableOptions<LrOnlyOptions> {
  explicit LrOnlyOptions(double lr) : lr_(lr) {}
  double get_lr() const override { return lr_; }
  void set_lr(double lr) override { lr_ = lr; }
  void write(StateDict& out, const std::string& prefix) const override { write_scalar(out, prefix + "lr", lr_); }
  void read(const StateDict& in, const std::string& prefix) override { lr_ = read_scalar(in, prefix + "lr"); }
  double lr_;
};

struct NoState : public OptimizerCloneableParamState<NoState> {
  void write(StateDict&, const std::string&) const override {}
  void read(const StateDict&, const std::string&, const Tensor&) override {}
};

class LrOnlyOptimizer : public Optimizer {
 public:
  using Optimizer::Optimizer;
  Tensor step(LossClosure closure = nullptr) override { return run_closure(closure); }

 protected:
  std::unique_ptr<OptimizerParamState> make_param_state() const override { return std::make_unique<NoState>(); }
};

std::unique_ptr<Optimizer> make_opt(std::vector<double> lrs = {0.1, 0.037}) {
  std::vector<OptimizerParamGroup> groups;
  for (double lr : lrs)
    groups.emplace_back(std::vector<Tensor>{zeros({2}, requires_grad())}, std::make_unique<LrOnlyOptions>(lr));
  return std::make_unique<LrOnlyOptimizer>(std::move(groups), std::make_unique<LrOnlyOptions>(lrs[0]));
}

std::vector<double> lrs_of(const Optimizer& opt) {
  std::vector<double> out;
  for (const auto& g : opt.param_groups()) out.push_back(g.options().get_lr());
  return out;
}

using Rows = std::vector<std::vector<double>>;
using Schedulers = std::vector<std::shared_ptr<LRScheduler>>;
using Build = std::function<Schedulers(Optimizer&)>;

// Every row equal to the record's within 1e-12 relative.
::testing::AssertionResult matches(const std::string& record, const Rows& rows) {
  const auto shape = fx().shape(record);
  const auto want = fx().doubles(record);
  if (shape.size() != 2 || shape[0] != static_cast<int64_t>(rows.size()))
    return ::testing::AssertionFailure() << record << ": " << rows.size() << " rows, the record has "
                                         << (shape.empty() ? 0 : shape[0]);
  for (size_t r = 0; r < rows.size(); ++r) {
    if (static_cast<int64_t>(rows[r].size()) != shape[1])
      return ::testing::AssertionFailure() << record << " row " << r << ": " << rows[r].size() << " groups";
    for (size_t c = 0; c < rows[r].size(); ++c) {
      const double w = want[r * rows[r].size() + c], got = rows[r][c];
      if (!(std::abs(got - w) <= 1e-12 * std::abs(w) + 1e-300))
        return ::testing::AssertionFailure() << record << " row " << r << " group " << c << ": got " << got
                                             << ", PyTorch " << w;
    }
  }
  return ::testing::AssertionSuccess();
}

Rows run(const Build& build, int steps = 30) {
  auto opt = make_opt();
  Schedulers scheds = build(*opt);
  Rows rows{lrs_of(*opt)};
  for (int k = 0; k < steps; ++k) {
    opt->step();
    for (auto& s : scheds) s->step();
    rows.push_back(lrs_of(*opt));
  }
  return rows;
}

// As run(), but after `cut` steps the optimizer's and the schedulers' state go through state_dict
// into fresh ones (built as the first were), which continue.
Rows run_resumed(const Build& build, int cut, int steps = 30) {
  auto opt = make_opt();
  Schedulers scheds = build(*opt);
  Rows rows{lrs_of(*opt)};
  for (int k = 0; k < steps; ++k) {
    if (k == cut) {
      StateDict opt_sd = opt->state_dict();
      std::vector<StateDict> sds;
      for (auto& s : scheds) sds.push_back(s->state_dict());
      scheds.clear();
      opt = make_opt();
      scheds = build(*opt);
      opt->load_state_dict(opt_sd);
      for (size_t i = 0; i < scheds.size(); ++i) scheds[i]->load_state_dict(sds[i]);
    }
    opt->step();
    for (auto& s : scheds) s->step();
    rows.push_back(lrs_of(*opt));
  }
  return rows;
}

template <class S, class... A>
Build one(A... args) {
  return [=](Optimizer& o) { return Schedulers{std::make_shared<S>(o, args...)}; };
}

double pow95(int64_t e) { return std::pow(0.95, static_cast<double>(e)); }

// The generator's cut for resumable cases: steps // 2 - 3.
void expect_case(const std::string& name, const Build& build, bool resumable = false, int steps = 30) {
  SCOPED_TRACE(name);
  EXPECT_TRUE(matches("sched_" + name, run(build, steps)));
  if (resumable) {
    SCOPED_TRACE("resumed through state_dict");
    EXPECT_TRUE(matches("sched_" + name, run_resumed(build, steps / 2 - 3, steps)));
  }
}

template <class E, class Fn>
void expect_error(Fn&& fn, const std::string& text) {
  try {
    fn();
    ADD_FAILURE() << "no exception; expected: " << text;
  } catch (const E& e) {
    EXPECT_EQ(std::string(e.what()), text);
  }
}

// ====================================================================== LRScheduler base

TEST(LRScheduler, SetsInitialLrOnlyWhenUnset) {
  auto opt = make_opt();
  opt->param_groups()[1].initial_lr() = 0.5;
  StepLR s(*opt, 3);
  EXPECT_EQ(*opt->param_groups()[0].initial_lr(), 0.1);
  EXPECT_EQ(*opt->param_groups()[1].initial_lr(), 0.5);  // setdefault: kept
  EXPECT_EQ(s.base_lrs(), (std::vector<double>{0.1, 0.5}));
  // The initial step ran: last_epoch 0, the lrs untouched by StepLR's step 0.
  EXPECT_EQ(s.last_epoch(), 0);
  EXPECT_EQ(s.get_last_lr(), (std::vector<double>{0.1, 0.037}));
}

TEST(LRScheduler, ResumingNeedsInitialLr) {
  auto opt = make_opt();
  expect_error<std::invalid_argument>([&] { StepLR(*opt, 3, 0.1, /*last_epoch=*/5); },
                                      "param 'initial_lr' is not specified in param_groups[0] when resuming an "
                                      "optimizer");
  opt->param_groups()[0].initial_lr() = 0.1;
  expect_error<std::invalid_argument>([&] { ExponentialLR(*opt, 0.9, /*last_epoch=*/2); },
                                      "param 'initial_lr' is not specified in param_groups[1] when resuming an "
                                      "optimizer");
}

TEST(LRScheduler, ResumeWithLastEpoch) {
  auto with_initial = [](auto make) {
    return [make](Optimizer& o) {
      o.param_groups()[0].initial_lr() = 0.2;
      o.param_groups()[1].initial_lr() = 0.05;
      return Schedulers{make(o)};
    };
  };
  // CosineAnnealingLR's first step after resuming takes the closed form (its _step_count == 1 branch).
  expect_case("cosine_last4", with_initial([](Optimizer& o) {
                return std::make_shared<CosineAnnealingLR>(o, 10, 0.001, 4);
              }),
              false, 12);
  expect_case("step_last5", with_initial([](Optimizer& o) { return std::make_shared<StepLR>(o, 3, 0.5, 5); }),
              false, 12);
}

TEST(LRScheduler, StateDictKeys) {
  auto opt = make_opt();
  auto keys = [](const LRScheduler& s) { return s.state_dict().keys(); };
  using K = std::vector<std::string>;
  const K base{"base_lrs", "last_epoch", "_step_count", "_last_lr"};
  auto with = [&](K own) {
    own.insert(own.end(), base.begin(), base.end());
    return own;
  };
  EXPECT_EQ(keys(StepLR(*opt, 3)), with({"step_size", "gamma"}));
  EXPECT_EQ(keys(MultiStepLR(*opt, {4, 2, 4})), with({"milestones", "gamma"}));
  EXPECT_EQ(keys(ConstantLR(*opt)), with({"factor", "total_iters"}));
  EXPECT_EQ(keys(LinearLR(*opt)), with({"start_factor", "end_factor", "total_iters"}));
  EXPECT_EQ(keys(ExponentialLR(*opt, 0.5)), with({"gamma"}));
  EXPECT_EQ(keys(CosineAnnealingLR(*opt, 5)), with({"T_max", "eta_min"}));
  EXPECT_EQ(keys(LambdaLR(*opt, pow95)), base);  // lambdas are not saved
  EXPECT_EQ(keys(SWALR(*opt, 0.01)), with({"swa_lrs", "anneal_strategy", "anneal_epochs"}));

  MultiStepLR ms(*opt, {4, 2, 4});
  Tensor m = ms.state_dict().at("milestones");
  EXPECT_EQ(m.dtype(), kLong);
  EXPECT_TRUE(equal(m, tensor({2, 4, 4})));  // the multiset, sorted
  StateDict sd = StepLR(*opt, 3, 0.25).state_dict();
  EXPECT_EQ(sd.at("gamma").item<double>(), 0.25);
  EXPECT_EQ(sd.at("step_size").item<double>(), 3);
  EXPECT_EQ(sd.at("last_epoch").item<double>(), 0);
  EXPECT_EQ(sd.at("_step_count").item<double>(), 1);
  EXPECT_EQ(sd.at("base_lrs").numel(), 2);
}

TEST(LRScheduler, LoadStateDictChecksKeysAndChangesNothingOnError) {
  auto opt = make_opt();
  StepLR a(*opt, 3, 0.5);
  for (int i = 0; i < 4; ++i) a.step();
  StateDict sd = a.state_dict();

  auto opt2 = make_opt();
  StepLR b(*opt2, 7, 0.9);
  StateDict before = b.state_dict();
  StateDict extra = sd;
  write_scalar(extra, "eta_min", 0.0);
  expect_error<std::invalid_argument>([&] { b.load_state_dict(extra); },
                                      "[StepLR.load_state_dict] unexpected key 'eta_min'");
  StateDict missing = sd;
  missing.erase("gamma");
  expect_error<std::invalid_argument>([&] { b.load_state_dict(missing); },
                                      "[StepLR.load_state_dict] missing key 'gamma'");
  StateDict bad = sd;
  bad.insert_or_assign("base_lrs", tensor({0.1, 0.2, 0.3}, TensorOptions().dtype(kDouble)));
  expect_error<std::invalid_argument>([&] { b.load_state_dict(bad); },
                                      "[StepLR.load_state_dict] 'base_lrs' has 3 values, expected 2 (one per "
                                      "parameter group)");
  StateDict frac = sd;
  write_scalar(frac, "last_epoch", 2.5);
  expect_error<std::invalid_argument>([&] { b.load_state_dict(frac); },
                                      "[StepLR.load_state_dict] 'last_epoch' must be an integer, got 2.5");
  // Nothing changed by the failed loads.
  StateDict after = b.state_dict();
  ASSERT_EQ(after.keys(), before.keys());
  for (const auto& [k, v] : before) EXPECT_TRUE(equal(after.at(k), v)) << k;

  b.load_state_dict(sd);
  EXPECT_EQ(b.last_epoch(), 4);
  EXPECT_EQ(b.step_size(), 3);
  EXPECT_EQ(b.gamma(), 0.5);
  EXPECT_EQ(b.get_last_lr(), a.get_last_lr());
}

TEST(LRScheduler, StateDictThroughACheckpointFile) {
  // Optimizer and scheduler state in one file, as a training loop saves them; resumed, the run goes on
  // exactly as PyTorch's uninterrupted one.
  const auto path = std::filesystem::temp_directory_path() / "troupe_lr_scheduler_test.pt";
  Rows rows;
  {
    auto opt = make_opt();
    auto cos = std::make_shared<CosineAnnealingLR>(*opt, 20, 0.001);
    rows.push_back(lrs_of(*opt));
    for (int i = 0; i < 8; ++i) {
      cos->step();
      rows.push_back(lrs_of(*opt));
    }
    SWALR swa(*opt, std::vector<double>{0.02, 0.01}, 5, "linear");
    rows.push_back(lrs_of(*opt));
    for (int i = 0; i < 4; ++i) {
      swa.step();
      rows.push_back(lrs_of(*opt));
    }
    StateDict all;
    for (const auto& [k, v] : opt->state_dict()) all.insert_or_assign("optimizer." + k, v);
    for (const auto& [k, v] : swa.state_dict()) all.insert_or_assign("scheduler." + k, v);
    nn::save(all, path.string());
  }
  StateDict all = nn::load_state_dict_file(path.string());
  std::filesystem::remove(path);
  StateDict opt_sd, swa_sd;
  for (const auto& [k, v] : all) {
    if (k.rfind("optimizer.", 0) == 0) opt_sd.insert_or_assign(k.substr(10), v);
    else swa_sd.insert_or_assign(k.substr(10), v);
  }
  auto opt = make_opt();
  SWALR swa(*opt, 0.5, 1, "cos");  // other settings: all come from the file
  opt->load_state_dict(opt_sd);
  swa.load_state_dict(swa_sd);
  EXPECT_EQ(swa.anneal_strategy(), "linear");
  EXPECT_EQ(swa.anneal_epochs(), 5);
  EXPECT_EQ(swa.swa_lrs(), (std::vector<double>{0.02, 0.01}));
  for (int i = 0; i < 8; ++i) {
    swa.step();
    rows.push_back(lrs_of(*opt));
  }
  EXPECT_TRUE(matches("swa_after_cos_linear_5", rows));
}

// ====================================================================== the schedulers

TEST(StepLR, MatchesPyTorch) {
  expect_case("step", one<StepLR>(int64_t{3}, 0.5), true);
  expect_case("step_default", one<StepLR>(int64_t{4}));
}

TEST(StepLR, Errors) {
  auto opt = make_opt();
  expect_error<std::invalid_argument>([&] { StepLR(*opt, 0); }, "[StepLR] step_size must be positive, got 0");
}

TEST(MultiStepLR, MatchesPyTorch) {
  expect_case("multistep", one<MultiStepLR>(std::vector<int64_t>{9, 2, 5, 5}, 0.3), true);
}

TEST(ConstantLR, MatchesPyTorch) {
  expect_case("constant", one<ConstantLR>(0.5, int64_t{4}));
  expect_case("constant_default", [](Optimizer& o) { return Schedulers{std::make_shared<ConstantLR>(o)}; });
}

TEST(ConstantLR, Errors) {
  auto opt = make_opt();
  expect_error<std::invalid_argument>([&] { ConstantLR(*opt, 1.5); },
                                      "Constant multiplicative factor expected to be between 0 and 1.");
  EXPECT_FALSE(opt->param_groups()[0].initial_lr().has_value());  // checked before initial_lr is set
}

TEST(LinearLR, MatchesPyTorch) {
  expect_case("linear_default", [](Optimizer& o) { return Schedulers{std::make_shared<LinearLR>(o)}; });
  expect_case("linear", one<LinearLR>(0.25, 0.9, int64_t{7}), true);
  expect_case("linear_down", one<LinearLR>(1.0, 0.1, int64_t{10}));
}

TEST(LinearLR, Errors) {
  auto opt = make_opt();
  expect_error<std::invalid_argument>([&] { LinearLR(*opt, 1.2); },
                                      "Starting multiplicative factor expected to be between 0 and 1.");
  expect_error<std::invalid_argument>([&] { LinearLR(*opt, -0.1); },
                                      "Starting multiplicative factor expected to be between 0 and 1.");
  expect_error<std::invalid_argument>([&] { LinearLR(*opt, 0.5, 1.01); },
                                      "Ending multiplicative factor expected to be between 0 and 1.");
  EXPECT_FALSE(opt->param_groups()[0].initial_lr().has_value());
  // start_factor 0 passes 1.13's check but divides by zero at the second step, as in PyTorch.
  LinearLR zero(*opt, 0.0);
  EXPECT_EQ(lrs_of(*opt), (std::vector<double>{0.0, 0.0}));
  expect_error<std::domain_error>([&] { zero.step(); }, "[LinearLR.step] float division by zero");
}

TEST(ExponentialLR, MatchesPyTorch) { expect_case("exponential", one<ExponentialLR>(0.9), true); }

TEST(CosineAnnealingLR, MatchesPyTorch) {
  expect_case("cosine", one<CosineAnnealingLR>(int64_t{10}));
  expect_case("cosine_eta", one<CosineAnnealingLR>(int64_t{7}, 0.01), true);
}

TEST(CosineAnnealingLR, ReachesEtaMinAfterTMax) {
  // The closed form's value at T_max: eta_min (up to the recursion's rounding).
  auto opt = make_opt();
  CosineAnnealingLR s(*opt, 8, 0.004);
  for (int i = 0; i < 8; ++i) s.step();
  for (double lr : lrs_of(*opt)) EXPECT_NEAR(lr, 0.004, 1e-15);
}

TEST(CosineAnnealingLR, Errors) {
  auto opt = make_opt();
  expect_error<std::invalid_argument>([&] { CosineAnnealingLR(*opt, 0); },
                                      "[CosineAnnealingLR] T_max must be positive, got 0");
}

TEST(LambdaLR, MatchesPyTorch) {
  expect_case("lambda_one", one<LambdaLR>(LambdaLR::LrLambda(pow95)), true);
  expect_case("lambda_two", [](Optimizer& o) {
    std::vector<LambdaLR::LrLambda> fns{pow95, [](int64_t e) { return 1.0 / static_cast<double>(e + 1); }};
    return Schedulers{std::make_shared<LambdaLR>(o, fns)};
  });
}

TEST(LambdaLR, Errors) {
  auto opt = make_opt();
  std::vector<LambdaLR::LrLambda> three(3, pow95);
  expect_error<std::invalid_argument>([&] { LambdaLR(*opt, three); }, "Expected 2 lr_lambdas, but got 3");
  expect_error<std::invalid_argument>([&] { MultiplicativeLR(*opt, std::vector<LambdaLR::LrLambda>{pow95}); },
                                      "Expected 2 lr_lambdas, but got 1");
  EXPECT_FALSE(opt->param_groups()[0].initial_lr().has_value());
}

TEST(MultiplicativeLR, MatchesPyTorch) {
  expect_case("multiplicative", one<MultiplicativeLR>(MultiplicativeLR::LrLambda([](int64_t) { return 0.9; })));
}

TEST(LRScheduler, StepWithEpochUsesTheClosedForm) {
  const std::vector<int64_t> epochs{3, 0, 7, 7, 12, 1, 20};
  auto check = [&](const std::string& name, const std::function<std::unique_ptr<LRScheduler>(Optimizer&)>& make) {
    SCOPED_TRACE(name);
    auto opt = make_opt();
    auto s = make(*opt);
    Rows rows{lrs_of(*opt)};
    for (int64_t e : epochs) {
      s->step(e);
      EXPECT_EQ(s->last_epoch(), e);
      rows.push_back(lrs_of(*opt));
    }
    EXPECT_TRUE(matches("closed_" + name, rows));
  };
  check("step", [](Optimizer& o) { return std::make_unique<StepLR>(o, 3, 0.5); });
  check("multistep", [](Optimizer& o) { return std::make_unique<MultiStepLR>(o, std::vector<int64_t>{9, 2, 5, 5}, 0.3); });
  check("constant", [](Optimizer& o) { return std::make_unique<ConstantLR>(o, 0.5, 4); });
  check("linear", [](Optimizer& o) { return std::make_unique<LinearLR>(o, 0.25, 0.9, 7); });
  check("exponential", [](Optimizer& o) { return std::make_unique<ExponentialLR>(o, 0.9); });
  check("cosine", [](Optimizer& o) { return std::make_unique<CosineAnnealingLR>(o, 7, 0.01); });
  check("lambda", [](Optimizer& o) { return std::make_unique<LambdaLR>(o, LambdaLR::LrLambda(pow95)); });
}

TEST(LRScheduler, ChainedSchedulersCompose) {
  expect_case("chain_step_exp", [](Optimizer& o) {
    return Schedulers{std::make_shared<StepLR>(o, 4, 0.5), std::make_shared<ExponentialLR>(o, 0.9)};
  }, true);
  expect_case("chain_cos_multistep", [](Optimizer& o) {
    return Schedulers{std::make_shared<CosineAnnealingLR>(o, 12, 0.005),
                      std::make_shared<MultiStepLR>(o, std::vector<int64_t>{5, 15}, 0.5)};
  });
}

// ====================================================================== SequentialLR

Build seq(std::function<Schedulers(Optimizer&)> children, std::vector<int64_t> milestones) {
  return [=](Optimizer& o) {
    return Schedulers{std::make_shared<SequentialLR>(o, children(o), milestones)};
  };
}

TEST(SequentialLR, MatchesPyTorch) {
  expect_case("seq_lin_exp", seq([](Optimizer& o) {
    return Schedulers{std::make_shared<LinearLR>(o, 0.2, 1.0, 4), std::make_shared<ExponentialLR>(o, 0.9)};
  }, {5}), true);
  // PyTorch's documentation example.
  expect_case("seq_const_exp", seq([](Optimizer& o) {
    return Schedulers{std::make_shared<ConstantLR>(o, 0.1, 2), std::make_shared<ExponentialLR>(o, 0.9)};
  }, {2}));
  expect_case("seq_three", seq([](Optimizer& o) {
    return Schedulers{std::make_shared<ExponentialLR>(o, 0.8), std::make_shared<StepLR>(o, 2, 0.5),
                      std::make_shared<CosineAnnealingLR>(o, 6, 0.001)};
  }, {4, 10}), true);
  // LambdaLR has no closed form: step(0) at the milestone takes its get_lr.
  expect_case("seq_lin_lambda", seq([](Optimizer& o) {
    return Schedulers{std::make_shared<LinearLR>(o, 0.5, 1.0, 3),
                      std::make_shared<LambdaLR>(o, LambdaLR::LrLambda(pow95))};
  }, {3}));
  expect_case("seq_cos_swa", seq([](Optimizer& o) {
    return Schedulers{std::make_shared<CosineAnnealingLR>(o, 10), std::make_shared<SWALR>(o, 0.02, 3)};
  }, {6}), true);
}

TEST(SequentialLR, UndoesTheChildrensInitialSteps) {
  auto opt = make_opt();
  auto lin = std::make_shared<LinearLR>(*opt, 0.2, 1.0, 4);
  auto exp = std::make_shared<ExponentialLR>(*opt, 0.9);
  SequentialLR s(*opt, {lin, exp}, {5});
  EXPECT_EQ(s.last_epoch(), 0);
  EXPECT_EQ(lin->last_epoch(), 0);
  EXPECT_EQ(exp->last_epoch(), -1);
  EXPECT_EQ(s.get_last_lr(), lin->get_last_lr());
  EXPECT_DOUBLE_EQ(lrs_of(*opt)[0], 0.1 * 0.2);
  StateDict sd = s.state_dict();
  EXPECT_TRUE(sd.contains("_schedulers.0.start_factor"));
  EXPECT_TRUE(sd.contains("_schedulers.1.gamma"));
  EXPECT_TRUE(equal(sd.at("_milestones"), tensor({5})));
  EXPECT_FALSE(sd.contains("base_lrs"));  // SequentialLR has none in PyTorch
}

TEST(SequentialLR, Errors) {
  auto opt = make_opt();
  auto other = make_opt();
  auto a = std::make_shared<ExponentialLR>(*opt, 0.9);
  auto b = std::make_shared<ExponentialLR>(*other, 0.9);
  expect_error<std::invalid_argument>([&] { SequentialLR(*opt, {a, b}, {3}); },
                                      "Sequential Schedulers expects all schedulers to belong to the same optimizer, "
                                      "but got schedulers at index 1 to be different than the optimizer passed in.");
  auto c = std::make_shared<StepLR>(*opt, 2);
  expect_error<std::invalid_argument>([&] { SequentialLR(*opt, {a, c}, {3, 4}); },
                                      "Sequential Schedulers expects number of schedulers provided to be one more "
                                      "than the number of milestone points, but got number of schedulers 2 and the "
                                      "number of milestones to be equal to 2");
  SequentialLR s(*opt, {a, c}, {3});
  expect_error<std::invalid_argument>([&] { s.step(4); }, "[SequentialLR.step] takes no epoch (got 4)");
}

// ====================================================================== SWALR

TEST(SWALR, MatchesPyTorchAlone) {
  for (const std::string strategy : {"cos", "linear"})
    for (int64_t E : {0, 1, 5}) {
      const std::string name = "swa_" + strategy + "_" + std::to_string(E);
      SCOPED_TRACE(name);
      EXPECT_TRUE(matches(name, run(one<SWALR>(0.02, E, strategy), 15)));
    }
}

TEST(SWALR, MatchesPyTorchAfterCosine) {
  for (const std::string strategy : {"cos", "linear"})
    for (int64_t E : {0, 1, 5}) {
      const std::string name = "swa_after_cos_" + strategy + "_" + std::to_string(E);
      SCOPED_TRACE(name);
      auto opt = make_opt();
      CosineAnnealingLR cos(*opt, 20, 0.001);
      Rows rows{lrs_of(*opt)};
      for (int i = 0; i < 8; ++i) {
        opt->step();
        cos.step();
        rows.push_back(lrs_of(*opt));
      }
      SWALR swa(*opt, std::vector<double>{0.02, 0.01}, E, strategy);
      rows.push_back(lrs_of(*opt));
      for (int i = 0; i < 12; ++i) {
        opt->step();
        swa.step();
        rows.push_back(lrs_of(*opt));
      }
      EXPECT_TRUE(matches(name, rows));
    }
}

TEST(SWALR, ReferenceRecipe) {
  // The AveragedModel page's loop: both schedulers built first; SWALR takes over after swa_start.
  for (auto [strategy, E] : {std::pair<std::string, int64_t>{"cos", 10}, {"linear", 3}, {"cos", 0}}) {
    const std::string name = "swa_recipe_" + strategy + "_" + std::to_string(E);
    SCOPED_TRACE(name);
    auto opt = make_opt();
    CosineAnnealingLR scheduler(*opt, 30);
    const int swa_start = 12;
    SWALR swa_scheduler(*opt, 0.05, E, strategy);
    Rows rows{lrs_of(*opt)};
    for (int i = 0; i < 30; ++i) {
      opt->step();
      if (i > swa_start) swa_scheduler.step();
      else scheduler.step();
      rows.push_back(lrs_of(*opt));
    }
    EXPECT_TRUE(matches(name, rows));
  }
}

TEST(SWALR, ClosedFormOfTheSpec) {
  // semantics.md: with nothing else changing the lr, lr_k = swa_lr f(k/E) + lr0 (1 - f(k/E)) for
  // k < E, swa_lr from k = E on.
  for (const std::string strategy : {"cos", "linear"}) {
    auto opt = make_opt({0.3});
    const int64_t E = 6;
    SWALR s(*opt, 0.05, E, strategy);
    for (int64_t k = 0; k <= 10; ++k) {
      const double t = std::min<double>(1.0, static_cast<double>(k) / E);
      const double f = strategy == "linear" ? t : (1 - std::cos(M_PI * t)) / 2;
      EXPECT_NEAR(lrs_of(*opt)[0], 0.05 * f + 0.3 * (1 - f), 1e-15) << strategy << " k=" << k;
      s.step();
    }
  }
}

TEST(SWALR, Resumable) {
  auto build = [](Optimizer& o) {
    return Schedulers{std::make_shared<SWALR>(o, std::vector<double>{0.02, 0.01}, 5, "cos")};
  };
  EXPECT_TRUE(matches("swa_resume", run(build, 15)));
  EXPECT_TRUE(matches("swa_resume", run_resumed(build, 3, 15)));
}

TEST(SWALR, Errors) {
  auto opt = make_opt();
  expect_error<std::invalid_argument>([&] { SWALR(*opt, 0.05, 10, "step"); },
                                      "anneal_strategy must by one of 'cos' or 'linear', instead got step");
  expect_error<std::invalid_argument>([&] { SWALR(*opt, 0.05, -1); },
                                      "anneal_epochs must be equal or greater than 0, got -1");
  expect_error<std::invalid_argument>([&] { SWALR(*opt, std::vector<double>{0.1, 0.2, 0.3}); },
                                      "swa_lr must have the same length as optimizer.param_groups: swa_lr has 3, "
                                      "optimizer.param_groups has 2");
  EXPECT_FALSE(opt->param_groups()[0].initial_lr().has_value());
  SWALR s(*opt, 0.05);
  StateDict sd = s.state_dict();
  sd.insert_or_assign("anneal_strategy", tensor(std::vector<uint8_t>{'e', 'x', 'p'}, TensorOptions().dtype(kByte)));
  expect_error<std::invalid_argument>([&] { s.load_state_dict(sd); },
                                      "anneal_strategy must by one of 'cos' or 'linear', instead got exp");
  EXPECT_EQ(s.anneal_strategy(), "cos");
}

}  // namespace
