// Options of instance normalisation, as libtorch's torch/nn/options/instancenorm.h: the modules'
// InstanceNormOptions and the functional's InstanceNormFuncOptions (with the statistics and affine tensors).
//
//   nn::InstanceNorm2d(nn::InstanceNorm2dOptions(3).affine(true));  F::instance_norm(x, F::InstanceNormFuncOptions());
#pragma once

#include <cstdint>
#include <optional>

#include <troupe/tensor/tensor.h>
#include <troupe/util/options.h>

namespace troupe::nn {

/// Options of InstanceNorm1d / InstanceNorm2d: `InstanceNormOptions(16).affine(true).track_running_stats(true)`.
struct InstanceNormOptions {
  InstanceNormOptions(int64_t num_features) : num_features_(num_features) {}
  TROUPE_ARG(int64_t, num_features);
  TROUPE_ARG(double, eps) = 1e-5;
  /// Weight of the instance statistics in the running averages.
  TROUPE_ARG(double, momentum) = 0.1;
  /// Learnable weight (ones) and bias (zeros) of num_features elements.
  TROUPE_ARG(bool, affine) = false;
  /// Keep running_mean / running_var (averaged over the instances of each batch) and use them in eval mode.
  TROUPE_ARG(bool, track_running_stats) = false;
  TROUPE_ARG(Device, device) = Device(kCPU);
  TROUPE_ARG(std::optional<ScalarType>, dtype);
};
using InstanceNorm1dOptions = InstanceNormOptions;
using InstanceNorm2dOptions = InstanceNormOptions;

namespace functional {
/// Options of F::instance_norm.
struct InstanceNormFuncOptions {
  /// Running statistics of C elements (undefined: none); updated in place when use_input_stats.
  TROUPE_ARG(Tensor, running_mean);
  TROUPE_ARG(Tensor, running_var);
  /// Affine weight and bias of C elements; undefined: none.
  TROUPE_ARG(Tensor, weight);
  TROUPE_ARG(Tensor, bias);
  /// Normalise by each instance's statistics (else by the running ones).
  TROUPE_ARG(bool, use_input_stats) = true;
  TROUPE_ARG(double, momentum) = 0.1;
  TROUPE_ARG(double, eps) = 1e-5;
};
}  // namespace functional

}  // namespace troupe::nn
