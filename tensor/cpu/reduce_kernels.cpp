// CPU reduction kernels: reductions of a contiguous tensor viewed as (outer, r, inner) into (outer, inner),
// and the cumulative sum along the middle dim.
//
// Accumulation: float, float16 and bfloat16 in float (sums use pairwise / cascaded summation so that long
// float32 sums keep their precision), double in double, integers and bool in int64. Max/Min/ArgMax/ArgMin
// propagate NaN (a NaN is larger and smaller than everything; the first NaN wins) and pick the first of
// equal extrema. Work is split over outer*inner, or over blocks of r (combined in a fixed order, so the
// result does not depend on the number of threads) when there are too few outputs to keep the threads busy.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "../parallel.h"
#include "cpu_backend.h"
#include "softmax_kernels.h"

namespace troupe::cpu {

namespace {

// ------------------------------------------------------------------ types

template <typename T> struct acc_of { using type = int64_t; };  // bool and the integers
template <> struct acc_of<float> { using type = float; };
template <> struct acc_of<double> { using type = double; };
template <> struct acc_of<Half> { using type = float; };
template <> struct acc_of<BFloat16> { using type = float; };
template <typename T> using acc_t = typename acc_of<T>::type;

/// Cumulative sums accumulate as PyTorch's CPU kernel does (at::acc_type<T, false>): double for float.
template <typename T> struct cum_acc_of { using type = int64_t; };
template <> struct cum_acc_of<float> { using type = double; };
template <> struct cum_acc_of<double> { using type = double; };
template <> struct cum_acc_of<Half> { using type = float; };
template <> struct cum_acc_of<BFloat16> { using type = float; };

template <typename T>
constexpr bool is_16bit_float = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

template <typename A, typename T>
inline A load(T v) {
  if constexpr (is_16bit_float<T>) return static_cast<A>(static_cast<float>(v));
  else return static_cast<A>(v);
}

template <typename O, typename A>
inline O store(A v) {
  if constexpr (is_16bit_float<O>) return O(static_cast<float>(v));
  else return static_cast<O>(v);
}

constexpr int64_t kLanes = 16;         // independent accumulators in contiguous loops
constexpr int64_t kPairBlock = 1024;   // pairwise summation leaf (elements)
constexpr int64_t kRowBlock = 16;      // cascaded column summation leaf (rows)
constexpr int64_t kCol = 4096;         // columns per task when inner > 1 (whole rows of memory pages)
constexpr int64_t kCumCol = 256;       // columns per task of cumsum (stack accumulators)
constexpr int64_t kMaxRowBlocks = 32;  // partial results when splitting r with inner > 1
constexpr int64_t kChunk = 1 << 15;    // elements per partial result when splitting r

// ------------------------------------------------------------------ sum / prod building blocks

/// Pairwise sum of p[0, n): blocks of kPairBlock summed in kLanes lanes, blocks combined as a tree.
template <typename T, typename A>
A pairwise_sum(const T* p, int64_t n) {
  if (n <= kPairBlock) {
    A lane[kLanes] = {};
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes)
      for (int64_t k = 0; k < kLanes; ++k) lane[k] += load<A>(p[i + k]);
    A tail = A(0);
    for (; i < n; ++i) tail += load<A>(p[i]);
    for (int64_t w = kLanes / 2; w > 0; w /= 2)
      for (int64_t k = 0; k < w; ++k) lane[k] += lane[k + w];
    return lane[0] + tail;
  }
  int64_t half = (n / 2) / kLanes * kLanes;
  return pairwise_sum<T, A>(p, half) + pairwise_sum<T, A>(p + half, n - half);
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"  // load8 is always inlined (softmax_kernels.h)
/// Pairwise sum of float32 p[0, n) in 8-float vectors: leaves of kPairBlock elements summed in 32 lanes (4
/// vectors, prefetching ahead of the stream), leaves combined as a binary tree with a carry stack, so the
/// result depends only on n, not on how the caller splits the work. One cloned function: no recursion
/// through the ifunc.
TROUPE_SIMD_CLONES float sum_f32(const float* p, int64_t n) {
  using simd::v8f;
  constexpr int64_t kAhead = 512;  // floats (2 KiB) prefetched ahead of the loads
  float stack[64];
  int sp = 0;
  int64_t leaves = 0;
  for (int64_t b = 0; b < n; b += kPairBlock) {
    const float* q = p + b;
    const int64_t len = std::min(kPairBlock, n - b);
    v8f a0 = v8f{}, a1 = v8f{}, a2 = v8f{}, a3 = v8f{};
    int64_t j = 0;
    for (; j + 32 <= len; j += 32) {
      __builtin_prefetch(q + j + kAhead);
      __builtin_prefetch(q + j + kAhead + 16);
      a0 += simd::load8(q + j);
      a1 += simd::load8(q + j + 8);
      a2 += simd::load8(q + j + 16);
      a3 += simd::load8(q + j + 24);
    }
    a0 = (a0 + a1) + (a2 + a3);
    float v = ((a0[0] + a0[1]) + (a0[2] + a0[3])) + ((a0[4] + a0[5]) + (a0[6] + a0[7]));
    float tail = 0.0f;
    for (; j < len; ++j) tail += q[j];
    v += tail;
    ++leaves;
    for (int64_t c = leaves; (c & 1) == 0; c >>= 1) v = stack[--sp] + v;
    stack[sp++] = v;
  }
  float total = sp > 0 ? stack[sp - 1] : 0.0f;
  for (int i = sp - 2; i >= 0; --i) total = stack[i] + total;
  return total;
}
#pragma GCC diagnostic pop

/// acc[c] = sum over `rows` rows (row j at p + j*stride) of p[c], c < nc; cascaded in halves, with the
/// right halves' sums in `scratch` (nc values per level of the recursion).
template <typename T, typename A>
void cascade_rows(const T* p, int64_t rows, int64_t stride, int64_t nc, A* acc, A* scratch) {
  if (rows <= kRowBlock) {
    for (int64_t c = 0; c < nc; ++c) acc[c] = load<A>(p[c]);
    for (int64_t j = 1; j < rows; ++j) {
      const T* row = p + j * stride;
      for (int64_t c = 0; c < nc; ++c) acc[c] += load<A>(row[c]);
    }
    return;
  }
  const int64_t half = rows / 2;
  cascade_rows<T, A>(p, half, stride, nc, acc, scratch);
  cascade_rows<T, A>(p + half * stride, rows - half, stride, nc, scratch, scratch + nc);
  for (int64_t c = 0; c < nc; ++c) acc[c] += scratch[c];
}

/// Levels of cascade_rows' recursion for `rows` rows.
inline int64_t cascade_depth(int64_t rows) {
  int64_t d = 1;
  while (rows > kRowBlock) {
    rows = rows - rows / 2;
    ++d;
  }
  return d;
}

// ------------------------------------------------------------------ reducers
//
// A reducer R over elements T has a value type V and:
//   contig(p, n, j0, v, ix): reduce the contiguous run p[0, n) (its first element has index j0)
//   rows(p, n, j0, stride, nc, v, ix): per column c < nc, reduce n rows of stride `stride`
//   merge(a, ia, b, ib): a = a (+) b, where a covers earlier indices than b
//   kNeedsElements: true when a run must be non-empty (max/min); identity() otherwise.

template <typename T>
struct SumR {
  using V = acc_t<T>;
  static constexpr bool kNeedsElements = false;
  static V identity() { return V(0); }
  static void contig(const T* p, int64_t n, int64_t, V& v, int64_t&) {
    if constexpr (std::is_same_v<T, float>) v = sum_f32(p, n);
    else v = pairwise_sum<T, V>(p, n);
  }
  static void rows(const T* p, int64_t n, int64_t, int64_t stride, int64_t nc, V* v, int64_t*) {
    if (n == 0) {
      for (int64_t c = 0; c < nc; ++c) v[c] = V(0);
      return;
    }
    thread_local std::vector<V> scratch;
    const size_t need = static_cast<size_t>(cascade_depth(n) * nc);
    if (scratch.size() < need) scratch.resize(need);
    cascade_rows<T, V>(p, n, stride, nc, v, scratch.data());
  }
  static void merge(V& a, int64_t&, V b, int64_t) { a += b; }
};

template <typename T>
struct ProdR {
  using V = acc_t<T>;
  static constexpr bool kNeedsElements = false;
  static V identity() { return V(1); }
  static void contig(const T* p, int64_t n, int64_t, V& v, int64_t&) {
    V lane[kLanes];
    for (int64_t k = 0; k < kLanes; ++k) lane[k] = V(1);
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes)
      for (int64_t k = 0; k < kLanes; ++k) lane[k] *= load<V>(p[i + k]);
    V r = V(1);
    for (int64_t k = 0; k < kLanes; ++k) r *= lane[k];
    for (; i < n; ++i) r *= load<V>(p[i]);
    v = r;
  }
  static void rows(const T* p, int64_t n, int64_t, int64_t stride, int64_t nc, V* v, int64_t*) {
    for (int64_t c = 0; c < nc; ++c) v[c] = V(1);
    for (int64_t j = 0; j < n; ++j) {
      const T* row = p + j * stride;
      for (int64_t c = 0; c < nc; ++c) v[c] *= load<V>(row[c]);
    }
  }
  static void merge(V& a, int64_t&, V b, int64_t) { a *= b; }
};

/// True when v should replace best: larger (smaller for min), or a NaN replacing a number.
template <bool IsMax, typename V>
inline bool better(V v, V best) {
  if constexpr (std::is_floating_point_v<V>) {
    bool nan_wins = (v != v) & (best == best);
    return (IsMax ? (v > best) : (v < best)) | nan_wins;
  } else {
    return IsMax ? (v > best) : (v < best);
  }
}

/// max/min with the index of the (first) extremum.
template <typename T, bool IsMax>
struct ExtIdxR {
  using V = opmath_t<T>;
  static constexpr bool kNeedsElements = true;
  static V identity() { return V(0); }
  static void contig(const T* p, int64_t n, int64_t j0, V& v, int64_t& ix) {
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      if (n < (int64_t(1) << 31)) {
        simd::arg_extremum_row<IsMax>(p, n, v, ix);
        ix += j0;
        return;
      }
    }
    V best = load<V>(p[0]);
    int64_t bi = 0;
    for (int64_t i = 1; i < n; ++i) {
      V x = load<V>(p[i]);
      if (better<IsMax>(x, best)) {
        best = x;
        bi = i;
      }
    }
    v = best;
    ix = j0 + bi;
  }
  static void rows(const T* p, int64_t n, int64_t j0, int64_t stride, int64_t nc, V* v, int64_t* ix) {
    for (int64_t c = 0; c < nc; ++c) {
      v[c] = load<V>(p[c]);
      ix[c] = j0;
    }
    for (int64_t j = 1; j < n; ++j) {
      const T* row = p + j * stride;
      for (int64_t c = 0; c < nc; ++c) {
        V x = load<V>(row[c]);
        bool b = better<IsMax>(x, v[c]);
        v[c] = b ? x : v[c];
        ix[c] = b ? j0 + j : ix[c];
      }
    }
  }
  static void merge(V& a, int64_t& ia, V b, int64_t ib) {
    if (better<IsMax>(b, a)) {
      a = b;
      ia = ib;
    }
  }
};

/// max/min values only (amax/amin): lane-parallel, vectorisable.
template <typename T, bool IsMax>
struct ExtValR {
  using V = opmath_t<T>;
  static constexpr bool kNeedsElements = true;
  static V identity() { return V(0); }
  static void contig(const T* p, int64_t n, int64_t, V& v, int64_t&) {
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      v = IsMax ? simd::max_row(p, n) : simd::min_row(p, n);
      return;
    }
    V first = load<V>(p[0]);
    V lane[kLanes];
    for (int64_t k = 0; k < kLanes; ++k) lane[k] = first;
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes)
      for (int64_t k = 0; k < kLanes; ++k) {
        V x = load<V>(p[i + k]);
        lane[k] = better<IsMax>(x, lane[k]) ? x : lane[k];
      }
    V r = lane[0];
    for (int64_t k = 1; k < kLanes; ++k) r = better<IsMax>(lane[k], r) ? lane[k] : r;
    for (; i < n; ++i) {
      V x = load<V>(p[i]);
      r = better<IsMax>(x, r) ? x : r;
    }
    v = r;
  }
  static void rows(const T* p, int64_t n, int64_t, int64_t stride, int64_t nc, V* v, int64_t*) {
    for (int64_t c = 0; c < nc; ++c) v[c] = load<V>(p[c]);
    for (int64_t j = 1; j < n; ++j) {
      const T* row = p + j * stride;
      int64_t c = 0;
      if constexpr (std::is_same_v<T, float>) {
        for (; c + 4 <= nc; c += 4) {
          simd::v4f a = simd::load4(row + c), m = simd::load4(v + c);
          m = ((IsMax ? (a > m) : (a < m)) | (a != a)) ? a : m;
          simd::store4(v + c, m);
        }
      }
      for (; c < nc; ++c) {
        V x = load<V>(row[c]);
        v[c] = better<IsMax>(x, v[c]) ? x : v[c];
      }
    }
  }
  static void merge(V& a, int64_t&, V b, int64_t) { a = better<IsMax>(b, a) ? b : a; }
};

template <typename T, bool IsAll>
struct LogicalR {
  using V = bool;
  static constexpr bool kNeedsElements = false;
  static V identity() { return IsAll; }
  static bool truth(T x) { return load<opmath_t<T>>(x) != opmath_t<T>(0); }
  static void contig(const T* p, int64_t n, int64_t, V& v, int64_t&) {
    for (int64_t i = 0; i < n; ++i) {
      if (truth(p[i]) != IsAll) {
        v = !IsAll;
        return;
      }
    }
    v = IsAll;
  }
  static void rows(const T* p, int64_t n, int64_t, int64_t stride, int64_t nc, V* v, int64_t*) {
    for (int64_t c = 0; c < nc; ++c) v[c] = IsAll;
    for (int64_t j = 0; j < n; ++j) {
      const T* row = p + j * stride;
      for (int64_t c = 0; c < nc; ++c) {
        if constexpr (IsAll) v[c] = v[c] & truth(row[c]);
        else v[c] = v[c] | truth(row[c]);
      }
    }
  }
  static void merge(V& a, int64_t&, V b, int64_t) { a = IsAll ? (a && b) : (a || b); }
};

/// Merges parts [lo, hi) as a balanced tree, left to right; the result lands in parts[lo].
template <typename R>
void merge_tree(typename R::V* v, int64_t* ix, int64_t lo, int64_t hi) {
  if (hi - lo <= 1) return;
  int64_t mid = lo + (hi - lo) / 2;
  merge_tree<R>(v, ix, lo, mid);
  merge_tree<R>(v, ix, mid, hi);
  R::merge(v[lo], ix[lo], v[mid], ix[mid]);
}

/// A plain array (std::vector<bool> packs bits, which threads cannot write independently).
template <typename V>
struct Buf {
  explicit Buf(int64_t n) : p(new V[static_cast<size_t>(n)]()) {}
  V* data() { return p.get(); }
  V& operator[](int64_t i) { return p[static_cast<size_t>(i)]; }
  std::unique_ptr<V[]> p;
};

// ------------------------------------------------------------------ the driver

/// Reduces in (outer, r, inner) with reducer R; write(k, value, index) stores output k = o*inner + c.
template <typename R, typename T, typename Write>
void drive(const T* in, int64_t outer, int64_t r, int64_t inner, Write write) {
  using V = typename R::V;
  const int64_t nout = outer * inner;
  if (nout == 0) return;
  if (r == 0) {
    for (int64_t k = 0; k < nout; ++k) write(k, R::identity(), 0);
    return;
  }
  const int64_t total = nout * r;
  const int nt = get_num_threads();
  const bool small = total < 2 * kGrainSize || nt <= 1;

  if (inner == 1) {
    if (small || outer >= 4 * nt || r < 2 * kChunk) {
      int64_t grain = std::max<int64_t>(1, kGrainSize / r);
      parallel_for(0, outer, grain, [&](int64_t b, int64_t e) {
        for (int64_t o = b; o < e; ++o) {
          V v = R::identity();
          int64_t ix = 0;
          R::contig(in + o * r, r, 0, v, ix);
          write(o, v, ix);
        }
      });
      return;
    }
    // few long rows: reduce fixed-size chunks of each row in parallel, then merge them in order
    const int64_t nch = (r + kChunk - 1) / kChunk;
    Buf<V> pv(nch);
    Buf<int64_t> pi(nch);
    for (int64_t o = 0; o < outer; ++o) {
      const T* row = in + o * r;
      parallel_for(0, nch, 1, [&](int64_t b, int64_t e) {
        for (int64_t c = b; c < e; ++c) {
          int64_t j0 = c * kChunk, n = std::min(kChunk, r - j0);
          R::contig(row + j0, n, j0, pv[c], pi[c]);
        }
      });
      merge_tree<R>(pv.data(), pi.data(), 0, nch);
      write(o, pv[0], pi[0]);
    }
    return;
  }

  const int64_t ncb = (inner + kCol - 1) / kCol;
  const int64_t tasks = outer * ncb;
  const int64_t width = std::min(inner, kCol);
  if (small || tasks >= nt || r < 4 * kRowBlock) {
    int64_t grain = std::max<int64_t>(1, kGrainSize / (r * width));
    parallel_for(0, tasks, grain, [&](int64_t b, int64_t e) {
      Buf<V> v(width);
      Buf<int64_t> ix(width);
      for (int64_t t = b; t < e; ++t) {
        int64_t o = t / ncb, c0 = (t % ncb) * kCol, nc = std::min(kCol, inner - c0);
        R::rows(in + o * r * inner + c0, r, 0, inner, nc, v.data(), ix.data());
        for (int64_t c = 0; c < nc; ++c) write(o * inner + c0 + c, v[c], ix[c]);
      }
    });
    return;
  }
  // few outputs, many rows: reduce blocks of rows in parallel into partial results (a fixed number of blocks,
  // so that the result does not depend on the thread count), then merge them in order as a tree
  const int64_t rows_per = std::max<int64_t>(kRowBlock, (r + kMaxRowBlocks - 1) / kMaxRowBlocks);
  const int64_t nrc = (r + rows_per - 1) / rows_per;
  Buf<V> pv(nrc * nout);
  Buf<int64_t> pi(nrc * nout);
  parallel_for(0, nrc * tasks, 1, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t k = t / tasks, o = (t % tasks) / ncb, c0 = (t % ncb) * kCol;
      const int64_t j0 = k * rows_per, n = std::min(rows_per, r - j0), nc = std::min(kCol, inner - c0);
      const int64_t off = k * nout + o * inner + c0;
      R::rows(in + (o * r + j0) * inner + c0, n, j0, inner, nc, pv.data() + off, pi.data() + off);
    }
  });
  for (int64_t step = 1; step < nrc; step *= 2)
    for (int64_t k = 0; k + step < nrc; k += 2 * step) {
      V* a = pv.data() + k * nout;
      int64_t* ia = pi.data() + k * nout;
      const V* bv = pv.data() + (k + step) * nout;
      const int64_t* ib = pi.data() + (k + step) * nout;
      for (int64_t q = 0; q < nout; ++q) R::merge(a[q], ia[q], bv[q], ib[q]);
    }
  for (int64_t q = 0; q < nout; ++q) write(q, pv[q], pi[q]);
}

[[noreturn]] void bad_out(const char* op, const Tensor& in, const Tensor& out) {
  throw std::invalid_argument(std::string("[reduce] ") + op + " of " + dtype_name(in.dtype()) +
                              " cannot write " + dtype_name(out.dtype()) + " output");
}

const char* op_name(ReduceKind op) {
  switch (op) {
    case ReduceKind::Sum: return "sum";
    case ReduceKind::Prod: return "prod";
    case ReduceKind::Max: return "max";
    case ReduceKind::Min: return "min";
    case ReduceKind::ArgMax: return "argmax";
    case ReduceKind::ArgMin: return "argmin";
    case ReduceKind::All: return "all";
    case ReduceKind::Any: return "any";
  }
  return "reduce";
}

/// Sum/Prod: out has the input's dtype or the accumulator's (int64 for integers, float for 16-bit floats).
template <typename R, typename T>
void run_value(const char* name, const Tensor& out, const Tensor& in, const T* ip, int64_t outer, int64_t r,
               int64_t inner) {
  using A = typename R::V;
  if (out.dtype() == in.dtype()) {
    T* op = static_cast<T*>(out.data_ptr());
    drive<R>(ip, outer, r, inner, [op](int64_t k, A v, int64_t) { op[k] = store<T>(v); });
  } else if (out.dtype() == dtype_of<A>::value) {
    A* op = static_cast<A*>(out.data_ptr());
    drive<R>(ip, outer, r, inner, [op](int64_t k, A v, int64_t) { op[k] = v; });
  } else {
    bad_out(name, in, out);
  }
}

template <bool IsMax, typename T>
void run_extremum(const char* name, const Tensor& out, const Tensor& idx, const Tensor& in, const T* ip,
                  int64_t outer, int64_t r, int64_t inner) {
  if (r == 0)
    throw std::out_of_range(std::string("[") + name + "] Expected reduction dim to have non-zero size.");
  if (out.defined() && out.dtype() != in.dtype()) bad_out(name, in, out);
  T* op = out.defined() ? static_cast<T*>(out.data_ptr()) : nullptr;
  if (idx.defined()) {
    using R = ExtIdxR<T, IsMax>;
    using V = typename R::V;
    int64_t* xp = static_cast<int64_t*>(idx.data_ptr());
    if (op)
      drive<R>(ip, outer, r, inner, [op, xp](int64_t k, V v, int64_t i) {
        op[k] = store<T>(v);
        xp[k] = i;
      });
    else
      drive<R>(ip, outer, r, inner, [xp](int64_t k, V, int64_t i) { xp[k] = i; });
  } else {
    using R = ExtValR<T, IsMax>;
    using V = typename R::V;
    drive<R>(ip, outer, r, inner, [op](int64_t k, V v, int64_t) { op[k] = store<T>(v); });
  }
}

template <bool IsAll, typename T>
void run_logical(const char* name, const Tensor& out, const Tensor& in, const T* ip, int64_t outer, int64_t r,
                 int64_t inner) {
  if (out.dtype() != kBool && out.dtype() != kUInt8) bad_out(name, in, out);
  uint8_t* op = static_cast<uint8_t*>(out.data_ptr());
  drive<LogicalR<T, IsAll>>(ip, outer, r, inner,
                            [op](int64_t k, bool v, int64_t) { op[k] = static_cast<uint8_t>(v ? 1 : 0); });
}

void check_geometry(const char* name, const Tensor& t, const char* what, int64_t numel) {
  if (!t.is_contiguous() || t.numel() != numel)
    throw std::invalid_argument(std::string("[reduce] ") + name + ": " + what + " must be contiguous with " +
                                std::to_string(numel) + " elements, got " + shape_str(t.sizes()) +
                                (t.is_contiguous() ? "" : " (not contiguous)"));
}

}  // namespace

void CpuBackend::reduce(ReduceKind op, const Tensor& out, const Tensor& idx, const Tensor& in, int64_t outer, int64_t r,
                        int64_t inner) {
  const char* name = op_name(op);
  check_geometry(name, in, "input", outer * r * inner);
  const bool wants_idx = op == ReduceKind::ArgMax || op == ReduceKind::ArgMin;
  if (out.defined()) check_geometry(name, out, "output", outer * inner);
  else if (!wants_idx)
    throw std::invalid_argument(std::string("[reduce] ") + name + ": the output is undefined");
  if (idx.defined()) {
    check_geometry(name, idx, "indices", outer * inner);
    if (idx.dtype() != kInt64)
      throw std::invalid_argument(std::string("[reduce] ") + name + ": indices must be int64, got " +
                                  dtype_name(idx.dtype()));
  } else if (wants_idx) {
    throw std::invalid_argument(std::string("[reduce] ") + name + ": the indices are undefined");
  }
  dispatch_all(in.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* ip = static_cast<const T*>(in.data_ptr());
    switch (op) {
      case ReduceKind::Sum: run_value<SumR<T>>(name, out, in, ip, outer, r, inner); break;
      case ReduceKind::Prod: run_value<ProdR<T>>(name, out, in, ip, outer, r, inner); break;
      case ReduceKind::Max: case ReduceKind::ArgMax: run_extremum<true>(name, out, idx, in, ip, outer, r, inner); break;
      case ReduceKind::Min: case ReduceKind::ArgMin: run_extremum<false>(name, out, idx, in, ip, outer, r, inner); break;
      case ReduceKind::All: run_logical<true>(name, out, in, ip, outer, r, inner); break;
      case ReduceKind::Any: run_logical<false>(name, out, in, ip, outer, r, inner); break;
    }
  });
}

void CpuBackend::cumsum(const Tensor& out, const Tensor& in, int64_t outer, int64_t r, int64_t inner) {
  check_geometry("cumsum", in, "input", outer * r * inner);
  check_geometry("cumsum", out, "output", outer * r * inner);
  if (out.dtype() != in.dtype())
    throw std::invalid_argument(std::string("[cumsum] output dtype ") + dtype_name(out.dtype()) +
                                " differs from the input's " + dtype_name(in.dtype()));
  if (out.numel() == 0) return;
  dispatch_all(in.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using A = typename cum_acc_of<T>::type;
    const T* ip = static_cast<const T*>(in.data_ptr());
    T* op = static_cast<T*>(out.data_ptr());
    if (inner == 1) {
      parallel_for(0, outer, std::max<int64_t>(1, kGrainSize / r), [&](int64_t b, int64_t e) {
        for (int64_t o = b; o < e; ++o) {
          const T* p = ip + o * r;
          T* q = op + o * r;
          A s = A(0);
          for (int64_t j = 0; j < r; ++j) {
            s += load<A>(p[j]);
            q[j] = store<T>(s);
          }
        }
      });
      return;
    }
    const int64_t ncb = (inner + kCumCol - 1) / kCumCol;
    parallel_for(0, outer * ncb, std::max<int64_t>(1, kGrainSize / (r * std::min(inner, kCumCol))),
                 [&](int64_t b, int64_t e) {
                   A acc[kCumCol];
                   for (int64_t t = b; t < e; ++t) {
                     int64_t o = t / ncb, c0 = (t % ncb) * kCumCol, nc = std::min(kCumCol, inner - c0);
                     for (int64_t c = 0; c < nc; ++c) acc[c] = A(0);
                     for (int64_t j = 0; j < r; ++j) {
                       const T* p = ip + (o * r + j) * inner + c0;
                       T* q = op + (o * r + j) * inner + c0;
                       for (int64_t c = 0; c < nc; ++c) {
                         acc[c] += load<A>(p[c]);
                         q[c] = store<T>(acc[c]);
                       }
                     }
                   }
                 });
  });
}

}  // namespace troupe::cpu
