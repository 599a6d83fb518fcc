// CPU kernels for uniform_ and normal_ (CpuBackend::uniform / CpuBackend::normal) and for random_ and
// bernoulli_ (cpu::random_fill / cpu::bernoulli_fill), drawing from a Generator exactly as PyTorch
// 1.13's CPU kernels do, so that equal seeds give equal numbers:
//
// * uniform on [from, to): float32 takes the low 24 bits of one 32-bit draw, float64 the low 53 bits of a
//   64-bit draw, float16 11 bits, bfloat16 8 bits; x * 2^-bits is mapped by fma(x, to - from, from)
//   (PyTorch's x * (to - from) + from, which GCC contracts to an fma in its AVX2 build).
// * normal: a contiguous tensor of >= 16 elements is first filled with uniforms; then each block of 16
//   is turned into normals by Box-Muller on the pairs (i, i + 8); when the size is not a multiple of 16
//   the last 16 elements are redrawn and transformed again. float32 reproduces PyTorch's AVX2 kernel
//   (the cephes-style log/sincos polynomials of avx_mathfun, with the same fmas), float64 uses the C
//   library's log/cos/sin, float16 computes in float and rounds at each step, bfloat16 rounds every
//   operation to bfloat16 (as c10::BFloat16's math functions do). Smaller or non-contiguous tensors draw
//   each element from the scalar Box-Muller of normal_distribution<double>, which keeps the second value
//   of each pair in the generator for the next draw.
#include <atomic>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define TROUPE_RANDOM_X86 1
#endif

#include "../backend.h"
#include "../storage.h"
#include "../random.h"
#include "cpu_backend.h"

namespace troupe {
namespace cpu {
namespace {

constexpr double kPi = 3.14159265358979323846;

// ---------------------------------------------------------------- iteration in memory order

/// A view of `t` with its dims ordered by decreasing stride (dims of size 1 dropped): walking it in
/// row-major order visits the elements in the order PyTorch's TensorIterator fills them.
Tensor memory_order_view(const Tensor& t) {
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < t.dim(); ++d)
    if (t.sizes()[d] != 1) dims.push_back(d);
  // stable insertion sort by stride, descending
  for (size_t i = 1; i < dims.size(); ++i)
    for (size_t j = i; j > 0 && t.strides()[dims[j - 1]] < t.strides()[dims[j]]; --j) std::swap(dims[j - 1], dims[j]);
  std::vector<int64_t> sizes, strides;
  for (int64_t d : dims) {
    sizes.push_back(t.sizes()[d]);
    strides.push_back(t.strides()[d]);
  }
  auto impl = std::make_shared<TensorImpl>(t.impl()->storage, sizes, strides, t.storage_offset(), t.dtype());
  return Tensor(std::move(impl));
}

/// Calls fill(T* data, n) on contiguous memory holding `out`'s elements in memory order, then (when
/// `out` is not dense in that order) copies them into `out`.
template <typename T, typename Fill>
void fill_in_memory_order(const Tensor& out, Fill&& fill) {
  if (out.numel() == 0) return;
  if (out.is_contiguous()) {
    fill(static_cast<T*>(out.data_ptr()), out.numel());
    return;
  }
  Tensor mv = memory_order_view(out);
  if (mv.is_contiguous()) {
    fill(static_cast<T*>(mv.data_ptr()), mv.numel());
    return;
  }
  auto storage = std::make_shared<StorageImpl>(static_cast<size_t>(mv.numel()) * sizeof(T), Device(kCPU));
  std::vector<int64_t> sz = mv.sizes().vec();
  Tensor tmp(std::make_shared<TensorImpl>(std::move(storage), sz, contiguous_strides(sz), 0, out.dtype()));
  fill(static_cast<T*>(tmp.data_ptr()), tmp.numel());
  backend(kCPU).copy(mv, tmp);
}

template <typename T>
T from_int64(int64_t v) {
  if constexpr (std::is_same_v<T, bool>) return v != 0;
  else if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) return T(static_cast<float>(v));
  else return static_cast<T>(v);
}

// ---------------------------------------------------------------- uniform

inline double uniform_double(Generator& g) {
  return static_cast<double>(g.random64() & ((uint64_t(1) << 53) - 1)) * 0x1p-53;
}
inline float uniform_float(Generator& g) {
  return static_cast<float>(g.random() & ((uint32_t(1) << 24) - 1)) * 0x1p-24f;
}

#ifdef TROUPE_RANDOM_X86
bool have_fma() {
  static const bool ok = __builtin_cpu_supports("fma");
  return ok;
}
// The same loop compiled with FMA instructions (std::fmaf is otherwise a library call).
__attribute__((target("fma"))) void uniform_float_fma(float* data, int64_t n, float from, float range, Generator& g) {
  for (int64_t i = 0; i < n; ++i) data[i] = std::fmaf(uniform_float(g), range, from);
}
__attribute__((target("fma"))) void uniform_double_fma(double* data, int64_t n, double from, double range,
                                                       Generator& g) {
  for (int64_t i = 0; i < n; ++i) data[i] = std::fma(uniform_double(g), range, from);
}
#endif

template <typename T>
void uniform_typed(T* data, int64_t n, double from_, double to_, Generator& g) {
  if constexpr (std::is_same_v<T, double>) {
    const double from = from_, range = to_ - from_;
#ifdef TROUPE_RANDOM_X86
    if (have_fma()) return uniform_double_fma(data, n, from, range, g);
#endif
    for (int64_t i = 0; i < n; ++i) data[i] = std::fma(uniform_double(g), range, from);
  } else if constexpr (std::is_same_v<T, float>) {
    const float from = static_cast<float>(from_), to = static_cast<float>(to_);
    const float range = to - from;
#ifdef TROUPE_RANDOM_X86
    if (have_fma()) return uniform_float_fma(data, n, from, range, g);
#endif
    for (int64_t i = 0; i < n; ++i) data[i] = std::fmaf(uniform_float(g), range, from);
  } else {
    // Half / BFloat16: `to - from` is rounded to the type; x has 11 (8) bits
    constexpr int bits = std::is_same_v<T, Half> ? 11 : 8;
    const T from = T(static_cast<float>(from_)), to = T(static_cast<float>(to_));
    const float range = static_cast<float>(T(static_cast<float>(to) - static_cast<float>(from)));
    const float f = static_cast<float>(from);
    for (int64_t i = 0; i < n; ++i) {
      float x = static_cast<float>(g.random() & ((uint32_t(1) << bits) - 1)) * (1.0f / (1 << bits));
      data[i] = T(std::fmaf(x, range, f));
    }
  }
}

// ---------------------------------------------------------------- scalar normal (normal_distribution<double>)

inline double normal_scalar(Generator& g, double mean, double std) {
  auto& cached = g.next_double_normal_sample();
  if (cached) {
    double v = *cached;
    cached.reset();
    return std::fma(v, std, mean);
  }
  const double u1 = uniform_double(g);
  const double u2 = uniform_double(g);
  const double r = std::sqrt(-2.0 * std::log(1.0 - u2));
  const double theta = 2.0 * kPi * u1;
  cached = r * std::sin(theta);
  return std::fma(r * std::cos(theta), std, mean);
}

// ---------------------------------------------------------------- float32 blocks of 16 (AVX2 kernel)

inline uint32_t fbits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bitsf(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Constants of the cephes-derived single-precision log and sin/cos.
constexpr float kSqrtHalf = 0.707106781186547524f;
constexpr float kLogP[9] = {7.0376836292E-2f,   -1.1514610310E-1f, 1.1676998740E-1f,
                            -1.2420140846E-1f,  +1.4249322787E-1f, -1.6668057665E-1f,
                            +2.0000714765E-1f,  -2.4999993993E-1f, +3.3333331174E-1f};
constexpr float kLogQ1 = -2.12194440e-4f;
constexpr float kLogQ2 = 0.693359375f;
constexpr float kDP1 = -0.78515625f;
constexpr float kDP2 = -2.4187564849853515625e-4f;
constexpr float kDP3 = -3.77489497744594108e-8f;
constexpr float kSinP0 = -1.9515295891E-4f, kSinP1 = 8.3321608736E-3f, kSinP2 = -1.6666654611E-1f;
constexpr float kCosP0 = 2.443315711809948E-005f, kCosP1 = -1.388731625493765E-003f,
                kCosP2 = 4.166664568298827E-002f;
constexpr float kFourOverPi = 1.27323954473516f;

/// log(x) for x in (0, 1], bit-identical to one lane of the AVX2 kernel.
inline float log_cephes(float x) {
  const bool invalid = x <= 0.0f;
  x = x > 0x1p-126f ? x : 0x1p-126f;  // no denormals
  int32_t e_int = static_cast<int32_t>(fbits(x) >> 23) - 0x7f;
  x = bitsf((fbits(x) & ~0x7f800000u) | fbits(0.5f));  // mantissa in [0.5, 1)
  float e = static_cast<float>(e_int) + 1.0f;
  const bool small = x < kSqrtHalf;
  const float tmp = small ? x : 0.0f;
  x = x - 1.0f;
  e = e - (small ? 1.0f : 0.0f);
  x = x + tmp;
  const float z = x * x;
  float y = kLogP[0];
  for (int k = 1; k < 9; ++k) y = std::fmaf(y, x, kLogP[k]);
  y = y * x;
  y = std::fmaf(y, z, e * kLogQ1);
  y = std::fmaf(-z, 0.5f, y);
  x = x + y;
  x = std::fmaf(e, kLogQ2, x);
  if (invalid) x = bitsf(0xffffffffu);
  return x;
}

/// sin and cos of x >= 0 (as the AVX2 kernel's sincos, which handles any sign).
inline void sincos_cephes(float x, float* s, float* c) {
  uint32_t sign_sin = fbits(x) & 0x80000000u;
  x = bitsf(fbits(x) & 0x7fffffffu);
  int32_t j = static_cast<int32_t>(x * kFourOverPi);  // truncation
  j = (j + 1) & ~1;
  const float y = static_cast<float>(j);
  sign_sin ^= static_cast<uint32_t>(j & 4) << 29;
  const bool poly_sin = (j & 2) == 0;  // which polynomial gives the sine
  const uint32_t sign_cos = static_cast<uint32_t>(~(j - 2) & 4) << 29;
  x = std::fmaf(y, kDP1, x);
  x = std::fmaf(y, kDP2, x);
  x = std::fmaf(y, kDP3, x);
  const float z = x * x;
  float pc = kCosP0;
  pc = std::fmaf(pc, z, kCosP1);
  pc = std::fmaf(pc, z, kCosP2);
  pc = pc * z;
  pc = std::fmaf(pc, z, -(z * 0.5f));
  pc = pc + 1.0f;
  float ps = kSinP0;
  ps = std::fmaf(ps, z, kSinP1);
  ps = std::fmaf(ps, z, kSinP2);
  ps = ps * z;
  ps = std::fmaf(ps, x, x);
  // select the polynomials as the vector code does (masks, then adds: keeps its signs of zero)
  const float sin_from_ps = poly_sin ? ps : 0.0f, sin_from_pc = poly_sin ? 0.0f : pc;
  const float sv = sin_from_pc + sin_from_ps;
  const float cv = (pc - sin_from_pc) + (ps - sin_from_ps);
  *s = bitsf(fbits(sv) ^ sign_sin);
  *c = bitsf(fbits(cv) ^ sign_cos);
}

constexpr float kTwoPiF = static_cast<float>(2.0f * kPi);

void normal16_float_scalar(float* d, float mean, float std) {
  for (int j = 0; j < 8; ++j) {
    const float u1 = 1.0f - d[j];
    const float u2 = d[j + 8];
    const float radius = std::sqrt(-2.0f * log_cephes(u1));
    const float theta = kTwoPiF * u2;
    float s, c;
    sincos_cephes(theta, &s, &c);
    d[j] = std::fmaf(radius * c, std, mean);
    d[j + 8] = std::fmaf(radius * s, std, mean);
  }
}

#ifdef TROUPE_RANDOM_X86
// The same computation on 8 lanes (operation for operation, so the results are bit-identical).
__attribute__((target("avx2,fma"))) void normal16_float_avx2(float* d, float mean, float std) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 half = _mm256_set1_ps(0.5f);
  __m256 x = _mm256_sub_ps(one, _mm256_loadu_ps(d));
  const __m256 u2 = _mm256_loadu_ps(d + 8);

  // ---- log(x)
  const __m256 invalid = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LE_OS);
  x = _mm256_max_ps(x, _mm256_castsi256_ps(_mm256_set1_epi32(0x00800000)));
  __m256i ei = _mm256_sub_epi32(_mm256_srli_epi32(_mm256_castps_si256(x), 23), _mm256_set1_epi32(0x7f));
  x = _mm256_and_ps(x, _mm256_castsi256_ps(_mm256_set1_epi32(~0x7f800000)));
  x = _mm256_or_ps(x, half);
  __m256 e = _mm256_add_ps(_mm256_cvtepi32_ps(ei), one);
  const __m256 small = _mm256_cmp_ps(x, _mm256_set1_ps(kSqrtHalf), _CMP_LT_OS);
  __m256 tmp = _mm256_and_ps(x, small);
  x = _mm256_sub_ps(x, one);
  e = _mm256_sub_ps(e, _mm256_and_ps(one, small));
  x = _mm256_add_ps(x, tmp);
  __m256 z = _mm256_mul_ps(x, x);
  __m256 y = _mm256_set1_ps(kLogP[0]);
  for (int k = 1; k < 9; ++k) y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(kLogP[k]));
  y = _mm256_mul_ps(y, x);
  y = _mm256_fmadd_ps(y, z, _mm256_mul_ps(e, _mm256_set1_ps(kLogQ1)));
  y = _mm256_fnmadd_ps(z, half, y);
  x = _mm256_add_ps(x, y);
  x = _mm256_fmadd_ps(e, _mm256_set1_ps(kLogQ2), x);
  const __m256 logv = _mm256_or_ps(x, invalid);

  const __m256 radius = _mm256_sqrt_ps(_mm256_mul_ps(_mm256_set1_ps(-2.0f), logv));
  __m256 t = _mm256_mul_ps(_mm256_set1_ps(kTwoPiF), u2);

  // ---- sincos(t)
  const __m256 sign_mask = _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(0x80000000u)));
  __m256 sign_sin = _mm256_and_ps(t, sign_mask);
  t = _mm256_andnot_ps(sign_mask, t);
  __m256i j = _mm256_cvttps_epi32(_mm256_mul_ps(t, _mm256_set1_ps(kFourOverPi)));
  j = _mm256_and_si256(_mm256_add_epi32(j, _mm256_set1_epi32(1)), _mm256_set1_epi32(~1));
  const __m256 yj = _mm256_cvtepi32_ps(j);
  sign_sin = _mm256_xor_ps(sign_sin,
                           _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_and_si256(j, _mm256_set1_epi32(4)), 29)));
  const __m256 poly_sin = _mm256_castsi256_ps(
      _mm256_cmpeq_epi32(_mm256_and_si256(j, _mm256_set1_epi32(2)), _mm256_setzero_si256()));
  const __m256 sign_cos = _mm256_castsi256_ps(_mm256_slli_epi32(
      _mm256_andnot_si256(_mm256_sub_epi32(j, _mm256_set1_epi32(2)), _mm256_set1_epi32(4)), 29));
  t = _mm256_fmadd_ps(yj, _mm256_set1_ps(kDP1), t);
  t = _mm256_fmadd_ps(yj, _mm256_set1_ps(kDP2), t);
  t = _mm256_fmadd_ps(yj, _mm256_set1_ps(kDP3), t);
  z = _mm256_mul_ps(t, t);
  __m256 pc = _mm256_set1_ps(kCosP0);
  pc = _mm256_fmadd_ps(pc, z, _mm256_set1_ps(kCosP1));
  pc = _mm256_fmadd_ps(pc, z, _mm256_set1_ps(kCosP2));
  pc = _mm256_mul_ps(pc, z);
  pc = _mm256_fmsub_ps(pc, z, _mm256_mul_ps(z, half));
  pc = _mm256_add_ps(pc, one);
  __m256 ps = _mm256_set1_ps(kSinP0);
  ps = _mm256_fmadd_ps(ps, z, _mm256_set1_ps(kSinP1));
  ps = _mm256_fmadd_ps(ps, z, _mm256_set1_ps(kSinP2));
  ps = _mm256_mul_ps(ps, z);
  ps = _mm256_fmadd_ps(ps, t, t);
  const __m256 sin_from_ps = _mm256_and_ps(poly_sin, ps), sin_from_pc = _mm256_andnot_ps(poly_sin, pc);
  const __m256 sv = _mm256_add_ps(sin_from_pc, sin_from_ps);
  const __m256 cv = _mm256_add_ps(_mm256_sub_ps(pc, sin_from_pc), _mm256_sub_ps(ps, sin_from_ps));
  const __m256 s = _mm256_xor_ps(sv, sign_sin);
  const __m256 c = _mm256_xor_ps(cv, sign_cos);

  const __m256 mv = _mm256_set1_ps(mean), sd = _mm256_set1_ps(std);
  _mm256_storeu_ps(d, _mm256_fmadd_ps(_mm256_mul_ps(radius, c), sd, mv));
  _mm256_storeu_ps(d + 8, _mm256_fmadd_ps(_mm256_mul_ps(radius, s), sd, mv));
}

bool have_avx2_fma() {
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return ok;
}
#endif

std::atomic<bool> g_vectorized_normal{true};

// ---------------------------------------------------------------- float64 / 16-bit blocks of 16

void normal16_double(double* d, double mean, double std) {
  for (int j = 0; j < 8; ++j) {
    const double u1 = 1 - d[j];
    const double u2 = d[j + 8];
    const double radius = std::sqrt(-2 * std::log(u1));
    const double theta = 2.0 * kPi * u2;
    d[j] = std::fma(radius * std::cos(theta), std, mean);
    d[j + 8] = std::fma(radius * std::sin(theta), std, mean);
  }
}

// float16: c10::Half arithmetic is float arithmetic rounded to half at each assignment.
void normal16_half(Half* d, Half mean, Half std) {
  for (int j = 0; j < 8; ++j) {
    const Half u1 = Half(1.0f - static_cast<float>(d[j]));
    const Half u2 = d[j + 8];
    const Half radius = Half(std::sqrt(-2.0f * std::log(static_cast<float>(u1))));
    const Half theta = Half(static_cast<float>(2.0 * kPi * static_cast<double>(static_cast<float>(u2))));
    const float r = radius, th = theta;
    d[j] = Half(std::fmaf(r * std::cos(th), static_cast<float>(std), static_cast<float>(mean)));
    d[j + 8] = Half(std::fmaf(r * std::sin(th), static_cast<float>(std), static_cast<float>(mean)));
  }
}

// bfloat16: c10's log/sqrt/cos/sin of BFloat16 return BFloat16, and every operator rounds.
void normal16_bfloat16(BFloat16* d, BFloat16 mean, BFloat16 std) {
  auto bf = [](float v) { return static_cast<float>(BFloat16(v)); };
  for (int j = 0; j < 8; ++j) {
    const float u1 = bf(1.0f - static_cast<float>(d[j]));
    const float u2 = d[j + 8];
    const float lg = bf(std::log(u1));
    const float radius = bf(std::sqrt(bf(-2.0f * lg)));
    const float theta = bf(static_cast<float>(2.0 * kPi * static_cast<double>(u2)));
    const float c = bf(std::cos(theta)), s = bf(std::sin(theta));
    const float sd = std, mn = mean;
    d[j] = BFloat16(bf(bf(radius * c) * sd) + mn);
    d[j + 8] = BFloat16(bf(bf(radius * s) * sd) + mn);
  }
}

template <typename T>
T uniform01(Generator& g) {
  if constexpr (std::is_same_v<T, double>) return uniform_double(g);
  else if constexpr (std::is_same_v<T, float>) return uniform_float(g);
  else {
    constexpr int bits = std::is_same_v<T, Half> ? 11 : 8;
    return T(static_cast<float>(g.random() & ((uint32_t(1) << bits) - 1)) * (1.0f / (1 << bits)));
  }
}

template <typename T>
void normal16(T* d, T mean, T std) {
  if constexpr (std::is_same_v<T, double>) {
    normal16_double(d, mean, std);
  } else if constexpr (std::is_same_v<T, float>) {
#ifdef TROUPE_RANDOM_X86
    if (have_avx2_fma() && g_vectorized_normal.load(std::memory_order_relaxed))
      return normal16_float_avx2(d, mean, std);
#endif
    normal16_float_scalar(d, mean, std);
  } else if constexpr (std::is_same_v<T, Half>) {
    normal16_half(d, mean, std);
  } else {
    normal16_bfloat16(d, mean, std);
  }
}

/// PyTorch's normal_fill: uniforms first, Box-Muller in blocks of 16, the tail block redrawn.
template <typename T>
void normal_fill_blocks(T* data, int64_t n, T mean, T std, Generator& g) {
  for (int64_t i = 0; i < n; ++i) data[i] = uniform01<T>(g);
  for (int64_t i = 0; i + 16 <= n; i += 16) normal16<T>(data + i, mean, std);
  if (n % 16 != 0) {
    T* tail = data + n - 16;
    for (int i = 0; i < 16; ++i) tail[i] = uniform01<T>(g);
    normal16<T>(tail, mean, std);
  }
}

void check_float(const Tensor& out, const char* op) {
  if (!out.is_floating_point())
    throw std::invalid_argument(std::string("[") + op + "] expected a floating point tensor, but got " +
                                std::string("torch.") + dtype_name(out.dtype()));
}

}  // namespace

void uniform_fill(const Tensor& out, double from, double to, Generator& gen) {
  check_float(out, "uniform_");
  std::lock_guard<std::mutex> lock(gen.mutex());
  dispatch_all(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, Half> ||
                  std::is_same_v<T, BFloat16>) {
      fill_in_memory_order<T>(out, [&](T* p, int64_t n) { uniform_typed<T>(p, n, from, to, gen); });
    }
  });
}

void normal_fill(const Tensor& out, double mean, double std, Generator& gen) {
  check_float(out, "normal_");
  std::lock_guard<std::mutex> lock(gen.mutex());
  const int64_t n = out.numel();
  dispatch_all(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, Half> ||
                  std::is_same_v<T, BFloat16>) {
      if (n >= 16 && out.is_contiguous()) {
        T m, s;
        if constexpr (std::is_same_v<T, double>) {
          m = mean;
          s = std;
        } else {
          m = T(static_cast<float>(mean));
          s = T(static_cast<float>(std));
        }
        normal_fill_blocks<T>(static_cast<T*>(out.data_ptr()), n, m, s, gen);
      } else {
        fill_in_memory_order<T>(out, [&](T* p, int64_t cnt) {
          for (int64_t i = 0; i < cnt; ++i) {
            const double v = normal_scalar(gen, mean, std);
            if constexpr (std::is_same_v<T, double>) p[i] = v;
            else p[i] = T(static_cast<float>(v));
          }
        });
      }
    }
  });
}

bool set_vectorized_normal(bool enabled) { return g_vectorized_normal.exchange(enabled); }

void random_fill(const Tensor& out, int64_t from, int64_t to, Generator& gen) {
  const uint64_t range = static_cast<uint64_t>(to) - static_cast<uint64_t>(from);
  std::lock_guard<std::mutex> lock(gen.mutex());
  dispatch_all(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    constexpr bool wide_ok = std::is_same_v<T, int64_t> || std::is_same_v<T, double> || std::is_same_v<T, float> ||
                             std::is_same_v<T, BFloat16>;
    const bool wide = wide_ok && range >= (uint64_t(1) << 32);
    fill_in_memory_order<T>(out, [&](T* p, int64_t n) {
      for (int64_t i = 0; i < n; ++i) {
        const uint64_t v = wide ? gen.random64() : static_cast<uint64_t>(gen.random());
        p[i] = from_int64<T>(static_cast<int64_t>(v % range + static_cast<uint64_t>(from)));
      }
    });
  });
}

void random_full_fill(const Tensor& out, Generator& gen) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  dispatch_all(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    // PyTorch's uniform_int: 64-bit draws for float64 and int64, 32-bit ones otherwise; floating types
    // take the draw modulo 2^digits + 1, integers modulo max + 1, bool the low bit.
    constexpr bool wide = std::is_same_v<T, double> || std::is_same_v<T, int64_t>;
    uint64_t modulus = 0;
    if constexpr (std::is_same_v<T, float>) modulus = (uint64_t(1) << 24) + 1;
    else if constexpr (std::is_same_v<T, double>) modulus = (uint64_t(1) << 53) + 1;
    else if constexpr (std::is_same_v<T, Half>) modulus = (uint64_t(1) << 11) + 1;
    else if constexpr (std::is_same_v<T, BFloat16>) modulus = (uint64_t(1) << 8) + 1;
    else if constexpr (std::is_same_v<T, int64_t>) modulus = uint64_t(1) << 63;
    else if constexpr (std::is_same_v<T, int32_t>) modulus = uint64_t(1) << 31;
    else if constexpr (std::is_same_v<T, uint8_t>) modulus = 256;
    fill_in_memory_order<T>(out, [&](T* p, int64_t n) {
      for (int64_t i = 0; i < n; ++i) {
        const uint64_t v = wide ? gen.random64() : static_cast<uint64_t>(gen.random());
        if constexpr (std::is_same_v<T, bool>) p[i] = (v & 1) != 0;
        else p[i] = from_int64<T>(static_cast<int64_t>(v % modulus));
      }
    });
  });
}

void bernoulli_fill(const Tensor& out, double p, Generator& gen) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  dispatch_all(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    fill_in_memory_order<T>(out, [&](T* o, int64_t n) {
      for (int64_t i = 0; i < n; ++i) o[i] = from_int64<T>(uniform_double(gen) < p ? 1 : 0);
    });
  });
}

void CpuBackend::uniform(const Tensor& out, double from, double to) {
  uniform_fill(out, from, to, default_generator());
}

void CpuBackend::normal(const Tensor& out, double mean, double std) {
  normal_fill(out, mean, std, default_generator());
}

}  // namespace cpu
}  // namespace troupe
