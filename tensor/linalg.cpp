// Linear algebra ops: matmul (every rank case of torch.matmul), mm, bmm, addmm, dot, mv, outer, linear,
// each with its backward. The arithmetic is Backend::gemm (any strides: transposed views pass without a copy).
#include <cstring>
#include "tracing.h"
#include <numeric>
#include <sstream>
#include <stdexcept>

#include "autograd.h"
#include "backend.h"
#include "ops.h"

namespace troupe {

using autograd::SavedVariable;
using autograd::variable_list;

namespace {

// A view of t's storage for a kernel call: no autograd, no view bookkeeping.
Tensor raw_view(const Tensor& t, std::vector<int64_t> sizes, std::vector<int64_t> strides, int64_t extra_offset = 0) {
  return Tensor(std::make_shared<TensorImpl>(t.impl()->storage, std::move(sizes), std::move(strides),
                                             t.storage_offset() + extra_offset, t.dtype()));
}

// t broadcast to `sizes` (stride 0 on broadcast dims), no autograd; t's dims align to the right.
Tensor raw_expand(const Tensor& t, const std::vector<int64_t>& sizes) {
  std::vector<int64_t> st(sizes.size(), 0);
  const int64_t off = static_cast<int64_t>(sizes.size()) - t.dim();
  for (int64_t d = 0; d < t.dim(); ++d)
    st[off + d] = t.size(d) == 1 && sizes[off + d] != 1 ? 0 : t.stride(d);
  return raw_view(t, sizes, st);
}

std::string dims_x(IntArrayRef s) {
  std::string r;
  for (size_t i = 0; i < s.size(); ++i) r += (i ? "x" : "") + std::to_string(s[i]);
  return r;
}

void check_defined(const char* op, std::initializer_list<const Tensor*> ts) {
  for (auto* t : ts)
    if (!t->defined()) throw std::invalid_argument(std::string("[") + op + "] got an undefined tensor");
}

void check_device(const char* op, const Tensor& a, const Tensor& b) {
  if (a.device() != b.device())
    throw std::invalid_argument(std::string("[") + op +
                                "] Expected all tensors to be on the same device, but found at least two devices, " +
                                a.device().str() + " and " + b.device().str() + "!");
}

void check_same_dtype(const char* op, const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype())
    throw std::invalid_argument(std::string("[") + op + "] expected both arguments to have the same dtype, but got " +
                                dtype_name(a.dtype()) + " and " + dtype_name(b.dtype()));
}

void check_supported(const char* op, ScalarType t) {
  if (t == kBool)
    throw std::invalid_argument(std::string("[") + op + "] not implemented for dtype bool");
}

void check_pair(const char* op, const Tensor& a, const Tensor& b) {
  check_defined(op, {&a, &b});
  check_device(op, a, b);
  check_same_dtype(op, a, b);
  check_supported(op, a.dtype());
}

// ---------------------------------------------------------------- forwards without autograd

// (n, k) @ (k, m)
Tensor mm_forward(const Tensor& a, const Tensor& b) {
  Tensor out = empty({a.size(0), b.size(1)}, a.options());
  backend(a).gemm(out, a, b, 1.0, 0.0);
  return out;
}

// (B, n, k) @ (B, k, m); batch strides may be anything (0 for a broadcast operand)
Tensor bmm_forward(const Tensor& a, const Tensor& b) {
  const int64_t B = a.size(0), n = a.size(1), k = a.size(2), m = b.size(2);
  Tensor out = empty({B, n, m}, a.options());
  if (out.numel() == 0) return out;
  Backend& be = backend(a);
  // One gemm when b is shared by every batch and a's batches stack into (B*n, k) rows.
  if (B == 1 || (b.stride(0) == 0 && (n == 1 || a.stride(0) == n * a.stride(1)))) {
    Tensor a2 = raw_view(a, {B * n, k}, {n == 1 ? a.stride(0) : a.stride(1), a.stride(2)});
    if (B == 1) a2 = raw_view(a, {n, k}, {a.stride(1), a.stride(2)});
    be.gemm(raw_view(out, {B * n, m}, {m, 1}), a2, raw_view(b, {k, m}, {b.stride(1), b.stride(2)}), 1.0, 0.0);
    return out;
  }
  for (int64_t i = 0; i < B; ++i) {
    be.gemm(raw_view(out, {n, m}, {m, 1}, i * n * m), raw_view(a, {n, k}, {a.stride(1), a.stride(2)}, i * a.stride(0)),
            raw_view(b, {k, m}, {b.stride(1), b.stride(2)}, i * b.stride(0)), 1.0, 0.0);
  }
  return out;
}

// (n, k) @ (k) -> (n)
Tensor mv_forward(const Tensor& a, const Tensor& v) {
  const int64_t n = a.size(0), k = a.size(1);
  Tensor out = empty({n}, a.options());
  backend(a).gemm(raw_view(out, {n, 1}, {1, 1}), a, raw_view(v, {k, 1}, {v.stride(0), 1}), 1.0, 0.0);
  return out;
}

// (k) . (k) -> ()
Tensor dot_forward(const Tensor& a, const Tensor& b) {
  const int64_t k = a.size(0);
  Tensor out = empty({}, a.options());
  backend(a).gemm(raw_view(out, {1, 1}, {1, 1}), raw_view(a, {1, k}, {1, a.stride(0)}),
                  raw_view(b, {k, 1}, {b.stride(0), 1}), 1.0, 0.0);
  return out;
}

Scalar scalar_for(ScalarType t, double v) {
  return is_floating_point(t) ? Scalar(v) : Scalar(static_cast<int64_t>(v));
}

// ---------------------------------------------------------------- checks shared by matmul and the 2-D ops

void check_matrix(const char* op, const char* what, const Tensor& t) {
  if (t.dim() != 2)
    throw std::invalid_argument(std::string("[") + op + "] " + what + " must be a matrix, got " +
                                std::to_string(t.dim()) + "-D tensor of shape " + shape_str(t.sizes()));
}

void check_mm_shapes(const char* op, const Tensor& a, const Tensor& b) {
  if (a.size(1) != b.size(0))
    throw std::invalid_argument(std::string("[") + op + "] mat1 and mat2 shapes cannot be multiplied (" +
                                dims_x(a.sizes()) + " and " + dims_x(b.sizes()) + ")");
}

// Gradients of a @ b (PyTorch's mm_mat1_backward / mm_mat2_backward): for an operand that is a
// column-major (transposed) view, the gradient is computed in column-major order too, so that, e.g.,
// linear's weight gradient (through w.t()) comes out contiguous and .grad takes it without a copy.
bool column_major(const Tensor& t) { return t.stride(0) == 1 && t.stride(1) == t.size(0); }
// g @ b^T
Tensor mm_grad_a(const Tensor& g, const Tensor& b, bool a_column_major) {
  return a_column_major ? mm(b, g.t()).t() : mm(g, b.t());  // transposed views: gemm takes any strides
}
// a^T @ g
Tensor mm_grad_b(const Tensor& g, const Tensor& a, bool b_column_major) {
  return b_column_major ? mm(g.t(), a).t() : mm(a.t(), g);
}

}  // namespace

// ============================================================ mm

Tensor mm(const Tensor& a, const Tensor& b) {
  check_defined("mm", {&a, &b});
  check_matrix("mm", "self", a);
  check_matrix("mm", "mat2", b);
  check_pair("mm", a, b);
  check_mm_shapes("mm", a, b);
  Tensor out = mm_forward(a, b);
  if (autograd::any_requires_grad({&a, &b})) {
    const bool need_a = a.requires_grad(), need_b = b.requires_grad();
    const bool a_cm = need_a && column_major(a), b_cm = need_b && column_major(b);
    auto node = autograd::record(
        "MmBackward0", {a, b}, out,
        [sa = SavedVariable(need_b ? a : Tensor(), false), sb = SavedVariable(need_a ? b : Tensor(), false), need_a,
         need_b, a_cm, b_cm](const variable_list& g) {
          Tensor ga, gb;
          if (need_a && autograd::output_wanted(0)) ga = mm_grad_a(g[0], sb.unpack(), a_cm);
          if (need_b && autograd::output_wanted(1)) gb = mm_grad_b(g[0], sa.unpack(), b_cm);
          return variable_list{ga, gb};
        });
    if (node) node->computes_wanted_outputs = true;
  }
  return out;
}

// ============================================================ bmm

Tensor bmm(const Tensor& a, const Tensor& b) {
  check_defined("bmm", {&a, &b});
  if (a.dim() != 3)
    throw std::invalid_argument("[bmm] batch1 must be a 3D tensor, got shape " + shape_str(a.sizes()));
  if (b.dim() != 3)
    throw std::invalid_argument("[bmm] batch2 must be a 3D tensor, got shape " + shape_str(b.sizes()));
  check_pair("bmm", a, b);
  if (b.size(0) != a.size(0) || b.size(1) != a.size(2))
    throw std::invalid_argument("[bmm] Expected size for first two dimensions of batch2 tensor to be: [" +
                                std::to_string(a.size(0)) + ", " + std::to_string(a.size(2)) + "] but got: [" +
                                std::to_string(b.size(0)) + ", " + std::to_string(b.size(1)) + "].");
  Tensor out = bmm_forward(a, b);
  if (autograd::any_requires_grad({&a, &b})) {
    const bool need_a = a.requires_grad(), need_b = b.requires_grad();
    auto node = autograd::record(
        "BmmBackward0", {a, b}, out,
        [sa = SavedVariable(need_b ? a : Tensor(), false), sb = SavedVariable(need_a ? b : Tensor(), false), need_a,
         need_b](const variable_list& g) {
          Tensor ga, gb;
          if (need_a && autograd::output_wanted(0)) ga = bmm(g[0], sb.unpack().transpose(1, 2));
          if (need_b && autograd::output_wanted(1)) gb = bmm(sa.unpack().transpose(1, 2), g[0]);
          return variable_list{ga, gb};
        });
    if (node) node->computes_wanted_outputs = true;
  }
  return out;
}

// ============================================================ addmm

Tensor addmm(const Tensor& bias, const Tensor& a, const Tensor& b, Scalar beta, Scalar alpha) {
  check_defined("addmm", {&bias, &a, &b});
  check_matrix("addmm", "mat1", a);
  check_matrix("addmm", "mat2", b);
  check_pair("addmm", a, b);
  check_device("addmm", bias, a);
  if (bias.dtype() != a.dtype())
    throw std::invalid_argument(std::string("[addmm] expected self, mat1 and mat2 to have the same dtype, but got ") +
                                dtype_name(bias.dtype()) + ", " + dtype_name(a.dtype()) + " and " +
                                dtype_name(b.dtype()));
  check_mm_shapes("addmm", a, b);
  const int64_t n = a.size(0), m = b.size(1);
  std::vector<int64_t> out_sizes{n, m};
  bool fits = bias.dim() <= 2;
  for (int64_t d = 0; fits && d < bias.dim(); ++d) {
    int64_t want = out_sizes[2 - bias.dim() + d];
    if (bias.size(d) != want && bias.size(d) != 1) fits = false;
  }
  if (!fits)
    throw std::invalid_argument("[addmm] bias of shape " + shape_str(bias.sizes()) +
                                " cannot be broadcast to the output shape " + shape_str(out_sizes));
  const double beta_d = beta.to_double(), alpha_d = alpha.to_double();
  Tensor out = empty(out_sizes, a.options());
  Backend& be = backend(a);
  if (beta_d != 0 && out.numel() > 0) {  // C = bias, then gemm with beta
    if (out.is_cpu() && bias.dim() == 1 && bias.size(0) == m && bias.is_contiguous()) {
      // a Linear's bias: one memcpy per row (the strided broadcast copy costs as much as a small gemm)
      const size_t row_bytes = static_cast<size_t>(m) * bias.element_size();
      const char* src = static_cast<const char*>(bias.data_ptr());
      char* dst = static_cast<char*>(out.data_ptr());
      for (int64_t i = 0; i < n; ++i) std::memcpy(dst + static_cast<size_t>(i) * row_bytes, src, row_bytes);
    } else {
      be.copy(out, raw_expand(bias, out_sizes));
    }
  }
  be.gemm(out, a, b, alpha_d, beta_d);
  if (autograd::any_requires_grad({&bias, &a, &b})) {
    const bool need_bias = bias.requires_grad(), need_a = a.requires_grad(), need_b = b.requires_grad();
    const bool a_cm = need_a && column_major(a), b_cm = need_b && column_major(b);
    auto node = autograd::record(
        "AddmmBackward0", {bias, a, b}, out,
        [sa = SavedVariable(need_b ? a : Tensor(), false), sb = SavedVariable(need_a ? b : Tensor(), false),
         bias_sizes = bias.sizes().vec(), need_bias, need_a, need_b, a_cm, b_cm, beta_d, alpha_d](const variable_list& g) {
          Tensor gbias, ga, gb;
          if (need_bias && autograd::output_wanted(0)) {
            gbias = beta_d == 1 ? g[0] : mul(g[0], scalar_for(g[0].dtype(), beta_d));
            gbias = sum_to(gbias, bias_sizes);
          }
          if (need_a && autograd::output_wanted(1)) {
            ga = mm_grad_a(g[0], sb.unpack(), a_cm);
            if (alpha_d != 1) ga = mul(ga, scalar_for(ga.dtype(), alpha_d));
          }
          if (need_b && autograd::output_wanted(2)) {
            gb = mm_grad_b(g[0], sa.unpack(), b_cm);
            if (alpha_d != 1) gb = mul(gb, scalar_for(gb.dtype(), alpha_d));
          }
          return variable_list{gbias, ga, gb};
        });
    if (node) node->computes_wanted_outputs = true;
  }
  return out;
}

// ============================================================ dot

namespace {
Tensor dot_impl(const char* op, const Tensor& a, const Tensor& b) {
  check_defined(op, {&a, &b});
  if (a.dim() != 1 || b.dim() != 1)
    throw std::invalid_argument(std::string("[") + op + "] 1D tensors expected, but got " + std::to_string(a.dim()) +
                                "D and " + std::to_string(b.dim()) + "D tensors");
  if (a.dtype() != b.dtype())
    throw std::invalid_argument(std::string("[") + op + "] expected both vectors to have same dtype, but found " +
                                dtype_name(a.dtype()) + " and " + dtype_name(b.dtype()));
  check_device(op, a, b);
  check_supported(op, a.dtype());
  if (a.size(0) != b.size(0))
    throw std::invalid_argument(std::string("[") + op + "] inconsistent tensor size, expected tensor [" +
                                std::to_string(a.size(0)) + "] and src [" + std::to_string(b.size(0)) +
                                "] to have the same number of elements, but got " + std::to_string(a.size(0)) +
                                " and " + std::to_string(b.size(0)) + " elements respectively");
  Tensor out = dot_forward(a, b);
  if (autograd::any_requires_grad({&a, &b})) {
    const bool need_a = a.requires_grad(), need_b = b.requires_grad();
    autograd::record("DotBackward0", {a, b}, out,
                     [sa = SavedVariable(need_b ? a : Tensor(), false), sb = SavedVariable(need_a ? b : Tensor(), false),
                      need_a, need_b](const variable_list& g) {
                       Tensor ga, gb;
                       if (need_a) ga = mul(sb.unpack(), g[0]);
                       if (need_b) gb = mul(sa.unpack(), g[0]);
                       return variable_list{ga, gb};
                     });
  }
  return out;
}

Tensor mv_impl(const char* op, const Tensor& a, const Tensor& v) {
  check_defined(op, {&a, &v});
  if (a.dim() != 2 || v.dim() != 1)
    throw std::invalid_argument(std::string("[") + op + "] vector + matrix @ vector expected, got a " +
                                std::to_string(a.dim()) + "-D matrix and a " + std::to_string(v.dim()) +
                                "-D vector");
  check_pair(op, a, v);
  if (a.size(1) != v.size(0))
    throw std::invalid_argument(std::string("[") + op + "] size mismatch, got matrix " + shape_str(a.sizes()) +
                                " and vector " + shape_str(v.sizes()));
  Tensor out = mv_forward(a, v);
  if (autograd::any_requires_grad({&a, &v})) {
    const bool need_a = a.requires_grad(), need_v = v.requires_grad();
    autograd::record("MvBackward0", {a, v}, out,
                     [sa = SavedVariable(need_v ? a : Tensor(), false), sv = SavedVariable(need_a ? v : Tensor(), false),
                      need_a, need_v](const variable_list& g) {
                       Tensor ga, gv;
                       if (need_a) ga = outer(g[0], sv.unpack());
                       if (need_v) gv = mv(sa.unpack().t(), g[0]);
                       return variable_list{ga, gv};
                     });
  }
  return out;
}
}  // namespace

Tensor dot(const Tensor& a, const Tensor& b) { return dot_impl("dot", a, b); }

// ============================================================ mv

Tensor mv(const Tensor& a, const Tensor& v) { return mv_impl("mv", a, v); }

// ============================================================ outer

Tensor outer(const Tensor& a, const Tensor& b) {
  check_defined("outer", {&a, &b});
  if (a.dim() != 1)
    throw std::invalid_argument("[outer] Expected 1-D argument self, but got " + std::to_string(a.dim()) + "-D");
  if (b.dim() != 1)
    throw std::invalid_argument("[outer] Expected 1-D argument vec2, but got " + std::to_string(b.dim()) + "-D");
  return mul(a.unsqueeze(1), b);  // MulBackward0, with type promotion as PyTorch
}

// ============================================================ matmul

Tensor matmul(const Tensor& a, const Tensor& b) {
  TROUPE_TRACE_OP("aten::matmul", matmul(a, b), a, b);
  check_defined("matmul", {&a, &b});
  const int64_t da = a.dim(), db = b.dim();
  if (da == 0 || db == 0)
    throw std::invalid_argument("[matmul] both arguments to matmul need to be at least 1D, but they are " +
                                std::to_string(da) + "D and " + std::to_string(db) + "D");
  if (da == 1 && db == 1) return dot_impl("matmul", a, b);
  check_pair("matmul", a, b);
  // inner dimensions: a's last against b's first (1-D) or second-to-last
  const int64_t ka = a.size(-1), kb = db == 1 ? b.size(0) : b.size(-2);
  if (ka != kb)
    throw std::invalid_argument("[matmul] mat1 and mat2 shapes cannot be multiplied (" + dims_x(a.sizes()) + " and " +
                                dims_x(b.sizes()) + ")");
  if (da == 2 && db == 1) return mv_impl("matmul", a, b);
  if (da == 1 && db == 2) return mm(a.unsqueeze(0), b).squeeze(0);
  if (da == 2 && db == 2) return mm(a, b);
  if (da >= 3 && db <= 2) {
    // Fold a's batch dims into its rows: one gemm (a view when a's leading dims are mergeable, no copy).
    std::vector<int64_t> out_sizes(a.sizes().begin(), a.sizes().end() - 1);
    const int64_t rows = std::accumulate(out_sizes.begin(), out_sizes.end(), int64_t{1}, std::multiplies<>());
    Tensor a2 = a.reshape({rows, ka});
    if (db == 1) return mv(a2, b).view(out_sizes);
    out_sizes.push_back(b.size(1));
    return mm(a2, b).view(out_sizes);
  }
  // General batched case: broadcast the batch dims, bmm, reshape.
  const int64_t n = da > 1 ? a.size(-2) : 1;
  const int64_t p = db > 1 ? b.size(-1) : 1;
  std::vector<int64_t> batch_a(a.sizes().begin(), a.sizes().begin() + std::max<int64_t>(da - 2, 0));
  std::vector<int64_t> batch_b(b.sizes().begin(), b.sizes().begin() + std::max<int64_t>(db - 2, 0));
  std::vector<int64_t> batch = broadcast_shapes(batch_a, batch_b, "matmul");
  const int64_t B = std::accumulate(batch.begin(), batch.end(), int64_t{1}, std::multiplies<>());

  Tensor a3 = da == 1 ? a.unsqueeze(0) : a;   // (..., n, k)
  Tensor b3 = db == 1 ? b.unsqueeze(-1) : b;  // (..., k, p)
  std::vector<int64_t> ea = batch, eb = batch;
  ea.push_back(n), ea.push_back(ka);
  eb.push_back(kb), eb.push_back(p);
  if (!a3.sizes().equals(ea)) a3 = a3.expand(ea);
  if (!b3.sizes().equals(eb)) b3 = b3.expand(eb);
  if (a3.dim() != 3) a3 = a3.reshape({B, n, ka});
  if (b3.dim() != 3) b3 = b3.reshape({B, kb, p});
  Tensor out = bmm(a3, b3);
  std::vector<int64_t> out_sizes = batch;
  if (da > 1) out_sizes.push_back(n);
  if (db > 1) out_sizes.push_back(p);
  if (out.sizes().equals(out_sizes)) return out;
  return out.view(out_sizes);
}

// ============================================================ linear

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b) {
  TROUPE_TRACE_OP("aten::linear", linear(x, w, b), x, w, b);
  check_defined("linear", {&x, &w});
  if (x.dim() == 0)
    throw std::invalid_argument("[linear] both arguments to matmul need to be at least 1D, but they are 0D and " +
                                std::to_string(w.dim()) + "D");
  if (w.dim() != 1 && w.dim() != 2)
    throw std::invalid_argument("[linear] weight must be 1-D or 2-D (out_features, in_features), got shape " +
                                shape_str(w.sizes()));
  check_device("linear", x, w);
  if (x.dtype() != w.dtype() || (b.defined() && b.dtype() != x.dtype()))
    throw std::invalid_argument(std::string("[linear] expected input, weight and bias to have the same dtype, but got ") +
                                dtype_name(x.dtype()) + ", " + dtype_name(w.dtype()) + " and " +
                                (b.defined() ? dtype_name(b.dtype()) : "none"));
  check_supported("linear", x.dtype());
  const int64_t rows = std::accumulate(x.sizes().begin(), x.sizes().end() - 1, int64_t{1}, std::multiplies<>());
  if (x.size(-1) != w.size(-1)) {
    std::vector<int64_t> wt = w.dim() == 2 ? std::vector<int64_t>{w.size(1), w.size(0)} : w.sizes().vec();
    std::vector<int64_t> xs{rows, x.size(-1)};
    if (x.dim() == 1) xs = {x.size(0)};
    throw std::invalid_argument("[linear] mat1 and mat2 shapes cannot be multiplied (" + dims_x(xs) + " and " +
                                dims_x(wt) + ")");
  }
  std::vector<int64_t> out_sizes(x.sizes().begin(), x.sizes().end() - 1);
  if (w.dim() == 2) out_sizes.push_back(w.size(0));
  if (b.defined()) {
    check_device("linear", x, b);
    bool fits = b.dim() <= static_cast<int64_t>(out_sizes.size());
    for (int64_t d = 0; fits && d < b.dim(); ++d) {
      int64_t want = out_sizes[out_sizes.size() - b.dim() + d];
      if (b.size(d) != want && b.size(d) != 1) fits = false;
    }
    if (!fits)
      throw std::invalid_argument("[linear] bias of shape " + shape_str(b.sizes()) +
                                  " cannot be broadcast to the output shape " + shape_str(out_sizes));
  }
  if (w.dim() == 2 && b.defined() && b.dim() <= 2 && x.dim() >= 2) {
    // bias fused into the gemm: out = bias (broadcast), then out += x @ w^T
    if (x.dim() == 2 && b.dim() <= 1) return addmm(b, x, w.t());
    if (b.dim() <= 1) {
      Tensor x2 = x.reshape({rows, x.size(-1)});
      return addmm(b, x2, w.t()).view(out_sizes);
    }
  }
  Tensor out = matmul(x, w.dim() == 2 ? w.t() : w);
  if (b.defined()) out = add(out, b);
  return out;
}

}  // namespace troupe
