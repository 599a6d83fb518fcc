// StatelessDataLoader and make_data_loader (libtorch's torch::data::make_data_loader): a loader over a
// dataset answering index requests, with a sampler choosing them, owned through a unique_ptr.
//
//   auto loader = data::make_data_loader<data::samplers::SequentialSampler>(
//       data::datasets::TensorDataset(x).map(data::transforms::Stack<data::TensorExample>()),
//       data::DataLoaderOptions().batch_size(64).workers(2));
//   for (auto& batch : *loader) train(batch.data);
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include <troupe/data/dataloader/base.h>
#include <troupe/data/dataloader_options.h>
#include <troupe/data/samplers/random.h>

namespace troupe::data {

/// A loader whose dataset needs no state between batches: the sampler's requests go to get_batch, in
/// the calling thread (workers == 0) or in worker threads, each with its own copy of the dataset.
template <typename Dataset, typename Sampler>
class StatelessDataLoader
    : public DataLoaderBase<Dataset, typename Dataset::BatchType, typename Sampler::BatchRequestType> {
 public:
  using super = DataLoaderBase<Dataset, typename Dataset::BatchType, typename Sampler::BatchRequestType>;
  using typename super::BatchRequestType;

  /// Starts options.workers() threads (each copies `dataset`), or keeps the dataset for the caller's thread.
  StatelessDataLoader(Dataset dataset, Sampler sampler, DataLoaderOptions options)
      : super(std::move(options)), sampler_(std::move(sampler)) {
    for (size_t w = 0; w < this->options_.workers; ++w)
      this->workers_.emplace_back([this, dataset]() mutable { this->worker_thread(dataset); });
    if (this->options_.workers == 0) this->main_thread_dataset_ = std::make_unique<Dataset>(std::move(dataset));
  }

 private:
  void reset() override {
    sampler_.reset();
    super::reset();
  }

  /// The sampler's next request; a short last one is dropped with drop_last.
  std::optional<BatchRequestType> get_batch_request() override {
    auto request = sampler_.next(this->options_.batch_size);
    if (!request || (request->size() < this->options_.batch_size && this->options_.drop_last)) return std::nullopt;
    return request;
  }

  Sampler sampler_;
};

/// A loader over `dataset` with `sampler` (libtorch's three-argument make_data_loader).
template <typename Dataset, typename Sampler>
  requires(!Dataset::is_stateful)
std::unique_ptr<StatelessDataLoader<Dataset, Sampler>> make_data_loader(Dataset dataset, Sampler sampler,
                                                                       DataLoaderOptions options) {
  return std::make_unique<StatelessDataLoader<Dataset, Sampler>>(std::move(dataset), std::move(sampler),
                                                                std::move(options));
}

/// A loader over `dataset` with a Sampler(dataset.size()) (RandomSampler unless named:
/// make_data_loader<samplers::SequentialSampler>(dataset, options)). The dataset must know its size.
template <typename Sampler = samplers::RandomSampler, typename Dataset>
  requires(!Dataset::is_stateful && std::is_constructible_v<Sampler, size_t>)
std::unique_ptr<StatelessDataLoader<Dataset, Sampler>> make_data_loader(Dataset dataset,
                                                                       DataLoaderOptions options = DataLoaderOptions()) {
  const std::optional<size_t> size = dataset.size();
  if (!size) throw std::invalid_argument("Expected the dataset to be sized in order to construct the Sampler");
  return make_data_loader(std::move(dataset), Sampler(*size), std::move(options));
}

}  // namespace troupe::data
