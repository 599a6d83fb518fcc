// data::Iterator<Batch> (libtorch's): the input iterator of a make_data_loader loader. A loader's begin()
// gives a valid iterator that fetches its first batch lazily; end() a sentinel that equals a valid
// iterator once that one has run out of batches. Copies of an iterator share their position.
#pragma once

#include <cstddef>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <stdexcept>
#include <utility>

namespace troupe::data {

/// Iterates the batches of one epoch.
template <typename Batch>
class Iterator {
 public:
  using difference_type = std::ptrdiff_t;
  using value_type = Batch;
  using pointer = Batch*;
  using reference = Batch&;
  using iterator_category = std::input_iterator_tag;
  /// What a valid iterator calls for each batch: the next one, or nullopt at the end.
  using BatchProducer = std::function<std::optional<Batch>()>;

  /// The sentinel (end()).
  Iterator() = default;
  /// A valid iterator over the batches `next_batch` produces.
  explicit Iterator(BatchProducer next_batch) : state_(std::make_shared<State>(std::move(next_batch))) {}

  /// Fetches the next batch.
  Iterator& operator++() {
    if (!state_) throw std::runtime_error("Incrementing the DataLoader's past-the-end iterator is not allowed");
    state_->initialize();
    if (!state_->batch) throw std::runtime_error("Attempted to increment iterator past the end");
    state_->batch = state_->next_batch();
    return *this;
  }
  /// The current batch.
  Batch& operator*() {
    if (!state_) throw std::runtime_error("Dereferencing the DataLoader's past-the-end iterator is not allowed");
    state_->initialize();
    if (!state_->batch) throw std::runtime_error("Attempted to dereference iterator that was past the end");
    return *state_->batch;
  }
  Batch* operator->() { return &**this; }

  /// Two sentinels are equal; a valid iterator equals the sentinel once exhausted, and equals a valid
  /// one only when they are copies of each other.
  bool operator==(const Iterator& other) const {
    if (state_ && other.state_) return state_ == other.state_;
    if (!state_ && !other.state_) return true;
    State& valid = state_ ? *state_ : *other.state_;
    valid.initialize();
    return !valid.batch;
  }
  bool operator!=(const Iterator& other) const { return !(*this == other); }

 private:
  struct State {
    explicit State(BatchProducer n) : next_batch(std::move(n)) {}
    void initialize() {
      if (initialized) return;
      batch = next_batch();
      initialized = true;
    }
    BatchProducer next_batch;
    std::optional<Batch> batch;
    bool initialized = false;
  };
  std::shared_ptr<State> state_;
};

}  // namespace troupe::data
