// Options of PixelShuffle / PixelUnshuffle, as libtorch's torch/nn/options/pixelshuffle.h.
//
//   nn::PixelShuffle(nn::PixelShuffleOptions(2));  F::pixel_unshuffle(x, F::PixelUnshuffleFuncOptions(2));
#pragma once

#include <cstdint>

#include <troupe/util/options.h>

namespace troupe::nn {

/// Options of PixelShuffle: (*, C * r^2, H, W) -> (*, C, H * r, W * r) with r = upscale_factor.
struct PixelShuffleOptions {
  PixelShuffleOptions(int64_t upscale_factor) : upscale_factor_(upscale_factor) {}
  TROUPE_ARG(int64_t, upscale_factor);
};

/// Options of PixelUnshuffle: (*, C, H * r, W * r) -> (*, C * r^2, H, W) with r = downscale_factor.
struct PixelUnshuffleOptions {
  PixelUnshuffleOptions(int64_t downscale_factor) : downscale_factor_(downscale_factor) {}
  TROUPE_ARG(int64_t, downscale_factor);
};

namespace functional {
using PixelShuffleFuncOptions = PixelShuffleOptions;
using PixelUnshuffleFuncOptions = PixelUnshuffleOptions;
}  // namespace functional

}  // namespace troupe::nn
