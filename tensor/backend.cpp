// The backend registry, the defaults a backend inherits, and the CUDA entry points of a CPU-only build.
#include "backend.h"

#include <cstring>
#include <mutex>
#include <stdexcept>

#include "cpu/cpu_backend.h"

namespace troupe {

namespace {
Backend*& slot(DeviceType t) {
  static Backend* table[kNumDeviceTypes] = {nullptr, nullptr};
  return table[static_cast<int>(t)];
}
}  // namespace

Backend& backend(DeviceType t) {
  if (t == kCPU) {
    // always present, usable during static initialisation, and never destroyed: tensors may die
    // during static destruction and free their memory through it
    static auto* cpu_backend = new cpu::CpuBackend();
    Backend* b = slot(kCPU);
    return b ? *b : *cpu_backend;
  }
#ifdef TROUPE_WITH_CUDA
  if (t == kCUDA) cuda::ensure_backend();
#endif
  Backend* b = slot(t);
  if (!b)
    throw std::runtime_error(
        "[backend] no backend for device cuda: this build of troupe has no CUDA support (configure with "
        "TROUPE_CUDA=ON on a machine with the CUDA toolkit)");
  return *b;
}

void register_backend(Backend* b) { slot(b->type()) = b; }

bool has_backend(DeviceType t) {
#ifdef TROUPE_WITH_CUDA
  if (t == kCUDA) {
    try {
      cuda::ensure_backend();
    } catch (...) {
      return false;
    }
  }
#endif
  return t == kCPU || slot(t) != nullptr;
}

void Backend::not_implemented(const char* op) const {
  throw std::runtime_error(std::string("[") + op + "] not implemented for device " + name());
}

void Backend::copy(const Tensor&, const Tensor&) { not_implemented("copy"); }
void Backend::copy_between(const Tensor&, const Tensor&) { not_implemented("copy_between"); }
void Backend::fill(const Tensor&, Scalar) { not_implemented("fill"); }
void Backend::unary(UnaryOp, const Tensor&, const Tensor&, double, double) { not_implemented("unary"); }
void Backend::binary(BinaryOp, const Tensor&, const Tensor&, const Tensor&, double) { not_implemented("binary"); }
void Backend::where(const Tensor&, const Tensor&, const Tensor&, const Tensor&) { not_implemented("where"); }
void Backend::reduce(ReduceKind, const Tensor&, const Tensor&, const Tensor&, int64_t, int64_t, int64_t) {
  not_implemented("reduce");
}
void Backend::cumsum(const Tensor&, const Tensor&, int64_t, int64_t, int64_t) { not_implemented("cumsum"); }
bool Backend::fuses(FusedKernel) const { return false; }
void Backend::adam_step(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const AdamStepConsts&) {
  not_implemented("adam_step");
}
void Backend::softmax(const Tensor&, const Tensor&, int64_t, int64_t, int64_t, bool log) {
  not_implemented(log ? "log_softmax" : "softmax");
}
void Backend::softmax_backward(const Tensor&, const Tensor&, const Tensor&, int64_t, int64_t, bool log) {
  not_implemented(log ? "log_softmax" : "softmax");
}
void Backend::logsumexp(const Tensor&, const Tensor&, int64_t, int64_t, int64_t) { not_implemented("logsumexp"); }
void Backend::reverse_cumsum(const Tensor&, const Tensor&, int64_t, int64_t, int64_t) { not_implemented("cumsum"); }
void Backend::var_mean_rows(const Tensor&, const Tensor&, const Tensor&, int64_t, int64_t, int64_t) {
  not_implemented("var");
}
void Backend::norm2_rows(const Tensor&, const Tensor&, int64_t, int64_t) { not_implemented("norm"); }
void Backend::gemm(const Tensor&, const Tensor&, const Tensor&, double, double) { not_implemented("gemm"); }
void Backend::gather(const Tensor&, const Tensor&, int64_t, const Tensor&) { not_implemented("gather"); }
void Backend::scatter(const Tensor&, int64_t, const Tensor&, const Tensor&, bool) { not_implemented("scatter"); }
void Backend::index_select(const Tensor&, const Tensor&, int64_t, const Tensor&) { not_implemented("index_select"); }
void Backend::index_add(const Tensor&, int64_t, const Tensor&, const Tensor&, double) { not_implemented("index_add"); }
void Backend::im2col(const Tensor&, const Tensor&, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                     int64_t) {
  not_implemented("im2col");
}
void Backend::col2im(const Tensor&, const Tensor&, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                     int64_t) {
  not_implemented("col2im");
}
void Backend::uniform(const Tensor&, double, double) { not_implemented("uniform"); }
void Backend::normal(const Tensor&, double, double) { not_implemented("normal"); }

#ifndef TROUPE_WITH_CUDA
namespace cuda {
bool is_available() { return false; }
int device_count() { return 0; }
}  // namespace cuda
#endif

}  // namespace troupe
