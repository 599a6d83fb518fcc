// CPU kernels for gather / scatter / index_select / index_add. The ops (index_ops.cpp, indexing.cpp)
// check shapes and dtypes; the kernels bounds-check every index (before writing anything) and do the
// data movement. Index tensors are int64 and contiguous.
//
// Parallel work is split over positions that can never write the same output element: for gather and
// scatter, the positions of the dims other than `dim` (the output element's coordinates there equal the
// index element's); for index_add, the dims other than `dim` (outer rows, or column ranges of a row).
#include <algorithm>
#include <array>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "../parallel.h"
#include "cpu_backend.h"

namespace troupe::cpu {

namespace {

// Visits every position of `shape` with dim `skip` held at 0, in row-major order, keeping one element
// offset per operand (strides in elements).
template <int N>
struct RowIter {
  std::vector<int64_t> sizes;
  std::array<std::vector<int64_t>, N> strides;
  int64_t rows = 1;

  RowIter(IntArrayRef shape, int64_t skip, std::array<IntArrayRef, N> st) {
    for (size_t d = 0; d < shape.size(); ++d) {
      if (static_cast<int64_t>(d) == skip || shape[d] == 1) continue;
      sizes.push_back(shape[d]);
      for (int k = 0; k < N; ++k) strides[k].push_back(st[k][d]);
      rows *= shape[d];
    }
    for (size_t d = 0; d < shape.size(); ++d)
      if (static_cast<int64_t>(d) != skip && shape[d] == 0) rows = 0;
  }

  // f(const int64_t* offsets) for rows [b, e).
  template <typename F>
  void run(int64_t b, int64_t e, F&& f) const {
    const int nd = static_cast<int>(sizes.size());
    std::array<int64_t, N> off{};
    if (nd == 0) {
      for (int64_t r = b; r < e; ++r) f(off.data());
      return;
    }
    std::vector<int64_t> idx(nd, 0);
    int64_t rem = b;
    for (int d = nd - 1; d >= 0; --d) {
      idx[d] = rem % sizes[d];
      rem /= sizes[d];
      for (int k = 0; k < N; ++k) off[k] += idx[d] * strides[k][d];
    }
    for (int64_t r = b; r < e; ++r) {
      f(off.data());
      for (int d = nd - 1; d >= 0; --d) {
        ++idx[d];
        for (int k = 0; k < N; ++k) off[k] += strides[k][d];
        if (idx[d] < sizes[d]) break;
        for (int k = 0; k < N; ++k) off[k] -= sizes[d] * strides[k][d];
        idx[d] = 0;
      }
    }
  }
};

// An unsigned integer type of the element's size: moving elements needs no dtype dispatch.
template <typename F>
decltype(auto) dispatch_bytes(size_t n, F&& f) {
  switch (n) {
    case 1: return f(uint8_t{});
    case 2: return f(uint16_t{});
    case 4: return f(uint32_t{});
    default: return f(uint64_t{});
  }
}

void check_index_contiguous(const char* op, const Tensor& index) {
  if (index.dtype() != kInt64 || !index.is_contiguous())
    throw std::invalid_argument(std::string("[") + op + "] internal error: the index must be a contiguous int64 tensor");
}

// Throws for the first index outside [0, size).
void check_range(const char* op, const Tensor& index, int64_t dim, int64_t size) {
  const int64_t* p = static_cast<const int64_t*>(index.data_ptr());
  const int64_t n = index.numel();
  for (int64_t i = 0; i < n; ++i) {
    if (static_cast<uint64_t>(p[i]) >= static_cast<uint64_t>(size))
      throw std::out_of_range(std::string("[") + op + "] index " + std::to_string(p[i]) +
                              " is out of bounds for dimension " + std::to_string(dim) + " with size " +
                              std::to_string(size));
  }
}

template <typename T>
inline void accumulate(T& dst, T v) {
  if constexpr (std::is_same_v<T, bool>) {
    dst = dst || v;
  } else {
    using C = opmath_t<T>;
    dst = T(static_cast<C>(dst) + static_cast<C>(v));
  }
}

int64_t grain_rows(int64_t work_per_row) { return std::max<int64_t>(1, kGrainSize / std::max<int64_t>(1, work_per_row)); }

}  // namespace

void CpuBackend::gather(const Tensor& out, const Tensor& in, int64_t dim, const Tensor& index) {
  check_index_contiguous("gather", index);
  if (out.numel() == 0) return;
  check_range("gather", index, dim, in.size(dim));
  const int64_t K = index.size(dim);
  const int64_t os = out.stride(dim), is = in.stride(dim), xs = index.stride(dim);
  RowIter<3> it(index.sizes(), dim, {out.strides(), in.strides(), index.strides()});
  const int64_t* ip = static_cast<const int64_t*>(index.data_ptr());
  dispatch_bytes(out.element_size(), [&](auto tag) {
    using T = decltype(tag);
    T* op = static_cast<T*>(out.data_ptr());
    const T* sp = static_cast<const T*>(in.data_ptr());
    parallel_for(0, it.rows, grain_rows(K), [&](int64_t b, int64_t e) {
      it.run(b, e, [&](const int64_t* off) {
        T* o = op + off[0];
        const T* s = sp + off[1];
        const int64_t* x = ip + off[2];
        if (os == 1 && xs == 1) {
          for (int64_t k = 0; k < K; ++k) o[k] = s[x[k] * is];
        } else {
          for (int64_t k = 0; k < K; ++k) o[k * os] = s[x[k * xs] * is];
        }
      });
    });
  });
}

void CpuBackend::scatter(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src, bool accumulate_) {
  check_index_contiguous("scatter", index);
  if (index.numel() == 0) return;
  check_range(accumulate_ ? "scatter_add" : "scatter", index, dim, out.size(dim));
  const int64_t K = index.size(dim);
  const int64_t os = out.stride(dim), ss = src.stride(dim), xs = index.stride(dim);
  RowIter<3> it(index.sizes(), dim, {out.strides(), src.strides(), index.strides()});
  const int64_t* ip = static_cast<const int64_t*>(index.data_ptr());
  auto body = [&](auto tag, auto acc) {
    using T = decltype(tag);
    constexpr bool kAcc = decltype(acc)::value;
    T* op = static_cast<T*>(out.data_ptr());
    const T* sp = static_cast<const T*>(src.data_ptr());
    parallel_for(0, it.rows, grain_rows(K), [&](int64_t b, int64_t e) {
      it.run(b, e, [&](const int64_t* off) {
        T* o = op + off[0];
        const T* s = sp + off[1];
        const int64_t* x = ip + off[2];
        for (int64_t k = 0; k < K; ++k) {
          if constexpr (kAcc)
            accumulate(o[x[k * xs] * os], s[k * ss]);
          else
            o[x[k * xs] * os] = s[k * ss];
        }
      });
    });
  };
  if (accumulate_) {
    dispatch_all(out.dtype(), [&](auto tag) { body(tag, std::true_type{}); });
  } else {
    dispatch_bytes(out.element_size(), [&](auto tag) { body(tag, std::false_type{}); });
  }
}

void CpuBackend::index_select(const Tensor& out, const Tensor& in, int64_t dim, const Tensor& index) {
  check_index_contiguous("index_select", index);
  if (out.numel() == 0) return;
  const int64_t size = in.size(dim);
  check_range("index_select", index, dim, size);
  const int64_t n = index.numel();
  const int64_t* ip = static_cast<const int64_t*>(index.data_ptr());
  const size_t es = out.element_size();
  if (in.is_contiguous() && out.is_contiguous()) {
    // (outer, size, inner) -> (outer, n, inner): whole rows of `inner` elements move at once (dim 0 of a
    // contiguous table is the embedding lookup).
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < dim; ++d) outer *= in.size(d);
    for (int64_t d = dim + 1; d < in.dim(); ++d) inner *= in.size(d);
    const char* sp = static_cast<const char*>(in.data_ptr());
    char* op = static_cast<char*>(out.data_ptr());
    const size_t row = static_cast<size_t>(inner) * es;
    if (inner == 1) {
      dispatch_bytes(es, [&](auto tag) {
        using T = decltype(tag);
        const T* s = reinterpret_cast<const T*>(sp);
        T* o = reinterpret_cast<T*>(op);
        parallel_for(0, outer, grain_rows(n), [&](int64_t b, int64_t e) {
          for (int64_t r = b; r < e; ++r) {
            const T* sr = s + r * size;
            T* orow = o + r * n;
            for (int64_t j = 0; j < n; ++j) orow[j] = sr[ip[j]];
          }
        });
      });
      return;
    }
    parallel_for(0, outer * n, grain_rows(inner), [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        int64_t r = t / n, j = t % n;
        std::memcpy(op + static_cast<size_t>(t) * row, sp + static_cast<size_t>(r * size + ip[j]) * row, row);
      }
    });
    return;
  }
  // Any strides: rows over the dims other than `dim`, the selected positions inside.
  const int64_t os = out.stride(dim), is = in.stride(dim);
  RowIter<2> it(out.sizes(), dim, {out.strides(), in.strides()});
  dispatch_bytes(es, [&](auto tag) {
    using T = decltype(tag);
    T* op = static_cast<T*>(out.data_ptr());
    const T* sp = static_cast<const T*>(in.data_ptr());
    parallel_for(0, it.rows, grain_rows(n), [&](int64_t b, int64_t e) {
      it.run(b, e, [&](const int64_t* off) {
        T* o = op + off[0];
        const T* s = sp + off[1];
        for (int64_t j = 0; j < n; ++j) o[j * os] = s[ip[j] * is];
      });
    });
  });
}

void CpuBackend::index_add(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src, double alpha) {
  check_index_contiguous("index_add", index);
  const int64_t n = index.numel();
  if (n == 0 || src.numel() == 0) return;
  const int64_t size = out.size(dim);
  check_range("index_add", index, dim, size);
  const int64_t* ip = static_cast<const int64_t*>(index.data_ptr());
  dispatch_all(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using C = std::conditional_t<std::is_same_v<T, bool>, bool,
                                 std::conditional_t<std::is_integral_v<T>, int64_t, opmath_t<T>>>;
    const C a = static_cast<C>(std::is_integral_v<C> ? static_cast<double>(static_cast<int64_t>(alpha)) : alpha);
    const bool unit = alpha == 1;
    auto add = [a, unit](T& dst, T v) {
      if constexpr (std::is_same_v<T, bool>) {
        dst = dst || v;
      } else {
        C s = unit ? static_cast<C>(v) : static_cast<C>(v) * a;
        dst = static_cast<T>(static_cast<C>(dst) + s);
      }
    };
    T* op = static_cast<T*>(out.data_ptr());
    const T* sp = static_cast<const T*>(src.data_ptr());
    if (out.is_contiguous() && src.is_contiguous()) {
      // out (outer, size, inner), src (outer, n, inner).
      int64_t outer = 1, inner = 1;
      for (int64_t d = 0; d < dim; ++d) outer *= out.size(d);
      for (int64_t d = dim + 1; d < out.dim(); ++d) inner *= out.size(d);
      auto rows = [&](int64_t r, int64_t c0, int64_t c1) {
        T* ob = op + r * size * inner;
        const T* sb = sp + r * n * inner;
        for (int64_t j = 0; j < n; ++j) {
          T* o = ob + ip[j] * inner;
          const T* s = sb + j * inner;
          for (int64_t c = c0; c < c1; ++c) add(o[c], s[c]);
        }
      };
      if (outer > 1) {
        parallel_for(0, outer, grain_rows(n * inner), [&](int64_t b, int64_t e) {
          for (int64_t r = b; r < e; ++r) rows(r, 0, inner);
        });
      } else {
        // One slab (dim 0: the embedding backward): split the columns so that rows that repeat in the
        // index are summed by one thread.
        parallel_for(0, inner, grain_rows(n), [&](int64_t c0, int64_t c1) { rows(0, c0, c1); });
      }
      return;
    }
    const int64_t os = out.stride(dim), ss = src.stride(dim);
    RowIter<2> it(src.sizes(), dim, {out.strides(), src.strides()});
    parallel_for(0, it.rows, grain_rows(n), [&](int64_t b, int64_t e) {
      it.run(b, e, [&](const int64_t* off) {
        T* o = op + off[0];
        const T* s = sp + off[1];
        for (int64_t j = 0; j < n; ++j) add(o[ip[j] * os], s[j * ss]);
      });
    });
  });
}

}  // namespace troupe::cpu
