// DataLoader: BatchSampler over a SequentialSampler or a RandomSampler with the loader's generator, and
// the default collate (Dataset::get_batch), as PyTorch 1.13's single-process DataLoader.
#include <troupe/data/dataloader.h>

#include <algorithm>
#include <mutex>
#include <stdexcept>
#include <string>

#include <troupe/tensor/ops.h>

namespace troupe::data {

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options)
    : dataset_(std::move(dataset)), options_(options), generator_(options.seed()) {
  if (!dataset_) throw std::invalid_argument("[DataLoader] dataset is null");
  if (options_.batch_size() <= 0)
    throw std::invalid_argument("batch_size should be a positive integer value, but got batch_size=" +
                                std::to_string(options_.batch_size()));
  if (options_.workers() != 0)
    throw std::invalid_argument("[DataLoader] workers=" + std::to_string(options_.workers()) +
                                ": data::DataLoader loads in the calling thread; data::make_data_loader's "
                                "loaders run worker threads");
  if (options_.shuffle() && dataset_->size() <= 0)
    throw std::invalid_argument("num_samples should be a positive integer value, but got num_samples=" +
                                std::to_string(dataset_->size()));
}

int64_t DataLoader::size() const {
  const int64_t n = dataset_->size(), b = options_.batch_size();
  return options_.drop_last() ? n / b : (n + b - 1) / b;
}

DataLoader::Iterator DataLoader::begin() {
  auto epoch = std::make_shared<Iterator::Epoch>();
  epoch->loader = this;
  const int64_t n = dataset_->size();
  // _BaseDataLoaderIter.__init__ draws its base seed (torch.empty((), int64).random_(generator)): one
  // 64-bit draw, with or without shuffle
  {
    std::lock_guard<std::mutex> lock(generator_.mutex());
    (void)generator_.random64();
  }
  if (options_.shuffle()) {
    // RandomSampler.__iter__ draws the epoch's order with randperm(n, generator) (when the first batch is
    // asked for, which begin() does)
    Tensor perm = troupe::randperm(n, generator_);
    const int64_t* p = perm.data_ptr<int64_t>();
    epoch->order.assign(p, p + n);
  } else {
    epoch->order.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) epoch->order[static_cast<size_t>(i)] = i;
  }
  advance(*epoch);
  return Iterator(std::move(epoch));
}

void DataLoader::advance(Iterator::Epoch& epoch) {
  epoch.batch = {};
  const auto n = static_cast<int64_t>(epoch.order.size());
  const int64_t b = options_.batch_size();
  const int64_t count = std::min(b, n - epoch.position);
  if (count < b && !epoch.exhausted) {
    // BatchSampler asks the sampler for more than it has left: RandomSampler's generator body reaches its
    // trailing `randperm(n, generator)[:num_samples % n]`, which draws a permutation it does not use.
    epoch.exhausted = true;
    if (options_.shuffle()) (void)troupe::randperm(n, generator_);
  }
  if (count <= 0 || (count < b && options_.drop_last())) {
    epoch.position = n;
    epoch.done = true;
    return;
  }
  const auto first = epoch.order.begin() + epoch.position;
  epoch.batch = dataset_->get_batch(std::vector<int64_t>(first, first + count));
  epoch.position += count;
}

troupe::OrderedDict<std::string, Tensor> DataLoader::state_dict() const {
  const std::vector<uint8_t> state = generator_.get_state();
  Tensor t = empty({static_cast<int64_t>(state.size())}, TensorOptions().dtype(kUInt8));
  std::copy(state.begin(), state.end(), t.data_ptr<uint8_t>());
  troupe::OrderedDict<std::string, Tensor> sd;
  sd.insert("generator_state", t);
  return sd;
}

void DataLoader::load_state_dict(const troupe::OrderedDict<std::string, Tensor>& state_dict) {
  for (const auto& [key, value] : state_dict)
    if (key != "generator_state")
      throw std::invalid_argument("[DataLoader::load_state_dict] unexpected key '" + key +
                                  "' (a DataLoader's state_dict holds only 'generator_state')");
  const Tensor* t = state_dict.find("generator_state");
  if (!t) throw std::invalid_argument("[DataLoader::load_state_dict] missing key 'generator_state'");
  if (!t->defined() || t->dtype() != kUInt8 || t->dim() != 1)
    throw std::invalid_argument("[DataLoader::load_state_dict] 'generator_state' must be a 1-D uint8 tensor of " +
                                std::to_string(Generator::kStateSize) + " bytes");
  Tensor c = t->cpu().contiguous();
  const uint8_t* p = c.data_ptr<uint8_t>();
  try {
    generator_.set_state(std::vector<uint8_t>(p, p + c.numel()));
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("[DataLoader::load_state_dict] 'generator_state': ") + e.what());
  }
}

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  if (!epoch_ || epoch_->done) throw std::out_of_range("[DataLoader::Iterator] incremented past the end of the epoch");
  epoch_->loader->advance(*epoch_);
  return *this;
}

}  // namespace troupe::data
