// Map-style datasets (torch.utils.data, the Python-like front): the abstract Dataset yielding Example<>,
// TensorDataset, Subset and random_split.
//
//   auto ds = std::make_shared<data::TensorDataset>(x, y);            // TensorDataset(x, y)
//   auto parts = data::random_split(ds, {0.8, 0.2}, /*seed=*/42);     // random_split(ds, [0.8, 0.2],
//                                                                     //   generator=Generator().manual_seed(42))
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include <troupe/data/example.h>
#include <troupe/tensor/tensor.h>

namespace troupe::data {

/// A map-style dataset (torch.utils.data.Dataset with __getitem__ and __len__).
class Dataset {
 public:
  virtual ~Dataset() = default;

  /// The sample at `index` (dataset[index]); an index outside [-size(), size()) throws std::out_of_range.
  virtual Example<> get(int64_t index) const = 0;
  /// The number of samples (len(dataset)).
  virtual int64_t size() const = 0;
  /// The samples at `indices` stacked along a new dimension 0 (default_collate of [get(i) for i in
  /// indices]); subclasses holding whole tensors override it with one gather. Empty `indices` throws.
  virtual Example<> get_batch(const std::vector<int64_t>& indices) const;

 protected:
  /// `index` wrapped into [0, size) as Python indexing does; throws std::out_of_range naming `fn`
  /// ("[fn] index 10 is out of bounds for dimension 0 with size 10") when it is outside [-size, size).
  static int64_t wrap_index(int64_t index, int64_t size, const char* fn);
};

/// Samples indexed along the first dimension of two tensors (torch.utils.data.TensorDataset(data, targets)).
class TensorDataset : public Dataset {
 public:
  /// Both tensors must have at least one dimension and the same size(0) ("Size mismatch between tensors").
  TensorDataset(Tensor data, Tensor targets);

  /// (data[index], targets[index]): views into the tensors, as tensor[index] in PyTorch.
  Example<> get(int64_t index) const override;
  /// data.size(0).
  int64_t size() const override;
  /// data.index_select(0, indices) and targets.index_select(0, indices): one copy each.
  Example<> get_batch(const std::vector<int64_t>& indices) const override;

  /// The whole data tensor (tensors[0]).
  const Tensor& data() const { return data_; }
  /// The whole targets tensor (tensors[1]).
  const Tensor& targets() const { return targets_; }

 private:
  Tensor data_;
  Tensor targets_;
};

/// The samples of `dataset` at `indices`, in that order (torch.utils.data.Subset).
class Subset : public Dataset {
 public:
  /// Every index must lie in [-dataset->size(), dataset->size()) (checked here, not at each get).
  Subset(std::shared_ptr<const Dataset> dataset, std::vector<int64_t> indices);

  /// dataset[indices[index]].
  Example<> get(int64_t index) const override;
  /// The number of indices.
  int64_t size() const override;
  /// dataset.get_batch([indices[i] for i in batch]).
  Example<> get_batch(const std::vector<int64_t>& indices) const override;

  /// The whole dataset (Subset.dataset).
  const std::shared_ptr<const Dataset>& dataset() const { return dataset_; }
  /// The indices into it, wrapped to [0, dataset->size()) (Subset.indices).
  const std::vector<int64_t>& indices() const { return indices_; }

 private:
  std::shared_ptr<const Dataset> dataset_;
  std::vector<int64_t> indices_;
};

/// Splits `dataset` into non-overlapping subsets of the given lengths, which must sum to its size,
/// bit-identical to torch.utils.data.random_split(dataset, lengths,
/// generator=torch.Generator().manual_seed(seed)): one randperm(sum(lengths)) cut in order.
std::vector<std::shared_ptr<Subset>> random_split(std::shared_ptr<const Dataset> dataset,
                                                  const std::vector<int64_t>& lengths, uint64_t seed);
/// random_split with fractions (PyTorch 1.13): when they sum to 1 (math.isclose) and not above it, each
/// split gets floor(size * fraction) and the remainder is dealt out one by one from the first split on
/// (a zero-length split prints PyTorch's UserWarning); otherwise the values are taken as integer lengths.
std::vector<std::shared_ptr<Subset>> random_split(std::shared_ptr<const Dataset> dataset,
                                                  const std::vector<double>& fractions, uint64_t seed);
/// random_split(dataset, {1400, 397}, seed): integer lengths written as a braced list.
inline std::vector<std::shared_ptr<Subset>> random_split(std::shared_ptr<const Dataset> dataset,
                                                         std::initializer_list<int> lengths, uint64_t seed) {
  return random_split(std::move(dataset), std::vector<int64_t>(lengths.begin(), lengths.end()), seed);
}
/// random_split(dataset, {0.8, 0.2}, seed): fractions written as a braced list.
inline std::vector<std::shared_ptr<Subset>> random_split(std::shared_ptr<const Dataset> dataset,
                                                         std::initializer_list<double> fractions, uint64_t seed) {
  return random_split(std::move(dataset), std::vector<double>(fractions), seed);
}

}  // namespace troupe::data
