// CUDA fused optimizer steps (Backend::adam_step, FusedKernel::AdamStep): Adam and AdamW over a parameter
// in one pass reading p, g, m, v (and vmax) once and writing p, m, v, where the ops one at a time take a
// dozen passes and as many launches. The arithmetic is the CPU's fused loop's (optim/adam.cpp, adam_body),
// in the parameter's dtype, fma where it uses fma.
#include "cuda_common.cuh"

namespace troupe::cuda {

namespace {

template <typename T>
struct AdamK {
  T sign, decay, weight_decay, beta1, one_minus_beta1, beta2, one_minus_beta2, bias_correction2_sqrt, eps,
      neg_step_size;
};

template <typename T, bool kGradDecay, bool kAmsgrad, bool kDecoupled>
__global__ void __launch_bounds__(kThreads)
    adam_kernel(T* p, const T* g, T* m, T* v, T* vmax, int64_t n, AdamK<T> k) {
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    T pv = p[i];
    if constexpr (kDecoupled) pv = pv * k.decay;
    T d = g[i] * k.sign;
    if constexpr (kGradDecay) d = m_fma(pv, k.weight_decay, d);
    const T mi = m_fma(d, k.one_minus_beta1, m[i] * k.beta1);
    T vi = m_fma(k.one_minus_beta2 * d, d, v[i] * k.beta2);
    m[i] = mi;
    v[i] = vi;
    if constexpr (kAmsgrad) {
      vi = nan_max(vmax[i], vi);
      vmax[i] = vi;
    }
    const T denom = m_sqrt(vi) / k.bias_correction2_sqrt + k.eps;
    p[i] = pv + (k.neg_step_size * mi) / denom;
  }
}

template <typename T, bool A, bool B, bool C>
void launch_adam(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, const Tensor& vmax,
                 const AdamK<T>& k) {
  const int64_t n = p.numel();
  adam_kernel<T, A, B, C><<<grid_for(n), kThreads>>>(ptr<T>(p), ptr<T>(g), ptr<T>(m), ptr<T>(v),
                                                     vmax.defined() ? ptr<T>(vmax) : nullptr, n, k);
  TROUPE_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void adam_typed(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, const Tensor& vmax,
                const AdamStepConsts& c) {
  const AdamK<T> k{T(c.sign),    T(c.decay),           T(c.weight_decay),          T(c.beta1),
                   T(c.one_minus_beta1), T(c.beta2),   T(c.one_minus_beta2),       T(c.bias_correction2_sqrt),
                   T(c.eps),     T(c.neg_step_size)};
  // (grad_decay, amsgrad, decoupled) as template flags, as the CPU loop
  auto go = [&](auto gd, auto ams, auto dec) {
    launch_adam<T, decltype(gd)::value, decltype(ams)::value, decltype(dec)::value>(p, g, m, v, vmax, k);
  };
  using F = std::false_type;
  using Tr = std::true_type;
  const int key = (c.grad_decay ? 4 : 0) | (c.amsgrad ? 2 : 0) | (c.decoupled ? 1 : 0);
  switch (key) {
    case 0: return go(F{}, F{}, F{});
    case 1: return go(F{}, F{}, Tr{});
    case 2: return go(F{}, Tr{}, F{});
    case 3: return go(F{}, Tr{}, Tr{});
    case 4: return go(Tr{}, F{}, F{});
    case 5: return go(Tr{}, F{}, Tr{});
    case 6: return go(Tr{}, Tr{}, F{});
    default: return go(Tr{}, Tr{}, Tr{});
  }
}

}  // namespace

void CudaBackend::adam_step(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, const Tensor& vmax,
                            const AdamStepConsts& c) {
  const int dev = common_device("adam_step", {&p, &g, &m, &v, &vmax});
  if (p.dtype() != kFloat32 && p.dtype() != kFloat64) bad_dtype("adam_step", p.dtype());
  auto check = [&](const Tensor& t, const char* what) {
    if (!t.is_contiguous() || t.dtype() != p.dtype() || !t.sizes().equals(p.sizes()))
      throw std::invalid_argument(std::string("[adam_step] ") + what + " must be a contiguous " + dtype_name(p.dtype()) +
                                  " tensor of shape " + shape_str(p.sizes()) + ", got " + dtype_name(t.dtype()) + " " +
                                  shape_str(t.sizes()) + (t.is_contiguous() ? "" : " (not contiguous)"));
  };
  check(p, "the parameter");
  check(g, "the gradient");
  check(m, "exp_avg");
  check(v, "exp_avg_sq");
  if (c.amsgrad) {
    if (!vmax.defined()) throw std::invalid_argument("[adam_step] amsgrad needs max_exp_avg_sq");
    check(vmax, "max_exp_avg_sq");
  }
  if (p.numel() == 0) return;
  DeviceGuard dg(dev);
  if (p.dtype() == kFloat32) adam_typed<float>(p, g, m, v, c.amsgrad ? vmax : Tensor(), c);
  else adam_typed<double>(p, g, m, v, c.amsgrad ? vmax : Tensor(), c);
}

}  // namespace troupe::cuda
