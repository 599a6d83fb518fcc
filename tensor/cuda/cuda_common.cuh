// Shared by the CUDA backend's .cu files (laid out like tensor/cpu/): CUDA error checks, the device helpers
// (device_info, resolve, DeviceGuard, common_device), the cuBLAS handle, the per-kernel error flag, and, in
// an anonymous namespace so that every .cu file gets its own copy (as one file had before), the device
// element types, device math, the elementwise geometry and launch helpers and the dtype dispatch.
//
// Design (a first version: correct and simple before fast):
//  - Every kernel runs on the legacy default stream of the tensor's device, so work runs in issue order
//    and cudaMemcpy to/from the host waits for it; blocks freed into the cache can be reused at once.
//  - Elementwise kernels take the operands' geometry by value (sizes and per-operand strides, after
//    dropping size-1 dims and merging dims that are contiguous in every operand, at most 8 dims) and a
//    small functor; one kernel per dtype with a switch on the op inside (few instantiations, short
//    compile). 16-bit floats are stored as their bits and computed in float, as on the CPU.
//  - Reductions: one thread per output, or one block per output row when the reduced elements are
//    contiguous (inner == 1) and numerous; split over chunks of the reduced dim, with a second kernel
//    merging the partials, when the outputs are too few to fill the device. softmax, log_softmax and
//    logsumexp are fused kernels (softmax_kernels.cu).
//  - Index kernels bounds-check every index on the device and report the first bad one after the kernel
//    (one synchronisation per call); scatter_add/index_add accumulate with atomics (compare-and-swap on
//    the enclosing 32-bit word for 1- and 2-byte types), so float sums may vary in the last bits.
//  - Errors: every CUDA call is checked (TROUPE_CUDA_CHECK throws std::runtime_error with the file, the
//    line and cudaGetErrorString). Without a device, is_available() is false and allocating a CUDA
//    tensor throws `[cuda] no CUDA device is available (cudaGetDeviceCount: ...)`.
#pragma once

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "../backend.h"
#include "../ops.h"
#include "cuda_backend_impl.h"

namespace troupe::cuda {

// ================================================================ error checking

/// Throws std::runtime_error naming the CUDA error, the expression, the file and the line.
[[noreturn]] void throw_cuda(cudaError_t e, const char* expr, const char* file, int line);

inline void check_cuda(cudaError_t e, const char* expr, const char* file, int line) {
  if (e != cudaSuccess) throw_cuda(e, expr, file, line);
}

inline void check_cublas(cublasStatus_t s, const char* expr, const char* file, int line) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string("[cuda] cuBLAS error ") + std::to_string(static_cast<int>(s)) + ": " +
                             cublasGetStatusString(s) + " (in " + expr + " at " + file + ":" + std::to_string(line) +
                             ")");
}

}  // namespace troupe::cuda

#define TROUPE_CUDA_CHECK(expr) ::troupe::cuda::check_cuda((expr), #expr, __FILE__, __LINE__)
#define TROUPE_CUBLAS_CHECK(expr) ::troupe::cuda::check_cublas((expr), #expr, __FILE__, __LINE__)

namespace troupe::cuda {

// ================================================================ devices (cuda_backend.cu)

struct DeviceInfo {
  int count = 0;
  cudaError_t error = cudaSuccess;
};

/// cudaGetDeviceCount, asked once (no driver or no device: count 0 and the error kept for messages).
const DeviceInfo& device_info();
[[noreturn]] void throw_no_device();
void require_device();
/// The device index of `d` (-1: the current device), checked against the number of devices.
int resolve(Device d);

/// Makes `dev` current for the scope, restoring the previous device after.
class DeviceGuard {
 public:
  explicit DeviceGuard(int dev) {
    TROUPE_CUDA_CHECK(cudaGetDevice(&prev_));
    if (dev != prev_) {
      TROUPE_CUDA_CHECK(cudaSetDevice(dev));
      changed_ = true;
    }
  }
  ~DeviceGuard() {
    if (changed_) (void)cudaSetDevice(prev_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int prev_ = 0;
  bool changed_ = false;
};

/// The one CUDA device all defined operands live on; throws when one is on the CPU or elsewhere.
int common_device(const char* op, std::initializer_list<const Tensor*> ts);

/// The cuBLAS handle of device `dev`, created on first use (never destroyed).
cublasHandle_t cublas_handle(int dev);

/// A device error code (int) and value (long long), zeroed, that kernels set to report errors (integer
/// division by zero, an index out of range, ...); read() waits for the kernel.
class ErrorFlag {
 public:
  struct Report {
    int code;
    long long value;
  };
  explicit ErrorFlag(int dev);
  ~ErrorFlag();
  ErrorFlag(const ErrorFlag&) = delete;
  ErrorFlag& operator=(const ErrorFlag&) = delete;
  int* code() const { return reinterpret_cast<int*>(p_); }
  long long* value() const { return reinterpret_cast<long long*>(p_ + 8); }
  Report read() const;

 private:
  char* p_;
};

/// Device memory from the caching allocator for one op's temporaries (a reduction's partial results), freed
/// at the end of the scope. Every kernel of the backend runs on the legacy default stream, so a block freed
/// here is reused only by work queued after the kernels that read it (as for any tensor freed into the
/// cache; an NCCL group's stream waits for the default stream before each collective).
class Scratch {
 public:
  Scratch(size_t nbytes, int dev);
  ~Scratch();
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  template <typename T>
  T* as(size_t byte_offset = 0) const {
    return reinterpret_cast<T*>(static_cast<char*>(p_) + byte_offset);
  }

 private:
  void* p_;
};

constexpr int kErrDivZero = 1;
constexpr int kErrNegPow = 2;
constexpr int kErrIndex = 3;

[[noreturn]] inline void bad_dtype(const char* what, ScalarType t) {
  throw std::invalid_argument(std::string("[") + what + "] not implemented for dtype " + dtype_name(t));
}

namespace {

// ================================================================ device element types

/// float16 / bfloat16 as stored: their bits (troupe::Half's conversions are host code).
struct h16 {
  uint16_t x;
};
struct b16 {
  uint16_t x;
};

template <typename T> struct dev_type { using type = T; };
template <> struct dev_type<Half> { using type = h16; };
template <> struct dev_type<BFloat16> { using type = b16; };
template <typename T> using dev_t = typename dev_type<T>::type;

template <typename T> constexpr bool is_16bit_v = std::is_same_v<T, h16> || std::is_same_v<T, b16>;

/// The type elementwise arithmetic runs in (as the CPU's opmath_t; bool computes in int).
template <typename T> struct math_type { using type = T; };
template <> struct math_type<h16> { using type = float; };
template <> struct math_type<b16> { using type = float; };
template <> struct math_type<bool> { using type = int; };
template <typename T> using math_t = typename math_type<T>::type;

template <typename C, typename T>
__device__ __forceinline__ C load_as(T v) {
  if constexpr (std::is_same_v<T, h16>) return static_cast<C>(__half2float(__ushort_as_half(v.x)));
  else if constexpr (std::is_same_v<T, b16>) return static_cast<C>(__bfloat162float(__ushort_as_bfloat16(v.x)));
  else return static_cast<C>(v);
}

template <typename T, typename C>
__device__ __forceinline__ T store_as(C v) {
  if constexpr (std::is_same_v<T, h16>) return h16{__half_as_ushort(__float2half_rn(static_cast<float>(v)))};
  else if constexpr (std::is_same_v<T, b16>) return b16{__bfloat16_as_ushort(__float2bfloat16_rn(static_cast<float>(v)))};
  else if constexpr (std::is_same_v<T, bool>) return v != C(0);
  else return static_cast<T>(v);
}

/// dtype conversion as the CPU's copy does it: to bool is `!= 0`, 16-bit floats go through float,
/// float to integer truncates.
template <typename D, typename S>
__device__ __forceinline__ D convert(S v) {
  if constexpr (std::is_same_v<D, S>) {
    return v;
  } else {
    using C = std::conditional_t<is_16bit_v<S>, float, S>;
    C c = load_as<C>(v);
    if constexpr (std::is_same_v<D, bool>) return c != C(0);
    else return store_as<D>(c);
  }
}

/// An unsigned integer of the element's size: data movement (fill, where, plain copies) needs no type.
template <size_t N> struct uint_of;
template <> struct uint_of<1> { using type = uint8_t; };
template <> struct uint_of<2> { using type = uint16_t; };
template <> struct uint_of<4> { using type = uint32_t; };
template <> struct uint_of<8> { using type = unsigned long long; };

/// Calls f(U{}) with U the unsigned type of `bytes` bytes.
template <typename F>
void dispatch_size(size_t bytes, F&& f) {
  switch (bytes) {
    case 1: f(uint8_t{}); return;
    case 2: f(uint16_t{}); return;
    case 4: f(uint32_t{}); return;
    case 8: f(static_cast<unsigned long long>(0)); return;
  }
  throw std::logic_error("[cuda] unexpected element size " + std::to_string(bytes));
}

// ================================================================ device math (float and double overloads)

#define TROUPE_DM1(name, ffun, dfun)                                    \
  __device__ __forceinline__ float name(float x) { return ::ffun(x); }  \
  __device__ __forceinline__ double name(double x) { return ::dfun(x); }
TROUPE_DM1(m_abs, fabsf, fabs)
TROUPE_DM1(m_exp, expf, exp)
TROUPE_DM1(m_log, logf, log)
TROUPE_DM1(m_log1p, log1pf, log1p)
TROUPE_DM1(m_sqrt, sqrtf, sqrt)
TROUPE_DM1(m_sin, sinf, sin)
TROUPE_DM1(m_cos, cosf, cos)
TROUPE_DM1(m_tanh, tanhf, tanh)
TROUPE_DM1(m_erf, erff, erf)
TROUPE_DM1(m_floor, floorf, floor)
TROUPE_DM1(m_ceil, ceilf, ceil)
TROUPE_DM1(m_rint, rintf, rint)
TROUPE_DM1(m_trunc, truncf, trunc)
#undef TROUPE_DM1
__device__ __forceinline__ float m_pow(float a, float b) { return ::powf(a, b); }
__device__ __forceinline__ double m_pow(double a, double b) { return ::pow(a, b); }
__device__ __forceinline__ float m_fma(float a, float b, float c) { return ::fmaf(a, b, c); }
__device__ __forceinline__ double m_fma(double a, double b, double c) { return ::fma(a, b, c); }

/// max and min that propagate NaN (torch.maximum / minimum; softmax's and Adam's max).
template <typename C>
__device__ __forceinline__ C nan_max(C a, C b) {
  if constexpr (std::is_floating_point_v<C>) {
    if (a != a) return a;
    if (b != b) return b;
  }
  return a > b ? a : b;
}
template <typename C>
__device__ __forceinline__ C nan_min(C a, C b) {
  if constexpr (std::is_floating_point_v<C>) {
    if (a != a) return a;
    if (b != b) return b;
  }
  return a < b ? a : b;
}


// ================================================================ geometry

constexpr int kMaxDims = 8;
constexpr int kThreads = 256;

/// Sizes and per-operand strides (in elements) of N operands of one shape, dims coalesced.
template <int N>
struct Geom {
  int ndim = 0;
  int64_t sizes[kMaxDims];
  int64_t strides[N][kMaxDims];

  /// The element offset of linear (row-major) index i in each operand.
  __device__ __forceinline__ void offsets(int64_t i, int64_t* off) const {
    if (ndim == 1) {
#pragma unroll
      for (int k = 0; k < N; ++k) off[k] = i * strides[k][0];
      return;
    }
#pragma unroll
    for (int k = 0; k < N; ++k) off[k] = 0;
    for (int d = ndim - 1; d >= 0; --d) {
      const int64_t s = sizes[d];
      const int64_t q = i / s;
      const int64_t r = i - q * s;
      i = q;
#pragma unroll
      for (int k = 0; k < N; ++k) off[k] += r * strides[k][d];
    }
  }
};

/// Geometry of N operands of shape `sz`, operand k with strides st[k] (sz.size() entries, in elements).
template <int N>
Geom<N> make_geom_raw(const char* op, IntArrayRef sz, const std::array<const int64_t*, N>& st_in) {
  // drop size-1 dims, then merge dims that are contiguous with each other in every operand
  std::vector<int64_t> s;
  std::array<std::vector<int64_t>, N> st;
  for (size_t d = 0; d < sz.size(); ++d) {
    if (sz[d] == 1) continue;
    s.push_back(sz[d]);
    for (int k = 0; k < N; ++k) st[k].push_back(st_in[k][d]);
  }
  std::vector<int64_t> ms;
  std::array<std::vector<int64_t>, N> mst;
  for (size_t d = 0; d < s.size(); ++d) {
    if (!ms.empty()) {
      bool merge = true;
      for (int k = 0; k < N; ++k)
        if (mst[k].back() != st[k][d] * s[d]) merge = false;
      if (merge) {
        ms.back() *= s[d];
        for (int k = 0; k < N; ++k) mst[k].back() = st[k][d];
        continue;
      }
    }
    ms.push_back(s[d]);
    for (int k = 0; k < N; ++k) mst[k].push_back(st[k][d]);
  }
  if (ms.size() > static_cast<size_t>(kMaxDims))
    throw std::invalid_argument(std::string("[") + op + "] the CUDA kernels support at most " +
                                std::to_string(kMaxDims) + " dimensions after merging contiguous ones, got " +
                                std::to_string(ms.size()) + " (shape " + shape_str(sz) +
                                "); make the operands contiguous first");
  Geom<N> g{};
  g.ndim = static_cast<int>(ms.size());
  for (int d = 0; d < g.ndim; ++d) {
    g.sizes[d] = ms[d];
    for (int k = 0; k < N; ++k) g.strides[k][d] = mst[k][d];
  }
  return g;
}

/// Geometry of ops[0] (the output) and the other operands, which must have its sizes.
template <int N>
Geom<N> make_geom(const char* op, std::array<const Tensor*, N> ops) {
  const IntArrayRef sz = ops[0]->sizes();
  std::array<const int64_t*, N> st;
  for (int k = 0; k < N; ++k) {
    if (k > 0 && !ops[k]->sizes().equals(sz))
      throw std::invalid_argument(std::string("[") + op + "] operand " + std::to_string(k) + " has shape " +
                                  shape_str(ops[k]->sizes()) + ", expected " + shape_str(sz));
    st[k] = ops[k]->strides().data();
  }
  return make_geom_raw<N>(op, sz, st);
}


inline unsigned grid_for(int64_t n) {
  int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(b, int64_t(1) << 16)));  // grid-stride beyond
}

template <int N, typename F>
__global__ void __launch_bounds__(kThreads) elementwise_kernel(int64_t n, Geom<N> g, F f) {
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    int64_t off[N];
    g.offsets(i, off);
    f(off);
  }
}

template <int N, typename F>
void launch_elementwise(int64_t n, const Geom<N>& g, const F& f) {
  if (n <= 0) return;
  elementwise_kernel<N, F><<<grid_for(n), kThreads>>>(n, g, f);
  TROUPE_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
T* ptr(const Tensor& t) {
  return static_cast<T*>(t.data_ptr());
}

}  // namespace
}  // namespace troupe::cuda
