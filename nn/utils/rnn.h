// Packed sequences (torch.nn.utils.rnn, libtorch's torch::nn::utils::rnn): a batch of sequences of
// different lengths stored step by step without padding, so that RNN, LSTM and GRU run each step on
// the sequences still going.
//
//   auto packed = nn::utils::rnn::pack_padded_sequence(x, lengths, /*batch_first=*/true, false);
//   auto [out, state] = lstm->forward_with_packed_input(packed);
//   auto [padded, out_lengths] = nn::utils::rnn::pad_packed_sequence(out, /*batch_first=*/true);
#pragma once

#include <cstdint>
#include <optional>
#include <tuple>
#include <vector>

#include <troupe/tensor/tensor.h>

namespace troupe::nn::utils::rnn {

/// The inverse of a permutation (int64, 1-D): out[permutation[i]] = i. Undefined in, undefined out.
Tensor invert_permutation(const Tensor& permutation);

/// A batch of sequences packed step by step: data (sum of lengths, *) holds step 0 of every sequence,
/// then step 1 of those at least 2 long, ...; batch_sizes (int64, CPU) counts the sequences of each
/// step (non-increasing); sorted_indices maps the packed order to the original batch order
/// (undefined when the batch was already sorted by decreasing length), unsorted_indices is its inverse.
class PackedSequence {
 public:
  PackedSequence() = default;
  /// unsorted_indices is computed from sorted_indices when left undefined.
  explicit PackedSequence(Tensor data, Tensor batch_sizes, Tensor sorted_indices = {}, Tensor unsorted_indices = {});

  const Tensor& data() const { return data_; }
  const Tensor& batch_sizes() const { return batch_sizes_; }
  const Tensor& sorted_indices() const { return sorted_indices_; }
  const Tensor& unsorted_indices() const { return unsorted_indices_; }
  /// The same sequences with data (and the indices) moved to `device` / converted to `dtype`; batch_sizes
  /// stays on the CPU.
  PackedSequence to(Device device) const;
  PackedSequence to(ScalarType dtype) const;
  bool is_cuda() const { return data_.is_cuda(); }
  bool defined() const { return data_.defined(); }

 private:
  Tensor data_, batch_sizes_, sorted_indices_, unsorted_indices_;
};

/// Packs a padded batch (T, B, *) (or (B, T, *) with batch_first) of sequences with the given lengths
/// (1-D, any integer dtype, on the CPU). enforce_sorted: lengths must be non-increasing; otherwise the
/// batch is sorted here and the order kept in sorted_indices. Differentiable with respect to input.
PackedSequence pack_padded_sequence(Tensor input, Tensor lengths, bool batch_first = false,
                                    bool enforce_sorted = true);

/// The inverse of pack_padded_sequence: the padded batch (T, B, *) (or (B, T, *)) filled with
/// padding_value past each sequence's end, T = total_length when given (at least the longest length),
/// and the lengths (int64), both in the original batch order.
std::tuple<Tensor, Tensor> pad_packed_sequence(const PackedSequence& sequence, bool batch_first = false,
                                               double padding_value = 0.0,
                                               std::optional<int64_t> total_length = std::nullopt);

/// Stacks sequences (L_i, *) into (max L, N, *) (or (N, max L, *)) padded with padding_value.
Tensor pad_sequence(TensorList sequences, bool batch_first = false, double padding_value = 0.0);

/// Packs a list of sequences (L_i, *): pad_sequence then pack_padded_sequence.
PackedSequence pack_sequence(TensorList sequences, bool enforce_sorted = true);

}  // namespace troupe::nn::utils::rnn
