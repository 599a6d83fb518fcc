// nn::functional linear layers (torch.nn.functional.linear).
#pragma once

#include <troupe/tensor/tensor.h>

namespace troupe::nn::functional {

/// input @ weight^T + bias: input (*, in_features), weight (out_features, in_features), bias
/// (out_features) or undefined -> (*, out_features).
Tensor linear(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor());

}  // namespace troupe::nn::functional
