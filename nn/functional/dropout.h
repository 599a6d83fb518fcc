// nn::functional dropout (torch.nn.functional.dropout) with libtorch's signature: DropoutFuncOptions
// (nn/options/dropout.h).
#pragma once

#include <troupe/nn/options/dropout.h>
#include <troupe/tensor/tensor.h>

namespace troupe::nn::functional {

/// In training, zeroes each element with probability p (a Bernoulli(1 - p) mask drawn as PyTorch's
/// CPU kernel does) and scales the rest by 1 / (1 - p); the input itself when not training.
Tensor dropout(const Tensor& input, const DropoutFuncOptions& options = {});

}  // namespace troupe::nn::functional
