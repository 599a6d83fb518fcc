// datasets::TensorDataset (libtorch's, not torch.utils.data's): the rows of one tensor, each a
// TensorExample with no target. The Python-like data::TensorDataset(data, targets) is in data/dataset.h.
#pragma once

#include <cstddef>
#include <optional>
#include <vector>

#include <troupe/data/datasets/base.h>
#include <troupe/data/example.h>
#include <troupe/tensor/ops.h>

namespace troupe::data::datasets {

/// Row i of `tensor` is example i.
struct TensorDataset : public Dataset<TensorDataset, TensorExample> {
  /// The rows of stack(tensors).
  explicit TensorDataset(const std::vector<Tensor>& tensors) : TensorDataset(troupe::stack(tensors)) {}
  /// The rows of `tensor`.
  explicit TensorDataset(Tensor tensor) : tensor(std::move(tensor)) {}

  /// tensor[index].
  TensorExample get(size_t index) override { return tensor[static_cast<int64_t>(index)]; }
  /// tensor.size(0).
  std::optional<size_t> size() const override { return static_cast<size_t>(tensor.size(0)); }

  Tensor tensor;
};

}  // namespace troupe::data::datasets
