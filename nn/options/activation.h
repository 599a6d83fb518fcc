// Options of the activations, as libtorch's torch/nn/options/activation.h: the modules' structs
// (ReLUOptions, ...) and, under nn::functional, the functional names: aliases of the modules' structs
// (ReLUFuncOptions = ReLUOptions, ...) except SoftmaxFuncOptions / LogSoftmaxFuncOptions, which carry a dtype.
//
//   F::leaky_relu(x, F::LeakyReLUFuncOptions().negative_slope(0.1));  F::softmax(x, F::SoftmaxFuncOptions(1));
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <troupe/tensor/tensor.h>
#include <troupe/util/options.h>

namespace troupe::nn {

/// Options of ReLU.
struct ReLUOptions {
  ReLUOptions(bool inplace = false) : inplace_(inplace) {}
  TROUPE_ARG(bool, inplace);
};

/// Options of LeakyReLU.
struct LeakyReLUOptions {
  TROUPE_ARG(double, negative_slope) = 1e-2;
  TROUPE_ARG(bool, inplace) = false;
};

/// Options of ELU.
struct ELUOptions {
  TROUPE_ARG(double, alpha) = 1.0;
  TROUPE_ARG(bool, inplace) = false;
};

/// Options of Softplus: log(1 + exp(beta * x)) / beta, x itself where beta * x > threshold.
struct SoftplusOptions {
  TROUPE_ARG(double, beta) = 1.0;
  TROUPE_ARG(double, threshold) = 20.0;
};

/// Options of Hardtanh: x clamped to [min_val, max_val].
struct HardtanhOptions {
  TROUPE_ARG(double, min_val) = -1.0;
  TROUPE_ARG(double, max_val) = 1.0;
  TROUPE_ARG(bool, inplace) = false;
};

/// Options of PReLU: num_parameters slopes (1, or the number of channels) initialised to `init`.
struct PReLUOptions {
  TROUPE_ARG(int64_t, num_parameters) = 1;
  TROUPE_ARG(double, init) = 0.25;
  TROUPE_ARG(Device, device) = Device(kCPU);
  TROUPE_ARG(std::optional<ScalarType>, dtype);
};

/// Options of GELU ("none": exact erf form; "tanh": the tanh approximation).
struct GELUOptions {
  GELUOptions(std::string approximate = "none") : approximate_(std::move(approximate)) {}
  GELUOptions(const char* approximate) : approximate_(approximate) {}
  TROUPE_ARG(std::string, approximate);
};

/// Options of SiLU.
struct SiLUOptions {
  SiLUOptions(bool inplace = false) : inplace_(inplace) {}
  TROUPE_ARG(bool, inplace);
};

/// Options of Softmax (dim nullopt: PyTorch's deprecated implicit choice, see F::softmax).
struct SoftmaxOptions {
  SoftmaxOptions(std::optional<int64_t> dim = std::nullopt) : dim_(dim) {}
  SoftmaxOptions(int64_t dim) : dim_(dim) {}
  SoftmaxOptions(int dim) : dim_(dim) {}
  TROUPE_ARG(std::optional<int64_t>, dim);
};

/// Options of LogSoftmax (dim as for Softmax).
struct LogSoftmaxOptions {
  LogSoftmaxOptions(std::optional<int64_t> dim = std::nullopt) : dim_(dim) {}
  LogSoftmaxOptions(int64_t dim) : dim_(dim) {}
  LogSoftmaxOptions(int dim) : dim_(dim) {}
  TROUPE_ARG(std::optional<int64_t>, dim);
};

namespace functional {
using ReLUFuncOptions = ReLUOptions;
using LeakyReLUFuncOptions = LeakyReLUOptions;
using ELUFuncOptions = ELUOptions;
using SoftplusFuncOptions = SoftplusOptions;
using HardtanhFuncOptions = HardtanhOptions;
using GELUFuncOptions = GELUOptions;
/// libtorch's F::silu takes no options; troupe's takes SiLU's (inplace), as Python's F.silu does.
using SiLUFuncOptions = SiLUOptions;

/// Options of F::softmax: the dim (nullopt: PyTorch's deprecated implicit choice) and the dtype the input
/// is cast to first.
struct SoftmaxFuncOptions {
  SoftmaxFuncOptions(std::optional<int64_t> dim) : dim_(dim) {}
  SoftmaxFuncOptions(int64_t dim) : dim_(dim) {}
  SoftmaxFuncOptions(int dim) : dim_(dim) {}
  TROUPE_ARG(std::optional<int64_t>, dim);
  TROUPE_ARG(std::optional<ScalarType>, dtype);
};

/// Options of F::log_softmax, as SoftmaxFuncOptions.
struct LogSoftmaxFuncOptions {
  LogSoftmaxFuncOptions(std::optional<int64_t> dim) : dim_(dim) {}
  LogSoftmaxFuncOptions(int64_t dim) : dim_(dim) {}
  LogSoftmaxFuncOptions(int dim) : dim_(dim) {}
  TROUPE_ARG(std::optional<int64_t>, dim);
  TROUPE_ARG(std::optional<ScalarType>, dtype);
};
}  // namespace functional

}  // namespace troupe::nn
