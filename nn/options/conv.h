// Options of convolution and padding, as libtorch's torch/nn/options/conv.h and padding.h: Conv2dPadding
// (ints or "valid" / "same"), the module's Conv2dOptions, and the functionals' own Conv2dFuncOptions and
// PadFuncOptions.
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

/// The padding of a convolution: one int, two ints (pH, pW), or "valid" / "same" (troupe::kValid / kSame).
class Conv2dPadding {
 public:
  Conv2dPadding(int p) : ints_(static_cast<int64_t>(p)) {}
  Conv2dPadding(int64_t p) : ints_(p) {}
  Conv2dPadding(std::initializer_list<int64_t> p) : ints_(p) {}
  Conv2dPadding(const std::vector<int64_t>& p) : ints_(p) {}
  Conv2dPadding(IntArrayRef p) : ints_(p) {}
  Conv2dPadding(ExpandingArray<2> p) : ints_(p) {}
  Conv2dPadding(enumtype::kValid) : ints_(0), mode_("valid") {}
  Conv2dPadding(enumtype::kSame) : ints_(0), mode_("same") {}
  Conv2dPadding(const char* mode) : ints_(0), mode_(mode) {}
  Conv2dPadding(std::string mode) : ints_(0), mode_(std::move(mode)) {}

  /// True for "valid" / "same" (or any other string, which conv2d rejects).
  bool is_string() const { return !mode_.empty(); }
  /// The string form ("" for int padding).
  const std::string& mode() const { return mode_; }
  /// The int padding (0 for a string).
  const ExpandingArray<2>& ints() const { return ints_; }
  /// As Conv2d's extra_repr prints it: "same" or "(1, 1)".
  std::string str() const { return is_string() ? mode_ : ints_.tuple_str(); }

 private:
  ExpandingArray<2> ints_;
  std::string mode_;
};

/// Options of Conv2d: `Conv2dOptions(3, 16, 3).stride(2).padding(1).bias(false)`.
struct Conv2dOptions {
  Conv2dOptions(int64_t in_channels, int64_t out_channels, ExpandingArray<2> kernel_size)
      : in_channels_(in_channels), out_channels_(out_channels), kernel_size_(kernel_size) {}
  TROUPE_ARG(int64_t, in_channels);
  TROUPE_ARG(int64_t, out_channels);
  TROUPE_ARG(ExpandingArray<2>, kernel_size);
  TROUPE_ARG(ExpandingArray<2>, stride) = 1;
  /// ints, or "valid" / "same" (stride 1 only).
  TROUPE_ARG(Conv2dPadding, padding) = 0;
  TROUPE_ARG(ExpandingArray<2>, dilation) = 1;
  TROUPE_ARG(int64_t, groups) = 1;
  TROUPE_ARG(bool, bias) = true;
  /// "zeros", "reflect", "replicate" or "circular" (or troupe::kZeros, kReflect, ...).
  TROUPE_ARG(std::string, padding_mode) = "zeros";
  TROUPE_ARG(Device, device) = Device(kCPU);
  TROUPE_ARG(std::optional<ScalarType>, dtype);
};

namespace functional {
/// Options of F::conv2d: the bias (C_out, or undefined) and the geometry of Conv2dOptions.
struct Conv2dFuncOptions {
  TROUPE_ARG(Tensor, bias);
  TROUPE_ARG(ExpandingArray<2>, stride) = 1;
  /// ints, or "valid" / "same" (stride 1 only).
  TROUPE_ARG(Conv2dPadding, padding) = 0;
  TROUPE_ARG(ExpandingArray<2>, dilation) = 1;
  TROUPE_ARG(int64_t, groups) = 1;
};

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
