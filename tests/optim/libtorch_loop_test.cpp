// A libtorch training program compiled with `namespace torch = troupe;`: a custom dataset mapped through
// Normalize and Stack, make_data_loader with workers, SGD, then torch::save / torch::load of the model and
// the optimizer and a resumed epoch that equals the uninterrupted one.
#include <gtest/gtest.h>

#include <memory>
#include <sstream>
#include <vector>

#include <troupe/troupe.h>

#include "checkpoint_helpers.h"

namespace {

namespace torch = troupe;

// ---- what a libtorch user writes (only the namespace alias differs)

struct Points : torch::data::datasets::Dataset<Points> {
  explicit Points(int64_t n) : x(torch::randn({n, 1, 2, 2})), y(x.sum({1, 2, 3})) {}
  torch::data::Example<> get(size_t index) override {
    return {x[static_cast<int64_t>(index)], y[static_cast<int64_t>(index)]};
  }
  std::optional<size_t> size() const override { return static_cast<size_t>(x.size(0)); }
  torch::Tensor x, y;
};

struct Regressor : torch::nn::Module {
  Regressor() : torch::nn::Module("Regressor") {
    w = register_parameter("w", torch::randn({4, 1}) * 0.1);
    b = register_parameter("b", torch::zeros({1}));
  }
  torch::Tensor forward(const torch::Tensor& x) override { return x.reshape({x.size(0), 4}).matmul(w).squeeze(1) + b; }
  torch::Tensor w, b;
};

/// One epoch over the loader; returns the summed loss.
template <typename Loader>
double train_epoch(Regressor& model, torch::optim::Optimizer& optimizer, Loader& loader) {
  double total = 0;
  for (auto& batch : loader) {
    optimizer.zero_grad();
    auto loss = (model.forward(batch.data) - batch.target).pow(2).mean();
    loss.backward();
    optimizer.step();
    total += loss.template item<float>();
  }
  return total;
}

template <typename D>
auto make_loader(D dataset, size_t workers) {
  return torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(
      std::move(dataset)
          .map(torch::data::transforms::Normalize<>(0.5, 2.0))
          .map(torch::data::transforms::Stack<>()),
      torch::data::DataLoaderOptions().batch_size(8).workers(workers));
}

TEST(LibtorchLoop, TrainSaveLoadResume) {
  torch::manual_seed(0);
  Points points(50);
  auto model = std::make_shared<Regressor>();
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  auto loader = make_loader(points, 2);
  const double first = train_epoch(*model, optimizer, *loader);

  std::stringstream model_file, optimizer_file;
  torch::save(model, model_file);
  torch::save(optimizer, optimizer_file);
  const double second = train_epoch(*model, optimizer, *loader);
  EXPECT_LT(second, first);

  auto resumed = std::make_shared<Regressor>();
  torch::optim::SGD resumed_optimizer(resumed->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  torch::load(resumed, model_file);
  torch::load(resumed_optimizer, optimizer_file);
  auto serial = make_loader(points, 0);  // same batches in the calling thread
  EXPECT_EQ(train_epoch(*resumed, resumed_optimizer, *serial), second);
  EXPECT_TRUE(troupe::testing::identical(resumed->w, model->w));
}

}  // namespace
