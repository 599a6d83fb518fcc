// Replay (TorchRL's TensorDictReplayBuffer over a LazyTensorStorage): a fixed-capacity ring of frames,
// sampled uniformly or by priority (a sum tree), checkpointable.
//
//   rl::TensorDictReplayBuffer rb(/*capacity=*/100000, rl::PrioritizedSampler(100000, 0.6, 0.4));
//   rb.extend(batch.reshape({-1}));          // frames, batch [N]
//   rl::TensorDict s = rb.sample(256);       // s["index"], s["_weight"] (prioritized)
//   rb.update_priority(s.get("index"), td_error.abs());
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include <troupe/nn/state_dict.h>
#include <troupe/rl/tensordict.h>
#include <troupe/tensor/random.h>

namespace troupe::rl {

/// Sums or minima over a power-of-two segment tree of float64 leaves.
class SegmentTree {
 public:
  enum class Op { Sum, Min };
  SegmentTree(int64_t capacity, Op op);
  void set(int64_t index, double value);
  double get(int64_t index) const { return tree_[static_cast<size_t>(size_ + index)]; }
  /// The reduction over every leaf.
  double reduce() const { return tree_[1]; }
  /// (Sum trees) the smallest index whose prefix sum exceeds `mass` (clamped to the last non-empty leaf).
  int64_t lower_bound(double mass) const;
  int64_t capacity() const { return capacity_; }

 private:
  int64_t capacity_, size_;
  Op op_;
  std::vector<double> tree_;
};

/// Uniform sampling with replacement over the stored frames (TorchRL's RandomSampler).
class RandomSampler {
 public:
  RandomSampler() = default;
};

/// Proportional prioritized sampling (Schaul et al. 2016; TorchRL's PrioritizedSampler): frame i has
/// priority (|p_i| + eps)^alpha, new frames the largest raw priority seen so far (1 at first);
/// P(i) = priority_i / sum; importance weight (priority_i / min priority)^-beta.
class PrioritizedSampler {
 public:
  PrioritizedSampler(int64_t max_capacity, double alpha, double beta, double eps = 1e-8);
  double alpha() const { return alpha_; }
  double beta() const { return beta_; }
  double eps() const { return eps_; }
  /// Sets beta (>= 0; annealed towards 1 over training).
  void set_beta(double beta);

 private:
  friend class TensorDictReplayBuffer;
  double alpha_, beta_, eps_;
  double max_priority_ = 1.0;
  std::shared_ptr<SegmentTree> sum_, min_;
};

/// A ring of `capacity` frames (TensorDicts with batch [N] written row by row), allocated on the first
/// extend from its keys, shapes and dtypes.
class TensorDictReplayBuffer {
 public:
  explicit TensorDictReplayBuffer(int64_t capacity, RandomSampler sampler = {}, uint64_t seed = 0);
  TensorDictReplayBuffer(int64_t capacity, PrioritizedSampler sampler, uint64_t seed = 0);

  /// Writes the frames of `frames` (batch [N]; flatten other batches with reshape({-1})) at the cursor,
  /// wrapping around; returns their indices (int64 [N]). Keys and shapes must match the first extend.
  Tensor extend(const TensorDict& frames);
  /// batch_size frames drawn with replacement, with "index" (int64) and, prioritized, "_weight" (float32).
  TensorDict sample(int64_t batch_size);
  /// Sets the priorities of frames `index` to (|priority| + eps)^alpha (prioritized only).
  void update_priority(const Tensor& index, const Tensor& priority);

  int64_t size() const { return size_; }
  int64_t capacity() const { return capacity_; }
  bool prioritized() const { return prioritized_.has_value(); }
  /// The prioritized sampler (to change beta); a uniform buffer throws.
  PrioritizedSampler& sampler();
  /// The stored frames (batch [size()]).
  TensorDict storage() const;

  /// Frames, cursor, priorities and generator state, under "storage.<key>", "_cursor", "_size", ...
  nn::StateDict state_dict() const;
  /// Restores what state_dict() saved; errors name the missing key or the mismatched shape.
  void load_state_dict(const nn::StateDict& state);

 private:
  int64_t capacity_;
  int64_t size_ = 0, cursor_ = 0;
  std::optional<TensorDict> data_;
  std::optional<PrioritizedSampler> prioritized_;
  Generator gen_;
};

}  // namespace troupe::rl
