// MaxPool2d and AvgPool2d (torch.nn.MaxPool2d / AvgPool2d): parameterless pooling layers.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <tuple>

#include <troupe/util/expanding_array.h>
#include <troupe/nn/cloneable.h>
#include <troupe/nn/module.h>
#include <troupe/nn/pimpl.h>
#include <troupe/nn/options/pooling.h>
#include <troupe/util/options.h>

namespace troupe::nn {

/// 2-D max pooling over (N, C, H, W) or (C, H, W) input.
class MaxPool2dImpl : public Cloneable<MaxPool2dImpl> {
 public:
  /// Nothing to register.
  void reset() override {}
  explicit MaxPool2dImpl(const MaxPool2dOptions& options);
  MaxPool2dImpl(ExpandingArray<2> kernel_size, std::optional<ExpandingArray<2>> stride = std::nullopt,
            ExpandingArray<2> padding = 0, ExpandingArray<2> dilation = 1, bool return_indices = false,
            bool ceil_mode = false);

  /// The pooled output (without the indices, whatever return_indices says).
  Tensor forward(const Tensor& input) override;
  /// (output, indices), as the module returns with return_indices.
  std::tuple<Tensor, Tensor> forward_with_indices(const Tensor& input);
  /// One tensor argument; returns a (output, indices) tuple when return_indices, else the output.
  Value forward_args(const Args& args, const Kwargs& kwargs) override;
  std::string extra_repr() const override;
  std::string name() const override { return "MaxPool2d"; }
  using Module::forward;
  using Module::operator();

  MaxPool2dOptions options;
};
TROUPE_MODULE(MaxPool2d);

/// 2-D average pooling over (N, C, H, W) or (C, H, W) input.
class AvgPool2dImpl : public Cloneable<AvgPool2dImpl> {
 public:
  /// Nothing to register.
  void reset() override {}
  explicit AvgPool2dImpl(const AvgPool2dOptions& options);
  AvgPool2dImpl(ExpandingArray<2> kernel_size, std::optional<ExpandingArray<2>> stride = std::nullopt,
            ExpandingArray<2> padding = 0, bool ceil_mode = false, bool count_include_pad = true,
            std::optional<int64_t> divisor_override = std::nullopt);

  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  std::string name() const override { return "AvgPool2d"; }

  AvgPool2dOptions options;
};
TROUPE_MODULE(AvgPool2d);

}  // namespace troupe::nn
