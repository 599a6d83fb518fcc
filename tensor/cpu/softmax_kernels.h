// CPU loops of the reduction family that do not go through Backend::reduce: softmax / log_softmax (forward
// and backward), logsumexp, the reverse cumulative sum (cumsum's backward) and fused row moments (var, mean,
// sum of squares). Behind the CPU backend's fused reductions (softmax_kernels.cpp), on contiguous tensors
// viewed as (outer, r, inner), with the reduction along r. Also the explicitly vectorised helpers (exp,
// NaN-propagating max) the reduce kernels use.
//
// Vectorisation uses GCC/Clang vector extensions (4 floats / 2 doubles: plain SSE2 on x86-64, NEON on ARM),
// so it needs no -march flag and no -ffast-math; NaN and infinity behave as in PyTorch 1.13.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "../dtype.h"
#include "../parallel.h"

// Hot float loops are compiled twice (AVX2+FMA and baseline) and picked at load time where the toolchain
// supports it (GCC's target_clones on x86-64); elsewhere they are compiled once for the baseline.
// ("arch=x86-64-v3" is chosen by CPU features; "arch=haswell" would be chosen only on that CPU model.)
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(TROUPE_NO_TARGET_CLONES) && \
    __GNUC__ >= 12
#define TROUPE_SIMD_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#elif defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(TROUPE_NO_TARGET_CLONES)
#define TROUPE_SIMD_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define TROUPE_SIMD_CLONES
#endif
#define TROUPE_SIMD_INLINE __attribute__((always_inline)) inline


namespace troupe::cpu::simd {

typedef float v4f __attribute__((vector_size(16)));
typedef int32_t v4i __attribute__((vector_size(16)));
typedef double v2d __attribute__((vector_size(16)));
typedef int64_t v2l __attribute__((vector_size(16)));
typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));

inline v4f load4(const float* p) {
  v4f v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
inline void store4(float* p, v4f v) { std::memcpy(p, &v, sizeof(v)); }
inline v4f splat4(float x) { return v4f{x, x, x, x}; }
inline v2d load2(const double* p) {
  v2d v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
inline v2d splat2(double x) { return v2d{x, x}; }
/// exp of a vector of floats (Cephes' expf polynomial: within 1 ulp of glibc's expf over the whole range);
/// exp(-inf) = 0, exp(inf) = inf, NaN stays NaN, results below the normal range are correctly scaled
/// subnormals.
/// (In place, through a reference: 32-byte vectors are never passed by value, which would involve the ABI
/// of AVX arguments.)
template <typename VF, typename VI>
TROUPE_SIMD_INLINE void expv(VF& v) {
  const VF x = v;
  const VF hi = VF{} + 88.72283935546875f;   // above: overflow to inf
  const VF lo = VF{} + -103.97208404541015f;  // below: 0
  VF xc = x > hi ? hi : x;
  xc = xc < lo ? lo : xc;
  VF fx = xc * 1.44269504088896341f + 0.5f;
  VI n = __builtin_convertvector(fx, VI);  // truncation; floor below
  VF nf = __builtin_convertvector(n, VF);
  n = n + (nf > fx);  // true is -1
  nf = __builtin_convertvector(n, VF);
  VF r = xc - nf * 0.693359375f;
  r = r - nf * -2.12194440e-4f;
  VF z = r * r;
  VF y = VF{} + 1.9875691500e-4f;
  y = y * r + 1.3981999507e-3f;
  y = y * r + 8.3334519073e-3f;
  y = y * r + 4.1665795894e-2f;
  y = y * r + 1.6666665459e-1f;
  y = y * r + 5.0000001201e-1f;
  y = y * z + r + 1.0f;
  // 2^n as two factors so that n in [-150, 128] needs no special exponent handling
  VI n1 = n >> 1;
  VI n2 = n - n1;
  VF res = y * (VF)((n1 + 127) << 23) * (VF)((n2 + 127) << 23);
  res = x > hi ? VF{} + std::numeric_limits<float>::infinity() : res;
  res = x < lo ? VF{} : res;
  v = x != x ? x : res;
}

/// exp of a vector of floats known to be <= 0 or NaN (x - max in softmax and logsumexp, a log-probability): the
/// same polynomial as expv with cheaper range handling. No overflow is possible, so there is no upper clamp and
/// no infinity blend; n = round(x * log2(e)) comes from the float magic-number trick instead of two conversions
/// and a floor fix; a NaN propagates through the arithmetic. Values below the normal range are correctly
/// scaled subnormals, as in expv.
template <typename VF, typename VI>
TROUPE_SIMD_INLINE void expv_nonpos(VF& v) {
  const VF x = v;
  const VF lo = VF{} + -103.97208404541015f;  // below: 0
  const VF xc = x < lo ? lo : x;
  const VF magic = VF{} + 12582912.0f;  // 1.5 * 2^23: adding it rounds |t| < 2^22 to an integer
  const VF t = xc * 1.44269504088896341f + magic;
  const VI n = (VI)t - (VI)magic;  // the rounded integer, from the low mantissa bits
  const VF nf = t - magic;
  VF r = xc - nf * 0.693359375f;
  r = r - nf * -2.12194440e-4f;
  const VF z = r * r;
  VF y = VF{} + 1.9875691500e-4f;
  y = y * r + 1.3981999507e-3f;
  y = y * r + 8.3334519073e-3f;
  y = y * r + 4.1665795894e-2f;
  y = y * r + 1.6666665459e-1f;
  y = y * r + 5.0000001201e-1f;
  y = y * z + r + 1.0f;
  const VI n1 = n >> 1;  // n in [-150, 0]: two factors 2^n1 * 2^(n - n1), each a normal float
  const VI n2 = n - n1;
  const VF res = y * (VF)((n1 + 127) << 23) * (VF)((n2 + 127) << 23);
  v = x < lo ? VF{} : res;
}

TROUPE_SIMD_INLINE v4f exp4(v4f x) {
  expv<v4f, v4i>(x);
  return x;
}
TROUPE_SIMD_INLINE float exp1(float x) { return exp4(splat4(x))[0]; }
/// 8 floats at p (exp(p[k] - shift)) into v.
TROUPE_SIMD_INLINE void exp8_at(const float* p, float shift, v8f& v) {
  std::memcpy(&v, p, sizeof(v));
  v -= shift;
  expv<v8f, v8i>(v);
}
/// 8 floats at p (exp(p[k] - shift)) into v, where every p[k] - shift is <= 0 or NaN.
TROUPE_SIMD_INLINE void exp8_nonpos_at(const float* p, float shift, v8f& v) {
  std::memcpy(&v, p, sizeof(v));
  v -= shift;
  expv_nonpos<v8f, v8i>(v);
}

/// out[i] = exp(in[i] - shift) (out may be null); returns the sum of the exps.
TROUPE_SIMD_CLONES [[maybe_unused]] static float exp_shift_sum(const float* in, float* out, int64_t n, float shift) {
  v8f acc0 = v8f{}, acc1 = v8f{};
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    v8f e0, e1;
    exp8_at(in + j, shift, e0);
    exp8_at(in + j + 8, shift, e1);
    if (out) {
      std::memcpy(out + j, &e0, sizeof(e0));
      std::memcpy(out + j + 8, &e1, sizeof(e1));
    }
    acc0 += e0;
    acc1 += e1;
  }
  acc0 += acc1;
  float s = ((acc0[0] + acc0[1]) + (acc0[2] + acc0[3])) + ((acc0[4] + acc0[5]) + (acc0[6] + acc0[7]));
  for (; j < n; ++j) {
    float e = exp1(in[j] - shift);
    if (out) out[j] = e;
    s += e;
  }
  return s;
}

/// p[i] = exp(p[i]).
TROUPE_SIMD_CLONES [[maybe_unused]] static void exp_inplace(float* p, int64_t n) {
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    v8f e;
    exp8_at(p + j, 0.0f, e);
    std::memcpy(p + j, &e, sizeof(e));
  }
  for (; j < n; ++j) p[j] = exp1(p[j]);
}

// load8 returns a 32-byte vector, but it is always inlined, so no call ever uses the AVX argument ABI that
// -Wpsabi warns about (in the baseline clones of the functions below); the warning is off until the pop.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
TROUPE_SIMD_INLINE v8f load8(const float* p) {
  v8f v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
TROUPE_SIMD_INLINE void store8(float* p, const v8f& v) { std::memcpy(p, &v, sizeof(v)); }

/// NaN-propagating max of p[0, n), n >= 1, in 8-float vectors (inlined into the cloned row kernels below).
TROUPE_SIMD_INLINE float max_row8(const float* p, int64_t n) {
  v8f m0 = v8f{} + p[0], m1 = m0;
  v8i bad = v8i{};
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const v8f a = load8(p + j), b = load8(p + j + 8);
    m0 = a > m0 ? a : m0;
    m1 = b > m1 ? b : m1;
    bad |= (a != a) | (b != b);
  }
  m0 = m1 > m0 ? m1 : m0;
  float m = p[0];
  bool nan = false;
  for (int k = 0; k < 8; ++k) {
    m = m0[k] > m ? m0[k] : m;
    nan |= bad[k] != 0;
  }
  for (; j < n; ++j) {
    const float v = p[j];
    nan |= v != v;
    m = v > m ? v : m;
  }
  return nan ? std::numeric_limits<float>::quiet_NaN() : m;
}

/// sum of exp(p[j] - shift) over p[0, n), storing the exps to out unless it is null (inlined); NonPos: every
/// p[j] - shift is <= 0 or NaN (shift is the max), so the cheaper exp applies.
template <bool NonPos>
TROUPE_SIMD_INLINE float exp_shift_sum8(const float* in, float* out, int64_t n, float shift) {
  v8f acc0 = v8f{}, acc1 = v8f{};
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    v8f e0, e1;
    if constexpr (NonPos) {
      exp8_nonpos_at(in + j, shift, e0);
      exp8_nonpos_at(in + j + 8, shift, e1);
    } else {
      exp8_at(in + j, shift, e0);
      exp8_at(in + j + 8, shift, e1);
    }
    if (out) {
      store8(out + j, e0);
      store8(out + j + 8, e1);
    }
    acc0 += e0;
    acc1 += e1;
  }
  acc0 += acc1;
  float s = ((acc0[0] + acc0[1]) + (acc0[2] + acc0[3])) + ((acc0[4] + acc0[5]) + (acc0[6] + acc0[7]));
  for (; j < n; ++j) {
    const float e = exp1(in[j] - shift);
    if (out) out[j] = e;
    s += e;
  }
  return s;
}

/// The last-dim softmax family on `rows` float32 rows of length r >= 1 (x and y contiguous), one compiled
/// loop per row with every pass in 8-float vectors:
///   mode 0 softmax:     y = exp(x - max) / sum            (the exps are stored, then scaled in place)
///   mode 1 log_softmax: y = (x - max) - log(sum)
///   mode 2 logsumexp:   y[row] = log(sum) + max', max' = max or 0 where it is infinite (PyTorch's rule)
TROUPE_SIMD_CLONES [[maybe_unused]] static void softmax_rows_f32(const float* x, float* y, int64_t rows, int64_t r,
                                                                 int mode) {
  for (int64_t o = 0; o < rows; ++o) {
    const float* p = x + o * r;
    float m = max_row8(p, r);
    if (mode == 2) {
      // an infinite max is replaced by 0, after which x - 0 may be positive: the general exp
      y[o] = std::isinf(m) ? std::log(exp_shift_sum8<false>(p, nullptr, r, 0.0f))
                           : std::log(exp_shift_sum8<true>(p, nullptr, r, m)) + m;
      continue;
    }
    float* q = y + o * r;
    int64_t j = 0;
    if (mode == 0) {
      const float inv = 1.0f / exp_shift_sum8<true>(p, q, r, m);
      for (; j + 8 <= r; j += 8) store8(q + j, load8(q + j) * inv);
      for (; j < r; ++j) q[j] *= inv;
    } else {
      const float ls = std::log(exp_shift_sum8<true>(p, nullptr, r, m));
      for (; j + 8 <= r; j += 8) store8(q + j, (load8(p + j) - m) - ls);
      for (; j < r; ++j) q[j] = (p[j] - m) - ls;
    }
  }
}

/// Backward of softmax (log false: gi = y * (g - sum(g*y))) or log_softmax (log true: gi = g - exp(y) * sum(g))
/// on `rows` float32 rows of length r.
TROUPE_SIMD_CLONES [[maybe_unused]] static void softmax_bwd_rows_f32(const float* g, const float* y, float* gi,
                                                                     int64_t rows, int64_t r, bool log) {
  for (int64_t o = 0; o < rows; ++o) {
    const float* gp = g + o * r;
    const float* yp = y + o * r;
    float* q = gi + o * r;
    v8f a0 = v8f{}, a1 = v8f{};
    int64_t j = 0;
    if (log) {
      for (; j + 16 <= r; j += 16) {
        a0 += load8(gp + j);
        a1 += load8(gp + j + 8);
      }
    } else {
      for (; j + 16 <= r; j += 16) {
        a0 += load8(gp + j) * load8(yp + j);
        a1 += load8(gp + j + 8) * load8(yp + j + 8);
      }
    }
    a0 += a1;
    float s = ((a0[0] + a0[1]) + (a0[2] + a0[3])) + ((a0[4] + a0[5]) + (a0[6] + a0[7]));
    for (; j < r; ++j) s += log ? gp[j] : gp[j] * yp[j];
    j = 0;
    if (log) {
      for (; j + 8 <= r; j += 8) {
        v8f e;
        exp8_nonpos_at(yp + j, 0.0f, e);  // y = log_softmax <= 0
        store8(q + j, load8(gp + j) - e * s);
      }
      for (; j < r; ++j) q[j] = gp[j] - exp1(yp[j]) * s;
    } else {
      for (; j + 8 <= r; j += 8) store8(q + j, load8(yp + j) * (load8(gp + j) - s));
      for (; j < r; ++j) q[j] = yp[j] * (gp[j] - s);
    }
  }
}

#pragma GCC diagnostic pop

/// NaN-propagating max of p[0, n), n >= 1.
inline float max_row(const float* p, int64_t n) {
  v4f m0 = splat4(p[0]), m1 = m0;
  v4i bad = {0, 0, 0, 0};
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    v4f a = load4(p + j), b = load4(p + j + 4);
    m0 = a > m0 ? a : m0;
    m1 = b > m1 ? b : m1;
    bad |= (a != a) | (b != b);
  }
  m0 = m1 > m0 ? m1 : m0;
  float m = p[0];
  bool nan = false;
  for (int k = 0; k < 4; ++k) {
    m = m0[k] > m ? m0[k] : m;
    nan |= bad[k] != 0;
  }
  for (; j < n; ++j) {
    float v = p[j];
    nan |= v != v;
    m = v > m ? v : m;
  }
  return nan ? std::numeric_limits<float>::quiet_NaN() : m;
}

inline double max_row(const double* p, int64_t n) {
  v2d m0 = splat2(p[0]), m1 = m0;
  v2l bad = {0, 0};
  int64_t j = 0;
  for (; j + 4 <= n; j += 4) {
    v2d a = load2(p + j), b = load2(p + j + 2);
    m0 = a > m0 ? a : m0;
    m1 = b > m1 ? b : m1;
    bad |= (a != a) | (b != b);
  }
  m0 = m1 > m0 ? m1 : m0;
  double m = p[0];
  bool nan = false;
  for (int k = 0; k < 2; ++k) {
    m = m0[k] > m ? m0[k] : m;
    nan |= bad[k] != 0;
  }
  for (; j < n; ++j) {
    double v = p[j];
    nan |= v != v;
    m = v > m ? v : m;
  }
  return nan ? std::numeric_limits<double>::quiet_NaN() : m;
}

/// NaN-propagating min (same shape as max_row).
inline float min_row(const float* p, int64_t n) {
  v4f m0 = splat4(p[0]), m1 = m0;
  v4i bad = {0, 0, 0, 0};
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    v4f a = load4(p + j), b = load4(p + j + 4);
    m0 = a < m0 ? a : m0;
    m1 = b < m1 ? b : m1;
    bad |= (a != a) | (b != b);
  }
  m0 = m1 < m0 ? m1 : m0;
  float m = p[0];
  bool nan = false;
  for (int k = 0; k < 4; ++k) {
    m = m0[k] < m ? m0[k] : m;
    nan |= bad[k] != 0;
  }
  for (; j < n; ++j) {
    float v = p[j];
    nan |= v != v;
    m = v < m ? v : m;
  }
  return nan ? std::numeric_limits<float>::quiet_NaN() : m;
}

inline double min_row(const double* p, int64_t n) {
  v2d m0 = splat2(p[0]), m1 = m0;
  v2l bad = {0, 0};
  int64_t j = 0;
  for (; j + 4 <= n; j += 4) {
    v2d a = load2(p + j), b = load2(p + j + 2);
    m0 = a < m0 ? a : m0;
    m1 = b < m1 ? b : m1;
    bad |= (a != a) | (b != b);
  }
  m0 = m1 < m0 ? m1 : m0;
  double m = p[0];
  bool nan = false;
  for (int k = 0; k < 2; ++k) {
    m = m0[k] < m ? m0[k] : m;
    nan |= bad[k] != 0;
  }
  for (; j < n; ++j) {
    double v = p[j];
    nan |= v != v;
    m = v < m ? v : m;
  }
  return nan ? std::numeric_limits<double>::quiet_NaN() : m;
}

/// The first index of the maximum (IsMax) or minimum of p[0, n) and its value; a NaN counts as the extremum
/// (the first NaN wins), as in PyTorch. n >= 1, n < 2^31 for float (int32 index lanes).
template <bool IsMax, typename T>
inline void arg_extremum_row(const T* p, int64_t n, T& best, int64_t& best_idx) {
  using VF = std::conditional_t<std::is_same_v<T, float>, v4f, v2d>;
  using VI = std::conditional_t<std::is_same_v<T, float>, v4i, v2l>;
  constexpr int L = std::is_same_v<T, float> ? 4 : 2;
  VF m, x;
  VI mi, idx;
  for (int k = 0; k < L; ++k) {
    m[k] = p[0];
    mi[k] = 0;
    idx[k] = k;
  }
  int64_t j = 0;
  for (; j + L <= n; j += L) {
    std::memcpy(&x, p + j, sizeof(x));
    VI take = (IsMax ? (x > m) : (x < m)) | ((x != x) & (m == m));
    m = take ? x : m;
    mi = take ? idx : mi;
    idx += L;
  }
  T b = m[0];
  int64_t bi = mi[0];
  for (int k = 1; k < L; ++k) {
    const T v = m[k];
    const int64_t i = mi[k];
    const bool vn = v != v, bn = b != b;
    const bool wins = bn ? (vn && i < bi) : (vn || (IsMax ? v > b : v < b) || (v == b && i < bi));
    if (wins) {
      b = v;
      bi = i;
    }
  }
  for (; j < n; ++j) {
    const T v = p[j];
    if ((IsMax ? v > b : v < b) || (v != v && b == b)) {
      b = v;
      bi = j;
    }
  }
  best = b;
  best_idx = bi;
}

}  // namespace troupe::cpu::simd

namespace troupe::cpu {

namespace softmax_detail {

template <typename A, typename T>
inline A ld(T v) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) return static_cast<A>(static_cast<float>(v));
  else return static_cast<A>(v);
}
template <typename T, typename A>
inline T st(A v) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) return T(static_cast<float>(v));
  else return static_cast<T>(v);
}
template <typename A>
inline A vmax(A m, A v) {
  return (v > m || v != v) ? v : m;
}

constexpr int64_t kColBlock = 128;

/// Calls f(o, c0, nc) over (outer, column blocks of inner) in parallel.
template <typename F>
void for_blocks(int64_t outer, int64_t inner, int64_t r, F f) {
  const int64_t ncb = (inner + kColBlock - 1) / kColBlock;
  const int64_t per = std::max<int64_t>(1, r * std::min(inner, kColBlock));
  parallel_for(0, outer * ncb, std::max<int64_t>(1, kGrainSize / per), [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t o = t / ncb, c0 = (t % ncb) * kColBlock;
      f(o, c0, std::min(kColBlock, inner - c0));
    }
  });
}

template <typename F>
void for_rows(int64_t outer, int64_t r, F f) {
  parallel_for(0, outer, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(r, 1)), [&](int64_t b, int64_t e) {
    for (int64_t o = b; o < e; ++o) f(o);
  });
}

/// A float copy of a row of 16-bit floats (thread-local scratch).
template <typename T>
const float* as_float(const T* p, int64_t n, std::vector<float>& buf) {
  buf.resize(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) buf[j] = static_cast<float>(p[j]);
  return buf.data();
}

/// One float32 row of softmax / log_softmax (16-bit rows go through a float copy of the row).
template <bool Log>
inline void softmax_row_f32(const float* p, float* q, int64_t r) {
  simd::softmax_rows_f32(p, q, 1, r, Log ? 1 : 0);
}

/// Calls f(b, e) over chunks of `rows` rows of length r in parallel.
template <typename F>
void for_row_chunks(int64_t rows, int64_t r, F f) {
  parallel_for(0, rows, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(r, 1)), f);
}

}  // namespace softmax_detail

/// softmax (Log=false) or log_softmax (Log=true) of x along r of (outer, r, inner); x and y contiguous.
/// As PyTorch: y = exp(x - max) / sum, log: x - max - log(sum); a NaN or +inf in a slice, or a slice of
/// -inf only, makes the whole slice NaN.
template <typename T, bool Log>
void softmax_forward_cpu(const T* x, T* y, int64_t outer, int64_t r, int64_t inner) {
  using namespace softmax_detail;
  using A = opmath_t<T>;
  if (inner == 1) {
    if constexpr (std::is_same_v<T, float>) {
      if (r == 0) return;
      for_row_chunks(outer, r, [&](int64_t b, int64_t e) {
        simd::softmax_rows_f32(x + b * r, y + b * r, e - b, r, Log ? 1 : 0);
      });
      return;
    }
    for_rows(outer, r, [&](int64_t o) {
      const T* p = x + o * r;
      T* q = y + o * r;
      if constexpr (std::is_same_v<A, float>) {  // 16-bit floats: through a float row
        thread_local std::vector<float> in, out;
        const float* pf = as_float(p, r, in);
        out.resize(static_cast<size_t>(r));
        softmax_row_f32<Log>(pf, out.data(), r);
        for (int64_t j = 0; j < r; ++j) q[j] = T(out[j]);
      } else {  // double
        const A m = simd::max_row(p, r);
        A s = 0;
        if constexpr (Log) {
          for (int64_t j = 0; j < r; ++j) s += std::exp(p[j] - m);
          const A ls = std::log(s);
          for (int64_t j = 0; j < r; ++j) q[j] = p[j] - m - ls;
        } else {
          for (int64_t j = 0; j < r; ++j) {
            const A e = std::exp(p[j] - m);
            q[j] = e;
            s += e;
          }
          const A inv = A(1) / s;
          for (int64_t j = 0; j < r; ++j) q[j] *= inv;
        }
      }
    });
    return;
  }
  for_blocks(outer, inner, r, [&](int64_t o, int64_t c0, int64_t nc) {
    A m[kColBlock], s[kColBlock], row[kColBlock];
    const T* base = x + o * r * inner + c0;
    T* ybase = y + o * r * inner + c0;
    for (int64_t c = 0; c < nc; ++c) m[c] = ld<A>(base[c]);
    for (int64_t j = 1; j < r; ++j)
      for (int64_t c = 0; c < nc; ++c) m[c] = vmax(m[c], ld<A>(base[j * inner + c]));
    for (int64_t c = 0; c < nc; ++c) s[c] = 0;
    auto exp_row = [&](int64_t j) {  // row[c] = exp(x[j, c] - m[c])
      for (int64_t c = 0; c < nc; ++c) row[c] = ld<A>(base[j * inner + c]) - m[c];
      if constexpr (std::is_same_v<A, float>) {
        simd::exp_inplace(row, nc);
      } else {
        for (int64_t c = 0; c < nc; ++c) row[c] = std::exp(row[c]);
      }
    };
    for (int64_t j = 0; j < r; ++j) {
      exp_row(j);
      for (int64_t c = 0; c < nc; ++c) s[c] += row[c];
    }
    if constexpr (Log) {
      for (int64_t c = 0; c < nc; ++c) s[c] = std::log(s[c]);
      for (int64_t j = 0; j < r; ++j)
        for (int64_t c = 0; c < nc; ++c) ybase[j * inner + c] = st<T>(ld<A>(base[j * inner + c]) - m[c] - s[c]);
    } else {
      for (int64_t c = 0; c < nc; ++c) s[c] = A(1) / s[c];
      for (int64_t j = 0; j < r; ++j) {
        exp_row(j);
        for (int64_t c = 0; c < nc; ++c) ybase[j * inner + c] = st<T>(row[c] * s[c]);
      }
    }
  });
}

/// Backward along the last dim (rows of length r): softmax gi = y * (g - sum(g*y)); log_softmax
/// gi = g - exp(y) * sum(g).
template <typename T, bool Log>
void softmax_backward_cpu(const T* g, const T* y, T* gi, int64_t outer, int64_t r) {
  using namespace softmax_detail;
  using A = opmath_t<T>;
  if constexpr (std::is_same_v<T, float>) {
    if (r == 0) return;
    for_row_chunks(outer, r, [&](int64_t b, int64_t e) {
      simd::softmax_bwd_rows_f32(g + b * r, y + b * r, gi + b * r, e - b, r, Log);
    });
    return;
  }
  for_rows(outer, r, [&](int64_t o) {
    const T* gp = g + o * r;
    const T* yp = y + o * r;
    T* q = gi + o * r;
    A s = 0;
    if constexpr (Log) {
      for (int64_t j = 0; j < r; ++j) s += ld<A>(gp[j]);
      for (int64_t j = 0; j < r; ++j) q[j] = st<T>(ld<A>(gp[j]) - std::exp(ld<A>(yp[j])) * s);
    } else {
      for (int64_t j = 0; j < r; ++j) s += ld<A>(gp[j]) * ld<A>(yp[j]);
      for (int64_t j = 0; j < r; ++j) q[j] = st<T>(ld<A>(yp[j]) * (ld<A>(gp[j]) - s));
    }
  });
}

/// y = log(sum(exp(x - m'))) + m' along r, m' = the max, or 0 where the max is infinite (PyTorch's rule:
/// all -inf gives -inf, a +inf gives inf, NaN gives NaN, r = 0 gives -inf).
template <typename T>
void logsumexp_cpu(const T* x, T* y, int64_t outer, int64_t r, int64_t inner) {
  using namespace softmax_detail;
  using A = opmath_t<T>;
  auto fix = [](A m) { return std::isinf(m) ? A(0) : m; };
  if (inner == 1) {
    if constexpr (std::is_same_v<T, float>) {
      if (r > 0) {
        for_row_chunks(outer, r, [&](int64_t b, int64_t e) { simd::softmax_rows_f32(x + b * r, y + b, e - b, r, 2); });
        return;
      }
    }
    for_rows(outer, r, [&](int64_t o) {
      if (r == 0) {
        y[o] = st<T>(-std::numeric_limits<A>::infinity());
        return;
      }
      const T* p = x + o * r;
      if constexpr (std::is_same_v<A, float>) {
        thread_local std::vector<float> in;
        const float* pf;
        if constexpr (std::is_same_v<T, float>) pf = p;
        else pf = as_float(p, r, in);
        const float m = fix(simd::max_row(pf, r));
        y[o] = st<T>(std::log(simd::exp_shift_sum(pf, nullptr, r, m)) + m);
      } else {
        const A m = fix(simd::max_row(p, r));
        A s = 0;
        for (int64_t j = 0; j < r; ++j) s += std::exp(p[j] - m);
        y[o] = st<T>(std::log(s) + m);
      }
    });
    return;
  }
  for_blocks(outer, inner, r, [&](int64_t o, int64_t c0, int64_t nc) {
    A m[kColBlock], s[kColBlock], row[kColBlock];
    const T* base = x + o * r * inner + c0;
    for (int64_t c = 0; c < nc; ++c) m[c] = -std::numeric_limits<A>::infinity();
    for (int64_t j = 0; j < r; ++j)
      for (int64_t c = 0; c < nc; ++c) m[c] = vmax(m[c], ld<A>(base[j * inner + c]));
    for (int64_t c = 0; c < nc; ++c) {
      m[c] = fix(m[c]);
      s[c] = 0;
    }
    for (int64_t j = 0; j < r; ++j) {
      for (int64_t c = 0; c < nc; ++c) row[c] = ld<A>(base[j * inner + c]) - m[c];
      if constexpr (std::is_same_v<A, float>) {
        simd::exp_inplace(row, nc);
      } else {
        for (int64_t c = 0; c < nc; ++c) row[c] = std::exp(row[c]);
      }
      for (int64_t c = 0; c < nc; ++c) s[c] += row[c];
    }
    for (int64_t c = 0; c < nc; ++c) y[o * inner + c0 + c] = st<T>(std::log(s[c]) + m[c]);
  });
}

template <typename T> struct cum_acc { using type = int64_t; };
template <> struct cum_acc<float> { using type = double; };
template <> struct cum_acc<double> { using type = double; };
template <> struct cum_acc<Half> { using type = float; };
template <> struct cum_acc<BFloat16> { using type = float; };

/// y[j] = sum_{k >= j} x[k] along r of (outer, r, inner) (accumulating as cumsum does).
template <typename T>
void reverse_cumsum_cpu(const T* x, T* y, int64_t outer, int64_t r, int64_t inner) {
  using namespace softmax_detail;
  using A = typename cum_acc<T>::type;
  if (inner == 1) {
    for_rows(outer, r, [&](int64_t o) {
      A s = 0;
      for (int64_t j = r; j-- > 0;) {
        s += ld<A>(x[o * r + j]);
        y[o * r + j] = st<T>(s);
      }
    });
    return;
  }
  for_blocks(outer, inner, r, [&](int64_t o, int64_t c0, int64_t nc) {
    A s[kColBlock];
    for (int64_t c = 0; c < nc; ++c) s[c] = 0;
    for (int64_t j = r; j-- > 0;) {
      const int64_t off = (o * r + j) * inner + c0;
      for (int64_t c = 0; c < nc; ++c) {
        s[c] += ld<A>(x[off + c]);
        y[off + c] = st<T>(s[c]);
      }
    }
  });
}

namespace softmax_detail {

constexpr int64_t kMomentChunk = 1 << 16;

/// sum_j f(p[j]) in double, in 4 lanes (f maps a double to a double).
template <typename T, typename F>
inline double lane_sum_f64(const T* p, int64_t n, F f) {
  double a[4] = {0, 0, 0, 0};
  int64_t j = 0;
  for (; j + 4 <= n; j += 4)
    for (int k = 0; k < 4; ++k) a[k] += f(ld<double>(p[j + k]));
  double s = (a[0] + a[1]) + (a[2] + a[3]);
  for (; j < n; ++j) s += f(ld<double>(p[j]));
  return s;
}

/// Sum over a row of length r of f(x), in parallel chunks when the rows are few and long.
template <typename T, typename F>
double row_sum_f64(const T* p, int64_t r, bool split, F f) {
  if (!split) return lane_sum_f64(p, r, f);
  const int64_t nch = (r + kMomentChunk - 1) / kMomentChunk;
  std::vector<double> part(static_cast<size_t>(nch));
  parallel_for(0, nch, 1, [&](int64_t b, int64_t e) {
    for (int64_t c = b; c < e; ++c) {
      const int64_t j0 = c * kMomentChunk;
      part[c] = lane_sum_f64(p + j0, std::min(kMomentChunk, r - j0), f);
    }
  });
  double s = 0;
  for (double v : part) s += v;
  return s;
}

}  // namespace softmax_detail

/// Per row of (outer, r): mean[o] and m2[o] = sum of squared deviations from the mean (two passes, in
/// double). r >= 1.
template <typename T>
void row_moments_cpu(const T* x, int64_t outer, int64_t r, double* mean, double* m2) {
  using namespace softmax_detail;
  const bool split = outer < 2 * get_num_threads() && r >= 2 * kMomentChunk;
  auto one = [&](int64_t o) {
    const T* p = x + o * r;
    const double mu = row_sum_f64(p, r, split, [](double v) { return v; }) / static_cast<double>(r);
    mean[o] = mu;
    m2[o] = row_sum_f64(p, r, split, [mu](double v) { return (v - mu) * (v - mu); });
  };
  if (split) {
    for (int64_t o = 0; o < outer; ++o) one(o);
  } else {
    for_rows(outer, r, one);
  }
}

/// Per row of (outer, r): the sum of squares (in double).
template <typename T>
void row_sumsq_cpu(const T* x, int64_t outer, int64_t r, double* out) {
  using namespace softmax_detail;
  const bool split = outer < 2 * get_num_threads() && r >= 2 * kMomentChunk;
  auto one = [&](int64_t o) { out[o] = row_sum_f64(x + o * r, r, split, [](double v) { return v * v; }); };
  if (split) {
    for (int64_t o = 0; o < outer; ++o) one(o);
  } else {
    for_rows(outer, r, one);
  }
}

}  // namespace troupe::cpu
