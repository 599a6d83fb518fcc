// data::Example<Data, Target> (libtorch's torch::data::Example): one sample or one collated batch, a
// `data` and a `target`; Example<Tensor, example::NoTarget> (TensorExample) has only `data`.
#pragma once

#include <utility>

#include <troupe/tensor/tensor.h>

namespace troupe::data {

/// A (data, target) pair. Example<> is Example<Tensor, Tensor>: a sample, or a batch stacked along a new
/// first dimension (what data::Dataset, data::DataLoader and transforms::Stack<> give).
template <typename Data = Tensor, typename Target = Tensor>
struct Example {
  using DataType = Data;
  using TargetType = Target;

  Example() = default;
  Example(Data data, Target target) : data(std::move(data)), target(std::move(target)) {}

  /// The input: one sample's tensor, or (B, ...) for a batch.
  Data data;
  /// The label: 0-dim for a sample of a 1-D targets tensor, (B,) for a batch.
  Target target;
};

namespace example {
/// The Target of an Example that has none.
using NoTarget = void;
}  // namespace example

/// An Example with data only; it converts to and from its data.
template <typename Data>
struct Example<Data, example::NoTarget> {
  using DataType = Data;
  using TargetType = example::NoTarget;

  Example() = default;
  /* implicit */ Example(Data data) : data(std::move(data)) {}

  operator Data&() { return data; }
  operator const Data&() const { return data; }

  Data data;
};

/// A sample of datasets::TensorDataset: one tensor, no target.
using TensorExample = Example<Tensor, example::NoTarget>;

}  // namespace troupe::data
