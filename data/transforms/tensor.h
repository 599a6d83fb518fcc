// Tensor transforms (libtorch's): TensorTransform maps an example's data tensor and keeps its target;
// TensorLambda does so with a function, Normalize with (x - mean) / stddev per channel.
#pragma once

#include <functional>
#include <stdexcept>
#include <utility>

#include <troupe/data/example.h>
#include <troupe/data/transforms/base.h>
#include <troupe/tensor/array_ref.h>
#include <troupe/tensor/ops.h>

namespace troupe::data::transforms {

/// Maps the data of each Example<Tensor, Target>; the target passes through.
template <typename Target = Tensor>
class TensorTransform : public Transform<Example<Tensor, Target>, Example<Tensor, Target>> {
 public:
  using E = Example<Tensor, Target>;
  using typename Transform<E, E>::InputType;
  using typename Transform<E, E>::OutputType;

  /// The transformed data tensor.
  virtual Tensor operator()(Tensor input) = 0;

  OutputType apply(InputType input) override {
    input.data = (*this)(std::move(input.data));
    return input;
  }
};

/// A TensorTransform that calls `function` on the data.
template <typename Target = Tensor>
class TensorLambda : public TensorTransform<Target> {
 public:
  using FunctionType = std::function<Tensor(Tensor)>;

  explicit TensorLambda(FunctionType function) : function_(std::move(function)) {}
  Tensor operator()(Tensor input) override { return function_(std::move(input)); }

 private:
  FunctionType function_;
};

/// (data - mean) / stddev with one value per channel (dim 0 of a (C, H, W) sample, or one for all):
/// mean and stddev are float32 tensors of shape (C, 1, 1), as libtorch's.
template <typename Target = Tensor>
struct Normalize : public TensorTransform<Target> {
  Normalize(ArrayRef<double> mean, ArrayRef<double> stddev) : mean(channels(mean)), stddev(channels(stddev)) {}

  Tensor operator()(Tensor input) override { return input.sub(mean).div(stddev); }

  Tensor mean, stddev;

 private:
  static Tensor channels(ArrayRef<double> values) {
    if (values.empty()) throw std::invalid_argument("[transforms::Normalize] mean and stddev need at least one value");
    return troupe::tensor(values.vec(), TensorOptions().dtype(kFloat32)).unsqueeze(1).unsqueeze(2);
  }
};

}  // namespace troupe::data::transforms
