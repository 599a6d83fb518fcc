// datasets::MapDataset (libtorch's): a dataset whose batches pass through a transform, made by
// dataset.map(transform); chained maps nest (MapDataset<MapDataset<D, T1>, T2>).
#pragma once

#include <optional>
#include <type_traits>
#include <utility>

#include <troupe/data/datasets/base.h>

namespace troupe::data::datasets {

namespace detail {
template <bool C, typename T>
using optional_if_t = std::conditional_t<C, std::optional<T>, T>;
}  // namespace detail

/// `dataset` with `transform.apply_batch` applied to every batch it returns.
template <typename SourceDataset, typename AppliedTransform>
class MapDataset
    : public BatchDataset<MapDataset<SourceDataset, AppliedTransform>,
                          detail::optional_if_t<SourceDataset::is_stateful, typename AppliedTransform::OutputBatchType>,
                          typename SourceDataset::BatchRequestType> {
 public:
  using DatasetType = SourceDataset;
  using TransformType = AppliedTransform;
  using BatchRequestType = typename SourceDataset::BatchRequestType;
  using OutputBatchType =
      detail::optional_if_t<SourceDataset::is_stateful, typename AppliedTransform::OutputBatchType>;

  MapDataset(DatasetType dataset, TransformType transform)
      : dataset_(std::move(dataset)), transform_(std::move(transform)) {}

  /// transform.apply_batch(dataset.get_batch(request)); a stateful source's nullopt passes through.
  OutputBatchType get_batch(BatchRequestType request) override {
    if constexpr (SourceDataset::is_stateful) {
      if (auto batch = dataset_.get_batch(std::move(request))) return transform_.apply_batch(std::move(*batch));
      return std::nullopt;
    } else {
      return transform_.apply_batch(dataset_.get_batch(std::move(request)));
    }
  }
  /// The source's size.
  std::optional<size_t> size() const noexcept override { return dataset_.size(); }
  /// Resets a stateful source.
  void reset() { dataset_.reset(); }

  /// The source dataset.
  const SourceDataset& dataset() noexcept { return dataset_; }
  /// The transform.
  const AppliedTransform& transform() noexcept { return transform_; }

 private:
  SourceDataset dataset_;
  AppliedTransform transform_;
};

/// MapDataset(dataset, transform); the transform's input batch must be the dataset's batch type.
template <typename DatasetType, typename TransformType>
MapDataset<DatasetType, TransformType> map(DatasetType dataset, TransformType transform) {
  using Batch = std::conditional_t<DatasetType::is_stateful, typename DatasetType::BatchType::value_type,
                                   typename DatasetType::BatchType>;
  static_assert(std::is_same_v<Batch, typename TransformType::InputBatchType>,
                "BatchType type of dataset does not match input type of transform");
  return {std::move(dataset), std::move(transform)};
}

}  // namespace troupe::data::datasets
