// View ops: new geometry over the same storage (writes through a view change its base), with backward.
#include <algorithm>
#include "tracing.h"
#include <numeric>
#include <sstream>
#include <stdexcept>

#include "autograd.h"
#include "op_helpers.h"
#include "ops.h"

namespace troupe {

using autograd::variable_list;
using op_detail::wrap_dim;

namespace {

// A view of t's storage; its base is t's base (or t).
Tensor make_view(const Tensor& t, std::vector<int64_t> sizes, std::vector<int64_t> strides, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>(t.impl()->storage, std::move(sizes), std::move(strides), offset, t.dtype());
  impl->view_base = t.impl()->view_base ? t.impl()->view_base : t.impl_ptr();
  return Tensor(impl);
}

// sizes with one -1 resolved; errors as PyTorch's infer_size.
std::vector<int64_t> infer_size(IntArrayRef shape, int64_t numel, const char* op) {
  std::vector<int64_t> out = shape.vec();
  int64_t prod = 1;
  int infer = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      if (infer >= 0) throw std::invalid_argument(std::string("[") + op + "] only one dimension can be inferred");
      infer = static_cast<int>(i);
    } else if (out[i] < 0) {
      throw std::invalid_argument(std::string("[") + op + "] invalid shape dimension " + std::to_string(out[i]));
    } else {
      prod *= out[i];
    }
  }
  if (numel == prod || (infer >= 0 && prod > 0 && numel % prod == 0)) {
    if (infer >= 0) {
      if (prod == 0)
        throw std::invalid_argument(std::string("[") + op + "] cannot reshape tensor of 0 elements into shape " +
                                    list_str(shape) + " because the unspecified dimension size -1 can be any value "
                                    "and is ambiguous");
      out[infer] = numel / prod;
    }
    return out;
  }
  throw std::invalid_argument(std::string("[") + op + "] shape '" + list_str(shape) +
                              "' is invalid for input of size " + std::to_string(numel));
}

// Strides for viewing (old sizes, old strides) as new sizes without a copy, or nullopt (PyTorch's computeStride).
std::optional<std::vector<int64_t>> compute_stride(IntArrayRef oldshape, IntArrayRef oldstride,
                                                   const std::vector<int64_t>& newshape) {
  std::vector<int64_t> newstride(newshape.size());
  if (oldshape.empty()) {
    std::fill(newstride.begin(), newstride.end(), 1);
    return newstride;
  }
  int64_t numel = 1;
  for (auto s : oldshape) numel *= s;
  if (numel == 0 && oldshape.equals(newshape)) return oldstride.vec();
  if (numel == 0) return contiguous_strides(newshape);
  int64_t view_d = static_cast<int64_t>(newshape.size()) - 1;
  int64_t chunk_base_stride = oldstride.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t tensor_d = static_cast<int64_t>(oldshape.size()) - 1; tensor_d >= 0; tensor_d--) {
    tensor_numel *= oldshape[tensor_d];
    if (tensor_d == 0 || (oldshape[tensor_d - 1] != 1 && oldstride[tensor_d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || newshape[view_d] == 1)) {
        newstride[view_d] = view_numel * chunk_base_stride;
        view_numel *= newshape[view_d];
        view_d--;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (tensor_d > 0) {
        chunk_base_stride = oldstride[tensor_d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return newstride;
}

// Records a view's backward: reshape the gradient back to the input's sizes.
void record_reshape_like(const char* name, const Tensor& x, const Tensor& out) {
  if (!autograd::any_requires_grad({&x})) return;
  auto in_sizes = x.sizes().vec();
  autograd::record(name, {x}, out, [in_sizes](const variable_list& g) { return variable_list{g[0].reshape(in_sizes)}; },
                   false);
}

}  // namespace

Tensor view(const Tensor& t, IntArrayRef sizes) {
  TROUPE_TRACE_OP("aten::view", view(t, sizes), t, sizes);
  auto shape = infer_size(sizes, t.numel(), "view");
  auto st = compute_stride(t.sizes(), t.strides(), shape);
  if (!st)
    throw std::invalid_argument(
        "[view] view size is not compatible with input tensor's size and stride (at least one dimension spans "
        "across two contiguous subspaces). Use .reshape(...) instead.");
  Tensor out = make_view(t, shape, *st, t.storage_offset());
  record_reshape_like("ViewBackward0", t, out);
  return out;
}

Tensor reshape(const Tensor& t, IntArrayRef sizes) {
  TROUPE_TRACE_OP("aten::reshape", reshape(t, sizes), t, sizes);
  auto shape = infer_size(sizes, t.numel(), "reshape");
  auto st = compute_stride(t.sizes(), t.strides(), shape);
  if (st) {
    Tensor out = make_view(t, shape, *st, t.storage_offset());
    record_reshape_like("ViewBackward0", t, out);
    return out;
  }
  return t.contiguous().view(shape);
}

Tensor transpose(const Tensor& t, int64_t d0, int64_t d1) {
  TROUPE_TRACE_OP("aten::transpose", transpose(t, d0, d1), t, d0, d1);
  int64_t n = t.dim();
  d0 = wrap_dim(d0, n, "transpose");
  d1 = wrap_dim(d1, n, "transpose");
  if (n == 0) return make_view(t, {}, {}, t.storage_offset());
  auto sz = t.sizes().vec(), st = t.strides().vec();
  std::swap(sz[d0], sz[d1]);
  std::swap(st[d0], st[d1]);
  Tensor out = make_view(t, sz, st, t.storage_offset());
  if (autograd::any_requires_grad({&t}))
    autograd::record("TransposeBackward0", {t}, out,
                     [d0, d1](const variable_list& g) { return variable_list{g[0].transpose(d0, d1)}; }, false);
  return out;
}

Tensor t(const Tensor& x) {
  if (x.dim() > 2)
    throw std::invalid_argument("[t] t() expects a tensor with <= 2 dimensions, but self is " +
                                std::to_string(x.dim()) + "D");
  if (x.dim() < 2) return transpose(x, 0, 0);
  return transpose(x, 0, 1);
}

Tensor permute(const Tensor& t, IntArrayRef dims) {
  TROUPE_TRACE_OP("aten::permute", permute(t, dims), t, dims);
  int64_t n = t.dim();
  if (static_cast<int64_t>(dims.size()) != n)
    throw std::invalid_argument("[permute] number of dims don't match in permute: got " + std::to_string(dims.size()) +
                                " dims for a tensor of " + std::to_string(n) + " dims");
  std::vector<int64_t> sz(n), st(n), inv(n);
  std::vector<bool> seen(n, false);
  for (int64_t i = 0; i < n; ++i) {
    int64_t d = wrap_dim(dims[i], n, "permute");
    if (seen[d]) throw std::invalid_argument("[permute] repeated dim " + std::to_string(d) + " in permute");
    seen[d] = true;
    sz[i] = t.sizes()[d];
    st[i] = t.strides()[d];
    inv[d] = i;
  }
  Tensor out = make_view(t, sz, st, t.storage_offset());
  if (autograd::any_requires_grad({&t}))
    autograd::record("PermuteBackward0", {t}, out, [inv](const variable_list& g) { return variable_list{g[0].permute(inv)}; },
                     false);
  return out;
}

Tensor squeeze(const Tensor& t) {
  std::vector<int64_t> sz, st;
  for (int64_t i = 0; i < t.dim(); ++i) {
    if (t.sizes()[i] == 1) continue;
    sz.push_back(t.sizes()[i]);
    st.push_back(t.strides()[i]);
  }
  Tensor out = make_view(t, sz, st, t.storage_offset());
  record_reshape_like("SqueezeBackward0", t, out);
  return out;
}

Tensor squeeze(const Tensor& t, int64_t d) {
  d = wrap_dim(d, t.dim(), "squeeze");
  if (t.dim() == 0 || t.sizes()[d] != 1) {
    Tensor out = make_view(t, t.sizes().vec(), t.strides().vec(), t.storage_offset());
    record_reshape_like("SqueezeBackward1", t, out);
    return out;
  }
  auto sz = t.sizes().vec(), st = t.strides().vec();
  sz.erase(sz.begin() + d);
  st.erase(st.begin() + d);
  Tensor out = make_view(t, sz, st, t.storage_offset());
  record_reshape_like("SqueezeBackward1", t, out);
  return out;
}

Tensor unsqueeze(const Tensor& t, int64_t d) {
  TROUPE_TRACE_OP("aten::unsqueeze", unsqueeze(t, d), t, d);
  d = wrap_dim(d, t.dim() + 1, "unsqueeze");
  auto sz = t.sizes().vec(), st = t.strides().vec();
  int64_t new_stride = d >= t.dim() ? 1 : sz[d] * st[d];
  sz.insert(sz.begin() + d, 1);
  st.insert(st.begin() + d, new_stride);
  Tensor out = make_view(t, sz, st, t.storage_offset());
  record_reshape_like("UnsqueezeBackward0", t, out);
  return out;
}

Tensor expand(const Tensor& t, IntArrayRef sizes) {
  int64_t n = static_cast<int64_t>(sizes.size()), m = t.dim();
  if (n < m)
    throw std::invalid_argument("[expand] the number of sizes provided (" + std::to_string(n) +
                                ") must be greater or equal to the number of dimensions in the tensor (" +
                                std::to_string(m) + ")");
  std::vector<int64_t> sz(n), st(n);
  for (int64_t i = n - 1; i >= 0; --i) {
    int64_t j = i - (n - m);
    int64_t target = sizes[i];
    if (j >= 0) {
      int64_t have = t.sizes()[j];
      if (target == -1) target = have;
      if (have == target) {
        sz[i] = have;
        st[i] = t.strides()[j];
      } else if (have == 1) {
        sz[i] = target;
        st[i] = 0;
      } else {
        throw std::invalid_argument("[expand] The expanded size of the tensor (" + std::to_string(target) +
                                    ") must match the existing size (" + std::to_string(have) +
                                    ") at non-singleton dimension " + std::to_string(i) +
                                    ".  Target sizes: " + list_str(sizes) + ".  Tensor sizes: " + list_str(t.sizes()));
      }
    } else {
      if (target < 0)
        throw std::invalid_argument("[expand] The expanded size of the tensor (-1) isn't allowed in a leading, "
                                    "non-existing dimension " + std::to_string(i));
      sz[i] = target;
      st[i] = 0;
    }
  }
  Tensor out = make_view(t, sz, st, t.storage_offset());
  if (autograd::any_requires_grad({&t})) {
    auto in_sizes = t.sizes().vec();
    autograd::record("ExpandBackward0", {t}, out,
                     [in_sizes](const variable_list& g) { return variable_list{sum_to(g[0], in_sizes)}; }, false);
  }
  return out;
}

Tensor broadcast_to(const Tensor& t, IntArrayRef sizes) { return expand(t, sizes); }

namespace {
// grad of a slice/select: zeros of the input's shape with the gradient written into the viewed region.
// Differentiable: its own backward is the same view of the incoming gradient.
Tensor view_scatter_backward(const Tensor& g, std::vector<int64_t> in_sizes,
                             const std::function<Tensor(const Tensor&)>& view_fn, const char* name) {
  Tensor gx;
  {
    NoGradGuard ng;
    gx = zeros(in_sizes, g.options());
    view_fn(gx).copy_(g);
  }
  if (autograd::any_requires_grad({&g}))
    autograd::record(name, {g}, gx, [view_fn](const variable_list& gg) { return variable_list{view_fn(gg[0])}; }, false);
  return gx;
}
}  // namespace

Tensor slice(const Tensor& t, int64_t d, std::optional<int64_t> start, std::optional<int64_t> end, int64_t step) {
  if (t.dim() == 0) throw std::invalid_argument("[slice] slice() cannot be applied to a 0-dim tensor.");
  d = wrap_dim(d, t.dim(), "slice");
  if (step <= 0) throw std::invalid_argument("[slice] slice step must be positive, got " + std::to_string(step));
  int64_t n = t.sizes()[d];
  int64_t s = start.value_or(0), e = end.value_or(n);
  if (s < 0) s += n;
  if (e < 0) e += n;
  s = std::clamp<int64_t>(s, 0, n);
  e = std::clamp<int64_t>(e, s, n);
  auto sz = t.sizes().vec(), st = t.strides().vec();
  sz[d] = (e - s + step - 1) / step;
  int64_t off = t.storage_offset() + s * st[d];
  st[d] *= step;
  Tensor out = make_view(t, sz, st, off);
  if (autograd::any_requires_grad({&t})) {
    auto in_sizes = t.sizes().vec();
    std::function<Tensor(const Tensor&)> vf = [d, s, e, step](const Tensor& x) { return x.slice(d, s, e, step); };
    autograd::record("SliceBackward0", {t}, out, [in_sizes, vf](const variable_list& g) {
      return variable_list{view_scatter_backward(g[0], in_sizes, vf, "SliceBackwardBackward0")};
    }, false);
  }
  return out;
}

Tensor narrow(const Tensor& t, int64_t d, int64_t start, int64_t length) {
  if (t.dim() == 0) throw std::invalid_argument("[narrow] narrow() cannot be applied to a 0-dim tensor.");
  d = wrap_dim(d, t.dim(), "narrow");
  if (length < 0) throw std::invalid_argument("[narrow] narrow(): length must be non-negative.");  // PyTorch checks it first
  int64_t n = t.sizes()[d];
  if (start < -n || start > n)
    throw std::out_of_range("[narrow] start (" + std::to_string(start) + ") is out of bounds for dimension " +
                            std::to_string(d) + " with size " + std::to_string(n));
  if (start < 0) start += n;
  if (start + length > n)
    throw std::out_of_range("[narrow] start (" + std::to_string(start) + ") + length (" + std::to_string(length) +
                            ") exceeds dimension size (" + std::to_string(n) + ").");
  return slice(t, d, start, start + length, 1);
}

Tensor select(const Tensor& t, int64_t d, int64_t index) {
  if (t.dim() == 0) throw std::invalid_argument("[select] select() cannot be applied to a 0-dim tensor.");
  d = wrap_dim(d, t.dim(), "select");
  int64_t n = t.sizes()[d];
  if (index < -n || index >= n)
    throw std::out_of_range("[select] index " + std::to_string(index) + " is out of bounds for dimension " +
                            std::to_string(d) + " with size " + std::to_string(n));
  if (index < 0) index += n;
  auto sz = t.sizes().vec(), st = t.strides().vec();
  int64_t off = t.storage_offset() + index * st[d];
  sz.erase(sz.begin() + d);
  st.erase(st.begin() + d);
  Tensor out = make_view(t, sz, st, off);
  if (autograd::any_requires_grad({&t})) {
    auto in_sizes = t.sizes().vec();
    std::function<Tensor(const Tensor&)> vf = [d, index](const Tensor& x) { return x.select(d, index); };
    autograd::record("SelectBackward0", {t}, out, [in_sizes, vf](const variable_list& g) {
      return variable_list{view_scatter_backward(g[0], in_sizes, vf, "SelectBackwardBackward0")};
    }, false);
  }
  return out;
}

Tensor flatten(const Tensor& t, int64_t start_dim, int64_t end_dim) {
  TROUPE_TRACE_OP("aten::flatten", flatten(t, start_dim, end_dim), t, start_dim, end_dim);
  if (t.dim() == 0) return t.reshape({1});
  start_dim = wrap_dim(start_dim, t.dim(), "flatten");
  end_dim = wrap_dim(end_dim, t.dim(), "flatten");
  if (start_dim > end_dim) throw std::invalid_argument("[flatten] flatten() has invalid args: start_dim cannot come after end_dim");
  if (start_dim == end_dim) return t;
  std::vector<int64_t> sz;
  for (int64_t i = 0; i < start_dim; ++i) sz.push_back(t.sizes()[i]);
  int64_t p = 1;
  for (int64_t i = start_dim; i <= end_dim; ++i) p *= t.sizes()[i];
  sz.push_back(p);
  for (int64_t i = end_dim + 1; i < t.dim(); ++i) sz.push_back(t.sizes()[i]);
  return t.reshape(sz);
}

Tensor unflatten(const Tensor& t, int64_t d, IntArrayRef sizes) {
  d = wrap_dim(d, t.dim(), "unflatten");
  auto inner = infer_size(sizes, t.sizes()[d], "unflatten");
  std::vector<int64_t> sz;
  for (int64_t i = 0; i < d; ++i) sz.push_back(t.sizes()[i]);
  for (auto s : inner) sz.push_back(s);
  for (int64_t i = d + 1; i < t.dim(); ++i) sz.push_back(t.sizes()[i]);
  return t.view(sz);
}

Tensor as_strided(const Tensor& t, IntArrayRef sizes, IntArrayRef strides, std::optional<int64_t> offset) {
  if (sizes.size() != strides.size())
    throw std::invalid_argument("[as_strided] mismatch in length of strides and shape: " + list_str(sizes) + " vs " +
                                list_str(strides));
  int64_t off = offset.value_or(t.storage_offset());
  int64_t max_index = off;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] < 0 || strides[i] < 0)
      throw std::invalid_argument("[as_strided] negative size or stride: sizes " + list_str(sizes) + ", strides " +
                                  list_str(strides));
    if (sizes[i] == 0) { max_index = -1; break; }
    max_index += (sizes[i] - 1) * strides[i];
  }
  int64_t capacity = static_cast<int64_t>(t.impl()->storage->nbytes / t.element_size());
  if (max_index >= capacity)
    throw std::out_of_range("[as_strided] setStorage: sizes " + list_str(sizes) + ", strides " + list_str(strides) +
                            ", storage offset " + std::to_string(off) + " require " +
                            std::to_string((max_index + 1) * static_cast<int64_t>(t.element_size())) +
                            " bytes but the storage holds " + std::to_string(t.impl()->storage->nbytes));
  Tensor out = make_view(t, sizes.vec(), strides.vec(), off);
  if (autograd::any_requires_grad({&t})) {
    // Gradient of a strided view of a dense input: scatter back through the same geometry (overlapping
    // windows accumulate, serially).
    auto in_sizes = t.sizes().vec();
    auto in_strides = t.strides().vec();
    int64_t in_off = t.storage_offset();
    auto vs = sizes.vec(), vst = strides.vec();
    autograd::record("AsStridedBackward0", {t}, out, [in_sizes, in_strides, in_off, vs, vst, off](const variable_list& g) {
      // The accumulation runs on the CPU; a gradient on another device goes there and back.
      const Tensor& gin = g[0];
      Tensor gx = zeros(in_sizes, gin.options().device(Device(kCPU)));
      // gx is contiguous: map the view's geometry, given relative to t's storage, onto gx's
      // (exact when t itself was contiguous, the case as_strided is meant for).
      Tensor region = gx.as_strided(vs, vst, off - in_off);
      Tensor gv = (gin.is_cpu() ? gin : gin.cpu()).contiguous();
      NoGradGuard ng;
      dispatch_all(gx.dtype(), [&](auto tag) {
        using T = decltype(tag);
        // serial accumulation so overlapping positions sum correctly
        std::vector<int64_t> idx(vs.size(), 0);
        const T* src = static_cast<const T*>(gv.data_ptr());
        T* base = static_cast<T*>(region.data_ptr());
        for (int64_t i = 0; i < gv.numel(); ++i) {
          int64_t o = 0;
          for (size_t k = 0; k < vs.size(); ++k) o += idx[k] * vst[k];
          base[o] = static_cast<T>(static_cast<opmath_t<T>>(base[o]) + static_cast<opmath_t<T>>(src[i]));
          for (size_t k = vs.size(); k-- > 0;) {
            if (++idx[k] < vs[k]) break;
            idx[k] = 0;
          }
        }
      });
      return variable_list{gin.is_cpu() ? gx : gx.to(gin.device())};
    }, false);
  }
  return out;
}

Tensor movedim(const Tensor& t, int64_t src, int64_t dst) {
  int64_t n = t.dim();
  src = wrap_dim(src, n, "movedim");
  dst = wrap_dim(dst, n, "movedim");
  std::vector<int64_t> order;
  for (int64_t i = 0; i < n; ++i)
    if (i != src) order.push_back(i);
  order.insert(order.begin() + dst, src);
  return t.permute(order);
}

std::vector<int64_t> broadcast_shapes(IntArrayRef a, IntArrayRef b, const char* op) {
  size_t n = std::max(a.size(), b.size());
  std::vector<int64_t> out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t x = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t y = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (x == y || y == 1) out[i] = x;
    else if (x == 1) out[i] = y;
    else {
      std::ostringstream os;
      os << "[" << op << "] shapes " << shape_str(a) << " and " << shape_str(b)
         << " are not broadcastable: the size of tensor a (" << x << ") must match the size of tensor b (" << y
         << ") at non-singleton dimension " << i;
      throw std::invalid_argument(os.str());
    }
  }
  return out;
}

Tensor sum_to(const Tensor& t, IntArrayRef sizes) {
  if (t.sizes().equals(sizes)) return t;
  int64_t lead = t.dim() - static_cast<int64_t>(sizes.size());
  if (lead < 0)
    throw std::invalid_argument("[sum_to] cannot sum a tensor of shape " + shape_str(t.sizes()) + " to shape " +
                                shape_str(sizes));
  std::vector<int64_t> dims;
  for (int64_t i = 0; i < lead; ++i) dims.push_back(i);
  for (int64_t i = lead; i < t.dim(); ++i) {
    int64_t want = sizes[i - lead];
    if (want == 1 && t.sizes()[i] != 1) dims.push_back(i);
    else if (want != t.sizes()[i])
      throw std::invalid_argument("[sum_to] cannot sum a tensor of shape " + shape_str(t.sizes()) + " to shape " +
                                  shape_str(sizes));
  }
  Tensor r = dims.empty() ? t : t.sum(dims, true);
  if (lead > 0 || !r.sizes().equals(sizes)) r = r.view(sizes);
  return r;
}

}  // namespace troupe
