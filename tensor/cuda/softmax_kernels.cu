// CUDA fused reductions (Backend::fuses): softmax / log_softmax forward and backward, and logsumexp, in one
// kernel each instead of the five or six elementwise and reduction kernels the ops compose otherwise. A
// contiguous row of kThreads elements or more gets a block (max, then sum of exps, reduced across the block
// with warp shuffles; the row stays in L1/L2 between its passes); shorter rows and strided slices (inner > 1)
// get a thread each. Accumulation in float for float32 and the 16-bit floats, double for float64; NaN and
// infinity as the CPU kernels (tensor/cpu/softmax_kernels.h): a NaN or +inf in a slice, or a slice of -inf
// only, makes the whole softmax slice NaN; logsumexp uses 0 as the shift where the max is infinite.
// Not yet split like the reductions: a long slice with few slices beside it (logsumexp of a whole large
// tensor, softmax along dim 0 of a (10^6, 4) tensor) runs on one block or a few threads.
#include "cuda_common.cuh"

#include <limits>

namespace troupe::cuda {

namespace {

template <typename T> using sacc_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <typename A>
__device__ __forceinline__ A neg_inf() {
  return -std::numeric_limits<A>::infinity();
}

/// Max (IsMax) or sum of v over the block; every thread gets the result. `sh` holds kThreads / 32 values.
template <bool IsMax, typename A>
__device__ __forceinline__ A block_all_reduce(A v, A* sh) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    const A w = __shfl_down_sync(0xffffffffu, v, off);
    v = IsMax ? nan_max(v, w) : v + w;
  }
  __syncthreads();  // the previous call's readers are done with sh
  if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;
  __syncthreads();
  A r = sh[0];
#pragma unroll
  for (int i = 1; i < kThreads / 32; ++i) r = IsMax ? nan_max(r, sh[i]) : r + sh[i];
  return r;
}

// Mode: 0 softmax, 1 log_softmax, 2 logsumexp (one value per slice).

/// One block per contiguous row of length r (inner == 1).
template <typename T, int Mode>
__global__ void __launch_bounds__(kThreads) softmax_rows_kernel(const T* x, T* y, int64_t rows, int64_t r) {
  using A = sacc_t<T>;
  __shared__ A sh[kThreads / 32];
  const int t = threadIdx.x;
  for (int64_t o = blockIdx.x; o < rows; o += gridDim.x) {
    const T* p = x + o * r;
    A m = neg_inf<A>();
    for (int64_t j = t; j < r; j += kThreads) m = nan_max(m, load_as<A>(p[j]));
    m = block_all_reduce<true>(m, sh);
    const A shift = (Mode == 2 && ::isinf(m)) ? A(0) : m;
    A s = 0;
    for (int64_t j = t; j < r; j += kThreads) s += m_exp(load_as<A>(p[j]) - shift);
    s = block_all_reduce<false>(s, sh);
    if constexpr (Mode == 2) {
      if (t == 0) y[o] = store_as<T>(m_log(s) + shift);
    } else if constexpr (Mode == 1) {
      const A ls = m_log(s);
      T* q = y + o * r;
      for (int64_t j = t; j < r; j += kThreads) q[j] = store_as<T>(load_as<A>(p[j]) - m - ls);
    } else {
      const A inv = A(1) / s;
      T* q = y + o * r;
      for (int64_t j = t; j < r; j += kThreads) q[j] = store_as<T>(m_exp(load_as<A>(p[j]) - m) * inv);
    }
  }
}

/// One thread per slice (o, c) of (outer, r, inner): three passes along r (coalesced across c when inner > 1).
template <typename T, int Mode>
__global__ void __launch_bounds__(kThreads)
    softmax_slices_kernel(const T* x, T* y, int64_t outer, int64_t r, int64_t inner) {
  using A = sacc_t<T>;
  const int64_t n = outer * inner;
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < n; k += step) {
    const int64_t o = k / inner, c = k - o * inner;
    const T* p = x + o * r * inner + c;
    A m = neg_inf<A>();
    for (int64_t j = 0; j < r; ++j) m = nan_max(m, load_as<A>(p[j * inner]));
    const A shift = (Mode == 2 && ::isinf(m)) ? A(0) : m;
    A s = 0;
    for (int64_t j = 0; j < r; ++j) s += m_exp(load_as<A>(p[j * inner]) - shift);
    if constexpr (Mode == 2) {
      y[k] = store_as<T>(m_log(s) + shift);
    } else if constexpr (Mode == 1) {
      const A ls = m_log(s);
      T* q = y + o * r * inner + c;
      for (int64_t j = 0; j < r; ++j) q[j * inner] = store_as<T>(load_as<A>(p[j * inner]) - m - ls);
    } else {
      const A inv = A(1) / s;
      T* q = y + o * r * inner + c;
      for (int64_t j = 0; j < r; ++j) q[j * inner] = store_as<T>(m_exp(load_as<A>(p[j * inner]) - m) * inv);
    }
  }
}

/// Backward along contiguous rows, one block per row: softmax gi = y * (g - sum(g * y)), log_softmax
/// gi = g - exp(y) * sum(g).
template <typename T, bool Log>
__global__ void __launch_bounds__(kThreads)
    softmax_bwd_rows_kernel(const T* g, const T* y, T* gi, int64_t rows, int64_t r) {
  using A = sacc_t<T>;
  __shared__ A sh[kThreads / 32];
  const int t = threadIdx.x;
  for (int64_t o = blockIdx.x; o < rows; o += gridDim.x) {
    const T* gp = g + o * r;
    const T* yp = y + o * r;
    T* q = gi + o * r;
    A s = 0;
    for (int64_t j = t; j < r; j += kThreads) s += Log ? load_as<A>(gp[j]) : load_as<A>(gp[j]) * load_as<A>(yp[j]);
    s = block_all_reduce<false>(s, sh);
    for (int64_t j = t; j < r; j += kThreads) {
      const A gv = load_as<A>(gp[j]), yv = load_as<A>(yp[j]);
      q[j] = store_as<T>(Log ? gv - m_exp(yv) * s : yv * (gv - s));
    }
  }
}

/// The same backward, one thread per (short) row.
template <typename T, bool Log>
__global__ void __launch_bounds__(kThreads)
    softmax_bwd_short_kernel(const T* g, const T* y, T* gi, int64_t rows, int64_t r) {
  using A = sacc_t<T>;
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t o = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; o < rows; o += step) {
    const T* gp = g + o * r;
    const T* yp = y + o * r;
    T* q = gi + o * r;
    A s = 0;
    for (int64_t j = 0; j < r; ++j) s += Log ? load_as<A>(gp[j]) : load_as<A>(gp[j]) * load_as<A>(yp[j]);
    for (int64_t j = 0; j < r; ++j) {
      const A gv = load_as<A>(gp[j]), yv = load_as<A>(yp[j]);
      q[j] = store_as<T>(Log ? gv - m_exp(yv) * s : yv * (gv - s));
    }
  }
}

unsigned row_blocks(int64_t rows) { return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(rows, 65535))); }

/// Calls f(T{}) for the floating dtypes (device element types).
template <typename F>
void dispatch_floating(const char* op, ScalarType t, F&& f) {
  switch (t) {
    case kFloat32: f(float{}); return;
    case kFloat64: f(double{}); return;
    case kFloat16: f(h16{}); return;
    case kBFloat16: f(b16{}); return;
    default: bad_dtype(op, t);
  }
}

void check_same(const char* op, const Tensor& a, const char* what, const Tensor& in) {
  if (!a.is_contiguous() || a.dtype() != in.dtype())
    throw std::invalid_argument(std::string("[") + op + "] " + what + " must be contiguous " +
                                dtype_name(in.dtype()) + ", got " + dtype_name(a.dtype()) +
                                (a.is_contiguous() ? "" : " (not contiguous)"));
}

template <int Mode>
void softmax_family(const char* op, const Tensor& out, const Tensor& in, int64_t outer, int64_t r, int64_t inner) {
  const int dev = common_device(op, {&out, &in});
  if (!is_floating_point(in.dtype())) bad_dtype(op, in.dtype());
  check_same(op, in, "the input", in);
  check_same(op, out, "the output", in);
  const int64_t want_out = Mode == 2 ? outer * inner : outer * r * inner;
  if (in.numel() != outer * r * inner || out.numel() != want_out)
    throw std::invalid_argument(std::string("[") + op + "] expected " + std::to_string(outer * r * inner) +
                                " input and " + std::to_string(want_out) + " output elements, got " +
                                std::to_string(in.numel()) + " and " + std::to_string(out.numel()));
  if (outer * inner == 0) return;
  if (r == 0 && Mode != 2) return;
  DeviceGuard g(dev);
  dispatch_floating(op, in.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* x = ptr<T>(in);
    T* y = ptr<T>(out);
    if (inner == 1 && r >= kThreads) softmax_rows_kernel<T, Mode><<<row_blocks(outer), kThreads>>>(x, y, outer, r);
    else softmax_slices_kernel<T, Mode><<<grid_for(outer * inner), kThreads>>>(x, y, outer, r, inner);
    TROUPE_CUDA_CHECK(cudaGetLastError());
  });
}

}  // namespace

bool CudaBackend::fuses(FusedKernel k) const {
  return k == FusedKernel::Softmax || k == FusedKernel::LogSumExp || k == FusedKernel::AdamStep;
}

void CudaBackend::softmax(const Tensor& out, const Tensor& in, int64_t outer, int64_t r, int64_t inner, bool log) {
  if (log) softmax_family<1>("log_softmax", out, in, outer, r, inner);
  else softmax_family<0>("softmax", out, in, outer, r, inner);
}

void CudaBackend::logsumexp(const Tensor& out, const Tensor& in, int64_t outer, int64_t r, int64_t inner) {
  softmax_family<2>("logsumexp", out, in, outer, r, inner);
}

void CudaBackend::softmax_backward(const Tensor& grad_in, const Tensor& grad_out, const Tensor& out, int64_t rows,
                                   int64_t r, bool log) {
  const char* op = log ? "log_softmax" : "softmax";
  const int dev = common_device(op, {&grad_in, &grad_out, &out});
  if (!is_floating_point(out.dtype())) bad_dtype(op, out.dtype());
  check_same(op, grad_out, "the output's gradient", out);
  check_same(op, grad_in, "the input's gradient", out);
  if (out.numel() != rows * r || grad_out.numel() != rows * r || grad_in.numel() != rows * r)
    throw std::invalid_argument(std::string("[") + op + "] backward: expected " + std::to_string(rows * r) +
                                " elements in the gradients and the output, got " + std::to_string(grad_in.numel()) +
                                ", " + std::to_string(grad_out.numel()) + " and " + std::to_string(out.numel()));
  if (rows * r == 0) return;
  DeviceGuard g(dev);
  dispatch_floating(op, out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* gp = ptr<T>(grad_out);
    const T* yp = ptr<T>(out);
    T* q = ptr<T>(grad_in);
    if (r >= kThreads) {
      if (log) softmax_bwd_rows_kernel<T, true><<<row_blocks(rows), kThreads>>>(gp, yp, q, rows, r);
      else softmax_bwd_rows_kernel<T, false><<<row_blocks(rows), kThreads>>>(gp, yp, q, rows, r);
    } else {
      if (log) softmax_bwd_short_kernel<T, true><<<grid_for(rows), kThreads>>>(gp, yp, q, rows, r);
      else softmax_bwd_short_kernel<T, false><<<grid_for(rows), kThreads>>>(gp, yp, q, rows, r);
    }
    TROUPE_CUDA_CHECK(cudaGetLastError());
  });
}

}  // namespace troupe::cuda
