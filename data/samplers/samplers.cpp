// The samplers' epochs, batch requests and archive state (samplers/*.h).
#include <algorithm>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>

#include <troupe/data/samplers/distributed.h>
#include <troupe/data/samplers/random.h>
#include <troupe/data/samplers/sequential.h>
#include <troupe/data/samplers/stream.h>
#include <troupe/nn/archive.h>
#include <troupe/tensor/ops.h>

namespace troupe::data::samplers {
namespace {

/// An int64 scalar tensor holding `v` (how samplers store their positions).
Tensor index_tensor(size_t v) {
  Tensor t = empty({}, TensorOptions().dtype(kInt64));
  *t.data_ptr<int64_t>() = static_cast<int64_t>(v);
  return t;
}

/// The int64 scalar `key` of `archive`, checked to lie in [0, limit].
size_t read_index(serialize::InputArchive& archive, const std::string& key, size_t limit, const char* sampler) {
  Tensor t;
  archive.read(key, t);
  if (t.numel() != 1)
    throw std::runtime_error(std::string("[") + sampler + "::load] '" + key + "' in " + archive.source() +
                             " must hold one value, it holds " + std::to_string(t.numel()));
  const auto v = t.to(kInt64).item<int64_t>();
  if (v < 0 || static_cast<size_t>(v) > limit)
    throw std::runtime_error(std::string("[") + sampler + "::load] '" + key + "' in " + archive.source() + " is " +
                             std::to_string(v) + ", outside [0, " + std::to_string(limit) + "]");
  return static_cast<size_t>(v);
}

}  // namespace

// ---- SequentialSampler

SequentialSampler::SequentialSampler(size_t size) : size_(size) {}

void SequentialSampler::reset(std::optional<size_t> new_size) {
  if (new_size) size_ = *new_size;
  index_ = 0;
}

std::optional<std::vector<size_t>> SequentialSampler::next(size_t batch_size) {
  const size_t remaining = size_ - index_;
  if (remaining == 0) return std::nullopt;
  std::vector<size_t> batch(std::min(batch_size, remaining));
  std::iota(batch.begin(), batch.end(), index_);
  index_ += batch.size();
  return batch;
}

void SequentialSampler::save(serialize::OutputArchive& archive) const {
  archive.write("index", index_tensor(index_), /*is_buffer=*/true);
}

void SequentialSampler::load(serialize::InputArchive& archive) {
  index_ = read_index(archive, "index", size_, "SequentialSampler");
}

// ---- RandomSampler

RandomSampler::RandomSampler(int64_t size, ScalarType index_dtype) : indices_(permutation(size, index_dtype)) {}

RandomSampler::RandomSampler(int64_t size, Generator generator, ScalarType index_dtype)
    : generator_(std::move(generator)) {
  indices_ = permutation(size, index_dtype);
}

Tensor RandomSampler::permutation(int64_t size, ScalarType dtype) {
  if (size < 0) throw std::invalid_argument("[RandomSampler] size must be non-negative, got " + std::to_string(size));
  const auto opts = TensorOptions().dtype(dtype);
  return generator_ ? troupe::randperm(size, *generator_, opts) : troupe::randperm(size, opts);
}

void RandomSampler::reset(std::optional<size_t> new_size) {
  const auto size = static_cast<int64_t>(new_size.value_or(static_cast<size_t>(indices_.numel())));
  indices_ = permutation(size, indices_.dtype());
  index_ = 0;
}

std::optional<std::vector<size_t>> RandomSampler::next(size_t batch_size) {
  const auto remaining = static_cast<size_t>(indices_.numel() - index_);
  if (remaining == 0) return std::nullopt;
  std::vector<size_t> batch(std::min(batch_size, remaining));
  Tensor slice = indices_.slice(0, index_, index_ + static_cast<int64_t>(batch.size())).to(kInt64).contiguous();
  const int64_t* p = slice.data_ptr<int64_t>();
  std::copy(p, p + batch.size(), batch.begin());
  index_ += static_cast<int64_t>(batch.size());
  return batch;
}

void RandomSampler::save(serialize::OutputArchive& archive) const {
  archive.write("index", index_tensor(static_cast<size_t>(index_)), /*is_buffer=*/true);
  archive.write("indices", indices_, /*is_buffer=*/true);
}

void RandomSampler::load(serialize::InputArchive& archive) {
  Tensor indices;
  archive.read("indices", indices);
  if (indices.dim() != 1)
    throw std::runtime_error("[RandomSampler::load] 'indices' in " + archive.source() + " must be 1-D");
  const size_t index = read_index(archive, "index", static_cast<size_t>(indices.numel()), "RandomSampler");
  indices_ = indices;
  index_ = static_cast<int64_t>(index);
}

// ---- DistributedRandomSampler

DistributedRandomSampler::DistributedRandomSampler(size_t size, size_t num_replicas, size_t rank, bool allow_duplicates)
    : DistributedSampler(size, num_replicas, rank, allow_duplicates) {
  DistributedRandomSampler::reset(size_);
}

void DistributedRandomSampler::populate_indices() {
  const size_t local = local_sample_count();
  const size_t total = num_replicas_ == 1 ? size_ : local * num_replicas_;
  all_indices_.resize(total);
  std::iota(all_indices_.begin(), all_indices_.end(), size_t{0});
  // padding: the first indices again, so that every rank gets `local` samples
  for (size_t i = size_; i < total; ++i) all_indices_[i] = size_ == 0 ? 0 : (i - size_) % size_;
  begin_index_ = rank_ * local;
  end_index_ = begin_index_ + local;
  sample_index_ = begin_index_;
}

void DistributedRandomSampler::reset(std::optional<size_t> new_size) {
  size_ = new_size.value_or(size_);
  populate_indices();
  std::mt19937 rng(static_cast<std::mt19937::result_type>(epoch_));
  std::shuffle(all_indices_.begin(), all_indices_.end(), rng);
  sample_index_ = begin_index_;
}

std::optional<std::vector<size_t>> DistributedRandomSampler::next(size_t batch_size) {
  if (sample_index_ == end_index_) return std::nullopt;
  const size_t end = std::min(sample_index_ + batch_size, end_index_);
  std::vector<size_t> batch(all_indices_.begin() + static_cast<std::ptrdiff_t>(sample_index_),
                            all_indices_.begin() + static_cast<std::ptrdiff_t>(end));
  sample_index_ = end;
  return batch;
}

void DistributedRandomSampler::save(serialize::OutputArchive& archive) const {
  archive.write("sample_index_", index_tensor(sample_index_), /*is_buffer=*/true);
  archive.write("epoch_", index_tensor(epoch_), /*is_buffer=*/true);
}

void DistributedRandomSampler::load(serialize::InputArchive& archive) {
  epoch_ = read_index(archive, "epoch_", SIZE_MAX >> 1, "DistributedRandomSampler");
  reset(size_);  // the epoch's order
  sample_index_ = read_index(archive, "sample_index_", end_index_, "DistributedRandomSampler");
  if (sample_index_ < begin_index_)
    throw std::runtime_error("[DistributedRandomSampler::load] 'sample_index_' in " + archive.source() + " is " +
                             std::to_string(sample_index_) + ", before this rank's first index " +
                             std::to_string(begin_index_));
}

// ---- DistributedSequentialSampler

DistributedSequentialSampler::DistributedSequentialSampler(size_t size, size_t num_replicas, size_t rank,
                                                           bool allow_duplicates)
    : DistributedSampler(size, num_replicas, rank, allow_duplicates) {
  populate_indices();
}

void DistributedSequentialSampler::populate_indices() {
  begin_index_ = rank_ * local_sample_count();
  end_index_ = begin_index_ + local_sample_count();
  sample_index_ = begin_index_;
}

void DistributedSequentialSampler::reset(std::optional<size_t> new_size) {
  const size_t size = new_size.value_or(size_);
  if (size != size_) {
    size_ = size;
    populate_indices();
  } else {
    sample_index_ = begin_index_;
  }
}

std::optional<std::vector<size_t>> DistributedSequentialSampler::next(size_t batch_size) {
  if (sample_index_ == end_index_) return std::nullopt;
  const size_t end = std::min(sample_index_ + batch_size, end_index_);
  std::vector<size_t> batch(end - sample_index_);
  std::iota(batch.begin(), batch.end(), sample_index_);
  if (end >= size_)
    for (size_t& i : batch) i %= size_;  // the padding wraps around to the first indices
  sample_index_ = end;
  return batch;
}

void DistributedSequentialSampler::save(serialize::OutputArchive& archive) const {
  archive.write("sample_index_", index_tensor(sample_index_), /*is_buffer=*/true);
}

void DistributedSequentialSampler::load(serialize::InputArchive& archive) {
  sample_index_ = read_index(archive, "sample_index_", end_index_, "DistributedSequentialSampler");
}

// ---- StreamSampler

void StreamSampler::reset(std::optional<size_t> new_size) {
  if (new_size) epoch_size_ = *new_size;
  examples_retrieved_so_far_ = 0;
}

std::optional<BatchSize> StreamSampler::next(size_t batch_size) {
  if (examples_retrieved_so_far_ >= epoch_size_) return std::nullopt;
  batch_size = std::min(batch_size, epoch_size_ - examples_retrieved_so_far_);
  examples_retrieved_so_far_ += batch_size;
  return BatchSize(batch_size);
}

void StreamSampler::save(serialize::OutputArchive& archive) const {
  archive.write("examples_retrieved_so_far", index_tensor(examples_retrieved_so_far_), /*is_buffer=*/true);
}

void StreamSampler::load(serialize::InputArchive& archive) {
  examples_retrieved_so_far_ = read_index(archive, "examples_retrieved_so_far", epoch_size_, "StreamSampler");
}

}  // namespace troupe::data::samplers
