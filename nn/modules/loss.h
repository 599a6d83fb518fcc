// Loss modules (torch.nn.MSELoss, CrossEntropyLoss, ...): options structs as libtorch's, forward(input,
// target) calling nn::functional, and PyTorch's buffers: `weight` (CrossEntropyLoss, NLLLoss, BCELoss,
// BCEWithLogitsLoss) and `pos_weight` (BCEWithLogitsLoss), None when not given.
//
//   auto loss_fn = std::make_shared<nn::CrossEntropyLoss>(nn::CrossEntropyLossOptions().label_smoothing(0.1));
//   Tensor loss = (*loss_fn)(logits, labels);
//
// Losses create no tensors, so unlike the layers' options theirs have no device / dtype; a given
// weight moves with Module::to like any buffer.
#pragma once

#include <cstdint>
#include <string>

#include <troupe/nn/functional/loss.h>
#include <troupe/nn/options/loss.h>
#include <troupe/nn/cloneable.h>
#include <troupe/nn/module.h>
#include <troupe/nn/pimpl.h>
#include <troupe/util/options.h>

namespace troupe::nn {

// ------------------------------------------------------------------ base

/// Base of the loss modules (PyTorch's _Loss): forward(input, target) and the two-tensor call.
class Loss : public Module {
 public:
  using Module::forward;
  using Module::operator();
  /// The loss of `input` against `target`.
  virtual Tensor forward(const Tensor& input, const Tensor& target) = 0;
  /// Runs call({input, target}) (hooks included) and returns the loss.
  Tensor operator()(const Tensor& input, const Tensor& target) { return call({input, target}).tensor(); }
  /// Accepts (input, target) given positionally or as the keywords "input" / "target".
  Value forward_args(const Args& args, const Kwargs& kwargs) override;
};

// ------------------------------------------------------------------ losses

/// Mean squared error (squared L2 norm) between each element of input and target.
class MSELossImpl : public Cloneable<MSELossImpl, Loss> {
 public:
  explicit MSELossImpl(const MSELossOptions& options = {});
  void reset() override {}
  using Loss::forward;
  Tensor forward(const Tensor& input, const Tensor& target) override;
  std::string name() const override { return "MSELoss"; }

  MSELossOptions options;
};
TROUPE_MODULE(MSELoss);

/// Mean absolute error between each element of input and target.
class L1LossImpl : public Cloneable<L1LossImpl, Loss> {
 public:
  explicit L1LossImpl(const L1LossOptions& options = {});
  void reset() override {}
  using Loss::forward;
  Tensor forward(const Tensor& input, const Tensor& target) override;
  std::string name() const override { return "L1Loss"; }

  L1LossOptions options;
};
TROUPE_MODULE(L1Loss);

/// Squared error below beta, absolute error (less beta / 2) above it, the quadratic part divided by beta.
class SmoothL1LossImpl : public Cloneable<SmoothL1LossImpl, Loss> {
 public:
  explicit SmoothL1LossImpl(const SmoothL1LossOptions& options = {});
  void reset() override {}
  using Loss::forward;
  Tensor forward(const Tensor& input, const Tensor& target) override;
  std::string name() const override { return "SmoothL1Loss"; }

  SmoothL1LossOptions options;
};
TROUPE_MODULE(SmoothL1Loss);

/// Half the squared error below delta, delta-scaled absolute error above it.
class HuberLossImpl : public Cloneable<HuberLossImpl, Loss> {
 public:
  explicit HuberLossImpl(const HuberLossOptions& options = {});
  void reset() override {}
  using Loss::forward;
  Tensor forward(const Tensor& input, const Tensor& target) override;
  std::string name() const override { return "HuberLoss"; }

  HuberLossOptions options;
};
TROUPE_MODULE(HuberLoss);

/// Cross entropy between logits and class indices or class probabilities (log_softmax + NLLLoss).
class CrossEntropyLossImpl : public Cloneable<CrossEntropyLossImpl, Loss> {
 public:
  explicit CrossEntropyLossImpl(const CrossEntropyLossOptions& options = {});
  /// Registers the buffer "weight" (None when options.weight() is undefined).
  void reset() override;
  using Loss::forward;
  Tensor forward(const Tensor& input, const Tensor& target) override;
  std::string name() const override { return "CrossEntropyLoss"; }

  CrossEntropyLossOptions options;
  /// The "weight" buffer.
  Tensor weight;
};
TROUPE_MODULE(CrossEntropyLoss);

/// Negative log likelihood of log-probabilities at class-index targets.
class NLLLossImpl : public Cloneable<NLLLossImpl, Loss> {
 public:
  explicit NLLLossImpl(const NLLLossOptions& options = {});
  /// Registers the buffer "weight" (None when options.weight() is undefined).
  void reset() override;
  using Loss::forward;
  Tensor forward(const Tensor& input, const Tensor& target) override;
  std::string name() const override { return "NLLLoss"; }

  NLLLossOptions options;
  Tensor weight;
};
TROUPE_MODULE(NLLLoss);

/// Binary cross entropy between probabilities and targets.
class BCELossImpl : public Cloneable<BCELossImpl, Loss> {
 public:
  explicit BCELossImpl(const BCELossOptions& options = {});
  /// Registers the buffer "weight" (None when options.weight() is undefined).
  void reset() override;
  using Loss::forward;
  Tensor forward(const Tensor& input, const Tensor& target) override;
  std::string name() const override { return "BCELoss"; }

  BCELossOptions options;
  Tensor weight;
};
TROUPE_MODULE(BCELoss);

/// Sigmoid + binary cross entropy in one numerically stable expression, with optional pos_weight.
class BCEWithLogitsLossImpl : public Cloneable<BCEWithLogitsLossImpl, Loss> {
 public:
  explicit BCEWithLogitsLossImpl(const BCEWithLogitsLossOptions& options = {});
  /// Registers the buffers "weight" and "pos_weight" (None when not given).
  void reset() override;
  using Loss::forward;
  Tensor forward(const Tensor& input, const Tensor& target) override;
  std::string name() const override { return "BCEWithLogitsLoss"; }

  BCEWithLogitsLossOptions options;
  Tensor weight;
  Tensor pos_weight;
};
TROUPE_MODULE(BCEWithLogitsLoss);

}  // namespace troupe::nn
