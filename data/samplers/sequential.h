// samplers::SequentialSampler (libtorch's): indices 0, 1, ..., size - 1 in order, each epoch.
#pragma once

#include <cstddef>
#include <optional>
#include <vector>

#include <troupe/data/samplers/base.h>

namespace troupe::data::samplers {

/// Yields [0, size) in batches, in order.
class SequentialSampler : public Sampler<> {
 public:
  explicit SequentialSampler(size_t size);

  void reset(std::optional<size_t> new_size = std::nullopt) override;
  std::optional<std::vector<size_t>> next(size_t batch_size) override;
  /// Writes "index".
  void save(serialize::OutputArchive& archive) const override;
  void load(serialize::InputArchive& archive) override;
  /// How many indices this epoch has handed out.
  size_t index() const noexcept { return index_; }

 private:
  size_t size_;
  size_t index_ = 0;
};

}  // namespace troupe::data::samplers
