// Embedding (torch/nn/modules/sparse.py).
#include <troupe/nn/modules/embedding.h>

#include <stdexcept>

#include <troupe/nn/functional/embedding.h>
#include <troupe/nn/init.h>
#include <troupe/util/python_format.h>
#include <troupe/tensor/autograd.h>
#include <troupe/tensor/ops.h>

namespace troupe::nn {

EmbeddingImpl::EmbeddingImpl(const EmbeddingOptions& options_) : options(options_) { reset(); }

EmbeddingImpl::EmbeddingImpl(int64_t num_embeddings, int64_t embedding_dim, std::optional<int64_t> padding_idx)
    : EmbeddingImpl(EmbeddingOptions(num_embeddings, embedding_dim).padding_idx(padding_idx)) {}

void EmbeddingImpl::reset() {
  const int64_t n = options.num_embeddings(), d = options.embedding_dim();
  if (n < 0 || d < 0)
    throw std::invalid_argument("[Embedding] num_embeddings and embedding_dim must be non-negative, got " +
                                std::to_string(n) + " and " + std::to_string(d));
  if (options.sparse())
    throw std::invalid_argument("[Embedding] sparse=True is not supported: troupe has no sparse gradients "
                                "(use sparse=False)");
  if (auto p = options.padding_idx()) {
    if (*p >= n || *p < -n) throw std::invalid_argument("Padding_idx must be within num_embeddings");
    if (*p < 0) options.padding_idx(n + *p);
  }
  if (options._weight().defined()) {
    const Tensor& w = options._weight();
    if (w.dim() != 2 || w.size(0) != n || w.size(1) != d)
      throw std::invalid_argument("Shape of weight does not match num_embeddings and embedding_dim");
    weight = register_parameter("weight", Parameter(w));  // shares w's data, as nn.Parameter(_weight)
  } else {
    TensorOptions opts = TensorOptions().device(options.device());
    if (options.dtype()) opts = opts.dtype(*options.dtype());
    weight = register_parameter("weight", empty({n, d}, opts));
    reset_parameters();
  }
}

void EmbeddingImpl::reset_parameters() {
  if (initialization_skipped()) return;
  init::normal_(weight);
  if (auto p = options.padding_idx()) {
    NoGradGuard no_grad;
    weight.select(0, *p).fill_(0);
  }
}

std::shared_ptr<EmbeddingImpl> EmbeddingImpl::from_pretrained(const Tensor& embeddings,
                                                      const EmbeddingFromPretrainedOptions& o) {
  if (!embeddings.defined() || embeddings.dim() != 2)
    throw std::invalid_argument("Embeddings parameter is expected to be 2-dimensional");
  auto m = std::make_shared<EmbeddingImpl>(EmbeddingOptions(embeddings.size(0), embeddings.size(1))
                                           ._weight(embeddings)
                                           .padding_idx(o.padding_idx())
                                           .max_norm(o.max_norm())
                                           .norm_type(o.norm_type())
                                           .scale_grad_by_freq(o.scale_grad_by_freq())
                                           .sparse(o.sparse()));
  m->weight.requires_grad_(!o.freeze());
  return m;
}

std::shared_ptr<EmbeddingImpl> EmbeddingImpl::from_pretrained(const Tensor& embeddings, bool freeze,
                                                      std::optional<int64_t> padding_idx) {
  return from_pretrained(embeddings, EmbeddingFromPretrainedOptions().freeze(freeze).padding_idx(padding_idx));
}

Tensor EmbeddingImpl::forward(const Tensor& input) {
  return functional::embedding(input, weight,
                               functional::EmbeddingFuncOptions()
                                   .padding_idx(options.padding_idx())
                                   .max_norm(options.max_norm())
                                   .norm_type(options.norm_type())
                                   .scale_grad_by_freq(options.scale_grad_by_freq())
                                   .sparse(options.sparse()));
}

std::string EmbeddingImpl::extra_repr() const {
  std::string s = std::to_string(options.num_embeddings()) + ", " + std::to_string(options.embedding_dim());
  if (options.padding_idx()) s += ", padding_idx=" + std::to_string(*options.padding_idx());
  if (options.max_norm()) s += ", max_norm=" + util::py_float(*options.max_norm());
  if (options.norm_type() != 2) s += ", norm_type=" + util::py_float(options.norm_type());
  if (options.scale_grad_by_freq()) s += ", scale_grad_by_freq=True";
  if (options.sparse()) s += ", sparse=True";
  return s;
}

}  // namespace troupe::nn
