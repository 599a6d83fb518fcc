// nn::functional activations (torch.nn.functional.relu, gelu, softmax, ...) with libtorch's signatures:
// each takes its options struct (nn/options/activation.h). `inplace` overwrites the input and returns it.
#pragma once

#include <troupe/nn/options/activation.h>
#include <troupe/tensor/tensor.h>

namespace troupe::nn::functional {

/// max(0, x).
Tensor relu(const Tensor& input, const ReLUFuncOptions& options = {});
/// x for x >= 0, negative_slope * x otherwise.
Tensor leaky_relu(const Tensor& input, const LeakyReLUFuncOptions& options = {});
/// x for x > 0, alpha * (exp(x) - 1) otherwise.
Tensor elu(const Tensor& input, const ELUFuncOptions& options = {});
/// log(1 + exp(beta * x)) / beta, x where beta * x > threshold.
Tensor softplus(const Tensor& input, const SoftplusFuncOptions& options = {});
/// x clamped to [min_val, max_val]; the gradient is 0 outside (min_val, max_val), boundaries included.
Tensor hardtanh(const Tensor& input, const HardtanhFuncOptions& options = {});
/// x * tanh(softplus(x)).
Tensor mish(const Tensor& input);
/// x for x > 0, weight * x otherwise; weight has 1 element or one per channel (dim 1 of the input, dim 0
/// of a 1-D input).
Tensor prelu(const Tensor& input, const Tensor& weight);
/// x * Phi(x); approximate is "none" (erf) or "tanh".
Tensor gelu(const Tensor& input, const GELUFuncOptions& options = {});
/// x * sigmoid(x).
Tensor silu(const Tensor& input, const SiLUFuncOptions& options = {});
/// tanh(x).
Tensor tanh(const Tensor& input);
/// 1 / (1 + exp(-x)).
Tensor sigmoid(const Tensor& input);
/// exp(x) / sum(exp(x)) along options.dim(); dim nullopt picks PyTorch's legacy choice (0 for 0-, 1- and
/// 3-D inputs, else 1) with its deprecation warning; options.dtype() casts the input first.
Tensor softmax(const Tensor& input, const SoftmaxFuncOptions& options);
/// log(softmax(x)) along dim, computed stably; dim and dtype as for softmax.
Tensor log_softmax(const Tensor& input, const LogSoftmaxFuncOptions& options);

}  // namespace troupe::nn::functional
