// nn::functional embedding (torch.nn.functional.embedding) with libtorch's signature: EmbeddingFuncOptions
// (nn/options/embedding.h).
#pragma once

#include <troupe/nn/options/embedding.h>
#include <troupe/tensor/tensor.h>

namespace troupe::nn::functional {

/// Rows of weight (num_embeddings, embedding_dim) picked by the integer tensor input (*) ->
/// (*, embedding_dim). padding_idx's row gets no gradient; max_norm renormalises (in place, without
/// history) each looked-up row whose norm_type-norm exceeds it; scale_grad_by_freq divides each
/// row's gradient by the number of times it occurs in input. sparse=true is not supported.
Tensor embedding(const Tensor& input, const Tensor& weight, const EmbeddingFuncOptions& options = {});

}  // namespace troupe::nn::functional
