// var, std, var_mean and norm with their backward functions. Where the reduced dims are x's trailing dims
// and the backend fuses them (FusedKernel::VarMeanRows, Norm2Rows) the rows are reduced in one pass in
// double; otherwise they are composed from sum/mean.
#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
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

/// (var, mean) in x's dtype (in float for 16-bit floats when !to_input_dtype); mean has the keepdim shape
/// when keepdim.
std::tuple<Tensor, Tensor> var_mean_impl(const Tensor& x, const Mask& mask, int64_t correction, bool keepdim,
                                         bool to_input_dtype = true) {
  NoGradGuard ng;
  int64_t outer, r;
  if (x.numel() > 0 && backend(x).fuses(FusedKernel::VarMeanRows) && trailing_rows(x, mask, outer, r)) {
    Tensor xc = x.contiguous();
    const ScalarType dt = to_input_dtype || !is_16bit_float(x.dtype()) ? x.dtype() : kFloat32;
    Tensor v = empty(reduced_shape(x.sizes(), mask, keepdim), x.options().dtype(dt));
    Tensor m = empty(reduced_shape(x.sizes(), mask, keepdim), x.options().dtype(dt));
    backend(x).var_mean_rows(v, m, xc, outer, r, correction);
    return {v, m};
  }
  Tensor xf = is_16bit_float(x.dtype()) ? x.to(kFloat32) : x;
  Tensor m = mean_acc(xf, mask, true);
  Tensor d = xf - m;
  d.mul_(d);
  Tensor v = sum_impl(d, mask, keepdim, xf.dtype());
  const int64_t dof = std::max<int64_t>(0, reduced_count(x.sizes(), mask) - correction);
  v.div_(Scalar(static_cast<double>(dof)));
  if (!keepdim) m = m.reshape(reduced_shape(x.sizes(), mask, false));
  if (to_input_dtype && v.dtype() != x.dtype()) {
    v = v.to(x.dtype());
    m = m.to(x.dtype());
  }
  return {v, m};
}

Tensor var_backward(const Tensor& g, const Tensor& x, const Mask& mask, int64_t correction, bool keepdim) {
  const int64_t dof = std::max<int64_t>(0, reduced_count(x.sizes(), mask) - correction);
  Tensor gk = keep(g, x.sizes(), mask, keepdim);
  return (gk * (2.0 / static_cast<double>(dof))) * (x - mean(x, mask_dims(mask), true));
}

void check_var_dtype(const char* op, const Tensor& x) {
  if (!x.is_floating_point())
    throw std::invalid_argument(std::string("[") + op + "] std and var only support floating point and complex dtypes");
}

// ---- norm

Tensor norm_forward(const Tensor& x, double p, const Mask& mask, bool keepdim) {
  NoGradGuard ng;
  Tensor xf = is_16bit_float(x.dtype()) ? x.to(kFloat32) : x;
  Tensor out;
  int64_t outer, r;
  if (p == 2 && x.numel() > 0 && backend(x).fuses(FusedKernel::Norm2Rows) && trailing_rows(x, mask, outer, r)) {
    Tensor xc = x.contiguous();
    out = empty(reduced_shape(x.sizes(), mask, keepdim), x.options());
    backend(x).norm2_rows(out, xc, outer, r);
    return out;
  }
  if (p == 2) {
    out = troupe::sqrt(sum_impl(xf * xf, mask, keepdim, xf.dtype()));
  } else if (p == 1) {
    out = sum_impl(abs(xf), mask, keepdim, xf.dtype());
  } else if (std::isinf(p)) {
    const bool is_max = p > 0;
    const char* op = "norm";
    if (x.numel() == 0 && x.dim() > 0 && reduced_count(x.sizes(), mask) == 0) {
      std::ostringstream os;
      os << "[" << op << "] Expected reduction dim to have non-zero size (infinity norm of an empty tensor)";
      throw std::out_of_range(os.str());
    }
    out = reduce_to(is_max ? ReduceKind::Max : ReduceKind::Min, abs(xf), mask, keepdim, xf.dtype());
  } else if (p == 0) {
    out = sum_impl(ne(xf, Scalar(0)), mask, keepdim, kInt64).to(xf.dtype());
  } else {
    out = pow(sum_impl(pow(abs(xf), Scalar(p)), mask, keepdim, xf.dtype()), Scalar(1.0 / p));
  }
  if (out.dtype() != x.dtype()) out = out.to(x.dtype());
  return out;
}

Tensor norm_backward(const Tensor& g, const Tensor& x, const Tensor& out, double p, const Mask& mask, bool keepdim) {
  Tensor gk = keep(g, x.sizes(), mask, keepdim);
  Tensor nk = keep(out, x.sizes(), mask, keepdim);
  if (p == 0) return zeros_like(x);
  if (p == 1) return sign(x) * gk;
  if (p == 2) {
    Tensor zero_norm;
    {
      NoGradGuard ng;
      zero_norm = eq(nk, Scalar(0));
    }
    return x * masked_fill(gk / nk, zero_norm, Scalar(0));
  }
  if (std::isinf(p)) {
    Tensor hit;
    {
      NoGradGuard ng;
      Tensor ax = abs(x);
      hit = logical_or(eq(ax, nk), logical_and(troupe::isnan(x), troupe::isnan(nk))).to(x.dtype());
    }
    return sign(x) * ((gk / troupe::sum(hit, mask_dims(mask), true)) * hit);
  }
  Tensor zero_x, zero_norm;
  {
    NoGradGuard ng;
    zero_x = eq(x, Scalar(0));
    zero_norm = eq(nk, Scalar(0));
  }
  if (p < 1) {
    Tensor scaled = sign(x) * masked_fill(pow(abs(x), Scalar(p - 1)), zero_x, Scalar(0));
    return scaled * gk * pow(nk, Scalar(1 - p));
  }
  Tensor scale = masked_fill(gk / pow(nk, Scalar(p - 1)), zero_norm, Scalar(0));
  if (p < 2) return sign(x) * pow(abs(x), Scalar(p - 1)) * scale;
  return x * pow(abs(x), Scalar(p - 2)) * scale;
}

Tensor norm_impl(const Tensor& x, double p, const Mask& mask, bool keepdim, const char* node) {
  if (!x.is_floating_point())
    throw std::invalid_argument(std::string("[norm] input dtype should be either floating point or complex. Got ") +
                                dtype_name(x.dtype()) + " instead.");
  Tensor out = norm_forward(x, p, mask, keepdim);
  if (autograd::any_requires_grad({&x})) {
    autograd::record(node, {x}, out,
                     [sx = SavedVariable(x, false), so = SavedVariable(out, true), p, mask, keepdim](
                         const variable_list& g) {
                       return variable_list{norm_backward(g[0], sx.unpack(), so.unpack(), p, mask, keepdim)};
                     });
  }
  return out;
}

}  // namespace

// ====================================================================== var / std

Tensor var(const Tensor& x, IntArrayRef dims, std::optional<int64_t> correction_opt, bool keepdim) {
  const int64_t correction = correction_opt.value_or(1);
  check_var_dtype("var", x);
  Mask mask = dims_mask("var", x, dims);
  Tensor v = std::get<0>(var_mean_impl(x, mask, correction, keepdim));
  if (autograd::any_requires_grad({&x})) {
    autograd::record("VarBackward0", {x}, v,
                     [sx = SavedVariable(x, false), mask, correction, keepdim](const variable_list& g) {
                       return variable_list{var_backward(g[0], sx.unpack(), mask, correction, keepdim)};
                     });
  }
  return v;
}

Tensor std(const Tensor& x, IntArrayRef dims, std::optional<int64_t> correction_opt, bool keepdim) {
  const int64_t correction = correction_opt.value_or(1);
  check_var_dtype("std", x);
  Mask mask = dims_mask("std", x, dims);
  Tensor s;
  {
    NoGradGuard ng;
    s = troupe::sqrt(std::get<0>(var_mean_impl(x, mask, correction, keepdim, false)));
    if (s.dtype() != x.dtype()) s = s.to(x.dtype());
  }
  if (autograd::any_requires_grad({&x})) {
    autograd::record("StdBackward0", {x}, s,
                     [sx = SavedVariable(x, false), ss = SavedVariable(s, true), mask, correction,
                      keepdim](const variable_list& g) {
                       Tensor sd = ss.unpack();
                       Tensor zero;
                       {
                         NoGradGuard ng;
                         zero = eq(sd, Scalar(0));
                       }
                       Tensor gv = masked_fill(g[0] / (sd * 2.0), zero, Scalar(0));
                       return variable_list{var_backward(gv, sx.unpack(), mask, correction, keepdim)};
                     });
  }
  return s;
}

std::tuple<Tensor, Tensor> var_mean(const Tensor& x, IntArrayRef dims, std::optional<int64_t> correction_opt,
                                    bool keepdim) {
  const int64_t correction = correction_opt.value_or(1);
  check_var_dtype("var_mean", x);
  Mask mask = dims_mask("var_mean", x, dims);
  auto [v, m] = var_mean_impl(x, mask, correction, keepdim);
  if (autograd::any_requires_grad({&x})) {
    const int64_t n = reduced_count(x.sizes(), mask);
    autograd::record("VarMeanBackward0", {x}, {v, m},
                     [sx = SavedVariable(x, false), mask, correction, keepdim, n](const variable_list& g) {
                       Tensor x = sx.unpack();
                       Tensor gi;
                       if (g[0].defined()) gi = var_backward(g[0], x, mask, correction, keepdim);
                       if (g.size() > 1 && g[1].defined()) {
                         Tensor gm = expand_back(g[1], x.sizes().vec(), mask, keepdim) /
                                     Scalar(static_cast<double>(n));
                         gi = gi.defined() ? gi + gm : gm;
                       }
                       return variable_list{gi};
                     });
  }
  return {v, m};
}

Tensor var(const Tensor& x, IntArrayRef dims, bool unbiased, bool keepdim) {
  return var(x, dims, std::optional<int64_t>(unbiased ? 1 : 0), keepdim);
}
Tensor std(const Tensor& x, IntArrayRef dims, bool unbiased, bool keepdim) {
  return std(x, dims, std::optional<int64_t>(unbiased ? 1 : 0), keepdim);
}
std::tuple<Tensor, Tensor> var_mean(const Tensor& x, IntArrayRef dims, bool unbiased, bool keepdim) {
  return var_mean(x, dims, std::optional<int64_t>(unbiased ? 1 : 0), keepdim);
}

// ====================================================================== norm

Tensor norm(const Tensor& x, double p) { return norm_impl(x, p, all_mask(x), false, "NormBackward0"); }

Tensor norm(const Tensor& x, double p, IntArrayRef dims, bool keepdim) {
  return norm_impl(x, p, dims_mask("norm", x, dims), keepdim, "NormBackward1");
}

}  // namespace troupe
