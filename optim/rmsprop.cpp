#include <troupe/optim/rmsprop.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <troupe/optim/fused.h>
#include <troupe/tensor/autograd.h>
#include <troupe/tensor/ops.h>

namespace troupe::optim {

// ---- options and state

void RMSpropParamState::write(StateDict& out, const std::string& prefix) const {
  out.insert_or_assign(prefix + "step", scalar_tensor(step_, TensorOptions().dtype(kLong)));
  if (square_avg_.defined()) out.insert_or_assign(prefix + "square_avg", square_avg_);
  if (momentum_buffer_.defined()) out.insert_or_assign(prefix + "momentum_buffer", momentum_buffer_);
  if (grad_avg_.defined()) out.insert_or_assign(prefix + "grad_avg", grad_avg_);
}

void RMSpropParamState::read(const StateDict& in, const std::string& prefix, const Tensor& param) {
  const double s = read_scalar(in, prefix + "step");
  if (!(s >= 0) || s != std::trunc(s) || s > 9.007199254740992e15)
    throw std::invalid_argument("[Optimizer.load_state_dict] '" + prefix + "step' must be a non-negative whole number, got " +
                                detail::py_number(s));
  step_ = static_cast<int64_t>(s);
  const Tensor* sq = in.find(prefix + "square_avg");
  if (!sq || !sq->defined())
    throw std::invalid_argument("[Optimizer.load_state_dict] missing key '" + prefix + "square_avg'");
  square_avg_ = state_tensor_like(*sq, param);
  const Tensor* buf = in.find(prefix + "momentum_buffer");
  momentum_buffer_ = buf && buf->defined() ? state_tensor_like(*buf, param) : Tensor();
  const Tensor* ga = in.find(prefix + "grad_avg");
  grad_avg_ = ga && ga->defined() ? state_tensor_like(*ga, param) : Tensor();
}

// ---- the fused pass

namespace {

template <class T>
struct RmspropConsts {
  T sign;  // -1 when maximizing
  T weight_decay, alpha, one_minus_alpha, eps, momentum, neg_lr;
};

// PyTorch's ops in order: d = g (.neg()); d = d.add(p, alpha=wd); sq.mul_(alpha).addcmul_(d, d, value=1-alpha);
// [centered] ga.mul_(alpha).add_(d, alpha=1-alpha), avg = sq.addcmul(ga, ga, value=-1).sqrt_()
// [else] avg = sq.sqrt(); avg.add_(eps);
// [momentum] buf.mul_(momentum).addcdiv_(d, avg), p.add_(buf, alpha=-lr) [else] p.addcdiv_(d, avg, value=-lr).
template <class T, bool kDecay, bool kCentered, bool kMomentum>
TROUPE_OPTIM_INLINE void rmsprop_body(T* __restrict p, const T* __restrict g, T* __restrict sq, T* __restrict ga,
                                      T* __restrict buf, int64_t n, const RmspropConsts<T>& k) {
  constexpr int64_t kBlock = detail::kBlockBytes / sizeof(T);
  for (int64_t block = 0; block < n; block += kBlock) {
    detail::prefetch_write(p + block);
    detail::prefetch_read(g + block);
    detail::prefetch_write(sq + block);
    if constexpr (kCentered) detail::prefetch_write(ga + block);
    if constexpr (kMomentum) detail::prefetch_write(buf + block);
    const int64_t end = std::min(n, block + kBlock);
    for (int64_t i = block; i < end; ++i) {
      T d = g[i] * k.sign;
      if constexpr (kDecay) d = std::fma(p[i], k.weight_decay, d);
      const T s = std::fma(k.one_minus_alpha * d, d, sq[i] * k.alpha);
      sq[i] = s;
      T avg;
      if constexpr (kCentered) {
        const T a = std::fma(d, k.one_minus_alpha, ga[i] * k.alpha);
        ga[i] = a;
        avg = std::sqrt(std::fma(-a, a, s));
      } else {
        avg = std::sqrt(s);
      }
      avg = avg + k.eps;
      if constexpr (kMomentum) {
        const T decayed = buf[i] * k.momentum;
        const T b = decayed + d / avg;
        buf[i] = b;
        p[i] = std::fma(b, k.neg_lr, p[i]);
      } else {
        p[i] = p[i] + (k.neg_lr * d) / avg;
      }
    }
  }
}

template <class T, bool kDecay, bool kCentered, bool kMomentum>
struct RmspropLoop {
  TROUPE_OPTIM_GENERIC static void generic(T* p, const T* g, T* sq, T* ga, T* buf, int64_t n, const RmspropConsts<T>& k) {
    rmsprop_body<T, kDecay, kCentered, kMomentum>(p, g, sq, ga, buf, n, k);
  }
  TROUPE_OPTIM_AVX2 static void avx2(T* p, const T* g, T* sq, T* ga, T* buf, int64_t n, const RmspropConsts<T>& k) {
    rmsprop_body<T, kDecay, kCentered, kMomentum>(p, g, sq, ga, buf, n, k);
  }
};

template <class T>
void rmsprop_fused(const Tensor& param, const Tensor& grad, RMSpropParamState& s, const RMSpropOptions& o) {
  const RmspropConsts<T> k{T(o.maximize() ? -1 : 1), T(o.weight_decay()), T(o.alpha()), T(1 - o.alpha()),
                           T(o.eps()),                T(o.momentum()),     T(-o.lr())};
  using Fn = void (*)(T*, const T*, T*, T*, T*, int64_t, const RmspropConsts<T>&);
  Fn fn = nullptr;
  const bool avx2 = detail::cpu_has_avx2_fma();
  detail::dispatch_bool(o.weight_decay() != 0, [&](auto decay_c) {
    detail::dispatch_bool(o.centered(), [&](auto centered_c) {
      detail::dispatch_bool(o.momentum() > 0, [&](auto momentum_c) {
        using L = RmspropLoop<T, decltype(decay_c)::value, decltype(centered_c)::value, decltype(momentum_c)::value>;
        fn = avx2 ? &L::avx2 : &L::generic;
      });
    });
  });
  T* p = param.data_ptr<T>();
  const T* g = grad.data_ptr<T>();
  T* sq = s.square_avg().data_ptr<T>();
  T* ga = o.centered() ? s.grad_avg().data_ptr<T>() : nullptr;
  T* buf = o.momentum() > 0 ? s.momentum_buffer().data_ptr<T>() : nullptr;
  parallel_for(0, param.numel(), detail::kFusedGrain, [&](int64_t b, int64_t e) {
    fn(p + b, g + b, sq + b, ga ? ga + b : nullptr, buf ? buf + b : nullptr, e - b, k);
  });
  param.bump_version();
  s.square_avg().bump_version();
  if (ga) s.grad_avg().bump_version();
  if (buf) s.momentum_buffer().bump_version();
}

std::unique_ptr<OptimizerOptions> checked(const RMSpropOptions& o) {
  using detail::py_number;
  // PyTorch's `not 0.0 <= x` checks, in its order (NaN is rejected too).
  if (!(0.0 <= o.lr())) throw std::invalid_argument("Invalid learning rate: " + py_number(o.lr()));
  if (!(0.0 <= o.eps())) throw std::invalid_argument("Invalid epsilon value: " + py_number(o.eps()));
  if (!(0.0 <= o.momentum())) throw std::invalid_argument("Invalid momentum value: " + py_number(o.momentum()));
  if (!(0.0 <= o.weight_decay()))
    throw std::invalid_argument("Invalid weight_decay value: " + py_number(o.weight_decay()));
  if (!(0.0 <= o.alpha())) throw std::invalid_argument("Invalid alpha value: " + py_number(o.alpha()));
  return std::make_unique<RMSpropOptions>(o);
}

}  // namespace

// ---- RMSprop

RMSprop::RMSprop(std::vector<OptimizerParamGroup> param_groups, RMSpropOptions defaults)
    : Optimizer(std::move(param_groups), checked(defaults)) {}

RMSprop::RMSprop(std::vector<Tensor> params, RMSpropOptions defaults)
    : Optimizer(std::move(params), checked(defaults)) {}

std::unique_ptr<OptimizerParamState> RMSprop::make_param_state() const {
  return std::make_unique<RMSpropParamState>();
}

Tensor RMSprop::step(LossClosure closure) {
  Tensor loss = run_closure(closure);
  NoGradGuard no_grad;
  for (auto& group : param_groups_) {
    const auto& o = static_cast<const RMSpropOptions&>(group.options());
    for (const Tensor& p : group.params()) {
      const Tensor& grad = p.grad();
      if (!grad.defined()) continue;
      auto& s = state_of<RMSpropParamState>(p);
      if (!s.square_avg().defined()) {  // PyTorch's lazy initialisation (len(state) == 0)
        s.step(0);
        s.square_avg(zeros_like(p));
        if (o.momentum() > 0) s.momentum_buffer(zeros_like(p));
        if (o.centered()) s.grad_avg(zeros_like(p));
      }
      if (o.momentum() > 0 && !s.momentum_buffer().defined())
        throw std::invalid_argument("[RMSprop.step] momentum is " + detail::py_number(o.momentum()) +
                                    " but the state of a parameter has no momentum_buffer (was it loaded from a run "
                                    "without momentum?)");
      if (o.centered() && !s.grad_avg().defined())
        throw std::invalid_argument(
            "[RMSprop.step] centered is on but the state of a parameter has no grad_avg (was it loaded from a run "
            "that was not centered?)");
      s.step(s.step() + 1);
      if (detail::fused_eligible(p, grad, {&s.square_avg(), &s.momentum_buffer(), &s.grad_avg()})) {
        if (p.dtype() == kFloat32) rmsprop_fused<float>(p, grad, s, o);
        else rmsprop_fused<double>(p, grad, s, o);
        continue;
      }
      // Slow path: PyTorch's in-place ops one at a time.
      Tensor param = p;
      Tensor d = o.maximize() ? grad.neg() : grad;
      if (o.weight_decay() != 0) d = d.add(p, o.weight_decay());
      s.square_avg().mul_(o.alpha()).add_(d.mul(1 - o.alpha()).mul_(d));
      Tensor avg;
      if (o.centered()) {
        s.grad_avg().mul_(o.alpha()).add_(d, 1 - o.alpha());
        avg = s.square_avg().sub(s.grad_avg().mul(s.grad_avg())).sqrt_();
      } else {
        avg = s.square_avg().sqrt();
      }
      avg.add_(o.eps());
      if (o.momentum() > 0) {
        s.momentum_buffer().mul_(o.momentum()).add_(d.div(avg));
        param.add_(s.momentum_buffer(), -o.lr());
      } else {
        param.add_(d.mul(-o.lr()).div_(avg));
      }
    }
  }
  return loss;
}

}  // namespace troupe::optim
