// Activation modules: ReLU, LeakyReLU, ELU, Softplus, Hardtanh, Mish, PReLU, GELU, SiLU, Tanh, Sigmoid,
// Softmax, LogSoftmax (torch.nn.ReLU, ...), each a thin wrapper of its nn::functional form (PReLU holds its
// slopes as a parameter).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <troupe/nn/cloneable.h>
#include <troupe/nn/module.h>
#include <troupe/nn/pimpl.h>
#include <troupe/nn/options/activation.h>
#include <troupe/util/options.h>

namespace troupe::nn {

/// max(0, x).
class ReLUImpl : public Cloneable<ReLUImpl> {
 public:
  /// Nothing to register.
  void reset() override {}
  explicit ReLUImpl(const ReLUOptions& options = {}) : options(options) {}
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  std::string name() const override { return "ReLU"; }
  ReLUOptions options;
};
TROUPE_MODULE(ReLU);

/// x for x >= 0, negative_slope * x otherwise.
class LeakyReLUImpl : public Cloneable<LeakyReLUImpl> {
 public:
  /// Nothing to register.
  void reset() override {}
  explicit LeakyReLUImpl(const LeakyReLUOptions& options = {}) : options(options) {}
  explicit LeakyReLUImpl(double negative_slope, bool inplace = false)
      : options(LeakyReLUOptions().negative_slope(negative_slope).inplace(inplace)) {}
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  std::string name() const override { return "LeakyReLU"; }
  LeakyReLUOptions options;
};
TROUPE_MODULE(LeakyReLU);

/// x for x > 0, alpha * (exp(x) - 1) otherwise.
class ELUImpl : public Cloneable<ELUImpl> {
 public:
  /// Nothing to register.
  void reset() override {}
  explicit ELUImpl(const ELUOptions& options = {}) : options(options) {}
  explicit ELUImpl(double alpha, bool inplace = false) : options(ELUOptions().alpha(alpha).inplace(inplace)) {}
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  std::string name() const override { return "ELU"; }
  ELUOptions options;
};
TROUPE_MODULE(ELU);

/// log(1 + exp(beta * x)) / beta, x where beta * x > threshold.
class SoftplusImpl : public Cloneable<SoftplusImpl> {
 public:
  /// Nothing to register.
  void reset() override {}
  explicit SoftplusImpl(const SoftplusOptions& options = {}) : options(options) {}
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  std::string name() const override { return "Softplus"; }
  SoftplusOptions options;
};
TROUPE_MODULE(Softplus);

/// x clamped to [min_val, max_val].
class HardtanhImpl : public Cloneable<HardtanhImpl> {
 public:
  /// Nothing to register; checks min_val <= max_val.
  void reset() override;
  explicit HardtanhImpl(const HardtanhOptions& options = {}) : options(options) { reset(); }
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  std::string name() const override { return "Hardtanh"; }
  HardtanhOptions options;
};
TROUPE_MODULE(Hardtanh);

/// x * tanh(softplus(x)).
class MishImpl : public Cloneable<MishImpl> {
 public:
  /// Nothing to register.
  void reset() override {}
  Tensor forward(const Tensor& input) override;
  std::string name() const override { return "Mish"; }
};
TROUPE_MODULE(Mish);

/// x for x > 0, weight * x otherwise, with learnable slopes (one, or one per channel).
class PReLUImpl : public Cloneable<PReLUImpl> {
 public:
  explicit PReLUImpl(const PReLUOptions& options = {});
  /// Registers weight (num_parameters) and initialises it.
  void reset() override;
  /// weight = init (no random numbers drawn).
  void reset_parameters();
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  std::string name() const override { return "PReLU"; }
  PReLUOptions options;
  Tensor weight;
};
TROUPE_MODULE(PReLU);

/// x * Phi(x).
class GELUImpl : public Cloneable<GELUImpl> {
 public:
  /// Nothing to register.
  void reset() override {}
  explicit GELUImpl(const GELUOptions& options = {}) : options(options) {}
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  std::string name() const override { return "GELU"; }
  GELUOptions options;
};
TROUPE_MODULE(GELU);

/// x * sigmoid(x).
class SiLUImpl : public Cloneable<SiLUImpl> {
 public:
  /// Nothing to register.
  void reset() override {}
  explicit SiLUImpl(const SiLUOptions& options = {}) : options(options) {}
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  std::string name() const override { return "SiLU"; }
  SiLUOptions options;
};
TROUPE_MODULE(SiLU);

/// tanh(x).
class TanhImpl : public Cloneable<TanhImpl> {
 public:
  /// Nothing to register.
  void reset() override {}
  Tensor forward(const Tensor& input) override;
  std::string name() const override { return "Tanh"; }
};
TROUPE_MODULE(Tanh);

/// 1 / (1 + exp(-x)).
class SigmoidImpl : public Cloneable<SigmoidImpl> {
 public:
  /// Nothing to register.
  void reset() override {}
  Tensor forward(const Tensor& input) override;
  std::string name() const override { return "Sigmoid"; }
};
TROUPE_MODULE(Sigmoid);

/// exp(x) / sum(exp(x)) along dim.
class SoftmaxImpl : public Cloneable<SoftmaxImpl> {
 public:
  /// Nothing to register.
  void reset() override {}
  explicit SoftmaxImpl(const SoftmaxOptions& options = {}) : options(options) {}
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  std::string name() const override { return "Softmax"; }
  SoftmaxOptions options;
};
TROUPE_MODULE(Softmax);

/// log(softmax(x)) along dim.
class LogSoftmaxImpl : public Cloneable<LogSoftmaxImpl> {
 public:
  /// Nothing to register.
  void reset() override {}
  explicit LogSoftmaxImpl(const LogSoftmaxOptions& options = {}) : options(options) {}
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  std::string name() const override { return "LogSoftmax"; }
  LogSoftmaxOptions options;
};
TROUPE_MODULE(LogSoftmax);

}  // namespace troupe::nn
