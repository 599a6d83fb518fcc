// CUDA indexing kernels: gather, index_select, scatter/scatter_add and index_add. Every index is bounds-checked
// on the device and the first bad one reported after the kernel (one synchronisation per call);
// scatter_add/index_add accumulate with atomics (compare-and-swap on the enclosing 32-bit word for 1- and
// 2-byte types), so float sums may vary in the last bits.
#include "cuda_common.cuh"

namespace troupe::cuda {

namespace {

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

int64_t dim_size(const Tensor& t, int64_t dim) { return t.dim() == 0 ? 1 : t.size(dim); }
int64_t dim_stride(const Tensor& t, int64_t dim) { return t.dim() == 0 ? 0 : t.stride(dim); }

void check_index(const char* op, const Tensor& index) {
  if (index.dtype() != kInt64 || !index.is_contiguous())
    throw std::invalid_argument(std::string("[") + op +
                                "] internal error: the index must be a contiguous int64 tensor");
}

/// Throws for an index a kernel found out of range (waits for the kernel).
void check_flag(const char* op, const ErrorFlag& flag, int64_t dim, int64_t size) {
  const ErrorFlag::Report r = flag.read();
  if (r.code == kErrIndex)
    throw std::out_of_range(std::string("[") + op + "] index " + std::to_string(r.value) +
                            " is out of bounds for dimension " + std::to_string(dim) + " with size " +
                            std::to_string(size));
}

}  // namespace

void CudaBackend::gather(const Tensor& out, const Tensor& in, int64_t dim, const Tensor& index) {
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

void CudaBackend::index_select(const Tensor& out, const Tensor& in, int64_t dim, const Tensor& index) {
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

void CudaBackend::scatter(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src, bool accumulate) {
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

void CudaBackend::index_add(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src, double alpha) {
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

}  // namespace troupe::cuda
