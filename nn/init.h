// nn::init: in-place initialisation of tensors, with torch.nn.init's names, formulas and errors.
// Every function runs without recording autograd history and returns its argument; while
// skip_init() constructs a module they check their arguments but leave the values alone.
// The random ones draw from the default generator exactly as PyTorch does (uniform_ / normal_ of
// the tensor's dtype), so after the same manual_seed they give PyTorch's values bit for bit
// (orthogonal_ to within rounding: its QR runs here in float64).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include <troupe/tensor/tensor.h>

namespace troupe::nn::init {

/// A nonlinearity for calculate_gain / kaiming_*: "linear", "conv1d", "conv2d", "conv3d",
/// "conv_transpose1d/2d/3d", "sigmoid", "tanh", "relu", "leaky_relu", "selu".
using Nonlinearity = std::string;
/// "fan_in" or "fan_out" (any letter case).
using FanMode = std::string;

/// The recommended gain for a nonlinearity (param: leaky_relu's negative slope, default 0.01).
double calculate_gain(const Nonlinearity& nonlinearity, std::optional<double> param = std::nullopt);
/// (fan_in, fan_out) of a weight of 2 or more dims: (size(1), size(0)) times the receptive field.
std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor& tensor);

/// Fills with values from U(a, b).
Tensor uniform_(Tensor tensor, double a = 0.0, double b = 1.0);
/// Fills with values from N(mean, std^2).
Tensor normal_(Tensor tensor, double mean = 0.0, double std = 1.0);
/// Fills with `value`.
Tensor constant_(Tensor tensor, Scalar value);
/// Fills with 1.
Tensor ones_(Tensor tensor);
/// Fills with 0.
Tensor zeros_(Tensor tensor);
/// Identity matrix; 2-D tensors only.
Tensor eye_(Tensor tensor);
/// Glorot: U(-a, a) with a = gain * sqrt(6 / (fan_in + fan_out)).
Tensor xavier_uniform_(Tensor tensor, double gain = 1.0);
/// Glorot: N(0, std^2) with std = gain * sqrt(2 / (fan_in + fan_out)).
Tensor xavier_normal_(Tensor tensor, double gain = 1.0);
/// He: U(-bound, bound) with bound = gain(nonlinearity, a) * sqrt(3 / fan_mode).
Tensor kaiming_uniform_(Tensor tensor, double a = 0, const FanMode& mode = "fan_in",
                        const Nonlinearity& nonlinearity = "leaky_relu");
/// He: N(0, std^2) with std = gain(nonlinearity, a) / sqrt(fan_mode).
Tensor kaiming_normal_(Tensor tensor, double a = 0, const FanMode& mode = "fan_in",
                       const Nonlinearity& nonlinearity = "leaky_relu");
/// A (semi-)orthogonal matrix from the QR decomposition of a normal matrix, times gain.
Tensor orthogonal_(Tensor tensor, double gain = 1.0);
/// The Dirac delta of a 3-, 4- or 5-D convolution weight (each of `groups` groups keeps identity).
Tensor dirac_(Tensor tensor, int64_t groups = 1);
/// A 2-D tensor from N(0, std^2) with a fraction `sparsity` of each column's entries zeroed.
Tensor sparse_(Tensor tensor, double sparsity, double std = 0.01);

}  // namespace troupe::nn::init
