// Activation modules: ReLU, LeakyReLU, ELU, GELU, SiLU, Tanh, Sigmoid, Softmax, LogSoftmax
// (torch.nn.ReLU, ...), each a thin wrapper of its nn::functional form.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <troupe/nn/cloneable.h>
#include <troupe/nn/module.h>
#include <troupe/nn/options/activation.h>
#include <troupe/util/options.h>

namespace troupe::nn {

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
