// MultiheadAttention and the transformer layers (torch/nn/modules/activation.py and transformer.py of
// PyTorch 1.13): construction in PyTorch's order (so that the default initialisation draws the same
// numbers), the residual / LayerNorm arrangement (post-norm, or pre-norm with norm_first) and the checks.
#include <troupe/nn/modules/transformer.h>

#include <cmath>
#include <limits>
#include <stdexcept>

#include <troupe/nn/functional/attention.h>
#include <troupe/nn/init.h>
#include <troupe/tensor/ops.h>

namespace troupe::nn {

namespace {

TensorOptions factory(Device device, const std::optional<ScalarType>& dtype) {
  TensorOptions o = TensorOptions().device(device);
  return dtype ? o.dtype(*dtype) : o;
}

Tensor activate(const TransformerActivation& a, const Tensor& x) {
  if (std::holds_alternative<enumtype::kReLU>(a)) return relu(x);
  if (std::holds_alternative<enumtype::kGELU>(a)) return gelu(x);
  return std::get<std::function<Tensor(const Tensor&)>>(a)(x);
}

Tensor call3(Module& m, const Tensor& a, const Tensor& b, const Tensor& c) {
  return m.call(Args{Value(a), Value(b), Value(c)}).tensor();
}

}  // namespace

// ================================================================== MultiheadAttention

MultiheadAttentionImpl::MultiheadAttentionImpl(const MultiheadAttentionOptions& options_) : options(options_) {
  reset();
}

void MultiheadAttentionImpl::reset() {
  const auto& o = options;
  const int64_t E = o.embed_dim();
  _qkv_same_embed_dim = o.kdim() == E && o.vdim() == E;
  if (o.num_heads() <= 0)
    throw std::invalid_argument("[MultiheadAttention] num_heads must be positive, got " + std::to_string(o.num_heads()));
  head_dim = E / o.num_heads();
  if (head_dim * o.num_heads() != E) throw std::invalid_argument("embed_dim must be divisible by num_heads");
  const TensorOptions t = factory(o.device(), o.dtype());
  if (!_qkv_same_embed_dim) {
    q_proj_weight = register_parameter("q_proj_weight", empty({E, E}, t));
    k_proj_weight = register_parameter("k_proj_weight", empty({E, o.kdim()}, t));
    v_proj_weight = register_parameter("v_proj_weight", empty({E, o.vdim()}, t));
    in_proj_weight = register_parameter("in_proj_weight", Tensor());
  } else {
    in_proj_weight = register_parameter("in_proj_weight", empty({3 * E, E}, t));
    q_proj_weight = register_parameter("q_proj_weight", Tensor());
    k_proj_weight = register_parameter("k_proj_weight", Tensor());
    v_proj_weight = register_parameter("v_proj_weight", Tensor());
  }
  in_proj_bias = register_parameter("in_proj_bias", o.bias() ? empty({3 * E}, t) : Tensor());
  // constructed (and so initialised) before _reset_parameters, as in PyTorch
  out_proj = register_module("out_proj", std::make_shared<NonDynamicallyQuantizableLinearImpl>(
                                             LinearOptions(E, E).bias(o.bias()).device(o.device()).dtype(o.dtype())));
  bias_k = register_parameter("bias_k", o.add_bias_kv() ? empty({1, 1, E}, t) : Tensor());
  bias_v = register_parameter("bias_v", o.add_bias_kv() ? empty({1, 1, E}, t) : Tensor());
  reset_parameters();
}

void MultiheadAttentionImpl::reset_parameters() {
  if (initialization_skipped()) return;
  if (_qkv_same_embed_dim) {
    init::xavier_uniform_(in_proj_weight);
  } else {
    init::xavier_uniform_(q_proj_weight);
    init::xavier_uniform_(k_proj_weight);
    init::xavier_uniform_(v_proj_weight);
  }
  if (in_proj_bias.defined()) {
    init::constant_(in_proj_bias, 0.);
    init::constant_(out_proj->bias, 0.);
  }
  if (bias_k.defined()) init::xavier_normal_(bias_k);
  if (bias_v.defined()) init::xavier_normal_(bias_v);
}

std::tuple<Tensor, Tensor> MultiheadAttentionImpl::forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                                           const Tensor& key_padding_mask, bool need_weights,
                                                           const Tensor& attn_mask, bool average_attn_weights) {
  const bool batched = query.dim() == 3;
  Tensor q = query, k = key, v = value;
  if (options.batch_first() && batched) {
    q = q.transpose(1, 0);
    k = k.transpose(1, 0);
    v = v.transpose(1, 0);
  }
  auto fo = functional::MultiheadAttentionForwardFuncOptions(options.embed_dim(), options.num_heads(), in_proj_weight,
                                                             in_proj_bias, bias_k, bias_v, options.add_zero_attn(),
                                                             options.dropout(), out_proj->weight, out_proj->bias)
                .training(is_training())
                .key_padding_mask(key_padding_mask)
                .need_weights(need_weights)
                .attn_mask(attn_mask)
                .average_attn_weights(average_attn_weights);
  if (!_qkv_same_embed_dim)
    fo.use_separate_proj_weight(true).q_proj_weight(q_proj_weight).k_proj_weight(k_proj_weight).v_proj_weight(
        v_proj_weight);
  auto [out, weights] = functional::multi_head_attention_forward(q, k, v, fo);
  if (options.batch_first() && batched) out = out.transpose(1, 0);
  return {out, weights};
}

// ================================================================== TransformerEncoderLayer

TransformerEncoderLayerImpl::TransformerEncoderLayerImpl(const TransformerEncoderLayerOptions& options_)
    : options(options_) {
  reset();
}

void TransformerEncoderLayerImpl::reset() {
  const auto& o = options;
  self_attn = register_module("self_attn", MultiheadAttention(MultiheadAttentionOptions(o.d_model(), o.nhead())
                                                                  .dropout(o.dropout())
                                                                  .batch_first(o.batch_first())
                                                                  .device(o.device())
                                                                  .dtype(o.dtype())));
  linear1 = register_module("linear1", Linear(LinearOptions(o.d_model(), o.dim_feedforward()).device(o.device()).dtype(o.dtype())));
  dropout = register_module("dropout", Dropout(o.dropout()));
  linear2 = register_module("linear2", Linear(LinearOptions(o.dim_feedforward(), o.d_model()).device(o.device()).dtype(o.dtype())));
  norm1 = register_module("norm1", LayerNorm(LayerNormOptions({o.d_model()}).eps(o.layer_norm_eps()).device(o.device()).dtype(o.dtype())));
  norm2 = register_module("norm2", LayerNorm(LayerNormOptions({o.d_model()}).eps(o.layer_norm_eps()).device(o.device()).dtype(o.dtype())));
  dropout1 = register_module("dropout1", Dropout(o.dropout()));
  dropout2 = register_module("dropout2", Dropout(o.dropout()));
}

void TransformerEncoderLayerImpl::reset_parameters() {
  self_attn->out_proj->reset_parameters();
  self_attn->reset_parameters();
  linear1->reset_parameters();
  linear2->reset_parameters();
  norm1->reset_parameters();
  norm2->reset_parameters();
}

Tensor TransformerEncoderLayerImpl::forward(const Tensor& src, const Tensor& src_mask,
                                            const Tensor& src_key_padding_mask) {
  auto sa = [&](const Tensor& x) {
    return dropout1(std::get<0>(self_attn(x, x, x, src_key_padding_mask, false, src_mask)));
  };
  auto ff = [&](const Tensor& x) { return dropout2(linear2(dropout(activate(options.activation(), linear1(x))))); };
  Tensor x = src;
  if (options.norm_first()) {
    x = x + sa(norm1(x));
    x = x + ff(norm2(x));
  } else {
    x = norm1(x + sa(x));
    x = norm2(x + ff(x));
  }
  return x;
}

// ================================================================== TransformerDecoderLayer

TransformerDecoderLayerImpl::TransformerDecoderLayerImpl(const TransformerDecoderLayerOptions& options_)
    : options(options_) {
  reset();
}

void TransformerDecoderLayerImpl::reset() {
  const auto& o = options;
  auto mha = [&] {
    return MultiheadAttention(MultiheadAttentionOptions(o.d_model(), o.nhead())
                                  .dropout(o.dropout())
                                  .batch_first(o.batch_first())
                                  .device(o.device())
                                  .dtype(o.dtype()));
  };
  self_attn = register_module("self_attn", mha());
  multihead_attn = register_module("multihead_attn", mha());
  linear1 = register_module("linear1", Linear(LinearOptions(o.d_model(), o.dim_feedforward()).device(o.device()).dtype(o.dtype())));
  dropout = register_module("dropout", Dropout(o.dropout()));
  linear2 = register_module("linear2", Linear(LinearOptions(o.dim_feedforward(), o.d_model()).device(o.device()).dtype(o.dtype())));
  auto ln = [&] { return LayerNorm(LayerNormOptions({o.d_model()}).eps(o.layer_norm_eps()).device(o.device()).dtype(o.dtype())); };
  norm1 = register_module("norm1", ln());
  norm2 = register_module("norm2", ln());
  norm3 = register_module("norm3", ln());
  dropout1 = register_module("dropout1", Dropout(o.dropout()));
  dropout2 = register_module("dropout2", Dropout(o.dropout()));
  dropout3 = register_module("dropout3", Dropout(o.dropout()));
}

void TransformerDecoderLayerImpl::reset_parameters() {
  for (auto* m : {self_attn.get(), multihead_attn.get()}) {
    m->out_proj->reset_parameters();
    m->reset_parameters();
  }
  linear1->reset_parameters();
  linear2->reset_parameters();
  norm1->reset_parameters();
  norm2->reset_parameters();
  norm3->reset_parameters();
}

Tensor TransformerDecoderLayerImpl::forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask,
                                            const Tensor& memory_mask, const Tensor& tgt_key_padding_mask,
                                            const Tensor& memory_key_padding_mask) {
  auto sa = [&](const Tensor& x) {
    return dropout1(std::get<0>(self_attn(x, x, x, tgt_key_padding_mask, false, tgt_mask)));
  };
  auto mha = [&](const Tensor& x) {
    return dropout2(std::get<0>(multihead_attn(x, memory, memory, memory_key_padding_mask, false, memory_mask)));
  };
  auto ff = [&](const Tensor& x) { return dropout3(linear2(dropout(activate(options.activation(), linear1(x))))); };
  Tensor x = tgt;
  if (options.norm_first()) {
    x = x + sa(norm1(x));
    x = x + mha(norm2(x));
    x = x + ff(norm3(x));
  } else {
    x = norm1(x + sa(x));
    x = norm2(x + mha(x));
    x = norm3(x + ff(x));
  }
  return x;
}

// ================================================================== TransformerEncoder / Decoder

TransformerEncoderImpl::TransformerEncoderImpl(TransformerEncoderOptions options_) : options(std::move(options_)) {
  reset();
}

void TransformerEncoderImpl::reset() {
  if (options.encoder_layer().is_empty()) throw std::invalid_argument("[TransformerEncoder] encoder_layer is empty");
  layers = register_module("layers", ModuleList());
  for (int64_t i = 0; i < options.num_layers(); ++i) layers->push_back(options.encoder_layer()->clone());
  norm = options.norm() ? options.norm()->clone() : nullptr;
  register_module("norm", norm);
}

Tensor TransformerEncoderImpl::forward(const Tensor& src, const Tensor& src_mask, const Tensor& src_key_padding_mask) {
  Tensor x = src;
  for (size_t i = 0; i < layers->size(); ++i) x = call3(*(*layers)[static_cast<int64_t>(i)], x, src_mask, src_key_padding_mask);
  if (norm) x = (*norm)(x);
  return x;
}

TransformerDecoderImpl::TransformerDecoderImpl(TransformerDecoderOptions options_) : options(std::move(options_)) {
  reset();
}

void TransformerDecoderImpl::reset() {
  if (options.decoder_layer().is_empty()) throw std::invalid_argument("[TransformerDecoder] decoder_layer is empty");
  layers = register_module("layers", ModuleList());
  for (int64_t i = 0; i < options.num_layers(); ++i) layers->push_back(options.decoder_layer()->clone());
  norm = options.norm() ? options.norm()->clone() : nullptr;
  register_module("norm", norm);
}

Tensor TransformerDecoderImpl::forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask,
                                       const Tensor& memory_mask, const Tensor& tgt_key_padding_mask,
                                       const Tensor& memory_key_padding_mask) {
  Tensor x = tgt;
  for (size_t i = 0; i < layers->size(); ++i)
    x = (*layers)[static_cast<int64_t>(i)]
            ->call(Args{Value(x), Value(memory), Value(tgt_mask), Value(memory_mask), Value(tgt_key_padding_mask),
                        Value(memory_key_padding_mask)})
            .tensor();
  if (norm) x = (*norm)(x);
  return x;
}

// ================================================================== Transformer

TransformerImpl::TransformerImpl(TransformerOptions options_) : options(std::move(options_)) { reset(); }

void TransformerImpl::reset() {
  const auto& o = options;
  if (o.custom_encoder()) {
    encoder = o.custom_encoder()->clone();
  } else {
    TransformerEncoderLayer layer(TransformerEncoderLayerOptions(o.d_model(), o.nhead())
                                      .dim_feedforward(o.dim_feedforward())
                                      .dropout(o.dropout())
                                      .activation(o.activation())
                                      .layer_norm_eps(o.layer_norm_eps())
                                      .batch_first(o.batch_first())
                                      .norm_first(o.norm_first())
                                      .device(o.device())
                                      .dtype(o.dtype()));
    LayerNorm norm(LayerNormOptions({o.d_model()}).eps(o.layer_norm_eps()).device(o.device()).dtype(o.dtype()));
    auto enc = std::make_shared<TransformerEncoderImpl>(TransformerEncoderOptions(layer, o.num_encoder_layers()).norm(norm.ptr()));
    bind_forward(*enc);  // its typed forward, reached through call() with the masks
    encoder = enc;
  }
  register_module("encoder", encoder);
  if (o.custom_decoder()) {
    decoder = o.custom_decoder()->clone();
  } else {
    TransformerDecoderLayer layer(TransformerDecoderLayerOptions(o.d_model(), o.nhead())
                                      .dim_feedforward(o.dim_feedforward())
                                      .dropout(o.dropout())
                                      .activation(o.activation())
                                      .layer_norm_eps(o.layer_norm_eps())
                                      .batch_first(o.batch_first())
                                      .norm_first(o.norm_first())
                                      .device(o.device())
                                      .dtype(o.dtype()));
    LayerNorm norm(LayerNormOptions({o.d_model()}).eps(o.layer_norm_eps()).device(o.device()).dtype(o.dtype()));
    auto dec = std::make_shared<TransformerDecoderImpl>(TransformerDecoderOptions(layer, o.num_decoder_layers()).norm(norm.ptr()));
    bind_forward(*dec);
    decoder = dec;
  }
  register_module("decoder", decoder);
  reset_parameters();
}

void TransformerImpl::reset_parameters() {
  if (initialization_skipped()) return;
  for (Tensor& p : parameters())
    if (p.dim() > 1) init::xavier_uniform_(p);
}

Tensor TransformerImpl::forward(const Tensor& src, const Tensor& tgt, const Tensor& src_mask, const Tensor& tgt_mask,
                                const Tensor& memory_mask, const Tensor& src_key_padding_mask,
                                const Tensor& tgt_key_padding_mask, const Tensor& memory_key_padding_mask) {
  const bool batched = src.dim() == 3;
  if (batched && src.size(options.batch_first() ? 0 : 1) != tgt.size(options.batch_first() ? 0 : 1))
    throw std::invalid_argument("the batch number of src and tgt must be equal");
  if (src.size(-1) != options.d_model() || tgt.size(-1) != options.d_model())
    throw std::invalid_argument("the feature number of src and tgt must be equal to d_model");
  Tensor memory = call3(*encoder, src, src_mask, src_key_padding_mask);
  return decoder
      ->call(Args{Value(tgt), Value(memory), Value(tgt_mask), Value(memory_mask), Value(tgt_key_padding_mask),
                  Value(memory_key_padding_mask)})
      .tensor();
}

Tensor TransformerImpl::generate_square_subsequent_mask(int64_t sz, TensorOptions options) {
  return triu(full({sz, sz}, -std::numeric_limits<double>::infinity(), options), 1);
}

}  // namespace troupe::nn
