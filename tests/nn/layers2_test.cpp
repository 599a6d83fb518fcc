// The second half of the layers (Conv1d, ConvTranspose1d/2d, 1-D and adaptive pooling, GroupNorm,
// InstanceNorm1d/2d, F::pad modes, F::interpolate / Upsample, PixelShuffle, Softplus, Hardtanh, Mish, PReLU,
// KLDivLoss, CosineEmbeddingLoss, MarginRankingLoss, TripletMarginLoss) against PyTorch 1.13
// (tests/fixtures/nn_layers2.txt and nn_layers2_repr.txt, from gen_nn_layers2.py): every functional case's
// output and gradients, the same case through a float64 finite-difference check, default initialisation bit
// for bit after the same seed, printed forms, libtorch's option spellings and error texts.
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "fixtures.h"
#include <troupe/nn/functional.h>
#include <troupe/nn/modules/activation.h>
#include <troupe/nn/modules/container.h>
#include <troupe/nn/modules/conv.h>
#include <troupe/nn/modules/instancenorm.h>
#include <troupe/nn/modules/loss.h>
#include <troupe/nn/modules/normalization.h>
#include <troupe/nn/modules/pixelshuffle.h>
#include <troupe/nn/modules/pooling.h>
#include <troupe/nn/modules/upsampling.h>
#include <troupe/tensor/autograd.h>
#include <troupe/tensor/gradcheck.h>
#include <troupe/tensor/ops.h>

namespace {

using namespace troupe;
namespace nn = troupe::nn;
namespace F = troupe::nn::functional;
using troupe::testing::Fixtures;
using troupe::testing::tensors_close;
using autograd::variable_list;

const Fixtures& fx() {
  static const Fixtures f = Fixtures::load("nn_layers2.txt");
  return f;
}

Tensor get(const std::string& name) { return fx().get(name); }

const std::map<std::string, std::string>& pytorch_reprs() {
  static const std::map<std::string, std::string> m = [] {
    std::map<std::string, std::string> out;
    std::ifstream in(troupe::testing::fixtures_dir() + "/nn_layers2_repr.txt");
    if (!in) throw std::runtime_error("cannot open nn_layers2_repr.txt in " + troupe::testing::fixtures_dir());
    std::string line;
    while (std::getline(in, line)) {
      const size_t tab = line.find('\t');
      if (tab != std::string::npos) out[line.substr(0, tab)] = line.substr(tab + 1);
    }
    return out;
  }();
  return m;
}

/// Runs f and expects an exception whose message contains `text`.
template <class Fn>
void expect_error(Fn&& f, const std::string& text) {
  try {
    f();
    ADD_FAILURE() << "expected an error containing: " << text;
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << "message: " << e.what();
  }
}

// ---------------------------------------------------------------- the functional cases

/// One fixture case: its inputs (in order), the op (outputs: the result, then the indices if any), and
/// whether it is smooth at its fixture inputs (a float64 finite-difference check).
struct Case {
  std::string name;
  std::vector<std::string> inputs;
  std::function<variable_list(const variable_list&)> fn;
  bool gradcheck = true;
};

variable_list L(Tensor t) { return {std::move(t)}; }
variable_list L(std::tuple<Tensor, Tensor> t) { return {std::get<0>(t), std::get<1>(t)}; }

std::vector<Case> build_cases() {
  std::vector<Case> c;
  auto add = [&c](std::string name, std::vector<std::string> inputs,
                  std::function<variable_list(const variable_list&)> fn, bool gc = true) {
    c.push_back({std::move(name), std::move(inputs), std::move(fn), gc});
  };
  const std::vector<std::string> x{"x"}, xwb{"x", "w", "b"}, xw{"x", "w"};
  // conv
  add("conv1d_a", xwb, [](const variable_list& v) {
    return L(F::conv1d(v[0], v[1], F::Conv1dFuncOptions().bias(v[2]).stride(2).padding(1).groups(2)));
  });
  add("conv1d_same", xwb, [](const variable_list& v) {
    return L(F::conv1d(v[0], v[1], F::Conv1dFuncOptions().bias(v[2]).padding(troupe::kSame).dilation(2)));
  });
  add("conv1d_unbatched", xw,
      [](const variable_list& v) { return L(F::conv1d(v[0], v[1], F::Conv1dFuncOptions().stride(3))); });
  add("ct2_a", xwb, [](const variable_list& v) {
    return L(F::conv_transpose2d(v[0], v[1],
                                 F::ConvTranspose2dFuncOptions().bias(v[2]).stride(2).padding(1).output_padding(1)));
  });
  add("ct2_b", xwb, [](const variable_list& v) {
    return L(F::conv_transpose2d(
        v[0], v[1],
        F::ConvTranspose2dFuncOptions().bias(v[2]).stride({2, 1}).padding({0, 1}).groups(2).dilation({1, 2})));
  });
  add("ct2_c", xwb, [](const variable_list& v) {
    return L(F::conv_transpose2d(v[0], v[1],
                                 F::ConvTranspose2dFuncOptions().bias(v[2]).output_padding(1).dilation(2)));
  });
  add("ct2_unbatched", xw, [](const variable_list& v) {
    return L(F::conv_transpose2d(v[0], v[1], F::ConvTranspose2dFuncOptions().stride(3).output_padding(2)));
  });
  add("ct1_a", xwb, [](const variable_list& v) {
    return L(F::conv_transpose1d(v[0], v[1],
                                 F::ConvTranspose1dFuncOptions().bias(v[2]).stride(2).padding(1).output_padding(1)));
  });
  add("ct1_b", xwb, [](const variable_list& v) {
    return L(F::conv_transpose1d(v[0], v[1], F::ConvTranspose1dFuncOptions().bias(v[2]).groups(2).dilation(3)));
  });
  // pooling
  add("maxpool1d_a", x, [](const variable_list& v) {
    return L(F::max_pool1d_with_indices(v[0], F::MaxPool1dFuncOptions(3).stride(2).padding(1).ceil_mode(true)));
  });
  add("maxpool1d_b", x, [](const variable_list& v) {
    return L(F::max_pool1d_with_indices(v[0], F::MaxPool1dFuncOptions(2).stride(1).dilation(2)));
  });
  add("avgpool1d_a", x, [](const variable_list& v) {
    return L(F::avg_pool1d(v[0], F::AvgPool1dFuncOptions(3).stride(2).padding(1).ceil_mode(true).count_include_pad(
                                     false)));
  });
  add("avgpool1d_b", x, [](const variable_list& v) { return L(F::avg_pool1d(v[0], F::AvgPool1dFuncOptions(2))); });
  add("aavg1d", x,
      [](const variable_list& v) { return L(F::adaptive_avg_pool1d(v[0], F::AdaptiveAvgPool1dFuncOptions(4))); });
  add("aavg2d", x, [](const variable_list& v) {
    return L(F::adaptive_avg_pool2d(v[0], F::AdaptiveAvgPool2dFuncOptions({3, 4})));
  });
  add("aavg2d_none", x, [](const variable_list& v) {
    return L(F::adaptive_avg_pool2d(v[0], F::AdaptiveAvgPool2dFuncOptions({std::nullopt, 4})));
  });
  add("aavg2d_up", x, [](const variable_list& v) {
    return L(F::adaptive_avg_pool2d(v[0], F::AdaptiveAvgPool2dFuncOptions({5, 4})));
  });
  add("aavg2d_global", x,
      [](const variable_list& v) { return L(F::adaptive_avg_pool2d(v[0], F::AdaptiveAvgPool2dFuncOptions(1))); });
  add("amax1d", x, [](const variable_list& v) {
    return L(F::adaptive_max_pool1d_with_indices(v[0], F::AdaptiveMaxPool1dFuncOptions(4)));
  });
  add("amax2d", x, [](const variable_list& v) {
    return L(F::adaptive_max_pool2d_with_indices(v[0], F::AdaptiveMaxPool2dFuncOptions({3, 4})));
  });
  add("amax2d_unbatched", x, [](const variable_list& v) {
    return L(F::adaptive_max_pool2d_with_indices(v[0], F::AdaptiveMaxPool2dFuncOptions({2, std::nullopt})));
  });
  add("amax2d_up", x, [](const variable_list& v) {
    return L(F::adaptive_max_pool2d_with_indices(v[0], F::AdaptiveMaxPool2dFuncOptions({4, 5})));
  });
  add(
      "amax2d_ties", x,
      [](const variable_list& v) {
        return L(F::adaptive_max_pool2d_with_indices(v[0], F::AdaptiveMaxPool2dFuncOptions(2)));
      },
      /*gradcheck=*/false);  // ties: not differentiable there
  // normalization
  add("gn_a", xwb, [](const variable_list& v) {
    return L(F::group_norm(v[0], F::GroupNormFuncOptions(3).weight(v[1]).bias(v[2])));
  });
  add("gn_b", x, [](const variable_list& v) { return L(F::group_norm(v[0], F::GroupNormFuncOptions(2).eps(1e-3))); });
  add("in_eval", {"x", "rm", "rv", "w", "b"}, [](const variable_list& v) {
    return L(F::instance_norm(
        v[0], F::InstanceNormFuncOptions().running_mean(v[1]).running_var(v[2]).weight(v[3]).bias(v[4]).use_input_stats(
                  false)));
  });
  // pad
  auto pad_case = [&](const std::string& name, std::vector<int64_t> pad, std::string mode, double value = 0) {
    add(name, {"x"}, [pad, mode, value](const variable_list& v) {
      return L(F::pad(v[0], F::PadFuncOptions(pad).mode(mode).value(value)));
    });
  };
  pad_case("pad_reflect2d", {1, 2, 3, 0}, troupe::kReflect);
  pad_case("pad_replicate2d", {2, 1, 0, 3}, troupe::kReplicate);
  pad_case("pad_circular2d", {1, 3, 2, 1}, troupe::kCircular);
  pad_case("pad_reflect1d", {2, 3}, "reflect");
  pad_case("pad_replicate1d", {0, 4}, "replicate");
  pad_case("pad_circular1d", {4, 2}, "circular");
  pad_case("pad_constant", {1, -1, 2, 0, 0, 1}, troupe::kConstant, 1.5);
  // interpolate
  auto interp = [&](const std::string& name, F::InterpolateFuncOptions o) {
    add(name, {"x"}, [o](const variable_list& v) { return L(F::interpolate(v[0], o)); });
  };
  using IO = F::InterpolateFuncOptions;
  interp("interp_nearest1d", IO().size(std::vector<int64_t>{7}).mode(troupe::kNearest));
  interp("interp_nearest2d_x2", IO().scale_factor(std::vector<double>{2}).mode(troupe::kNearest));
  interp("interp_nearest2d_size", IO().size(std::vector<int64_t>{5, 7}));
  interp("interp_nearest2d_scale", IO().scale_factor(std::vector<double>{1.7}));
  interp("interp_nearest2d_down", IO().size(std::vector<int64_t>{3, 4}));
  interp("interp_nearest_exact", IO().size(std::vector<int64_t>{5, 7}).mode(troupe::kNearestExact));
  interp("interp_linear", IO().scale_factor(std::vector<double>{2.5}).mode(troupe::kLinear).align_corners(false));
  interp("interp_linear_ac", IO().size(std::vector<int64_t>{8}).mode(troupe::kLinear).align_corners(true));
  interp("interp_bilinear", IO().size(std::vector<int64_t>{5, 7}).mode(troupe::kBilinear).align_corners(false));
  interp("interp_bilinear_ac", IO().size(std::vector<int64_t>{5, 7}).mode(troupe::kBilinear).align_corners(true));
  interp("interp_bilinear_scale", IO().scale_factor(std::vector<double>{1.5, 2.0}).mode(troupe::kBilinear));
  interp("interp_bilinear_recompute",
         IO().scale_factor(std::vector<double>{1.7}).mode(troupe::kBilinear).recompute_scale_factor(true));
  interp("interp_bilinear_down", IO().size(std::vector<int64_t>{4, 3}).mode(troupe::kBilinear));
  interp("interp_area", IO().size(std::vector<int64_t>{4, 3}).mode(troupe::kArea));
  // pixel shuffle, activations
  add("pixel_shuffle", x, [](const variable_list& v) { return L(F::pixel_shuffle(v[0], 2)); });
  add("pixel_shuffle_3d", x, [](const variable_list& v) { return L(F::pixel_shuffle(v[0], 3)); });
  add("pixel_unshuffle", x, [](const variable_list& v) { return L(F::pixel_unshuffle(v[0], 2)); });
  add("softplus", x, [](const variable_list& v) { return L(F::softplus(v[0] * 3)); });
  add("softplus_beta", x, [](const variable_list& v) {
    return L(F::softplus(v[0] * 3, F::SoftplusFuncOptions().beta(2).threshold(1)));
  });
  add(
      "hardtanh", x,
      [](const variable_list& v) { return L(F::hardtanh(v[0], F::HardtanhFuncOptions().min_val(-0.5).max_val(1.5))); },
      /*gradcheck=*/false);  // the fixture sits on the kinks; HardtanhGradcheck below uses other points
  add("mish", x, [](const variable_list& v) { return L(F::mish(v[0] * 3)); });
  add("prelu1", xw, [](const variable_list& v) { return L(F::prelu(v[0], v[1])); });
  add("prelu3", xw, [](const variable_list& v) { return L(F::prelu(v[0], v[1])); });
  // losses
  auto kl = [&](const std::string& red) {
    add("kl_" + red, {"x", "t"}, [red](const variable_list& v) {
      return L(F::kl_div(v[0], v[1], F::KLDivFuncOptions(red)));
    });
  };
  for (const char* red : {"none", "batchmean", "sum", "mean"}) kl(red);
  add("kl_log_target", {"x", "t"}, [](const variable_list& v) {
    return L(F::kl_div(v[0], v[1], F::KLDivFuncOptions(troupe::kBatchMean).log_target(true)));
  });
  const std::vector<std::string> x12y{"x1", "x2", "y"};
  add("cos_none", x12y, [](const variable_list& v) {
    return L(F::cosine_embedding_loss(v[0], v[1], v[2],
                                      F::CosineEmbeddingLossFuncOptions().margin(0.2).reduction(troupe::kNone)));
  });
  add("cos_mean", x12y, [](const variable_list& v) {
    return L(F::cosine_embedding_loss(v[0], v[1], v[2], F::CosineEmbeddingLossFuncOptions().margin(0.2)));
  });
  add("cos_sum", x12y, [](const variable_list& v) {
    return L(F::cosine_embedding_loss(v[0], v[1], v[2],
                                      F::CosineEmbeddingLossFuncOptions().margin(0.2).reduction(troupe::kSum)));
  });
  add("cos_1d", x12y, [](const variable_list& v) { return L(F::cosine_embedding_loss(v[0], v[1], v[2])); });
  add("mr_none", x12y, [](const variable_list& v) {
    return L(F::margin_ranking_loss(v[0], v[1], v[2],
                                    F::MarginRankingLossFuncOptions().margin(0.3).reduction(troupe::kNone)));
  });
  add("mr_mean", x12y, [](const variable_list& v) {
    return L(F::margin_ranking_loss(v[0], v[1], v[2], F::MarginRankingLossFuncOptions().margin(0.3)));
  });
  add("triplet", {"a", "p", "n"}, [](const variable_list& v) { return L(F::triplet_margin_loss(v[0], v[1], v[2])); });
  add("triplet_swap", {"a", "p", "n"}, [](const variable_list& v) {
    return L(F::triplet_margin_loss(
        v[0], v[1], v[2], F::TripletMarginLossFuncOptions().margin(2.0).p(1).swap(true).reduction(troupe::kNone)));
  });
  return c;
}

const std::vector<Case>& cases() {
  static const std::vector<Case> c = build_cases();
  return c;
}

std::vector<size_t> all_indices() {
  std::vector<size_t> r(cases().size());
  for (size_t i = 0; i < r.size(); ++i) r[i] = i;
  return r;
}

std::string case_name(const ::testing::TestParamInfo<size_t>& info) { return cases()[info.param].name; }

class Layers2Fixture : public ::testing::TestWithParam<size_t> {};

TEST_P(Layers2Fixture, ForwardAndBackwardMatchPyTorch) {
  const Case& c = cases()[GetParam()];
  variable_list in;
  for (const auto& n : c.inputs) {
    Tensor t = get(c.name + "_" + n);
    if (t.is_floating_point() && fx().has(c.name + "_d" + n)) t.requires_grad_(true);
    in.push_back(t);
  }
  variable_list out = c.fn(in);
  EXPECT_TRUE(tensors_close(out[0], get(c.name + "_out"), 1e-5, 1e-5)) << c.name << " output";
  if (fx().has(c.name + "_idx")) {
    ASSERT_EQ(out.size(), 2u);
    EXPECT_TRUE(tensors_close(out[1], get(c.name + "_idx"), 0, 0, true)) << c.name << " indices";
  }
  if (!fx().has(c.name + "_g")) return;
  out[0].backward(get(c.name + "_g"));
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    const std::string d = c.name + "_d" + c.inputs[i];
    if (!fx().has(d)) continue;
    ASSERT_TRUE(in[i].grad().defined()) << d;
    EXPECT_TRUE(tensors_close(in[i].grad(), get(d), 1e-4, 1e-5)) << d;
  }
}

// The same op and inputs in float64 against central differences.
TEST_P(Layers2Fixture, GradcheckFloat64) {
  const Case& c = cases()[GetParam()];
  if (!c.gradcheck) GTEST_SKIP() << "not differentiable at its fixture inputs";
  variable_list in;
  bool any = false;
  for (const auto& n : c.inputs) {
    Tensor t = get(c.name + "_" + n);
    if (t.is_floating_point()) {
      t = t.to(kFloat64);
      if (fx().has(c.name + "_d" + n)) {
        t.requires_grad_(true);
        any = true;
      }
    }
    in.push_back(t);
  }
  if (!any) GTEST_SKIP() << "no differentiable input";
  try {
    EXPECT_TRUE(autograd::gradcheck([&c](const variable_list& v) { return variable_list{c.fn(v)[0]}; }, in));
  } catch (const std::exception& e) {
    ADD_FAILURE() << c.name << ": " << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, Layers2Fixture, ::testing::ValuesIn(all_indices()), case_name);

TEST(Layers2Fixture, EveryFixtureCaseIsInTheTable) {
  std::set<std::string> names;
  for (const auto& c : cases()) names.insert(c.name);
  for (const auto& r : fx().names()) {
    const size_t at = r.rfind("_out");
    if (at == std::string::npos || at + 4 != r.size()) continue;
    const std::string name = r.substr(0, at);
    if (name.rfind("ct2_module", 0) == 0 || name.rfind("conv1d_reflect", 0) == 0 || name == "in_a") continue;
    EXPECT_TRUE(names.count(name)) << "fixture case " << name << " has no entry in the table";
  }
}

TEST(HardtanhTest, GradcheckAwayFromTheKinks) {
  Tensor x = tensor({-2.0, -0.7, 0.3, 1.2, 2.0, -0.1}, TensorOptions().dtype(kFloat64)).requires_grad_(true);
  EXPECT_TRUE(autograd::gradcheck(
      [](const variable_list& v) {
        return variable_list{F::hardtanh(v[0], F::HardtanhFuncOptions().min_val(-0.5).max_val(1.5))};
      },
      {x}));
}

TEST(PadTest, GradcheckEveryMode) {
  manual_seed(3);
  const std::vector<std::pair<std::string, std::vector<int64_t>>> modes = {
      {"reflect", {2, 1, 1, 2}}, {"replicate", {3, 0, 2, 1}}, {"circular", {1, 2, 2, 1}}, {"constant", {1, -1, 0, 2}}};
  for (const auto& [mode, pad] : modes) {
    SCOPED_TRACE(mode);
    Tensor x = randn({1, 2, 3, 4}, kFloat64).requires_grad_(true);
    EXPECT_TRUE(autograd::gradcheck(
        [&, pad = pad, mode = mode](const variable_list& v) {
          return variable_list{F::pad(v[0], F::PadFuncOptions(pad).mode(mode))};
        },
        {x}));
  }
}

TEST(FunctionalInstanceNormTest, UpdatesTheRunningStatisticsAsPyTorch) {
  Tensor x = get("in_a_x").requires_grad_(true), w = get("in_a_w").requires_grad_(true),
         b = get("in_a_b").requires_grad_(true);
  Tensor rm = get("in_a_rm"), rv = get("in_a_rv");
  Tensor out = F::instance_norm(
      x, F::InstanceNormFuncOptions().running_mean(rm).running_var(rv).weight(w).bias(b).momentum(0.2));
  EXPECT_TRUE(tensors_close(out, get("in_a_out"), 1e-5, 1e-5));
  EXPECT_TRUE(tensors_close(rm, get("in_a_rm_after"), 1e-5, 1e-6));
  EXPECT_TRUE(tensors_close(rv, get("in_a_rv_after"), 1e-5, 1e-6));
  out.backward(get("in_a_g"));
  EXPECT_TRUE(tensors_close(x.grad(), get("in_a_dx"), 1e-4, 1e-5));
  EXPECT_TRUE(tensors_close(w.grad(), get("in_a_dw"), 1e-4, 1e-5));
  EXPECT_TRUE(tensors_close(b.grad(), get("in_a_db"), 1e-4, 1e-5));
  // float64 gradcheck of x, w and b
  Tensor x64 = get("in_a_x").to(kFloat64).requires_grad_(true), w64 = get("in_a_w").to(kFloat64).requires_grad_(true),
         b64 = get("in_a_b").to(kFloat64).requires_grad_(true);
  EXPECT_TRUE(autograd::gradcheck(
      [](const variable_list& v) {
        return variable_list{F::instance_norm(v[0], F::InstanceNormFuncOptions().weight(v[1]).bias(v[2]))};
      },
      {x64, w64, b64}));
}

// ---------------------------------------------------------------- modules

TEST(Layers2InitTest, DefaultInitIsBitEqualToPyTorch) {
  auto check = [](const std::string& name, uint64_t seed, const std::function<std::shared_ptr<nn::Module>()>& make) {
    SCOPED_TRACE(name);
    manual_seed(seed);
    auto m = make();
    auto params = m->named_parameters();
    EXPECT_TRUE(tensors_close(params["weight"], get("init_" + name + "_weight"), 0, 0, true));
    if (fx().has("init_" + name + "_bias")) {
      EXPECT_TRUE(tensors_close(params["bias"], get("init_" + name + "_bias"), 0, 0, true));
    } else {
      EXPECT_FALSE(params.contains("bias"));
    }
  };
  check("conv1d", 0, [] { return std::make_shared<nn::Conv1dImpl>(3, 4, 3); });
  check("conv1d_groups", 1,
        [] { return std::make_shared<nn::Conv1dImpl>(nn::Conv1dOptions(4, 6, 2).groups(2).bias(false)); });
  check("ct1", 2, [] { return std::make_shared<nn::ConvTranspose1dImpl>(3, 5, 4); });
  check("ct2", 3,
        [] { return std::make_shared<nn::ConvTranspose2dImpl>(nn::ConvTranspose2dOptions(4, 6, {3, 2}).groups(2)); });
  check("ct2_f64", 4, [] {
    return std::make_shared<nn::ConvTranspose2dImpl>(nn::ConvTranspose2dOptions(2, 3, 2).bias(false).dtype(kFloat64));
  });
  check("prelu", 5, [] { return std::make_shared<nn::PReLUImpl>(nn::PReLUOptions().num_parameters(3).init(0.1)); });
}

TEST(ConvTranspose2dTest, OutputSizePicksTheOutputPadding) {
  auto m = nn::ConvTranspose2d(nn::ConvTranspose2dOptions(4, 2, 3).stride(2).padding(1));
  {
    NoGradGuard ng;
    m->weight.copy_(get("ct2_module_weight"));
    m->bias.copy_(get("ct2_module_bias"));
  }
  Tensor x = get("ct2_module_x");
  Tensor y = m->forward(x, {6, 8});
  EXPECT_TRUE(tensors_close(y, get("ct2_module_out"), 1e-5, 1e-5));
  EXPECT_EQ(m->forward(x, {1, 2, 6, 8}).sizes().vec(), (std::vector<int64_t>{1, 2, 6, 8}));
  EXPECT_EQ(m(x).sizes().vec(), (std::vector<int64_t>{1, 2, 5, 7}));
  expect_error([&] { m->forward(x, {7, 8}); },
               "requested an output size of [7, 8], but valid sizes range from [5, 7] to [6, 8] (for an input of "
               "torch.Size([3, 4]))");
  expect_error([&] { m->forward(x, {6}); }, "ConvTranspose2D: for 4D input, output_size must have 2 or 4 elements (got 1)");
  expect_error([] { nn::ConvTranspose2d(nn::ConvTranspose2dOptions(2, 2, 3).padding_mode(troupe::kReflect)); },
               "Only \"zeros\" padding mode is supported for ConvTranspose2d");
  expect_error([] { F::conv_transpose2d(randn({1, 2, 3, 3}), randn({2, 2, 3, 3}), F::ConvTranspose2dFuncOptions().output_padding(1)); },
               "output padding must be smaller than either stride or dilation, but got output_padding_height: 1 "
               "output_padding_width: 1 stride_height: 1 stride_width: 1 dilation_height: 1 dilation_width: 1");
  expect_error([] { F::conv_transpose2d(randn({1, 3, 3, 3}), randn({2, 2, 3, 3})); },
               "Given transposed=1, weight of size [2, 2, 3, 3], expected input[1, 3, 3, 3] to have 2 channels, but "
               "got 3 channels instead");
}

TEST(Conv1dTest, ReflectPaddingModuleMatchesPyTorch) {
  auto m = nn::Conv1d(nn::Conv1dOptions(2, 3, 3).padding(2).padding_mode(troupe::kReflect));
  {
    NoGradGuard ng;
    m->weight.copy_(get("conv1d_reflect_weight"));
    m->bias.copy_(get("conv1d_reflect_bias"));
  }
  EXPECT_TRUE(tensors_close(m(get("conv1d_reflect_x")), get("conv1d_reflect_out"), 1e-5, 1e-5));
  expect_error([] { F::conv1d(randn({2, 3, 4, 5}), randn({2, 3, 3})); },
               "Expected 2D (unbatched) or 3D (batched) input to conv1d, but got input of size: [2, 3, 4, 5]");
  expect_error([] { F::conv1d(randn({1, 4, 5}), randn({2, 3, 3})); },
               "Given groups=1, weight of size [2, 3, 3], expected input[1, 4, 5] to have 3 channels, but got 4 "
               "channels instead");
}

TEST(InstanceNormTest, ModuleTrainingAndEvalMatchPyTorch) {
  auto m = nn::InstanceNorm1d(nn::InstanceNorm1dOptions(3).momentum(0.3).affine(true).track_running_stats(true));
  EXPECT_EQ(m->named_buffers().keys(), (std::vector<std::string>{"running_mean", "running_var", "num_batches_tracked"}));
  {
    NoGradGuard ng;
    m->weight.copy_(get("inm_w"));
    m->bias.copy_(get("inm_b"));
  }
  for (int step = 0; step < 2; ++step)
    EXPECT_TRUE(tensors_close(m(get("inm_x" + std::to_string(step))), get("inm_y" + std::to_string(step)), 1e-5, 1e-5));
  EXPECT_TRUE(tensors_close(m->running_mean, get("inm_running_mean"), 1e-5, 1e-6));
  EXPECT_TRUE(tensors_close(m->running_var, get("inm_running_var"), 1e-5, 1e-6));
  m->eval();
  EXPECT_TRUE(tensors_close(m(get("inm_xe")), get("inm_ye"), 1e-5, 1e-5));
  // default: no affine, no running statistics; an unbatched input
  auto u = nn::InstanceNorm2d(2);
  EXPECT_TRUE(u->named_parameters().is_empty());
  EXPECT_TRUE(tensors_close(u(get("in2d_unbatched_x")), get("in2d_unbatched_y"), 1e-5, 1e-5));
  expect_error([&] { m(randn({2, 3, 4, 5})); }, "expected 2D or 3D input (got 4D input)");
  expect_error([&] { m(randn({2, 4, 5})); }, "expected input's size at dim=1 to match num_features (3), but got: 4.");
}

TEST(GroupNormTest, ModuleAndErrors) {
  auto m = nn::GroupNorm(3, 6);
  EXPECT_EQ(m->named_parameters().keys(), (std::vector<std::string>{"weight", "bias"}));
  Tensor x = get("gn_a_x");
  {
    NoGradGuard ng;
    m->weight.copy_(get("gn_a_w"));
    m->bias.copy_(get("gn_a_b"));
  }
  EXPECT_TRUE(tensors_close(m(x), get("gn_a_out"), 1e-5, 1e-5));
  expect_error([] { nn::GroupNorm(4, 6); }, "num_channels must be divisible by num_groups");
  expect_error([] { F::group_norm(randn({2, 6, 4}), F::GroupNormFuncOptions(4)); },
               "Expected number of channels in input to be divisible by num_groups, but got input of shape [2, 6, 4] "
               "and num_groups=4");
}

TEST(PoolingTest, ModulesReturnIndicesWhenAsked) {
  auto m = nn::AdaptiveMaxPool2d(nn::AdaptiveMaxPool2dOptions({3, 4}).return_indices(true));
  nn::Value v = m->call({get("amax2d_x")});
  ASSERT_TRUE(v.is_tuple());
  EXPECT_TRUE(tensors_close(v.tuple()[0], get("amax2d_out"), 0, 0));
  EXPECT_TRUE(tensors_close(v.tuple()[1], get("amax2d_idx"), 0, 0, true));
  auto p = nn::MaxPool1d(nn::MaxPool1dOptions(3).stride(2).padding(1).ceil_mode(true).return_indices(true));
  auto [out, idx] = p->forward_with_indices(get("maxpool1d_a_x"));
  EXPECT_TRUE(tensors_close(idx, get("maxpool1d_a_idx"), 0, 0, true));
  auto a = nn::AdaptiveAvgPool2d(nn::AdaptiveAvgPool2dOptions({std::nullopt, 4}));
  EXPECT_TRUE(tensors_close(a(get("aavg2d_none_x")), get("aavg2d_none_out"), 1e-5, 1e-6));
  expect_error([] { F::adaptive_avg_pool2d(randn({2, 3}), F::AdaptiveAvgPool2dFuncOptions(2)); },
               "adaptive_avg_pool2d(): Expected 3D or 4D tensor, but got [2, 3]");
}

TEST(UpsampleTest, ModuleAndErrors) {
  auto up = nn::Upsample(nn::UpsampleOptions().size(std::vector<int64_t>{5, 7}).mode(troupe::kBilinear).align_corners(true));
  EXPECT_TRUE(tensors_close(up(get("interp_bilinear_ac_x")), get("interp_bilinear_ac_out"), 1e-5, 1e-5));
  Tensor x = randn({1, 2, 3, 4});
  expect_error([&] { F::interpolate(x, F::InterpolateFuncOptions().size(std::vector<int64_t>{4, 4}).align_corners(true)); },
               "align_corners option can only be set with the interpolating modes: linear | bilinear | bicubic | "
               "trilinear");
  expect_error([&] { F::interpolate(x, F::InterpolateFuncOptions().size(std::vector<int64_t>{4}).mode("linear")); },
               "Got 4D input, but linear mode needs 3D input");
  expect_error([&] { F::interpolate(x, F::InterpolateFuncOptions()); }, "either size or scale_factor should be defined");
  expect_error([&] { F::interpolate(x, F::InterpolateFuncOptions().size(std::vector<int64_t>{4, 4, 4})); },
               "Input and output must have the same number of spatial dimensions");
}

TEST(PixelShuffleTest, RoundTripAndErrors) {
  Tensor x = randn({2, 8, 3, 5});
  auto s = nn::PixelShuffle(2);
  auto u = nn::PixelUnshuffle(2);
  EXPECT_TRUE(tensors_close(u(s(x)), x, 0, 0));
  expect_error([] { F::pixel_shuffle(randn({1, 7, 2, 2}), 2); },
               "pixel_shuffle expects its input's 'channel' dimension to be divisible by the square of upscale_factor, "
               "but input.size(-3)=7 is not divisible by 4");
  expect_error([] { F::pixel_unshuffle(randn({1, 2, 3, 4}), 2); },
               "pixel_unshuffle expects height to be divisible by downscale_factor, but input.size(-2)=3 is not "
               "divisible by 2");
}

TEST(Layers2LossTest, ModulesTakeTheirArgumentsAndCheckShapes) {
  auto kl = nn::KLDivLoss(nn::KLDivLossOptions(troupe::kBatchMean));
  EXPECT_TRUE(tensors_close(kl(get("kl_batchmean_x"), get("kl_batchmean_t")), get("kl_batchmean_out"), 1e-5, 1e-6));
  auto cos = nn::CosineEmbeddingLoss(nn::CosineEmbeddingLossOptions().margin(0.2));
  EXPECT_TRUE(tensors_close(cos(get("cos_mean_x1"), get("cos_mean_x2"), get("cos_mean_y")), get("cos_mean_out"), 1e-5,
                            1e-6));
  auto trip = nn::TripletMarginLoss();
  nn::Value v = trip->call({}, {{"anchor", get("triplet_a")}, {"positive", get("triplet_p")}, {"negative", get("triplet_n")}});
  EXPECT_TRUE(tensors_close(v.tensor(), get("triplet_out"), 1e-5, 1e-6));
  expect_error([&] { trip->call({get("triplet_a")}); }, "[TripletMarginLoss] forward takes (anchor, positive, negative)");
  expect_error([] { F::margin_ranking_loss(randn({3}), randn({3}), randn({3, 1})); },
               "margin_ranking_loss : All input tensors should have same dimension but got sizes: input1: "
               "torch.Size([3]), input2: torch.Size([3]), target: torch.Size([3, 1])");
  expect_error([] { F::cosine_embedding_loss(randn({3, 4}), randn({3, 4}), randn({3, 1})); },
               "0D or 1D target tensor expected, multi-target not supported");
  expect_error([] { F::triplet_margin_loss(randn({3, 4}), randn({4}), randn({3, 4})); },
               "The anchor, positive, and negative tensors are expected to have the same number of dimensions, but "
               "got: anchor 2D, positive 1D, and negative 2D inputs");
  expect_error([] { nn::KLDivLossOptions("avg"); }, "avg is not a valid value for reduction");
}

// ---------------------------------------------------------------- printed forms

TEST(Layers2ReprTest, PrintedFormsMatchPyTorch) {
  using MP = std::shared_ptr<nn::Module>;
  const std::vector<std::pair<std::string, MP>> mods = {
      {"conv1d", std::make_shared<nn::Conv1dImpl>(nn::Conv1dOptions(16, 33, 3).stride(2))},
      {"conv1d_all", std::make_shared<nn::Conv1dImpl>(nn::Conv1dOptions(4, 6, 5).padding(2).dilation(3).groups(2).bias(
                         false).padding_mode(troupe::kCircular))},
      {"conv1d_same", std::make_shared<nn::Conv1dImpl>(nn::Conv1dOptions(2, 2, 3).padding(troupe::kSame))},
      {"ct1", std::make_shared<nn::ConvTranspose1dImpl>(3, 5, 4)},
      {"ct1_all", std::make_shared<nn::ConvTranspose1dImpl>(
                      nn::ConvTranspose1dOptions(4, 6, 3).stride(2).padding(1).output_padding(1).groups(2).bias(false).dilation(2))},
      {"ct2", std::make_shared<nn::ConvTranspose2dImpl>(nn::ConvTranspose2dOptions(16, 33, 3).stride(2))},
      {"ct2_all", std::make_shared<nn::ConvTranspose2dImpl>(nn::ConvTranspose2dOptions(16, 33, {3, 5})
                                                                .stride({2, 1})
                                                                .padding({4, 2})
                                                                .output_padding({1, 0})
                                                                .dilation({3, 1}))},
      {"maxpool1d", std::make_shared<nn::MaxPool1dImpl>(3)},
      {"maxpool1d_all",
       std::make_shared<nn::MaxPool1dImpl>(nn::MaxPool1dOptions(3).stride(2).padding(1).dilation(2).ceil_mode(true))},
      {"avgpool1d", std::make_shared<nn::AvgPool1dImpl>(3)},
      {"avgpool1d_all", std::make_shared<nn::AvgPool1dImpl>(
                            nn::AvgPool1dOptions(3).stride(2).padding(1).ceil_mode(true).count_include_pad(false))},
      {"aavg1d", std::make_shared<nn::AdaptiveAvgPool1dImpl>(5)},
      {"aavg2d", std::make_shared<nn::AdaptiveAvgPool2dImpl>(nn::AdaptiveAvgPool2dOptions({5, 7}))},
      {"aavg2d_int", std::make_shared<nn::AdaptiveAvgPool2dImpl>(7)},
      {"aavg2d_none", std::make_shared<nn::AdaptiveAvgPool2dImpl>(nn::AdaptiveAvgPool2dOptions({std::nullopt, 7}))},
      {"amax1d", std::make_shared<nn::AdaptiveMaxPool1dImpl>(5)},
      {"amax2d", std::make_shared<nn::AdaptiveMaxPool2dImpl>(nn::AdaptiveMaxPool2dOptions({5, 7}).return_indices(true))},
      {"group_norm", std::make_shared<nn::GroupNormImpl>(3, 6)},
      {"group_norm_all", std::make_shared<nn::GroupNormImpl>(nn::GroupNormOptions(2, 4).eps(0.001).affine(false))},
      {"instance_norm1d", std::make_shared<nn::InstanceNorm1dImpl>(100)},
      {"instance_norm2d_all", std::make_shared<nn::InstanceNorm2dImpl>(
                                  nn::InstanceNorm2dOptions(3).eps(0.001).momentum(0.3).affine(true).track_running_stats(true))},
      {"upsample_scale", std::make_shared<nn::UpsampleImpl>(
                             nn::UpsampleOptions().scale_factor(std::vector<double>{2}).mode(troupe::kNearest))},
      {"upsample_size", std::make_shared<nn::UpsampleImpl>(nn::UpsampleOptions()
                                                               .size(std::vector<int64_t>{4, 5})
                                                               .mode(troupe::kBilinear)
                                                               .align_corners(true))},
      {"upsample_size1",
       std::make_shared<nn::UpsampleImpl>(nn::UpsampleOptions().size(std::vector<int64_t>{7}).mode(troupe::kLinear))},
      {"upsample_scale2", std::make_shared<nn::UpsampleImpl>(nn::UpsampleOptions().scale_factor(std::vector<double>{1.5, 2.0}))},
      {"pixel_shuffle", std::make_shared<nn::PixelShuffleImpl>(3)},
      {"pixel_unshuffle", std::make_shared<nn::PixelUnshuffleImpl>(2)},
      {"softplus", std::make_shared<nn::SoftplusImpl>()},
      {"softplus_beta", std::make_shared<nn::SoftplusImpl>(nn::SoftplusOptions().beta(0.5).threshold(10))},
      {"hardtanh", std::make_shared<nn::HardtanhImpl>()},
      {"hardtanh_all", std::make_shared<nn::HardtanhImpl>(nn::HardtanhOptions().min_val(-2).max_val(2.5).inplace(true))},
      {"mish", std::make_shared<nn::MishImpl>()},
      {"prelu", std::make_shared<nn::PReLUImpl>()},
      {"prelu3", std::make_shared<nn::PReLUImpl>(nn::PReLUOptions().num_parameters(3))},
      {"kl_div", std::make_shared<nn::KLDivLossImpl>(nn::KLDivLossOptions(troupe::kBatchMean))},
      {"cosine_embedding", std::make_shared<nn::CosineEmbeddingLossImpl>()},
      {"margin_ranking", std::make_shared<nn::MarginRankingLossImpl>(nn::MarginRankingLossOptions().margin(0.5))},
      {"triplet_margin", std::make_shared<nn::TripletMarginLossImpl>()},
  };
  EXPECT_EQ(mods.size(), pytorch_reprs().size());
  for (const auto& [name, m] : mods) {
    auto it = pytorch_reprs().find(name);
    ASSERT_NE(it, pytorch_reprs().end()) << name;
    EXPECT_EQ(m->repr(), it->second) << name;
  }
}

TEST(Layers2CloneTest, ClonesKeepOptionsAndValues) {
  auto c = nn::ConvTranspose2d(nn::ConvTranspose2dOptions(2, 4, 3).stride(2).groups(2));
  auto copy = std::dynamic_pointer_cast<nn::ConvTranspose2dImpl>(c->clone());
  ASSERT_TRUE(copy);
  EXPECT_TRUE(tensors_close(copy->weight, c->weight, 0, 0));
  EXPECT_NE(copy->weight.data_ptr(), c->weight.data_ptr());
  EXPECT_EQ(copy->repr(), c->repr());
  auto seq = nn::Sequential(nn::Conv1d(2, 4, 3), nn::GroupNorm(2, 4), nn::Mish(), nn::AdaptiveAvgPool1d(1));
  EXPECT_EQ(seq->forward(randn({3, 2, 10})).sizes().vec(), (std::vector<int64_t>{3, 4, 1}));
}

// libtorch's spelling, compiled with `torch` as an alias of `troupe`.
TEST(Layers2SpellingTest, LibtorchSnippetsCompileAndRun) {
  namespace torch = troupe;
  namespace tnn = torch::nn;
  namespace TF = torch::nn::functional;
  tnn::Conv1d conv(tnn::Conv1dOptions(1, 4, 3).stride(2));
  torch::Tensor x = torch::randn({2, 1, 9});
  EXPECT_EQ(conv(x).sizes().vec(), (std::vector<int64_t>{2, 4, 4}));
  EXPECT_EQ(TF::pad(x, TF::PadFuncOptions({1, 2}).mode(torch::kReflect)).sizes().vec(),
            (std::vector<int64_t>{2, 1, 12}));
  tnn::ConvTranspose2d up(tnn::ConvTranspose2dOptions(4, 2, 4).stride(2).padding(1).bias(false));
  EXPECT_EQ(up(torch::randn({1, 4, 5, 5})).sizes().vec(), (std::vector<int64_t>{1, 2, 10, 10}));
  EXPECT_EQ(TF::interpolate(torch::randn({1, 2, 3, 4}), TF::InterpolateFuncOptions()
                                                            .scale_factor(std::vector<double>{2, 2})
                                                            .mode(torch::kBilinear)
                                                            .align_corners(false))
                .sizes()
                .vec(),
            (std::vector<int64_t>{1, 2, 6, 8}));
  tnn::KLDivLoss kl(tnn::KLDivLossOptions().reduction(torch::kBatchMean).log_target(true));
  EXPECT_EQ(kl(torch::randn({3, 4}), torch::randn({3, 4})).dim(), 0);
  tnn::AdaptiveAvgPool2d gap(tnn::AdaptiveAvgPool2dOptions({1, 1}));
  EXPECT_EQ(gap(torch::randn({2, 3, 5, 5})).sizes().vec(), (std::vector<int64_t>{2, 3, 1, 1}));
  tnn::GroupNorm gn(tnn::GroupNormOptions(2, 4).eps(1e-3));
  tnn::InstanceNorm2d in(tnn::InstanceNorm2dOptions(4).affine(true));
  tnn::PixelShuffle ps(tnn::PixelShuffleOptions(2));
  EXPECT_EQ(ps(in(gn(torch::randn({1, 4, 3, 3})))).sizes().vec(), (std::vector<int64_t>{1, 1, 6, 6}));
}

}  // namespace
