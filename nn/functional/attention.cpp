// scaled_dot_product_attention and multi_head_attention_forward (torch/nn/functional.py): compositions of
// linear, bmm / matmul, softmax and dropout, with PyTorch's argument checks and mask conventions.
#include <troupe/nn/functional/attention.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include <troupe/tensor/ops.h>
#include <troupe/tensor/warning.h>
#include <troupe/util/python_format.h>

namespace troupe::nn::functional {

namespace {

const double kNegInf = -std::numeric_limits<double>::infinity();

std::string sizes_str(const Tensor& t) { return "torch.Size(" + list_str(t.sizes()) + ")"; }

/// A float additive mask from a bool one (true -> -inf where `true_is_masked`, else where false).
Tensor additive_mask(const Tensor& mask, ScalarType dtype, bool true_is_masked) {
  if (mask.dtype() != kBool) return mask;
  Tensor masked = true_is_masked ? mask : logical_not(mask);
  return zeros(mask.sizes(), TensorOptions().dtype(dtype).device(mask.device())).masked_fill(masked, kNegInf);
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const Tensor& attn_mask, double dropout_p, bool is_causal,
                                    std::optional<double> scale) {
  if (query.dim() < 2 || key.dim() < 2 || value.dim() < 2)
    throw std::invalid_argument("[scaled_dot_product_attention] query, key and value need at least 2 dims, got " +
                                std::to_string(query.dim()) + ", " + std::to_string(key.dim()) + ", " +
                                std::to_string(value.dim()));
  if (query.size(-1) != key.size(-1))
    throw std::invalid_argument("[scaled_dot_product_attention] query has " + std::to_string(query.size(-1)) +
                                " features per position, key " + std::to_string(key.size(-1)));
  if (key.size(-2) != value.size(-2))
    throw std::invalid_argument("[scaled_dot_product_attention] key has " + std::to_string(key.size(-2)) +
                                " positions, value " + std::to_string(value.size(-2)));
  if (is_causal && attn_mask.defined())
    throw std::invalid_argument("_scaled_dot_product_attention: Explicit attn_mask should not be set when is_causal=True");
  if (dropout_p < 0 || dropout_p > 1)
    throw std::invalid_argument("dropout probability has to be between 0 and 1, but got " + util::py_float(dropout_p));
  const int64_t L = query.size(-2), S = key.size(-2);
  const double s = scale ? *scale : 1.0 / std::sqrt(static_cast<double>(query.size(-1)));
  Tensor attn = matmul(query, key.transpose(-2, -1)) * s;
  if (is_causal) {
    Tensor keep = tril(ones({L, S}, TensorOptions().dtype(kBool).device(query.device())));
    attn = attn.masked_fill(logical_not(keep), kNegInf);
  } else if (attn_mask.defined()) {
    if (attn_mask.dtype() == kBool) {
      attn = attn.masked_fill(logical_not(attn_mask), kNegInf);
    } else {
      attn = attn + attn_mask;
    }
  }
  attn = softmax(attn, -1);
  if (dropout_p > 0) attn = dropout(attn, dropout_p, true);
  return matmul(attn, value);
}

std::tuple<Tensor, Tensor> multi_head_attention_forward(const Tensor& query_in, const Tensor& key_in,
                                                        const Tensor& value_in,
                                                        const MultiheadAttentionForwardFuncOptions& o) {
  const bool batched = query_in.dim() == 3;
  if (query_in.dim() != 3 && query_in.dim() != 2)
    throw std::invalid_argument("query should be unbatched 2D or batched 3D tensor but received " +
                                std::to_string(query_in.dim()) + "-D query tensor");
  if (key_in.dim() != query_in.dim() || value_in.dim() != query_in.dim())
    throw std::invalid_argument("For " + std::string(batched ? "batched (3-D)" : "unbatched (2-D)") +
                                " `query`, expected `key` and `value` to be " + (batched ? "3-D" : "2-D") +
                                " but found " + std::to_string(key_in.dim()) + "-D and " +
                                std::to_string(value_in.dim()) + "-D tensors respectively");
  Tensor query = query_in, key = key_in, value = value_in, kpm = o.key_padding_mask();
  if (!batched) {
    query = query.unsqueeze(1);
    key = key.unsqueeze(1);
    value = value.unsqueeze(1);
    if (kpm.defined()) kpm = kpm.unsqueeze(0);
  }
  const int64_t L = query.size(0), N = query.size(1), E = query.size(2);
  const int64_t H = o.num_heads();
  if (kpm.defined() && kpm.dtype() != kBool && !kpm.is_floating_point())
    throw std::invalid_argument("only bool and floating types of key_padding_mask are supported");
  if (E != o.embed_dim_to_check())
    throw std::invalid_argument("was expecting embedding dimension of " + std::to_string(o.embed_dim_to_check()) +
                                ", but got " + std::to_string(E));
  const int64_t hd = E / H;
  if (hd * H != E)
    throw std::invalid_argument("embed_dim " + std::to_string(E) + " not divisible by num_heads " + std::to_string(H));
  Tensor q, k, v;
  if (!o.use_separate_proj_weight()) {
    if (key.sizes().vec() != value.sizes().vec())
      throw std::invalid_argument("key shape " + sizes_str(key) + " does not match value shape " + sizes_str(value));
    auto w = chunk(o.in_proj_weight(), 3, 0);
    std::vector<Tensor> b = o.in_proj_bias().defined() ? chunk(o.in_proj_bias(), 3, 0) : std::vector<Tensor>(3);
    q = linear(query, w[0], b[0]);
    k = linear(key, w[1], b[1]);
    v = linear(value, w[2], b[2]);
  } else {
    if (key.size(0) != value.size(0) || key.size(1) != value.size(1))
      throw std::invalid_argument("key's sequence and batch dims do not match value's");
    std::vector<Tensor> b = o.in_proj_bias().defined() ? chunk(o.in_proj_bias(), 3, 0) : std::vector<Tensor>(3);
    q = linear(query, o.q_proj_weight(), b[0]);
    k = linear(key, o.k_proj_weight(), b[1]);
    v = linear(value, o.v_proj_weight(), b[2]);
  }
  Tensor mask = o.attn_mask();
  if (mask.defined()) {
    if (mask.dtype() == kUInt8) {
      TROUPE_WARN("Byte tensor for attn_mask in nn.MultiheadAttention is deprecated. Use bool tensor instead.");
      mask = mask.to(kBool);
    } else if (!mask.is_floating_point() && mask.dtype() != kBool) {
      throw std::invalid_argument("Only float, byte, and bool types are supported for attn_mask, not " +
                                  std::string(dtype_name(mask.dtype())));
    }
    const int64_t S0 = key.size(0);
    if (mask.dim() == 2) {
      if (mask.size(0) != L || mask.size(1) != S0)
        throw std::invalid_argument("The shape of the 2D attn_mask is " + sizes_str(mask) + ", but should be (" +
                                    std::to_string(L) + ", " + std::to_string(S0) + ").");
      mask = mask.unsqueeze(0);
    } else if (mask.dim() == 3) {
      if (mask.size(0) != N * H || mask.size(1) != L || mask.size(2) != S0)
        throw std::invalid_argument("The shape of the 3D attn_mask is " + sizes_str(mask) + ", but should be (" +
                                    std::to_string(N * H) + ", " + std::to_string(L) + ", " + std::to_string(S0) +
                                    ").");
    } else {
      throw std::invalid_argument("attn_mask's dimension " + std::to_string(mask.dim()) + " is not supported");
    }
  }
  // (S, N, E) pieces appended along the sequence: a column of `false` / 0 for the masks
  auto pad_last = [](const Tensor& m) {
    std::vector<int64_t> s = m.sizes().vec();
    s.back() = 1;
    return cat({m, zeros(s, m.options())}, -1);
  };
  if (o.bias_k().defined() && o.bias_v().defined()) {
    k = cat({k, o.bias_k().repeat({1, N, 1})}, 0);
    v = cat({v, o.bias_v().repeat({1, N, 1})}, 0);
    if (mask.defined()) mask = pad_last(mask);
    if (kpm.defined()) kpm = pad_last(kpm);
  }
  // (L, N, E) -> (N * H, L, hd)
  q = q.contiguous().view({L, N * H, hd}).transpose(0, 1);
  k = k.contiguous().view({k.size(0), N * H, hd}).transpose(0, 1);
  v = v.contiguous().view({v.size(0), N * H, hd}).transpose(0, 1);
  if (o.add_zero_attn()) {
    k = cat({k, zeros({N * H, 1, hd}, k.options())}, 1);
    v = cat({v, zeros({N * H, 1, hd}, v.options())}, 1);
    if (mask.defined()) mask = pad_last(mask);
    if (kpm.defined()) kpm = pad_last(kpm);
  }
  const int64_t S = k.size(1);
  if (kpm.defined()) {
    if (kpm.dim() != 2 || kpm.size(0) != N || kpm.size(1) != S)
      throw std::invalid_argument("expecting key_padding_mask shape of (" + std::to_string(N) + ", " +
                                  std::to_string(S) + "), but got " + sizes_str(kpm));
    kpm = kpm.view({N, 1, 1, S}).expand({N, H, 1, S}).reshape({N * H, 1, S});
    if (!mask.defined()) {
      mask = kpm;
    } else if (mask.dtype() == kBool && kpm.dtype() == kBool) {
      mask = logical_or(mask, kpm);
    } else {
      mask = additive_mask(mask, q.dtype(), true);
      mask = kpm.dtype() == kBool ? where(kpm, kNegInf, mask) : mask + kpm;
    }
  }
  if (mask.defined()) mask = additive_mask(mask, q.dtype(), true);
  const double p = o.training() ? o.dropout_p() : 0.0;
  // (N*H, L, hd) @ (N*H, hd, S) -> (N*H, L, S)
  Tensor attn = bmm(q * (1.0 / std::sqrt(static_cast<double>(hd))), k.transpose(1, 2));
  if (mask.defined()) attn = attn + mask;
  attn = softmax(attn, -1);
  if (p > 0) attn = dropout(attn, p, true);
  Tensor out = bmm(attn, v);  // (N*H, L, hd)
  out = out.transpose(0, 1).contiguous().view({L * N, E});
  out = linear(out, o.out_proj_weight(), o.out_proj_bias()).view({L, N, E});
  Tensor weights;
  if (o.need_weights()) {
    weights = attn.view({N, H, L, S});
    if (o.average_attn_weights()) weights = weights.sum({1}) / static_cast<double>(H);
    if (!batched) weights = weights.squeeze(0);
  }
  if (!batched) out = out.squeeze(1);
  return {out, weights};
}

}  // namespace troupe::nn::functional
