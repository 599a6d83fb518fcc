// Distributed samplers (libtorch's torch::data::samplers::Distributed*Sampler): each of num_replicas
// ranks gets its own contiguous share of the indices. With allow_duplicates (PyTorch's
// DistributedSampler with drop_last=False) the list is padded with its first indices to a multiple of
// num_replicas so every rank gets ceil(size / num_replicas); without, each gets floor(size /
// num_replicas) and the tail is left out. DistributedRandomSampler shuffles the padded list with
// std::mt19937(epoch) on each reset, so every rank draws the same order and set_epoch changes it.
// Unlike Python's DistributedSampler (which takes every num_replicas-th index of a torch.randperm), the
// shares are contiguous blocks and the shuffle is std::shuffle's, as in libtorch.
#pragma once

#include <cstddef>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <troupe/data/samplers/base.h>

namespace troupe::data::samplers {

/// What both distributed samplers hold: size, replicas, rank, epoch.
template <typename BatchRequest = std::vector<size_t>>
class DistributedSampler : public Sampler<BatchRequest> {
 public:
  DistributedSampler(size_t size, size_t num_replicas = 1, size_t rank = 0, bool allow_duplicates = true)
      : size_(size), num_replicas_(num_replicas), rank_(rank), epoch_(0), allow_duplicates_(allow_duplicates) {
    check(size, num_replicas, rank);
  }

  /// The epoch whose order the next reset() draws (PyTorch's DistributedSampler.set_epoch).
  void set_epoch(size_t epoch) { epoch_ = epoch; }
  size_t epoch() const { return epoch_; }

 protected:
  /// The samples each rank gets.
  size_t local_sample_count() const {
    return allow_duplicates_ ? (size_ + num_replicas_ - 1) / num_replicas_ : size_ / num_replicas_;
  }

  size_t size_;
  size_t num_replicas_;
  size_t rank_;
  size_t epoch_;
  bool allow_duplicates_;

 private:
  static void check(size_t /*size*/, size_t num_replicas, size_t rank) {
    if (num_replicas == 0) throw std::invalid_argument("[DistributedSampler] num_replicas must be positive");
    if (rank >= num_replicas)
      throw std::invalid_argument("[DistributedSampler] invalid rank " + std::to_string(rank) +
                                  ", rank should be in the interval [0, " + std::to_string(num_replicas - 1) + "]");
  }
};

/// A contiguous share of a permutation of the (padded) indices; the permutation changes with the epoch.
class DistributedRandomSampler : public DistributedSampler<> {
 public:
  DistributedRandomSampler(size_t size, size_t num_replicas = 1, size_t rank = 0, bool allow_duplicates = true);

  void reset(std::optional<size_t> new_size = std::nullopt) override;
  std::optional<std::vector<size_t>> next(size_t batch_size) override;
  /// Writes "sample_index_" and "epoch_".
  void save(serialize::OutputArchive& archive) const override;
  void load(serialize::InputArchive& archive) override;
  /// The position in the permutation (begin of this rank's share + samples handed out).
  size_t index() const noexcept { return sample_index_; }

 private:
  void populate_indices();

  size_t begin_index_ = 0;
  size_t end_index_ = 0;
  size_t sample_index_ = 0;
  std::vector<size_t> all_indices_;
};

/// A contiguous share of 0, 1, ..., padded by wrapping around to the first indices.
class DistributedSequentialSampler : public DistributedSampler<> {
 public:
  DistributedSequentialSampler(size_t size, size_t num_replicas = 1, size_t rank = 0, bool allow_duplicates = true);

  void reset(std::optional<size_t> new_size = std::nullopt) override;
  std::optional<std::vector<size_t>> next(size_t batch_size) override;
  /// Writes "sample_index_".
  void save(serialize::OutputArchive& archive) const override;
  void load(serialize::InputArchive& archive) override;
  size_t index() const noexcept { return sample_index_; }

 private:
  void populate_indices();

  size_t begin_index_ = 0;
  size_t end_index_ = 0;
  size_t sample_index_ = 0;
};

}  // namespace troupe::data::samplers
