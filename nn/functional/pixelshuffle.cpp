// nn::functional pixel_shuffle / pixel_unshuffle as view ops, with PyTorch 1.13's checks and texts.
#include <troupe/nn/functional/pixelshuffle.h>

#include <stdexcept>
#include <string>
#include <vector>

#include <troupe/tensor/ops.h>

namespace troupe::nn::functional {

Tensor pixel_shuffle(const Tensor& input, const PixelShuffleFuncOptions& options) {
  const int64_t r = options.upscale_factor();
  if (!input.defined()) throw std::invalid_argument("[pixel_shuffle] got an undefined tensor");
  if (input.dim() < 3)
    throw std::invalid_argument("pixel_shuffle expects input to have at least 3 dimensions, but got input with " +
                                std::to_string(input.dim()) + " dimension(s)");
  if (r <= 0)
    throw std::invalid_argument("pixel_shuffle expects a positive upscale_factor, but got " + std::to_string(r));
  const int64_t c = input.size(-3), h = input.size(-2), w = input.size(-1);
  if (c % (r * r) != 0)
    throw std::invalid_argument("pixel_shuffle expects its input's 'channel' dimension to be divisible by the square "
                                "of upscale_factor, but input.size(-3)=" + std::to_string(c) +
                                " is not divisible by " + std::to_string(r * r));
  std::vector<int64_t> batch(input.sizes().begin(), input.sizes().end() - 3);
  const int64_t nb = static_cast<int64_t>(batch.size());
  // (*, C, r, r, H, W) -> (*, C, H, r, W, r)
  std::vector<int64_t> split = batch;
  for (int64_t v : {c / (r * r), r, r, h, w}) split.push_back(v);
  std::vector<int64_t> perm;
  for (int64_t i = 0; i < nb; ++i) perm.push_back(i);
  for (int64_t v : {0, 3, 1, 4, 2}) perm.push_back(nb + v);
  std::vector<int64_t> out = batch;
  for (int64_t v : {c / (r * r), h * r, w * r}) out.push_back(v);
  return input.reshape(split).permute(perm).reshape(out);
}

Tensor pixel_unshuffle(const Tensor& input, const PixelUnshuffleFuncOptions& options) {
  const int64_t r = options.downscale_factor();
  if (!input.defined()) throw std::invalid_argument("[pixel_unshuffle] got an undefined tensor");
  if (input.dim() < 3)
    throw std::invalid_argument("pixel_unshuffle expects input to have at least 3 dimensions, but got input with " +
                                std::to_string(input.dim()) + " dimension(s)");
  if (r <= 0)
    throw std::invalid_argument("pixel_unshuffle expects a positive downscale_factor, but got " + std::to_string(r));
  const int64_t c = input.size(-3), h = input.size(-2), w = input.size(-1);
  if (h % r != 0)
    throw std::invalid_argument("pixel_unshuffle expects height to be divisible by downscale_factor, but "
                                "input.size(-2)=" + std::to_string(h) + " is not divisible by " + std::to_string(r));
  if (w % r != 0)
    throw std::invalid_argument("pixel_unshuffle expects width to be divisible by downscale_factor, but "
                                "input.size(-1)=" + std::to_string(w) + " is not divisible by " + std::to_string(r));
  std::vector<int64_t> batch(input.sizes().begin(), input.sizes().end() - 3);
  const int64_t nb = static_cast<int64_t>(batch.size());
  // (*, C, H, r, W, r) -> (*, C, r, r, H, W)
  std::vector<int64_t> split = batch;
  for (int64_t v : {c, h / r, r, w / r, r}) split.push_back(v);
  std::vector<int64_t> perm;
  for (int64_t i = 0; i < nb; ++i) perm.push_back(i);
  for (int64_t v : {0, 2, 4, 1, 3}) perm.push_back(nb + v);
  std::vector<int64_t> out = batch;
  for (int64_t v : {c * r * r, h / r, w / r}) out.push_back(v);
  return input.reshape(split).permute(perm).reshape(out);
}

}  // namespace troupe::nn::functional
