// Options of layer and group normalisation, as libtorch's torch/nn/options/normalization.h: the modules'
// LayerNormOptions / GroupNormOptions and the functionals' own LayerNormFuncOptions / GroupNormFuncOptions
// (with the weight and bias tensors).
//
//   F::layer_norm(x, F::LayerNormFuncOptions({4}).eps(1e-6));
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include <troupe/tensor/tensor.h>
#include <troupe/util/options.h>

namespace troupe::nn {

/// Options of LayerNorm: `LayerNormOptions({2, 3}).eps(1e-6)`.
struct LayerNormOptions {
  LayerNormOptions(std::vector<int64_t> normalized_shape) : normalized_shape_(std::move(normalized_shape)) {}
  TROUPE_ARG(std::vector<int64_t>, normalized_shape);
  TROUPE_ARG(double, eps) = 1e-5;
  /// Learnable weight (ones) and bias (zeros) of shape normalized_shape.
  TROUPE_ARG(bool, elementwise_affine) = true;
  TROUPE_ARG(Device, device) = Device(kCPU);
  TROUPE_ARG(std::optional<ScalarType>, dtype);
};

/// Options of GroupNorm: `GroupNormOptions(2, 6).eps(1e-3)`.
struct GroupNormOptions {
  GroupNormOptions(int64_t num_groups, int64_t num_channels) : num_groups_(num_groups), num_channels_(num_channels) {}
  /// Groups the channels are split into (it divides num_channels).
  TROUPE_ARG(int64_t, num_groups);
  TROUPE_ARG(int64_t, num_channels);
  TROUPE_ARG(double, eps) = 1e-5;
  /// Learnable per-channel weight (ones) and bias (zeros).
  TROUPE_ARG(bool, affine) = true;
  TROUPE_ARG(Device, device) = Device(kCPU);
  TROUPE_ARG(std::optional<ScalarType>, dtype);
};

namespace functional {
/// Options of F::group_norm: the number of groups, the per-channel weight and bias (undefined: none) and eps.
struct GroupNormFuncOptions {
  GroupNormFuncOptions(int64_t num_groups) : num_groups_(num_groups) {}
  TROUPE_ARG(int64_t, num_groups);
  TROUPE_ARG(Tensor, weight);
  TROUPE_ARG(Tensor, bias);
  TROUPE_ARG(double, eps) = 1e-5;
};


/// Options of F::layer_norm: the normalised trailing shape, the affine weight and bias (undefined: none)
/// and eps.
struct LayerNormFuncOptions {
  LayerNormFuncOptions(std::vector<int64_t> normalized_shape) : normalized_shape_(std::move(normalized_shape)) {}
  TROUPE_ARG(std::vector<int64_t>, normalized_shape);
  TROUPE_ARG(Tensor, weight);
  TROUPE_ARG(Tensor, bias);
  TROUPE_ARG(double, eps) = 1e-5;
};
}  // namespace functional

}  // namespace troupe::nn
