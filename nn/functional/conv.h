// nn::functional convolution (torch.nn.functional.conv2d) with PyTorch's padding forms: ints or the
// strings "valid" / "same".
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include <troupe/util/expanding_array.h>
#include <troupe/tensor/tensor.h>

namespace troupe::nn {

/// The padding of a convolution: one int, two ints (pH, pW), or "valid" / "same".
class Conv2dPadding {
 public:
  Conv2dPadding(int p) : ints_(static_cast<int64_t>(p)) {}
  Conv2dPadding(int64_t p) : ints_(p) {}
  Conv2dPadding(std::initializer_list<int64_t> p) : ints_(p) {}
  Conv2dPadding(const std::vector<int64_t>& p) : ints_(p) {}
  Conv2dPadding(IntArrayRef p) : ints_(p) {}
  Conv2dPadding(ExpandingArray<2> p) : ints_(p) {}
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

namespace functional {

/// 2-D convolution of input (N, C_in, H, W) or (C_in, H, W) with weight (C_out, C_in/groups, kH, kW)
/// and bias (C_out) or undefined. padding "same" (stride 1 only) pads so that the output has the
/// input's size (the extra pixel of an odd total padding goes right / bottom); "valid" is 0.
Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(), IntArrayRef stride = 1,
              const Conv2dPadding& padding = 0, IntArrayRef dilation = 1, int64_t groups = 1);

/// torch.nn.functional.pad: pads the last len(pad)/2 dims by (left, right) pairs given from the last
/// dim backwards. mode "constant" (fill `value`; negative pads crop) for any dims; "reflect",
/// "replicate" and "circular" (non-negative pads) for 1-D, 2-D or 3-D padding of a batched or
/// unbatched input, with PyTorch's errors.
Tensor pad(const Tensor& input, IntArrayRef pad, const std::string& mode = "constant", double value = 0);

}  // namespace functional
}  // namespace troupe::nn
