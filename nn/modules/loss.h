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
class MSELoss : public Cloneable<MSELoss, Loss> {
 public:
  explicit MSELoss(const MSELossOptions& options = {});
  void reset() override {}
  using Loss::forward;
  Tensor forward(const Tensor& input, const Tensor& target) override;
  std::string name() const override { return "MSELoss"; }

  MSELossOptions options;
};

/// Mean absolute error between each element of input and target.
class L1Loss : public Cloneable<L1Loss, Loss> {
 public:
  explicit L1Loss(const L1LossOptions& options = {});
  void reset() override {}
  using Loss::forward;
  Tensor forward(const Tensor& input, const Tensor& target) override;
  std::string name() const override { return "L1Loss"; }

  L1LossOptions options;
};

/// Squared error below beta, absolute error (less beta / 2) above it, the quadratic part divided by beta.
class SmoothL1Loss : public Cloneable<SmoothL1Loss, Loss> {
 public:
  explicit SmoothL1Loss(const SmoothL1LossOptions& options = {});
  void reset() override {}
  using Loss::forward;
  Tensor forward(const Tensor& input, const Tensor& target) override;
  std::string name() const override { return "SmoothL1Loss"; }

  SmoothL1LossOptions options;
};

/// Half the squared error below delta, delta-scaled absolute error above it.
class HuberLoss : public Cloneable<HuberLoss, Loss> {
 public:
  explicit HuberLoss(const HuberLossOptions& options = {});
  void reset() override {}
  using Loss::forward;
  Tensor forward(const Tensor& input, const Tensor& target) override;
  std::string name() const override { return "HuberLoss"; }

  HuberLossOptions options;
};

/// Cross entropy between logits and class indices or class probabilities (log_softmax + NLLLoss).
class CrossEntropyLoss : public Cloneable<CrossEntropyLoss, Loss> {
 public:
  explicit CrossEntropyLoss(const CrossEntropyLossOptions& options = {});
  /// Registers the buffer "weight" (None when options.weight() is undefined).
  void reset() override;
  using Loss::forward;
  Tensor forward(const Tensor& input, const Tensor& target) override;
  std::string name() const override { return "CrossEntropyLoss"; }

  CrossEntropyLossOptions options;
  /// The "weight" buffer.
  Tensor weight;
};

/// Negative log likelihood of log-probabilities at class-index targets.
class NLLLoss : public Cloneable<NLLLoss, Loss> {
 public:
  explicit NLLLoss(const NLLLossOptions& options = {});
  /// Registers the buffer "weight" (None when options.weight() is undefined).
  void reset() override;
  using Loss::forward;
  Tensor forward(const Tensor& input, const Tensor& target) override;
  std::string name() const override { return "NLLLoss"; }

  NLLLossOptions options;
  Tensor weight;
};

/// Binary cross entropy between probabilities and targets.
class BCELoss : public Cloneable<BCELoss, Loss> {
 public:
  explicit BCELoss(const BCELossOptions& options = {});
  /// Registers the buffer "weight" (None when options.weight() is undefined).
  void reset() override;
  using Loss::forward;
  Tensor forward(const Tensor& input, const Tensor& target) override;
  std::string name() const override { return "BCELoss"; }

  BCELossOptions options;
  Tensor weight;
};

/// Sigmoid + binary cross entropy in one numerically stable expression, with optional pos_weight.
class BCEWithLogitsLoss : public Cloneable<BCEWithLogitsLoss, Loss> {
 public:
  explicit BCEWithLogitsLoss(const BCEWithLogitsLossOptions& options = {});
  /// Registers the buffers "weight" and "pos_weight" (None when not given).
  void reset() override;
  using Loss::forward;
  Tensor forward(const Tensor& input, const Tensor& target) override;
  std::string name() const override { return "BCEWithLogitsLoss"; }

  BCEWithLogitsLossOptions options;
  Tensor weight;
  Tensor pos_weight;
};

}  // namespace troupe::nn
