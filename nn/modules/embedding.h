// Embedding (torch.nn.Embedding): a lookup table of num_embeddings vectors of size embedding_dim.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <troupe/nn/cloneable.h>
#include <troupe/nn/module.h>
#include <troupe/nn/pimpl.h>
#include <troupe/nn/options/embedding.h>
#include <troupe/util/options.h>

namespace troupe::nn {

/// weight (num_embeddings, embedding_dim); forward maps integer indices (*) to rows (*, embedding_dim).
class EmbeddingImpl : public Cloneable<EmbeddingImpl> {
 public:
  explicit EmbeddingImpl(const EmbeddingOptions& options);
  EmbeddingImpl(int64_t num_embeddings, int64_t embedding_dim, std::optional<int64_t> padding_idx = std::nullopt);

  /// An Embedding whose weight is `embeddings` (2-D; shared, not copied).
  static std::shared_ptr<EmbeddingImpl> from_pretrained(const Tensor& embeddings,
                                                    const EmbeddingFromPretrainedOptions& options = {});
  static std::shared_ptr<EmbeddingImpl> from_pretrained(const Tensor& embeddings, bool freeze,
                                                    std::optional<int64_t> padding_idx = std::nullopt);

  /// Checks the options, registers weight (options._weight when given) and, without _weight, calls
  /// reset_parameters(). A negative padding_idx is stored counted from the start.
  void reset() override;
  /// PyTorch's default: weight ~ N(0, 1), the padding_idx row zero.
  void reset_parameters();

  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  std::string name() const override { return "Embedding"; }

  EmbeddingOptions options;
  Tensor weight;
};
/// Holder of an EmbeddingImpl; Embedding::from_pretrained(weights) as libtorch.
class Embedding : public ModuleHolder<EmbeddingImpl> {
 public:
  using ModuleHolder<EmbeddingImpl>::ModuleHolder;
  static Embedding from_pretrained(const Tensor& embeddings, const EmbeddingFromPretrainedOptions& options = {}) {
    return Embedding(EmbeddingImpl::from_pretrained(embeddings, options));
  }
  static Embedding from_pretrained(const Tensor& embeddings, bool freeze,
                                   std::optional<int64_t> padding_idx = std::nullopt) {
    return Embedding(EmbeddingImpl::from_pretrained(embeddings, freeze, padding_idx));
  }
};

}  // namespace troupe::nn
