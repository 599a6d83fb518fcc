// The CUDA backend: memory (a per-device caching allocator), copies (host <-> device, device <-> device,
// strided with dtype conversion), fill, the elementwise unary/binary/where ops, reductions, cumsum, gemm
// (cuBLAS), gather/scatter/index_select/index_add, im2col/col2im, and uniform/normal (drawn on the host):
// every kernel of backend.h.
//
// Design (a first version: correct and simple before fast):
//  - Every kernel runs on the legacy default stream of the tensor's device, so work runs in issue order
//    and cudaMemcpy to/from the host waits for it; blocks freed into the cache can be reused at once.
//  - Elementwise kernels take the operands' geometry by value (sizes and per-operand strides, after
//    dropping size-1 dims and merging dims that are contiguous in every operand, at most 8 dims) and a
//    small functor; one kernel per dtype with a switch on the op inside (few instantiations, short
//    compile). 16-bit floats are stored as their bits and computed in float, as on the CPU.
//  - Reductions: one thread per output, or one block per output row when the reduced elements are
//    contiguous (inner == 1) and numerous.
//  - Index kernels bounds-check every index on the device and report the first bad one after the kernel
//    (one synchronisation per call); scatter_add/index_add accumulate with atomics (compare-and-swap on
//    the enclosing 32-bit word for 1- and 2-byte types), so float sums may vary in the last bits.
//  - Errors: every CUDA call is checked (TROUPE_CUDA_CHECK throws std::runtime_error with the file, the
//    line and cudaGetErrorString). Without a device, is_available() is false and allocating a CUDA
//    tensor throws `[cuda] no CUDA device is available (cudaGetDeviceCount: ...)`.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "../backend.h"
#include "../ops.h"
#include "../storage.h"
#include "cuda_backend.h"

namespace troupe {
namespace cuda {
namespace {

// ================================================================ error checking

[[noreturn]] void throw_cuda(cudaError_t e, const char* expr, const char* file, int line) {
  (void)cudaGetLastError();  // clear a non-sticky error so that it does not resurface in the next check
  throw std::runtime_error(std::string("[cuda] ") + cudaGetErrorName(e) + ": " + cudaGetErrorString(e) + " (in " +
                           expr + " at " + file + ":" + std::to_string(line) + ")");
}

inline void check_cuda(cudaError_t e, const char* expr, const char* file, int line) {
  if (e != cudaSuccess) throw_cuda(e, expr, file, line);
}

inline void check_cublas(cublasStatus_t s, const char* expr, const char* file, int line) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string("[cuda] cuBLAS error ") + std::to_string(static_cast<int>(s)) + ": " +
                             cublasGetStatusString(s) + " (in " + expr + " at " + file + ":" + std::to_string(line) +
                             ")");
}

}  // namespace
}  // namespace cuda
}  // namespace troupe

#define TROUPE_CUDA_CHECK(expr) ::troupe::cuda::check_cuda((expr), #expr, __FILE__, __LINE__)
#define TROUPE_CUBLAS_CHECK(expr) ::troupe::cuda::check_cublas((expr), #expr, __FILE__, __LINE__)

namespace troupe {
namespace cuda {
namespace {

// ================================================================ devices

struct DeviceInfo {
  int count = 0;
  cudaError_t error = cudaSuccess;
};

/// cudaGetDeviceCount, asked once (no driver or no device: count 0 and the error kept for messages).
const DeviceInfo& device_info() {
  static const DeviceInfo info = [] {
    DeviceInfo i;
    i.error = cudaGetDeviceCount(&i.count);
    if (i.error != cudaSuccess) {
      i.count = 0;
      (void)cudaGetLastError();
    }
    return i;
  }();
  return info;
}

[[noreturn]] void throw_no_device() {
  const DeviceInfo& i = device_info();
  std::string why = i.error != cudaSuccess ? std::string(cudaGetErrorName(i.error)) + ": " + cudaGetErrorString(i.error)
                                           : std::string("0 devices");
  throw std::runtime_error("[cuda] no CUDA device is available (cudaGetDeviceCount: " + why + ")");
}

void require_device() {
  if (device_info().count <= 0) throw_no_device();
}

/// The device index of `d` (-1: the current device), checked against the number of devices.
int resolve(Device d) {
  require_device();
  if (d.index < 0) {
    int cur = 0;
    TROUPE_CUDA_CHECK(cudaGetDevice(&cur));
    return cur;
  }
  if (d.index >= device_info().count)
    throw std::out_of_range("[cuda] device index " + std::to_string(d.index) + " is out of range: " +
                            std::to_string(device_info().count) + " CUDA device(s) available");
  return d.index;
}

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
int common_device(const char* op, std::initializer_list<const Tensor*> ts) {
  int dev = -1;
  const Tensor* first = nullptr;
  for (const Tensor* t : ts) {
    if (!t->defined()) continue;
    if (!t->is_cuda())
      throw std::invalid_argument(std::string("[") + op + "] expected all tensors on a CUDA device, but one is on " +
                                  t->device().str());
    int d = resolve(t->device());
    if (first && d != dev)
      throw std::invalid_argument(std::string("[") + op +
                                  "] expected all tensors to be on the same device, but found at least two devices, "
                                  "cuda:" + std::to_string(dev) + " and cuda:" + std::to_string(d) + "!");
    dev = d;
    first = t;
  }
  if (!first) throw std::invalid_argument(std::string("[") + op + "] no defined tensor");
  return dev;
}

// ================================================================ caching allocator

constexpr size_t kSmallBlock = size_t(1) << 20;  // below 1 MiB: round to 512 bytes

size_t round_size(size_t n) {
  if (n <= kSmallBlock) return (n + 511) / 512 * 512;
  size_t p = 1;
  while (p < n) p <<= 1;
  size_t step = p >> 3;  // 1/8 of the power of two: near sizes share blocks
  return (n + step - 1) / step * step;
}

struct Allocator {
  struct Block {
    int device;
    size_t size;  // rounded
  };
  std::mutex mu;
  std::unordered_map<void*, Block> live;              // handed out
  std::map<int, std::multimap<size_t, void*>> free_;  // device -> rounded size -> cached blocks
  size_t cached = 0, allocated = 0;

  /// Frees the cached blocks of `dev` (all devices when dev < 0); mu held.
  void release_locked(int dev) {
    for (auto& [d, blocks] : free_) {
      if (dev >= 0 && d != dev) continue;
      if (blocks.empty()) continue;
      int prev = 0;
      bool have_prev = cudaGetDevice(&prev) == cudaSuccess;
      (void)cudaSetDevice(d);
      for (auto& [n, p] : blocks) {
        (void)cudaFree(p);
        cached -= n;
      }
      blocks.clear();
      if (have_prev) (void)cudaSetDevice(prev);
    }
    (void)cudaGetLastError();
  }

  void* allocate(size_t nbytes, int dev) {
    const size_t n = round_size(nbytes);
    std::lock_guard<std::mutex> g(mu);
    auto& blocks = free_[dev];
    auto it = blocks.find(n);
    if (it != blocks.end()) {
      void* p = it->second;
      blocks.erase(it);
      cached -= n;
      live.emplace(p, Block{dev, n});
      allocated += n;
      return p;
    }
    DeviceGuard dg(dev);
    void* p = nullptr;
    cudaError_t e = cudaMalloc(&p, n);
    if (e == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      release_locked(dev);
      e = cudaMalloc(&p, n);
    }
    if (e == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      throw std::runtime_error("[cuda] out of memory: could not allocate " + std::to_string(nbytes) +
                               " bytes on cuda:" + std::to_string(dev) + " (" + std::to_string(allocated) +
                               " bytes are in use by tensors; the cache was emptied before retrying)");
    }
    TROUPE_CUDA_CHECK(e);
    live.emplace(p, Block{dev, n});
    allocated += n;
    return p;
  }

  /// Never calls CUDA: safe from destructors, including during static destruction.
  void deallocate(void* p) noexcept {
    if (!p) return;
    std::lock_guard<std::mutex> g(mu);
    auto it = live.find(p);
    if (it == live.end()) return;  // not ours (cannot happen for storages made by this backend)
    Block b = it->second;
    live.erase(it);
    allocated -= b.size;
    try {
      free_[b.device].emplace(b.size, p);
      cached += b.size;
    } catch (...) {
      // out of host memory for the cache entry: drop the block (leaked until exit) rather than throw
    }
  }
};

Allocator& allocator() {
  static Allocator* a = new Allocator();  // never destroyed: tensors may die during static destruction
  return *a;
}

// ================================================================ cuBLAS handles

cublasHandle_t cublas_handle(int dev) {
  static std::mutex mu;
  static std::vector<cublasHandle_t>* handles = new std::vector<cublasHandle_t>();  // never destroyed
  std::lock_guard<std::mutex> g(mu);
  if (static_cast<int>(handles->size()) <= dev) handles->resize(static_cast<size_t>(dev) + 1, nullptr);
  cublasHandle_t& h = (*handles)[static_cast<size_t>(dev)];
  if (!h) {
    DeviceGuard dg(dev);
    TROUPE_CUBLAS_CHECK(cublasCreate(&h));
  }
  return h;
}

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

unsigned grid_for(int64_t n) {
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

/// A device error code (int) and value (long long), zeroed, that kernels set to report errors (integer
/// division by zero, an index out of range, ...); read() waits for the kernel.
class ErrorFlag {
 public:
  struct Report {
    int code;
    long long value;
  };
  explicit ErrorFlag(int dev) : p_(static_cast<char*>(allocator().allocate(16, dev))) {
    TROUPE_CUDA_CHECK(cudaMemsetAsync(p_, 0, 16));
  }
  ~ErrorFlag() { allocator().deallocate(p_); }
  ErrorFlag(const ErrorFlag&) = delete;
  ErrorFlag& operator=(const ErrorFlag&) = delete;
  int* code() const { return reinterpret_cast<int*>(p_); }
  long long* value() const { return reinterpret_cast<long long*>(p_ + 8); }
  Report read() const {
    char buf[16];
    TROUPE_CUDA_CHECK(cudaMemcpy(buf, p_, 16, cudaMemcpyDeviceToHost));
    Report r;
    std::memcpy(&r.code, buf, sizeof(int));
    std::memcpy(&r.value, buf + 8, sizeof(long long));
    return r;
  }

 private:
  char* p_;
};

constexpr int kErrDivZero = 1;
constexpr int kErrNegPow = 2;
constexpr int kErrIndex = 3;

// ================================================================ copy / fill / where functors

template <typename U>
struct CopySameF {
  U* out;
  const U* in;
  __device__ void operator()(const int64_t* off) const { out[off[0]] = in[off[1]]; }
};

template <typename D, typename S>
struct CopyConvF {
  D* out;
  const S* in;
  __device__ void operator()(const int64_t* off) const { out[off[0]] = convert<D>(in[off[1]]); }
};

template <typename U>
struct FillF {
  U* out;
  U v;
  __device__ void operator()(const int64_t* off) const { out[off[0]] = v; }
};

template <typename U>
struct WhereF {
  U* out;
  const bool* cond;
  const U* a;
  const U* b;
  __device__ void operator()(const int64_t* off) const { out[off[0]] = cond[off[1]] ? a[off[2]] : b[off[3]]; }
};

// ================================================================ unary

constexpr double kSqrt1_2 = 0.70710678118654752440;
constexpr double kSqrt2OverPi = 0.79788456080286535588;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;

template <typename C>
__device__ C unary_float_op(UnaryOp op, C x, C a, C b) {
  switch (op) {
    case UnaryOp::Neg: return -x;
    case UnaryOp::Abs: return m_abs(x);
    case UnaryOp::Exp: return m_exp(x);
    case UnaryOp::Log: return m_log(x);
    case UnaryOp::Log1p: return m_log1p(x);
    case UnaryOp::Sqrt: return m_sqrt(x);
    case UnaryOp::Rsqrt: return C(1) / m_sqrt(x);
    case UnaryOp::Sin: return m_sin(x);
    case UnaryOp::Cos: return m_cos(x);
    case UnaryOp::Tanh: return m_tanh(x);
    case UnaryOp::Sigmoid: return C(1) / (C(1) + m_exp(-x));
    case UnaryOp::Relu: return x < C(0) ? C(0) : x;
    case UnaryOp::Gelu: return C(0.5) * x * (C(1) + m_erf(x * C(kSqrt1_2)));
    case UnaryOp::GeluTanh: {
      C inner = C(kSqrt2OverPi) * (x + C(0.044715) * x * x * x);
      return C(0.5) * x * (C(1) + m_tanh(inner));
    }
    case UnaryOp::Silu: return x / (C(1) + m_exp(-x));
    case UnaryOp::Sign: return x != x ? x : C((C(0) < x) - (x < C(0)));
    case UnaryOp::Reciprocal: return C(1) / x;
    case UnaryOp::Square: return x * x;
    case UnaryOp::Erf: return m_erf(x);
    case UnaryOp::Softplus: return x * a > b ? x : m_log1p(m_exp(x * a)) / a;
    case UnaryOp::LeakyRelu: return x > C(0) ? x : x * a;
    case UnaryOp::Elu: return x > C(0) ? x : a * (m_exp(x) - C(1));
    case UnaryOp::PowScalar:
      if (a == C(2)) return x * x;
      if (a == C(1)) return x;
      if (a == C(0.5)) return m_sqrt(x);
      if (a == C(3)) return x * x * x;
      if (a == C(-1)) return C(1) / x;
      if (a == C(-2)) return C(1) / (x * x);
      return m_pow(x, a);
    case UnaryOp::RPowScalar: return m_pow(a, x);
    case UnaryOp::Floor: return m_floor(x);
    case UnaryOp::Ceil: return m_ceil(x);
    case UnaryOp::Round: return m_rint(x);
    case UnaryOp::Trunc: return m_trunc(x);
    case UnaryOp::GeluGrad: {
      C cdf = C(0.5) * (C(1) + m_erf(x * C(kSqrt1_2)));
      C pdf = C(kInvSqrt2Pi) * m_exp(C(-0.5) * x * x);
      return cdf + x * pdf;
    }
    case UnaryOp::GeluTanhGrad: {
      C x3 = x * x * x;
      C inner = C(kSqrt2OverPi) * (x + C(0.044715) * x3);
      C t = m_tanh(inner);
      C left = C(0.5) * x, right = C(1) + t;
      C left_d = C(0.5) * right;
      C tanh_d = C(1) - t * t;
      C inner_d = C(kSqrt2OverPi) * (C(1) + C(3) * C(0.044715) * x * x);
      return left_d + left * tanh_d * inner_d;
    }
    case UnaryOp::SiluGrad: {
      C s = C(1) / (C(1) + m_exp(-x));
      return s * (C(1) + x * (C(1) - s));
    }
    case UnaryOp::SoftplusGrad: {
      C z = m_exp(x * a);
      return x * a > b ? C(1) : z / (z + C(1));
    }
    case UnaryOp::EluGrad: return x > C(0) ? C(1) : a * m_exp(x);
    default: return x;  // predicates are dispatched separately
  }
}

template <typename T>
struct UnaryFloatF {
  using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
  T* out;
  const T* in;
  UnaryOp op;
  C a, b;
  __device__ void operator()(const int64_t* off) const {
    out[off[0]] = store_as<T>(unary_float_op<C>(op, load_as<C>(in[off[1]]), a, b));
  }
};

template <typename T>
struct UnaryIntF {
  T* out;
  const T* in;
  UnaryOp op;
  int64_t e;  // PowScalar exponent (>= 0, checked on the host)
  __device__ void operator()(const int64_t* off) const {
    const T x = in[off[1]];
    T r = x;
    switch (op) {
      case UnaryOp::Neg: r = static_cast<T>(-x); break;
      case UnaryOp::Abs:
        if constexpr (std::is_signed_v<T>) r = static_cast<T>(x < 0 ? -x : x);
        break;
      case UnaryOp::Sign:
        if constexpr (std::is_signed_v<T>) r = static_cast<T>((T(0) < x) - (x < T(0)));
        else r = static_cast<T>(x != 0);
        break;
      case UnaryOp::Square: r = static_cast<T>(x * x); break;
      case UnaryOp::Relu:
        if constexpr (std::is_signed_v<T>) r = static_cast<T>(x < 0 ? 0 : x);
        break;
      case UnaryOp::PowScalar: {
        T acc = 1, base = x;
        for (int64_t k = e; k; k >>= 1) {
          if (k & 1) acc = static_cast<T>(acc * base);
          base = static_cast<T>(base * base);
        }
        r = acc;
        break;
      }
      default: break;  // Floor/Ceil/Round/Trunc: the identity
    }
    out[off[0]] = r;
  }
};

template <typename T>
struct PredicateF {
  bool* out;
  const T* in;
  UnaryOp op;
  __device__ void operator()(const int64_t* off) const {
    using C = std::conditional_t<is_16bit_v<T>, float, std::conditional_t<std::is_same_v<T, bool>, int, T>>;
    const C v = load_as<C>(in[off[1]]);
    bool r;
    switch (op) {
      case UnaryOp::LogicalNot: r = !(v != C(0)); break;
      case UnaryOp::IsNan: r = v != v; break;
      case UnaryOp::IsInf:
        if constexpr (std::is_floating_point_v<C>) r = ::isinf(v);
        else r = false;
        break;
      default:  // IsFinite
        if constexpr (std::is_floating_point_v<C>) r = ::isfinite(v);
        else r = true;
    }
    out[off[0]] = r;
  }
};

// ================================================================ binary

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

constexpr bool is_comparison(BinaryOp op) {
  return op == BinaryOp::Eq || op == BinaryOp::Ne || op == BinaryOp::Lt || op == BinaryOp::Le ||
         op == BinaryOp::Gt || op == BinaryOp::Ge || op == BinaryOp::LogicalAnd || op == BinaryOp::LogicalOr;
}

template <typename T>
struct BinaryF {
  using C = math_t<T>;
  void* out;  // T*, or bool* for comparisons
  const T* a;
  const T* b;
  BinaryOp op;
  C alpha;
  int* err;  // set for integer division by zero / negative integer powers (null for float dtypes)
  __device__ void operator()(const int64_t* off) const {
    const C x = load_as<C>(a[off[1]]), y = load_as<C>(b[off[2]]);
    bool c;
    switch (op) {
      case BinaryOp::Eq: c = x == y; break;
      case BinaryOp::Ne: c = x != y; break;
      case BinaryOp::Lt: c = x < y; break;
      case BinaryOp::Le: c = x <= y; break;
      case BinaryOp::Gt: c = x > y; break;
      case BinaryOp::Ge: c = x >= y; break;
      case BinaryOp::LogicalAnd: c = x != C(0) && y != C(0); break;
      case BinaryOp::LogicalOr: c = x != C(0) || y != C(0); break;
      default: {
        C r;
        switch (op) {
          case BinaryOp::Add: r = x + alpha * y; break;
          case BinaryOp::Sub: r = x - alpha * y; break;
          case BinaryOp::Mul: r = x * y; break;
          case BinaryOp::Div:
            if constexpr (std::is_integral_v<C>) {
              if (y == 0) {
                *err = kErrDivZero;
                r = 0;
              } else {
                r = x / y;  // floor division, as the CPU kernel
                if constexpr (std::is_signed_v<C>)
                  if ((x % y != 0) && ((x < 0) != (y < 0))) --r;
              }
            } else {
              r = x / y;
            }
            break;
          case BinaryOp::Pow:
            if constexpr (std::is_integral_v<C>) {
              r = 1;
              if constexpr (std::is_signed_v<C>) {
                if (y < 0) {
                  *err = kErrNegPow;
                  r = 0;
                  break;
                }
              }
              C base = x;
              for (C k = y; k; k >>= 1) {
                if (k & 1) r = static_cast<C>(r * base);
                base = static_cast<C>(base * base);
              }
            } else {
              r = m_pow(x, y);
            }
            break;
          case BinaryOp::Maximum: r = nan_max(x, y); break;
          case BinaryOp::Minimum: r = nan_min(x, y); break;
          case BinaryOp::ReluGrad: r = y > C(0) ? x : C(0); break;
          case BinaryOp::LeakyReluGrad: r = y > C(0) ? x : static_cast<C>(x * alpha); break;
          case BinaryOp::SigmoidGrad: r = x * y * (C(1) - y); break;
          case BinaryOp::TanhGrad: r = x * (C(1) - y * y); break;
          default: r = x; break;
        }
        static_cast<T*>(out)[off[0]] = store_as<T>(r);
        return;
      }
    }
    static_cast<bool*>(out)[off[0]] = c;
  }
};

// ================================================================ indexing

/// dst (+)= v for a 1- or 2-byte element, by compare-and-swap on the aligned 32-bit word holding it.
template <typename T, typename F>
__device__ void atomic_update_narrow(T* p, F update) {
  static_assert(sizeof(T) == 1 || sizeof(T) == 2, "narrow types only");
  const uintptr_t addr = reinterpret_cast<uintptr_t>(p);
  unsigned int* word = reinterpret_cast<unsigned int*>(addr & ~uintptr_t(3));
  const unsigned int shift = static_cast<unsigned int>(addr & 3) * 8;
  const unsigned int mask = (sizeof(T) == 1 ? 0xffu : 0xffffu) << shift;
  unsigned int old = *word, assumed;
  do {
    assumed = old;
    T cur;
    if constexpr (sizeof(T) == 1) {
      uint8_t b = static_cast<uint8_t>((assumed & mask) >> shift);
      memcpy(&cur, &b, 1);
    } else {
      uint16_t b = static_cast<uint16_t>((assumed & mask) >> shift);
      memcpy(&cur, &b, 2);
    }
    T next = update(cur);
    unsigned int bits;
    if constexpr (sizeof(T) == 1) {
      uint8_t b;
      memcpy(&b, &next, 1);
      bits = b;
    } else {
      uint16_t b;
      memcpy(&b, &next, 2);
      bits = b;
    }
    old = atomicCAS(word, assumed, (assumed & ~mask) | (bits << shift));
  } while (assumed != old);
}

/// The type index_add / scatter_add accumulate in (as the CPU: int64 for integers, float for 16-bit).
template <typename T> struct add_math { using type = math_t<T>; };
template <> struct add_math<uint8_t> { using type = int64_t; };
template <> struct add_math<int32_t> { using type = int64_t; };
template <> struct add_math<bool> { using type = bool; };
template <typename T> using add_math_t = typename add_math<T>::type;

/// *p += v atomically (bool: ||).
template <typename T>
__device__ __forceinline__ void atomic_accumulate(T* p, add_math_t<T> v) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    atomicAdd(p, v);
  } else if constexpr (std::is_same_v<T, int32_t>) {
    atomicAdd(reinterpret_cast<int*>(p), static_cast<int>(v));
  } else if constexpr (std::is_same_v<T, int64_t>) {
    atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
  } else if constexpr (std::is_same_v<T, bool>) {
    if (v) atomic_update_narrow(p, [](bool) { return true; });
  } else {
    atomic_update_narrow(p, [v](T cur) { return store_as<T>(load_as<add_math_t<T>>(cur) + v); });
  }
}

/// Reports an index outside [0, size) (the first one seen is kept; any one of them is a valid report).
__device__ __forceinline__ bool index_ok(int64_t j, int64_t size, int* code, long long* value) {
  if (static_cast<uint64_t>(j) < static_cast<uint64_t>(size)) return true;
  if (atomicCAS(code, 0, kErrIndex) == 0) *value = static_cast<long long>(j);
  return false;
}

/// gather / index_select: out[o0] = in[o1 + idx[o2] * in_dim_stride].
template <typename U>
struct GatherF {
  U* out;
  const U* in;
  const int64_t* idx;
  int64_t in_dim_stride, size;
  int* code;
  long long* value;
  __device__ void operator()(const int64_t* off) const {
    const int64_t j = idx[off[2]];
    if (index_ok(j, size, code, value)) out[off[0]] = in[off[1] + j * in_dim_stride];
  }
};

/// scatter: out[o0 + idx[o2] * out_dim_stride] = src[o1].
template <typename U>
struct ScatterF {
  U* out;
  const U* src;
  const int64_t* idx;
  int64_t out_dim_stride, size;
  int* code;
  long long* value;
  __device__ void operator()(const int64_t* off) const {
    const int64_t j = idx[off[2]];
    if (index_ok(j, size, code, value)) out[off[0] + j * out_dim_stride] = src[off[1]];
  }
};

/// scatter_add / index_add: out[o0 + idx[o2] * out_dim_stride] += alpha * src[o1], atomically.
template <typename T>
struct ScatterAddF {
  using C = add_math_t<T>;
  T* out;
  const T* src;
  const int64_t* idx;
  int64_t out_dim_stride, size;
  C alpha;
  bool unit;
  int* code;
  long long* value;
  __device__ void operator()(const int64_t* off) const {
    const int64_t j = idx[off[2]];
    if (!index_ok(j, size, code, value)) return;
    C v = load_as<C>(src[off[1]]);
    if constexpr (!std::is_same_v<C, bool>)
      if (!unit) v = v * alpha;
    atomic_accumulate<T>(out + off[0] + j * out_dim_stride, v);
  }
};

// ================================================================ convolution helpers

struct ConvGeom {
  int64_t N, C, H, W, kh, kw, sh, sw, ph, pw, dh, dw, oH, oW;
};

/// One thread per column element (n, (c, ki, kj), oh, ow): the image pixel it sees, or 0 in the padding.
template <typename U>
__global__ void __launch_bounds__(kThreads) im2col_kernel(ConvGeom g, const U* im, U* col) {
  const int64_t L = g.oH * g.oW, rows = g.C * g.kh * g.kw, total = g.N * rows * L;
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += step) {
    const int64_t ow = i % g.oW, oh = (i / g.oW) % g.oH, r = (i / L) % rows, n = i / (L * rows);
    const int64_t kj = r % g.kw, ki = (r / g.kw) % g.kh, c = r / (g.kw * g.kh);
    const int64_t ih = oh * g.sh - g.ph + ki * g.dh, iw = ow * g.sw - g.pw + kj * g.dw;
    col[i] = (ih >= 0 && ih < g.H && iw >= 0 && iw < g.W) ? im[((n * g.C + c) * g.H + ih) * g.W + iw] : U(0);
  }
}

/// One thread per image pixel (n, c, ih, iw): the sum of the column elements that saw it, in the CPU's
/// (ki, kj) order.
template <typename T>
__global__ void __launch_bounds__(kThreads) col2im_kernel(ConvGeom g, const T* col, T* im) {
  using A = math_t<T>;
  const int64_t L = g.oH * g.oW, rows = g.C * g.kh * g.kw, total = g.N * g.C * g.H * g.W;
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += step) {
    const int64_t iw = i % g.W, ih = (i / g.W) % g.H, c = (i / (g.W * g.H)) % g.C, n = i / (g.W * g.H * g.C);
    const T* cn = col + n * rows * L;
    A acc = A(0);
    for (int64_t ki = 0; ki < g.kh; ++ki) {
      const int64_t th = ih + g.ph - ki * g.dh;  // = oh * sh
      if (th < 0 || th % g.sh != 0) continue;
      const int64_t oh = th / g.sh;
      if (oh >= g.oH) continue;
      for (int64_t kj = 0; kj < g.kw; ++kj) {
        const int64_t tw = iw + g.pw - kj * g.dw;
        if (tw < 0 || tw % g.sw != 0) continue;
        const int64_t ow = tw / g.sw;
        if (ow >= g.oW) continue;
        acc += load_as<A>(cn[((c * g.kh + ki) * g.kw + kj) * L + oh * g.oW + ow]);
      }
    }
    im[i] = store_as<T>(acc);
  }
}

// ================================================================ reductions

template <typename T> struct acc_type { using type = int64_t; };  // bool and the integers
template <> struct acc_type<float> { using type = float; };
template <> struct acc_type<double> { using type = double; };
template <> struct acc_type<h16> { using type = float; };
template <> struct acc_type<b16> { using type = float; };
template <typename T> using acc_t = typename acc_type<T>::type;

/// The host dtype of an accumulator type.
template <typename A> constexpr ScalarType acc_dtype() {
  if constexpr (std::is_same_v<A, float>) return kFloat32;
  else if constexpr (std::is_same_v<A, double>) return kFloat64;
  else return kInt64;
}

// A reducer: V (value), init(), step(v, ix, element, j) for the j-th element in order, merge(v, ix, w, iw)
// (w may come from any index range), write(k, v, ix) for output k.

template <typename T>
struct SumProdR {
  using V = acc_t<T>;
  bool prod;
  T* out_same;  // out has the input's dtype, or
  V* out_acc;   // the accumulator's
  __device__ V init() const { return prod ? V(1) : V(0); }
  __device__ void step(V& v, int64_t&, T x, int64_t) const {
    V y = load_as<V>(x);
    v = prod ? v * y : v + y;
  }
  __device__ void merge(V& v, int64_t&, V w, int64_t) const { v = prod ? v * w : v + w; }
  __device__ void write(int64_t k, V v, int64_t) const {
    if (out_same) out_same[k] = store_as<T>(v);
    else out_acc[k] = v;
  }
};

template <typename V>
__device__ __forceinline__ bool better(bool is_max, V v, V best) {
  if constexpr (std::is_floating_point_v<V>) {
    bool nan_wins = (v != v) && (best == best);
    return (is_max ? (v > best) : (v < best)) || nan_wins;
  } else {
    return is_max ? (v > best) : (v < best);
  }
}

/// max/min with the index of the first extremum (NaN is larger and smaller than everything).
template <typename T>
struct ExtremumR {
  using V = math_t<T>;
  bool is_max;
  T* out;        // may be null (argmax/argmin)
  int64_t* idx;  // may be null (amax/amin)
  __device__ V init() const { return V(0); }
  __device__ void step(V& v, int64_t& ix, T x, int64_t j) const {
    V y = load_as<V>(x);
    if (ix < 0 || better(is_max, y, v)) {
      v = y;
      ix = j;
    }
  }
  __device__ void merge(V& v, int64_t& ix, V w, int64_t iw) const {
    if (iw < 0) return;
    if (ix < 0 || better(is_max, w, v) || (!better(is_max, v, w) && iw < ix)) {
      v = w;
      ix = iw;
    }
  }
  __device__ void write(int64_t k, V v, int64_t ix) const {
    if (out) out[k] = store_as<T>(v);
    if (idx) idx[k] = ix;
  }
};

template <typename T>
struct LogicalR {
  using V = bool;
  bool is_all;
  uint8_t* out;  // bool or uint8
  __device__ V init() const { return is_all; }
  __device__ void step(V& v, int64_t&, T x, int64_t) const {
    using C = std::conditional_t<is_16bit_v<T>, float, std::conditional_t<std::is_same_v<T, bool>, int, T>>;
    bool t = load_as<C>(x) != C(0);
    v = is_all ? (v && t) : (v || t);
  }
  __device__ void merge(V& v, int64_t&, V w, int64_t) const { v = is_all ? (v && w) : (v || w); }
  __device__ void write(int64_t k, V v, int64_t) const { out[k] = v ? 1 : 0; }
};

/// One thread per output (o, c) of (outer, r, inner): sequential over r (coalesced across c).
template <typename T, typename R>
__global__ void __launch_bounds__(kThreads)
    reduce_thread_kernel(const T* in, int64_t outer, int64_t r, int64_t inner, R red) {
  const int64_t nout = outer * inner;
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < nout; k += step) {
    const int64_t o = k / inner, c = k - o * inner;
    const T* p = in + o * r * inner + c;
    typename R::V v = red.init();
    int64_t ix = -1;
    for (int64_t j = 0; j < r; ++j) red.step(v, ix, p[j * inner], j);
    red.write(k, v, ix);
  }
}

/// One block per contiguous row (inner == 1): strided partials per thread, then a tree in shared memory.
template <typename T, typename R>
__global__ void __launch_bounds__(kThreads) reduce_block_kernel(const T* in, int64_t outer, int64_t r, R red) {
  using V = typename R::V;
  __shared__ V sv[kThreads];
  __shared__ int64_t si[kThreads];
  const int t = threadIdx.x;
  for (int64_t o = blockIdx.x; o < outer; o += gridDim.x) {
    const T* p = in + o * r;
    V v = red.init();
    int64_t ix = -1;
    for (int64_t j = t; j < r; j += kThreads) red.step(v, ix, p[j], j);
    sv[t] = v;
    si[t] = ix;
    __syncthreads();
    for (int s = kThreads / 2; s > 0; s >>= 1) {
      if (t < s) red.merge(sv[t], si[t], sv[t + s], si[t + s]);
      __syncthreads();
    }
    if (t == 0) red.write(o, sv[0], si[0]);
    __syncthreads();
  }
}

template <typename T, typename R>
void run_reduce(const R& red, const T* in, int64_t outer, int64_t r, int64_t inner) {
  const int64_t nout = outer * inner;
  if (nout == 0) return;
  if (inner == 1 && r >= 2 * kThreads) {
    unsigned blocks = static_cast<unsigned>(std::min<int64_t>(outer, int64_t(1) << 16));
    reduce_block_kernel<T, R><<<blocks, kThreads>>>(in, outer, r, red);
  } else {
    reduce_thread_kernel<T, R><<<grid_for(nout), kThreads>>>(in, outer, r, inner, red);
  }
  TROUPE_CUDA_CHECK(cudaGetLastError());
}

/// Cumulative sum along r of (outer, r, inner): one thread per (o, c). Accumulates as the CPU kernel
/// (double for float32, float for 16-bit floats, int64 for integers).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    cumsum_kernel(T* out, const T* in, int64_t outer, int64_t r, int64_t inner) {
  using A = std::conditional_t<std::is_same_v<T, float>, double, acc_t<T>>;
  const int64_t nout = outer * inner;
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < nout; k += step) {
    const int64_t o = k / inner, c = k - o * inner;
    const int64_t base = o * r * inner + c;
    A s = A(0);
    for (int64_t j = 0; j < r; ++j) {
      s += load_as<A>(in[base + j * inner]);
      out[base + j * inner] = store_as<T>(s);
    }
  }
}

const char* reduce_name(ReduceKind op) {
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

void check_geometry(const char* name, const Tensor& t, const char* what, int64_t numel) {
  if (!t.is_contiguous() || t.numel() != numel)
    throw std::invalid_argument(std::string("[reduce] ") + name + ": " + what + " must be contiguous with " +
                                std::to_string(numel) + " elements, got " + shape_str(t.sizes()) +
                                (t.is_contiguous() ? "" : " (not contiguous)"));
}

[[noreturn]] void bad_out(const char* op, const Tensor& in, const Tensor& out) {
  throw std::invalid_argument(std::string("[reduce] ") + op + " of " + dtype_name(in.dtype()) + " cannot write " +
                              dtype_name(out.dtype()) + " output");
}

template <typename T>
void reduce_typed(ReduceKind op, const Tensor& out, const Tensor& idx, const Tensor& in, int64_t outer, int64_t r,
                  int64_t inner) {
  const char* name = reduce_name(op);
  const T* ip = static_cast<const T*>(in.data_ptr());
  switch (op) {
    case ReduceKind::Sum:
    case ReduceKind::Prod: {
      using A = acc_t<T>;
      SumProdR<T> red{op == ReduceKind::Prod, nullptr, nullptr};
      if (out.dtype() == in.dtype()) red.out_same = ptr<T>(out);
      else if (out.dtype() == acc_dtype<A>()) red.out_acc = ptr<A>(out);
      else bad_out(name, in, out);
      run_reduce<T>(red, ip, outer, r, inner);
      return;
    }
    case ReduceKind::Max:
    case ReduceKind::Min:
    case ReduceKind::ArgMax:
    case ReduceKind::ArgMin: {
      if (r == 0)
        throw std::out_of_range(std::string("[") + name + "] Expected reduction dim to have non-zero size.");
      if (out.defined() && out.dtype() != in.dtype()) bad_out(name, in, out);
      ExtremumR<T> red{op == ReduceKind::Max || op == ReduceKind::ArgMax, out.defined() ? ptr<T>(out) : nullptr,
                       idx.defined() ? ptr<int64_t>(idx) : nullptr};
      run_reduce<T>(red, ip, outer, r, inner);
      return;
    }
    case ReduceKind::All:
    case ReduceKind::Any: {
      if (out.dtype() != kBool && out.dtype() != kUInt8) bad_out(name, in, out);
      LogicalR<T> red{op == ReduceKind::All, ptr<uint8_t>(out)};
      run_reduce<T>(red, ip, outer, r, inner);
      return;
    }
  }
}

// ================================================================ gemm helpers

/// How a 2-D strided matrix maps onto BLAS storage (see cpu/linalg_kernels.cpp): trans == false:
/// (i, j) at p[i*ld + j] (row-major); trans == true: (i, j) at p[j*ld + i] (column-major).
struct Layout {
  bool ok = false;
  bool trans = false;
  int64_t ld = 0;
};

Layout layout_of(int64_t rows, int64_t cols, int64_t rs, int64_t cs) {
  Layout l;
  if ((cols <= 1 || cs == 1) && (rows <= 1 || rs >= std::max<int64_t>(1, cols))) {
    l.ok = true;
    l.trans = false;
    l.ld = rows <= 1 ? std::max<int64_t>(1, cols) : rs;
    return l;
  }
  if ((rows <= 1 || rs == 1) && (cols <= 1 || cs >= std::max<int64_t>(1, rows))) {
    l.ok = true;
    l.trans = true;
    l.ld = cols <= 1 ? std::max<int64_t>(1, rows) : cs;
    return l;
  }
  return l;
}

Layout layout_of(const Tensor& t) { return layout_of(t.size(0), t.size(1), t.stride(0), t.stride(1)); }

int to_int(int64_t v, const char* what) {
  if (v > static_cast<int64_t>(INT_MAX))
    throw std::invalid_argument(std::string("[gemm] ") + what + " " + std::to_string(v) +
                                " is too large for cuBLAS (more than 2^31-1)");
  return static_cast<int>(v);
}

}  // namespace

// ================================================================ the backend

struct CudaBackend final : Backend {
  DeviceType type() const override { return kCUDA; }
  std::string name() const override { return "cuda"; }

  void* allocate(size_t nbytes, Device d) override {
    const int dev = resolve(d);  // throws when no device is available
    if (nbytes == 0) return nullptr;
    return allocator().allocate(nbytes, dev);
  }

  void deallocate(void* p, size_t, Device) override { allocator().deallocate(p); }

  void copy_between(const Tensor& dst, const Tensor& src) override {
    if (dst.dtype() != src.dtype())
      throw std::invalid_argument(std::string("[copy_between] dtypes differ: ") + dtype_name(dst.dtype()) + " and " +
                                  dtype_name(src.dtype()));
    if (!dst.sizes().equals(src.sizes()))
      throw std::invalid_argument("[copy_between] shapes differ: " + shape_str(dst.sizes()) + " and " +
                                  shape_str(src.sizes()));
    if (!dst.is_contiguous() || !src.is_contiguous())
      throw std::invalid_argument("[copy_between] both tensors must be contiguous");
    const size_t n = dst.nbytes();
    if (n == 0) return;
    void* d = dst.data_ptr();
    const void* s = src.data_ptr();
    if (src.is_cpu() && dst.is_cpu()) {
      std::memcpy(d, s, n);
    } else if (src.is_cpu()) {
      DeviceGuard g(resolve(dst.device()));
      TROUPE_CUDA_CHECK(cudaMemcpy(d, s, n, cudaMemcpyHostToDevice));
    } else if (dst.is_cpu()) {
      DeviceGuard g(resolve(src.device()));
      TROUPE_CUDA_CHECK(cudaMemcpy(d, s, n, cudaMemcpyDeviceToHost));
    } else {
      const int sd = resolve(src.device()), dd = resolve(dst.device());
      if (sd == dd) {
        DeviceGuard g(sd);
        TROUPE_CUDA_CHECK(cudaMemcpy(d, s, n, cudaMemcpyDeviceToDevice));
      } else {
        TROUPE_CUDA_CHECK(cudaMemcpyPeer(d, dd, s, sd, n));
      }
    }
  }

  void copy(const Tensor& dst, const Tensor& src) override {
    const int dev = common_device("copy", {&dst, &src});
    if (!dst.sizes().equals(src.sizes()))
      throw std::invalid_argument("[copy] shapes differ: " + shape_str(dst.sizes()) + " and " +
                                  shape_str(src.sizes()));
    if (dst.numel() == 0) return;
    DeviceGuard g(dev);
    if (dst.dtype() == src.dtype()) {
      if (dst.is_contiguous() && src.is_contiguous()) {
        if (dst.data_ptr() != src.data_ptr())
          TROUPE_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), dst.nbytes(), cudaMemcpyDeviceToDevice));
        return;
      }
      Geom<2> geo = make_geom<2>("copy", {&dst, &src});
      dispatch_size(dst.element_size(), [&](auto u) {
        using U = decltype(u);
        launch_elementwise(dst.numel(), geo, CopySameF<U>{ptr<U>(dst), ptr<U>(src)});
      });
      return;
    }
    Geom<2> geo = make_geom<2>("copy", {&dst, &src});
    dispatch_all(dst.dtype(), [&](auto dtag) {
      using D = dev_t<decltype(dtag)>;
      dispatch_all(src.dtype(), [&](auto stag) {
        using S = dev_t<decltype(stag)>;
        if constexpr (!std::is_same_v<D, S>)
          launch_elementwise(dst.numel(), geo, CopyConvF<D, S>{ptr<D>(dst), ptr<S>(src)});
      });
    });
  }

  void fill(const Tensor& dst, Scalar v) override {
    const int dev = common_device("fill", {&dst});
    if (dst.numel() == 0) return;
    DeviceGuard g(dev);
    // the value's bits, converted on the host exactly as the CPU fill converts it
    unsigned long long bits = 0;
    dispatch_all(dst.dtype(), [&](auto tag) {
      using T = decltype(tag);
      T value = v.to<T>();
      std::memcpy(&bits, &value, sizeof(T));
    });
    if (bits == 0 && dst.is_contiguous()) {
      TROUPE_CUDA_CHECK(cudaMemsetAsync(dst.data_ptr(), 0, dst.nbytes()));
      return;
    }
    Geom<1> geo = make_geom<1>("fill", {&dst});
    dispatch_size(dst.element_size(), [&](auto u) {
      using U = decltype(u);
      U value;
      std::memcpy(&value, &bits, sizeof(U));  // little-endian: the low bytes hold the value
      launch_elementwise(dst.numel(), geo, FillF<U>{ptr<U>(dst), value});
    });
  }

  void unary(UnaryOp op, const Tensor& out, const Tensor& in, double p0, double p1) override {
    const int dev = common_device("unary", {&out, &in});
    const bool predicate =
        op == UnaryOp::LogicalNot || op == UnaryOp::IsNan || op == UnaryOp::IsInf || op == UnaryOp::IsFinite;
    if (predicate) {
      if (out.dtype() != kBool)
        throw std::invalid_argument(std::string("[unary] predicate output must be bool, got ") +
                                    dtype_name(out.dtype()));
    } else if (out.dtype() != in.dtype()) {
      throw std::invalid_argument(std::string("[unary] input and output dtypes differ: ") + dtype_name(in.dtype()) +
                                  " and " + dtype_name(out.dtype()));
    }
    if (!predicate) {
      if (out.dtype() == kBool) bad_dtype("unary", kBool);
      if (is_integral(out.dtype())) {
        switch (op) {
          case UnaryOp::Neg: case UnaryOp::Abs: case UnaryOp::Sign: case UnaryOp::Square: case UnaryOp::Relu:
          case UnaryOp::Floor: case UnaryOp::Ceil: case UnaryOp::Round: case UnaryOp::Trunc:
            break;
          case UnaryOp::PowScalar:
            if (static_cast<int64_t>(p0) < 0)
              throw std::invalid_argument("[pow] Integers to negative integer powers are not allowed.");
            break;
          default:
            throw std::invalid_argument(std::string("[unary] op not implemented for integer dtype ") +
                                        dtype_name(out.dtype()));
        }
      }
    }
    if (out.numel() == 0) return;
    DeviceGuard g(dev);
    Geom<2> geo = make_geom<2>("unary", {&out, &in});
    const int64_t n = out.numel();
    if (predicate) {
      dispatch_all(in.dtype(), [&](auto tag) {
        using T = dev_t<decltype(tag)>;
        launch_elementwise(n, geo, PredicateF<T>{ptr<bool>(out), ptr<T>(in), op});
      });
      return;
    }
    switch (out.dtype()) {
      case kFloat32: return launch_elementwise(n, geo, UnaryFloatF<float>{ptr<float>(out), ptr<float>(in), op,
                                                                         static_cast<float>(p0), static_cast<float>(p1)});
      case kFloat64: return launch_elementwise(n, geo, UnaryFloatF<double>{ptr<double>(out), ptr<double>(in), op, p0, p1});
      case kFloat16: return launch_elementwise(n, geo, UnaryFloatF<h16>{ptr<h16>(out), ptr<h16>(in), op,
                                                                       static_cast<float>(p0), static_cast<float>(p1)});
      case kBFloat16: return launch_elementwise(n, geo, UnaryFloatF<b16>{ptr<b16>(out), ptr<b16>(in), op,
                                                                        static_cast<float>(p0), static_cast<float>(p1)});
      case kUInt8: return launch_elementwise(n, geo, UnaryIntF<uint8_t>{ptr<uint8_t>(out), ptr<uint8_t>(in), op,
                                                                       static_cast<int64_t>(p0)});
      case kInt32: return launch_elementwise(n, geo, UnaryIntF<int32_t>{ptr<int32_t>(out), ptr<int32_t>(in), op,
                                                                       static_cast<int64_t>(p0)});
      case kInt64: return launch_elementwise(n, geo, UnaryIntF<int64_t>{ptr<int64_t>(out), ptr<int64_t>(in), op,
                                                                       static_cast<int64_t>(p0)});
      case kBool: break;
    }
    bad_dtype("unary", out.dtype());
  }

  void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b, double alpha) override {
    const int dev = common_device("binary", {&out, &a, &b});
    if (a.dtype() != b.dtype())
      throw std::invalid_argument(std::string("[binary kernel] operand dtypes differ: ") + dtype_name(a.dtype()) +
                                  " and " + dtype_name(b.dtype()));
    const ScalarType want = is_comparison(op) ? kBool : a.dtype();
    if (out.dtype() != want)
      throw std::invalid_argument(std::string("[binary kernel] output dtype ") + dtype_name(out.dtype()) +
                                  " should be " + dtype_name(want));
    if (out.numel() == 0) return;
    DeviceGuard g(dev);
    Geom<3> geo = make_geom<3>("binary", {&out, &a, &b});
    const bool may_fail = !is_floating_point(a.dtype()) && (op == BinaryOp::Div || op == BinaryOp::Pow);
    std::unique_ptr<ErrorFlag> flag;
    if (may_fail) flag = std::make_unique<ErrorFlag>(dev);
    dispatch_all(a.dtype(), [&](auto tag) {
      using T = dev_t<decltype(tag)>;
      using C = math_t<T>;
      BinaryF<T> f{out.data_ptr(), ptr<T>(a), ptr<T>(b), op, static_cast<C>(alpha), flag ? flag->code() : nullptr};
      launch_elementwise(out.numel(), geo, f);
    });
    if (flag) {
      const int e = flag->read().code;
      if (e == kErrDivZero) throw std::domain_error("[div] ZeroDivisionError: integer division by zero");
      if (e == kErrNegPow) throw std::invalid_argument("[pow] Integers to negative integer powers are not allowed.");
    }
  }

  void where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) override {
    const int dev = common_device("where", {&out, &cond, &a, &b});
    if (cond.dtype() != kBool)
      throw std::invalid_argument(std::string("[where] condition must be bool, got ") + dtype_name(cond.dtype()));
    if (a.dtype() != out.dtype() || b.dtype() != out.dtype())
      throw std::invalid_argument(std::string("[where] operands must have the output's dtype ") +
                                  dtype_name(out.dtype()) + ", got " + dtype_name(a.dtype()) + " and " +
                                  dtype_name(b.dtype()));
    if (out.numel() == 0) return;
    DeviceGuard g(dev);
    Geom<4> geo = make_geom<4>("where", {&out, &cond, &a, &b});
    dispatch_size(out.element_size(), [&](auto u) {
      using U = decltype(u);
      launch_elementwise(out.numel(), geo, WhereF<U>{ptr<U>(out), ptr<bool>(cond), ptr<U>(a), ptr<U>(b)});
    });
  }

  void reduce(ReduceKind op, const Tensor& out, const Tensor& idx, const Tensor& in, int64_t outer, int64_t r,
              int64_t inner) override {
    const char* name = reduce_name(op);
    const int dev = common_device(name, {&out, &idx, &in});
    check_geometry(name, in, "input", outer * r * inner);
    const bool wants_idx = op == ReduceKind::ArgMax || op == ReduceKind::ArgMin;
    if (out.defined()) check_geometry(name, out, "output", outer * inner);
    else if (!wants_idx) throw std::invalid_argument(std::string("[reduce] ") + name + ": the output is undefined");
    if (idx.defined()) {
      check_geometry(name, idx, "indices", outer * inner);
      if (idx.dtype() != kInt64)
        throw std::invalid_argument(std::string("[reduce] ") + name + ": indices must be int64, got " +
                                    dtype_name(idx.dtype()));
    } else if (wants_idx) {
      throw std::invalid_argument(std::string("[reduce] ") + name + ": the indices are undefined");
    }
    DeviceGuard g(dev);
    dispatch_all(in.dtype(), [&](auto tag) {
      reduce_typed<dev_t<decltype(tag)>>(op, out, idx, in, outer, r, inner);
    });
  }

  void cumsum(const Tensor& out, const Tensor& in, int64_t outer, int64_t r, int64_t inner) override {
    const int dev = common_device("cumsum", {&out, &in});
    check_geometry("cumsum", in, "input", outer * r * inner);
    check_geometry("cumsum", out, "output", outer * r * inner);
    if (out.dtype() != in.dtype())
      throw std::invalid_argument(std::string("[cumsum] output dtype ") + dtype_name(out.dtype()) +
                                  " differs from the input's " + dtype_name(in.dtype()));
    if (out.numel() == 0) return;
    DeviceGuard g(dev);
    dispatch_all(in.dtype(), [&](auto tag) {
      using T = dev_t<decltype(tag)>;
      cumsum_kernel<T><<<grid_for(outer * inner), kThreads>>>(ptr<T>(out), ptr<T>(in), outer, r, inner);
      TROUPE_CUDA_CHECK(cudaGetLastError());
    });
  }

  // ---------------------------------------------------------------- indexing (index: int64, contiguous)

  void gather(const Tensor& out, const Tensor& in, int64_t dim, const Tensor& index) override {
    const int dev = common_device("gather", {&out, &in, &index});
    check_index("gather", index);
    if (!out.sizes().equals(index.sizes()))
      throw std::invalid_argument("[gather] output shape " + shape_str(out.sizes()) + " differs from the index's " +
                                  shape_str(index.sizes()));
    if (out.dtype() != in.dtype())
      throw std::invalid_argument(std::string("[gather] dtypes differ: ") + dtype_name(out.dtype()) + " and " +
                                  dtype_name(in.dtype()));
    if (out.numel() == 0) return;
    DeviceGuard g(dev);
    std::vector<int64_t> ist = in.strides().vec();
    if (dim < static_cast<int64_t>(ist.size())) ist[static_cast<size_t>(dim)] = 0;
    Geom<3> geo = make_geom_raw<3>("gather", index.sizes(), {out.strides().data(), ist.data(), index.strides().data()});
    ErrorFlag flag(dev);
    dispatch_size(out.element_size(), [&](auto u) {
      using U = decltype(u);
      launch_elementwise(index.numel(), geo,
                         GatherF<U>{ptr<U>(out), ptr<U>(in), ptr<int64_t>(index), dim_stride(in, dim),
                                    dim_size(in, dim), flag.code(), flag.value()});
    });
    check_flag("gather", flag, dim, dim_size(in, dim));
  }

  void index_select(const Tensor& out, const Tensor& in, int64_t dim, const Tensor& index) override {
    const int dev = common_device("index_select", {&out, &in, &index});
    check_index("index_select", index);
    if (out.dtype() != in.dtype())
      throw std::invalid_argument(std::string("[index_select] dtypes differ: ") + dtype_name(out.dtype()) + " and " +
                                  dtype_name(in.dtype()));
    if (out.numel() == 0) return;
    DeviceGuard g(dev);
    std::vector<int64_t> ist = in.strides().vec(), xst(out.sizes().size(), 0);
    if (dim < static_cast<int64_t>(ist.size())) {
      ist[static_cast<size_t>(dim)] = 0;
      xst[static_cast<size_t>(dim)] = 1;
    }
    Geom<3> geo = make_geom_raw<3>("index_select", out.sizes(), {out.strides().data(), ist.data(), xst.data()});
    ErrorFlag flag(dev);
    dispatch_size(out.element_size(), [&](auto u) {
      using U = decltype(u);
      launch_elementwise(out.numel(), geo,
                         GatherF<U>{ptr<U>(out), ptr<U>(in), ptr<int64_t>(index), dim_stride(in, dim),
                                    dim_size(in, dim), flag.code(), flag.value()});
    });
    check_flag("index_select", flag, dim, dim_size(in, dim));
  }

  void scatter(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src, bool accumulate) override {
    const char* name = accumulate ? "scatter_add" : "scatter";
    const int dev = common_device(name, {&out, &index, &src});
    check_index(name, index);
    if (out.dtype() != src.dtype())
      throw std::invalid_argument(std::string("[") + name + "] dtypes differ: " + dtype_name(out.dtype()) + " and " +
                                  dtype_name(src.dtype()));
    if (index.numel() == 0) return;
    DeviceGuard g(dev);
    std::vector<int64_t> ost = out.strides().vec();
    if (dim < static_cast<int64_t>(ost.size())) ost[static_cast<size_t>(dim)] = 0;
    Geom<3> geo = make_geom_raw<3>(name, index.sizes(), {ost.data(), src.strides().data(), index.strides().data()});
    ErrorFlag flag(dev);
    const int64_t os = dim_stride(out, dim), size = dim_size(out, dim);
    if (accumulate) {
      dispatch_all(out.dtype(), [&](auto tag) {
        using T = dev_t<decltype(tag)>;
        using C = add_math_t<T>;
        launch_elementwise(index.numel(), geo,
                           ScatterAddF<T>{ptr<T>(out), ptr<T>(src), ptr<int64_t>(index), os, size, C(1), true,
                                          flag.code(), flag.value()});
      });
    } else {
      dispatch_size(out.element_size(), [&](auto u) {
        using U = decltype(u);
        launch_elementwise(index.numel(), geo,
                           ScatterF<U>{ptr<U>(out), ptr<U>(src), ptr<int64_t>(index), os, size, flag.code(),
                                       flag.value()});
      });
    }
    check_flag(name, flag, dim, size);
  }

  void index_add(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src, double alpha) override {
    const int dev = common_device("index_add", {&out, &index, &src});
    check_index("index_add", index);
    if (out.dtype() != src.dtype())
      throw std::invalid_argument(std::string("[index_add] dtypes differ: ") + dtype_name(out.dtype()) + " and " +
                                  dtype_name(src.dtype()));
    if (index.numel() == 0 || src.numel() == 0) return;
    DeviceGuard g(dev);
    std::vector<int64_t> ost = out.strides().vec(), xst(src.sizes().size(), 0);
    if (dim < static_cast<int64_t>(ost.size())) {
      ost[static_cast<size_t>(dim)] = 0;
      xst[static_cast<size_t>(dim)] = 1;
    }
    Geom<3> geo = make_geom_raw<3>("index_add", src.sizes(), {ost.data(), src.strides().data(), xst.data()});
    ErrorFlag flag(dev);
    const int64_t os = dim_stride(out, dim), size = dim_size(out, dim);
    dispatch_all(out.dtype(), [&](auto tag) {
      using T = dev_t<decltype(tag)>;
      using C = add_math_t<T>;
      C a;
      if constexpr (std::is_same_v<C, bool>) a = true;
      else if constexpr (std::is_integral_v<C>) a = static_cast<C>(static_cast<int64_t>(alpha));
      else a = static_cast<C>(alpha);
      launch_elementwise(src.numel(), geo,
                         ScatterAddF<T>{ptr<T>(out), ptr<T>(src), ptr<int64_t>(index), os, size, a, alpha == 1,
                                        flag.code(), flag.value()});
    });
    check_flag("index_add", flag, dim, size);
  }

  // ---------------------------------------------------------------- convolution helpers (contiguous NCHW)

  void im2col(const Tensor& col, const Tensor& im, int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t ph,
              int64_t pw, int64_t dh, int64_t dw) override {
    const int dev = common_device("im2col", {&col, &im});
    ConvGeom g = conv_geometry("im2col", im, col, kh, kw, sh, sw, ph, pw, dh, dw);
    const int64_t total = col.numel();
    if (total == 0) return;
    DeviceGuard guard(dev);
    dispatch_size(im.element_size(), [&](auto u) {
      using U = decltype(u);
      im2col_kernel<U><<<grid_for(total), kThreads>>>(g, ptr<U>(im), ptr<U>(col));
      TROUPE_CUDA_CHECK(cudaGetLastError());
    });
  }

  void col2im(const Tensor& im, const Tensor& col, int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t ph,
              int64_t pw, int64_t dh, int64_t dw) override {
    const int dev = common_device("col2im", {&im, &col});
    ConvGeom g = conv_geometry("col2im", im, col, kh, kw, sh, sw, ph, pw, dh, dw);
    if (im.numel() == 0) return;
    if (im.dtype() == kBool) throw std::invalid_argument("[col2im] not implemented for dtype bool");
    DeviceGuard guard(dev);
    dispatch_all(im.dtype(), [&](auto tag) {
      using T = dev_t<decltype(tag)>;
      if constexpr (!std::is_same_v<T, bool>) {
        col2im_kernel<T><<<grid_for(im.numel()), kThreads>>>(g, ptr<T>(col), ptr<T>(im));
        TROUPE_CUDA_CHECK(cudaGetLastError());
      }
    });
  }

  // ---------------------------------------------------------------- random
  // Drawn by the CPU generator into a contiguous host tensor, then copied: the same seed gives the same
  // numbers as on the CPU (for a contiguous tensor), at the cost of a host round trip.

  void uniform(const Tensor& out, double from, double to) override {
    random_via_host(out, [&](const Tensor& h) { backend(kCPU).uniform(h, from, to); });
  }

  void normal(const Tensor& out, double mean, double std) override {
    random_via_host(out, [&](const Tensor& h) { backend(kCPU).normal(h, mean, std); });
  }

  void gemm(const Tensor& c, const Tensor& a, const Tensor& b, double alpha, double beta) override {
    if (c.dim() != 2 || a.dim() != 2 || b.dim() != 2)
      throw std::invalid_argument("[gemm] expected 2-D operands, got C " + shape_str(c.sizes()) + ", A " +
                                  shape_str(a.sizes()) + ", B " + shape_str(b.sizes()));
    const int64_t M = c.size(0), N = c.size(1), K = a.size(1);
    if (a.size(0) != M || b.size(0) != K || b.size(1) != N)
      throw std::invalid_argument("[gemm] shapes do not match: C " + shape_str(c.sizes()) + " = A " +
                                  shape_str(a.sizes()) + " @ B " + shape_str(b.sizes()));
    if (a.dtype() != c.dtype() || b.dtype() != c.dtype())
      throw std::invalid_argument(std::string("[gemm] operands must share one dtype, got C ") +
                                  dtype_name(c.dtype()) + ", A " + dtype_name(a.dtype()) + ", B " +
                                  dtype_name(b.dtype()));
    if (!is_floating_point(c.dtype()))
      throw std::invalid_argument(std::string("[gemm] not implemented for dtype ") + dtype_name(c.dtype()) +
                                  " on device cuda (cuBLAS multiplies floating-point matrices only)");
    const int dev = common_device("gemm", {&c, &a, &b});
    if (M == 0 || N == 0) return;
    DeviceGuard g(dev);
    if (K == 0) {
      scale_output(c, beta);
      return;
    }
    gemm_cublas(dev, c, a, b, alpha, beta);
  }

 private:
  static int64_t dim_size(const Tensor& t, int64_t dim) { return t.dim() == 0 ? 1 : t.size(dim); }
  static int64_t dim_stride(const Tensor& t, int64_t dim) { return t.dim() == 0 ? 0 : t.stride(dim); }

  static void check_index(const char* op, const Tensor& index) {
    if (index.dtype() != kInt64 || !index.is_contiguous())
      throw std::invalid_argument(std::string("[") + op +
                                  "] internal error: the index must be a contiguous int64 tensor");
  }

  /// Throws for an index a kernel found out of range (waits for the kernel).
  static void check_flag(const char* op, const ErrorFlag& flag, int64_t dim, int64_t size) {
    const ErrorFlag::Report r = flag.read();
    if (r.code == kErrIndex)
      throw std::out_of_range(std::string("[") + op + "] index " + std::to_string(r.value) +
                              " is out of bounds for dimension " + std::to_string(dim) + " with size " +
                              std::to_string(size));
  }

  static ConvGeom conv_geometry(const char* op, const Tensor& im, const Tensor& col, int64_t kh, int64_t kw,
                                int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh, int64_t dw) {
    if (im.dim() != 3 && im.dim() != 4)
      throw std::invalid_argument(std::string("[") + op + "] expected a (C, H, W) or (N, C, H, W) image, got shape " +
                                  shape_str(im.sizes()));
    if (!im.is_contiguous() || !col.is_contiguous())
      throw std::invalid_argument(std::string("[") + op + "] expected contiguous image and columns");
    if (im.dtype() != col.dtype())
      throw std::invalid_argument(std::string("[") + op + "] image and columns must share one dtype, got " +
                                  dtype_name(im.dtype()) + " and " + dtype_name(col.dtype()));
    if (sh <= 0 || sw <= 0 || dh <= 0 || dw <= 0)
      throw std::invalid_argument(std::string("[") + op + "] stride and dilation must be positive");
    ConvGeom g{};
    const int64_t d = im.dim();
    g.N = d == 4 ? im.size(0) : 1;
    g.C = im.size(d - 3);
    g.H = im.size(d - 2);
    g.W = im.size(d - 1);
    g.kh = kh, g.kw = kw, g.sh = sh, g.sw = sw, g.ph = ph, g.pw = pw, g.dh = dh, g.dw = dw;
    g.oH = (g.H + 2 * ph - dh * (kh - 1) - 1) / sh + 1;
    g.oW = (g.W + 2 * pw - dw * (kw - 1) - 1) / sw + 1;
    std::vector<int64_t> want;
    if (d == 4) want.push_back(im.size(0));
    want.push_back(g.C * kh * kw);
    want.push_back(g.oH * g.oW);
    if (!col.sizes().equals(want))
      throw std::invalid_argument(std::string("[") + op + "] columns have shape " + shape_str(col.sizes()) +
                                  ", expected " + shape_str(want) + " for image " + shape_str(im.sizes()));
    return g;
  }

  template <typename F>
  void random_via_host(const Tensor& out, F&& draw) {
    common_device("random", {&out});
    if (out.numel() == 0) return;
    Tensor host = empty(out.sizes(), TensorOptions().dtype(out.dtype()));
    draw(host);
    if (out.is_contiguous()) {
      copy_between(out, host);
    } else {
      Tensor tmp = empty(out.sizes(), TensorOptions().dtype(out.dtype()).device(out.device()));
      copy_between(tmp, host);
      copy(out, tmp);
    }
  }

  [[noreturn]] static void bad_dtype(const char* what, ScalarType t) {
    throw std::invalid_argument(std::string("[") + what + "] not implemented for dtype " + dtype_name(t));
  }

  /// A new contiguous copy of t on its device (kernel level: no autograd).
  Tensor contiguous_copy(const Tensor& t) {
    Tensor out = empty(t.sizes(), TensorOptions().dtype(t.dtype()).device(t.device()));
    copy(out, t);
    return out;
  }

  /// C = beta * C (a gemm with an empty inner dimension).
  void scale_output(const Tensor& c, double beta) {
    if (beta == 0) {
      fill(c, Scalar(0));
      return;
    }
    if (beta == 1) return;
    Tensor s = empty({}, TensorOptions().dtype(c.dtype()).device(c.device()));
    fill(s, Scalar(beta));
    Tensor tmp = contiguous_copy(c);
    binary(BinaryOp::Mul, c, tmp, s.expand(c.sizes()), 1.0);
  }

  /// C (M x N) = alpha * A (M x K) @ B (K x N) + beta * C through cuBLAS (column-major): a row-major C
  /// is the column-major C^T = B^T A^T, so the operands swap; strided operands without a BLAS layout
  /// are copied contiguous first.
  void gemm_cublas(int dev, const Tensor& c, const Tensor& a, const Tensor& b, double alpha, double beta) {
    const int64_t M = c.size(0), N = c.size(1), K = a.size(1);
    const Layout lc = layout_of(c);
    if (!lc.ok) {
      Tensor tmp = beta == 0 ? empty({M, N}, TensorOptions().dtype(c.dtype()).device(c.device())) : contiguous_copy(c);
      gemm_cublas(dev, tmp, a, b, alpha, beta);
      copy(c, tmp);
      return;
    }
    Tensor A = a, B = b;
    Layout la = layout_of(A), lb = layout_of(B);
    if (!la.ok) {
      A = contiguous_copy(a);
      la = layout_of(A);
    }
    if (!lb.ok) {
      B = contiguous_copy(b);
      lb = layout_of(B);
    }
    // column-major problem: C' (m x n) = op(X) (m x k) @ op(Y) (k x n)
    const void *X, *Y;
    cublasOperation_t opx, opy;
    int64_t m, n, ldx, ldy;
    if (!lc.trans) {  // C row-major: C^T = B^T A^T
      m = N, n = M;
      X = B.data_ptr(), ldx = lb.ld, opx = lb.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
      Y = A.data_ptr(), ldy = la.ld, opy = la.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
    } else {  // C column-major: C = A B
      m = M, n = N;
      X = A.data_ptr(), ldx = la.ld, opx = la.trans ? CUBLAS_OP_N : CUBLAS_OP_T;
      Y = B.data_ptr(), ldy = lb.ld, opy = lb.trans ? CUBLAS_OP_N : CUBLAS_OP_T;
    }
    const int im = to_int(m, "dimension"), in = to_int(n, "dimension"), ik = to_int(K, "dimension");
    const int ix = to_int(ldx, "leading dimension"), iy = to_int(ldy, "leading dimension"),
              ic = to_int(lc.ld, "leading dimension");
    cublasHandle_t h = cublas_handle(dev);
    void* C = c.data_ptr();
    switch (c.dtype()) {
      case kFloat32: {
        const float al = static_cast<float>(alpha), be = static_cast<float>(beta);
        TROUPE_CUBLAS_CHECK(cublasSgemm(h, opx, opy, im, in, ik, &al, static_cast<const float*>(X), ix,
                                        static_cast<const float*>(Y), iy, &be, static_cast<float*>(C), ic));
        return;
      }
      case kFloat64: {
        TROUPE_CUBLAS_CHECK(cublasDgemm(h, opx, opy, im, in, ik, &alpha, static_cast<const double*>(X), ix,
                                        static_cast<const double*>(Y), iy, &beta, static_cast<double*>(C), ic));
        return;
      }
      case kFloat16:
      case kBFloat16: {
        const cudaDataType_t dt = c.dtype() == kFloat16 ? CUDA_R_16F : CUDA_R_16BF;
        const float al = static_cast<float>(alpha), be = static_cast<float>(beta);
        TROUPE_CUBLAS_CHECK(cublasGemmEx(h, opx, opy, im, in, ik, &al, X, dt, ix, Y, dt, iy, &be, C, dt, ic,
                                         CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        return;
      }
      default: bad_dtype("gemm", c.dtype());
    }
  }
};

// ================================================================ entry points

void ensure_backend() {
  static const bool registered = [] {
    register_backend(new CudaBackend());  // never destroyed: tensors may die during static destruction
    return true;
  }();
  (void)registered;
}

bool is_available() {
  ensure_backend();
  return device_info().count > 0;
}

int device_count() {
  ensure_backend();
  return device_info().count;
}

void synchronize(int device) {
  const int dev = resolve(Device(kCUDA, device));
  DeviceGuard g(dev);
  TROUPE_CUDA_CHECK(cudaDeviceSynchronize());
}

int current_device() {
  require_device();
  int d = 0;
  TROUPE_CUDA_CHECK(cudaGetDevice(&d));
  return d;
}

void set_device(int device) {
  const int dev = resolve(Device(kCUDA, device < 0 ? 0 : device));
  TROUPE_CUDA_CHECK(cudaSetDevice(dev));
}

void empty_cache() {
  if (device_info().count <= 0) return;
  Allocator& a = allocator();
  std::lock_guard<std::mutex> g(a.mu);
  a.release_locked(-1);
}

size_t cached_bytes() {
  Allocator& a = allocator();
  std::lock_guard<std::mutex> g(a.mu);
  return a.cached;
}

size_t allocated_bytes() {
  Allocator& a = allocator();
  std::lock_guard<std::mutex> g(a.mu);
  return a.allocated;
}

}  // namespace cuda
}  // namespace troupe
