// nn::functional::embedding: index_select of weight's rows, with a backward that leaves out padding_idx
// and can scale by index frequency (ATen's embedding / embedding_dense_backward / embedding_renorm_).
#include <troupe/nn/functional/embedding.h>
#include <troupe/tensor/tracing.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include <troupe/tensor/autograd.h>
#include <troupe/tensor/indexing.h>
#include <troupe/tensor/ops.h>

namespace troupe::nn::functional {

namespace {

// PyTorch's legacy type name of a tensor, as printed by its checkScalarTypes errors.
std::string legacy_type_name(const Tensor& t) {
  const bool cuda = t.is_cuda();
  const char* base = nullptr;
  switch (t.dtype()) {
    case kFloat32: base = "FloatTensor"; break;
    case kFloat64: base = "DoubleTensor"; break;
    case kFloat16: base = "HalfTensor"; break;
    case kBFloat16: base = "BFloat16Tensor"; break;
    case kUInt8: base = "ByteTensor"; break;
    case kInt32: base = "IntTensor"; break;
    case kInt64: base = "LongTensor"; break;
    case kBool: return cuda ? "CUDABoolType" : "CPUBoolType";  // PyTorch's own spelling for bool
  }
  return std::string(cuda ? "torch.cuda." : "torch.") + base;
}

// A tensor sharing t's storage and geometry that is not a view in autograd's sense (t is a temporary
// result nobody else holds), so the embedding's output can carry its own grad_fn.
Tensor alias_as_fresh(const Tensor& t, std::vector<int64_t> sizes) {
  return Tensor(std::make_shared<TensorImpl>(t.impl()->storage, sizes, contiguous_strides(sizes), t.storage_offset(),
                                             t.dtype()));
}

// embedding_renorm_: each distinct looked-up row whose norm exceeds max_norm is scaled by
// max_norm / (norm + 1e-7) (the norm and the scale in double, as ATen), in place, without history.
void embedding_renorm_(const Tensor& weight, const std::vector<int64_t>& idx, double max_norm, double norm_type) {
  std::vector<int64_t> uniq = idx;
  std::sort(uniq.begin(), uniq.end());
  uniq.erase(std::unique(uniq.begin(), uniq.end()), uniq.end());
  if (uniq.empty()) return;
  NoGradGuard no_grad;
  Tensor rows_idx = troupe::tensor(uniq, TensorOptions().dtype(kInt64)).to(weight.device());
  Tensor rows = index_select(weight.detach(), 0, rows_idx);                   // (U, D)
  Tensor norms = troupe::norm(rows, norm_type, {1}, /*keepdim=*/true).to(kFloat64);  // (U, 1)
  Tensor scale = where(gt(norms, max_norm), div(max_norm, add(norms, 1e-7)), 1.0);  // 1: row unchanged
  Tensor w = weight.detach();
  w.index_put_({indexing::TensorIndex(rows_idx)}, mul(rows, scale.to(weight.dtype())));
}

}  // namespace

// input (*) int, weight (N, D) -> (*, D)
Tensor embedding(const Tensor& input, const Tensor& weight, const EmbeddingFuncOptions& options) {
  if (!options.max_norm()) {  // with max_norm the weight's renorm is traced op by op
    TROUPE_TRACE_OP("aten::embedding", embedding(input, weight, options), weight, input,
                    options.padding_idx() ? *options.padding_idx() : int64_t{-1}, options.scale_grad_by_freq(),
                    options.sparse());
  }
  const std::optional<int64_t> padding_idx = options.padding_idx();
  const std::optional<double> max_norm = options.max_norm();
  const double norm_type = options.norm_type();
  const bool scale_grad_by_freq = options.scale_grad_by_freq(), sparse = options.sparse();
  if (!input.defined() || !weight.defined()) throw std::invalid_argument("[embedding] got an undefined tensor");
  if (sparse)
    throw std::invalid_argument("[embedding] sparse=True is not supported: troupe has no sparse gradients "
                                "(use sparse=False)");
  if (input.dtype() != kInt64 && input.dtype() != kInt32)
    throw std::invalid_argument(
        "Expected tensor for argument #1 'indices' to have one of the following scalar types: Long, Int; but got " +
        legacy_type_name(input) + " instead (while checking arguments for embedding)");
  if (weight.dim() != 2) throw std::invalid_argument("'weight' must be 2-D");
  const int64_t num_weights = weight.size(0), dim = weight.size(1);
  int64_t pad = -1;
  if (padding_idx) {
    if (*padding_idx >= num_weights || *padding_idx < -num_weights)
      throw std::invalid_argument("Padding_idx must be within num_embeddings");
    pad = *padding_idx < 0 ? num_weights + *padding_idx : *padding_idx;
  }
  // the indices, flat, as int64 on the host: checked, and used by renorm and backward
  Tensor flat = input.detach().reshape({-1}).to(kInt64);
  const std::vector<int64_t> idx = flat.to_vector<int64_t>();
  for (int64_t i : idx)
    if (i < 0 || i >= num_weights)
      throw std::out_of_range("index out of range in self ([embedding] index " + std::to_string(i) +
                              " is not in [0, " + std::to_string(num_weights) + "))");
  if (max_norm) embedding_renorm_(weight, idx, *max_norm, norm_type);

  std::vector<int64_t> out_sizes = input.sizes().vec();
  out_sizes.push_back(dim);
  Tensor out;
  {
    NoGradGuard no_grad;
    out = alias_as_fresh(index_select(weight.detach(), 0, flat), out_sizes);
  }
  if (!autograd::any_requires_grad({&weight})) return out;

  // backward: grad_weight[idx[i]] += grad[i] * scale[i], for every i whose index is not padding_idx;
  // scale[i] = 1 / count(idx[i]) with scale_grad_by_freq, else 1.
  Tensor keep, scale;
  if (pad >= 0 || scale_grad_by_freq) {
    std::unordered_map<int64_t, int64_t> counts;
    if (scale_grad_by_freq)
      for (int64_t i : idx) ++counts[i];
    std::vector<int64_t> kept;
    std::vector<double> scales;
    for (size_t n = 0; n < idx.size(); ++n) {
      if (idx[n] == pad) continue;
      kept.push_back(static_cast<int64_t>(n));
      scales.push_back(scale_grad_by_freq ? 1.0 / static_cast<double>(counts[idx[n]]) : 1.0);
    }
    keep = troupe::tensor(kept, TensorOptions().dtype(kInt64)).to(weight.device());
    if (scale_grad_by_freq) scale = troupe::tensor(scales, weight.options()).unsqueeze(1);
  }
  Tensor flat_dev = flat.to(weight.device());
  autograd::record("EmbeddingBackward0", {weight}, out,
                   [flat_dev, keep, scale, num_weights, dim](const autograd::variable_list& g) {
                     // (*, D) -> (n, D)
                     Tensor go = g[0].reshape({-1, dim});
                     Tensor index = flat_dev;
                     if (keep.defined()) {
                       go = index_select(go, 0, keep);
                       index = index_select(flat_dev, 0, keep);
                     }
                     if (scale.defined()) go = mul(go, scale);
                     return autograd::variable_list{index_add(zeros({num_weights, dim}, go.options()), 0, index, go)};
                   },
                   /*saves=*/false);
  return out;
}

}  // namespace troupe::nn::functional
