// Options of Embedding, as libtorch's torch/nn/options/embedding.h: the module's EmbeddingOptions and
// EmbeddingFromPretrainedOptions, and the functional's own EmbeddingFuncOptions.
//
//   F::embedding(idx, weight, F::EmbeddingFuncOptions().padding_idx(0).max_norm(1.0));
#pragma once

#include <cstdint>
#include <optional>

#include <troupe/tensor/tensor.h>
#include <troupe/util/options.h>

namespace troupe::nn {

/// Options of Embedding. padding_idx may be negative (counted from the end); `_weight` gives the
/// initial table (shared, not copied) instead of the default N(0, 1) initialisation.
struct EmbeddingOptions {
  EmbeddingOptions(int64_t num_embeddings, int64_t embedding_dim)
      : num_embeddings_(num_embeddings), embedding_dim_(embedding_dim) {}
  TROUPE_ARG(int64_t, num_embeddings);
  TROUPE_ARG(int64_t, embedding_dim);
  TROUPE_ARG(std::optional<int64_t>, padding_idx);
  TROUPE_ARG(std::optional<double>, max_norm);
  TROUPE_ARG(double, norm_type) = 2.;
  TROUPE_ARG(bool, scale_grad_by_freq) = false;
  /// Sparse gradients are not supported: true is rejected by the constructor.
  TROUPE_ARG(bool, sparse) = false;
  TROUPE_ARG(Tensor, _weight);
  TROUPE_ARG(Device, device) = Device(kCPU);
  /// nullopt: the default float dtype.
  TROUPE_ARG(std::optional<ScalarType>, dtype);
};

/// Options of Embedding::from_pretrained (freeze = true: the weight does not require grad).
struct EmbeddingFromPretrainedOptions {
  TROUPE_ARG(bool, freeze) = true;
  TROUPE_ARG(std::optional<int64_t>, padding_idx);
  TROUPE_ARG(std::optional<double>, max_norm);
  TROUPE_ARG(double, norm_type) = 2.;
  TROUPE_ARG(bool, scale_grad_by_freq) = false;
  TROUPE_ARG(bool, sparse) = false;
};

namespace functional {
/// Options of F::embedding (Embedding's options without the sizes and the initial weight).
struct EmbeddingFuncOptions {
  TROUPE_ARG(std::optional<int64_t>, padding_idx);
  TROUPE_ARG(std::optional<double>, max_norm);
  TROUPE_ARG(double, norm_type) = 2.;
  TROUPE_ARG(bool, scale_grad_by_freq) = false;
  /// Sparse gradients are not supported: true is rejected.
  TROUPE_ARG(bool, sparse) = false;
};
}  // namespace functional

}  // namespace troupe::nn
