// Packed sequences (torch/nn/utils/rnn.py of PyTorch 1.13): packing and padding are compositions of
// narrow, cat and stack, so gradients flow through them.
#include <troupe/nn/utils/rnn.h>

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <string>

#include <troupe/tensor/ops.h>

namespace troupe::nn::utils::rnn {

Tensor invert_permutation(const Tensor& permutation) {
  if (!permutation.defined()) return {};
  std::vector<int64_t> p = permutation.to_vector<int64_t>();
  std::vector<int64_t> inv(p.size());
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] < 0 || p[i] >= static_cast<int64_t>(p.size()))
      throw std::invalid_argument("[invert_permutation] index " + std::to_string(p[i]) + " out of range for " +
                                  std::to_string(p.size()) + " elements");
    inv[static_cast<size_t>(p[i])] = static_cast<int64_t>(i);
  }
  return tensor(inv, TensorOptions().dtype(kInt64)).to(permutation.device());
}

PackedSequence::PackedSequence(Tensor data, Tensor batch_sizes, Tensor sorted_indices, Tensor unsorted_indices)
    : data_(std::move(data)),
      batch_sizes_(std::move(batch_sizes)),
      sorted_indices_(std::move(sorted_indices)),
      unsorted_indices_(std::move(unsorted_indices)) {
  if (!unsorted_indices_.defined()) unsorted_indices_ = invert_permutation(sorted_indices_);
}

PackedSequence PackedSequence::to(Device device) const {
  auto move = [&](const Tensor& t) { return t.defined() ? t.to(device) : t; };
  return PackedSequence(move(data_), batch_sizes_, move(sorted_indices_), move(unsorted_indices_));
}

PackedSequence PackedSequence::to(ScalarType dtype) const {
  return PackedSequence(data_.to(dtype), batch_sizes_, sorted_indices_, unsorted_indices_);
}

PackedSequence pack_padded_sequence(Tensor input, Tensor lengths, bool batch_first, bool enforce_sorted) {
  if (lengths.dim() != 1)
    throw std::invalid_argument("[pack_padded_sequence] lengths must be 1-D, got " + std::to_string(lengths.dim()) +
                                " dims");
  std::vector<int64_t> len = lengths.to_vector<int64_t>();
  Tensor sorted_indices;
  if (enforce_sorted) {
    for (size_t i = 1; i < len.size(); ++i)
      if (len[i] > len[i - 1])
        throw std::invalid_argument(
            "`lengths` array must be sorted in decreasing order when `enforce_sorted` is True. You can pass "
            "`enforce_sorted=False` to pack_padded_sequence and/or pack_sequence to sidestep this requirement if "
            "you do not need ONNX exportability.");
  } else {
    std::vector<int64_t> order(len.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return len[a] > len[b]; });
    std::vector<int64_t> sorted(len.size());
    for (size_t i = 0; i < order.size(); ++i) sorted[i] = len[static_cast<size_t>(order[i])];
    len = sorted;
    sorted_indices = tensor(order, TensorOptions().dtype(kInt64)).to(input.device());
    input = input.index_select(batch_first ? 0 : 1, sorted_indices);
  }
  if (input.dim() < 2)
    throw std::invalid_argument("[pack_padded_sequence] input must have at least 2 dims, got " +
                                std::to_string(input.dim()));
  if (batch_first) input = input.transpose(0, 1);  // (T, B, *)
  const int64_t T = input.size(0), B = input.size(1);
  if (static_cast<int64_t>(len.size()) != B)
    throw std::invalid_argument("Expected `len(lengths)` to be equal to batch_size, but got " +
                                std::to_string(len.size()) + " (batch_size=" + std::to_string(B) + ")");
  if (B == 0 || len.back() <= 0)
    throw std::invalid_argument(
        "Length of all samples has to be greater than 0, but found an element in 'lengths' that is <= 0");
  if (len.front() > T)
    throw std::invalid_argument("[pack_padded_sequence] the longest length " + std::to_string(len.front()) +
                                " exceeds the padded sequence length " + std::to_string(T));
  std::vector<int64_t> batch_sizes;
  std::vector<Tensor> steps;
  for (int64_t t = 0; t < len.front(); ++t) {
    int64_t bs = 0;
    while (bs < B && len[static_cast<size_t>(bs)] > t) ++bs;
    batch_sizes.push_back(bs);
    steps.push_back(input.select(0, t).narrow(0, 0, bs));
  }
  return PackedSequence(cat(steps, 0), tensor(batch_sizes, TensorOptions().dtype(kInt64)), sorted_indices);
}

std::tuple<Tensor, Tensor> pad_packed_sequence(const PackedSequence& sequence, bool batch_first,
                                               double padding_value, std::optional<int64_t> total_length) {
  const Tensor& data = sequence.data();
  std::vector<int64_t> bs = sequence.batch_sizes().to_vector<int64_t>();
  const int64_t max_len = static_cast<int64_t>(bs.size());
  int64_t T = max_len;
  if (total_length) {
    if (*total_length < max_len)
      throw std::invalid_argument(
          "Expected total_length to be at least the length of the longest sequence in input, but got "
          "total_length=" +
          std::to_string(*total_length) + " and max sequence length being " + std::to_string(max_len));
    T = *total_length;
  }
  const int64_t B = bs.empty() ? 0 : bs.front();
  std::vector<int64_t> row_shape = data.sizes().vec();  // (B, *) of one step
  row_shape[0] = B;
  std::vector<Tensor> steps;
  int64_t offset = 0;
  for (int64_t t = 0; t < T; ++t) {
    const int64_t n = t < max_len ? bs[static_cast<size_t>(t)] : 0;
    Tensor step = data.narrow(0, offset, n);
    offset += n;
    if (n < B) {
      std::vector<int64_t> pad_shape = row_shape;
      pad_shape[0] = B - n;
      step = cat({step, full(pad_shape, padding_value, data.options())}, 0);
    }
    steps.push_back(step);
  }
  Tensor out = steps.empty() ? full(std::vector<int64_t>{0, 0}, padding_value, data.options())
                             : stack(steps, batch_first ? 1 : 0);
  std::vector<int64_t> lengths(static_cast<size_t>(B), 0);
  for (int64_t t = 0; t < max_len; ++t)
    for (int64_t b = 0; b < bs[static_cast<size_t>(t)]; ++b) ++lengths[static_cast<size_t>(b)];
  Tensor len = tensor(lengths, TensorOptions().dtype(kInt64));
  if (sequence.unsorted_indices().defined()) {
    out = out.index_select(batch_first ? 0 : 1, sequence.unsorted_indices());
    len = len.index_select(0, sequence.unsorted_indices().to(Device(kCPU)));
  }
  return {out, len};
}

Tensor pad_sequence(TensorList sequences, bool batch_first, double padding_value) {
  if (sequences.empty()) throw std::invalid_argument("[pad_sequence] received an empty list of sequences");
  int64_t max_len = 0;
  for (const Tensor& s : sequences) {
    if (s.dim() < 1) throw std::invalid_argument("[pad_sequence] every sequence needs at least one dim");
    max_len = std::max(max_len, s.size(0));
  }
  std::vector<Tensor> padded;
  for (const Tensor& s : sequences) {
    const std::vector<int64_t> a = s.sizes().vec(), b = sequences[0].sizes().vec();
    if (!std::equal(a.begin() + 1, a.end(), b.begin() + 1, b.end()))
      throw std::invalid_argument("[pad_sequence] sequences have different trailing shapes");
    if (s.size(0) == max_len) {
      padded.push_back(s);
    } else {
      std::vector<int64_t> pad_shape = s.sizes().vec();
      pad_shape[0] = max_len - s.size(0);
      padded.push_back(cat({s, full(pad_shape, padding_value, s.options())}, 0));
    }
  }
  return stack(padded, batch_first ? 0 : 1);
}

PackedSequence pack_sequence(TensorList sequences, bool enforce_sorted) {
  std::vector<int64_t> lengths;
  for (const Tensor& s : sequences) lengths.push_back(s.size(0));
  return pack_padded_sequence(pad_sequence(sequences), tensor(lengths, TensorOptions().dtype(kInt64)),
                              /*batch_first=*/false, enforce_sorted);
}

}  // namespace troupe::nn::utils::rnn
