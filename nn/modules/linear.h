// Linear layers: Linear, Identity, Flatten, Unflatten (torch.nn.Linear, ...).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <troupe/nn/cloneable.h>
#include <troupe/nn/module.h>
#include <troupe/nn/options/linear.h>
#include <troupe/util/options.h>

namespace troupe::nn {

/// y = x W^T + b, with W (out_features, in_features) and b (out_features).
class Linear : public Cloneable<Linear> {
 public:
  explicit Linear(const LinearOptions& options);
  Linear(int64_t in_features, int64_t out_features, bool bias = true);

  /// Registers weight and bias (None when options.bias() is false), then reset_parameters().
  void reset() override;
  /// PyTorch's default: weight ~ kaiming_uniform_(a=sqrt(5)), bias ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
  void reset_parameters();

  /// (*, in_features) -> (*, out_features)
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  std::string name() const override { return "Linear"; }

  LinearOptions options;
  Tensor weight;
  /// Undefined when built with bias=false.
  Tensor bias;
};

/// Returns its input unchanged.
class Identity : public Cloneable<Identity> {
 public:
  /// Nothing to register.
  void reset() override {}
  Identity() = default;
  Tensor forward(const Tensor& input) override { return input; }
  std::string name() const override { return "Identity"; }
};

/// Flattens dims start_dim..end_dim into one.
class Flatten : public Cloneable<Flatten> {
 public:
  /// Nothing to register.
  void reset() override {}
  explicit Flatten(const FlattenOptions& options = {}) : options(options) {}
  explicit Flatten(int64_t start_dim, int64_t end_dim = -1)
      : options(FlattenOptions().start_dim(start_dim).end_dim(end_dim)) {}
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  std::string name() const override { return "Flatten"; }

  FlattenOptions options;
};

/// Splits dim into the shape unflattened_size (one entry may be -1).
class Unflatten : public Cloneable<Unflatten> {
 public:
  /// Nothing to register.
  void reset() override {}
  explicit Unflatten(const UnflattenOptions& options) : options(options) {}
  Unflatten(int64_t dim, std::vector<int64_t> unflattened_size)
      : options(UnflattenOptions(dim, std::move(unflattened_size))) {}
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  std::string name() const override { return "Unflatten"; }

  UnflattenOptions options;
};

}  // namespace troupe::nn
