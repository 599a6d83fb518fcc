// samplers::RandomSampler (libtorch's): a fresh randperm(size) of the indices each epoch, drawn from the
// default generator (troupe::manual_seed makes it repeat) or from a Generator the sampler owns.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include <troupe/data/samplers/base.h>
#include <troupe/tensor/random.h>
#include <troupe/tensor/tensor.h>

namespace troupe::data::samplers {

/// Yields a random permutation of [0, size) in batches. Like libtorch's, the constructor draws one
/// permutation and every reset() (each loader epoch) draws another.
class RandomSampler : public Sampler<> {
 public:
  /// Draws from troupe's default generator, as libtorch's; the permutation is held as `index_dtype`.
  explicit RandomSampler(int64_t size, ScalarType index_dtype = kInt64);
  /// Draws from its own copy of `generator` (troupe's addition: RandomSampler(n, Generator(seed))
  /// repeats whatever else draws from the default generator).
  RandomSampler(int64_t size, Generator generator, ScalarType index_dtype = kInt64);

  void reset(std::optional<size_t> new_size = std::nullopt) override;
  std::optional<std::vector<size_t>> next(size_t batch_size) override;
  /// Writes "index" and "indices" (the epoch's permutation).
  void save(serialize::OutputArchive& archive) const override;
  void load(serialize::InputArchive& archive) override;
  /// How many indices this epoch has handed out.
  size_t index() const noexcept { return static_cast<size_t>(index_); }
  /// The sampler's own generator, or nullptr when it draws from the default one.
  Generator* generator() { return generator_ ? &*generator_ : nullptr; }

 private:
  Tensor permutation(int64_t size, ScalarType dtype);

  std::optional<Generator> generator_;
  Tensor indices_;
  int64_t index_ = 0;
};

}  // namespace troupe::data::samplers
