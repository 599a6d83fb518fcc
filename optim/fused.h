// Internal to the optimizers (sgd.cpp, adam.cpp, adamw.cpp, rmsprop.cpp); optim.h does not include it.
//
// Each optimizer updates a parameter in ONE pass over raw pointers when the parameter, its gradient
// and its state are contiguous CPU float32/float64 tensors of one dtype ("the fused path"): every
// element of p, g and the state is read once and written once, with no temporary tensors. The loop
// computes in the parameter's dtype with PyTorch 1.13's single-tensor order of operations, so that
// results agree with PyTorch to the last bit: ATen's CPU kernels (AVX2 build) compute
//   a.add(b, alpha)          as fma(b, alpha, a)
//   a.addcmul(t1, t2, value) as fma(value * t1, t2, a)
//   a.addcdiv(t1, t2, value) as a + (value * t1) / t2          (no fma)
//   a.mul(s), a / s, a + s   as one rounding each, s cast to a's dtype
// (measured against PyTorch with exact rational arithmetic; see tests/fixtures/gen_optim.py). The
// loops fuse exactly where they call std::fma (contraction is off, below).
// Every loop is compiled twice: for AVX2+FMA (used when the CPU has them; std::fma is one instruction
// and the loop vectorises) and generic (std::fma is libm's, still exact).
//
// Anything else (CUDA, non-contiguous, float16/bfloat16, a gradient of another dtype) takes the slow
// path: the same maths as PyTorch's in-place tensor ops, one op at a time, with temporaries. It agrees
// with the fused path to rounding (troupe's tensor ops do not fuse a multiply and an add).
#pragma once

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <type_traits>

#include <troupe/util/python_format.h>
#include <troupe/tensor/parallel.h>
#include <troupe/tensor/tensor.h>

// GCC fuses a * b + c into an fma wherever FMA instructions are enabled (-ffp-contract=fast, its
// default even in ISO mode): the loops ask for exactly PyTorch's roundings, so contraction is off in
// them. Clang contracts only inside one expression (-ffp-contract=on): the loops keep a product and
// the sum it feeds in separate statements.
#if defined(__GNUC__) && !defined(__clang__)
#define TROUPE_OPTIM_NO_CONTRACT __attribute__((optimize("fp-contract=off")))
#else
#define TROUPE_OPTIM_NO_CONTRACT
#endif
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define TROUPE_OPTIM_HAVE_AVX2_VARIANT 1
/// Compiles a fused loop for AVX2 + FMA (called only when the CPU has them).
#define TROUPE_OPTIM_AVX2 __attribute__((target("avx2,fma"))) TROUPE_OPTIM_NO_CONTRACT
#else
#define TROUPE_OPTIM_HAVE_AVX2_VARIANT 0
#define TROUPE_OPTIM_AVX2 TROUPE_OPTIM_NO_CONTRACT
#endif
/// Compiles the generic variant of a fused loop.
#define TROUPE_OPTIM_GENERIC TROUPE_OPTIM_NO_CONTRACT
#if defined(__GNUC__) || defined(__clang__)
/// Inlines a loop body into each compiled variant (so that it is compiled for the variant's ISA).
#define TROUPE_OPTIM_INLINE inline __attribute__((always_inline))
#else
#define TROUPE_OPTIM_INLINE inline
#endif

namespace troupe::optim::detail {

/// Elements per parallel task of a fused update: a 1M-element parameter runs on two threads, a
/// bias of a few thousand elements on one.
constexpr int64_t kFusedGrain = 32768;

/// A fused loop runs in blocks of kBlockBytes of each stream, and before each block prefetches the
/// block kPrefetchBytes further on: one core's bandwidth is bounded by its outstanding misses, and
/// the hardware prefetcher alone leaves some unused (measured: SGD with momentum over 10 x 1M
/// floats on 2 threads, 6.0 ms -> 5.4 ms; 1 KB and 4 KB ahead do about as well, 8 KB worse).
constexpr int64_t kBlockBytes = 256;
constexpr int64_t kPrefetchBytes = 2048;

/// Prefetches the block kPrefetchBytes past `s` for reading.
template <class T>
TROUPE_OPTIM_INLINE void prefetch_read(const T* s) {
#if defined(__GNUC__) || defined(__clang__)
  const char* c = reinterpret_cast<const char*>(s) + kPrefetchBytes;
  for (int64_t k = 0; k < kBlockBytes; k += 64) __builtin_prefetch(c + k, 0);
#endif
}

/// Prefetches the block kPrefetchBytes past `s` for writing.
template <class T>
TROUPE_OPTIM_INLINE void prefetch_write(const T* s) {
#if defined(__GNUC__) || defined(__clang__)
  const char* c = reinterpret_cast<const char*>(s) + kPrefetchBytes;
  for (int64_t k = 0; k < kBlockBytes; k += 64) __builtin_prefetch(c + k, 1);
#endif
}

/// True when the CPU runs the AVX2 + FMA variant of the fused loops.
inline bool cpu_has_avx2_fma() {
#if TROUPE_OPTIM_HAVE_AVX2_VARIANT
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return ok;
#else
  return false;
#endif
}

/// True when the fused path applies: `param` is a contiguous float32/float64 tensor on a device of type
/// `on` (the CPU's loops here; a backend's kernel for CUDA), and `grad` and every defined tensor of `state`
/// are contiguous tensors of its device, dtype and sizes.
inline bool fused_eligible(const Tensor& param, const Tensor& grad, std::initializer_list<const Tensor*> state,
                           DeviceType on = kCPU) {
  if (param.device().type != on || !param.is_contiguous()) return false;
  if (param.dtype() != kFloat32 && param.dtype() != kFloat64) return false;
  auto same = [&](const Tensor& t) {
    return t.device() == param.device() && t.is_contiguous() && t.dtype() == param.dtype() &&
           t.sizes() == param.sizes();
  };
  if (!same(grad)) return false;
  for (const Tensor* s : state)
    if (s->defined() && !same(*s)) return false;
  return true;
}

/// A pointer to `t`'s first element, or nullptr when `t` is undefined.
template <class T>
T* ptr_or_null(const Tensor& t) {
  return t.defined() ? t.data_ptr<T>() : nullptr;
}

/// Calls f(std::true_type{}) or f(std::false_type{}): turns a run-time flag into a template argument.
template <class F>
void dispatch_bool(bool b, F&& f) {
  if (b) f(std::true_type{});
  else f(std::false_type{});
}

/// PyTorch's maximum (NaN when either is NaN).
template <class T>
TROUPE_OPTIM_INLINE T nan_maximum(T a, T b) {
  return a != a ? a : (a > b ? a : b);
}

using util::py_number;

}  // namespace troupe::optim::detail

namespace troupe::optim {
struct AdamParamState;
}

namespace troupe::optim::detail {

/// The hyper-parameters of one Adam / AdamW update.
struct AdamHyper {
  double lr, beta1, beta2, eps, weight_decay;
  bool amsgrad, maximize;
  bool decoupled;  // AdamW: p *= 1 - lr * weight_decay, instead of g += weight_decay * p
  const char* name;  // "Adam" or "AdamW", for errors
};

/// One Adam (PyTorch's _single_tensor_adam) or AdamW (_single_tensor_adamw) update of `param`,
/// creating the state on the first step; defined in adam.cpp.
void adam_update(const Tensor& param, const Tensor& grad, AdamParamState& state, const AdamHyper& h);

/// Adam's and AdamW's constructor checks, with PyTorch's texts and in its order; defined in adam.cpp.
void check_adam_options(double lr, double eps, double beta1, double beta2, double weight_decay);

}  // namespace troupe::optim::detail
