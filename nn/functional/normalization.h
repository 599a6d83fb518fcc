// nn::functional normalization (torch.nn.functional.layer_norm / batch_norm / group_norm / instance_norm) with
// libtorch's signatures (LayerNormFuncOptions, BatchNormFuncOptions, ...), composed of tensor ops so that autograd differentiates
// them (twice, too).
#pragma once

#include <troupe/nn/options/batchnorm.h>
#include <troupe/nn/options/instancenorm.h>
#include <troupe/nn/options/normalization.h>
#include <troupe/tensor/tensor.h>

namespace troupe::nn::functional {

/// Normalises over the last len(normalized_shape) dims with the biased variance:
/// (x - mean) / sqrt(var + eps) * weight + bias (weight and bias of shape normalized_shape, or undefined).
Tensor layer_norm(const Tensor& input, const LayerNormFuncOptions& options);

/// Batch normalisation of (N, C, *) per channel C. training: normalises by the batch mean and biased
/// batch variance, and (when defined) updates running_mean = (1 - momentum) * running_mean +
/// momentum * mean and running_var likewise with the unbiased variance, in place. Otherwise normalises
/// by the running statistics. weight / bias of C elements, or undefined. A momentum of nullopt throws
/// when the running statistics would be updated.
Tensor batch_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var,
                  const BatchNormFuncOptions& options = {});

/// Group normalisation of (N, C, *): the C channels split into num_groups groups, each group of each sample
/// normalised by its own mean and biased variance, then * weight + bias per channel (C elements, or undefined).
Tensor group_norm(const Tensor& input, const GroupNormFuncOptions& options);

/// Instance normalisation of (N, C, *): each channel of each sample normalised by its own statistics
/// (use_input_stats; the running statistics, when defined, are updated with their mean over the batch), or
/// by the running statistics; then * weight + bias per channel. PyTorch's form: batch_norm of (1, N*C, *).
Tensor instance_norm(const Tensor& input, const InstanceNormFuncOptions& options = {});

}  // namespace troupe::nn::functional
