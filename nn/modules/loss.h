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

#include <array>
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

/// Base of the losses of three tensors (PyTorch's _Loss with a three-argument forward): CosineEmbeddingLoss and
/// MarginRankingLoss take (input1, input2, target), TripletMarginLoss (anchor, positive, negative).
class TripleInputLoss : public Module {
 public:
  using Module::forward;
  using Module::operator();
  /// The loss of the three tensors.
  virtual Tensor forward(const Tensor& a, const Tensor& b, const Tensor& c) = 0;
  /// Runs call({a, b, c}) (hooks included) and returns the loss.
  Tensor operator()(const Tensor& a, const Tensor& b, const Tensor& c) { return call({a, b, c}).tensor(); }
  /// Accepts the three tensors positionally or by their names (arg_names()).
  Value forward_args(const Args& args, const Kwargs& kwargs) override;

 protected:
  /// The keyword names of the three arguments.
  virtual std::array<std::string, 3> arg_names() const = 0;
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

/// Kullback-Leibler divergence of the target (probabilities, or log-probabilities with log_target) from the
/// input's log-probabilities.
class KLDivLossImpl : public Cloneable<KLDivLossImpl, Loss> {
 public:
  explicit KLDivLossImpl(const KLDivLossOptions& options = {});
  void reset() override {}
  using Loss::forward;
  Tensor forward(const Tensor& input, const Tensor& target) override;
  std::string name() const override { return "KLDivLoss"; }

  KLDivLossOptions options;
};
TROUPE_MODULE(KLDivLoss);

/// Whether two inputs are similar (target 1: 1 - cos) or dissimilar (target -1: max(0, cos - margin)).
class CosineEmbeddingLossImpl : public Cloneable<CosineEmbeddingLossImpl, TripleInputLoss> {
 public:
  explicit CosineEmbeddingLossImpl(const CosineEmbeddingLossOptions& options = {});
  void reset() override {}
  using TripleInputLoss::forward;
  /// (N, D), (N, D), (N) of 1 / -1; or (D), (D), ().
  Tensor forward(const Tensor& input1, const Tensor& input2, const Tensor& target) override;
  std::string name() const override { return "CosineEmbeddingLoss"; }

  CosineEmbeddingLossOptions options;

 protected:
  std::array<std::string, 3> arg_names() const override { return {"input1", "input2", "target"}; }
};
TROUPE_MODULE(CosineEmbeddingLoss);

/// max(0, -target * (input1 - input2) + margin): target 1 ranks input1 higher, -1 input2.
class MarginRankingLossImpl : public Cloneable<MarginRankingLossImpl, TripleInputLoss> {
 public:
  explicit MarginRankingLossImpl(const MarginRankingLossOptions& options = {});
  void reset() override {}
  using TripleInputLoss::forward;
  Tensor forward(const Tensor& input1, const Tensor& input2, const Tensor& target) override;
  std::string name() const override { return "MarginRankingLoss"; }

  MarginRankingLossOptions options;

 protected:
  std::array<std::string, 3> arg_names() const override { return {"input1", "input2", "target"}; }
};
TROUPE_MODULE(MarginRankingLoss);

/// max(0, margin + d(anchor, positive) - d(anchor, negative)) with the p-norm distance.
class TripletMarginLossImpl : public Cloneable<TripletMarginLossImpl, TripleInputLoss> {
 public:
  explicit TripletMarginLossImpl(const TripletMarginLossOptions& options = {});
  void reset() override {}
  using TripleInputLoss::forward;
  Tensor forward(const Tensor& anchor, const Tensor& positive, const Tensor& negative) override;
  std::string name() const override { return "TripletMarginLoss"; }

  TripletMarginLossOptions options;

 protected:
  std::array<std::string, 3> arg_names() const override { return {"anchor", "positive", "negative"}; }
};
TROUPE_MODULE(TripletMarginLoss);

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
