#include <troupe/optim/adam.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <troupe/optim/fused.h>
#include <troupe/tensor/autograd.h>
#include <troupe/tensor/backend.h>
#include <troupe/tensor/ops.h>

namespace troupe::optim {

// ---- options and state

void AdamParamState::write(StateDict& out, const std::string& prefix) const {
  // PyTorch keeps the step as a float32 scalar tensor (torch.tensor(0.)); exact below 2^24 steps.
  out.insert_or_assign(prefix + "step", scalar_tensor(static_cast<double>(step_), TensorOptions().dtype(kFloat32)));
  if (exp_avg_.defined()) out.insert_or_assign(prefix + "exp_avg", exp_avg_);
  if (exp_avg_sq_.defined()) out.insert_or_assign(prefix + "exp_avg_sq", exp_avg_sq_);
  if (max_exp_avg_sq_.defined()) out.insert_or_assign(prefix + "max_exp_avg_sq", max_exp_avg_sq_);
}

namespace {
const Tensor& required(const StateDict& in, const std::string& key) {
  const Tensor* t = in.find(key);
  if (!t || !t->defined()) throw std::invalid_argument("[Optimizer.load_state_dict] missing key '" + key + "'");
  return *t;
}

int64_t read_step(const StateDict& in, const std::string& key) {
  const double s = read_scalar(in, key);
  if (!(s >= 0) || s != std::trunc(s) || s > 9.007199254740992e15)
    throw std::invalid_argument("[Optimizer.load_state_dict] '" + key + "' must be a non-negative whole number, got " +
                                detail::py_number(s));
  return static_cast<int64_t>(s);
}
}  // namespace

void AdamParamState::read(const StateDict& in, const std::string& prefix, const Tensor& param) {
  step_ = read_step(in, prefix + "step");
  exp_avg_ = state_tensor_like(required(in, prefix + "exp_avg"), param);
  exp_avg_sq_ = state_tensor_like(required(in, prefix + "exp_avg_sq"), param);
  const Tensor* mx = in.find(prefix + "max_exp_avg_sq");
  max_exp_avg_sq_ = mx && mx->defined() ? state_tensor_like(*mx, param) : Tensor();
}

// ---- the fused pass

namespace {

template <class T>
struct AdamConsts {
  T sign;          // -1 when maximizing
  T decay;         // AdamW: 1 - lr * weight_decay
  T weight_decay;  // Adam: added to the gradient
  T beta1, one_minus_beta1, beta2, one_minus_beta2;
  T bias_correction2_sqrt, eps, neg_step_size;
};

// PyTorch's ops in order: [AdamW] p.mul_(1 - lr*wd); d = g (.neg()); [Adam] d = d.add(p, alpha=wd);
// m.mul_(b1).add_(d, alpha=1-b1); v.mul_(b2).addcmul_(d, d, value=1-b2); [amsgrad] vmax = maximum(vmax, v);
// denom = (sqrt(v or vmax) / bc2_sqrt).add_(eps); p.addcdiv_(m, denom, value=-step_size).
template <class T, bool kGradDecay, bool kAmsgrad, bool kDecoupled>
TROUPE_OPTIM_INLINE void adam_body(T* __restrict p, const T* __restrict g, T* __restrict m, T* __restrict v,
                                   T* __restrict vmax, int64_t n, const AdamConsts<T>& k) {
  constexpr int64_t kBlock = detail::kBlockBytes / sizeof(T);
  for (int64_t block = 0; block < n; block += kBlock) {
    detail::prefetch_write(p + block);
    detail::prefetch_read(g + block);
    detail::prefetch_write(m + block);
    detail::prefetch_write(v + block);
    if constexpr (kAmsgrad) detail::prefetch_write(vmax + block);
    const int64_t end = std::min(n, block + kBlock);
    for (int64_t i = block; i < end; ++i) {
      T pv = p[i];
      if constexpr (kDecoupled) pv = pv * k.decay;
      T d = g[i] * k.sign;
      if constexpr (kGradDecay) d = std::fma(pv, k.weight_decay, d);
      const T mi = std::fma(d, k.one_minus_beta1, m[i] * k.beta1);
      T vi = std::fma(k.one_minus_beta2 * d, d, v[i] * k.beta2);
      m[i] = mi;
      v[i] = vi;
      if constexpr (kAmsgrad) {
        vi = detail::nan_maximum(vmax[i], vi);
        vmax[i] = vi;
      }
      const T denom = std::sqrt(vi) / k.bias_correction2_sqrt + k.eps;
      p[i] = pv + (k.neg_step_size * mi) / denom;
    }
  }
}

template <class T, bool kGradDecay, bool kAmsgrad, bool kDecoupled>
struct AdamLoop {
  TROUPE_OPTIM_GENERIC static void generic(T* p, const T* g, T* m, T* v, T* vmax, int64_t n, const AdamConsts<T>& k) {
    adam_body<T, kGradDecay, kAmsgrad, kDecoupled>(p, g, m, v, vmax, n, k);
  }
  TROUPE_OPTIM_AVX2 static void avx2(T* p, const T* g, T* m, T* v, T* vmax, int64_t n, const AdamConsts<T>& k) {
    adam_body<T, kGradDecay, kAmsgrad, kDecoupled>(p, g, m, v, vmax, n, k);
  }
};

// Bias corrections in double on the host, as PyTorch does with Python floats.
struct AdamScalars {
  double bias_correction2_sqrt, step_size;
};
AdamScalars adam_scalars(const detail::AdamHyper& h, int64_t step) {
  const double t = static_cast<double>(step);
  const double bias_correction1 = 1 - std::pow(h.beta1, t);
  const double bias_correction2 = 1 - std::pow(h.beta2, t);
  return {std::sqrt(bias_correction2), h.lr / bias_correction1};
}

/// The constants of step `step` of the fused pass, for the CPU loop and a backend's kernel alike.
AdamStepConsts adam_step_consts(const detail::AdamHyper& h, int64_t step) {
  const AdamScalars sc = adam_scalars(h, step);
  AdamStepConsts k;
  k.sign = h.maximize ? -1 : 1;
  k.decay = 1 - h.lr * h.weight_decay;
  k.weight_decay = h.weight_decay;
  k.beta1 = h.beta1;
  k.one_minus_beta1 = 1 - h.beta1;
  k.beta2 = h.beta2;
  k.one_minus_beta2 = 1 - h.beta2;
  k.bias_correction2_sqrt = sc.bias_correction2_sqrt;
  k.eps = h.eps;
  k.neg_step_size = -sc.step_size;
  k.grad_decay = !h.decoupled && h.weight_decay != 0;
  k.amsgrad = h.amsgrad;
  k.decoupled = h.decoupled;
  return k;
}

template <class T>
void adam_fused(const Tensor& param, const Tensor& grad, AdamParamState& s, const detail::AdamHyper& h) {
  const AdamStepConsts c = adam_step_consts(h, s.step());
  const AdamConsts<T> k{T(c.sign),  T(c.decay), T(c.weight_decay),          T(c.beta1),
                        T(c.one_minus_beta1),   T(c.beta2), T(c.one_minus_beta2), T(c.bias_correction2_sqrt),
                        T(c.eps),   T(c.neg_step_size)};
  using Fn = void (*)(T*, const T*, T*, T*, T*, int64_t, const AdamConsts<T>&);
  Fn fn = nullptr;
  const bool avx2 = detail::cpu_has_avx2_fma();
  detail::dispatch_bool(!h.decoupled && h.weight_decay != 0, [&](auto decay_c) {
    detail::dispatch_bool(h.amsgrad, [&](auto ams_c) {
      detail::dispatch_bool(h.decoupled, [&](auto decoupled_c) {
        using L = AdamLoop<T, decltype(decay_c)::value, decltype(ams_c)::value, decltype(decoupled_c)::value>;
        fn = avx2 ? &L::avx2 : &L::generic;
      });
    });
  });
  T* p = param.data_ptr<T>();
  const T* g = grad.data_ptr<T>();
  T* m = s.exp_avg().data_ptr<T>();
  T* v = s.exp_avg_sq().data_ptr<T>();
  T* vmax = h.amsgrad ? s.max_exp_avg_sq().data_ptr<T>() : nullptr;
  parallel_for(0, param.numel(), detail::kFusedGrain, [&](int64_t b, int64_t e) {
    fn(p + b, g + b, m + b, v + b, vmax ? vmax + b : nullptr, e - b, k);
  });
  param.bump_version();
  s.exp_avg().bump_version();
  s.exp_avg_sq().bump_version();
  if (vmax) s.max_exp_avg_sq().bump_version();
}

}  // namespace

namespace detail {

void adam_update(const Tensor& param, const Tensor& grad, AdamParamState& s, const AdamHyper& h) {
  if (!s.exp_avg().defined()) {  // PyTorch's lazy initialisation (len(state) == 0)
    s.step(0);
    s.exp_avg(zeros_like(param));
    s.exp_avg_sq(zeros_like(param));
    if (h.amsgrad) s.max_exp_avg_sq(zeros_like(param));
  }
  if (!s.exp_avg_sq().defined())
    throw std::invalid_argument(std::string("[") + h.name + ".step] the state of a parameter has exp_avg but no exp_avg_sq");
  if (h.amsgrad && !s.max_exp_avg_sq().defined())
    throw std::invalid_argument(std::string("[") + h.name +
                                ".step] amsgrad is on but the state of a parameter has no max_exp_avg_sq "
                                "(was it loaded from a run without amsgrad?)");
  s.step(s.step() + 1);
  if (param.is_cuda() && backend(param).fuses(FusedKernel::AdamStep) &&
      fused_eligible(param, grad, {&s.exp_avg(), &s.exp_avg_sq(), &s.max_exp_avg_sq()}, kCUDA)) {
    // One kernel over the parameter (the ops one at a time below are a dozen passes over it).
    backend(param).adam_step(param, grad, s.exp_avg(), s.exp_avg_sq(), h.amsgrad ? s.max_exp_avg_sq() : Tensor(),
                             adam_step_consts(h, s.step()));
    param.bump_version();
    s.exp_avg().bump_version();
    s.exp_avg_sq().bump_version();
    if (h.amsgrad) s.max_exp_avg_sq().bump_version();
    return;
  }
  if (fused_eligible(param, grad, {&s.exp_avg(), &s.exp_avg_sq(), &s.max_exp_avg_sq()})) {
    if (param.dtype() == kFloat32) adam_fused<float>(param, grad, s, h);
    else adam_fused<double>(param, grad, s, h);
    return;
  }
  // Slow path: PyTorch's in-place ops one at a time.
  const AdamScalars sc = adam_scalars(h, s.step());
  Tensor p = param;
  Tensor d = h.maximize ? grad.neg() : grad;
  if (h.decoupled) p.mul_(1 - h.lr * h.weight_decay);
  else if (h.weight_decay != 0) d = d.add(p, h.weight_decay);
  s.exp_avg().mul_(h.beta1).add_(d, 1 - h.beta1);
  s.exp_avg_sq().mul_(h.beta2).add_(d.mul(1 - h.beta2).mul_(d));
  Tensor denom;
  if (h.amsgrad) {
    s.max_exp_avg_sq().copy_(maximum(s.max_exp_avg_sq(), s.exp_avg_sq()));
    denom = s.max_exp_avg_sq().sqrt().div_(sc.bias_correction2_sqrt).add_(h.eps);
  } else {
    denom = s.exp_avg_sq().sqrt().div_(sc.bias_correction2_sqrt).add_(h.eps);
  }
  p.add_(s.exp_avg().mul(-sc.step_size).div_(denom));
}

void check_adam_options(double lr, double eps, double beta1, double beta2, double weight_decay) {
  // PyTorch's `not 0.0 <= x` checks: NaN is rejected too.
  if (!(0.0 <= lr)) throw std::invalid_argument("Invalid learning rate: " + py_number(lr));
  if (!(0.0 <= eps)) throw std::invalid_argument("Invalid epsilon value: " + py_number(eps));
  if (!(0.0 <= beta1 && beta1 < 1.0))
    throw std::invalid_argument("Invalid beta parameter at index 0: " + py_number(beta1));
  if (!(0.0 <= beta2 && beta2 < 1.0))
    throw std::invalid_argument("Invalid beta parameter at index 1: " + py_number(beta2));
  if (!(0.0 <= weight_decay)) throw std::invalid_argument("Invalid weight_decay value: " + py_number(weight_decay));
}

}  // namespace detail

// ---- Adam

namespace {
std::unique_ptr<OptimizerOptions> checked(const AdamOptions& o) {
  detail::check_adam_options(o.lr(), o.eps(), std::get<0>(o.betas()), std::get<1>(o.betas()), o.weight_decay());
  return std::make_unique<AdamOptions>(o);
}
}  // namespace

Adam::Adam(std::vector<OptimizerParamGroup> param_groups, AdamOptions defaults)
    : Optimizer(std::move(param_groups), checked(defaults)) {}

Adam::Adam(std::vector<Tensor> params, AdamOptions defaults) : Optimizer(std::move(params), checked(defaults)) {}

std::unique_ptr<OptimizerParamState> Adam::make_param_state() const { return std::make_unique<AdamParamState>(); }

Tensor Adam::step(LossClosure closure) {
  Tensor loss = run_closure(closure);
  NoGradGuard no_grad;
  for (auto& group : param_groups_) {
    const auto& o = static_cast<const AdamOptions&>(group.options());
    const detail::AdamHyper h{o.lr(),           std::get<0>(o.betas()), std::get<1>(o.betas()), o.eps(),
                              o.weight_decay(), o.amsgrad(),            o.maximize(),           false,
                              "Adam"};
    for (const Tensor& p : group.params()) {
      if (!p.grad().defined()) continue;
      detail::adam_update(p, p.grad(), state_of<AdamParamState>(p), h);
    }
  }
  return loss;
}

}  // namespace troupe::optim
