// The CUDA backend's core: CUDA error checks, devices, the per-device caching allocator, cuBLAS handles, the
// kernel error flag, copies (host <-> device, device <-> device, strided with dtype conversion) and fill, and
// the entry points of cuda_backend.h and backend.h (ensure_backend, is_available, ...). The kernel families
// are in elementwise_kernels.cu, reduce_kernels.cu, index_kernels.cu, linalg_kernels.cu, random_kernels.cu.
// The design notes (streams, geometry, reductions, index checks, errors) are at the top of cuda_common.cuh.
#include <map>
#include <mutex>
#include <unordered_map>

#include "../storage.h"
#include "cuda_backend.h"
#include "cuda_common.cuh"

namespace troupe::cuda {

// ================================================================ error checking

[[noreturn]] void throw_cuda(cudaError_t e, const char* expr, const char* file, int line) {
  (void)cudaGetLastError();  // clear a non-sticky error so that it does not resurface in the next check
  throw std::runtime_error(std::string("[cuda] ") + cudaGetErrorName(e) + ": " + cudaGetErrorString(e) + " (in " +
                           expr + " at " + file + ":" + std::to_string(line) + ")");
}

// ================================================================ devices

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
    throw std::out_of_range("[cuda] device index " + std::to_string(d.index()) + " is out of range: " +
                            std::to_string(device_info().count) + " CUDA device(s) available");
  return d.index();
}

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

namespace {

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

}  // namespace

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

// ================================================================ error flag

ErrorFlag::ErrorFlag(int dev) : p_(static_cast<char*>(allocator().allocate(16, dev))) {
  TROUPE_CUDA_CHECK(cudaMemsetAsync(p_, 0, 16));
}

ErrorFlag::~ErrorFlag() { allocator().deallocate(p_); }

ErrorFlag::Report ErrorFlag::read() const {
  char buf[16];
  TROUPE_CUDA_CHECK(cudaMemcpy(buf, p_, 16, cudaMemcpyDeviceToHost));
  Report r;
  std::memcpy(&r.code, buf, sizeof(int));
  std::memcpy(&r.value, buf + 8, sizeof(long long));
  return r;
}

// ================================================================ scratch

Scratch::Scratch(size_t nbytes, int dev) : p_(allocator().allocate(std::max<size_t>(nbytes, 1), dev)) {}

Scratch::~Scratch() { allocator().deallocate(p_); }

// ================================================================ memory, copies, fill

void* CudaBackend::allocate(size_t nbytes, Device d) {
  const int dev = resolve(d);  // throws when no device is available
  if (nbytes == 0) return nullptr;
  return allocator().allocate(nbytes, dev);
}

void CudaBackend::deallocate(void* p, size_t, Device) { allocator().deallocate(p); }

void CudaBackend::copy_between(const Tensor& dst, const Tensor& src) {
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

void CudaBackend::copy(const Tensor& dst, const Tensor& src) {
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

void CudaBackend::fill(const Tensor& dst, Scalar v) {
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


}  // namespace troupe::cuda
