// nn::functional normalization (torch.nn.functional.layer_norm / batch_norm), composed of tensor ops so
// that autograd differentiates them (twice, too).
#pragma once

#include <cstdint>

#include <troupe/tensor/tensor.h>

namespace troupe::nn::functional {

/// Normalises over the last len(normalized_shape) dims with the biased variance:
/// (x - mean) / sqrt(var + eps) * weight + bias (weight and bias of shape normalized_shape, or undefined).
Tensor layer_norm(const Tensor& input, IntArrayRef normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);

/// Batch normalisation of (N, C, *) per channel C. training: normalises by the batch mean and biased
/// batch variance, and (when defined) updates running_mean = (1 - momentum) * running_mean +
/// momentum * mean and running_var likewise with the unbiased variance, in place. Otherwise normalises
/// by the running statistics. weight / bias of C elements, or undefined.
Tensor batch_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight = Tensor(), const Tensor& bias = Tensor(), bool training = false,
                  double momentum = 0.1, double eps = 1e-5);

}  // namespace troupe::nn::functional
