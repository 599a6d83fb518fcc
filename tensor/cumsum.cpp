// cumsum and its backward, the reverse cumulative sum (the backend's fused kernel where it has one,
// FusedKernel::ReverseCumsum, else sum - cumsum + g).
#include <optional>

#include "autograd.h"
#include "backend.h"
#include "ops.h"
#include "reduce_detail.h"

namespace troupe {

using autograd::variable_list;
using namespace reduce_detail;

namespace {

Tensor reverse_cumsum(const Tensor& g, int64_t d);

Tensor cumsum_forward(const Tensor& x, int64_t d) {
  // x already has the output dtype
  NoGradGuard ng;
  Tensor xc = x.contiguous();
  Tensor out = empty(x.sizes(), x.options());
  if (x.numel() > 0) {
    int64_t outer, r, inner;
    split_at(xc, d, outer, r, inner);
    backend(x).cumsum(out, xc, outer, r, inner);
  }
  return out;
}

/// sum_{k >= j} g_k along d; its derivative is cumsum, so it is differentiable through the pair.
Tensor reverse_cumsum(const Tensor& g, int64_t d) {
  if (g.numel() <= 1 || g.dim() == 0 || g.size(d) == 1) return g;
  Tensor out;
  {
    NoGradGuard ng;
    if (backend(g).fuses(FusedKernel::ReverseCumsum)) {
      Tensor gc = g.contiguous();
      out = empty(g.sizes(), g.options());
      int64_t outer, r, inner;
      split_at(gc, d, outer, r, inner);
      backend(g).reverse_cumsum(out, gc, outer, r, inner);
    } else {
      out = troupe::sum(g, {d}, true) - cumsum_forward(g, d) + g;
    }
  }
  if (autograd::any_requires_grad({&g})) {
    autograd::record("ReverseCumsumBackward0", {g}, out,
                     [d](const variable_list& gg) { return variable_list{cumsum(gg[0], d)}; }, false);
  }
  return out;
}

}  // namespace

// ====================================================================== cumsum

Tensor cumsum(const Tensor& x, int64_t dim, std::optional<ScalarType> dtype) {
  const int64_t d = wrap_dim(dim, x.dim(), "cumsum");
  const ScalarType od = dtype ? *dtype : sum_dtype(x.dtype());
  Tensor out;
  {
    NoGradGuard ng;
    out = cumsum_forward(od == x.dtype() ? x : x.to(od), d);
  }
  if (autograd::any_requires_grad({&x})) {
    autograd::record("CumsumBackward0", {x}, out, [d](const variable_list& g) {
      return variable_list{reverse_cumsum(g[0], d)};
    }, false);
  }
  return out;
}

}  // namespace troupe
