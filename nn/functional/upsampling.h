// nn::functional interpolate (torch.nn.functional.interpolate) with libtorch's signature
// (InterpolateFuncOptions, nn/options/upsampling.h).
#pragma once

#include <troupe/nn/options/upsampling.h>
#include <troupe/tensor/tensor.h>

namespace troupe::nn::functional {

/// Resamples the spatial dims of (N, C, L) or (N, C, H, W) to options.size() or to floor(size *
/// scale_factor). nearest: source index floor(dst * scale) (nearest-exact: floor((dst + 0.5) * scale)),
/// with scale = 1 / scale_factor when given (and not recomputed), else in / out; linear / bilinear: the two
/// neighbours of src = scale * (dst + 0.5) - 0.5 (clamped at 0), or of dst * (in - 1) / (out - 1) with
/// align_corners, weighted by distance, one dim after the other (PyTorch's separable form); area: adaptive
/// average pooling. PyTorch's errors for mismatched modes and dims.
Tensor interpolate(const Tensor& input, const InterpolateFuncOptions& options = {});

}  // namespace troupe::nn::functional
