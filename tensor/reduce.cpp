// Reductions and their backward functions: sum, mean, var/std/var_mean, prod, max/min, amax/amin,
// argmax/argmin, logsumexp, softmax/log_softmax, cumsum, all/any, norm, count_nonzero.
//
// Every reduction goes through run_reduction(), which views the input as (outer, r, inner) for the backend's
// reduce kernel without copying whenever the input is contiguous (or a permutation of a contiguous tensor) and
// the reduced dims are adjacent in memory (e.g. a (B, N) -> (N) bias gradient is outer=1, r=B, inner=N).
// Reduced dims that are not adjacent are reduced one block at a time (largest first), with intermediate results
// in the accumulator's dtype; only inputs whose memory is not dense are copied, and broadcast (stride-0) dims
// that are reduced are not read repeatedly (a sum over them is a multiplication). Softmax, log_softmax,
// logsumexp, var/std, the 2-norm and the reverse cumulative sum (cumsum's backward) have dedicated CPU loops
// in cpu/softmax_kernels.h.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "autograd.h"
#include "backend.h"
#include "cpu/softmax_kernels.h"
#include "ops.h"
#include "parallel.h"

namespace troupe {

using autograd::SavedVariable;
using autograd::variable_list;
using cpu::logsumexp_cpu;
using cpu::reverse_cumsum_cpu;
using cpu::softmax_backward_cpu;
using cpu::softmax_forward_cpu;

namespace {

using Mask = std::vector<bool>;

// ====================================================================== argument helpers

int64_t wrap_dim(const char* op, int64_t d, int64_t ndim) {
  const int64_t n = ndim == 0 ? 1 : ndim;
  if (d < -n || d >= n) {
    std::ostringstream os;
    os << "[" << op << "] Dimension out of range (expected to be in range of [" << -n << ", " << n - 1
       << "], but got " << d << ")";
    throw std::out_of_range(os.str());
  }
  return d < 0 ? d + n : d;
}

/// The reduced dims as a mask over x's dims; an empty list reduces every dim (as PyTorch's dim=[]).
Mask dims_mask(const char* op, const Tensor& x, IntArrayRef dims) {
  const int64_t nd = x.dim();
  Mask m(static_cast<size_t>(nd), dims.empty());
  std::vector<bool> seen(static_cast<size_t>(std::max<int64_t>(nd, 1)), false);
  for (int64_t d : dims) {
    const int64_t w = wrap_dim(op, d, nd);
    if (seen[w]) {
      std::ostringstream os;
      os << "[" << op << "] dim " << w << " appears multiple times in the list of dims";
      throw std::invalid_argument(os.str());
    }
    seen[w] = true;
    if (nd > 0) m[w] = true;
  }
  return m;
}

Mask all_mask(const Tensor& x) { return Mask(static_cast<size_t>(x.dim()), true); }

Mask one_dim_mask(const Tensor& x, int64_t d) {
  Mask m(static_cast<size_t>(x.dim()), false);
  if (x.dim() > 0) m[d] = true;
  return m;
}

std::vector<int64_t> reduced_shape(IntArrayRef sizes, const Mask& m, bool keepdim) {
  std::vector<int64_t> s;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (!m[i]) s.push_back(sizes[i]);
    else if (keepdim) s.push_back(1);
  }
  return s;
}

int64_t reduced_count(IntArrayRef sizes, const Mask& m) {
  int64_t n = 1;
  for (size_t i = 0; i < sizes.size(); ++i)
    if (m[i]) n *= sizes[i];
  return n;
}

std::vector<int64_t> mask_dims(const Mask& m) {
  std::vector<int64_t> d;
  for (size_t i = 0; i < m.size(); ++i)
    if (m[i]) d.push_back(static_cast<int64_t>(i));
  return d;
}

bool is_16bit_float(ScalarType t) { return t == kFloat16 || t == kBFloat16; }

/// The dtype the reduce kernel accumulates a dtype in.
ScalarType acc_dtype(ScalarType t) {
  if (is_16bit_float(t)) return kFloat32;
  if (is_floating_point(t)) return t;
  return kInt64;
}

/// Sum and prod of integers (and bool) give int64, as in PyTorch.
ScalarType sum_dtype(ScalarType t) { return is_integral(t, true) ? kInt64 : t; }

[[noreturn]] void not_for_dtype(const char* op, ScalarType t) {
  throw std::invalid_argument(std::string("[") + op + "] not implemented for dtype " + dtype_name(t));
}


/// A tensor sharing t's storage with the given geometry (no autograd, no view bookkeeping: internal use).
Tensor alias(const Tensor& t, std::vector<int64_t> sizes, std::vector<int64_t> strides, int64_t offset) {
  return Tensor(std::make_shared<TensorImpl>(t.impl()->storage, std::move(sizes), std::move(strides), offset,
                                             t.dtype()));
}
Tensor flat(const Tensor& t) { return alias(t, {t.numel()}, {1}, t.storage_offset()); }

template <typename F>
void dispatch_float(const char* op, ScalarType t, F&& f) {
  switch (t) {
    case kFloat32: f(float{}); return;
    case kFloat64: f(double{}); return;
    case kFloat16: f(Half{}); return;
    case kBFloat16: f(BFloat16{}); return;
    default: not_for_dtype(op, t);
  }
}

// ====================================================================== the reduction driver

bool kernel_writes(ReduceKind op, ScalarType in, ScalarType out) {
  switch (op) {
    case ReduceKind::Sum: case ReduceKind::Prod: return out == in || out == acc_dtype(in);
    case ReduceKind::Max: case ReduceKind::Min: case ReduceKind::ArgMax: case ReduceKind::ArgMin: return out == in;
    case ReduceKind::All: case ReduceKind::Any: return out == kBool || out == kUInt8;
  }
  return false;
}

ScalarType stage_dtype(ReduceKind op, ScalarType in) {
  switch (op) {
    case ReduceKind::Sum: case ReduceKind::Prod: return acc_dtype(in);
    case ReduceKind::All: case ReduceKind::Any: return kBool;
    default: return in;
  }
}

/// Reduces x over the dims in `mask` with `op` into `out` (and `idx`, int64, for the index-producing ops;
/// either may be undefined where the op allows it). out/idx are contiguous, hold the kept dims of x in x's
/// order (any shape with that many elements), and out may have any dtype the accumulator converts to.
/// Index-producing ops must reduce a single dim, or every dim of a contiguous x (flat indices).
void run_reduction(ReduceKind op, const Tensor& x_in, const Mask& mask, const Tensor& out, const Tensor& idx) {
  const Tensor& any_out = out.defined() ? out : idx;
  if (any_out.numel() == 0) return;
  Backend& be = backend(x_in);
  if (x_in.numel() == 0) {  // a reduced dim of size 0: the identity
    switch (op) {
      case ReduceKind::Sum: be.fill(out, Scalar(0)); return;
      case ReduceKind::Prod: be.fill(out, Scalar(1)); return;
      case ReduceKind::All: be.fill(out, Scalar(true)); return;
      case ReduceKind::Any: be.fill(out, Scalar(false)); return;
      default: throw std::logic_error("[reduce] max/min of an empty dim must be rejected by the op");
    }
  }

  // reduced broadcast dims (stride 0, e.g. an expanded gradient): reduce one copy of the data instead
  if (op != ReduceKind::Prod && op != ReduceKind::ArgMax && op != ReduceKind::ArgMin && !idx.defined()) {
    std::vector<int64_t> sizes = x_in.sizes().vec();
    int64_t copies = 1;
    for (int64_t d = 0; d < x_in.dim(); ++d)
      if (mask[d] && x_in.strides()[d] == 0 && sizes[d] > 1) {
        copies *= sizes[d];
        sizes[d] = 1;
      }
    if (copies > 1) {
      Tensor once = alias(x_in, sizes, x_in.strides().vec(), x_in.storage_offset());
      if (op != ReduceKind::Sum) return run_reduction(op, once, mask, out, idx);
      Tensor part = empty(out.sizes(), out.options().dtype(acc_dtype(x_in.dtype())));
      run_reduction(op, once, mask, part, idx);
      part.mul_(Scalar(copies));
      be.copy(out, part);
      return;
    }
  }

  struct Entry {
    int64_t size, stride;
    bool red;
    int64_t dim;
  };
  auto collect = [&](const Tensor& t) {
    std::vector<Entry> es;
    for (int64_t d = 0; d < t.dim(); ++d)
      if (t.sizes()[d] != 1) es.push_back({t.sizes()[d], t.strides()[d], static_cast<bool>(mask[d]), d});
    return es;
  };
  Tensor x = x_in;
  std::vector<Entry> es = collect(x);
  if (!x.is_contiguous()) {
    // a permutation of a dense block (e.g. a transpose) is used in its memory order without copying
    std::vector<Entry> s = es;
    std::stable_sort(s.begin(), s.end(), [](const Entry& a, const Entry& b) { return a.stride > b.stride; });
    bool dense = true;
    int64_t expect = 1;
    for (size_t i = s.size(); i-- > 0;) {
      if (s[i].stride != expect) dense = false;
      expect *= s[i].size;
    }
    if (dense) {
      es = s;
    } else {
      x = x.contiguous();
      es = collect(x);
    }
  }

  struct Group {
    int64_t size;
    bool red;
  };
  std::vector<Group> gs;
  for (const Entry& e : es) {
    if (!gs.empty() && gs.back().red == e.red) gs.back().size *= e.size;
    else gs.push_back({e.size, e.red});
  }
  std::vector<Entry> kept;
  for (const Entry& e : es)
    if (!e.red) kept.push_back(e);
  const bool in_order =
      std::is_sorted(kept.begin(), kept.end(), [](const Entry& a, const Entry& b) { return a.dim < b.dim; });
  if (std::none_of(gs.begin(), gs.end(), [](const Group& g) { return g.red; })) gs.push_back({1, true});

  Tensor cur = flat(x);
  while (true) {
    size_t gi = 0;
    int64_t nred = 0, best = -1;
    for (size_t i = 0; i < gs.size(); ++i)
      if (gs[i].red) {
        ++nred;
        if (gs[i].size > best) {
          best = gs[i].size;
          gi = i;
        }
      }
    int64_t outer = 1, inner = 1;
    for (size_t i = 0; i < gi; ++i) outer *= gs[i].size;
    for (size_t i = gi + 1; i < gs.size(); ++i) inner *= gs[i].size;
    const int64_t r = gs[gi].size;
    const bool last = nred == 1;
    if (!last && idx.defined()) throw std::logic_error("[reduce] indices need a single reduced dim");

    Tensor dst, dst_idx;
    if (last) {
      if (out.defined()) {
        if (in_order && kernel_writes(op, cur.dtype(), out.dtype())) dst = out;
        else
          dst = empty({outer * inner}, cur.options().dtype(kernel_writes(op, cur.dtype(), out.dtype())
                                                              ? out.dtype()
                                                              : stage_dtype(op, cur.dtype())));
      }
      if (idx.defined()) dst_idx = in_order ? idx : empty({outer * inner}, idx.options());
    } else {
      dst = empty({outer * inner}, cur.options().dtype(stage_dtype(op, cur.dtype())));
    }
    be.reduce(op, dst, dst_idx, cur, outer, r, inner);

    if (last) {
      // copy (permuting to x's dim order, converting the dtype) where the kernel could not write `out`
      std::vector<Entry> order = kept;
      std::vector<int64_t> mem_sizes;
      for (const Entry& e : kept) mem_sizes.push_back(e.size);
      std::vector<int64_t> mem_strides = contiguous_strides(mem_sizes);
      for (size_t i = 0; i < order.size(); ++i) order[i].stride = mem_strides[i];
      std::stable_sort(order.begin(), order.end(), [](const Entry& a, const Entry& b) { return a.dim < b.dim; });
      std::vector<int64_t> sz, st;
      for (const Entry& e : order) {
        sz.push_back(e.size);
        st.push_back(e.stride);
      }
      auto finish = [&](const Tensor& final_t, const Tensor& tmp) {
        if (!final_t.defined() || tmp.is_same(final_t)) return;
        be.copy(alias(final_t, sz, contiguous_strides(sz), final_t.storage_offset()),
                alias(tmp, sz, st, tmp.storage_offset()));
      };
      finish(out, dst);
      finish(idx, dst_idx);
      return;
    }
    gs.erase(gs.begin() + static_cast<std::ptrdiff_t>(gi));
    if (gi > 0 && gi < gs.size() && !gs[gi - 1].red && !gs[gi].red) {
      gs[gi - 1].size *= gs[gi].size;
      gs.erase(gs.begin() + static_cast<std::ptrdiff_t>(gi));
    }
    cur = dst;
  }
}

/// A new tensor: op over the dims of mask, in dtype `od`.
Tensor reduce_to(ReduceKind op, const Tensor& x, const Mask& mask, bool keepdim, ScalarType od) {
  Tensor out = empty(reduced_shape(x.sizes(), mask, keepdim), x.options().dtype(od));
  run_reduction(op, x, mask, out, Tensor());
  return out;
}

// ====================================================================== backward helpers

/// g (shape of a reduction's output) reshaped so that it broadcasts against the input (keepdim shape).
Tensor keep(const Tensor& g, IntArrayRef sizes, const Mask& mask, bool keepdim) {
  if (keepdim) return g;
  std::vector<int64_t> ks = reduced_shape(sizes, mask, true);
  if (g.sizes().equals(ks)) return g;
  return g.reshape(ks);
}

Tensor expand_back(const Tensor& g, const std::vector<int64_t>& sizes, const Mask& mask, bool keepdim) {
  return keep(g, sizes, mask, keepdim).expand(sizes);
}

/// (outer, r, inner) of a contiguous tensor around dim d.
void split_at(const Tensor& x, int64_t d, int64_t& outer, int64_t& r, int64_t& inner) {
  outer = 1;
  inner = 1;
  r = x.dim() == 0 ? 1 : x.size(d);
  for (int64_t i = 0; i < d; ++i) outer *= x.size(i);
  for (int64_t i = d + 1; i < x.dim(); ++i) inner *= x.size(i);
}

// ====================================================================== shared forward pieces

Tensor sum_impl(const Tensor& x, const Mask& mask, bool keepdim, ScalarType od) {
  NoGradGuard ng;
  // The kernel writes the input's dtype or its accumulator's; for any other dtype PyTorch converts first.
  Tensor xi = (od == x.dtype() || od == acc_dtype(x.dtype())) ? x : x.to(od);
  return reduce_to(ReduceKind::Sum, xi, mask, keepdim, od);
}

/// Mean in the accumulator dtype (float for 16-bit floats), not yet converted back.
Tensor mean_acc(const Tensor& x, const Mask& mask, bool keepdim) {
  NoGradGuard ng;
  Tensor s = sum_impl(x, mask, keepdim, acc_dtype(x.dtype()));
  s.div_(Scalar(static_cast<double>(reduced_count(x.sizes(), mask))));
  return s;
}

/// When the reduced dims are the trailing dims of x (size-1 kept dims aside) or all of them: x viewed as
/// (outer, r) rows once contiguous.
bool trailing_rows(const Tensor& x, const Mask& mask, int64_t& outer, int64_t& r) {
  outer = 1;
  r = 1;
  bool seen = false;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (mask[d]) {
      seen = true;
      r *= x.size(d);
    } else if (x.size(d) != 1) {
      if (seen) return false;
      outer *= x.size(d);
    }
  }
  return true;
}

/// Writes vals (double) into the contiguous floating tensor t.
void write_doubles(const Tensor& t, const std::vector<double>& vals) {
  dispatch_float("reduce", t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* p = t.data_ptr<T>();
    for (size_t i = 0; i < vals.size(); ++i) p[i] = T(static_cast<opmath_t<T>>(vals[i]));
  });
}

/// (var, mean) in x's dtype (in float for 16-bit floats when !to_input_dtype); mean has the keepdim shape
/// when keepdim.
std::tuple<Tensor, Tensor> var_mean_impl(const Tensor& x, const Mask& mask, int64_t correction, bool keepdim,
                                         bool to_input_dtype = true) {
  NoGradGuard ng;
  int64_t outer, r;
  if (x.is_cpu() && x.numel() > 0 && trailing_rows(x, mask, outer, r)) {
    // fused two-pass moments in double, no temporaries
    Tensor xc = x.contiguous();
    std::vector<double> mu(static_cast<size_t>(outer)), m2(static_cast<size_t>(outer));
    dispatch_float("var", x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      cpu::row_moments_cpu<T>(xc.data_ptr<T>(), outer, r, mu.data(), m2.data());
    });
    const double dof = static_cast<double>(std::max<int64_t>(0, r - correction));
    for (double& v : m2) v /= dof;
    const ScalarType dt = to_input_dtype || !is_16bit_float(x.dtype()) ? x.dtype() : kFloat32;
    Tensor v = empty(reduced_shape(x.sizes(), mask, keepdim), x.options().dtype(dt));
    Tensor m = empty(reduced_shape(x.sizes(), mask, keepdim), x.options().dtype(dt));
    write_doubles(v, m2);
    write_doubles(m, mu);
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

// ---- prod backward, correct with zeros in the input (PyTorch's prod_backward)
Tensor prod_backward(const Tensor& g, const Tensor& x, const Tensor& out, std::optional<int64_t> d, bool keepdim) {
  if (x.numel() == 0) return zeros_like(x);
  Mask mask = d ? one_dim_mask(x, *d) : all_mask(x);
  Tensor gk = keep(g, x.sizes(), mask, keepdim);
  Tensor ok = keep(out, x.sizes(), mask, keepdim);
  Tensor zero;
  bool any_zero;
  {
    NoGradGuard ng;
    zero = eq(x, Scalar(0));
    any_zero = troupe::any(zero).item<bool>();
  }
  if (!any_zero) return gk * ok / x;
  Tensor nz, single, none;
  {
    NoGradGuard ng;
    nz = d ? troupe::sum(zero, {*d}, true) : troupe::sum(zero);
    single = logical_and(zero, eq(nz, Scalar(1)));
    none = eq(nz, Scalar(0));
  }
  Tensor x1 = where(zero, Scalar(1), x);  // zeros replaced by 1: the product of the others
  Tensor p1 = d ? prod(x1, *d, true) : prod(x1);
  return where(none, gk * ok / x1, where(single, gk * p1, Scalar(0)));
}

// ---- max/min/amax/amin

std::string empty_all_msg(const char* op) {
  return std::string("[") + op +
         "] Expected reduction dim to be specified for input.numel() == 0. Specify the reduction dim with the 'dim' "
         "argument.";
}

void check_nonempty_dims(const char* op, const Tensor& x, const Mask& mask) {
  for (int64_t d = 0; d < x.dim(); ++d)
    if (mask[d] && x.size(d) == 0) {
      std::ostringstream os;
      os << "[" << op << "] Expected reduction dim " << d << " to have non-zero size.";
      throw std::out_of_range(os.str());
    }
}

/// Full max/min (0-dim), gradient evenly distributed among the extrema (NaN: among the NaNs).
Tensor extremum_all(const Tensor& x, bool is_max) {
  const char* op = is_max ? "max" : "min";
  if (x.numel() == 0) throw std::invalid_argument(empty_all_msg(op));
  Tensor out;
  {
    NoGradGuard ng;
    out = reduce_to(is_max ? ReduceKind::Max : ReduceKind::Min, x, all_mask(x), false, x.dtype());
  }
  if (autograd::any_requires_grad({&x})) {
    autograd::record(is_max ? "MaxBackward1" : "MinBackward1", {x}, out,
                     [sx = SavedVariable(x, false), so = SavedVariable(out, true)](const variable_list& g) {
                       Tensor x = sx.unpack(), out = so.unpack();
                       Tensor mask;
                       {
                         NoGradGuard ng;
                         mask = troupe::isnan(out).item<bool>() ? troupe::isnan(x) : eq(x, out);
                       }
                       Tensor count = troupe::sum(mask);
                       return variable_list{where(mask, g[0] / count, Scalar(0))};
                     });
  }
  return out;
}

/// max/min over one dim: (values, indices); gradient to the selected index.
std::tuple<Tensor, Tensor> extremum_dim(const Tensor& x, int64_t dim, bool keepdim, bool is_max) {
  const char* op = is_max ? "max" : "min";
  const int64_t d = wrap_dim(op, dim, x.dim());
  Mask mask = one_dim_mask(x, d);
  check_nonempty_dims(op, x, mask);
  auto shape = reduced_shape(x.sizes(), mask, keepdim);
  Tensor values = empty(shape, x.options()), indices = empty(shape, x.options().dtype(kInt64));
  {
    NoGradGuard ng;
    run_reduction(is_max ? ReduceKind::Max : ReduceKind::Min, x, mask, values, indices);
  }
  if (autograd::any_requires_grad({&x})) {
    autograd::record(
        is_max ? "MaxBackward0" : "MinBackward0", {x}, {values, indices},
        [si = SavedVariable(indices, true), sizes = x.sizes().vec(), d, mask, keepdim](const variable_list& g) {
          if (!g[0].defined()) return variable_list{Tensor()};
          if (sizes.empty()) return variable_list{g[0]};
          Tensor ik = keep(si.unpack(), sizes, mask, keepdim);
          std::vector<int64_t> ps(sizes.size(), 1);
          ps[d] = sizes[d];
          Tensor hit;
          {
            NoGradGuard ng;
            hit = eq(arange(Scalar(sizes[d]), TensorOptions().dtype(kInt64).device(ik.device())).reshape(ps), ik);
          }
          return variable_list{where(hit, keep(g[0], sizes, mask, keepdim), Scalar(0))};
        });
  }
  return {values, indices};
}

Tensor amax_amin(const Tensor& x, IntArrayRef dims, bool keepdim, bool is_max) {
  const char* op = is_max ? "amax" : "amin";
  Mask mask = dims_mask(op, x, dims);
  if (x.numel() == 0 && dims.empty() && x.dim() > 0) throw std::invalid_argument(empty_all_msg(op));
  check_nonempty_dims(op, x, mask);
  Tensor out;
  {
    NoGradGuard ng;
    out = reduce_to(is_max ? ReduceKind::Max : ReduceKind::Min, x, mask, keepdim, x.dtype());
  }
  if (autograd::any_requires_grad({&x})) {
    autograd::record(is_max ? "AmaxBackward0" : "AminBackward0", {x}, out,
                     [sx = SavedVariable(x, false), so = SavedVariable(out, true), mask, keepdim](
                         const variable_list& g) {
                       Tensor x = sx.unpack();
                       Tensor ok = keep(so.unpack(), x.sizes(), mask, keepdim);
                       Tensor hit;
                       {
                         NoGradGuard ng;
                         hit = eq(x, ok);
                       }
                       Tensor count = troupe::sum(hit, mask_dims(mask), true);
                       return variable_list{(keep(g[0], x.sizes(), mask, keepdim) / count) * hit};
                     });
  }
  return out;
}

Tensor arg_extremum(const Tensor& x, std::optional<int64_t> dim, bool keepdim, bool is_max) {
  const char* op = is_max ? "argmax" : "argmin";
  if (x.dtype() == kBool) not_for_dtype(op, x.dtype());
  const ReduceKind rop = is_max ? ReduceKind::ArgMax : ReduceKind::ArgMin;
  NoGradGuard ng;
  if (!dim) {
    if (x.numel() == 0)
      throw std::out_of_range(std::string("[") + op + "] Expected reduction dim to be specified for input.numel() == 0.");
    Tensor xc = x.contiguous();  // flat indices count in row-major order
    Tensor idx = empty(keepdim ? std::vector<int64_t>(static_cast<size_t>(x.dim()), 1) : std::vector<int64_t>{},
                       x.options().dtype(kInt64));
    run_reduction(rop, xc, all_mask(xc), Tensor(), idx);
    return idx;
  }
  const int64_t d = wrap_dim(op, *dim, x.dim());
  Mask mask = one_dim_mask(x, d);
  check_nonempty_dims(op, x, mask);
  Tensor idx = empty(reduced_shape(x.sizes(), mask, keepdim), x.options().dtype(kInt64));
  run_reduction(rop, x, mask, Tensor(), idx);
  return idx;
}

Tensor all_any(const Tensor& x, std::optional<int64_t> dim, bool keepdim, bool is_all) {
  const char* op = is_all ? "all" : "any";
  Mask mask = dim ? one_dim_mask(x, wrap_dim(op, *dim, x.dim())) : all_mask(x);
  NoGradGuard ng;
  return reduce_to(is_all ? ReduceKind::All : ReduceKind::Any, x, mask, dim ? keepdim : false,
                   x.dtype() == kUInt8 ? kUInt8 : kBool);
}

// ---- softmax family

Tensor softmax_impl(const Tensor& x_in, int64_t dim, std::optional<ScalarType> dtype, bool log) {
  const char* op = log ? "log_softmax" : "softmax";
  Tensor x = dtype && *dtype != x_in.dtype() ? x_in.to(*dtype) : x_in;  // recorded: ToCopyBackward0
  if (!x.is_floating_point()) not_for_dtype(op, x.dtype());
  const int64_t d = wrap_dim(op, dim, x.dim());
  Tensor out;
  {
    NoGradGuard ng;
    if (x.is_cpu()) {
      Tensor xc = x.contiguous();
      out = empty(x.sizes(), x.options());
      if (x.numel() > 0) {
        int64_t outer, r, inner;
        split_at(xc, d, outer, r, inner);
        dispatch_float(op, x.dtype(), [&](auto tag) {
          using T = decltype(tag);
          if (log) softmax_forward_cpu<T, true>(xc.data_ptr<T>(), out.data_ptr<T>(), outer, r, inner);
          else softmax_forward_cpu<T, false>(xc.data_ptr<T>(), out.data_ptr<T>(), outer, r, inner);
        });
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
                       if (!autograd::GradMode::is_enabled() && y.is_cpu() && last && go.dtype() == y.dtype() &&
                           y.numel() > 0) {
                         Tensor gc = go.contiguous(), yc = y.contiguous();
                         Tensor gi = empty(y.sizes(), y.options());
                         const int64_t r = y.dim() == 0 ? 1 : y.size(-1);
                         dispatch_float(log ? "log_softmax" : "softmax", y.dtype(), [&](auto tag) {
                           using T = decltype(tag);
                           if (log)
                             softmax_backward_cpu<T, true>(gc.data_ptr<T>(), yc.data_ptr<T>(), gi.data_ptr<T>(),
                                                           y.numel() / r, r);
                           else
                             softmax_backward_cpu<T, false>(gc.data_ptr<T>(), yc.data_ptr<T>(), gi.data_ptr<T>(),
                                                            y.numel() / r, r);
                         });
                         return variable_list{gi};
                       }
                       if (log) return variable_list{go - exp(y) * troupe::sum(go, {d}, true)};
                       return variable_list{y * (go - troupe::sum(go * y, {d}, true))};
                     });
  }
  return out;
}

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
    if (g.is_cpu()) {
      Tensor gc = g.contiguous();
      out = empty(g.sizes(), g.options());
      int64_t outer, r, inner;
      split_at(gc, d, outer, r, inner);
      dispatch_all(g.dtype(), [&](auto tag) {
        using T = decltype(tag);
        if constexpr (std::is_same_v<T, bool>) not_for_dtype("cumsum", g.dtype());
        else reverse_cumsum_cpu<T>(gc.data_ptr<T>(), out.data_ptr<T>(), outer, r, inner);
      });
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

// ---- norm

Tensor norm_forward(const Tensor& x, double p, const Mask& mask, bool keepdim) {
  NoGradGuard ng;
  Tensor xf = is_16bit_float(x.dtype()) ? x.to(kFloat32) : x;
  Tensor out;
  int64_t outer, r;
  if (p == 2 && x.is_cpu() && x.numel() > 0 && trailing_rows(x, mask, outer, r)) {
    // fused sum of squares in double
    Tensor xc = x.contiguous();
    std::vector<double> ss(static_cast<size_t>(outer));
    dispatch_float("norm", x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      cpu::row_sumsq_cpu<T>(xc.data_ptr<T>(), outer, r, ss.data());
    });
    for (double& v : ss) v = std::sqrt(v);
    out = empty(reduced_shape(x.sizes(), mask, keepdim), x.options());
    write_doubles(out, ss);
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

// ====================================================================== sum / mean

Tensor sum(const Tensor& x, std::optional<ScalarType> dtype) {
  Mask mask = all_mask(x);
  Tensor out = sum_impl(x, mask, false, dtype ? *dtype : sum_dtype(x.dtype()));
  if (autograd::any_requires_grad({&x})) {
    autograd::record("SumBackward0", {x}, out, [sizes = x.sizes().vec()](const variable_list& g) {
      return variable_list{g[0].expand(sizes)};
    }, false);
  }
  return out;
}

Tensor sum(const Tensor& x, IntArrayRef dims, bool keepdim, std::optional<ScalarType> dtype) {
  Mask mask = dims_mask("sum", x, dims);
  Tensor out = sum_impl(x, mask, keepdim, dtype ? *dtype : sum_dtype(x.dtype()));
  if (autograd::any_requires_grad({&x})) {
    autograd::record("SumBackward1", {x}, out, [sizes = x.sizes().vec(), mask, keepdim](const variable_list& g) {
      return variable_list{expand_back(g[0], sizes, mask, keepdim)};
    }, false);
  }
  return out;
}

namespace {
Tensor mean_impl(const Tensor& x, const Mask& mask, bool keepdim, const char* node) {
  if (!x.is_floating_point())
    throw std::invalid_argument(
        std::string("[mean] could not infer output dtype. Input dtype must be either a floating point or complex "
                    "dtype. Got: ") + dtype_name(x.dtype()));
  Tensor out = mean_acc(x, mask, keepdim);
  if (out.dtype() != x.dtype()) {
    NoGradGuard ng;
    out = out.to(x.dtype());
  }
  if (autograd::any_requires_grad({&x})) {
    const int64_t n = reduced_count(x.sizes(), mask);
    autograd::record(node, {x}, out, [sizes = x.sizes().vec(), mask, keepdim, n](const variable_list& g) {
      return variable_list{expand_back(g[0], sizes, mask, keepdim) / Scalar(static_cast<double>(n))};
    }, false);
  }
  return out;
}
}  // namespace

Tensor mean(const Tensor& x) { return mean_impl(x, all_mask(x), false, "MeanBackward0"); }

Tensor mean(const Tensor& x, IntArrayRef dims, bool keepdim) {
  return mean_impl(x, dims_mask("mean", x, dims), keepdim, "MeanBackward1");
}

// ====================================================================== var / std

Tensor var(const Tensor& x, IntArrayRef dims, int64_t correction, bool keepdim) {
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

Tensor std(const Tensor& x, IntArrayRef dims, int64_t correction, bool keepdim) {
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

std::tuple<Tensor, Tensor> var_mean(const Tensor& x, IntArrayRef dims, int64_t correction, bool keepdim) {
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

// ====================================================================== prod

Tensor prod(const Tensor& x) {
  Tensor out;
  {
    NoGradGuard ng;
    out = reduce_to(ReduceKind::Prod, x, all_mask(x), false, sum_dtype(x.dtype()));
  }
  if (autograd::any_requires_grad({&x})) {
    autograd::record("ProdBackward0", {x}, out,
                     [sx = SavedVariable(x, false), so = SavedVariable(out, true)](const variable_list& g) {
                       return variable_list{prod_backward(g[0], sx.unpack(), so.unpack(), std::nullopt, false)};
                     });
  }
  return out;
}

Tensor prod(const Tensor& x, int64_t dim, bool keepdim) {
  const int64_t d = wrap_dim("prod", dim, x.dim());
  Tensor out;
  {
    NoGradGuard ng;
    out = reduce_to(ReduceKind::Prod, x, one_dim_mask(x, d), keepdim, sum_dtype(x.dtype()));
  }
  if (autograd::any_requires_grad({&x})) {
    autograd::record("ProdBackward1", {x}, out,
                     [sx = SavedVariable(x, false), so = SavedVariable(out, true), d, keepdim](const variable_list& g) {
                       Tensor x = sx.unpack();
                       if (x.dim() == 0) return variable_list{g[0]};
                       return variable_list{prod_backward(g[0], x, so.unpack(), d, keepdim)};
                     });
  }
  return out;
}

// ====================================================================== max / min / amax / amin / argmax / argmin

Tensor max(const Tensor& x) { return extremum_all(x, true); }
Tensor min(const Tensor& x) { return extremum_all(x, false); }
std::tuple<Tensor, Tensor> max(const Tensor& x, int64_t d, bool keepdim) { return extremum_dim(x, d, keepdim, true); }
std::tuple<Tensor, Tensor> min(const Tensor& x, int64_t d, bool keepdim) { return extremum_dim(x, d, keepdim, false); }
Tensor amax(const Tensor& x, IntArrayRef dims, bool keepdim) { return amax_amin(x, dims, keepdim, true); }
Tensor amin(const Tensor& x, IntArrayRef dims, bool keepdim) { return amax_amin(x, dims, keepdim, false); }
Tensor argmax(const Tensor& x, std::optional<int64_t> d, bool keepdim) { return arg_extremum(x, d, keepdim, true); }
Tensor argmin(const Tensor& x, std::optional<int64_t> d, bool keepdim) { return arg_extremum(x, d, keepdim, false); }

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
    if (x.is_cpu() && (nred <= 1 || all)) {
      Tensor xc = x.contiguous();
      out = empty(reduced_shape(x.sizes(), mask, keepdim), x.options());
      int64_t outer = 1, r = xc.numel(), inner = 1;
      if (!all) split_at(xc, rd[0], outer, r, inner);
      if (out.numel() > 0)
        dispatch_float("logsumexp", x.dtype(), [&](auto tag) {
          using T = decltype(tag);
          logsumexp_cpu<T>(xc.data_ptr<T>(), out.data_ptr<T>(), outer, r, inner);
        });
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

Tensor softmax(const Tensor& x, int64_t d, std::optional<ScalarType> dtype) { return softmax_impl(x, d, dtype, false); }
Tensor log_softmax(const Tensor& x, int64_t d, std::optional<ScalarType> dtype) {
  return softmax_impl(x, d, dtype, true);
}

// ====================================================================== cumsum

Tensor cumsum(const Tensor& x, int64_t dim, std::optional<ScalarType> dtype) {
  const int64_t d = wrap_dim("cumsum", dim, x.dim());
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

// ====================================================================== all / any / count_nonzero

Tensor all(const Tensor& x) { return all_any(x, std::nullopt, false, true); }
Tensor all(const Tensor& x, int64_t d, bool keepdim) { return all_any(x, d, keepdim, true); }
Tensor any(const Tensor& x) { return all_any(x, std::nullopt, false, false); }
Tensor any(const Tensor& x, int64_t d, bool keepdim) { return all_any(x, d, keepdim, false); }

Tensor count_nonzero(const Tensor& x) {
  NoGradGuard ng;
  return reduce_to(ReduceKind::Sum, ne(x, Scalar(0)), all_mask(x), false, kInt64);
}

// ====================================================================== norm

Tensor norm(const Tensor& x, double p) { return norm_impl(x, p, all_mask(x), false, "NormBackward0"); }

Tensor norm(const Tensor& x, double p, IntArrayRef dims, bool keepdim) {
  return norm_impl(x, p, dims_mask("norm", x, dims), keepdim, "NormBackward1");
}

}  // namespace troupe
