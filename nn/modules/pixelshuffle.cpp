// PixelShuffle / PixelUnshuffle over F::pixel_shuffle / F::pixel_unshuffle.
#include <troupe/nn/modules/pixelshuffle.h>

#include <troupe/nn/functional/pixelshuffle.h>

namespace troupe::nn {

Tensor PixelShuffleImpl::forward(const Tensor& input) { return functional::pixel_shuffle(input, options); }

Tensor PixelUnshuffleImpl::forward(const Tensor& input) { return functional::pixel_unshuffle(input, options); }

}  // namespace troupe::nn
