// The CUDA backend's extra entry points (CUDA builds only: they exist when TROUPE_WITH_CUDA is defined).
// troupe::cuda::is_available() / device_count() are declared in backend.h and exist in every build.
//
// Execution model: every kernel, cuBLAS call and device-to-device copy runs on the legacy default stream
// of the tensor's device, so they run in issue order; copies to and from the CPU (cudaMemcpy) wait for
// the work before them. Memory comes from a per-device caching allocator: a freed block goes back to a
// cache keyed by its rounded size and is reused by the next allocation of that size; the cache is
// released when cudaMalloc runs out of memory, or by empty_cache().
#pragma once

#include <cstddef>

namespace troupe::cuda {

#ifdef TROUPE_WITH_CUDA
/// Waits until all work issued on `device` (-1: the current device) has finished.
void synchronize(int device = -1);
/// The current CUDA device (cudaGetDevice); throws when no device is available.
int current_device();
/// Makes `device` current for this host thread (cudaSetDevice).
void set_device(int device);
/// Frees every cached (unused) block of every device.
void empty_cache();
/// Bytes held by the cache (freed by tensors, not yet returned to CUDA), over all devices.
size_t cached_bytes();
/// Bytes currently handed out to live tensors, over all devices.
size_t allocated_bytes();
#endif

}  // namespace troupe::cuda
