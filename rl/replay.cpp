// Replay storage, samplers and the sum/min segment trees (rl/replay.h).
#include <troupe/rl/replay.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include <troupe/tensor/indexing.h>
#include <troupe/tensor/ops.h>

namespace troupe::rl {

// ------------------------------------------------------------------------------------- SegmentTree

SegmentTree::SegmentTree(int64_t capacity, Op op) : capacity_(capacity), op_(op) {
  if (capacity <= 0) throw std::invalid_argument("[SegmentTree] capacity must be positive, got " + std::to_string(capacity));
  size_ = 1;
  while (size_ < capacity) size_ *= 2;
  const double neutral = op == Op::Sum ? 0.0 : std::numeric_limits<double>::infinity();
  tree_.assign(static_cast<size_t>(2 * size_), neutral);
}

void SegmentTree::set(int64_t index, double value) {
  if (index < 0 || index >= capacity_)
    throw std::out_of_range("[SegmentTree] index " + std::to_string(index) + " outside [0, " + std::to_string(capacity_) + ")");
  size_t i = static_cast<size_t>(size_ + index);
  tree_[i] = value;
  for (i /= 2; i >= 1; i /= 2)
    tree_[i] = op_ == Op::Sum ? tree_[2 * i] + tree_[2 * i + 1] : std::min(tree_[2 * i], tree_[2 * i + 1]);
}

int64_t SegmentTree::lower_bound(double mass) const {
  size_t i = 1;
  while (i < static_cast<size_t>(size_)) {
    if (mass < tree_[2 * i] || tree_[2 * i + 1] <= 0) {
      i = 2 * i;
    } else {
      mass -= tree_[2 * i];
      i = 2 * i + 1;
    }
  }
  int64_t idx = static_cast<int64_t>(i) - size_;
  // rounding can walk past the last non-empty leaf: step back to one that has mass
  while (idx > 0 && (idx >= capacity_ || tree_[static_cast<size_t>(size_ + idx)] <= 0)) --idx;
  return idx;
}

// ------------------------------------------------------------------------------------------ samplers

PrioritizedSampler::PrioritizedSampler(int64_t max_capacity, double alpha, double beta, double eps)
    : alpha_(alpha), beta_(beta), eps_(eps) {
  if (alpha < 0) throw std::invalid_argument("[PrioritizedSampler] alpha must be >= 0, got " + std::to_string(alpha));
  if (beta < 0) throw std::invalid_argument("[PrioritizedSampler] beta must be >= 0, got " + std::to_string(beta));
  sum_ = std::make_shared<SegmentTree>(max_capacity, SegmentTree::Op::Sum);
  min_ = std::make_shared<SegmentTree>(max_capacity, SegmentTree::Op::Min);
}

void PrioritizedSampler::set_beta(double beta) {
  if (!(beta >= 0)) throw std::invalid_argument("[PrioritizedSampler] beta must be >= 0, got " + std::to_string(beta));
  beta_ = beta;
}

// ------------------------------------------------------------------------------------ replay buffer

PrioritizedSampler& TensorDictReplayBuffer::sampler() {
  if (!prioritized_) throw std::logic_error("[ReplayBuffer.sampler] the buffer samples uniformly (no PrioritizedSampler)");
  return *prioritized_;
}

TensorDictReplayBuffer::TensorDictReplayBuffer(int64_t capacity, RandomSampler, uint64_t seed)
    : capacity_(capacity), gen_(seed) {
  if (capacity <= 0) throw std::invalid_argument("[ReplayBuffer] capacity must be positive, got " + std::to_string(capacity));
}

TensorDictReplayBuffer::TensorDictReplayBuffer(int64_t capacity, PrioritizedSampler sampler, uint64_t seed)
    : TensorDictReplayBuffer(capacity, RandomSampler{}, seed) {
  if (sampler.sum_->capacity() < capacity)
    throw std::invalid_argument("[ReplayBuffer] the sampler's max_capacity " + std::to_string(sampler.sum_->capacity()) +
                                " is below the buffer's capacity " + std::to_string(capacity));
  prioritized_ = std::move(sampler);
}

Tensor TensorDictReplayBuffer::extend(const TensorDict& frames) {
  if (frames.batch_dims() != 1)
    throw std::invalid_argument("[ReplayBuffer.extend] expected frames with one batch dim, got " +
                                std::to_string(frames.batch_dims()) + " (flatten with reshape({-1}))");
  const int64_t n = frames.batch_size()[0];
  if (!data_) {
    // allocate from the first frames: same keys, [capacity, *frame shape], same dtypes
    TensorDict storage({capacity_});
    for (const Key& k : frames.keys(true, true)) {
      Tensor v = frames.get(k);
      std::vector<int64_t> shape = v.sizes().vec();
      shape[0] = capacity_;
      storage.set(k, zeros(shape, TensorOptions().dtype(v.dtype())));
    }
    data_ = std::move(storage);
  }
  for (const Key& k : data_->keys(true, true)) {
    if (!frames.contains(k)) throw std::invalid_argument("[ReplayBuffer.extend] the frames lack key " + k.repr());
    auto want = data_->get(k).sizes().vec(), got = frames.get(k).sizes().vec();
    want.erase(want.begin());
    got.erase(got.begin());
    if (want != got)
      throw std::invalid_argument("[ReplayBuffer.extend] key " + k.repr() + " has frame shape of rank " +
                                  std::to_string(got.size()) + " different from the stored one");
  }
  Tensor idx = empty({n}, TensorOptions().dtype(kInt64));
  for (int64_t i = 0; i < n; ++i) idx.data_ptr<int64_t>()[i] = (cursor_ + i) % capacity_;
  // more frames than capacity: only the last `capacity` survive, as consecutive writes would leave
  const int64_t skip = std::max<int64_t>(n - capacity_, 0);
  Tensor write_idx = idx.narrow(0, skip, n - skip);
  data_->set_at_(write_idx, frames.slice(0, skip, n));
  if (prioritized_) {
    const double p = std::pow(prioritized_->max_priority_ + prioritized_->eps_, prioritized_->alpha_);
    const int64_t* w = write_idx.data_ptr<int64_t>();
    for (int64_t i = 0; i < write_idx.numel(); ++i) {
      prioritized_->sum_->set(w[i], p);
      prioritized_->min_->set(w[i], p);
    }
  }
  cursor_ = (cursor_ + n) % capacity_;
  size_ = std::min(size_ + n, capacity_);
  return idx;
}

TensorDict TensorDictReplayBuffer::sample(int64_t batch_size) {
  if (size_ == 0) throw std::runtime_error("[ReplayBuffer.sample] the buffer is empty");
  if (batch_size <= 0) throw std::invalid_argument("[ReplayBuffer.sample] batch_size must be positive, got " + std::to_string(batch_size));
  Tensor index = empty({batch_size}, TensorOptions().dtype(kInt64));
  int64_t* ix = index.data_ptr<int64_t>();
  Tensor weight;
  if (!prioritized_) {
    for (int64_t i = 0; i < batch_size; ++i)
      ix[i] = static_cast<int64_t>(gen_.random64() % static_cast<uint64_t>(size_));
  } else {
    const double total = prioritized_->sum_->reduce();
    const double pmin = prioritized_->min_->reduce();
    weight = empty({batch_size}, TensorOptions().dtype(kFloat32));
    float* w = weight.data_ptr<float>();
    for (int64_t i = 0; i < batch_size; ++i) {
      const double u = static_cast<double>(gen_.random64() >> 11) * 0x1.0p-53;
      ix[i] = std::min(prioritized_->sum_->lower_bound(u * total), size_ - 1);
      w[i] = static_cast<float>(std::pow(prioritized_->sum_->get(ix[i]) / pmin, -prioritized_->beta_));
    }
  }
  TensorDict out = data_->index(index);
  out.set("index", index);
  if (weight.defined()) out.set("_weight", weight);
  return out;
}

void TensorDictReplayBuffer::update_priority(const Tensor& index, const Tensor& priority) {
  if (!prioritized_) throw std::logic_error("[ReplayBuffer.update_priority] the buffer samples uniformly");
  Tensor idx = index.to(kInt64).contiguous().reshape({-1});
  Tensor pr = priority.detach().to(kFloat64).contiguous().reshape({-1});
  if (idx.numel() != pr.numel())
    throw std::invalid_argument("[ReplayBuffer.update_priority] " + std::to_string(idx.numel()) + " indices but " +
                                std::to_string(pr.numel()) + " priorities");
  const int64_t* ix = idx.data_ptr<int64_t>();
  const double* p = pr.data_ptr<double>();
  for (int64_t i = 0; i < idx.numel(); ++i) {
    if (ix[i] < 0 || ix[i] >= size_)
      throw std::out_of_range("[ReplayBuffer.update_priority] index " + std::to_string(ix[i]) + " outside the " +
                              std::to_string(size_) + " stored frames");
    if (!std::isfinite(p[i]))
      throw std::invalid_argument("[ReplayBuffer.update_priority] priority of frame " + std::to_string(ix[i]) + " is not finite");
    const double raw = std::abs(p[i]);
    const double v = std::pow(raw + prioritized_->eps_, prioritized_->alpha_);
    prioritized_->sum_->set(ix[i], v);
    prioritized_->min_->set(ix[i], v);
    prioritized_->max_priority_ = std::max(prioritized_->max_priority_, raw);
  }
}

TensorDict TensorDictReplayBuffer::storage() const {
  if (!data_) return TensorDict({0});
  return data_->slice(0, 0, size_);
}

nn::StateDict TensorDictReplayBuffer::state_dict() const {
  nn::StateDict out;
  if (data_)
    for (const Key& k : data_->keys(true, true)) out.insert("storage." + k.str(), data_->get(k).clone());
  out.insert("_cursor", tensor(cursor_));
  out.insert("_size", tensor(size_));
  out.insert("_capacity", tensor(capacity_));
  std::vector<uint8_t> g = gen_.get_state();
  out.insert("_generator", from_blob(g.data(), {static_cast<int64_t>(g.size())}, TensorOptions().dtype(kUInt8)).clone());
  if (prioritized_) {
    Tensor pr = empty({capacity_}, TensorOptions().dtype(kFloat64));
    double* p = pr.data_ptr<double>();
    for (int64_t i = 0; i < capacity_; ++i) p[i] = prioritized_->sum_->get(i);
    out.insert("_priority", pr);
    out.insert("_max_priority", tensor(prioritized_->max_priority_).to(kFloat64));
  }
  return out;
}

void TensorDictReplayBuffer::load_state_dict(const nn::StateDict& state) {
  auto need = [&](const std::string& k) -> Tensor {
    const Tensor* t = state.find(k);
    if (!t) throw std::invalid_argument("[ReplayBuffer.load_state_dict] missing key '" + k + "'");
    return *t;
  };
  const int64_t cap = need("_capacity").item<int64_t>();
  if (cap != capacity_)
    throw std::invalid_argument("[ReplayBuffer.load_state_dict] saved capacity " + std::to_string(cap) +
                                " differs from this buffer's " + std::to_string(capacity_));
  TensorDict data({capacity_});
  for (const auto& [k, v] : state) {
    if (k.rfind("storage.", 0) != 0) continue;
    if (v.dim() < 1 || v.size(0) != capacity_)
      throw std::invalid_argument("[ReplayBuffer.load_state_dict] '" + k + "' does not hold " + std::to_string(capacity_) + " rows");
    data.set(Key(k.substr(8)), v.clone());
  }
  const Tensor g = need("_generator").contiguous();
  std::vector<uint8_t> gs(g.data_ptr<uint8_t>(), g.data_ptr<uint8_t>() + g.numel());
  Generator gen;
  gen.set_state(gs);
  if (prioritized_) {
    Tensor pr = need("_priority").to(kFloat64).contiguous();
    if (pr.numel() != capacity_) throw std::invalid_argument("[ReplayBuffer.load_state_dict] '_priority' has the wrong size");
    const double* p = pr.data_ptr<double>();
    for (int64_t i = 0; i < capacity_; ++i) {
      prioritized_->sum_->set(i, p[i]);
      prioritized_->min_->set(i, p[i] > 0 ? p[i] : std::numeric_limits<double>::infinity());
    }
    prioritized_->max_priority_ = need("_max_priority").item<double>();
  }
  data_ = data.empty() ? std::nullopt : std::optional<TensorDict>(std::move(data));
  cursor_ = need("_cursor").item<int64_t>();
  size_ = need("_size").item<int64_t>();
  gen_ = gen;
}

}  // namespace troupe::rl
