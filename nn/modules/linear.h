// Linear layers: Linear, Identity, Flatten, Unflatten (torch.nn.Linear, ...).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <troupe/nn/cloneable.h>
#include <troupe/nn/module.h>
#include <troupe/nn/pimpl.h>
#include <troupe/nn/options/linear.h>
#include <troupe/util/options.h>

namespace troupe::nn {

/// y = x W^T + b, with W (out_features, in_features) and b (out_features).
class LinearImpl : public Cloneable<LinearImpl> {
 public:
  explicit LinearImpl(const LinearOptions& options);
  LinearImpl(int64_t in_features, int64_t out_features, bool bias = true);

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
TROUPE_MODULE(Linear);

/// Returns its input unchanged.
class IdentityImpl : public Cloneable<IdentityImpl> {
 public:
  /// Nothing to register.
  void reset() override {}
  IdentityImpl() = default;
  Tensor forward(const Tensor& input) override { return input; }
  std::string name() const override { return "Identity"; }
};
TROUPE_MODULE(Identity);

/// Flattens dims start_dim..end_dim into one.
class FlattenImpl : public Cloneable<FlattenImpl> {
 public:
  /// Nothing to register.
  void reset() override {}
  explicit FlattenImpl(const FlattenOptions& options = {}) : options(options) {}
  explicit FlattenImpl(int64_t start_dim, int64_t end_dim = -1)
      : options(FlattenOptions().start_dim(start_dim).end_dim(end_dim)) {}
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  std::string name() const override { return "Flatten"; }

  FlattenOptions options;
};
TROUPE_MODULE(Flatten);

/// Splits dim into the shape unflattened_size (one entry may be -1).
class UnflattenImpl : public Cloneable<UnflattenImpl> {
 public:
  /// Nothing to register.
  void reset() override {}
  explicit UnflattenImpl(const UnflattenOptions& options) : options(options) {}
  UnflattenImpl(int64_t dim, std::vector<int64_t> unflattened_size)
      : options(UnflattenOptions(dim, std::move(unflattened_size))) {}
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  std::string name() const override { return "Unflatten"; }

  UnflattenOptions options;
};
TROUPE_MODULE(Unflatten);

}  // namespace troupe::nn
