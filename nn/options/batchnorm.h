// Options of batch normalisation, as libtorch's torch/nn/options/batchnorm.h: the modules' BatchNormOptions
// and the functional's own BatchNormFuncOptions (weight, bias, training, momentum, eps).
//
//   F::batch_norm(x, running_mean, running_var, F::BatchNormFuncOptions().weight(w).bias(b).training(true));
#pragma once

#include <cstdint>
#include <optional>

#include <troupe/tensor/tensor.h>
#include <troupe/util/options.h>

namespace troupe::nn {

/// Options of the BatchNorm layers: `BatchNormOptions(16).momentum(std::nullopt)`.
struct BatchNormOptions {
  BatchNormOptions(int64_t num_features) : num_features_(num_features) {}
  TROUPE_ARG(int64_t, num_features);
  TROUPE_ARG(double, eps) = 1e-5;
  /// Weight of the batch statistics in the running averages; nullopt: the cumulative moving average
  /// (factor 1 / num_batches_tracked).
  TROUPE_ARG(std::optional<double>, momentum) = 0.1;
  /// Learnable weight (ones) and bias (zeros) of num_features elements.
  TROUPE_ARG(bool, affine) = true;
  /// Keep running_mean / running_var / num_batches_tracked (else they are None and batch statistics are
  /// used in eval mode too).
  TROUPE_ARG(bool, track_running_stats) = true;
  TROUPE_ARG(Device, device) = Device(kCPU);
  TROUPE_ARG(std::optional<ScalarType>, dtype);
};

namespace functional {
/// Options of F::batch_norm.
struct BatchNormFuncOptions {
  /// Affine weight and bias of C elements; undefined: none.
  TROUPE_ARG(Tensor, weight);
  TROUPE_ARG(Tensor, bias);
  /// Normalise by the batch statistics (and update the running ones) instead of the running ones.
  TROUPE_ARG(bool, training) = false;
  /// Weight of the batch statistics in the running averages; F::batch_norm needs a value when training
  /// with running statistics.
  TROUPE_ARG(std::optional<double>, momentum) = 0.1;
  TROUPE_ARG(double, eps) = 1e-5;
};
}  // namespace functional

}  // namespace troupe::nn
