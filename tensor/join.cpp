// Joining, splitting and rearranging: cat, stack, split/split_with_sizes/chunk/unbind (views), repeat and
// flip; with their backward functions.
#include <algorithm>
#include <cstring>
#include <functional>
#include <numeric>
#include <stdexcept>
#include <string>
#include <type_traits>
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
  bool flat = out.numel() > 0 && out.is_cpu();
  for (size_t i = 0; flat && i < tensors.size(); ++i) flat = tensors[i].dtype() == dt && tensors[i].is_contiguous();
  if (flat) {
    // contiguous inputs of the output's dtype (the usual case: a batch of frames): block copies of
    // the trailing dims, without a strided loop per input
    const size_t inner = static_cast<size_t>(std::accumulate(sizes.begin() + d + 1, sizes.end(), int64_t{1},
                                                             std::multiplies<>())) * out.element_size();
    const int64_t outer = std::accumulate(sizes.begin(), sizes.begin() + d, int64_t{1}, std::multiplies<>());
    const size_t n = tensors.size();
    char* o = static_cast<char*>(out.data_ptr());
    // memcpy of a size known at compile time (one load and store for the small blocks of frames)
    auto blocks = [&](auto size) {
      const size_t bytes = decltype(size)::value ? decltype(size)::value : inner;
      for (size_t i = 0; i < n; ++i) {
        const char* src = static_cast<const char*>(tensors[i].data_ptr());
        char* dst = o + i * bytes;
        for (int64_t r = 0; r < outer; ++r, src += bytes, dst += n * bytes)
          std::memcpy(dst, src, decltype(size)::value ? decltype(size)::value : bytes);
      }
    };
    switch (inner) {
      case 1: blocks(std::integral_constant<size_t, 1>{}); break;
      case 4: blocks(std::integral_constant<size_t, 4>{}); break;
      case 8: blocks(std::integral_constant<size_t, 8>{}); break;
      case 16: blocks(std::integral_constant<size_t, 16>{}); break;
      default: blocks(std::integral_constant<size_t, 0>{});
    }
  } else if (out.numel() > 0) {
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

}  // namespace troupe
