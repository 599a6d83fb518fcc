// Attention and transformer layers (torch.nn.MultiheadAttention, TransformerEncoderLayer,
// TransformerDecoderLayer, TransformerEncoder, TransformerDecoder, Transformer) with PyTorch's parameter
// names, default initialisation, printed forms and libtorch's forward signatures:
//
//   nn::MultiheadAttention mha(nn::MultiheadAttentionOptions(16, 4).batch_first(true));
//   auto [out, weights] = mha(q, k, v);                 // weights averaged over the heads
//   nn::TransformerEncoderLayer layer(nn::TransformerEncoderLayerOptions(16, 4).dim_feedforward(64));
//   Tensor y = layer(x, /*src_mask=*/Tensor(), /*src_key_padding_mask=*/pad);
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <tuple>

#include <troupe/nn/cloneable.h>
#include <troupe/nn/module.h>
#include <troupe/nn/modules/container.h>
#include <troupe/nn/modules/dropout.h>
#include <troupe/nn/modules/linear.h>
#include <troupe/nn/modules/normalization.h>
#include <troupe/nn/options/transformer.h>
#include <troupe/nn/pimpl.h>

namespace troupe::nn {

/// MultiheadAttention's output projection: a Linear printed as PyTorch's NonDynamicallyQuantizableLinear.
class NonDynamicallyQuantizableLinearImpl : public LinearImpl {
 public:
  using LinearImpl::LinearImpl;
  std::string name() const override { return "NonDynamicallyQuantizableLinear"; }
};

/// Attention over num_heads heads: in_proj_weight (3E, E) (or q/k/v_proj_weight when kdim or vdim differ
/// from E), in_proj_bias (3E), out_proj, optional bias_k / bias_v (1, 1, E).
class MultiheadAttentionImpl : public Cloneable<MultiheadAttentionImpl> {
 public:
  explicit MultiheadAttentionImpl(const MultiheadAttentionOptions& options);
  MultiheadAttentionImpl(int64_t embed_dim, int64_t num_heads)
      : MultiheadAttentionImpl(MultiheadAttentionOptions(embed_dim, num_heads)) {}
  void reset() override;
  /// PyTorch's: xavier_uniform_ on the projection weights, zero biases, xavier_normal_ on bias_k / bias_v
  /// (after out_proj's own Linear initialisation at construction).
  void reset_parameters();
  /// query (L, N, E), key (S, N, kdim), value (S, N, vdim) ((N, L, E) ... with batch_first; or unbatched).
  /// key_padding_mask (N, S): true (or -inf) ignores that key. attn_mask (L, S) or (N*heads, L, S): true
  /// forbids. Returns (output like query, weights (N, L, S) averaged over heads, or (N, heads, L, S)
  /// without average_attn_weights, undefined without need_weights).
  std::tuple<Tensor, Tensor> forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                     const Tensor& key_padding_mask = {}, bool need_weights = true,
                                     const Tensor& attn_mask = {}, bool average_attn_weights = true);
  TROUPE_FORWARD_HAS_DEFAULT_ARGS({3, ::troupe::nn::Value(Tensor())}, {4, ::troupe::nn::Value(true)},
                                  {5, ::troupe::nn::Value(Tensor())}, {6, ::troupe::nn::Value(true)})
  std::string name() const override { return "MultiheadAttention"; }

  MultiheadAttentionOptions options;
  bool _qkv_same_embed_dim = true;
  int64_t head_dim = 0;
  Tensor in_proj_weight, in_proj_bias, q_proj_weight, k_proj_weight, v_proj_weight, bias_k, bias_v;
  std::shared_ptr<NonDynamicallyQuantizableLinearImpl> out_proj;
};
TROUPE_MODULE(MultiheadAttention);

/// Self-attention and a feed-forward block, each with a residual add and LayerNorm (after, or before with
/// norm_first).
class TransformerEncoderLayerImpl : public Cloneable<TransformerEncoderLayerImpl> {
 public:
  explicit TransformerEncoderLayerImpl(const TransformerEncoderLayerOptions& options);
  TransformerEncoderLayerImpl(int64_t d_model, int64_t nhead)
      : TransformerEncoderLayerImpl(TransformerEncoderLayerOptions(d_model, nhead)) {}
  void reset() override;
  /// Re-initialises every submodule as at construction.
  void reset_parameters();
  /// src (S, N, E) ((N, S, E) with batch_first, or (S, E)); masks as MultiheadAttention's.
  Tensor forward(const Tensor& src, const Tensor& src_mask = {}, const Tensor& src_key_padding_mask = {});
  TROUPE_FORWARD_HAS_DEFAULT_ARGS({1, ::troupe::nn::Value(Tensor())}, {2, ::troupe::nn::Value(Tensor())})
  std::string name() const override { return "TransformerEncoderLayer"; }

  TransformerEncoderLayerOptions options;
  MultiheadAttention self_attn = nullptr;
  Linear linear1 = nullptr;
  Dropout dropout = nullptr;
  Linear linear2 = nullptr;
  LayerNorm norm1 = nullptr;
  LayerNorm norm2 = nullptr;
  Dropout dropout1 = nullptr;
  Dropout dropout2 = nullptr;
};
TROUPE_MODULE(TransformerEncoderLayer);

/// Self-attention, attention over the encoder's memory and a feed-forward block.
class TransformerDecoderLayerImpl : public Cloneable<TransformerDecoderLayerImpl> {
 public:
  explicit TransformerDecoderLayerImpl(const TransformerDecoderLayerOptions& options);
  TransformerDecoderLayerImpl(int64_t d_model, int64_t nhead)
      : TransformerDecoderLayerImpl(TransformerDecoderLayerOptions(d_model, nhead)) {}
  void reset() override;
  void reset_parameters();
  /// tgt (T, N, E), memory (S, N, E) (batch first with batch_first).
  Tensor forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask = {}, const Tensor& memory_mask = {},
                 const Tensor& tgt_key_padding_mask = {}, const Tensor& memory_key_padding_mask = {});
  TROUPE_FORWARD_HAS_DEFAULT_ARGS({2, ::troupe::nn::Value(Tensor())}, {3, ::troupe::nn::Value(Tensor())},
                                  {4, ::troupe::nn::Value(Tensor())}, {5, ::troupe::nn::Value(Tensor())})
  std::string name() const override { return "TransformerDecoderLayer"; }

  TransformerDecoderLayerOptions options;
  MultiheadAttention self_attn = nullptr;
  MultiheadAttention multihead_attn = nullptr;
  Linear linear1 = nullptr;
  Dropout dropout = nullptr;
  Linear linear2 = nullptr;
  LayerNorm norm1 = nullptr;
  LayerNorm norm2 = nullptr;
  LayerNorm norm3 = nullptr;
  Dropout dropout1 = nullptr;
  Dropout dropout2 = nullptr;
  Dropout dropout3 = nullptr;
};
TROUPE_MODULE(TransformerDecoderLayer);

/// Options of TransformerEncoder: num_layers deep copies of encoder_layer, then norm (optional).
struct TransformerEncoderOptions {
  TransformerEncoderOptions(TransformerEncoderLayer encoder_layer, int64_t num_layers)
      : encoder_layer_(std::move(encoder_layer)), num_layers_(num_layers) {}
  TransformerEncoderOptions(const TransformerEncoderLayerOptions& layer_options, int64_t num_layers)
      : encoder_layer_(TransformerEncoderLayer(layer_options)), num_layers_(num_layers) {}
  TROUPE_ARG(TransformerEncoderLayer, encoder_layer) = nullptr;
  TROUPE_ARG(int64_t, num_layers);
  /// A final normalisation module (a LayerNorm), or null.
  TROUPE_ARG(std::shared_ptr<Module>, norm);
};

/// Options of TransformerDecoder.
struct TransformerDecoderOptions {
  TransformerDecoderOptions(TransformerDecoderLayer decoder_layer, int64_t num_layers)
      : decoder_layer_(std::move(decoder_layer)), num_layers_(num_layers) {}
  TransformerDecoderOptions(const TransformerDecoderLayerOptions& layer_options, int64_t num_layers)
      : decoder_layer_(TransformerDecoderLayer(layer_options)), num_layers_(num_layers) {}
  TROUPE_ARG(TransformerDecoderLayer, decoder_layer) = nullptr;
  TROUPE_ARG(int64_t, num_layers);
  TROUPE_ARG(std::shared_ptr<Module>, norm);
};

/// A stack of encoder layers (`layers`, a ModuleList) and an optional final `norm`.
class TransformerEncoderImpl : public Cloneable<TransformerEncoderImpl> {
 public:
  explicit TransformerEncoderImpl(TransformerEncoderOptions options);
  void reset() override;
  Tensor forward(const Tensor& src, const Tensor& src_mask = {}, const Tensor& src_key_padding_mask = {});
  TROUPE_FORWARD_HAS_DEFAULT_ARGS({1, ::troupe::nn::Value(Tensor())}, {2, ::troupe::nn::Value(Tensor())})
  std::string name() const override { return "TransformerEncoder"; }

  TransformerEncoderOptions options;
  ModuleList layers = nullptr;
  std::shared_ptr<Module> norm;
};
TROUPE_MODULE(TransformerEncoder);

/// A stack of decoder layers and an optional final `norm`.
class TransformerDecoderImpl : public Cloneable<TransformerDecoderImpl> {
 public:
  explicit TransformerDecoderImpl(TransformerDecoderOptions options);
  void reset() override;
  Tensor forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask = {}, const Tensor& memory_mask = {},
                 const Tensor& tgt_key_padding_mask = {}, const Tensor& memory_key_padding_mask = {});
  TROUPE_FORWARD_HAS_DEFAULT_ARGS({2, ::troupe::nn::Value(Tensor())}, {3, ::troupe::nn::Value(Tensor())},
                                  {4, ::troupe::nn::Value(Tensor())}, {5, ::troupe::nn::Value(Tensor())})
  std::string name() const override { return "TransformerDecoder"; }

  TransformerDecoderOptions options;
  ModuleList layers = nullptr;
  std::shared_ptr<Module> norm;
};
TROUPE_MODULE(TransformerDecoder);

/// The encoder-decoder transformer of "Attention Is All You Need": encoder and decoder stacks, each
/// ending in a LayerNorm; weights of two or more dims xavier_uniform_ initialised.
class TransformerImpl : public Cloneable<TransformerImpl> {
 public:
  explicit TransformerImpl(TransformerOptions options = {});
  void reset() override;
  /// xavier_uniform_ on every parameter of two or more dims.
  void reset_parameters();
  /// src (S, N, E), tgt (T, N, E) (batch first with batch_first) -> (T, N, E).
  Tensor forward(const Tensor& src, const Tensor& tgt, const Tensor& src_mask = {}, const Tensor& tgt_mask = {},
                 const Tensor& memory_mask = {}, const Tensor& src_key_padding_mask = {},
                 const Tensor& tgt_key_padding_mask = {}, const Tensor& memory_key_padding_mask = {});
  TROUPE_FORWARD_HAS_DEFAULT_ARGS({2, ::troupe::nn::Value(Tensor())}, {3, ::troupe::nn::Value(Tensor())},
                                  {4, ::troupe::nn::Value(Tensor())}, {5, ::troupe::nn::Value(Tensor())},
                                  {6, ::troupe::nn::Value(Tensor())}, {7, ::troupe::nn::Value(Tensor())})
  /// (sz, sz) float: 0 on and below the diagonal, -inf above (a causal mask).
  static Tensor generate_square_subsequent_mask(int64_t sz, TensorOptions options = {});
  std::string name() const override { return "Transformer"; }

  TransformerOptions options;
  std::shared_ptr<Module> encoder;
  std::shared_ptr<Module> decoder;
};
TROUPE_MODULE(Transformer);

}  // namespace troupe::nn
