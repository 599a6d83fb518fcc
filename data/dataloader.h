// DataLoader (torch.utils.data.DataLoader with num_workers=0 and the default collate): batches of a map-style
// Dataset, in order or shuffled from a seed.
//
//   data::DataLoader loader(train, data::DataLoaderOptions().batch_size(64).shuffle(true).seed(0));
//   for (int epoch = 0; epoch < 3; ++epoch)
//     for (auto& batch : loader) { auto loss = F::cross_entropy(model->forward(batch.data), batch.target); ... }
//
// With shuffle, the sequence of epochs is the one PyTorch 1.13 gives for
// DataLoader(ds, batch_size, shuffle=True, drop_last=..., generator=torch.Generator().manual_seed(seed)):
// the loader owns one generator, seeded once, and each epoch makes the draws PyTorch's makes on it: the
// iterator's base seed (one 64-bit draw, unused with no workers, made without shuffle too), randperm(n)
// for the order, and when the sampler runs dry at the end of the epoch the RandomSampler's trailing
// randperm(n)[:0]. An epoch left early (a `break`) makes no trailing draw, as in PyTorch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
#include <vector>

#include <troupe/data/dataloader_options.h>
#include <troupe/data/dataset.h>
#include <troupe/util/options.h>
#include <troupe/util/ordered_dict.h>
#include <troupe/tensor/random.h>

namespace troupe::data {

/// Iterates a Dataset in batches; each begin() starts an epoch.
class DataLoader {
 public:
  /// An input iterator over one epoch's batches (Example<> with data and target stacked along dim 0).
  class Iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = Example<>;
    using difference_type = std::ptrdiff_t;
    using pointer = Example<>*;
    using reference = Example<>&;

    /// The end iterator.
    Iterator() = default;

    /// The current batch (valid until the next increment).
    Example<>& operator*() const { return epoch_->batch; }
    /// The current batch's members: it->data, it->target.
    Example<>* operator->() const { return &epoch_->batch; }
    /// Loads the next batch (or reaches the end).
    Iterator& operator++();
    /// Post-increment, as an input iterator's (returns nothing).
    void operator++(int) { ++*this; }
    /// Iterators are equal when both are at the end, or both stand on the same batch of the same epoch.
    friend bool operator==(const Iterator& a, const Iterator& b) {
      const bool a_end = !a.epoch_ || a.epoch_->done, b_end = !b.epoch_ || b.epoch_->done;
      if (a_end || b_end) return a_end == b_end;
      return a.epoch_ == b.epoch_ && a.epoch_->position == b.epoch_->position;
    }

   private:
    friend class DataLoader;
    struct Epoch {
      DataLoader* loader = nullptr;
      std::vector<int64_t> order;  // the permutation (empty: in order)
      int64_t position = 0;        // samples consumed so far
      bool exhausted = false;      // the sampler has run dry (its trailing draw is made)
      bool done = false;
      Example<> batch;
    };
    explicit Iterator(std::shared_ptr<Epoch> epoch) : epoch_(std::move(epoch)) {}
    std::shared_ptr<Epoch> epoch_;
  };

  /// A loader over `dataset`; throws std::invalid_argument for a null dataset, batch_size <= 0 (PyTorch's
  /// text), or shuffle over an empty dataset (RandomSampler's num_samples error), and workers > 0 (the
  /// loaders of make_data_loader run workers).
  explicit DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options = {});

  /// Starts an epoch: with shuffle, draws its permutation from the loader's generator.
  Iterator begin();
  /// The end of any epoch.
  Iterator end() { return Iterator(); }
  /// Batches per epoch (len(loader)): ceil(n / batch_size), or floor with drop_last.
  int64_t size() const;

  /// The dataset (DataLoader.dataset).
  const std::shared_ptr<const Dataset>& dataset() const { return dataset_; }
  /// The options it was built with.
  const DataLoaderOptions& options() const { return options_; }
  /// The loader's generator (DataLoader.generator), seeded with options().seed().
  Generator& generator() { return generator_; }

  /// What a resumed run needs to shuffle the next epochs as the uninterrupted run would: one entry,
  /// "generator_state", the generator's state (uint8, Generator::kStateSize bytes), as an nn::StateDict.
  troupe::OrderedDict<std::string, Tensor> state_dict() const;
  /// Restores a state_dict(); throws std::invalid_argument naming the missing, unexpected or malformed entry.
  void load_state_dict(const troupe::OrderedDict<std::string, Tensor>& state_dict);

 private:
  /// Fills epoch.batch with the next batch, or marks the epoch done; makes the end-of-sampler draw.
  void advance(Iterator::Epoch& epoch);

  std::shared_ptr<const Dataset> dataset_;
  DataLoaderOptions options_;
  Generator generator_;
};

}  // namespace troupe::data
