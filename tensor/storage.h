// Storage: one allocation of bytes on a device, shared by every tensor that views it, and the CPU allocator.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "device.h"

namespace troupe {

/// Bytes on a device. Views share one StorageImpl; its version counter is bumped by every in-place
/// write so that autograd can detect a tensor changed after it was saved for backward.
struct StorageImpl {
  void* data = nullptr;
  size_t nbytes = 0;
  Device device;
  uint32_t version = 0;
  /// Allocated inside InferenceMode: every tensor on it is an inference tensor.
  bool inference = false;
  std::function<void(void*)> deleter;  // empty: memory from the device's allocator

  StorageImpl(size_t nbytes, Device device);  // allocates
  StorageImpl(void* data, size_t nbytes, Device device, std::function<void(void*)> deleter);  // adopts
  StorageImpl(const StorageImpl&) = delete;
  StorageImpl& operator=(const StorageImpl&) = delete;
  ~StorageImpl();
};

/// The CPU allocator: 64-byte aligned blocks. Freed blocks are cached by size (small ones in bounded
/// per-size free lists, large ones in a size-keyed cache), so a loop allocating the same shapes neither
/// calls malloc per op nor page-faults fresh memory every step.
namespace cpu_allocator {
void* allocate(size_t nbytes);
void deallocate(void* p, size_t nbytes);
/// Returns every cached block to the system.
void empty_cache();
/// Bytes currently held in the cache (not in use by any tensor).
size_t cached_bytes();
}  // namespace cpu_allocator

}  // namespace troupe
