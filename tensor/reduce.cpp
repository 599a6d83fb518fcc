// The reductions sum, mean, prod, max/min, amax/amin, argmax/argmin, all/any and count_nonzero with their
// backward functions, and the driver every reduction shares (declared in reduce_detail.h).
//
// Every reduction goes through run_reduction(), which views the input as (outer, r, inner) for the backend's
// reduce kernel without copying whenever the input is contiguous (or a permutation of a contiguous tensor) and
// the reduced dims are adjacent in memory (e.g. a (B, N) -> (N) bias gradient is outer=1, r=B, inner=N).
// Reduced dims that are not adjacent are reduced one block at a time (largest first), with intermediate results
// in the accumulator's dtype; only inputs whose memory is not dense are copied, and broadcast (stride-0) dims
// that are reduced are not read repeatedly (a sum over them is a multiplication). var/std and norm are in
// reduce_stats.cpp, softmax/log_softmax and logsumexp in softmax.cpp, cumsum in cumsum.cpp.
#include <algorithm>
#include "tracing.h"
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "autograd.h"
#include "backend.h"
#include "ops.h"
#include "parallel.h"
#include "reduce_detail.h"

namespace troupe {

using autograd::SavedVariable;
using autograd::variable_list;

namespace reduce_detail {

// ====================================================================== argument helpers

/// The reduced dims as a mask over x's dims; an empty list reduces every dim (as PyTorch's dim=[]).
Mask dims_mask(const char* op, const Tensor& x, IntArrayRef dims) {
  const int64_t nd = x.dim();
  Mask m(static_cast<size_t>(nd), dims.empty());
  std::vector<bool> seen(static_cast<size_t>(std::max<int64_t>(nd, 1)), false);
  for (int64_t d : dims) {
    const int64_t w = wrap_dim(d, nd, op);
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

[[noreturn]] void not_for_dtype(const char* op, ScalarType t) {
  throw std::invalid_argument(std::string("[") + op + "] not implemented for dtype " + dtype_name(t));
}

}  // namespace reduce_detail

namespace {

using namespace reduce_detail;

/// A tensor sharing t's storage with the given geometry (no autograd, no view bookkeeping: internal use).
Tensor alias(const Tensor& t, std::vector<int64_t> sizes, std::vector<int64_t> strides, int64_t offset) {
  return Tensor(std::make_shared<TensorImpl>(t.impl()->storage, std::move(sizes), std::move(strides), offset,
                                             t.dtype()));
}
Tensor flat(const Tensor& t) { return alias(t, {t.numel()}, {1}, t.storage_offset()); }


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

}  // namespace

namespace reduce_detail {

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

}  // namespace reduce_detail

using namespace reduce_detail;

namespace {

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
  const int64_t d = wrap_dim(dim, x.dim(), op);
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
  const int64_t d = wrap_dim(*dim, x.dim(), op);
  Mask mask = one_dim_mask(x, d);
  check_nonempty_dims(op, x, mask);
  Tensor idx = empty(reduced_shape(x.sizes(), mask, keepdim), x.options().dtype(kInt64));
  run_reduction(rop, x, mask, Tensor(), idx);
  return idx;
}

Tensor all_any(const Tensor& x, std::optional<int64_t> dim, bool keepdim, bool is_all) {
  const char* op = is_all ? "all" : "any";
  Mask mask = dim ? one_dim_mask(x, wrap_dim(*dim, x.dim(), op)) : all_mask(x);
  NoGradGuard ng;
  return reduce_to(is_all ? ReduceKind::All : ReduceKind::Any, x, mask, dim ? keepdim : false,
                   x.dtype() == kUInt8 ? kUInt8 : kBool);
}

}  // namespace

// ====================================================================== sum / mean

Tensor sum(const Tensor& x, std::optional<ScalarType> dtype) {
  TROUPE_TRACE_OP("aten::sum", sum(x, dtype), x, tracing::dtype(dtype));
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
  TROUPE_TRACE_OP("aten::sum", sum(x, dims, keepdim, dtype), x, dims, keepdim, tracing::dtype(dtype));
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

Tensor mean(const Tensor& x) {
  TROUPE_TRACE_OP("aten::mean", mean(x), x, IValue());
  return mean_impl(x, all_mask(x), false, "MeanBackward0");
}

Tensor mean(const Tensor& x, IntArrayRef dims, bool keepdim) {
  TROUPE_TRACE_OP("aten::mean", mean(x, dims, keepdim), x, dims, keepdim, IValue());
  return mean_impl(x, dims_mask("mean", x, dims), keepdim, "MeanBackward1");
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
  const int64_t d = wrap_dim(dim, x.dim(), "prod");
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

// ====================================================================== all / any / count_nonzero

Tensor all(const Tensor& x) { return all_any(x, std::nullopt, false, true); }
Tensor all(const Tensor& x, int64_t d, bool keepdim) { return all_any(x, d, keepdim, true); }
Tensor any(const Tensor& x) { return all_any(x, std::nullopt, false, false); }
Tensor any(const Tensor& x, int64_t d, bool keepdim) { return all_any(x, d, keepdim, false); }

Tensor count_nonzero(const Tensor& x) {
  NoGradGuard ng;
  return reduce_to(ReduceKind::Sum, ne(x, Scalar(0)), all_mask(x), false, kInt64);
}

}  // namespace troupe
