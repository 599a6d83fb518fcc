// DataLoaderOptions, shared by the Python-like data::DataLoader and libtorch's loaders made by
// data::make_data_loader; FullDataLoaderOptions is the latter's resolved copy.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>

#include <troupe/util/options.h>

namespace troupe::data {

/// Loader options: libtorch's (batch_size, workers, max_jobs, timeout, enforce_ordering, drop_last) and
/// the Python-like DataLoader's (shuffle, seed). batch_size is signed (libtorch: size_t) so that a
/// negative value is reported, not wrapped.
struct DataLoaderOptions {
  DataLoaderOptions() = default;
  /// DataLoaderOptions(64): the batch size alone (libtorch's implicit constructor).
  /* implicit */ DataLoaderOptions(int64_t batch_size) : batch_size_(batch_size) {}

  /// Samples per batch; must be positive.
  TROUPE_ARG(int64_t, batch_size) = 1;
  /// make_data_loader: threads that call the dataset's get_batch (0: the calling thread does). Each
  /// holds its own copy of the dataset. data::DataLoader takes only 0.
  TROUPE_ARG(size_t, workers) = 0;
  /// make_data_loader: batch requests in flight at once (default 2 * workers).
  TROUPE_ARG(std::optional<size_t>, max_jobs);
  /// make_data_loader: how long the loader waits for a worker's batch before it throws.
  TROUPE_ARG(std::optional<std::chrono::milliseconds>, timeout);
  /// make_data_loader: yield worker batches in the sampler's order (false: as they are finished).
  TROUPE_ARG(bool, enforce_ordering) = true;
  /// Drop the last batch when it holds fewer than batch_size samples.
  TROUPE_ARG(bool, drop_last) = false;
  /// data::DataLoader: draw a new permutation each epoch (RandomSampler) instead of taking samples in order.
  TROUPE_ARG(bool, shuffle) = false;
  /// data::DataLoader: the seed of its generator (torch.Generator().manual_seed(seed)); used only with shuffle.
  TROUPE_ARG(uint64_t, seed) = 0;
};

/// DataLoaderOptions with every default resolved (max_jobs = 2 * workers), as the loaders use them.
struct FullDataLoaderOptions {
  explicit FullDataLoaderOptions(const DataLoaderOptions& options)
      : batch_size(options.batch_size() > 0 ? static_cast<size_t>(options.batch_size()) : 0),
        workers(options.workers()),
        max_jobs(options.max_jobs().value_or(2 * options.workers())),
        timeout(options.timeout()),
        enforce_ordering(options.enforce_ordering()),
        drop_last(options.drop_last()) {}

  size_t batch_size;
  size_t workers;
  size_t max_jobs;
  std::optional<std::chrono::milliseconds> timeout;
  bool enforce_ordering;
  bool drop_last;
};

}  // namespace troupe::data
