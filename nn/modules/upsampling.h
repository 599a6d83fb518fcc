// Upsample (torch.nn.Upsample): F::interpolate with fixed options, printed as PyTorch prints it.
#pragma once

#include <string>

#include <troupe/nn/cloneable.h>
#include <troupe/nn/module.h>
#include <troupe/nn/options/upsampling.h>
#include <troupe/nn/pimpl.h>

namespace troupe::nn {

/// Upsamples (N, C, L) or (N, C, H, W) input to a size or by a scale factor.
class UpsampleImpl : public Cloneable<UpsampleImpl> {
 public:
  explicit UpsampleImpl(const UpsampleOptions& options = {}) : options(options) {}
  /// Nothing to register.
  void reset() override {}
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  std::string name() const override { return "Upsample"; }

  UpsampleOptions options;
};
TROUPE_MODULE(Upsample);

}  // namespace troupe::nn
