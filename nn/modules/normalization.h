// LayerNorm and GroupNorm (torch.nn.LayerNorm / GroupNorm): normalisation over the trailing dims or over groups
// of channels, with an elementwise / per-channel affine map.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <troupe/nn/cloneable.h>
#include <troupe/nn/module.h>
#include <troupe/nn/pimpl.h>
#include <troupe/nn/options/normalization.h>
#include <troupe/util/options.h>

namespace troupe::nn {

/// Applies layer normalisation over the last len(normalized_shape) dims of the input.
class LayerNormImpl : public Cloneable<LayerNormImpl> {
 public:
  explicit LayerNormImpl(const LayerNormOptions& options);
  LayerNormImpl(std::vector<int64_t> normalized_shape, double eps = 1e-5, bool elementwise_affine = true);
  /// One trailing dim of this size (PyTorch's LayerNorm(4)).
  LayerNormImpl(int64_t normalized_shape, double eps = 1e-5, bool elementwise_affine = true);

  /// Registers weight and bias (None without elementwise_affine) and initialises them.
  void reset() override;
  /// weight = ones, bias = zeros.
  void reset_parameters();
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  std::string name() const override { return "LayerNorm"; }

  LayerNormOptions options;
  Tensor weight;
  Tensor bias;
};
TROUPE_MODULE(LayerNorm);

/// Applies group normalisation over (N, C, *) input: the channels in num_groups groups.
class GroupNormImpl : public Cloneable<GroupNormImpl> {
 public:
  explicit GroupNormImpl(const GroupNormOptions& options);
  GroupNormImpl(int64_t num_groups, int64_t num_channels, double eps = 1e-5, bool affine = true);

  /// Registers weight and bias (C elements; None without affine) and initialises them.
  void reset() override;
  /// weight = ones, bias = zeros.
  void reset_parameters();
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  std::string name() const override { return "GroupNorm"; }

  GroupNormOptions options;
  Tensor weight;
  Tensor bias;
};
TROUPE_MODULE(GroupNorm);

}  // namespace troupe::nn
