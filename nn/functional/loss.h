// nn::functional losses (torch.nn.functional.*_loss, cross_entropy, ...), with PyTorch 1.13's semantics
// and error texts. Every loss is composed from differentiable tensor ops, so its backward (and double
// backward) comes from autograd, except binary_cross_entropy, whose backward is PyTorch's formula.
//
//   namespace F = troupe::nn::functional;
//   Tensor loss = F::cross_entropy(logits, labels, F::CrossEntropyFuncOptions().label_smoothing(0.1));
#pragma once

#include <troupe/nn/options/loss.h>
#include <troupe/tensor/tensor.h>

namespace troupe::nn {

namespace functional {

// Elementwise regression losses. PyTorch broadcasts input against target here (after a UserWarning
// when the sizes differ, which troupe does not print): a (3, 1) input with a (3) target gives a
// (3, 3) loss before reduction. Shapes that do not broadcast throw as every broadcasting op does.

/// (input - target)^2, reduced.
Tensor mse_loss(const Tensor& input, const Tensor& target, const MSELossFuncOptions& options = {});
/// |input - target|, reduced (its gradient at input == target is 0).
Tensor l1_loss(const Tensor& input, const Tensor& target, const L1LossFuncOptions& options = {});
/// 0.5 * d^2 / beta where |d| < beta, else |d| - 0.5 * beta (d = input - target); beta = 0 is l1_loss.
/// Negative beta throws "smooth_l1_loss does not support negative values for beta.".
Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, const SmoothL1LossFuncOptions& options = {});
/// 0.5 * d^2 where |d| < delta, else delta * (|d| - 0.5 * delta). delta <= 0 throws
/// "huber_loss does not support non-positive values for delta.".
Tensor huber_loss(const Tensor& input, const Tensor& target, const HuberLossFuncOptions& options = {});

// Classification losses. Shapes: input (C), (N, C) or (N, C, d1, ..., dK); class-index targets
// (int64) of shape (), (N) or (N, d1, ..., dK); `weight` (C) rescales each class (undefined = all 1).

/// Negative log likelihood of log-probabilities `input` at the target classes: -weight[t] * input[n, t].
/// Targets equal to ignore_index contribute 0 and are left out of the mean, which divides by the sum
/// of weight[t] over the other targets (all ignored: nan, with zero gradients). reduction "none"
/// returns the target's shape. Errors as PyTorch: "Expected input batch_size (3) to match target
/// batch_size (4).", "Target 5 is out of bounds.", "expected scalar type Long but found Float", ...
Tensor nll_loss(const Tensor& input, const Tensor& target, const NLLLossFuncOptions& options = {});

/// Cross entropy of unnormalised logits `input` (log_softmax over the class dim, then nll_loss).
/// A target with the input's shape holds class probabilities (floating; ignore_index must stay
/// negative); the mean then divides by the number of samples N * d1 * ... * dK whatever the weight.
/// label_smoothing in [0, 1] mixes the target with the uniform distribution over the C classes (with
/// class indices, as PyTorch: (1 - ls) * nll + ls / C * smoothing term, the term's mean divided by the
/// weights of the non-ignored targets).
Tensor cross_entropy(const Tensor& input, const Tensor& target, const CrossEntropyFuncOptions& options = {});

/// -weight * (t * log(x) + (1 - t) * log(1 - x)) for probabilities x in [0, 1], each log clamped at
/// -100; `weight` broadcasts to the target's shape. Input and target must have the same shape.
/// The backward is PyTorch's: weight * (x - t) / max(x * (1 - x), 1e-12) (finite at x = 0 or 1) for
/// the input, weight * (log(1 - x) - log(x)) for the target; the weight gets no gradient.
Tensor binary_cross_entropy(const Tensor& input, const Tensor& target,
                            const BinaryCrossEntropyFuncOptions& options = {});

/// binary_cross_entropy(sigmoid(input), target, weight) in the stable form
/// (1 - t) * x + lw * (log(exp(-m) + exp(-x - m)) + m), m = max(-x, 0), lw = (pos_weight - 1) * t + 1;
/// pos_weight (broadcast against the last dim, usually (C)) weighs the positive term.
Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target,
                                        const BinaryCrossEntropyWithLogitsFuncOptions& options = {});

// Divergence and embedding losses.

/// Kullback-Leibler divergence of the target from log-probabilities `input`: target * (log(target) - input)
/// (0 where target is 0), or exp(target) * (target - input) with log_target. reduction "batchmean" divides
/// the sum by input.size(0); "mean" (every element) warns as PyTorch does.
Tensor kl_div(const Tensor& input, const Tensor& target, const KLDivFuncOptions& options = {});

/// 1 - cos(x1, x2) where target is 1, max(0, cos(x1, x2) - margin) where it is -1 (0 elsewhere), with
/// cos = x1.x2 / sqrt((|x1|^2 + 1e-12) (|x2|^2 + 1e-12)) over the last dim. Inputs (N, D) with target (N),
/// or (D) with a 0-dim target.
Tensor cosine_embedding_loss(const Tensor& input1, const Tensor& input2, const Tensor& target,
                             const CosineEmbeddingLossFuncOptions& options = {});

/// max(0, -target * (input1 - input2) + margin); the three tensors must have the same number of dims.
Tensor margin_ranking_loss(const Tensor& input1, const Tensor& input2, const Tensor& target,
                           const MarginRankingLossFuncOptions& options = {});

/// max(0, margin + d(anchor, positive) - d(anchor, negative)) with d(a, b) = ||a - b + eps||_p over the last
/// dim (swap: the negative distance is min(d(a, n), d(p, n))); the three tensors must have the same dims.
Tensor triplet_margin_loss(const Tensor& anchor, const Tensor& positive, const Tensor& negative,
                           const TripletMarginLossFuncOptions& options = {});

}  // namespace functional
}  // namespace troupe::nn
