// Options of convolution and padding, as libtorch's torch/nn/options/conv.h and padding.h: ConvPadding<D>
// (ints or "valid" / "same"), the modules' Conv1d/2dOptions and ConvTranspose1d/2dOptions, and the functionals'
// own Conv1d/2dFuncOptions, ConvTranspose1d/2dFuncOptions and PadFuncOptions.
//
//   F::conv2d(x, w, F::Conv2dFuncOptions().stride(2).padding(1));
//   F::pad(x, F::PadFuncOptions({1, 1, 2, 0}).mode(troupe::kReflect));
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include <troupe/tensor/tensor.h>
#include <troupe/util/enum.h>
#include <troupe/util/expanding_array.h>
#include <troupe/util/options.h>

namespace troupe::nn {

/// The padding of a D-dim convolution: one int, D ints, or "valid" / "same" (troupe::kValid / kSame).
template <size_t D>
class ConvPadding {
 public:
  ConvPadding(int p) : ints_(static_cast<int64_t>(p)) {}
  ConvPadding(int64_t p) : ints_(p) {}
  ConvPadding(std::initializer_list<int64_t> p) : ints_(p) {}
  ConvPadding(const std::vector<int64_t>& p) : ints_(p) {}
  ConvPadding(IntArrayRef p) : ints_(p) {}
  ConvPadding(ExpandingArray<D> p) : ints_(p) {}
  ConvPadding(enumtype::kValid) : ints_(0), mode_("valid") {}
  ConvPadding(enumtype::kSame) : ints_(0), mode_("same") {}
  ConvPadding(const char* mode) : ints_(0), mode_(mode) {}
  ConvPadding(std::string mode) : ints_(0), mode_(std::move(mode)) {}

  /// True for "valid" / "same" (or any other string, which the conv rejects).
  bool is_string() const { return !mode_.empty(); }
  /// The string form ("" for int padding).
  const std::string& mode() const { return mode_; }
  /// The int padding (0 for a string).
  const ExpandingArray<D>& ints() const { return ints_; }
  /// As the conv's extra_repr prints it: "same" or "(1, 1)".
  std::string str() const { return is_string() ? mode_ : ints_.tuple_str(); }

 private:
  ExpandingArray<D> ints_;
  std::string mode_;
};
using Conv1dPadding = ConvPadding<1>;
using Conv2dPadding = ConvPadding<2>;

/// Options of Conv1d / Conv2d: `Conv2dOptions(3, 16, 3).stride(2).padding(1).bias(false)`.
template <size_t D>
struct ConvOptions {
  ConvOptions(int64_t in_channels, int64_t out_channels, ExpandingArray<D> kernel_size)
      : in_channels_(in_channels), out_channels_(out_channels), kernel_size_(kernel_size) {}
  TROUPE_ARG(int64_t, in_channels);
  TROUPE_ARG(int64_t, out_channels);
  TROUPE_ARG(ExpandingArray<D>, kernel_size);
  TROUPE_ARG(ExpandingArray<D>, stride) = 1;
  /// ints, or "valid" / "same" (stride 1 only).
  TROUPE_ARG(ConvPadding<D>, padding) = 0;
  TROUPE_ARG(ExpandingArray<D>, dilation) = 1;
  TROUPE_ARG(int64_t, groups) = 1;
  TROUPE_ARG(bool, bias) = true;
  /// "zeros", "reflect", "replicate" or "circular" (or troupe::kZeros, kReflect, ...).
  TROUPE_ARG(std::string, padding_mode) = "zeros";
  TROUPE_ARG(Device, device) = Device(kCPU);
  TROUPE_ARG(std::optional<ScalarType>, dtype);
};
using Conv1dOptions = ConvOptions<1>;
using Conv2dOptions = ConvOptions<2>;

/// Options of ConvTranspose1d / ConvTranspose2d: `ConvTranspose2dOptions(16, 8, 3).stride(2).output_padding(1)`.
template <size_t D>
struct ConvTransposeOptions {
  ConvTransposeOptions(int64_t in_channels, int64_t out_channels, ExpandingArray<D> kernel_size)
      : in_channels_(in_channels), out_channels_(out_channels), kernel_size_(kernel_size) {}
  TROUPE_ARG(int64_t, in_channels);
  TROUPE_ARG(int64_t, out_channels);
  TROUPE_ARG(ExpandingArray<D>, kernel_size);
  TROUPE_ARG(ExpandingArray<D>, stride) = 1;
  /// dilation * (kernel_size - 1) - padding zeros are (in effect) added to both sides of the input.
  TROUPE_ARG(ExpandingArray<D>, padding) = 0;
  /// Extra size added to one side of the output (smaller than stride or dilation).
  TROUPE_ARG(ExpandingArray<D>, output_padding) = 0;
  TROUPE_ARG(int64_t, groups) = 1;
  TROUPE_ARG(bool, bias) = true;
  TROUPE_ARG(ExpandingArray<D>, dilation) = 1;
  /// Only "zeros" (troupe::kZeros) is supported, as in PyTorch.
  TROUPE_ARG(std::string, padding_mode) = "zeros";
  TROUPE_ARG(Device, device) = Device(kCPU);
  TROUPE_ARG(std::optional<ScalarType>, dtype);
};
using ConvTranspose1dOptions = ConvTransposeOptions<1>;
using ConvTranspose2dOptions = ConvTransposeOptions<2>;

namespace functional {
/// Options of F::conv1d / F::conv2d: the bias (C_out, or undefined) and the geometry of ConvOptions.
template <size_t D>
struct ConvFuncOptions {
  TROUPE_ARG(Tensor, bias);
  TROUPE_ARG(ExpandingArray<D>, stride) = 1;
  /// ints, or "valid" / "same" (stride 1 only).
  TROUPE_ARG(ConvPadding<D>, padding) = 0;
  TROUPE_ARG(ExpandingArray<D>, dilation) = 1;
  TROUPE_ARG(int64_t, groups) = 1;
};
using Conv1dFuncOptions = ConvFuncOptions<1>;
using Conv2dFuncOptions = ConvFuncOptions<2>;

/// Options of F::conv_transpose1d / F::conv_transpose2d (torch.nn.functional.conv_transpose2d's arguments).
template <size_t D>
struct ConvTransposeFuncOptions {
  TROUPE_ARG(Tensor, bias);
  TROUPE_ARG(ExpandingArray<D>, stride) = 1;
  TROUPE_ARG(ExpandingArray<D>, padding) = 0;
  TROUPE_ARG(ExpandingArray<D>, output_padding) = 0;
  TROUPE_ARG(int64_t, groups) = 1;
  TROUPE_ARG(ExpandingArray<D>, dilation) = 1;
};
using ConvTranspose1dFuncOptions = ConvTransposeFuncOptions<1>;
using ConvTranspose2dFuncOptions = ConvTransposeFuncOptions<2>;

/// Options of F::pad: (left, right) pairs from the last dim backwards, the mode ("constant", "reflect",
/// "replicate" or "circular", or troupe::kConstant, ...) and the fill value of "constant".
struct PadFuncOptions {
  PadFuncOptions(std::vector<int64_t> pad) : pad_(std::move(pad)) {}
  TROUPE_ARG(std::vector<int64_t>, pad);
  TROUPE_ARG(std::string, mode) = "constant";
  TROUPE_ARG(double, value) = 0;
};
}  // namespace functional

}  // namespace troupe::nn
