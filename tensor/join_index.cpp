// Joining, splitting and index-driven ops: cat, stack, split/chunk/unbind (views), gather/scatter,
// index_select/index_add, one_hot, repeat, flip, masked_select, nonzero, tril/triu; with backward.
#include <algorithm>
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "autograd.h"
#include "backend.h"
#include "ops.h"
#include "parallel.h"

namespace troupe {

using autograd::SavedVariable;
using autograd::variable_list;

namespace {

std::string op_prefix(const char* op) { return std::string("[") + op + "] "; }

int64_t wrap_dim(int64_t d, int64_t ndim, const char* op) {
  int64_t n = ndim <= 0 ? 1 : ndim;
  if (d < -n || d >= n) {
    std::ostringstream os;
    os << "[" << op << "] Dimension out of range (expected to be in range of [" << -n << ", " << n - 1
       << "], but got " << d << ")";
    throw std::out_of_range(os.str());
  }
  return d < 0 ? d + n : d;
}

// A tensor over t's storage with the given geometry: no autograd, no view tracking (kernel arguments).
Tensor raw_view(const Tensor& t, std::vector<int64_t> sizes, std::vector<int64_t> strides, int64_t offset) {
  return Tensor(std::make_shared<TensorImpl>(t.impl()->storage, std::move(sizes), std::move(strides), offset, t.dtype()));
}

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

void check_defined(const Tensor& t, const char* op, const char* what) {
  if (!t.defined()) throw std::invalid_argument(op_prefix(op) + what + " is an undefined tensor");
}

void check_same_device(const char* op, const Tensor& a, const Tensor& b) {
  if (a.device() != b.device())
    throw std::invalid_argument(op_prefix(op) +
                                "Expected all tensors to be on the same device, but found at least two devices, " +
                                a.device().str() + " and " + b.device().str() + "!");
}

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

// ================================================================ cat / stack

Tensor cat(TensorList tensors, int64_t d) {
  if (tensors.empty()) throw std::invalid_argument("[cat] expected a non-empty list of Tensors");
  ScalarType dt = tensors[0].dtype();
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    if (!t.defined()) throw std::invalid_argument("[cat] tensor number " + std::to_string(i) + " is undefined");
    check_same_device("cat", tensors[0], t);
    if (t.dim() == 0)
      throw std::invalid_argument("[cat] zero-dimensional tensor (at position " + std::to_string(i) +
                                  ") cannot be concatenated");
    dt = promote_types(dt, t.dtype());
  }
  // Legacy rule: 1-D tensors of size 0 take part in type promotion only.
  auto skipped = [](const Tensor& t) { return t.dim() == 1 && t.size(0) == 0; };
  int64_t ref = -1;
  for (size_t i = 0; i < tensors.size(); ++i)
    if (!skipped(tensors[i])) {
      ref = static_cast<int64_t>(i);
      break;
    }
  TensorOptions opts = TensorOptions().dtype(dt).device(tensors[0].device());
  std::vector<int64_t> sizes;
  std::vector<int64_t> offsets(tensors.size(), 0), lengths(tensors.size(), 0);
  if (ref < 0) {
    sizes = {0};
  } else {
    const Tensor& r = tensors[ref];
    d = wrap_dim(d, r.dim(), "cat");
    sizes = r.sizes().vec();
    int64_t total = 0;
    for (size_t i = 0; i < tensors.size(); ++i) {
      const Tensor& t = tensors[i];
      if (skipped(t)) continue;
      if (t.dim() != r.dim())
        throw std::invalid_argument("[cat] Tensors must have same number of dimensions: got " +
                                    std::to_string(r.dim()) + " and " + std::to_string(t.dim()));
      for (int64_t k = 0; k < r.dim(); ++k) {
        if (k == d || t.size(k) == r.size(k)) continue;
        throw std::invalid_argument("[cat] Sizes of tensors must match except in dimension " + std::to_string(d) +
                                    ". Expected size " + std::to_string(r.size(k)) + " but got size " +
                                    std::to_string(t.size(k)) + " for tensor number " + std::to_string(i) +
                                    " in the list.");
      }
      offsets[i] = total;
      lengths[i] = t.size(d);
      total += t.size(d);
    }
    sizes[d] = total;
  }
  Tensor out = empty(sizes, opts);
  if (ref >= 0 && out.numel() > 0) {
    const int64_t sd = out.stride(d);
    for (size_t i = 0; i < tensors.size(); ++i) {
      const Tensor& t = tensors[i];
      if (skipped(t) || lengths[i] == 0) continue;
      auto sz = sizes;
      sz[d] = lengths[i];
      backend(out).copy(raw_view(out, sz, out.strides().vec(), out.storage_offset() + offsets[i] * sd), t);
    }
  }
  variable_list inputs(tensors.begin(), tensors.end());
  if (autograd::any_requires_grad(inputs)) {
    std::vector<bool> need(tensors.size());
    for (size_t i = 0; i < tensors.size(); ++i) need[i] = tensors[i].requires_grad() && !skipped(tensors[i]);
    autograd::record("CatBackward0", inputs, out, [need, offsets, lengths, d](const variable_list& g) {
      variable_list r(need.size());
      for (size_t i = 0; i < need.size(); ++i)
        if (need[i]) r[i] = g[0].narrow(d, offsets[i], lengths[i]);
      return r;
    }, false);
  }
  return out;
}

Tensor stack(TensorList tensors, int64_t d) {
  if (tensors.empty()) throw std::invalid_argument("[stack] stack expects a non-empty TensorList");
  ScalarType dt = tensors[0].dtype();
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    if (!t.defined()) throw std::invalid_argument("[stack] tensor number " + std::to_string(i) + " is undefined");
    check_same_device("stack", tensors[0], t);
    if (!t.sizes().equals(tensors[0].sizes()))
      throw std::invalid_argument("[stack] stack expects each tensor to be equal size, but got " +
                                  list_str(tensors[0].sizes()) + " at entry 0 and " + list_str(t.sizes()) +
                                  " at entry " + std::to_string(i));
    dt = promote_types(dt, t.dtype());
  }
  const int64_t nd = tensors[0].dim();
  d = wrap_dim(d, nd + 1, "stack");
  std::vector<int64_t> sizes = tensors[0].sizes().vec();
  sizes.insert(sizes.begin() + d, static_cast<int64_t>(tensors.size()));
  Tensor out = empty(sizes, TensorOptions().dtype(dt).device(tensors[0].device()));
  if (out.numel() > 0) {
    auto sz = tensors[0].sizes().vec();
    auto st = out.strides().vec();
    const int64_t sd = st[d];
    st.erase(st.begin() + d);
    for (size_t i = 0; i < tensors.size(); ++i)
      backend(out).copy(raw_view(out, sz, st, static_cast<int64_t>(i) * sd), tensors[i]);
  }
  variable_list inputs(tensors.begin(), tensors.end());
  if (autograd::any_requires_grad(inputs)) {
    std::vector<bool> need(tensors.size());
    for (size_t i = 0; i < tensors.size(); ++i) need[i] = tensors[i].requires_grad();
    autograd::record("StackBackward0", inputs, out, [need, d](const variable_list& g) {
      variable_list r(need.size());
      for (size_t i = 0; i < need.size(); ++i)
        if (need[i]) r[i] = g[0].select(d, static_cast<int64_t>(i));
      return r;
    }, false);
  }
  return out;
}

// ================================================================ split / chunk / unbind (views)

std::vector<Tensor> split(const Tensor& x, int64_t size, int64_t d) {
  if (x.dim() == 0) throw std::invalid_argument("[split] split expects at least a 1-dimensional tensor");
  d = wrap_dim(d, x.dim(), "split");
  const int64_t n = x.size(d);
  if (size < 0)
    throw std::invalid_argument("[split] split expects split_size be non-negative, but got split_size=" +
                                std::to_string(size));
  if (size == 0 && n != 0)
    throw std::invalid_argument("[split] split_size can only be 0 if dimension size is 0, but got dimension size of " +
                                std::to_string(n));
  int64_t parts = 1;
  if (size != 0) parts = std::max<int64_t>((n + size - 1) / size, 1);
  std::vector<Tensor> out;
  out.reserve(parts);
  for (int64_t i = 0; i < parts; ++i) {
    int64_t start = i * size;
    out.push_back(x.narrow(d, start, std::min(size, n - start)));
  }
  return out;
}

std::vector<Tensor> split_with_sizes(const Tensor& x, IntArrayRef sizes, int64_t d) {
  if (x.dim() == 0) throw std::invalid_argument("[split_with_sizes] split expects at least a 1-dimensional tensor");
  d = wrap_dim(d, x.dim(), "split_with_sizes");
  const int64_t n = x.size(d);
  int64_t total = 0;
  for (int64_t s : sizes) {
    if (s < 0)
      throw std::invalid_argument(
          "[split_with_sizes] split_with_sizes expects split_sizes have only non-negative entries, but got "
          "split_sizes=" + list_str(sizes));
    total += s;
  }
  if (total != n)
    throw std::invalid_argument("[split_with_sizes] split_with_sizes expects split_sizes to sum exactly to " +
                                std::to_string(n) + " (input tensor's size at dimension " + std::to_string(d) +
                                "), but got split_sizes=" + list_str(sizes));
  std::vector<Tensor> out;
  out.reserve(sizes.size());
  int64_t start = 0;
  for (int64_t s : sizes) {
    out.push_back(x.narrow(d, start, s));
    start += s;
  }
  return out;
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t d) {
  if (x.dim() == 0) throw std::invalid_argument("[chunk] chunk expects at least a 1-dimensional tensor");
  if (chunks <= 0)
    throw std::invalid_argument("[chunk] chunk expects `chunks` to be greater than 0, got: " + std::to_string(chunks));
  d = wrap_dim(d, x.dim(), "chunk");
  const int64_t n = x.size(d);
  const int64_t size = (n + chunks - 1) / chunks;
  if (size == 0 && n == 0) return split_with_sizes(x, std::vector<int64_t>(chunks, 0), d);
  return split(x, size, d);
}

std::vector<Tensor> unbind(const Tensor& x, int64_t d) {
  if (x.dim() == 0) throw std::invalid_argument("[unbind] Dimension specified as 0 but tensor has no dimensions");
  d = wrap_dim(d, x.dim(), "unbind");
  std::vector<Tensor> out;
  out.reserve(x.size(d));
  for (int64_t i = 0; i < x.size(d); ++i) out.push_back(x.select(d, i));
  return out;
}

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

// ================================================================ repeat / flip

Tensor repeat(const Tensor& x, IntArrayRef repeats) {
  check_defined(x, "repeat", "self");
  const int64_t nr = static_cast<int64_t>(repeats.size());
  if (nr < x.dim())
    throw std::invalid_argument(
        "[repeat] Number of dimensions of repeat dims can not be smaller than number of dimensions of tensor (got " +
        std::to_string(nr) + " repeat dims for a tensor of " + std::to_string(x.dim()) + " dims)");
  const int64_t pad = nr - x.dim();
  std::vector<int64_t> xs(nr, 1), xst(nr, 0), out_sizes(nr);
  for (int64_t k = 0; k < x.dim(); ++k) {
    xs[pad + k] = x.size(k);
    xst[pad + k] = x.stride(k);
  }
  for (int64_t k = 0; k < nr; ++k) out_sizes[k] = xs[k] * repeats[k];
  for (int64_t k = 0; k < nr; ++k)
    if (repeats[k] < 0)
      throw std::invalid_argument("[repeat] Trying to create tensor with negative dimension " +
                                  std::to_string(out_sizes[k]) + ": " + list_str(out_sizes));
  Tensor out = empty(out_sizes, x.options());
  if (out.numel() > 0) {
    // out viewed as (r0, s0, r1, s1, ...) is contiguous; x viewed the same way has stride 0 on the r's.
    std::vector<int64_t> isz, ist, ost;
    for (int64_t k = 0; k < nr; ++k) {
      isz.push_back(repeats[k]);
      isz.push_back(xs[k]);
      ist.push_back(0);
      ist.push_back(xst[k]);
    }
    ost = contiguous_strides(isz);
    backend(x).copy(raw_view(out, isz, ost, out.storage_offset()), raw_view(x, isz, ist, x.storage_offset()));
  }
  if (autograd::any_requires_grad({&x})) {
    std::vector<int64_t> rs = repeats.vec();
    autograd::record("RepeatBackward0", {x}, out, [rs, xs, in_sizes = x.sizes().vec()](const variable_list& g) {
      std::vector<int64_t> isz, sum_dims;
      for (size_t k = 0; k < rs.size(); ++k) {
        isz.push_back(rs[k]);
        isz.push_back(xs[k]);
        sum_dims.push_back(static_cast<int64_t>(2 * k));
      }
      Tensor r = g[0].reshape(isz);
      if (!sum_dims.empty()) r = r.sum(sum_dims);
      return variable_list{r.reshape(in_sizes)};
    }, false);
  }
  return out;
}

Tensor flip(const Tensor& x, IntArrayRef dims) {
  check_defined(x, "flip", "self");
  std::vector<bool> flipped(std::max<int64_t>(x.dim(), 1), false);
  std::vector<int64_t> wrapped;
  for (int64_t d : dims) {
    int64_t w = wrap_dim(d, x.dim(), "flip");
    if (flipped[w])
      throw std::invalid_argument("[flip] dim " + std::to_string(w) + " appears multiple times in the list of dims");
    flipped[w] = true;
    wrapped.push_back(w);
  }
  Tensor out = empty(x.sizes(), x.options());
  if (out.numel() > 0) {
    auto st = x.strides().vec();
    int64_t off = x.storage_offset();
    for (int64_t k = 0; k < x.dim(); ++k) {
      if (!flipped[k]) continue;
      off += (x.size(k) - 1) * st[k];
      st[k] = -st[k];
    }
    backend(x).copy(out, raw_view(x, x.sizes().vec(), st, off));
  }
  if (autograd::any_requires_grad({&x})) {
    autograd::record("FlipBackward0", {x}, out,
                     [wrapped](const variable_list& g) { return variable_list{flip(g[0], wrapped)}; }, false);
  }
  return out;
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
