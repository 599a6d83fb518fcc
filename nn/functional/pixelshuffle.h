// nn::functional pixel_shuffle / pixel_unshuffle (torch.nn.functional.pixel_shuffle, ...) with libtorch's
// signatures (nn/options/pixelshuffle.h): a reshape, a permute and a reshape, so autograd gives the backward.
#pragma once

#include <troupe/nn/options/pixelshuffle.h>
#include <troupe/tensor/tensor.h>

namespace troupe::nn::functional {

/// (*, C * r^2, H, W) -> (*, C, H * r, W * r): out[c, h * r + i, w * r + j] = in[c * r^2 + i * r + j, h, w].
Tensor pixel_shuffle(const Tensor& input, const PixelShuffleFuncOptions& options);
/// The inverse: (*, C, H * r, W * r) -> (*, C * r^2, H, W).
Tensor pixel_unshuffle(const Tensor& input, const PixelUnshuffleFuncOptions& options);

}  // namespace troupe::nn::functional
