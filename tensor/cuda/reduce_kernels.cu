// CUDA reduction kernels: sum/prod, max/min/argmax/argmin and all/any of a contiguous (outer, r, inner) tensor
// along r (one thread per output, or one block per output row when inner == 1 and r is large; split over
// chunks of r with a second merging pass when the outputs are too few to fill the device), and cumsum.
#include "cuda_common.cuh"

namespace troupe::cuda {

namespace {

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

/// Merges every thread's (v, ix) of the block into sv[0], si[0] (a tree in shared memory, kThreads
/// entries each); all threads of the block call it.
template <typename R>
__device__ __forceinline__ void block_merge(const R& red, typename R::V* sv, int64_t* si, typename R::V v, int64_t ix) {
  const int t = threadIdx.x;
  sv[t] = v;
  si[t] = ix;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (t < s) red.merge(sv[t], si[t], sv[t + s], si[t + s]);
    __syncthreads();
  }
}

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
    block_merge(red, sv, si, v, ix);
    if (t == 0) red.write(o, sv[0], si[0]);
    __syncthreads();
  }
}

/// Pass 1 of a split contiguous row (inner == 1): block k = (o, b) reduces p[b * clen, (b + 1) * clen) of
/// row o, strided over its threads and then a tree, into the partial (pv, pi)[k].
template <typename T, typename R>
__global__ void __launch_bounds__(kThreads) reduce_chunk_kernel(const T* in, int64_t outer, int64_t r, int64_t chunks,
                                                                int64_t clen, typename R::V* pv, int64_t* pi, R red) {
  using V = typename R::V;
  __shared__ V sv[kThreads];
  __shared__ int64_t si[kThreads];
  const int t = threadIdx.x;
  for (int64_t k = blockIdx.x; k < outer * chunks; k += gridDim.x) {
    const int64_t o = k / chunks, b = k - o * chunks;
    const int64_t j0 = b * clen, j1 = std::min(r, j0 + clen);
    const T* p = in + o * r;
    V v = red.init();
    int64_t ix = -1;
    for (int64_t j = j0 + t; j < j1; j += kThreads) red.step(v, ix, p[j], j);
    block_merge(red, sv, si, v, ix);
    if (t == 0) {
      pv[k] = sv[0];
      pi[k] = si[0];
    }
    __syncthreads();
  }
}

/// Pass 2 of a split contiguous row: one block per row merges its `chunks` partials and writes the output.
template <typename R>
__global__ void __launch_bounds__(kThreads) reduce_partials_kernel(const typename R::V* pv, const int64_t* pi,
                                                                   int64_t outer, int64_t chunks, R red) {
  using V = typename R::V;
  __shared__ V sv[kThreads];
  __shared__ int64_t si[kThreads];
  const int t = threadIdx.x;
  for (int64_t o = blockIdx.x; o < outer; o += gridDim.x) {
    V v = red.init();
    int64_t ix = -1;
    for (int64_t b = t; b < chunks; b += kThreads) red.merge(v, ix, pv[o * chunks + b], pi[o * chunks + b]);
    block_merge(red, sv, si, v, ix);
    if (t == 0) red.write(o, sv[0], si[0]);
    __syncthreads();
  }
}

/// Pass 1 of a split strided reduction (inner > 1): thread (o, b, c) reduces rows [b * clen, (b + 1) * clen)
/// of column c (coalesced across c) into the partial (pv, pi)[(o * chunks + b) * inner + c].
template <typename T, typename R>
__global__ void __launch_bounds__(kThreads)
    reduce_cols_chunk_kernel(const T* in, int64_t outer, int64_t r, int64_t inner, int64_t chunks, int64_t clen,
                             typename R::V* pv, int64_t* pi, R red) {
  const int64_t n = outer * chunks * inner;
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < n; k += step) {
    const int64_t ob = k / inner, c = k - ob * inner;
    const int64_t o = ob / chunks, b = ob - o * chunks;
    const int64_t j0 = b * clen, j1 = std::min(r, j0 + clen);
    const T* p = in + o * r * inner + c;
    typename R::V v = red.init();
    int64_t ix = -1;
    for (int64_t j = j0; j < j1; ++j) red.step(v, ix, p[j * inner], j);
    pv[k] = v;
    pi[k] = ix;
  }
}

/// Pass 2 of a split strided reduction: thread (o, c) merges its column's `chunks` partials in order.
template <typename R>
__global__ void __launch_bounds__(kThreads) reduce_cols_partials_kernel(const typename R::V* pv, const int64_t* pi,
                                                                        int64_t outer, int64_t chunks, int64_t inner,
                                                                        R red) {
  const int64_t nout = outer * inner;
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < nout; k += step) {
    const int64_t o = k / inner, c = k - o * inner;
    typename R::V v = red.init();
    int64_t ix = -1;
    for (int64_t b = 0; b < chunks; ++b) {
      const int64_t q = (o * chunks + b) * inner + c;
      red.merge(v, ix, pv[q], pi[q]);
    }
    red.write(k, v, ix);
  }
}

// How a reduction of (outer, r, inner) along r is spread over the device (an H200 has 132 SMs of 2,048
// threads): a contiguous row (inner == 1) of 512 elements or more gets a block; when there are too few rows
// to fill the device, each row is split into chunks of at least kChunkElems elements, one block each, whose
// partials a second kernel merges (kTargetBlocks blocks in all). Strided reductions (inner > 1) give each
// output a thread; when the outputs are too few (outer * inner below kTargetThreads / 2), r is split the same
// way, one thread per (output, chunk) of at least kMinChunkRows rows.
constexpr int64_t kTargetBlocks = 1024;
constexpr int64_t kChunkElems = int64_t(kThreads) * 16;
constexpr int64_t kTargetThreads = int64_t(1) << 18;
constexpr int64_t kMinChunkRows = 32;

/// Chunks of r: at most `most`, each at least `least` long (1: not worth splitting). Sets clen.
int64_t split_r(int64_t r, int64_t least, int64_t most, int64_t& clen) {
  int64_t chunks = std::min(r / least, most);
  if (chunks < 2) return 1;
  clen = (r + chunks - 1) / chunks;
  return (r + clen - 1) / clen;
}

template <typename T, typename R>
void run_reduce(const R& red, const T* in, int64_t outer, int64_t r, int64_t inner, int dev) {
  using V = typename R::V;
  const int64_t nout = outer * inner;
  if (nout == 0) return;
  int64_t clen = r, chunks = 1;
  if (inner == 1 && r >= 2 * kThreads) {
    chunks = split_r(r, kChunkElems, std::max<int64_t>(1, kTargetBlocks / outer), clen);
    if (chunks == 1) {
      unsigned blocks = static_cast<unsigned>(std::min<int64_t>(outer, int64_t(1) << 16));
      reduce_block_kernel<T, R><<<blocks, kThreads>>>(in, outer, r, red);
    } else {
      const int64_t np = outer * chunks;
      Scratch scratch(static_cast<size_t>(np) * (sizeof(V) + sizeof(int64_t)), dev);
      int64_t* pi = scratch.as<int64_t>();
      V* pv = scratch.as<V>(static_cast<size_t>(np) * sizeof(int64_t));
      reduce_chunk_kernel<T, R><<<static_cast<unsigned>(std::min<int64_t>(np, int64_t(1) << 16)), kThreads>>>(
          in, outer, r, chunks, clen, pv, pi, red);
      TROUPE_CUDA_CHECK(cudaGetLastError());
      reduce_partials_kernel<R><<<static_cast<unsigned>(std::min<int64_t>(outer, int64_t(1) << 16)), kThreads>>>(
          pv, pi, outer, chunks, red);
    }
  } else {
    if (nout * 2 <= kTargetThreads) chunks = split_r(r, kMinChunkRows, kTargetThreads / nout, clen);
    if (chunks == 1) {
      reduce_thread_kernel<T, R><<<grid_for(nout), kThreads>>>(in, outer, r, inner, red);
    } else {
      const int64_t np = nout * chunks;
      Scratch scratch(static_cast<size_t>(np) * (sizeof(V) + sizeof(int64_t)), dev);
      int64_t* pi = scratch.as<int64_t>();
      V* pv = scratch.as<V>(static_cast<size_t>(np) * sizeof(int64_t));
      reduce_cols_chunk_kernel<T, R><<<grid_for(np), kThreads>>>(in, outer, r, inner, chunks, clen, pv, pi, red);
      TROUPE_CUDA_CHECK(cudaGetLastError());
      reduce_cols_partials_kernel<R><<<grid_for(nout), kThreads>>>(pv, pi, outer, chunks, inner, red);
    }
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
                  int64_t inner, int dev) {
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
      run_reduce<T>(red, ip, outer, r, inner, dev);
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
      run_reduce<T>(red, ip, outer, r, inner, dev);
      return;
    }
    case ReduceKind::All:
    case ReduceKind::Any: {
      if (out.dtype() != kBool && out.dtype() != kUInt8) bad_out(name, in, out);
      LogicalR<T> red{op == ReduceKind::All, ptr<uint8_t>(out)};
      run_reduce<T>(red, ip, outer, r, inner, dev);
      return;
    }
  }
}

}  // namespace

void CudaBackend::reduce(ReduceKind op, const Tensor& out, const Tensor& idx, const Tensor& in, int64_t outer, int64_t r,
            int64_t inner) {
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
    reduce_typed<dev_t<decltype(tag)>>(op, out, idx, in, outer, r, inner, dev);
  });
}

void CudaBackend::cumsum(const Tensor& out, const Tensor& in, int64_t outer, int64_t r, int64_t inner) {
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

}  // namespace troupe::cuda
