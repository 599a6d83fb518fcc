// nn::functional attention: scaled_dot_product_attention (torch.nn.functional's, PyTorch 2.x semantics)
// and multi_head_attention_forward (MultiheadAttention's computation, PyTorch 1.13).
#pragma once

#include <optional>
#include <tuple>

#include <troupe/nn/options/transformer.h>
#include <troupe/tensor/tensor.h>

namespace troupe::nn::functional {

/// softmax(q k^T * scale + mask) v with q (..., L, E), k (..., S, E), v (..., S, Ev) -> (..., L, Ev).
/// attn_mask broadcasts to (..., L, S): bool (true: may attend) or float (added). is_causal: position i
/// attends to j <= i (no attn_mask then). dropout_p: dropout on the attention weights (always applied,
/// as torch's functional does). scale: default 1 / sqrt(E).
Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const Tensor& attn_mask = {}, double dropout_p = 0.0, bool is_causal = false,
                                    std::optional<double> scale = std::nullopt);

/// MultiheadAttention's forward on (L, N, E) query and (S, N, kdim / vdim) key / value (or unbatched
/// (L, E), (S, kdim)): returns (output (L, N, E), weights (N, L, S) averaged over heads, or
/// (N, heads, L, S), or undefined without need_weights).
std::tuple<Tensor, Tensor> multi_head_attention_forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                                        const MultiheadAttentionForwardFuncOptions& options);

}  // namespace troupe::nn::functional
