// Options of the losses, as libtorch's torch/nn/options/loss.h: the modules' structs (MSELossOptions, ...)
// and, under nn::functional, the same structs under the functional names (CrossEntropyFuncOptions, ...);
// plus Reduction, the type of every `reduction` option.
//
//   F::cross_entropy(x, y, F::CrossEntropyFuncOptions().label_smoothing(0.1));
//   nn::MSELoss(nn::MSELossOptions(troupe::kSum));
#pragma once

#include <cstdint>
#include <string>

#include <troupe/tensor/tensor.h>
#include <troupe/util/enum.h>
#include <troupe/util/options.h>

namespace troupe::nn {

/// How a loss reduces its elementwise values: "none", "mean" or "sum". Converts from libtorch's constants
/// (troupe::kNone, kMean, kSum), from a Reduction::Kind (`Reduction::Sum`) or from PyTorch's strings; any
/// other string throws std::invalid_argument "<s> is not a valid value for reduction" ("elementwise_mean"
/// is accepted as "mean", as in PyTorch).
class Reduction {
 public:
  enum Kind { None, Mean, Sum };
  Reduction(Kind kind = Mean) : kind_(kind) {}
  Reduction(enumtype::kNone) : kind_(None) {}
  Reduction(enumtype::kMean) : kind_(Mean) {}
  Reduction(enumtype::kSum) : kind_(Sum) {}
  Reduction(const std::string& s);
  Reduction(const char* s) : Reduction(std::string(s)) {}

  Kind kind() const { return kind_; }
  /// PyTorch's name: "none", "mean" or "sum".
  std::string str() const;
  friend bool operator==(Reduction a, Reduction b) { return a.kind_ == b.kind_; }
  friend bool operator!=(Reduction a, Reduction b) { return a.kind_ != b.kind_; }

 private:
  Kind kind_;
};

/// Options of MSELoss and F::mse_loss.
struct MSELossOptions {
  MSELossOptions(Reduction reduction = Reduction::Mean) : reduction_(reduction) {}
  TROUPE_ARG(Reduction, reduction);
};

/// Options of L1Loss and F::l1_loss.
struct L1LossOptions {
  L1LossOptions(Reduction reduction = Reduction::Mean) : reduction_(reduction) {}
  TROUPE_ARG(Reduction, reduction);
};

/// Options of SmoothL1Loss and F::smooth_l1_loss.
struct SmoothL1LossOptions {
  SmoothL1LossOptions(Reduction reduction = Reduction::Mean) : reduction_(reduction) {}
  TROUPE_ARG(Reduction, reduction);
  /// Where the loss turns from quadratic to linear; 0 gives L1Loss.
  TROUPE_ARG(double, beta) = 1.0;
};

/// Options of HuberLoss and F::huber_loss.
struct HuberLossOptions {
  HuberLossOptions(Reduction reduction = Reduction::Mean) : reduction_(reduction) {}
  TROUPE_ARG(Reduction, reduction);
  /// Where the loss turns from quadratic to delta-scaled linear; must be positive.
  TROUPE_ARG(double, delta) = 1.0;
};

/// Options of CrossEntropyLoss and F::cross_entropy.
struct CrossEntropyLossOptions {
  /// Per-class rescaling weights (C); undefined = all 1.
  TROUPE_ARG(Tensor, weight);
  /// Targets with this class index are ignored (indices only).
  TROUPE_ARG(int64_t, ignore_index) = -100;
  TROUPE_ARG(Reduction, reduction) = Reduction::Mean;
  /// In [0, 1]: the weight of the uniform distribution mixed into the target.
  TROUPE_ARG(double, label_smoothing) = 0.0;
};

/// Options of NLLLoss and F::nll_loss.
struct NLLLossOptions {
  TROUPE_ARG(Tensor, weight);
  TROUPE_ARG(int64_t, ignore_index) = -100;
  TROUPE_ARG(Reduction, reduction) = Reduction::Mean;
};

/// Options of BCELoss and F::binary_cross_entropy.
struct BCELossOptions {
  /// Rescaling weight broadcast to the target's shape; undefined = 1.
  TROUPE_ARG(Tensor, weight);
  TROUPE_ARG(Reduction, reduction) = Reduction::Mean;
};

/// Options of BCEWithLogitsLoss and F::binary_cross_entropy_with_logits.
struct BCEWithLogitsLossOptions {
  TROUPE_ARG(Tensor, weight);
  TROUPE_ARG(Reduction, reduction) = Reduction::Mean;
  /// Weight of the positive examples, broadcast against the last dim (usually (C)); undefined = 1.
  TROUPE_ARG(Tensor, pos_weight);
};

/// The reduction of KLDivLoss: "none", "batchmean" (the sum divided by the batch size, the KL divergence's
/// definition), "sum" or "mean" (over every element; PyTorch warns). Converts from troupe::kNone, kBatchMean,
/// kSum, kMean, from a Reduction, or from PyTorch's strings; another string throws "<s> is not a valid value
/// for reduction".
class KLDivReduction {
 public:
  enum Kind { None, BatchMean, Sum, Mean };
  KLDivReduction(Kind kind = Mean) : kind_(kind) {}
  KLDivReduction(enumtype::kNone) : kind_(None) {}
  KLDivReduction(enumtype::kBatchMean) : kind_(BatchMean) {}
  KLDivReduction(enumtype::kSum) : kind_(Sum) {}
  KLDivReduction(enumtype::kMean) : kind_(Mean) {}
  KLDivReduction(Reduction r)
      : kind_(r.kind() == Reduction::None ? None : r.kind() == Reduction::Sum ? Sum : Mean) {}
  KLDivReduction(const std::string& s);
  KLDivReduction(const char* s) : KLDivReduction(std::string(s)) {}

  Kind kind() const { return kind_; }
  /// PyTorch's name: "none", "batchmean", "sum" or "mean".
  std::string str() const;
  friend bool operator==(KLDivReduction a, KLDivReduction b) { return a.kind_ == b.kind_; }
  friend bool operator!=(KLDivReduction a, KLDivReduction b) { return a.kind_ != b.kind_; }

 private:
  Kind kind_;
};

/// Options of KLDivLoss and F::kl_div: `KLDivLossOptions(troupe::kBatchMean).log_target(true)`.
struct KLDivLossOptions {
  KLDivLossOptions(KLDivReduction reduction = KLDivReduction::Mean) : reduction_(reduction) {}
  TROUPE_ARG(KLDivReduction, reduction);
  /// The target holds log-probabilities (else probabilities).
  TROUPE_ARG(bool, log_target) = false;
};

/// Options of CosineEmbeddingLoss and F::cosine_embedding_loss.
struct CosineEmbeddingLossOptions {
  /// Dissimilar pairs (target -1) cost max(0, cos - margin); in [-1, 1], 0 to 0.5 suggested.
  TROUPE_ARG(double, margin) = 0.0;
  TROUPE_ARG(Reduction, reduction) = Reduction::Mean;
};

/// Options of MarginRankingLoss and F::margin_ranking_loss.
struct MarginRankingLossOptions {
  TROUPE_ARG(double, margin) = 0.0;
  TROUPE_ARG(Reduction, reduction) = Reduction::Mean;
};

/// Options of TripletMarginLoss and F::triplet_margin_loss.
struct TripletMarginLossOptions {
  TROUPE_ARG(double, margin) = 1.0;
  /// The norm of the pairwise distance.
  TROUPE_ARG(double, p) = 2.0;
  /// Added to the differences before the norm (keeps the gradient finite at 0).
  TROUPE_ARG(double, eps) = 1e-6;
  /// Use min(d(a, n), d(p, n)) as the negative distance (the distance swap of Balntas et al.).
  TROUPE_ARG(bool, swap) = false;
  TROUPE_ARG(Reduction, reduction) = Reduction::Mean;
};

namespace functional {
using KLDivFuncOptions = KLDivLossOptions;
using CosineEmbeddingLossFuncOptions = CosineEmbeddingLossOptions;
using MarginRankingLossFuncOptions = MarginRankingLossOptions;
using TripletMarginLossFuncOptions = TripletMarginLossOptions;
using MSELossFuncOptions = MSELossOptions;
using L1LossFuncOptions = L1LossOptions;
using SmoothL1LossFuncOptions = SmoothL1LossOptions;
using HuberLossFuncOptions = HuberLossOptions;
using CrossEntropyFuncOptions = CrossEntropyLossOptions;
using NLLLossFuncOptions = NLLLossOptions;
using BinaryCrossEntropyFuncOptions = BCELossOptions;
using BinaryCrossEntropyWithLogitsFuncOptions = BCEWithLogitsLossOptions;
}  // namespace functional

}  // namespace troupe::nn
