// Dropout (torch.nn.Dropout).
#pragma once

#include <string>

#include <troupe/nn/cloneable.h>
#include <troupe/nn/module.h>
#include <troupe/nn/pimpl.h>
#include <troupe/nn/options/dropout.h>
#include <troupe/util/options.h>

namespace troupe::nn {

/// In training mode zeroes each element with probability p and scales the rest by 1 / (1 - p);
/// the identity in eval mode.
class DropoutImpl : public Cloneable<DropoutImpl> {
 public:
  /// Nothing to register.
  void reset() override {}
  /// Throws "dropout probability has to be between 0 and 1, but got {p}" for p outside [0, 1].
  explicit DropoutImpl(const DropoutOptions& options = {});
  explicit DropoutImpl(double p, bool inplace = false) : DropoutImpl(DropoutOptions(p).inplace(inplace)) {}
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  std::string name() const override { return "Dropout"; }
  DropoutOptions options;
};
TROUPE_MODULE(Dropout);

}  // namespace troupe::nn
