// torch.optim.swa_utils: the averaging functions against their formulas, AveragedModel and update_bn
// against PyTorch 1.13 (tests/fixtures/swa_utils.txt from gen_swa_utils.py, with PyTorch 2's buffer
// copy when use_buffers is false), and the reference page's examples.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "fixtures.h"
#include <troupe/nn/nn.h>
#include <troupe/data/data.h>
#include <troupe/optim/swa_utils.h>
#include <troupe/tensor/autograd.h>
#include <troupe/tensor/ops.h>

namespace {

using namespace troupe;
namespace swa_utils = troupe::optim::swa_utils;
using troupe::testing::Fixtures;
using troupe::testing::tensors_close;

const Fixtures& fx() {
  static Fixtures f = Fixtures::load("swa_utils.txt");
  return f;
}

// The records "<prefix>.<key>" in file order, as a state_dict.
nn::StateDict records(const std::string& prefix) {
  nn::StateDict sd;
  for (const auto& name : fx().names())
    if (name.rfind(prefix + ".", 0) == 0) sd.insert_or_assign(name.substr(prefix.size() + 1), fx().get(name));
  return sd;
}

// Same keys in the same order, and values within rtol/atol (0: bit for bit).
void expect_state_dict(const nn::StateDict& actual, const nn::StateDict& expected, double tol, const std::string& what) {
  SCOPED_TRACE(what);
  ASSERT_EQ(actual.keys(), expected.keys());
  for (const auto& [k, t] : expected) {
    const Tensor& got = *actual.find(k);
    EXPECT_EQ(got.dtype(), t.dtype()) << k;
    EXPECT_TRUE(tensors_close(got, t, tol, tol)) << k;
  }
}

// nn.Sequential(Linear(3, 4), BatchNorm1d(4), ReLU(), Linear(4, 2)), the fixtures' model.
std::shared_ptr<nn::SequentialImpl> make_model() {
  return std::make_shared<nn::SequentialImpl>(std::make_shared<nn::LinearImpl>(3, 4), std::make_shared<nn::BatchNorm1dImpl>(4),
                                          std::make_shared<nn::ReLUImpl>(), std::make_shared<nn::LinearImpl>(4, 2));
}

// ------------------------------------------------------------------------------------------------
// averaging functions

TEST(SwaAvgFns, SwaIsTheRunningMean) {
  // averaged + (current - averaged) / (n + 1), element by element in float32
  manual_seed(0);
  Tensor a = randn({7}), c = randn({7});
  Tensor n = full({}, 3, TensorOptions().dtype(kInt64));
  Tensor out = swa_utils::get_swa_avg_fn()(a, c, n);
  ASSERT_EQ(out.dtype(), kFloat32);
  auto av = a.to_vector<float>(), cv = c.to_vector<float>(), ov = out.to_vector<float>();
  for (size_t i = 0; i < av.size(); ++i) EXPECT_EQ(ov[i], av[i] + (cv[i] - av[i]) / 4.0f) << i;
}

TEST(SwaAvgFns, EmaIgnoresNAndHasNoBiasCorrection) {
  manual_seed(1);
  Tensor a = randn({2, 3}, TensorOptions().dtype(kFloat64)), c = randn({2, 3}, TensorOptions().dtype(kFloat64));
  auto ema = swa_utils::get_ema_avg_fn(0.75);
  Tensor out0 = ema(a, c, zeros({}, TensorOptions().dtype(kInt64)));
  Tensor out9 = ema(a, c, full({}, 9, TensorOptions().dtype(kInt64)));
  EXPECT_TRUE(equal(out0, out9));
  auto av = a.to_vector<double>(), cv = c.to_vector<double>(), ov = out0.to_vector<double>();
  for (size_t i = 0; i < av.size(); ++i) EXPECT_EQ(ov[i], 0.75 * av[i] + 0.25 * cv[i]) << i;
  // the default decay is 0.999
  Tensor d = swa_utils::get_ema_avg_fn()(ones({1}, TensorOptions().dtype(kFloat64)), zeros({1}, TensorOptions().dtype(kFloat64)),
                                         zeros({}, TensorOptions().dtype(kInt64)));
  EXPECT_EQ(d.item<double>(), 0.999);
}

TEST(SwaAvgFns, DecayOutsideZeroOneIsAnError) {
  for (double decay : {-0.1, 1.5}) {
    const std::string expected = "Invalid decay value " + std::string(decay < 0 ? "-0.1" : "1.5") +
                                 " provided. Please provide a value in [0,1] range.";
    try {
      swa_utils::get_ema_avg_fn(decay);
      ADD_FAILURE() << "expected an error for " << decay;
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()), expected);
    }
    try {
      swa_utils::get_ema_multi_avg_fn(decay);
      ADD_FAILURE() << "expected an error for " << decay;
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()), expected);
    }
  }
  EXPECT_NO_THROW(swa_utils::get_ema_avg_fn(0.0));
  EXPECT_NO_THROW(swa_utils::get_ema_multi_avg_fn(1.0));
}

// Lists covering both paths of the multi functions: large contiguous float32 (several threads),
// float64, a transposed (non-contiguous) float32 and an int64 tensor.
std::vector<Tensor> mixed_list(uint64_t seed) {
  manual_seed(seed);
  return {randn({300, 500}), randn({17}, TensorOptions().dtype(kFloat64)), randn({6, 4}).t(),
          randint(-50, 50, {5}, TensorOptions().dtype(kInt64))};
}

std::vector<Tensor> clones(const std::vector<Tensor>& v) {
  std::vector<Tensor> out;
  for (const auto& t : v) out.push_back(t.clone());
  return out;
}

TEST(SwaAvgFns, MultiVersionsAgreeWithTheSingleOnesBitForBit) {
  const auto current = mixed_list(5);
  const Tensor n = full({}, 2, TensorOptions().dtype(kInt64));
  struct Case {
    const char* name;
    swa_utils::AvgFn single;
    swa_utils::MultiAvgFn multi;
  };
  for (const auto& c : {Case{"swa", swa_utils::get_swa_avg_fn(), swa_utils::get_swa_multi_avg_fn()},
                        Case{"ema", swa_utils::get_ema_avg_fn(0.9), swa_utils::get_ema_multi_avg_fn(0.9)}}) {
    SCOPED_TRACE(c.name);
    const auto start = mixed_list(6);
    auto averaged = clones(start);
    std::vector<Tensor> storage;
    for (const auto& t : averaged) storage.push_back(t);  // same tensors: the update is in place
    c.multi(averaged, current, n);
    for (size_t i = 0; i < start.size(); ++i) {
      SCOPED_TRACE(i);
      Tensor expected = c.single(start[i], current[i], n).to(start[i].dtype());  // copy_ back truncates ints
      EXPECT_TRUE(averaged[i].is_same(storage[i]));
      EXPECT_EQ(averaged[i].dtype(), start[i].dtype());
      EXPECT_TRUE(equal(averaged[i], expected));
      EXPECT_FALSE(equal(averaged[i], start[i]));
    }
  }
}

TEST(SwaAvgFns, IntegerTensorsAverageInFloatAndTruncate) {
  // PyTorch: 3 + (6 - 3) / (1 + 1) = 4.5, copied into int64 -> 4; 0.9 * 3 + 0.1 * 6 = 3.3 -> 3
  std::vector<Tensor> a{full({}, 3, TensorOptions().dtype(kInt64))};
  const std::vector<Tensor> c{full({}, 6, TensorOptions().dtype(kInt64))};
  swa_utils::get_swa_multi_avg_fn()(a, c, ones({}, TensorOptions().dtype(kInt64)));
  EXPECT_EQ(a[0].item<int64_t>(), 4);
  a[0].fill_(3);
  swa_utils::get_ema_multi_avg_fn(0.9)(a, c, ones({}, TensorOptions().dtype(kInt64)));
  EXPECT_EQ(a[0].item<int64_t>(), 3);
}

TEST(SwaAvgFns, SwaOverKSnapshotsIsTheirMean) {
  manual_seed(7);
  std::vector<Tensor> snaps;
  for (int k = 0; k < 6; ++k) snaps.push_back(randn({1000}, TensorOptions().dtype(kFloat64)));
  std::vector<Tensor> avg{snaps[0].clone()};
  auto fn = swa_utils::get_swa_multi_avg_fn();
  for (int k = 1; k < 6; ++k) fn(avg, {snaps[k]}, full({}, k, TensorOptions().dtype(kInt64)));
  Tensor mean = zeros({1000}, TensorOptions().dtype(kFloat64));
  for (const auto& s : snaps) mean = mean + s;
  EXPECT_TRUE(tensors_close(avg[0], mean / 6, 1e-12, 1e-12));
}

TEST(SwaAvgFns, ListsOfDifferentLengthsAreAnError) {
  std::vector<Tensor> a{zeros({2}), zeros({2})};
  EXPECT_THROW(swa_utils::get_swa_multi_avg_fn()(a, {ones({2})}, ones({}, TensorOptions().dtype(kInt64))),
               std::invalid_argument);
}

// ------------------------------------------------------------------------------------------------
// AveragedModel

// The three AveragedModels of the fixtures, fed the four snapshots; state_dicts bit for bit.
TEST(AveragedModel, MatchesPyTorchOverFourSnapshots) {
  auto model = make_model();
  struct Variant {
    std::string name;
    std::shared_ptr<swa_utils::AveragedModel> avg;
  };
  auto ema_lambda = [](const Tensor& a, const Tensor& c, const Tensor&) { return 0.9 * a + 0.1 * c; };
  std::vector<Variant> variants{
      {"swa", std::make_shared<swa_utils::AveragedModel>(model)},
      {"swabuf", std::make_shared<swa_utils::AveragedModel>(model, std::nullopt, nullptr, nullptr, true)},
      {"ema", std::make_shared<swa_utils::AveragedModel>(model, std::nullopt, ema_lambda, nullptr, true)},
      // get_ema_multi_avg_fn(0.9) is the same maths as the lambda
      {"ema", std::make_shared<swa_utils::AveragedModel>(model, std::nullopt, nullptr,
                                                          swa_utils::get_ema_multi_avg_fn(0.9), true)},
  };
  for (int k = 0; k < 4; ++k) {
    model->load_state_dict(records("snap" + std::to_string(k)));
    for (auto& v : variants) {
      v.avg->update_parameters(*model);
      expect_state_dict(v.avg->state_dict(), records(v.name + "_" + std::to_string(k)), 0,
                        v.name + " after update " + std::to_string(k));
    }
  }
  for (auto& v : variants) {
    v.avg->eval();
    EXPECT_TRUE(tensors_close((*v.avg)(fx().get("x_eval")), fx().get(v.name + "_out"), 1e-5, 1e-6)) << v.name;
  }
}

TEST(AveragedModel, StateDictKeysAndNAveraged) {
  auto model = make_model();
  swa_utils::AveragedModel avg(model);
  auto keys = avg.state_dict().keys();
  EXPECT_EQ(keys, records("swa_0").keys());
  EXPECT_EQ(keys.front(), "n_averaged");
  EXPECT_EQ(avg.n_averaged.dtype(), kInt64);
  EXPECT_EQ(avg.n_averaged.dim(), 0);
  EXPECT_EQ(avg.n_averaged.item<int64_t>(), 0);
  avg.update_parameters(*model);
  avg.update_parameters(*model);
  EXPECT_EQ(avg.n_averaged.item<int64_t>(), 2);
  EXPECT_TRUE(avg.n_averaged.is_same(avg.get_buffer("n_averaged")));
  // a state_dict round trip restores n_averaged too
  swa_utils::AveragedModel other(model);
  other.load_state_dict(avg.state_dict());
  EXPECT_EQ(other.n_averaged.item<int64_t>(), 2);
}

TEST(AveragedModel, IsADeepCopyThatMovesOnlyOnUpdate) {
  manual_seed(2);
  auto model = std::make_shared<nn::LinearImpl>(3, 2);
  swa_utils::AveragedModel avg(model);
  auto copy = std::dynamic_pointer_cast<nn::LinearImpl>(avg.module());
  ASSERT_TRUE(copy);
  EXPECT_NE(copy.get(), model.get());
  EXPECT_TRUE(equal(copy->weight, model->weight));
  const Tensor before = model->weight.clone();
  {
    NoGradGuard no_grad;
    model->weight.add_(1);
  }
  EXPECT_TRUE(equal(copy->weight, before));  // not shared
  avg.update_parameters(*model);              // first call: a copy of the model
  EXPECT_TRUE(equal(copy->weight, model->weight));
  {
    NoGradGuard no_grad;
    model->weight.add_(2);
  }
  avg.update_parameters(*model);  // (w + (w + 2)) / 2
  EXPECT_TRUE(tensors_close(copy->weight, model->weight - 1, 1e-6, 1e-6));
  EXPECT_TRUE(copy->weight.requires_grad());
  EXPECT_FALSE(copy->weight.grad_fn());
  EXPECT_EQ(avg.parameters().size(), 2u);
}

TEST(AveragedModel, ForwardCallsTheCopyAndPrints) {
  auto model = std::make_shared<nn::LinearImpl>(2, 2);
  swa_utils::AveragedModel avg(model);
  Tensor x = randn({4, 2});
  EXPECT_TRUE(equal(avg(x), (*model)(x)));
  EXPECT_TRUE(equal(avg.call({x}).tensor(), (*model)(x)));
  // repr(AveragedModel(nn.Linear(2, 2))) in PyTorch
  EXPECT_EQ(avg.repr(), "AveragedModel(\n  (module): Linear(in_features=2, out_features=2, bias=True)\n)");
}

TEST(AveragedModel, AvgFnAndMultiAvgFnTogetherIsAnError) {
  auto model = std::make_shared<nn::LinearImpl>(2, 2);
  try {
    swa_utils::AveragedModel avg(model, std::nullopt, swa_utils::get_swa_avg_fn(), swa_utils::get_swa_multi_avg_fn());
    FAIL() << "expected an error";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "Only one of avg_fn and multi_avg_fn should be provided");
  }
}

TEST(AveragedModel, AvgFnSeesNumAveragedPerParameter) {
  auto model = std::make_shared<nn::LinearImpl>(2, 2);
  std::vector<int64_t> seen;
  swa_utils::AveragedModel avg(model, Device(kCPU), [&](const Tensor& a, const Tensor& c, const Tensor& n) {
    EXPECT_EQ(n.dtype(), kInt64);
    seen.push_back(n.item<int64_t>());
    return a + c;
  });
  for (int i = 0; i < 3; ++i) avg.update_parameters(*model);
  EXPECT_EQ(seen, (std::vector<int64_t>{1, 1, 2, 2}));  // weight and bias, not on the first (copying) call
}

TEST(AveragedModel, MultiAvgFnIsCalledOncePerDtype) {
  auto model = std::make_shared<nn::SequentialImpl>(std::make_shared<nn::LinearImpl>(2, 3), std::make_shared<nn::LinearImpl>(3, 1));
  (*model)[1]->to(kFloat64);
  std::vector<std::pair<ScalarType, size_t>> calls;
  auto swa = swa_utils::get_swa_multi_avg_fn();
  swa_utils::AveragedModel avg(model, std::nullopt, nullptr,
                               [&](std::vector<Tensor>& a, const std::vector<Tensor>& c, const Tensor& n) {
                                 calls.emplace_back(a.front().dtype(), a.size());
                                 swa(a, c, n);
                               });
  avg.update_parameters(*model);
  EXPECT_TRUE(calls.empty());  // the first call copies
  avg.update_parameters(*model);
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0], std::make_pair(kFloat32, size_t{2}));
  EXPECT_EQ(calls[1], std::make_pair(kFloat64, size_t{2}));
}

// The reference page's example: EMA of the weights and buffers with get_ema_multi_avg_fn(0.9).
TEST(AveragedModel, EmaOfWeightsAndBuffersAsTheReferencePage) {
  manual_seed(3);
  auto model = make_model();
  swa_utils::AveragedModel ema_model(model, std::nullopt, nullptr, swa_utils::get_ema_multi_avg_fn(0.9), true);
  auto bn = std::dynamic_pointer_cast<nn::BatchNorm1dImpl>((*model)[1]);
  auto ema_bn = std::dynamic_pointer_cast<nn::BatchNorm1dImpl>(
      std::dynamic_pointer_cast<nn::SequentialImpl>(ema_model.module())->operator[](1));
  ema_model.update_parameters(*model);
  Tensor mean = bn->running_mean.clone();
  (*model)(randn({8, 3}));  // moves the model's running_mean
  ema_model.update_parameters(*model);
  EXPECT_TRUE(tensors_close(ema_bn->running_mean, 0.9 * mean + 0.1 * bn->running_mean, 1e-6, 1e-7));
}

// ------------------------------------------------------------------------------------------------
// update_bn

std::shared_ptr<nn::SequentialImpl> make_bn_model() {
  auto model = std::make_shared<nn::SequentialImpl>(std::make_shared<nn::LinearImpl>(3, 4), std::make_shared<nn::BatchNorm1dImpl>(4),
                                                std::make_shared<nn::ReLUImpl>(), std::make_shared<nn::LinearImpl>(4, 4),
                                                std::make_shared<nn::BatchNorm1dImpl>(4, 1e-5, 0.3));
  model->load_state_dict(records("bn"));
  model->eval();
  return model;
}

void expect_updated(nn::SequentialImpl& model, const std::string& what) {
  SCOPED_TRACE(what);
  expect_state_dict(model.state_dict(), records("bn_after"), 1e-5, "update_bn");
  EXPECT_FALSE(model.is_training());
  for (const auto& m : model.modules()) EXPECT_FALSE(m->is_training());
  EXPECT_EQ(*std::dynamic_pointer_cast<nn::BatchNorm1dImpl>(model[1])->options.momentum(), 0.1);
  EXPECT_EQ(*std::dynamic_pointer_cast<nn::BatchNorm1dImpl>(model[4])->options.momentum(), 0.3);
}

TEST(UpdateBn, MatchesPyTorchForEveryBatchType) {
  std::vector<Tensor> xs, ys;
  for (int i = 0; i < 3; ++i) {
    xs.push_back(fx().get("bn_x" + std::to_string(i)));
    ys.push_back(fx().get("bn_y" + std::to_string(i)));
  }
  {
    std::vector<std::pair<Tensor, Tensor>> loader;
    for (int i = 0; i < 3; ++i) loader.emplace_back(xs[i], ys[i]);
    auto model = make_bn_model();
    swa_utils::update_bn(loader, *model);
    expect_updated(*model, "pairs");
  }
  {
    std::vector<std::tuple<Tensor, Tensor>> loader;
    for (int i = 0; i < 3; ++i) loader.emplace_back(xs[i], ys[i]);
    auto model = make_bn_model();
    swa_utils::update_bn(loader, *model, Device(kCPU));
    expect_updated(*model, "tuples, device cpu");
  }
  {
    std::vector<std::vector<Tensor>> loader;
    for (int i = 0; i < 3; ++i) loader.push_back({xs[i], ys[i]});
    auto model = make_bn_model();
    swa_utils::update_bn(loader, *model);
    expect_updated(*model, "lists");
  }
  {
    std::vector<data::Example<>> loader;
    for (int i = 0; i < 3; ++i) loader.push_back({xs[i], ys[i]});
    auto model = make_bn_model();
    swa_utils::update_bn(loader, *model);
    expect_updated(*model, "data::Example");
  }
  {
    auto model = make_bn_model();
    swa_utils::update_bn(xs, *model);
    expect_updated(*model, "tensors");
  }
}

TEST(UpdateBn, TakesADataLoader) {
  // 16 samples in batches of 8 from a DataLoader, against the same two batches as plain tensors
  std::vector<Tensor> xs, ys;
  for (int i = 0; i < 3; ++i) {
    xs.push_back(fx().get("bn_x" + std::to_string(i)));
    ys.push_back(fx().get("bn_y" + std::to_string(i)));
  }
  Tensor x = cat(xs, 0), y = cat(ys, 0);
  data::DataLoader loader(std::make_shared<data::TensorDataset>(x, y), data::DataLoaderOptions().batch_size(8));
  auto model = make_bn_model();
  swa_utils::update_bn(loader, *model);
  std::vector<Tensor> halves{x.narrow(0, 0, 8), x.narrow(0, 8, 8)};
  auto expected = make_bn_model();
  swa_utils::update_bn(halves, *expected);
  expect_state_dict(model->state_dict(), expected->state_dict(), 0, "DataLoader");
  EXPECT_FALSE(equal(model->state_dict()["1.running_mean"], records("bn_after")["1.running_mean"]));
}

TEST(UpdateBn, RunsOnAnAveragedModel) {
  auto model = make_bn_model();
  swa_utils::AveragedModel swa_model(model);
  std::vector<Tensor> xs;
  for (int i = 0; i < 3; ++i) xs.push_back(fx().get("bn_x" + std::to_string(i)));
  swa_utils::update_bn(xs, swa_model);
  auto sd = swa_model.state_dict();
  for (const auto& [k, t] : records("bn_after"))
    EXPECT_TRUE(tensors_close(sd["module." + k], t, 1e-5, 1e-5)) << k;
}

// A loader that counts how often it is iterated.
struct CountingLoader {
  std::vector<Tensor> batches;
  int* begun;
  auto begin() {
    ++*begun;
    return batches.begin();
  }
  auto end() { return batches.end(); }
};

TEST(UpdateBn, WithoutBatchNormReturnsAtOnce) {
  auto model = std::make_shared<nn::SequentialImpl>(std::make_shared<nn::LinearImpl>(3, 2));
  model->eval();
  int begun = 0;
  CountingLoader loader{{ones({2, 3})}, &begun};
  swa_utils::update_bn(loader, *model);
  EXPECT_EQ(begun, 0);
  EXPECT_FALSE(model->is_training());
}

TEST(UpdateBn, RestoresMomentaAndModeWhenABatchFails) {
  auto model = make_bn_model();
  std::vector<Tensor> loader{ones({4, 3}), ones({4, 5})};  // the second does not fit Linear(3, 4)
  EXPECT_ANY_THROW(swa_utils::update_bn(loader, *model));
  EXPECT_FALSE(model->is_training());
  EXPECT_EQ(*std::dynamic_pointer_cast<nn::BatchNorm1dImpl>((*model)[4])->options.momentum(), 0.3);
}

}  // namespace
