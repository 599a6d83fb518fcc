// samplers::StreamSampler (libtorch's): asks a StreamDataset for a number of examples (BatchSize) per
// batch until epoch_size examples have been asked for.
#pragma once

#include <cstddef>
#include <optional>

#include <troupe/data/samplers/base.h>

namespace troupe::data::samplers {

/// A request for `size` examples; converts to size_t (a StreamDataset's BatchRequest).
struct BatchSize : public CustomBatchRequest {
  explicit BatchSize(size_t size) : size_(size) {}
  size_t size() const noexcept override { return size_; }
  operator size_t() const noexcept { return size_; }
  size_t size_;
};

/// Hands out BatchSize requests summing to epoch_size per epoch (the last one short).
class StreamSampler : public Sampler<BatchSize> {
 public:
  explicit StreamSampler(size_t epoch_size) : epoch_size_(epoch_size) {}

  void reset(std::optional<size_t> new_size = std::nullopt) override;
  std::optional<BatchSize> next(size_t batch_size) override;
  /// Writes "examples_retrieved_so_far".
  void save(serialize::OutputArchive& archive) const override;
  void load(serialize::InputArchive& archive) override;

 private:
  size_t examples_retrieved_so_far_ = 0;
  size_t epoch_size_;
};

}  // namespace troupe::data::samplers
