// Strided iteration over N operands of one shape: dims are coalesced, then `loop(ptrs, strides, n)` is
// called for each innermost run (strides in bytes). Large iterations are split across threads.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "../parallel.h"
#include "../tensor.h"

namespace troupe::cpu {

template <int N>
struct StridedLoop {
  /// Dims kept inline (no heap allocation); tensors with more non-1 dims use a heap buffer.
  static constexpr int kInlineDims = 8;

  int ndim = 0;
  int64_t* sizes = nullptr;          // innermost last
  std::array<int64_t*, N> strides;   // bytes; strides[k][d]
  std::array<char*, N> base;
  int64_t numel = 1;

  /// operands[0] is the output; every operand has the same sizes.
  explicit StridedLoop(std::array<const Tensor*, N> ops) {
    const auto& sz = ops[0]->sizes();
    numel = ops[0]->numel();
    int nonone = 0;
    for (size_t d = 0; d < sz.size(); ++d) nonone += sz[d] != 1;
    const int cap = nonone > 0 ? nonone : 1;
    int64_t* buf = inline_;
    if (cap > kInlineDims) {
      heap_.reset(new int64_t[static_cast<size_t>(cap) * (N + 1)]);
      buf = heap_.get();
    }
    sizes = buf;
    for (int k = 0; k < N; ++k) strides[k] = buf + static_cast<size_t>(cap) * (k + 1);
    std::array<const int64_t*, N> ost;
    std::array<int64_t, N> esz;
    for (int k = 0; k < N; ++k) {
      base[k] = static_cast<char*>(ops[k]->impl()->data());
      ost[k] = ops[k]->strides().data();
      esz[k] = static_cast<int64_t>(ops[k]->element_size());
    }
    // drop size-1 dims, then merge dims that are contiguous with each other in every operand
    int nd = 0;
    for (size_t d = 0; d < sz.size(); ++d) {
      const int64_t s = sz[d];
      if (s == 1) continue;
      if (nd > 0) {
        bool merge = true;
        for (int k = 0; k < N; ++k)
          if (strides[k][nd - 1] != ost[k][d] * esz[k] * s) merge = false;
        if (merge) {
          sizes[nd - 1] *= s;
          for (int k = 0; k < N; ++k) strides[k][nd - 1] = ost[k][d] * esz[k];
          continue;
        }
      }
      sizes[nd] = s;
      for (int k = 0; k < N; ++k) strides[k][nd] = ost[k][d] * esz[k];
      ++nd;
    }
    if (nd == 0) {  // a single element
      sizes[0] = 1;
      for (int k = 0; k < N; ++k) strides[k][0] = 0;
      nd = 1;
    }
    ndim = nd;
  }
  StridedLoop(const StridedLoop&) = delete;
  StridedLoop& operator=(const StridedLoop&) = delete;

  /// Runs loop over the linear element range [begin, end).
  template <typename Loop>
  void run_range(int64_t begin, int64_t end, Loop& loop) const {
    std::array<int64_t, N> inner;
    std::array<char*, N> p;
    for (int k = 0; k < N; ++k) inner[k] = strides[k][ndim - 1];
    if (ndim == 1) {  // one run: contiguous or evenly strided operands
      for (int k = 0; k < N; ++k) p[k] = base[k] + begin * inner[k];
      loop(p.data(), inner.data(), end - begin);
      return;
    }
    int64_t idx_inline[kInlineDims];
    std::unique_ptr<int64_t[]> idx_heap;
    int64_t* idx = idx_inline;
    if (ndim > kInlineDims) {
      idx_heap.reset(new int64_t[ndim]);
      idx = idx_heap.get();
    }
    int64_t rem = begin;
    for (int d = ndim - 1; d >= 0; --d) {
      idx[d] = rem % sizes[d];
      rem /= sizes[d];
    }
    for (int k = 0; k < N; ++k) {
      p[k] = base[k];
      for (int d = 0; d < ndim; ++d) p[k] += idx[d] * strides[k][d];
    }
    int64_t pos = begin;
    while (pos < end) {
      int64_t n = std::min(sizes[ndim - 1] - idx[ndim - 1], end - pos);
      loop(p.data(), inner.data(), n);
      pos += n;
      // advance the multi-index by n along the innermost dim, carrying outwards
      idx[ndim - 1] += n;
      for (int k = 0; k < N; ++k) p[k] += n * inner[k];
      for (int d = ndim - 1; d > 0 && idx[d] == sizes[d]; --d) {
        idx[d] = 0;
        ++idx[d - 1];
        for (int k = 0; k < N; ++k) p[k] += strides[k][d - 1] - sizes[d] * strides[k][d];
      }
    }
  }

  template <typename Loop>
  void run(Loop&& loop, int64_t grain = kGrainSize) const {
    if (numel == 0) return;
    parallel_for(0, numel, grain, [&](int64_t b, int64_t e) { run_range(b, e, loop); });
  }

 private:
  int64_t inline_[kInlineDims * (N + 1)];
  std::unique_ptr<int64_t[]> heap_;
};

/// Calls f(out_elem&, in_elem) over every element; fast paths for contiguous and broadcast-scalar inputs.
template <typename Out, typename In, typename F>
void unary_loop(const Tensor& out, const Tensor& in, F f) {
  StridedLoop<2> it({&out, &in});
  it.run([&](char** p, const int64_t* s, int64_t n) {
    Out* o = reinterpret_cast<Out*>(p[0]);
    const In* a = reinterpret_cast<const In*>(p[1]);
    if (s[0] == sizeof(Out) && s[1] == sizeof(In)) {
      for (int64_t i = 0; i < n; ++i) o[i] = f(a[i]);
    } else if (s[0] == sizeof(Out) && s[1] == 0) {
      Out v = f(a[0]);
      for (int64_t i = 0; i < n; ++i) o[i] = v;
    } else {
      for (int64_t i = 0; i < n; ++i)
        *reinterpret_cast<Out*>(p[0] + i * s[0]) = f(*reinterpret_cast<const In*>(p[1] + i * s[1]));
    }
  });
}

/// Calls f(a, b) -> Out over every element.
template <typename Out, typename In, typename F>
void binary_loop(const Tensor& out, const Tensor& a, const Tensor& b, F f) {
  StridedLoop<3> it({&out, &a, &b});
  it.run([&](char** p, const int64_t* s, int64_t n) {
    Out* o = reinterpret_cast<Out*>(p[0]);
    const In* x = reinterpret_cast<const In*>(p[1]);
    const In* y = reinterpret_cast<const In*>(p[2]);
    constexpr int64_t so = sizeof(Out), si = sizeof(In);
    if (s[0] == so && s[1] == si && s[2] == si) {
      for (int64_t i = 0; i < n; ++i) o[i] = f(x[i], y[i]);
    } else if (s[0] == so && s[1] == si && s[2] == 0) {
      const In yv = y[0];
      for (int64_t i = 0; i < n; ++i) o[i] = f(x[i], yv);
    } else if (s[0] == so && s[1] == 0 && s[2] == si) {
      const In xv = x[0];
      for (int64_t i = 0; i < n; ++i) o[i] = f(xv, y[i]);
    } else {
      for (int64_t i = 0; i < n; ++i)
        *reinterpret_cast<Out*>(p[0] + i * s[0]) =
            f(*reinterpret_cast<const In*>(p[1] + i * s[1]), *reinterpret_cast<const In*>(p[2] + i * s[2]));
    }
  });
}

}  // namespace troupe::cpu
