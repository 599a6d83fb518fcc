// Conv1d, Conv2d, ConvTranspose1d and ConvTranspose2d (torch.nn.Conv1d, ...): convolution layers with
// PyTorch's options, default initialisation and printed form. ConvNdImpl / ConvTransposeNdImpl hold what the
// 1-D and 2-D forms share (libtorch's ConvNdImpl).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <troupe/util/expanding_array.h>
#include <troupe/nn/functional/conv.h>
#include <troupe/nn/options/conv.h>
#include <troupe/nn/cloneable.h>
#include <troupe/nn/module.h>
#include <troupe/nn/pimpl.h>
#include <troupe/util/options.h>

namespace troupe::nn {

/// A D-dim convolution over (N, C_in, *spatial) or (C_in, *spatial) input (Conv1d, Conv2d).
template <size_t D, class Derived>
class ConvNdImpl : public Cloneable<Derived> {
 public:
  explicit ConvNdImpl(const ConvOptions<D>& options) : options(options) {}

  /// Registers weight (C_out, C_in/groups, *kernel_size) and bias (C_out) and initialises them.
  void reset() override;
  /// PyTorch's default: kaiming_uniform_(weight, a=sqrt(5)); bias ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
  void reset_parameters();
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;

  ConvOptions<D> options;
  Tensor weight;
  /// Undefined when options.bias() is false.
  Tensor bias;

 private:
  /// The padding for F.pad when padding_mode is not "zeros": (left, right) pairs from the last dim back.
  std::vector<int64_t> reversed_padding_repeated_twice_;
};

/// Applies a 1-D convolution over (N, C_in, L) or (C_in, L) input.
class Conv1dImpl : public ConvNdImpl<1, Conv1dImpl> {
 public:
  explicit Conv1dImpl(const Conv1dOptions& options);
  Conv1dImpl(int64_t in_channels, int64_t out_channels, ExpandingArray<1> kernel_size, ExpandingArray<1> stride = 1,
             Conv1dPadding padding = 0, ExpandingArray<1> dilation = 1, int64_t groups = 1, bool bias = true,
             std::string padding_mode = "zeros");
  std::string name() const override { return "Conv1d"; }
};
TROUPE_MODULE(Conv1d);

/// Applies a 2-D convolution over (N, C_in, H, W) or (C_in, H, W) input.
class Conv2dImpl : public ConvNdImpl<2, Conv2dImpl> {
 public:
  explicit Conv2dImpl(const Conv2dOptions& options);
  Conv2dImpl(int64_t in_channels, int64_t out_channels, ExpandingArray<2> kernel_size, ExpandingArray<2> stride = 1,
             Conv2dPadding padding = 0, ExpandingArray<2> dilation = 1, int64_t groups = 1, bool bias = true,
             std::string padding_mode = "zeros");
  std::string name() const override { return "Conv2d"; }
};
TROUPE_MODULE(Conv2d);

/// A D-dim transposed convolution over (N, C_in, *spatial) or (C_in, *spatial) input (ConvTranspose1d / 2d).
template <size_t D, class Derived>
class ConvTransposeNdImpl : public Cloneable<Derived> {
 public:
  explicit ConvTransposeNdImpl(const ConvTransposeOptions<D>& options) : options(options) {}

  /// Registers weight (C_in, C_out/groups, *kernel_size) and bias (C_out) and initialises them.
  void reset() override;
  /// As Conv2d's: kaiming_uniform_(weight, a=sqrt(5)) with fan_in = C_out/groups * prod(kernel_size); bias
  /// ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
  void reset_parameters();
  /// The output with options.output_padding().
  Tensor forward(const Tensor& input) override;
  /// The output of the requested spatial size (D sizes, or the full D + 1 / D + 2 shape): picks the
  /// output_padding that gives it, between the smallest size and the smallest + stride - 1 (PyTorch's
  /// forward(input, output_size)); an empty output_size is forward(input).
  Tensor forward(const Tensor& input, IntArrayRef output_size);
  /// One tensor argument.
  Value forward_args(const Args& args, const Kwargs& kwargs) override;
  std::string extra_repr() const override;
  using Module::operator();

  ConvTransposeOptions<D> options;
  Tensor weight;
  /// Undefined when options.bias() is false.
  Tensor bias;
};

/// Applies a 1-D transposed convolution over (N, C_in, L) or (C_in, L) input.
class ConvTranspose1dImpl : public ConvTransposeNdImpl<1, ConvTranspose1dImpl> {
 public:
  explicit ConvTranspose1dImpl(const ConvTranspose1dOptions& options);
  ConvTranspose1dImpl(int64_t in_channels, int64_t out_channels, ExpandingArray<1> kernel_size,
                      ExpandingArray<1> stride = 1, ExpandingArray<1> padding = 0, ExpandingArray<1> output_padding = 0,
                      int64_t groups = 1, bool bias = true, ExpandingArray<1> dilation = 1);
  std::string name() const override { return "ConvTranspose1d"; }
};
TROUPE_MODULE(ConvTranspose1d);

/// Applies a 2-D transposed convolution over (N, C_in, H, W) or (C_in, H, W) input.
class ConvTranspose2dImpl : public ConvTransposeNdImpl<2, ConvTranspose2dImpl> {
 public:
  explicit ConvTranspose2dImpl(const ConvTranspose2dOptions& options);
  ConvTranspose2dImpl(int64_t in_channels, int64_t out_channels, ExpandingArray<2> kernel_size,
                      ExpandingArray<2> stride = 1, ExpandingArray<2> padding = 0, ExpandingArray<2> output_padding = 0,
                      int64_t groups = 1, bool bias = true, ExpandingArray<2> dilation = 1);
  std::string name() const override { return "ConvTranspose2d"; }
};
TROUPE_MODULE(ConvTranspose2d);

}  // namespace troupe::nn
