// softmax, log_softmax and logsumexp with their backward functions: the backend's fused kernels where it
// has them (FusedKernel::Softmax, LogSumExp), else composed from amax, exp and sum.
#include <cmath>
#include "tracing.h"
#include <limits>
#include <optional>
#include <vector>

#include "autograd.h"
#include "backend.h"
#include "ops.h"
#include "reduce_detail.h"

namespace troupe {

using autograd::SavedVariable;
using autograd::variable_list;
using namespace reduce_detail;

namespace {

Tensor softmax_impl(const Tensor& x_in, int64_t dim, std::optional<ScalarType> dtype, bool log) {
  const char* op = log ? "log_softmax" : "softmax";
  Tensor x = dtype && *dtype != x_in.dtype() ? x_in.to(*dtype) : x_in;  // recorded: ToCopyBackward0
  if (!x.is_floating_point()) not_for_dtype(op, x.dtype());
  const int64_t d = wrap_dim(dim, x.dim(), op);
  Tensor out;
  {
    NoGradGuard ng;
    if (backend(x).fuses(FusedKernel::Softmax)) {
      Tensor xc = x.contiguous();
      out = empty(x.sizes(), x.options());
      if (x.numel() > 0) {
        int64_t outer, r, inner;
        split_at(xc, d, outer, r, inner);
        backend(x).softmax(out, xc, outer, r, inner, log);
      }
    } else {
      Tensor m = amax(x, {d}, true);
      Tensor z = x - m;
      Tensor s = troupe::sum(exp(z), {d}, true);
      out = log ? z - troupe::log(s) : exp(z) / s;
    }
  }
  if (autograd::any_requires_grad({&x})) {
    autograd::record(log ? "LogSoftmaxBackward0" : "SoftmaxBackward0", {x}, out,
                     [so = SavedVariable(out, true), d, log](const variable_list& g) {
                       Tensor y = so.unpack();
                       const Tensor& go = g[0];
                       const bool last = y.dim() == 0 || d == y.dim() - 1;
                       if (!autograd::GradMode::is_enabled() && backend(y).fuses(FusedKernel::Softmax) && last &&
                           go.dtype() == y.dtype() && y.numel() > 0) {
                         Tensor gc = go.contiguous(), yc = y.contiguous();
                         Tensor gi = empty(y.sizes(), y.options());
                         const int64_t r = y.dim() == 0 ? 1 : y.size(-1);
                         backend(y).softmax_backward(gi, gc, yc, y.numel() / r, r, log);
                         return variable_list{gi};
                       }
                       if (log) return variable_list{go - exp(y) * troupe::sum(go, {d}, true)};
                       return variable_list{y * (go - troupe::sum(go * y, {d}, true))};
                     });
  }
  return out;
}

}  // namespace

// ====================================================================== logsumexp

Tensor logsumexp(const Tensor& x_in, IntArrayRef dims, bool keepdim) {
  Mask mask = dims_mask("logsumexp", x_in, dims);
  // integers are promoted to the default float dtype (as PyTorch 1.13 does)
  Tensor x = x_in.is_floating_point() ? x_in : x_in.to(get_default_dtype());
  const auto rd = mask_dims(mask);
  Tensor out;
  {
    NoGradGuard ng;
    const int64_t nred = static_cast<int64_t>(rd.size());
    const bool all = nred == x.dim();
    if ((nred <= 1 || all) && backend(x).fuses(FusedKernel::LogSumExp)) {
      Tensor xc = x.contiguous();
      out = empty(reduced_shape(x.sizes(), mask, keepdim), x.options());
      int64_t outer = 1, r = xc.numel(), inner = 1;
      if (!all) split_at(xc, rd[0], outer, r, inner);
      if (out.numel() > 0) backend(x).logsumexp(out, xc, outer, r, inner);
    } else if (x.numel() == 0) {
      out = full(reduced_shape(x.sizes(), mask, keepdim), -std::numeric_limits<double>::infinity(), x.options());
    } else {
      Tensor m = amax(x, rd, true);
      m = masked_fill(m, isinf(m), Scalar(0));
      Tensor s = troupe::log(troupe::sum(exp(x - m), rd, keepdim));
      out = s + (keepdim ? m : m.reshape(reduced_shape(x.sizes(), mask, false)));
    }
  }
  if (autograd::any_requires_grad({&x})) {
    autograd::record("LogsumexpBackward0", {x}, out,
                     [sx = SavedVariable(x, false), so = SavedVariable(out, true), mask, keepdim](
                         const variable_list& g) {
                       Tensor x = sx.unpack();
                       return variable_list{keep(g[0], x.sizes(), mask, keepdim) *
                                            exp(x - keep(so.unpack(), x.sizes(), mask, keepdim))};
                     });
  }
  return out;
}

// ====================================================================== softmax / log_softmax

Tensor softmax(const Tensor& x, int64_t d, std::optional<ScalarType> dtype) {
  TROUPE_TRACE_OP("aten::softmax", softmax(x, d, dtype), x, d, tracing::dtype(dtype));
  return softmax_impl(x, d, dtype, false);
}
Tensor log_softmax(const Tensor& x, int64_t d, std::optional<ScalarType> dtype) {
  TROUPE_TRACE_OP("aten::log_softmax", log_softmax(x, d, dtype), x, d, tracing::dtype(dtype));
  return softmax_impl(x, d, dtype, true);
}

}  // namespace troupe
