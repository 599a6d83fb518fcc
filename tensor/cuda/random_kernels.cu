// CUDA random fills: uniform and normal drawn by the CPU generator into a contiguous host tensor, then copied,
// so the same seed gives the same numbers as on the CPU (for a contiguous tensor), at the cost of a host
// round trip.
#include "cuda_common.cuh"

namespace troupe::cuda {

namespace {

template <typename F>
void random_via_host(CudaBackend& be, const Tensor& out, F&& draw) {
  common_device("random", {&out});
  if (out.numel() == 0) return;
  Tensor host = empty(out.sizes(), TensorOptions().dtype(out.dtype()));
  draw(host);
  if (out.is_contiguous()) {
    be.copy_between(out, host);
  } else {
    Tensor tmp = empty(out.sizes(), TensorOptions().dtype(out.dtype()).device(out.device()));
    be.copy_between(tmp, host);
    be.copy(out, tmp);
  }
}

}  // namespace

void CudaBackend::uniform(const Tensor& out, double from, double to) {
  random_via_host(*this, out, [&](const Tensor& h) { backend(kCPU).uniform(h, from, to); });
}

void CudaBackend::normal(const Tensor& out, double mean, double std) {
  random_via_host(*this, out, [&](const Tensor& h) { backend(kCPU).normal(h, mean, std); });
}

}  // namespace troupe::cuda
