// StorageImpl and the caching CPU allocator.
#include "storage.h"

#include <cstdlib>
#include <map>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "autograd.h"
#include "backend.h"

namespace troupe {

StorageImpl::StorageImpl(size_t n, Device d) : nbytes(n), device(d), inference(autograd::InferenceMode::is_enabled()) {
  data = backend(d.type).allocate(n, d);
}

StorageImpl::StorageImpl(void* p, size_t n, Device d, std::function<void(void*)> del)
    : data(p), nbytes(n), device(d), inference(autograd::InferenceMode::is_enabled()), deleter(std::move(del)) {
  if (!deleter) deleter = [](void*) {};  // borrowed memory: never freed by us
}

StorageImpl::~StorageImpl() {
  if (deleter) {
    deleter(data);
  } else if (data) {
    backend(device.type).deallocate(data, nbytes, device);
  }
}

namespace cpu_allocator {
namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kCache = false;  // let ASan see every use after free
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kCache = false;
#else
constexpr bool kCache = true;
#endif
#else
constexpr bool kCache = true;
#endif

constexpr size_t kAlign = 64;
constexpr size_t kMinCached = 1 << 16;      // blocks from 64 KiB up: the size-keyed cache below
constexpr size_t kMaxCached = size_t(1) << 31;  // total bytes the cache may hold
// Small blocks (below kMinCached, sizes rounded to kAlign) are kept in one free list per size: small
// tensors are created and dropped at every op, and aligned_alloc/free cost more than the op itself.
constexpr size_t kSmallClasses = kMinCached / kAlign;
constexpr size_t kSmallPerClass = 64;              // blocks kept per size
constexpr size_t kMaxSmallCached = size_t(64) << 20;  // total bytes of small blocks kept

struct Cache {
  std::mutex mu;
  std::multimap<size_t, void*> free_blocks;  // rounded size -> block
  size_t bytes = 0;
  std::vector<void*> small[kSmallClasses];  // small[n / kAlign - 1]: free blocks of n bytes
  size_t small_bytes = 0;
  ~Cache() {
    for (auto& [n, p] : free_blocks) std::free(p);
    for (auto& v : small)
      for (void* p : v) std::free(p);
  }
};

Cache& cache() {
  static Cache* c = new Cache();  // never destroyed: tensors may die during static destruction
  return *c;
}

size_t round_up(size_t n) {
  if (n < kMinCached) return (n + kAlign - 1) / kAlign * kAlign;
  // round large blocks to 1/8 of their power of two, so near sizes reuse one block
  size_t p = 1;
  while (p < n) p <<= 1;
  size_t step = p >> 3;
  return (n + step - 1) / step * step;
}

}  // namespace

void* allocate(size_t nbytes) {
  size_t n = round_up(nbytes == 0 ? kAlign : nbytes);
  if (kCache && n < kMinCached) {
    Cache& c = cache();
    std::lock_guard<std::mutex> g(c.mu);
    auto& v = c.small[n / kAlign - 1];
    if (!v.empty()) {
      void* p = v.back();
      v.pop_back();
      c.small_bytes -= n;
      return p;
    }
  } else if (kCache) {
    Cache& c = cache();
    std::lock_guard<std::mutex> g(c.mu);
    auto it = c.free_blocks.find(n);
    if (it != c.free_blocks.end()) {
      void* p = it->second;
      c.free_blocks.erase(it);
      c.bytes -= n;
      return p;
    }
  }
  void* p = std::aligned_alloc(kAlign, n);
  if (!p)
    throw std::runtime_error("[cpu_allocator] out of memory: could not allocate " + std::to_string(nbytes) +
                             " bytes");
  return p;
}

void deallocate(void* p, size_t nbytes) {
  if (!p) return;
  size_t n = round_up(nbytes == 0 ? kAlign : nbytes);
  if (kCache && n < kMinCached) {
    Cache& c = cache();
    std::lock_guard<std::mutex> g(c.mu);
    auto& v = c.small[n / kAlign - 1];
    if (v.size() < kSmallPerClass && c.small_bytes + n <= kMaxSmallCached) {
      try {
        v.push_back(p);  // grows to kSmallPerClass at most; on bad_alloc the block is freed below
        c.small_bytes += n;
        return;
      } catch (const std::bad_alloc&) {
      }
    }
  } else if (kCache) {
    Cache& c = cache();
    std::lock_guard<std::mutex> g(c.mu);
    if (c.bytes + n <= kMaxCached) {
      c.free_blocks.emplace(n, p);
      c.bytes += n;
      return;
    }
  }
  std::free(p);
}

void empty_cache() {
  Cache& c = cache();
  std::lock_guard<std::mutex> g(c.mu);
  for (auto& [n, p] : c.free_blocks) std::free(p);
  c.free_blocks.clear();
  c.bytes = 0;
  for (auto& v : c.small) {
    for (void* p : v) std::free(p);
    v.clear();
    v.shrink_to_fit();
  }
  c.small_bytes = 0;
}

size_t cached_bytes() {
  Cache& c = cache();
  std::lock_guard<std::mutex> g(c.mu);
  return c.bytes + c.small_bytes;
}

}  // namespace cpu_allocator
}  // namespace troupe
