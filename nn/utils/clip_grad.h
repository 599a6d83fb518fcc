// Gradient clipping (torch.nn.utils.clip_grad, PyTorch 1.13). Both functions change the parameters'
// .grad in place and skip parameters without a gradient.
//
//   loss.backward();
//   nn::utils::clip_grad_norm_(model->parameters(), /*max_norm=*/1.0);
//   optimizer.step();
#pragma once

#include <vector>

#include <troupe/tensor/tensor.h>

namespace troupe::nn::utils {

/// Scales the gradients so that their total norm (the norm of all of them concatenated) is at most
/// max_norm: every gradient is multiplied by min(1, max_norm / (total_norm + 1e-6)). norm_type may be
/// INFINITY (the largest absolute value). Returns the total norm before clipping, a 0-dim tensor of the
/// gradients' dtype (float32 0 when no parameter has a gradient). With error_if_nonfinite a nan or
/// infinite total norm is an error and nothing is changed.
Tensor clip_grad_norm_(const std::vector<Tensor>& parameters, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false);
/// clip_grad_norm_ of one parameter.
Tensor clip_grad_norm_(const Tensor& parameter, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false);

/// Clamps every gradient element to [-clip_value, clip_value].
void clip_grad_value_(const std::vector<Tensor>& parameters, double clip_value);
/// clip_grad_value_ of one parameter.
void clip_grad_value_(const Tensor& parameter, double clip_value);

}  // namespace troupe::nn::utils
