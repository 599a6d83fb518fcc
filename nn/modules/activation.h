// Activation modules: ReLU, LeakyReLU, ELU, GELU, SiLU, Tanh, Sigmoid, Softmax, LogSoftmax
// (torch.nn.ReLU, ...), each a thin wrapper of its nn::functional form.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <troupe/nn/cloneable.h>
#include <troupe/nn/module.h>
#include <troupe/util/options.h>

namespace troupe::nn {

/// Options of ReLU.
struct ReLUOptions {
  ReLUOptions(bool inplace = false) : inplace_(inplace) {}
  TROUPE_ARG(bool, inplace);
};

/// max(0, x).
class ReLU : public Cloneable<ReLU> {
 public:
  /// Nothing to register.
  void reset() override {}
  explicit ReLU(const ReLUOptions& options = {}) : options(options) {}
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  std::string name() const override { return "ReLU"; }
  ReLUOptions options;
};

/// Options of LeakyReLU.
struct LeakyReLUOptions {
  TROUPE_ARG(double, negative_slope) = 1e-2;
  TROUPE_ARG(bool, inplace) = false;
};

/// x for x >= 0, negative_slope * x otherwise.
class LeakyReLU : public Cloneable<LeakyReLU> {
 public:
  /// Nothing to register.
  void reset() override {}
  explicit LeakyReLU(const LeakyReLUOptions& options = {}) : options(options) {}
  explicit LeakyReLU(double negative_slope, bool inplace = false)
      : options(LeakyReLUOptions().negative_slope(negative_slope).inplace(inplace)) {}
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  std::string name() const override { return "LeakyReLU"; }
  LeakyReLUOptions options;
};

/// Options of ELU.
struct ELUOptions {
  TROUPE_ARG(double, alpha) = 1.0;
  TROUPE_ARG(bool, inplace) = false;
};

/// x for x > 0, alpha * (exp(x) - 1) otherwise.
class ELU : public Cloneable<ELU> {
 public:
  /// Nothing to register.
  void reset() override {}
  explicit ELU(const ELUOptions& options = {}) : options(options) {}
  explicit ELU(double alpha, bool inplace = false) : options(ELUOptions().alpha(alpha).inplace(inplace)) {}
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  std::string name() const override { return "ELU"; }
  ELUOptions options;
};

/// Options of GELU ("none": exact erf form; "tanh": the tanh approximation).
struct GELUOptions {
  GELUOptions(std::string approximate = "none") : approximate_(std::move(approximate)) {}
  GELUOptions(const char* approximate) : approximate_(approximate) {}
  TROUPE_ARG(std::string, approximate);
};

/// x * Phi(x).
class GELU : public Cloneable<GELU> {
 public:
  /// Nothing to register.
  void reset() override {}
  explicit GELU(const GELUOptions& options = {}) : options(options) {}
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  std::string name() const override { return "GELU"; }
  GELUOptions options;
};

/// Options of SiLU.
struct SiLUOptions {
  SiLUOptions(bool inplace = false) : inplace_(inplace) {}
  TROUPE_ARG(bool, inplace);
};

/// x * sigmoid(x).
class SiLU : public Cloneable<SiLU> {
 public:
  /// Nothing to register.
  void reset() override {}
  explicit SiLU(const SiLUOptions& options = {}) : options(options) {}
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  std::string name() const override { return "SiLU"; }
  SiLUOptions options;
};

/// tanh(x).
class Tanh : public Cloneable<Tanh> {
 public:
  /// Nothing to register.
  void reset() override {}
  Tensor forward(const Tensor& input) override;
  std::string name() const override { return "Tanh"; }
};

/// 1 / (1 + exp(-x)).
class Sigmoid : public Cloneable<Sigmoid> {
 public:
  /// Nothing to register.
  void reset() override {}
  Tensor forward(const Tensor& input) override;
  std::string name() const override { return "Sigmoid"; }
};

/// Options of Softmax (dim nullopt: PyTorch's deprecated implicit choice, see F::softmax).
struct SoftmaxOptions {
  SoftmaxOptions(std::optional<int64_t> dim = std::nullopt) : dim_(dim) {}
  SoftmaxOptions(int64_t dim) : dim_(dim) {}
  SoftmaxOptions(int dim) : dim_(dim) {}
  TROUPE_ARG(std::optional<int64_t>, dim);
};

/// exp(x) / sum(exp(x)) along dim.
class Softmax : public Cloneable<Softmax> {
 public:
  /// Nothing to register.
  void reset() override {}
  explicit Softmax(const SoftmaxOptions& options = {}) : options(options) {}
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  std::string name() const override { return "Softmax"; }
  SoftmaxOptions options;
};

/// Options of LogSoftmax (dim as for Softmax).
struct LogSoftmaxOptions {
  LogSoftmaxOptions(std::optional<int64_t> dim = std::nullopt) : dim_(dim) {}
  LogSoftmaxOptions(int64_t dim) : dim_(dim) {}
  LogSoftmaxOptions(int dim) : dim_(dim) {}
  TROUPE_ARG(std::optional<int64_t>, dim);
};

/// log(softmax(x)) along dim.
class LogSoftmax : public Cloneable<LogSoftmax> {
 public:
  /// Nothing to register.
  void reset() override {}
  explicit LogSoftmax(const LogSoftmaxOptions& options = {}) : options(options) {}
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  std::string name() const override { return "LogSoftmax"; }
  LogSoftmaxOptions options;
};

}  // namespace troupe::nn
