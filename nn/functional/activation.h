// nn::functional activations (torch.nn.functional.relu, gelu, softmax, ...), with Python's argument
// names and defaults. `inplace` overwrites the input and returns it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <troupe/tensor/tensor.h>

namespace troupe::nn::functional {

/// max(0, x).
Tensor relu(const Tensor& input, bool inplace = false);
/// x for x >= 0, negative_slope * x otherwise.
Tensor leaky_relu(const Tensor& input, double negative_slope = 0.01, bool inplace = false);
/// x for x > 0, alpha * (exp(x) - 1) otherwise.
Tensor elu(const Tensor& input, double alpha = 1.0, bool inplace = false);
/// x * Phi(x); approximate is "none" (erf) or "tanh".
Tensor gelu(const Tensor& input, const std::string& approximate = "none");
/// x * sigmoid(x).
Tensor silu(const Tensor& input, bool inplace = false);
/// tanh(x).
Tensor tanh(const Tensor& input);
/// 1 / (1 + exp(-x)).
Tensor sigmoid(const Tensor& input);
/// exp(x) / sum(exp(x)) along dim; dim nullopt picks PyTorch's legacy choice (0 for 0-, 1- and
/// 3-D inputs, else 1) with its deprecation warning; dtype casts the input first.
Tensor softmax(const Tensor& input, std::optional<int64_t> dim, std::optional<ScalarType> dtype = std::nullopt);
/// log(softmax(x)) along dim, computed stably; dim and dtype as for softmax.
Tensor log_softmax(const Tensor& input, std::optional<int64_t> dim, std::optional<ScalarType> dtype = std::nullopt);

}  // namespace troupe::nn::functional
