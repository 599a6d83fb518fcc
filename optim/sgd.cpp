#include <troupe/optim/sgd.h>

#include <algorithm>
#include <stdexcept>

#include <troupe/optim/fused.h>
#include <troupe/tensor/autograd.h>
#include <troupe/tensor/ops.h>

namespace troupe::optim {

// ---- options and state

void SGDParamState::write(StateDict& out, const std::string& prefix) const {
  if (momentum_buffer_.defined()) out.insert_or_assign(prefix + "momentum_buffer", momentum_buffer_);
}

void SGDParamState::read(const StateDict& in, const std::string& prefix, const Tensor& param) {
  const Tensor* buf = in.find(prefix + "momentum_buffer");
  momentum_buffer_ = buf && buf->defined() ? state_tensor_like(*buf, param) : Tensor();
}

// ---- the fused pass

namespace {

enum class Momentum { kNone, kFirst, kRunning };

template <class T>
struct SgdConsts {
  T sign;           // -1 when maximizing
  T weight_decay;
  T momentum;
  T one_minus_dampening;
  T neg_lr;
};

// p, g, buf: n elements. PyTorch's ops in order: d = g (.neg()); d = d.add(p, alpha=wd);
// buf = clone(d) | buf.mul_(momentum).add_(d, alpha=1-dampening); d = d.add(buf, alpha=momentum) | buf;
// p.add_(d, alpha=-lr).
template <class T, Momentum kMomentum, bool kDecay, bool kNesterov>
TROUPE_OPTIM_INLINE void sgd_body(T* __restrict p, const T* __restrict g, T* __restrict buf, int64_t n,
                                  const SgdConsts<T>& k) {
  constexpr int64_t kBlock = detail::kBlockBytes / sizeof(T);
  for (int64_t block = 0; block < n; block += kBlock) {
    detail::prefetch_write(p + block);
    detail::prefetch_read(g + block);
    if constexpr (kMomentum != Momentum::kNone) detail::prefetch_write(buf + block);
    const int64_t end = std::min(n, block + kBlock);
    for (int64_t i = block; i < end; ++i) {
      T d = g[i] * k.sign;
      if constexpr (kDecay) d = std::fma(p[i], k.weight_decay, d);
      if constexpr (kMomentum == Momentum::kFirst) {
        buf[i] = d;
        if constexpr (kNesterov) d = std::fma(d, k.momentum, d);
      } else if constexpr (kMomentum == Momentum::kRunning) {
        const T b = std::fma(d, k.one_minus_dampening, buf[i] * k.momentum);
        buf[i] = b;
        d = kNesterov ? std::fma(b, k.momentum, d) : b;
      }
      p[i] = std::fma(d, k.neg_lr, p[i]);
    }
  }
}

template <class T, Momentum kMomentum, bool kDecay, bool kNesterov>
struct SgdLoop {
  TROUPE_OPTIM_GENERIC static void generic(T* p, const T* g, T* buf, int64_t n, const SgdConsts<T>& k) {
    sgd_body<T, kMomentum, kDecay, kNesterov>(p, g, buf, n, k);
  }
  TROUPE_OPTIM_AVX2 static void avx2(T* p, const T* g, T* buf, int64_t n, const SgdConsts<T>& k) {
    sgd_body<T, kMomentum, kDecay, kNesterov>(p, g, buf, n, k);
  }
};

template <class T>
void sgd_fused(const Tensor& param, const Tensor& grad, const Tensor& buf, Momentum mode, const SGDOptions& o) {
  const SgdConsts<T> k{T(o.maximize() ? -1 : 1), T(o.weight_decay()), T(o.momentum()), T(1 - o.dampening()),
                       T(-o.lr())};
  using Fn = void (*)(T*, const T*, T*, int64_t, const SgdConsts<T>&);
  Fn fn = nullptr;
  const bool avx2 = detail::cpu_has_avx2_fma();
  auto pick = [&](auto mode_c, auto decay_c, auto nesterov_c) {
    using L = SgdLoop<T, decltype(mode_c)::value, decltype(decay_c)::value, decltype(nesterov_c)::value>;
    fn = avx2 ? &L::avx2 : &L::generic;
  };
  detail::dispatch_bool(o.weight_decay() != 0, [&](auto decay_c) {
    if (mode == Momentum::kNone) {
      pick(std::integral_constant<Momentum, Momentum::kNone>{}, decay_c, std::false_type{});
      return;
    }
    detail::dispatch_bool(o.nesterov(), [&](auto nesterov_c) {
      if (mode == Momentum::kFirst) pick(std::integral_constant<Momentum, Momentum::kFirst>{}, decay_c, nesterov_c);
      else pick(std::integral_constant<Momentum, Momentum::kRunning>{}, decay_c, nesterov_c);
    });
  });
  T* p = param.data_ptr<T>();
  const T* g = grad.data_ptr<T>();
  T* b = detail::ptr_or_null<T>(buf);
  parallel_for(0, param.numel(), detail::kFusedGrain, [&](int64_t begin, int64_t end) {
    fn(p + begin, g + begin, b ? b + begin : nullptr, end - begin, k);
  });
  param.bump_version();
  if (buf.defined()) buf.bump_version();
}

}  // namespace

// ---- SGD

namespace {
std::unique_ptr<OptimizerOptions> checked(const SGDOptions& o) {
  using detail::py_number;
  // PyTorch's checks, in its order (lr < 0 is false for NaN, as in Python).
  if (o.lr() < 0) throw std::invalid_argument("Invalid learning rate: " + py_number(o.lr()));
  if (o.momentum() < 0) throw std::invalid_argument("Invalid momentum value: " + py_number(o.momentum()));
  if (o.weight_decay() < 0)
    throw std::invalid_argument("Invalid weight_decay value: " + py_number(o.weight_decay()));
  if (o.nesterov() && (o.momentum() <= 0 || o.dampening() != 0))
    throw std::invalid_argument("Nesterov momentum requires a momentum and zero dampening");
  return std::make_unique<SGDOptions>(o);
}
}  // namespace

SGD::SGD(std::vector<OptimizerParamGroup> param_groups, SGDOptions defaults)
    : Optimizer(std::move(param_groups), checked(defaults)) {}

SGD::SGD(std::vector<Tensor> params, SGDOptions defaults) : Optimizer(std::move(params), checked(defaults)) {}

std::unique_ptr<OptimizerParamState> SGD::make_param_state() const { return std::make_unique<SGDParamState>(); }

Tensor SGD::step(LossClosure closure) {
  Tensor loss = run_closure(closure);
  NoGradGuard no_grad;
  for (auto& group : param_groups_) {
    const auto& o = static_cast<const SGDOptions&>(group.options());
    for (const Tensor& p : group.params()) {
      const Tensor& grad = p.grad();
      if (!grad.defined()) continue;
      auto& s = state_of<SGDParamState>(p);  // made even when momentum is 0, as PyTorch's self.state[p]
      Tensor& buf = s.momentum_buffer();
      const bool first = !buf.defined();
      if (detail::fused_eligible(p, grad, {&buf})) {
        const Momentum mode = o.momentum() == 0 ? Momentum::kNone : first ? Momentum::kFirst : Momentum::kRunning;
        if (mode == Momentum::kFirst) buf = empty_like(p);
        if (p.dtype() == kFloat32) sgd_fused<float>(p, grad, buf, mode, o);
        else sgd_fused<double>(p, grad, buf, mode, o);
        continue;
      }
      // Slow path: PyTorch's in-place ops one at a time.
      Tensor d = o.maximize() ? grad.neg() : grad;
      if (o.weight_decay() != 0) d = d.add(p, o.weight_decay());
      if (o.momentum() != 0) {
        if (first) buf = d.clone().detach();
        else buf.mul_(o.momentum()).add_(d, 1 - o.dampening());
        d = o.nesterov() ? d.add(buf, o.momentum()) : buf;
      }
      Tensor param = p;
      param.add_(d, -o.lr());
    }
  }
  return loss;
}

}  // namespace troupe::optim
