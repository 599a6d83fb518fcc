// Dataset, TensorDataset, Subset and random_split (torch.utils.data.dataset in PyTorch 1.13).
#include <troupe/data/dataset.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <stdexcept>
#include <string>

#include <troupe/tensor/ops.h>
#include <troupe/tensor/random.h>

namespace troupe::data {
namespace {

/// The int64 index tensor for a gather on `like`'s device.
Tensor index_tensor(const std::vector<int64_t>& indices, const Tensor& like) {
  Tensor idx = troupe::tensor(indices, TensorOptions().dtype(kInt64));
  return like.is_cpu() ? idx : idx.to(like.device());
}

}  // namespace

// ---------------------------------------------------------------------------------------- Dataset

int64_t Dataset::wrap_index(int64_t index, int64_t size, const char* fn) {
  if (index < -size || index >= size)
    throw std::out_of_range(std::string("[") + fn + "] index " + std::to_string(index) +
                            " is out of bounds for dimension 0 with size " + std::to_string(size));
  return index < 0 ? index + size : index;
}

Example<> Dataset::get_batch(const std::vector<int64_t>& indices) const {
  if (indices.empty()) throw std::invalid_argument("[Dataset::get_batch] indices is empty: there is no sample to stack");
  std::vector<Tensor> data, target;
  data.reserve(indices.size());
  target.reserve(indices.size());
  for (int64_t i : indices) {
    Example<> e = get(i);
    data.push_back(std::move(e.data));
    target.push_back(std::move(e.target));
  }
  return {troupe::stack(data, 0), troupe::stack(target, 0)};
}

// ---------------------------------------------------------------------------------- TensorDataset

TensorDataset::TensorDataset(Tensor data, Tensor targets) : data_(std::move(data)), targets_(std::move(targets)) {
  if (!data_.defined() || !targets_.defined())
    throw std::invalid_argument(std::string("[TensorDataset] the ") + (data_.defined() ? "targets" : "data") +
                                " tensor is undefined");
  if (data_.dim() == 0 || targets_.dim() == 0)
    throw std::invalid_argument(std::string("[TensorDataset] the ") + (data_.dim() == 0 ? "data" : "targets") +
                                " tensor is 0-dim: samples are indexed along dimension 0");
  if (data_.size(0) != targets_.size(0))
    throw std::invalid_argument("Size mismatch between tensors (data " + shape_str(data_.sizes()) + ", targets " +
                                shape_str(targets_.sizes()) + ")");
}

Example<> TensorDataset::get(int64_t index) const {
  const int64_t i = wrap_index(index, size(), "TensorDataset::get");
  return {data_.select(0, i), targets_.select(0, i)};
}

int64_t TensorDataset::size() const { return data_.size(0); }

Example<> TensorDataset::get_batch(const std::vector<int64_t>& indices) const {
  const int64_t n = size();
  std::vector<int64_t> wrapped(indices.size());
  for (size_t k = 0; k < indices.size(); ++k) wrapped[k] = wrap_index(indices[k], n, "TensorDataset::get_batch");
  Tensor di = index_tensor(wrapped, data_);
  Tensor ti = targets_.device() == data_.device() ? di : index_tensor(wrapped, targets_);
  return {data_.index_select(0, di), targets_.index_select(0, ti)};
}

// ----------------------------------------------------------------------------------------- Subset

Subset::Subset(std::shared_ptr<const Dataset> dataset, std::vector<int64_t> indices)
    : dataset_(std::move(dataset)), indices_(std::move(indices)) {
  if (!dataset_) throw std::invalid_argument("[Subset] dataset is null");
  const int64_t n = dataset_->size();
  for (auto& i : indices_) i = wrap_index(i, n, "Subset");
}

Example<> Subset::get(int64_t index) const {
  return dataset_->get(indices_[static_cast<size_t>(wrap_index(index, size(), "Subset::get"))]);
}

int64_t Subset::size() const { return static_cast<int64_t>(indices_.size()); }

Example<> Subset::get_batch(const std::vector<int64_t>& indices) const {
  std::vector<int64_t> mapped(indices.size());
  const int64_t n = size();
  for (size_t k = 0; k < indices.size(); ++k)
    mapped[k] = indices_[static_cast<size_t>(wrap_index(indices[k], n, "Subset::get_batch"))];
  return dataset_->get_batch(mapped);
}

// ----------------------------------------------------------------------------------- random_split

std::vector<std::shared_ptr<Subset>> random_split(std::shared_ptr<const Dataset> dataset,
                                                  const std::vector<int64_t>& lengths, uint64_t seed) {
  if (!dataset) throw std::invalid_argument("[random_split] dataset is null");
  int64_t total = 0;
  for (size_t i = 0; i < lengths.size(); ++i) {
    if (lengths[i] < 0)
      throw std::invalid_argument("[random_split] length at index " + std::to_string(i) + " is negative (" +
                                  std::to_string(lengths[i]) + ")");
    total += lengths[i];
  }
  if (total != dataset->size())
    throw std::invalid_argument("Sum of input lengths does not equal the length of the input dataset! (lengths sum to " +
                                std::to_string(total) + ", the dataset has " + std::to_string(dataset->size()) +
                                " samples)");
  // indices = randperm(sum(lengths), generator=Generator().manual_seed(seed)), cut in order
  Generator gen(seed);
  Tensor perm = troupe::randperm(total, gen);
  const int64_t* p = perm.data_ptr<int64_t>();
  std::vector<std::shared_ptr<Subset>> out;
  out.reserve(lengths.size());
  int64_t offset = 0;
  for (int64_t len : lengths) {
    out.push_back(std::make_shared<Subset>(dataset, std::vector<int64_t>(p + offset, p + offset + len)));
    offset += len;
  }
  return out;
}

std::vector<std::shared_ptr<Subset>> random_split(std::shared_ptr<const Dataset> dataset,
                                                  const std::vector<double>& fractions, uint64_t seed) {
  if (!dataset) throw std::invalid_argument("[random_split] dataset is null");
  const int64_t n = dataset->size();
  double sum = 0;
  for (double f : fractions) sum += f;  // Python's sum: left to right
  std::vector<int64_t> lengths;
  // math.isclose(sum, 1) (rel_tol 1e-9) and sum <= 1: the values are fractions of the dataset
  if (std::fabs(sum - 1.0) <= 1e-9 * std::max(std::fabs(sum), 1.0) && sum <= 1.0) {
    int64_t assigned = 0;
    for (size_t i = 0; i < fractions.size(); ++i) {
      if (!(fractions[i] >= 0 && fractions[i] <= 1))
        throw std::invalid_argument("Fraction at index " + std::to_string(i) + " is not between 0 and 1 (" +
                                    std::to_string(fractions[i]) + ")");
      lengths.push_back(static_cast<int64_t>(std::floor(static_cast<double>(n) * fractions[i])));
      assigned += lengths.back();
    }
    // the remainder goes round-robin, one sample per split, from the first split on
    for (int64_t i = 0; i < n - assigned; ++i) lengths[static_cast<size_t>(i) % lengths.size()] += 1;
    for (size_t i = 0; i < lengths.size(); ++i)
      if (lengths[i] == 0)
        std::cerr << "UserWarning: Length of split at index " << i
                  << " is 0. This might result in an empty dataset.\n";
    return random_split(std::move(dataset), lengths, seed);
  }
  // otherwise they are lengths: PyTorch compares their sum with the dataset's size first
  if (sum != static_cast<double>(n))
    throw std::invalid_argument("Sum of input lengths does not equal the length of the input dataset! (lengths sum to " +
                                std::to_string(sum) + ", the dataset has " + std::to_string(n) + " samples)");
  for (size_t i = 0; i < fractions.size(); ++i) {
    if (fractions[i] != std::floor(fractions[i]))
      throw std::invalid_argument("[random_split] length at index " + std::to_string(i) + " is " +
                                  std::to_string(fractions[i]) +
                                  ": lengths must be integers, or fractions that sum to 1");
    lengths.push_back(static_cast<int64_t>(fractions[i]));
  }
  return random_split(std::move(dataset), lengths, seed);
}

}  // namespace troupe::data
