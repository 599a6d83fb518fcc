// Options of attention and the transformer layers, as libtorch's torch/nn/options/activation.h
// (MultiheadAttentionOptions), transformerlayer.h, transformercoder.h and transformer.h, with PyTorch's
// later options (batch_first, norm_first, layer_norm_eps) added:
//
//   nn::TransformerEncoderLayer layer(nn::TransformerEncoderLayerOptions(256, 8).dim_feedforward(1024)
//                                         .activation(troupe::kGELU).norm_first(true).batch_first(true));
//   nn::TransformerEncoder enc(nn::TransformerEncoderOptions(layer, 6).norm(nn::LayerNorm(nn::LayerNormOptions({256}))));
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <variant>

#include <troupe/tensor/tensor.h>
#include <troupe/util/enum.h>
#include <troupe/util/options.h>

namespace troupe::nn {

class Module;

/// The feed-forward activation of a transformer layer: troupe::kReLU, troupe::kGELU or any function.
using TransformerActivation = std::variant<enumtype::kReLU, enumtype::kGELU, std::function<Tensor(const Tensor&)>>;

/// Options of MultiheadAttention: `MultiheadAttentionOptions(8, 2).kdim(4).vdim(6).batch_first(true)`.
struct MultiheadAttentionOptions {
  MultiheadAttentionOptions(int64_t embed_dim, int64_t num_heads)
      : embed_dim_(embed_dim), num_heads_(num_heads), kdim_(embed_dim), vdim_(embed_dim) {}
  TROUPE_ARG(int64_t, embed_dim);
  TROUPE_ARG(int64_t, num_heads);
  /// Dropout on the attention weights (training mode).
  TROUPE_ARG(double, dropout) = 0.0;
  /// Biases of the input and output projections.
  TROUPE_ARG(bool, bias) = true;
  /// Learned bias_k, bias_v appended to the key and value sequences.
  TROUPE_ARG(bool, add_bias_kv) = false;
  /// A zero key and value appended to the sequences.
  TROUPE_ARG(bool, add_zero_attn) = false;
  /// Features of key and value (default embed_dim; others give separate q/k/v projection weights).
  TROUPE_ARG(int64_t, kdim);
  TROUPE_ARG(int64_t, vdim);
  /// Inputs and outputs are (batch, seq, feature).
  TROUPE_ARG(bool, batch_first) = false;
  TROUPE_ARG(Device, device) = Device(kCPU);
  TROUPE_ARG(std::optional<ScalarType>, dtype);
};

/// Options of TransformerEncoderLayer.
struct TransformerEncoderLayerOptions {
  TransformerEncoderLayerOptions(int64_t d_model, int64_t nhead) : d_model_(d_model), nhead_(nhead) {}
  TROUPE_ARG(int64_t, d_model);
  TROUPE_ARG(int64_t, nhead);
  TROUPE_ARG(int64_t, dim_feedforward) = 2048;
  TROUPE_ARG(double, dropout) = 0.1;
  TROUPE_ARG(TransformerActivation, activation) = enumtype::kReLU{};
  TROUPE_ARG(double, layer_norm_eps) = 1e-5;
  TROUPE_ARG(bool, batch_first) = false;
  /// LayerNorm before attention and feed-forward (pre-norm) instead of after the residual adds.
  TROUPE_ARG(bool, norm_first) = false;
  TROUPE_ARG(Device, device) = Device(kCPU);
  TROUPE_ARG(std::optional<ScalarType>, dtype);
};

/// Options of TransformerDecoderLayer.
struct TransformerDecoderLayerOptions {
  TransformerDecoderLayerOptions(int64_t d_model, int64_t nhead) : d_model_(d_model), nhead_(nhead) {}
  TROUPE_ARG(int64_t, d_model);
  TROUPE_ARG(int64_t, nhead);
  TROUPE_ARG(int64_t, dim_feedforward) = 2048;
  TROUPE_ARG(double, dropout) = 0.1;
  TROUPE_ARG(TransformerActivation, activation) = enumtype::kReLU{};
  TROUPE_ARG(double, layer_norm_eps) = 1e-5;
  TROUPE_ARG(bool, batch_first) = false;
  TROUPE_ARG(bool, norm_first) = false;
  TROUPE_ARG(Device, device) = Device(kCPU);
  TROUPE_ARG(std::optional<ScalarType>, dtype);
};

/// Options of Transformer (PyTorch's defaults: d_model 512, 8 heads, 6 + 6 layers, feed-forward 2048).
struct TransformerOptions {
  TransformerOptions() = default;
  TransformerOptions(int64_t d_model, int64_t nhead) : d_model_(d_model), nhead_(nhead) {}
  TransformerOptions(int64_t d_model, int64_t nhead, int64_t num_encoder_layers, int64_t num_decoder_layers)
      : d_model_(d_model),
        nhead_(nhead),
        num_encoder_layers_(num_encoder_layers),
        num_decoder_layers_(num_decoder_layers) {}
  TROUPE_ARG(int64_t, d_model) = 512;
  TROUPE_ARG(int64_t, nhead) = 8;
  TROUPE_ARG(int64_t, num_encoder_layers) = 6;
  TROUPE_ARG(int64_t, num_decoder_layers) = 6;
  TROUPE_ARG(int64_t, dim_feedforward) = 2048;
  TROUPE_ARG(double, dropout) = 0.1;
  TROUPE_ARG(TransformerActivation, activation) = enumtype::kReLU{};
  /// Modules used instead of the default encoder / decoder (called as encoder(src, mask, key_padding_mask)
  /// and decoder(tgt, memory, tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask)).
  TROUPE_ARG(std::shared_ptr<Module>, custom_encoder);
  TROUPE_ARG(std::shared_ptr<Module>, custom_decoder);
  TROUPE_ARG(double, layer_norm_eps) = 1e-5;
  TROUPE_ARG(bool, batch_first) = false;
  TROUPE_ARG(bool, norm_first) = false;
  TROUPE_ARG(Device, device) = Device(kCPU);
  TROUPE_ARG(std::optional<ScalarType>, dtype);
};

namespace functional {
/// Options of F::multi_head_attention_forward (libtorch's MultiheadAttentionForwardFuncOptions): the
/// weights of MultiheadAttention and the call's masks and flags.
struct MultiheadAttentionForwardFuncOptions {
  MultiheadAttentionForwardFuncOptions(int64_t embed_dim_to_check, int64_t num_heads, Tensor in_proj_weight,
                                       Tensor in_proj_bias, Tensor bias_k, Tensor bias_v, bool add_zero_attn,
                                       double dropout_p, Tensor out_proj_weight, Tensor out_proj_bias)
      : embed_dim_to_check_(embed_dim_to_check),
        num_heads_(num_heads),
        in_proj_weight_(std::move(in_proj_weight)),
        in_proj_bias_(std::move(in_proj_bias)),
        bias_k_(std::move(bias_k)),
        bias_v_(std::move(bias_v)),
        add_zero_attn_(add_zero_attn),
        dropout_p_(dropout_p),
        out_proj_weight_(std::move(out_proj_weight)),
        out_proj_bias_(std::move(out_proj_bias)) {}
  TROUPE_ARG(int64_t, embed_dim_to_check);
  TROUPE_ARG(int64_t, num_heads);
  TROUPE_ARG(Tensor, in_proj_weight);
  TROUPE_ARG(Tensor, in_proj_bias);
  TROUPE_ARG(Tensor, bias_k);
  TROUPE_ARG(Tensor, bias_v);
  TROUPE_ARG(bool, add_zero_attn);
  TROUPE_ARG(double, dropout_p);
  TROUPE_ARG(Tensor, out_proj_weight);
  TROUPE_ARG(Tensor, out_proj_bias);
  TROUPE_ARG(bool, training) = true;
  /// (N, S) bool (true: ignore that key) or float (added).
  TROUPE_ARG(Tensor, key_padding_mask);
  TROUPE_ARG(bool, need_weights) = true;
  /// (L, S) or (N * num_heads, L, S), bool (true: not allowed to attend) or float (added).
  TROUPE_ARG(Tensor, attn_mask);
  TROUPE_ARG(bool, use_separate_proj_weight) = false;
  TROUPE_ARG(Tensor, q_proj_weight);
  TROUPE_ARG(Tensor, k_proj_weight);
  TROUPE_ARG(Tensor, v_proj_weight);
  /// Attention weights averaged over the heads (N, L, S), else (N, num_heads, L, S).
  TROUPE_ARG(bool, average_attn_weights) = true;
};
}  // namespace functional

}  // namespace troupe::nn
