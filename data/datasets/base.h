// libtorch's dataset bases (torch::data::datasets): BatchDataset<Self, Batch, BatchRequest>, the CRTP
// root whose get_batch a loader calls, Dataset<Self, SingleExample> (get(index) per sample; get_batch
// gathers them into a std::vector), StreamDataset, and map(transform).
//
//   struct Squares : data::datasets::Dataset<Squares> {
//     data::Example<> get(size_t i) override { return {troupe::full({1}, double(i)), troupe::full({1}, double(i * i))}; }
//     std::optional<size_t> size() const override { return 10; }
//   };
//   auto ds = Squares().map(data::transforms::Stack<>());   // batches become one Example<>
#pragma once

#include <cstddef>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include <troupe/data/example.h>
#include <troupe/tensor/array_ref.h>

namespace troupe::data::datasets {

template <typename S, typename T>
class MapDataset;
template <typename D, typename T>
MapDataset<D, T> map(D dataset, T transform);

namespace detail {
template <typename T>
struct is_optional : std::false_type {};
template <typename T>
struct is_optional<std::optional<T>> : std::true_type {};
}  // namespace detail

/// A dataset that answers whole batch requests (by default a list of indices). A stateful dataset's
/// Batch is an optional (nullopt: exhausted); make_data_loader takes stateless ones.
template <typename Self, typename Batch = std::vector<Example<>>, typename BatchRequest = ArrayRef<size_t>>
class BatchDataset {
 public:
  using SelfType = Self;
  using BatchType = Batch;
  using BatchRequestType = BatchRequest;
  constexpr static bool is_stateful = detail::is_optional<BatchType>::value;

  virtual ~BatchDataset() = default;

  /// The batch for `request` (the indices of its samples).
  virtual Batch get_batch(BatchRequest request) = 0;
  /// The number of samples, or nullopt when unknown (a stream).
  virtual std::optional<size_t> size() const = 0;

  /// A MapDataset that applies `transform` to each batch of a copy of this dataset.
  template <typename TransformType>
  MapDataset<Self, TransformType> map(TransformType transform) & {
    return datasets::map(static_cast<Self&>(*this), std::move(transform));
  }
  /// map() that moves this dataset into the MapDataset.
  template <typename TransformType>
  MapDataset<Self, TransformType> map(TransformType transform) && {
    return datasets::map(std::move(static_cast<Self&>(*this)), std::move(transform));
  }
};

/// A dataset of single examples: get(index) gives one; get_batch collects get(i) for each index.
template <typename Self, typename SingleExample = Example<>>
class Dataset : public BatchDataset<Self, std::vector<SingleExample>> {
 public:
  using ExampleType = SingleExample;

  /// The example at `index`.
  virtual ExampleType get(size_t index) = 0;

  /// [get(i) for i in indices].
  std::vector<ExampleType> get_batch(ArrayRef<size_t> indices) override {
    std::vector<ExampleType> batch;
    batch.reserve(indices.size());
    for (const size_t i : indices) batch.push_back(get(i));
    return batch;
  }
};

/// A dataset asked for a number of examples rather than indices (used with samplers::StreamSampler).
template <typename Self, typename Batch = std::vector<Example<>>>
using StreamDataset = BatchDataset<Self, Batch, /*BatchRequest=*/size_t>;

}  // namespace troupe::data::datasets
