// Index-driven ops: gather/scatter/scatter_add, index_select/index_add, one_hot, masked_select, nonzero
// and tril/triu; with their backward functions.
#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "autograd.h"
#include "backend.h"
#include "op_helpers.h"
#include "ops.h"
#include "parallel.h"

namespace troupe {

using autograd::SavedVariable;
using autograd::variable_list;
using namespace op_detail;

namespace {

// t itself when it has at least one dim; a 1-element 1-D alias of a 0-dim tensor.
Tensor at_least_1d(const Tensor& t) {
  if (t.dim() > 0) return t;
  return raw_view(t, {1}, {1}, t.storage_offset());
}

// A contiguous copy of t, outside autograd.
Tensor raw_clone(const Tensor& t) {
  Tensor out = empty(t.sizes(), t.options());
  backend(t).copy(out, t);
  return out;
}

// t (or a copy) as a contiguous tensor outside autograd.
Tensor raw_contiguous(const Tensor& t) { return t.is_contiguous() ? t : raw_clone(t); }

// The index of a gather/scatter: int64 (PyTorch's rule), contiguous, detached.
Tensor gather_index(const char* op, const Tensor& index) {
  check_defined(index, op, "index");
  if (index.dtype() != kInt64)
    throw std::invalid_argument(op_prefix(op) + "Expected dtype int64 for index, got " + dtype_name(index.dtype()));
  return raw_contiguous(index.detach());
}

// The index of index_select/index_add: int64 or int32, at most 1-D; returned 1-D int64 contiguous.
Tensor vector_index(const char* op, const Tensor& index) {
  check_defined(index, op, "index");
  if (index.dtype() != kInt64 && index.dtype() != kInt32)
    throw std::invalid_argument(op_prefix(op) + "Expected dtype int32 or int64 for index, got " +
                                dtype_name(index.dtype()));
  if (index.dim() > 1)
    throw std::out_of_range(op_prefix(op) + "Index is supposed to be a vector, got a tensor of shape " +
                            shape_str(index.sizes()));
  Tensor i = index.detach();
  if (i.dtype() != kInt64) {
    Tensor c = empty(i.sizes(), i.options().dtype(kInt64));
    backend(i).copy(c, i);
    i = c;
  }
  i = raw_contiguous(i);
  return raw_view(i, {i.numel()}, {1}, i.storage_offset());
}

// An unsigned integer type of the element's size (moving elements needs no dtype dispatch).
template <typename F>
void dispatch_bytes_of(size_t n, F&& f) {
  switch (n) {
    case 1: f(uint8_t{}); break;
    case 2: f(uint16_t{}); break;
    case 4: f(uint32_t{}); break;
    default: f(uint64_t{}); break;
  }
}

// A tensor of `full` sizes that holds g in its leading corner and zeros elsewhere (differentiable in g).
Tensor pad_corner(const Tensor& g, IntArrayRef full) {
  if (g.sizes().equals(full)) return g;
  Tensor out = zeros(full, g.options());
  Tensor v = out;
  for (int64_t k = 0; k < g.dim(); ++k) v = v.narrow(k, 0, g.size(k));
  v.copy_(g);
  return out;
}

}  // namespace

// ================================================================ gather / scatter

namespace {

// Shape checks shared by gather/scatter (PyTorch's gather_shape_check / scatter_shape_check).
// `src` is null for gather and for a scatter of a value.
void check_gather_shapes(const char* op, const Tensor& self, int64_t d, const Tensor& index, const Tensor* src,
                         bool is_gather) {
  const int64_t nd = std::max<int64_t>(self.dim(), 1);
  if (std::max<int64_t>(index.dim(), 1) != nd)
    throw std::invalid_argument(op_prefix(op) + "Index tensor must have the same number of dimensions as " +
                                (is_gather ? "input" : "self") + " tensor (got " + std::to_string(index.dim()) + " and " +
                                std::to_string(self.dim()) + ")");
  if (src && std::max<int64_t>(src->dim(), 1) != nd)
    throw std::invalid_argument(op_prefix(op) +
                                "Index tensor must have the same number of dimensions as src tensor (got " +
                                std::to_string(index.dim()) + " and " + std::to_string(src->dim()) + ")");
  auto sz = [](const Tensor& t, int64_t k) { return t.dim() == 0 ? int64_t(1) : t.size(k); };
  if (index.numel() == 0) return;
  for (int64_t k = 0; k < nd; ++k) {
    bool bad_self = k != d && sz(index, k) > sz(self, k);
    bool bad_src = src && sz(index, k) > sz(*src, k);
    if (!bad_self && !bad_src) continue;
    std::string msg = op_prefix(op);
    if (is_gather) {
      msg += "Size does not match at dimension " + std::to_string(k) + " expected index " +
             list_str(index.sizes()) + " to be smaller than self " + list_str(self.sizes()) +
             " apart from dimension " + std::to_string(d);
    } else {
      msg += "Expected index " + list_str(index.sizes()) + " to be smaller than self " + list_str(self.sizes()) +
             " apart from dimension " + std::to_string(d);
      if (src) msg += " and to be smaller size than src " + list_str(src->sizes());
    }
    throw std::invalid_argument(msg);
  }
}

// Validates a scatter and returns the index ready for the kernel.
Tensor scatter_prepare(const char* op, const Tensor& self, int64_t& d, const Tensor& index, const Tensor* src) {
  check_defined(self, op, "self");
  d = wrap_dim(d, self.dim(), op);
  Tensor idx = gather_index(op, index);
  check_same_device(op, self, idx);
  if (src) {
    check_defined(*src, op, "src");
    check_same_device(op, self, *src);
    if (src->dtype() != self.dtype())
      throw std::invalid_argument(op_prefix(op) + "Expected self.dtype to be equal to src.dtype (got " +
                                  dtype_name(self.dtype()) + " and " + dtype_name(src->dtype()) + ")");
  }
  check_gather_shapes(op, self, d, idx, src, false);
  return idx;
}

// The kernel call: out (modified in place), src may be strided.
void scatter_kernel(const Tensor& out, int64_t d, const Tensor& idx, const Tensor& src, bool acc) {
  if (idx.numel() == 0) return;
  backend(out).scatter(at_least_1d(out), d, at_least_1d(idx), at_least_1d(src), acc);
}

// A 0-stride tensor of `sizes` holding v (the src of a scatter of a value).
Tensor value_src(const Tensor& like, Scalar v, IntArrayRef sizes) {
  Tensor one = empty({}, like.options());
  backend(like).fill(one, v);
  return raw_view(one, sizes.vec(), std::vector<int64_t>(sizes.size(), 0), 0);
}

}  // namespace

Tensor gather(const Tensor& x, int64_t d, const Tensor& index) {
  check_defined(x, "gather", "self");
  d = wrap_dim(d, x.dim(), "gather");
  Tensor idx = gather_index("gather", index);
  check_same_device("gather", x, idx);
  check_gather_shapes("gather", x, d, idx, nullptr, true);
  Tensor out = empty(idx.sizes(), x.options());
  if (out.numel() > 0) backend(x).gather(at_least_1d(out), at_least_1d(x), d, at_least_1d(idx));
  if (autograd::any_requires_grad({&x})) {
    autograd::record("GatherBackward0", {x}, out, [xs = x.sizes().vec(), d, idx](const variable_list& g) {
      return variable_list{scatter_add(zeros(xs, g[0].options()), d, idx, g[0])};
    });
  }
  return out;
}

Tensor scatter(const Tensor& x, int64_t d, const Tensor& index, const Tensor& src) {
  Tensor idx = scatter_prepare("scatter", x, d, index, &src);
  Tensor out = raw_clone(x);
  scatter_kernel(out, d, idx, src, false);
  if (autograd::any_requires_grad({&x, &src})) {
    bool gx = x.requires_grad(), gs = src.requires_grad();
    autograd::record("ScatterBackward0", {x, src}, out,
                     [d, idx, gx, gs, ss = src.sizes().vec()](const variable_list& g) {
                       variable_list r(2);
                       if (gx) r[0] = scatter(g[0], d, idx, Scalar(0));
                       if (gs) r[1] = pad_corner(gather(g[0], d, idx), ss);
                       return r;
                     });
  }
  return out;
}

Tensor scatter(const Tensor& x, int64_t d, const Tensor& index, Scalar v) {
  Tensor idx = scatter_prepare("scatter", x, d, index, nullptr);
  Tensor out = raw_clone(x);
  scatter_kernel(out, d, idx, value_src(x, v, idx.sizes()), false);
  if (autograd::any_requires_grad({&x})) {
    autograd::record("ScatterBackward1", {x}, out, [d, idx](const variable_list& g) {
      return variable_list{scatter(g[0], d, idx, Scalar(0))};
    });
  }
  return out;
}

Tensor scatter_add(const Tensor& x, int64_t d, const Tensor& index, const Tensor& src) {
  Tensor idx = scatter_prepare("scatter_add", x, d, index, &src);
  Tensor out = raw_clone(x);
  scatter_kernel(out, d, idx, src, true);
  if (autograd::any_requires_grad({&x, &src})) {
    bool gs = src.requires_grad();
    autograd::record("ScatterAddBackward0", {x, src}, out, [d, idx, gs, ss = src.sizes().vec()](const variable_list& g) {
      variable_list r(2);
      r[0] = g[0];
      if (gs) r[1] = pad_corner(gather(g[0], d, idx), ss);
      return r;
    });
  }
  return out;
}

Tensor& Tensor::scatter_(int64_t d, const Tensor& index, const Tensor& src) {
  Tensor idx = scatter_prepare("scatter_", *this, d, index, &src);
  autograd::check_inplace(*this, "scatter_");
  Tensor s = src.is_same(*this) || src.impl()->storage == impl()->storage ? raw_clone(src) : src;
  scatter_kernel(*this, d, idx, s, false);
  bump_version();
  autograd::record_inplace("ScatterBackward0", *this, {src},
                           [d, idx, gs = src.requires_grad(), ss = src.sizes().vec()](const variable_list& g) {
                             variable_list r(2);
                             r[0] = troupe::scatter(g[0], d, idx, Scalar(0));
                             if (gs) r[1] = pad_corner(troupe::gather(g[0], d, idx), ss);
                             return r;
                           });
  return *this;
}

Tensor& Tensor::scatter_(int64_t d, const Tensor& index, Scalar v) {
  Tensor idx = scatter_prepare("scatter_", *this, d, index, nullptr);
  autograd::check_inplace(*this, "scatter_");
  scatter_kernel(*this, d, idx, value_src(*this, v, idx.sizes()), false);
  bump_version();
  autograd::record_inplace("ScatterBackward1", *this, {}, [d, idx](const variable_list& g) {
    return variable_list{troupe::scatter(g[0], d, idx, Scalar(0))};
  });
  return *this;
}

Tensor& Tensor::scatter_add_(int64_t d, const Tensor& index, const Tensor& src) {
  Tensor idx = scatter_prepare("scatter_add_", *this, d, index, &src);
  autograd::check_inplace(*this, "scatter_add_");
  Tensor s = src.impl()->storage == impl()->storage ? raw_clone(src) : src;
  scatter_kernel(*this, d, idx, s, true);
  bump_version();
  autograd::record_inplace("ScatterAddBackward0", *this, {src},
                           [d, idx, gs = src.requires_grad(), ss = src.sizes().vec()](const variable_list& g) {
                             variable_list r(2);
                             r[0] = g[0];
                             if (gs) r[1] = pad_corner(troupe::gather(g[0], d, idx), ss);
                             return r;
                           });
  return *this;
}

// ================================================================ index_select / index_add

Tensor index_select(const Tensor& x, int64_t d, const Tensor& index) {
  check_defined(x, "index_select", "self");
  d = wrap_dim(d, x.dim(), "index_select");
  Tensor idx = vector_index("index_select", index);
  check_same_device("index_select", x, idx);
  std::vector<int64_t> sizes = x.sizes().vec();
  if (x.dim() > 0) {
    sizes[d] = idx.numel();
  } else if (idx.numel() != 1) {
    throw std::out_of_range("[index_select] index_select(): Index to scalar can have only 1 value, got " +
                            std::to_string(idx.numel()) + " value(s)");
  }
  Tensor out = empty(sizes, x.options());
  if (out.numel() > 0) backend(x).index_select(at_least_1d(out), at_least_1d(x), d, idx);
  if (autograd::any_requires_grad({&x})) {
    autograd::record("IndexSelectBackward0", {x}, out, [xs = x.sizes().vec(), d, idx](const variable_list& g) {
      return variable_list{index_add(zeros(xs, g[0].options()), d, idx, g[0])};
    });
  }
  return out;
}

namespace {

Tensor index_add_prepare(const char* op, const Tensor& x, int64_t& d, const Tensor& index, const Tensor& src) {
  check_defined(x, op, "self");
  check_defined(src, op, "source");
  d = wrap_dim(d, x.dim(), op);
  Tensor idx = vector_index(op, index);
  check_same_device(op, x, idx);
  check_same_device(op, x, src);
  if (src.dtype() != x.dtype())
    throw std::invalid_argument(op_prefix(op) + "self (" + dtype_name(x.dtype()) + ") and source (" +
                                dtype_name(src.dtype()) + ") must have the same scalar type");
  const int64_t nd = std::max<int64_t>(x.dim(), 1);
  if (std::max<int64_t>(src.dim(), 1) != nd)
    throw std::invalid_argument(op_prefix(op) + "source has " + std::to_string(src.dim()) +
                                " dimensions but self has " + std::to_string(x.dim()));
  const int64_t src_n = src.dim() == 0 ? 1 : src.size(d);
  if (idx.numel() != src_n)
    throw std::invalid_argument(op_prefix(op) + "Number of indices (" + std::to_string(idx.numel()) +
                                ") should be equal to source.size(dim): (" + std::to_string(src_n) +
                                "), for dim: " + std::to_string(d));
  for (int64_t k = 0; k < x.dim(); ++k)
    if (k != d && src.size(k) != x.size(k))
      throw std::invalid_argument(op_prefix(op) + "source shape " + shape_str(src.sizes()) +
                                  " must match self shape " + shape_str(x.sizes()) + " except in dimension " +
                                  std::to_string(d));
  return idx;
}

void index_add_kernel(const Tensor& out, int64_t d, const Tensor& idx, const Tensor& src, Scalar alpha) {
  if (idx.numel() == 0 || out.numel() == 0) return;
  backend(out).index_add(at_least_1d(out), d, idx, at_least_1d(src), alpha.to_double());
}

Tensor index_add_src_grad(const Tensor& g, int64_t d, const Tensor& idx, double alpha, IntArrayRef src_sizes) {
  Tensor r = g.dim() == 0 ? g.reshape({1}).index_select(0, idx) : index_select(g, d, idx);
  if (alpha != 1) r = r * alpha;
  return r.reshape(src_sizes);
}

}  // namespace

Tensor index_add(const Tensor& x, int64_t d, const Tensor& index, const Tensor& src, Scalar alpha) {
  Tensor idx = index_add_prepare("index_add", x, d, index, src);
  Tensor out = raw_clone(x);
  index_add_kernel(out, d, idx, src, alpha);
  if (autograd::any_requires_grad({&x, &src})) {
    autograd::record("IndexAddBackward0", {x, src}, out,
                     [d, idx, a = alpha.to_double(), gs = src.requires_grad(), ss = src.sizes().vec()](
                         const variable_list& g) {
                       variable_list r(2);
                       r[0] = g[0];
                       if (gs) r[1] = index_add_src_grad(g[0], d, idx, a, ss);
                       return r;
                     });
  }
  return out;
}

Tensor& Tensor::index_add_(int64_t d, const Tensor& index, const Tensor& src, Scalar alpha) {
  Tensor idx = index_add_prepare("index_add_", *this, d, index, src);
  autograd::check_inplace(*this, "index_add_");
  Tensor s = src.impl()->storage == impl()->storage ? raw_clone(src) : src;
  index_add_kernel(*this, d, idx, s, alpha);
  bump_version();
  autograd::record_inplace("IndexAddBackward0", *this, {src},
                           [d, idx, a = alpha.to_double(), gs = src.requires_grad(), ss = src.sizes().vec()](
                               const variable_list& g) {
                             variable_list r(2);
                             r[0] = g[0];
                             if (gs) r[1] = index_add_src_grad(g[0], d, idx, a, ss);
                             return r;
                           });
  return *this;
}

// ================================================================ one_hot

Tensor one_hot(const Tensor& x, int64_t num_classes) {
  check_defined(x, "one_hot", "self");
  if (x.dtype() != kInt64)
    throw std::invalid_argument("[one_hot] one_hot is only applicable to index tensor (int64), got " +
                                std::string(dtype_name(x.dtype())));
  std::vector<int64_t> sizes = x.sizes().vec();
  if (x.numel() == 0) {
    if (num_classes <= 0)
      throw std::invalid_argument("[one_hot] Can not infer total number of classes from empty tensor.");
    sizes.push_back(num_classes);
    return zeros(sizes, x.options());
  }
  if (num_classes < -1)
    throw std::invalid_argument("[one_hot] num_classes should be -1 or non-negative, got " + std::to_string(num_classes));
  Tensor xc = raw_contiguous(x.is_cpu() ? x.detach() : x.detach().cpu());
  const int64_t* p = static_cast<const int64_t*>(xc.data_ptr());
  const int64_t n = xc.numel();
  int64_t lo = p[0], hi = p[0];
  for (int64_t i = 1; i < n; ++i) {
    lo = std::min(lo, p[i]);
    hi = std::max(hi, p[i]);
  }
  if (lo < 0) throw std::invalid_argument("[one_hot] Class values must be non-negative.");
  if (num_classes == -1) {
    num_classes = hi + 1;
  } else if (hi >= num_classes) {
    throw std::invalid_argument("[one_hot] Class values must be smaller than num_classes.");
  }
  sizes.push_back(num_classes);
  Tensor out = zeros(sizes, TensorOptions().dtype(kInt64));
  int64_t* o = static_cast<int64_t*>(out.data_ptr());
  for (int64_t i = 0; i < n; ++i) o[i * num_classes + p[i]] = 1;
  return x.is_cpu() ? out : out.to(x.device());
}

// ================================================================ masked_select / nonzero

namespace {

// A contiguous CPU copy (or t itself), outside autograd.
Tensor cpu_contiguous(const Tensor& t) {
  Tensor d = t.detach();
  if (!d.is_cpu()) d = d.cpu();
  return raw_contiguous(d);
}

// Number of non-zero elements of a contiguous CPU tensor (NaN counts as non-zero).
int64_t count_nonzero_contiguous(const Tensor& c) {
  const int64_t n = c.numel();
  return dispatch_all(c.dtype(), [&](auto tag) -> int64_t {
    using T = decltype(tag);
    using C = opmath_t<T>;
    const T* p = static_cast<const T*>(c.data_ptr());
    int64_t cnt = 0;
    for (int64_t i = 0; i < n; ++i) cnt += static_cast<C>(p[i]) != C(0);
    return cnt;
  });
}

}  // namespace

Tensor masked_select(const Tensor& x, const Tensor& mask) {
  check_defined(x, "masked_select", "self");
  check_defined(mask, "masked_select", "mask");
  if (mask.dtype() != kBool && mask.dtype() != kUInt8)
    throw std::invalid_argument(std::string("[masked_select] expected BoolTensor or ByteTensor for mask, got ") +
                                dtype_name(mask.dtype()));
  check_same_device("masked_select", x, mask);
  std::vector<int64_t> shape = broadcast_shapes(x.sizes(), mask.sizes(), "masked_select");
  Tensor mb, xb;
  {
    NoGradGuard ng;
    mb = cpu_contiguous(mask.detach().expand(shape));
    xb = cpu_contiguous(x.detach().expand(shape));
  }
  const int64_t total = mb.numel();
  const uint8_t* m = static_cast<const uint8_t*>(mb.data_ptr());  // bool and uint8 are both one byte
  int64_t n = 0;
  for (int64_t i = 0; i < total; ++i) n += m[i] != 0;
  Tensor out = empty({n}, xb.options());
  const bool need_grad = autograd::any_requires_grad({&x});
  Tensor lin = need_grad ? empty({n}, TensorOptions().dtype(kInt64)) : Tensor();
  if (n > 0) {
    int64_t* lp = need_grad ? static_cast<int64_t*>(lin.data_ptr()) : nullptr;
    dispatch_bytes_of(xb.element_size(), [&](auto tag) {
      using T = decltype(tag);
      const T* src = static_cast<const T*>(xb.data_ptr());
      T* o = static_cast<T*>(out.data_ptr());
      int64_t k = 0;
      for (int64_t i = 0; i < total; ++i) {
        if (!m[i]) continue;
        o[k] = src[i];
        if (lp) lp[k] = i;
        ++k;
      }
    });
  }
  if (!x.is_cpu()) {
    out = out.to(x.device());
    if (need_grad) lin = lin.to(x.device());
  }
  if (need_grad) {
    autograd::record("MaskedSelectBackward0", {x}, out,
                     [lin, shape, xs = x.sizes().vec()](const variable_list& g) {
                       int64_t total = 1;
                       for (int64_t s : shape) total *= s;
                       Tensor full = index_add(zeros({total}, g[0].options()), 0, lin, g[0]).view(shape);
                       return variable_list{sum_to(full, xs)};
                     });
  }
  return out;
}

Tensor nonzero(const Tensor& x) {
  check_defined(x, "nonzero", "self");
  Tensor c = cpu_contiguous(x);
  const int64_t nd = x.dim();
  const int64_t n = count_nonzero_contiguous(c);
  Tensor out = empty({n, nd}, TensorOptions().dtype(kInt64));
  if (n > 0 && nd > 0) {
    int64_t* o = static_cast<int64_t*>(out.data_ptr());
    auto sizes = x.sizes();
    const int64_t inner = sizes[nd - 1];
    const int64_t rows = c.numel() / std::max<int64_t>(inner, 1);
    std::vector<int64_t> idx(nd, 0);  // multi-index of the current row's first element
    dispatch_all(c.dtype(), [&](auto tag) {
      using T = decltype(tag);
      using C = opmath_t<T>;
      const T* p = static_cast<const T*>(c.data_ptr());
      for (int64_t r = 0; r < rows; ++r, p += inner) {
        for (int64_t j = 0; j < inner; ++j) {
          if (static_cast<C>(p[j]) == C(0)) continue;
          for (int64_t k = 0; k < nd - 1; ++k) o[k] = idx[k];
          o[nd - 1] = j;
          o += nd;
        }
        for (int64_t k = nd - 2; k >= 0; --k) {
          if (++idx[k] < sizes[k]) break;
          idx[k] = 0;
        }
      }
    });
  }
  return x.is_cpu() ? out : out.to(x.device());
}

// ================================================================ tril / triu

namespace {

Tensor tri(const Tensor& x, int64_t k, bool lower, const char* op) {
  check_defined(x, op, "self");
  if (x.dim() < 2)
    throw std::invalid_argument(op_prefix(op) + "input tensor must have at least 2 dimensions, got " +
                                std::to_string(x.dim()));
  Tensor out = empty(x.sizes(), x.options());
  if (out.numel() == 0) return out;
  if (!x.is_cpu()) {
    // Through a CPU copy (no dedicated device kernel).
    Tensor r = tri(x.detach().cpu(), k, lower, op);
    backend(out).copy_between(out, r);
    return out;
  }
  Tensor xc = raw_contiguous(x.detach());
  const int64_t R = x.size(-2), C = x.size(-1);
  const int64_t rows = x.numel() / C;
  const size_t es = x.element_size();
  const char* s = static_cast<const char*>(xc.data_ptr());
  char* o = static_cast<char*>(out.data_ptr());
  parallel_for(0, rows, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(C, 1)), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const int64_t i = r % R;
      // kept columns [c0, c1), c0 <= c1: zero bytes are zero in every dtype
      int64_t c0 = 0, c1 = C;
      if (lower) {
        c1 = std::clamp<int64_t>(i + k + 1, 0, C);
      } else {
        c0 = std::clamp<int64_t>(i + k, 0, C);
      }
      char* orow = o + static_cast<size_t>(r * C) * es;
      const char* srow = s + static_cast<size_t>(r * C) * es;
      if (c0 > 0) std::memset(orow, 0, static_cast<size_t>(c0) * es);
      if (c1 > c0) std::memcpy(orow + c0 * es, srow + c0 * es, static_cast<size_t>(c1 - c0) * es);
      if (c1 < C) std::memset(orow + c1 * es, 0, static_cast<size_t>(C - c1) * es);
    }
  });
  return out;
}

}  // namespace

Tensor tril(const Tensor& x, int64_t diagonal) {
  Tensor out = tri(x, diagonal, true, "tril");
  if (autograd::any_requires_grad({&x}))
    autograd::record("TrilBackward0", {x}, out,
                     [diagonal](const variable_list& g) { return variable_list{tril(g[0], diagonal)}; }, false);
  return out;
}

Tensor triu(const Tensor& x, int64_t diagonal) {
  Tensor out = tri(x, diagonal, false, "triu");
  if (autograd::any_requires_grad({&x}))
    autograd::record("TriuBackward0", {x}, out,
                     [diagonal](const variable_list& g) { return variable_list{triu(g[0], diagonal)}; }, false);
  return out;
}

}  // namespace troupe
