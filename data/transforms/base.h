// libtorch's transform bases (torch::data::transforms): BatchTransform maps a whole batch, Transform one
// example at a time; Collation/Collate turn a list of examples into one batch.
#pragma once

#include <functional>
#include <utility>
#include <vector>

namespace troupe::data::transforms {

/// Maps a batch of type InputBatch to one of type OutputBatch (what dataset.map() applies).
template <typename InputBatch, typename OutputBatch>
class BatchTransform {
 public:
  using InputBatchType = InputBatch;
  using OutputBatchType = OutputBatch;

  virtual ~BatchTransform() = default;
  /// The transformed batch.
  virtual OutputBatch apply_batch(InputBatch input_batch) = 0;
};

/// Maps each example of a std::vector batch on its own.
template <typename Input, typename Output>
class Transform : public BatchTransform<std::vector<Input>, std::vector<Output>> {
 public:
  using InputType = Input;
  using OutputType = Output;

  /// The transformed example.
  virtual OutputType apply(InputType input) = 0;

  /// [apply(x) for x in input_batch].
  std::vector<Output> apply_batch(std::vector<Input> input_batch) override {
    std::vector<Output> output_batch;
    output_batch.reserve(input_batch.size());
    for (auto&& input : input_batch) output_batch.push_back(apply(std::move(input)));
    return output_batch;
  }
};

/// A BatchTransform from a list of T to one T (a collate function's type).
template <typename T, typename BatchType = std::vector<T>>
using Collation = BatchTransform<BatchType, T>;

}  // namespace troupe::data::transforms
