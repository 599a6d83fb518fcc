// libtorch's sampler base (torch::data::samplers::Sampler): hands a loader one batch request at a time
// (by default the indices of the next batch), restarts on reset, and saves its position into a
// serialize archive.
#pragma once

#include <cstddef>
#include <optional>
#include <vector>

namespace troupe::serialize {
class OutputArchive;
class InputArchive;
}  // namespace troupe::serialize

namespace troupe::data::samplers {

/// The base of every sampler.
template <typename BatchRequest = std::vector<size_t>>
class Sampler {
 public:
  using BatchRequestType = BatchRequest;

  virtual ~Sampler() = default;

  /// Starts a new epoch (the loader calls it on each begin()); `new_size` replaces the dataset size.
  virtual void reset(std::optional<size_t> new_size) = 0;
  /// The next request of at most `batch_size` samples, or nullopt at the end of the epoch.
  virtual std::optional<BatchRequest> next(size_t batch_size) = 0;
  /// Writes the sampler's position (and order) into `archive`.
  virtual void save(serialize::OutputArchive& archive) const = 0;
  /// Restores what save() wrote.
  virtual void load(serialize::InputArchive& archive) = 0;
};

/// A batch request that is not a list of indices (samplers::BatchSize); it knows its size.
struct CustomBatchRequest {
  virtual ~CustomBatchRequest() = default;
  /// The number of examples requested.
  virtual size_t size() const = 0;
};

}  // namespace troupe::data::samplers
