// Conv2d (torch.nn.Conv2d): 2-D convolution layer with PyTorch's options, default initialisation and
// printed form.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <troupe/util/expanding_array.h>
#include <troupe/nn/functional/conv.h>
#include <troupe/nn/options/conv.h>
#include <troupe/nn/cloneable.h>
#include <troupe/nn/module.h>
#include <troupe/nn/pimpl.h>
#include <troupe/util/options.h>

namespace troupe::nn {

/// Applies a 2-D convolution over (N, C_in, H, W) or (C_in, H, W) input.
class Conv2dImpl : public Cloneable<Conv2dImpl> {
 public:
  explicit Conv2dImpl(const Conv2dOptions& options);
  Conv2dImpl(int64_t in_channels, int64_t out_channels, ExpandingArray<2> kernel_size, ExpandingArray<2> stride = 1,
         Conv2dPadding padding = 0, ExpandingArray<2> dilation = 1, int64_t groups = 1, bool bias = true,
         std::string padding_mode = "zeros");

  /// Registers weight (C_out, C_in/groups, kH, kW) and bias (C_out) and initialises them.
  void reset() override;
  /// PyTorch's default: kaiming_uniform_(weight, a=sqrt(5)); bias ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
  void reset_parameters();
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  std::string name() const override { return "Conv2d"; }

  Conv2dOptions options;
  Tensor weight;
  /// Undefined when options.bias() is false.
  Tensor bias;

 private:
  /// The padding for F.pad when padding_mode is not "zeros": (left, right, top, bottom).
  std::array<int64_t, 4> reversed_padding_repeated_twice_{};
};
TROUPE_MODULE(Conv2d);

}  // namespace troupe::nn
