// Options of upsampling and interpolation, as libtorch's torch/nn/options/upsampling.h: UpsampleOptions of
// the Upsample module and InterpolateFuncOptions of F::interpolate. The mode is PyTorch's string or one of
// libtorch's constants (troupe::kNearest, kNearestExact, kLinear, kBilinear, kArea).
//
//   nn::Upsample(nn::UpsampleOptions().scale_factor({2, 2}).mode(troupe::kBilinear).align_corners(false));
//   F::interpolate(x, F::InterpolateFuncOptions().size({7, 9}).mode(troupe::kNearest));
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <troupe/util/enum.h>
#include <troupe/util/options.h>

namespace troupe::nn {

/// Options of Upsample: the output size or the scale factor (one value for every spatial dim, or one per
/// dim), the mode and, for the linear modes, align_corners (nullopt: false).
struct UpsampleOptions {
  TROUPE_ARG(std::optional<std::vector<int64_t>>, size);
  TROUPE_ARG(std::optional<std::vector<double>>, scale_factor);
  /// "nearest", "linear" (3-D input) or "bilinear" (4-D input).
  TROUPE_ARG(std::string, mode) = "nearest";
  TROUPE_ARG(std::optional<bool>, align_corners);
};

namespace functional {
/// Options of F::interpolate (torch.nn.functional.interpolate's arguments).
struct InterpolateFuncOptions {
  TROUPE_ARG(std::optional<std::vector<int64_t>>, size);
  TROUPE_ARG(std::optional<std::vector<double>>, scale_factor);
  /// "nearest", "nearest-exact", "linear" (3-D input), "bilinear" (4-D input) or "area" (adaptive average
  /// pooling); "bicubic" and "trilinear" are not implemented.
  TROUPE_ARG(std::string, mode) = "nearest";
  /// Linear modes only: the corner pixels' centres of input and output coincide (nullopt: false).
  TROUPE_ARG(std::optional<bool>, align_corners);
  /// Compute the output size from scale_factor, then interpolate as if that size had been given (the
  /// sampling positions then use input / output size instead of 1 / scale_factor).
  TROUPE_ARG(std::optional<bool>, recompute_scale_factor);
  /// Not implemented; must stay false.
  TROUPE_ARG(bool, antialias) = false;
};
}  // namespace functional

}  // namespace troupe::nn
