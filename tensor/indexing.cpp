// PyTorch-style indexing: x.index({...}) and x.index_put_({...}, v).
//
// Basic indices (integers, slices, None, Ellipsis) are applied first, left to right, with the view ops
// (select, slice, unsqueeze), exactly as PyTorch's applySlicing does; the result is a view. Tensor
// indices (int64, or bool/uint8 masks expanded with nonzero) and Python bools are recorded per dim of
// that view and then applied as advanced indexing: they broadcast together, and the result's indexed
// dims replace the indexed ones in place when the indexed dims are adjacent, or go first when a
// non-indexed dim separates them. Advanced indexing copies (IndexBackward0: an index_add of the
// gradient); advanced assignment writes through the view (IndexPutBackward0).
#include "indexing.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "autograd.h"
#include "backend.h"
#include "ops.h"

namespace troupe {

namespace indexing {

TensorIndex::TensorIndex(const char* s) : kind(Kind::Ellipsis) {
  if (s == nullptr || std::strcmp(s, "...") != 0)
    throw std::invalid_argument(std::string("[index] the only string index is \"...\" (Ellipsis), got \"") +
                                (s ? s : "(null)") + "\"");
}

}  // namespace indexing

using autograd::variable_list;
using indexing::TensorIndex;

namespace {

Tensor raw_view(const Tensor& t, std::vector<int64_t> sizes, std::vector<int64_t> strides, int64_t offset) {
  return Tensor(std::make_shared<TensorImpl>(t.impl()->storage, std::move(sizes), std::move(strides), offset, t.dtype()));
}

// The whole storage of t as a 1-D tensor of t's dtype.
Tensor storage_view(const Tensor& t) {
  int64_t n = static_cast<int64_t>(t.impl()->storage->nbytes / t.element_size());
  return raw_view(t, {n}, {1}, 0);
}

// A new contiguous CPU tensor holding t's values, outside autograd.
Tensor cpu_copy(const Tensor& t) {
  Tensor d = t.detach();
  if (!d.is_cpu()) d = d.cpu();
  Tensor out = empty(d.sizes(), d.options());
  backend(d).copy(out, d);
  return out;
}

int64_t numel_of(IntArrayRef s) {
  int64_t n = 1;
  for (int64_t v : s) n *= v;
  return n;
}

Tensor select_checked(const Tensor& r, int64_t dim, int64_t i, size_t real_dim) {
  if (r.dim() == 0)
    throw std::out_of_range(
        "[index] invalid index of a 0-dim tensor. Use `tensor.item<T>()` to convert a 0-dim tensor to a number");
  const int64_t size = r.size(dim);
  if (i < -size || i >= size)
    throw std::out_of_range("[index] index " + std::to_string(i) + " is out of bounds for dimension " +
                            std::to_string(real_dim) + " with size " + std::to_string(size));
  return r.select(dim, i);
}

// Python slice semantics: bounds clamp, negative bounds count from the end, step > 0.
Tensor apply_slice(const Tensor& r, int64_t dim, const indexing::Slice& s) {
  if (s.step <= 0) throw std::invalid_argument("[index] step must be greater than zero");
  const int64_t n = r.size(dim);
  auto norm = [n](std::optional<int64_t> v, int64_t dflt) {
    if (!v) return dflt;
    int64_t x = *v;
    if (x < 0) x += n;
    return std::clamp<int64_t>(x, 0, n);
  };
  int64_t start = norm(s.start, 0), stop = norm(s.stop, n);
  if (stop < start) stop = start;
  return r.slice(dim, start, stop, s.step);
}

Tensor bool_index(bool b) {
  Tensor t = empty({b ? 1 : 0}, TensorOptions().dtype(kInt64));
  if (b) static_cast<int64_t*>(t.data_ptr())[0] = 0;
  return t;
}

// The coordinates of the true elements of a bool/uint8 mask, one contiguous int64 CPU tensor per mask
// dim (the columns of nonzero(mask)), in row-major order.
std::vector<Tensor> mask_columns(const Tensor& mask) {
  Tensor m = cpu_copy(mask.to(kBool));
  const int64_t k = m.dim(), total = m.numel();
  const bool* p = static_cast<const bool*>(m.data_ptr());
  int64_t n = 0;
  for (int64_t i = 0; i < total; ++i) n += p[i];
  std::vector<Tensor> cols;
  std::vector<int64_t*> out;
  for (int64_t j = 0; j < k; ++j) {
    cols.push_back(empty({n}, TensorOptions().dtype(kInt64)));
    out.push_back(static_cast<int64_t*>(cols.back().data_ptr()));
  }
  if (n == 0) return cols;
  auto sizes = m.sizes();
  const int64_t inner = sizes[k - 1];
  const int64_t rows = total / inner;
  std::vector<int64_t> idx(k, 0);
  int64_t w = 0;
  for (int64_t r = 0; r < rows; ++r, p += inner) {
    for (int64_t j = 0; j < inner; ++j) {
      if (!p[j]) continue;
      for (int64_t d = 0; d < k - 1; ++d) out[d][w] = idx[d];
      out[k - 1][w] = j;
      ++w;
    }
    for (int64_t d = k - 2; d >= 0; --d) {
      if (++idx[d] < sizes[d]) break;
      idx[d] = 0;
    }
  }
  return cols;
}

struct Sliced {
  Tensor view;                  // x after the basic indices
  std::vector<Tensor> indices;  // per dim of view: undefined, or an int64 index tensor
  std::vector<bool> in_range;   // per dim: the index is ours, CPU, contiguous, in [0, size) (from a mask)
  bool advanced = false;
};

Sliced apply_slicing(const Tensor& x, ArrayRef<TensorIndex> idx) {
  if (!x.defined()) throw std::invalid_argument("[index] indexing an undefined tensor");
  int64_t specified = 0;
  for (const TensorIndex& ti : idx) {
    switch (ti.kind) {
      case TensorIndex::Kind::Integer:
      case TensorIndex::Kind::Slice: ++specified; break;
      case TensorIndex::Kind::Tensor:
        if (!ti.tensor.defined()) throw std::invalid_argument("[index] an index tensor is undefined");
        if (ti.tensor.dtype() == kBool || ti.tensor.dtype() == kUInt8)
          specified += ti.tensor.dim();
        else
          ++specified;
        break;
      default: break;
    }
  }
  if (specified > x.dim())
    throw std::out_of_range("[index] too many indices for tensor of dimension " + std::to_string(x.dim()));

  Sliced s;
  Tensor r = x;
  int64_t dim = 0;
  auto record = [&](Tensor t, bool in_range) {
    if (static_cast<int64_t>(s.indices.size()) < dim + 1) {
      s.indices.resize(dim + 1);
      s.in_range.resize(dim + 1, false);
    }
    s.indices[dim] = std::move(t);
    s.in_range[dim] = in_range;
    s.advanced = true;
    ++dim;
  };
  for (size_t i = 0; i < idx.size(); ++i) {
    const TensorIndex& ti = idx[i];
    switch (ti.kind) {
      case TensorIndex::Kind::Integer: r = select_checked(r, dim, ti.integer, i); break;
      case TensorIndex::Kind::Slice:
        r = apply_slice(r, dim, ti.slice);
        ++dim;
        break;
      case TensorIndex::Kind::Ellipsis: dim += x.dim() - specified; break;
      case TensorIndex::Kind::None:
        r = r.unsqueeze(dim);
        ++dim;
        break;
      case TensorIndex::Kind::Boolean:
        r = r.unsqueeze(dim);
        record(bool_index(ti.boolean), true);
        break;
      case TensorIndex::Kind::Tensor: {
        const Tensor& t = ti.tensor;
        const ScalarType st = t.dtype();
        if (st == kBool || st == kUInt8) {
          if (t.dim() == 0) {
            r = r.unsqueeze(dim);
            record(bool_index(t.item().to_bool()), true);
            break;
          }
          // A k-dim mask covers k dims: it becomes the k columns of its nonzero().
          for (int64_t j = 0; j < t.dim(); ++j) {
            if (dim + j >= r.dim() || t.size(j) != r.size(dim + j))
              throw std::out_of_range("[index] The shape of the mask " + list_str(t.sizes()) + " at index " +
                                      std::to_string(j) + " does not match the shape of the indexed tensor " +
                                      list_str(r.sizes()) + " at index " + std::to_string(dim + j));
          }
          for (Tensor& col : mask_columns(t)) record(std::move(col), true);
        } else if (st == kInt64) {
          if (t.dim() == 0) {
            r = select_checked(r, dim, t.item().to_long(), i);
          } else {
            record(t, false);
          }
        } else {
          throw std::out_of_range(std::string("[index] tensors used as indices must be long, byte or bool tensors, "
                                              "got ") + dtype_name(st));
        }
        break;
      }
    }
  }
  s.view = r;
  return s;
}

// Advanced indexing over the dims of `src`: broadcast, wrapped index tensors and where the result's dims
// come from.
struct Plan {
  std::vector<int64_t> src_sizes;
  std::vector<int64_t> idims;        // indexed dims of src, in order
  std::vector<Tensor> idx;           // per indexed dim: CPU int64 contiguous of shape B, in [0, size)
  std::vector<int64_t> B;            // broadcast shape of the index tensors
  std::vector<int64_t> pre, post;    // non-indexed dims of src placed before / after B in the result
  std::vector<int64_t> result_sizes;
};

std::shared_ptr<Plan> make_plan(const Tensor& src, const std::vector<Tensor>& indices,
                                const std::vector<bool>& in_range) {
  auto p = std::make_shared<Plan>();
  p->src_sizes = src.sizes().vec();
  for (size_t d = 0; d < indices.size(); ++d)
    if (indices[d].defined()) p->idims.push_back(static_cast<int64_t>(d));
  // broadcast the index shapes
  std::vector<int64_t> B = indices[p->idims[0]].sizes().vec();
  for (size_t k = 1; k < p->idims.size(); ++k) {
    const Tensor& t = indices[p->idims[k]];
    try {
      B = broadcast_shapes(B, t.sizes(), "index");
    } catch (const std::exception&) {
      std::string shapes;
      for (size_t m = 0; m < p->idims.size(); ++m)
        shapes += (m ? ", " : "") + list_str(indices[p->idims[m]].sizes());
      throw std::out_of_range("[index] shape mismatch: indexing tensors could not be broadcast together with shapes " +
                              shapes);
    }
  }
  p->B = B;
  const bool adjacent = p->idims.back() - p->idims.front() + 1 == static_cast<int64_t>(p->idims.size());
  for (int64_t d = 0; d < src.dim(); ++d) {
    if (std::find(p->idims.begin(), p->idims.end(), d) != p->idims.end()) continue;
    if (adjacent && d < p->idims.front())
      p->pre.push_back(d);
    else
      p->post.push_back(d);
  }
  for (int64_t d : p->pre) p->result_sizes.push_back(p->src_sizes[d]);
  for (int64_t b : B) p->result_sizes.push_back(b);
  for (int64_t d : p->post) p->result_sizes.push_back(p->src_sizes[d]);
  // broadcast, wrap negatives, bounds-check
  for (int64_t d : p->idims) {
    if (in_range[d] && indices[d].sizes().equals(B)) {
      p->idx.push_back(indices[d]);
      continue;
    }
    Tensor e;
    {
      NoGradGuard ng;
      e = cpu_copy(indices[d].detach().expand(B));
    }
    const int64_t size = p->src_sizes[d];
    int64_t* v = static_cast<int64_t*>(e.data_ptr());
    const int64_t n = e.numel();
    for (int64_t j = 0; j < n; ++j) {
      if (v[j] < -size || v[j] >= size)
        throw std::out_of_range("[index] index " + std::to_string(v[j]) + " is out of bounds for dimension " +
                                std::to_string(d) + " with size " + std::to_string(size));
      if (v[j] < 0) v[j] += size;
    }
    p->idx.push_back(e);
  }
  return p;
}

// Element offsets of every combination of the given dims (row-major).
std::vector<int64_t> dim_offsets(const std::vector<int64_t>& dims, IntArrayRef sizes, IntArrayRef strides) {
  std::vector<int64_t> out{0};
  for (int64_t d : dims) {
    std::vector<int64_t> next;
    next.reserve(out.size() * sizes[d]);
    for (int64_t o : out)
      for (int64_t i = 0; i < sizes[d]; ++i) next.push_back(o + i * strides[d]);
    out.swap(next);
  }
  return out;
}

// The storage offset (for a tensor of the plan's src sizes with `strides` and `base` offset) of every
// element of the result, as a 1-D int64 tensor on `device`.
Tensor result_offsets(const Plan& p, IntArrayRef strides, int64_t base, Device device) {
  std::vector<int64_t> pre = dim_offsets(p.pre, p.src_sizes, strides);
  std::vector<int64_t> post = dim_offsets(p.post, p.src_sizes, strides);
  const int64_t nb = numel_of(p.B);
  std::vector<int64_t> boff(nb, base);
  for (size_t k = 0; k < p.idims.size(); ++k) {
    const int64_t st = strides[p.idims[k]];
    const int64_t* v = static_cast<const int64_t*>(p.idx[k].data_ptr());
    for (int64_t j = 0; j < nb; ++j) boff[j] += v[j] * st;
  }
  const int64_t total = static_cast<int64_t>(pre.size()) * nb * static_cast<int64_t>(post.size());
  Tensor out = empty({total}, TensorOptions().dtype(kInt64));
  int64_t* o = static_cast<int64_t*>(out.data_ptr());
  for (int64_t a : pre)
    for (int64_t j = 0; j < nb; ++j)
      for (int64_t c : post) *o++ = a + boff[j] + c;
  return device.is_cpu() ? out : out.to(device);
}

// For one indexed dim: the flattened index on `device`, and the shape (pre, nB, post).
Tensor flat_index(const Plan& p, Device device) {
  Tensor i = p.idx[0];
  Tensor f = raw_view(i, {i.numel()}, {1}, i.storage_offset());
  return device.is_cpu() ? f : f.to(device);
}

std::vector<int64_t> select_shape(const Plan& p) {
  std::vector<int64_t> s = p.src_sizes;
  s[p.idims[0]] = numel_of(p.B);
  return s;
}

Tensor advanced_index(const Tensor& src, const std::vector<Tensor>& indices, const std::vector<bool>& in_range) {
  std::shared_ptr<Plan> p = make_plan(src, indices, in_range);
  Tensor out = empty(p->result_sizes, src.options());
  const bool single = p->idims.size() == 1;
  Tensor flat;  // single: the index along idims[0]
  if (single) flat = flat_index(*p, src.device());
  if (out.numel() > 0) {
    if (single) {
      auto s3 = select_shape(*p);
      backend(src).index_select(raw_view(out, s3, contiguous_strides(s3), 0), src, p->idims[0], flat);
    } else {
      Tensor off = result_offsets(*p, src.strides(), src.storage_offset(), src.device());
      backend(src).index_select(raw_view(out, {out.numel()}, {1}, 0), storage_view(src), 0, off);
    }
  }
  if (autograd::any_requires_grad({&src})) {
    autograd::record("IndexBackward0", {src}, out, [p, single, flat](const variable_list& g) {
      Tensor z = zeros(p->src_sizes, g[0].options());
      if (single) return variable_list{index_add(z, p->idims[0], flat, g[0].reshape(select_shape(*p)))};
      Tensor coff = result_offsets(*p, contiguous_strides(p->src_sizes), 0, g[0].device());
      return variable_list{index_add(z.view({-1}), 0, coff, g[0].reshape({-1})).view(p->src_sizes)};
    });
  }
  return out;
}

// v without leading size-1 dims beyond `ndim` dims (PyTorch's slicePrefix1sSize).
Tensor strip_leading_ones(const Tensor& v, int64_t ndim) {
  std::vector<int64_t> s = v.sizes().vec();
  size_t drop = 0;
  while (static_cast<int64_t>(s.size() - drop) > ndim && s[drop] == 1) ++drop;
  if (drop == 0) return v;
  return v.reshape(std::vector<int64_t>(s.begin() + drop, s.end()));
}

void advanced_put(const Tensor& r, const std::vector<Tensor>& indices, const std::vector<bool>& in_range,
                  const Tensor& v) {
  std::shared_ptr<Plan> p = make_plan(r, indices, in_range);
  const auto R = p->result_sizes;
  Tensor vs = strip_leading_ones(v, static_cast<int64_t>(R.size()));
  bool ok = static_cast<int64_t>(vs.dim()) <= static_cast<int64_t>(R.size());
  if (ok) {
    try {
      ok = IntArrayRef(broadcast_shapes(vs.sizes(), R, "index_put_")).equals(R);
    } catch (const std::exception&) {
      ok = false;
    }
  }
  if (!ok)
    throw std::invalid_argument("[index_put_] shape mismatch: value tensor of shape " + list_str(v.sizes()) +
                                " cannot be broadcast to indexing result of shape " + list_str(R));
  if (v.device() != r.device())
    throw std::invalid_argument("[index_put_] value is on " + v.device().str() + " but the tensor is on " +
                                r.device().str());
  autograd::check_inplace(r, "index_put_");
  const int64_t total = numel_of(R);
  if (total > 0) {
    // the values in result order, as r's dtype, in their own memory (v may alias r)
    Tensor vals = empty(R, r.options());
    {
      NoGradGuard ng;
      backend(r).copy(vals, vs.detach().expand(R));
    }
    Tensor off = result_offsets(*p, r.strides(), r.storage_offset(), r.device());
    backend(r).scatter(storage_view(r), 0, off, raw_view(vals, {total}, {1}, 0), false);
  }
  r.bump_version();
  autograd::record_inplace("IndexPutBackward0", r, {v},
                           [p, vs_sizes = vs.sizes().vec(), v_sizes = v.sizes().vec(),
                            need_v = v.requires_grad()](const variable_list& g) {
                             Tensor coff = result_offsets(*p, contiguous_strides(p->src_sizes), 0, g[0].device());
                             Tensor gflat = g[0].reshape({-1});
                             variable_list out(2);
                             out[0] = scatter(gflat, 0, coff, Scalar(0)).view(p->src_sizes);
                             if (need_v)
                               out[1] = sum_to(index_select(gflat, 0, coff).view(p->result_sizes), vs_sizes)
                                            .reshape(v_sizes);
                             return out;
                           });
}

}  // namespace

Tensor index(const Tensor& x, ArrayRef<TensorIndex> idx) {
  Sliced s = apply_slicing(x, idx);
  if (!s.advanced) {
    // x[...] (or an empty index list) is an alias of x, as in PyTorch, not x itself.
    if (s.view.is_same(x)) return x.view(x.sizes());
    return s.view;
  }
  return advanced_index(s.view, s.indices, s.in_range);
}

void index_put_(Tensor& x, ArrayRef<TensorIndex> idx, const Tensor& v) {
  if (!v.defined()) throw std::invalid_argument("[index_put_] value is an undefined tensor");
  Sliced s = apply_slicing(x, idx);
  if (!s.advanced) {
    Tensor vs = strip_leading_ones(v, s.view.dim());
    if (!vs.sizes().equals(s.view.sizes())) {
      bool ok = vs.dim() <= s.view.dim();
      if (ok) {
        try {
          ok = IntArrayRef(broadcast_shapes(vs.sizes(), s.view.sizes(), "index_put_")).equals(s.view.sizes());
        } catch (const std::exception&) {
          ok = false;
        }
      }
      if (!ok)
        throw std::invalid_argument("[index_put_] shape mismatch: value tensor of shape " + list_str(v.sizes()) +
                                    " cannot be broadcast to indexing result of shape " + list_str(s.view.sizes()));
    }
    s.view.copy_(vs);
    return;
  }
  advanced_put(s.view, s.indices, s.in_range, v);
}

void index_put_(Tensor& x, ArrayRef<TensorIndex> idx, Scalar v) {
  Sliced s = apply_slicing(x, idx);
  if (!s.advanced) {
    s.view.fill_(v);
    return;
  }
  advanced_put(s.view, s.indices, s.in_range, full({}, v, x.options()));
}

}  // namespace troupe
