// PixelShuffle and PixelUnshuffle (torch.nn.PixelShuffle / PixelUnshuffle): sub-pixel rearrangement between
// channels and space.
#pragma once

#include <string>

#include <troupe/nn/cloneable.h>
#include <troupe/nn/module.h>
#include <troupe/nn/options/pixelshuffle.h>
#include <troupe/nn/pimpl.h>

namespace troupe::nn {

/// (*, C * r^2, H, W) -> (*, C, H * r, W * r).
class PixelShuffleImpl : public Cloneable<PixelShuffleImpl> {
 public:
  explicit PixelShuffleImpl(const PixelShuffleOptions& options) : options(options) {}
  /// Nothing to register.
  void reset() override {}
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override { return "upscale_factor=" + std::to_string(options.upscale_factor()); }
  std::string name() const override { return "PixelShuffle"; }

  PixelShuffleOptions options;
};
TROUPE_MODULE(PixelShuffle);

/// (*, C, H * r, W * r) -> (*, C * r^2, H, W).
class PixelUnshuffleImpl : public Cloneable<PixelUnshuffleImpl> {
 public:
  explicit PixelUnshuffleImpl(const PixelUnshuffleOptions& options) : options(options) {}
  /// Nothing to register.
  void reset() override {}
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override {
    return "downscale_factor=" + std::to_string(options.downscale_factor());
  }
  std::string name() const override { return "PixelUnshuffle"; }

  PixelUnshuffleOptions options;
};
TROUPE_MODULE(PixelUnshuffle);

}  // namespace troupe::nn
