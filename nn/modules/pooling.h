// MaxPool1d/2d, AvgPool1d/2d, AdaptiveAvgPool1d/2d and AdaptiveMaxPool1d/2d (torch.nn.MaxPool2d, ...):
// parameterless pooling layers.
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

/// 1-D max pooling over (N, C, L) or (C, L) input.
class MaxPool1dImpl : public Cloneable<MaxPool1dImpl> {
 public:
  /// Nothing to register.
  void reset() override {}
  explicit MaxPool1dImpl(const MaxPool1dOptions& options) : options(options) {}
  MaxPool1dImpl(ExpandingArray<1> kernel_size, std::optional<ExpandingArray<1>> stride = std::nullopt,
                ExpandingArray<1> padding = 0, ExpandingArray<1> dilation = 1, bool return_indices = false,
                bool ceil_mode = false);

  /// The pooled output (without the indices, whatever return_indices says).
  Tensor forward(const Tensor& input) override;
  /// (output, indices), as the module returns with return_indices.
  std::tuple<Tensor, Tensor> forward_with_indices(const Tensor& input);
  /// One tensor argument; returns a (output, indices) tuple when return_indices, else the output.
  Value forward_args(const Args& args, const Kwargs& kwargs) override;
  std::string extra_repr() const override;
  std::string name() const override { return "MaxPool1d"; }
  using Module::forward;
  using Module::operator();

  MaxPool1dOptions options;
};
TROUPE_MODULE(MaxPool1d);

/// 1-D average pooling over (N, C, L) or (C, L) input.
class AvgPool1dImpl : public Cloneable<AvgPool1dImpl> {
 public:
  /// Nothing to register.
  void reset() override {}
  explicit AvgPool1dImpl(const AvgPool1dOptions& options) : options(options) {}
  AvgPool1dImpl(ExpandingArray<1> kernel_size, std::optional<ExpandingArray<1>> stride = std::nullopt,
                ExpandingArray<1> padding = 0, bool ceil_mode = false, bool count_include_pad = true);

  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  std::string name() const override { return "AvgPool1d"; }

  AvgPool1dOptions options;
};
TROUPE_MODULE(AvgPool1d);

/// Average pooling to a fixed output size over (N, C, L) or (C, L) input.
class AdaptiveAvgPool1dImpl : public Cloneable<AdaptiveAvgPool1dImpl> {
 public:
  /// Nothing to register.
  void reset() override {}
  explicit AdaptiveAvgPool1dImpl(const AdaptiveAvgPool1dOptions& options) : options(options) {}
  explicit AdaptiveAvgPool1dImpl(ExpandingArray<1> output_size) : options(output_size) {}
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  std::string name() const override { return "AdaptiveAvgPool1d"; }

  AdaptiveAvgPool1dOptions options;
};
TROUPE_MODULE(AdaptiveAvgPool1d);

/// Average pooling to a fixed output size over (N, C, H, W) or (C, H, W) input.
class AdaptiveAvgPool2dImpl : public Cloneable<AdaptiveAvgPool2dImpl> {
 public:
  /// Nothing to register.
  void reset() override {}
  explicit AdaptiveAvgPool2dImpl(const AdaptiveAvgPool2dOptions& options) : options(options) {}
  explicit AdaptiveAvgPool2dImpl(ExpandingArrayWithOptional<2> output_size) : options(output_size) {}
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  std::string name() const override { return "AdaptiveAvgPool2d"; }

  AdaptiveAvgPool2dOptions options;
};
TROUPE_MODULE(AdaptiveAvgPool2d);

/// Max pooling to a fixed output size over (N, C, L) or (C, L) input.
class AdaptiveMaxPool1dImpl : public Cloneable<AdaptiveMaxPool1dImpl> {
 public:
  /// Nothing to register.
  void reset() override {}
  explicit AdaptiveMaxPool1dImpl(const AdaptiveMaxPool1dOptions& options) : options(options) {}
  explicit AdaptiveMaxPool1dImpl(ExpandingArray<1> output_size) : options(output_size) {}
  /// The pooled output (without the indices, whatever return_indices says).
  Tensor forward(const Tensor& input) override;
  /// (output, indices), as the module returns with return_indices.
  std::tuple<Tensor, Tensor> forward_with_indices(const Tensor& input);
  /// One tensor argument; returns a (output, indices) tuple when return_indices, else the output.
  Value forward_args(const Args& args, const Kwargs& kwargs) override;
  std::string extra_repr() const override;
  std::string name() const override { return "AdaptiveMaxPool1d"; }
  using Module::forward;
  using Module::operator();

  AdaptiveMaxPool1dOptions options;
};
TROUPE_MODULE(AdaptiveMaxPool1d);

/// Max pooling to a fixed output size over (N, C, H, W) or (C, H, W) input.
class AdaptiveMaxPool2dImpl : public Cloneable<AdaptiveMaxPool2dImpl> {
 public:
  /// Nothing to register.
  void reset() override {}
  explicit AdaptiveMaxPool2dImpl(const AdaptiveMaxPool2dOptions& options) : options(options) {}
  explicit AdaptiveMaxPool2dImpl(ExpandingArrayWithOptional<2> output_size) : options(output_size) {}
  /// The pooled output (without the indices, whatever return_indices says).
  Tensor forward(const Tensor& input) override;
  /// (output, indices), as the module returns with return_indices.
  std::tuple<Tensor, Tensor> forward_with_indices(const Tensor& input);
  /// One tensor argument; returns a (output, indices) tuple when return_indices, else the output.
  Value forward_args(const Args& args, const Kwargs& kwargs) override;
  std::string extra_repr() const override;
  std::string name() const override { return "AdaptiveMaxPool2d"; }
  using Module::forward;
  using Module::operator();

  AdaptiveMaxPool2dOptions options;
};
TROUPE_MODULE(AdaptiveMaxPool2d);

}  // namespace troupe::nn
