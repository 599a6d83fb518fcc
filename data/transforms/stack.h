// transforms::Stack (libtorch's): collates a list of examples into one by stacking data (and targets)
// along a new first dimension.
#pragma once

#include <utility>
#include <vector>

#include <troupe/data/example.h>
#include <troupe/data/transforms/base.h>
#include <troupe/tensor/ops.h>

namespace troupe::data::transforms {

/// Stack<> for Example<>, Stack<TensorExample> for data-only examples.
template <typename T = Example<>>
struct Stack;

/// {stack(datas), stack(targets)}.
template <>
struct Stack<Example<>> : public Collation<Example<>> {
  Example<> apply_batch(std::vector<Example<>> examples) override {
    std::vector<Tensor> data, targets;
    data.reserve(examples.size());
    targets.reserve(examples.size());
    for (auto& e : examples) {
      data.push_back(std::move(e.data));
      targets.push_back(std::move(e.target));
    }
    return {troupe::stack(data), troupe::stack(targets)};
  }
};

/// stack(datas).
template <>
struct Stack<TensorExample> : public Collation<TensorExample> {
  TensorExample apply_batch(std::vector<TensorExample> examples) override {
    std::vector<Tensor> data;
    data.reserve(examples.size());
    for (auto& e : examples) data.push_back(std::move(e.data));
    return troupe::stack(data);
  }
};

}  // namespace troupe::data::transforms
