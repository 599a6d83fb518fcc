// CUDA elementwise kernels: unary (float, integer and predicate forms), binary (arithmetic, comparisons,
// backward helpers; integer division by zero and negative integer powers reported through an ErrorFlag) and
// where. One kernel per dtype with a switch on the op inside; 16-bit floats compute in float.
#include "cuda_common.cuh"

namespace troupe::cuda {

namespace {

template <typename U>
struct WhereF {
  U* out;
  const bool* cond;
  const U* a;
  const U* b;
  __device__ void operator()(const int64_t* off) const { out[off[0]] = cond[off[1]] ? a[off[2]] : b[off[3]]; }
};

// ================================================================ unary

constexpr double kSqrt1_2 = 0.70710678118654752440;
constexpr double kSqrt2OverPi = 0.79788456080286535588;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;

template <typename C>
__device__ C unary_float_op(UnaryOp op, C x, C a, C b) {
  switch (op) {
    case UnaryOp::Neg: return -x;
    case UnaryOp::Abs: return m_abs(x);
    case UnaryOp::Exp: return m_exp(x);
    case UnaryOp::Log: return m_log(x);
    case UnaryOp::Log1p: return m_log1p(x);
    case UnaryOp::Sqrt: return m_sqrt(x);
    case UnaryOp::Rsqrt: return C(1) / m_sqrt(x);
    case UnaryOp::Sin: return m_sin(x);
    case UnaryOp::Cos: return m_cos(x);
    case UnaryOp::Tanh: return m_tanh(x);
    case UnaryOp::Sigmoid: return C(1) / (C(1) + m_exp(-x));
    case UnaryOp::Relu: return x < C(0) ? C(0) : x;
    case UnaryOp::Gelu: return C(0.5) * x * (C(1) + m_erf(x * C(kSqrt1_2)));
    case UnaryOp::GeluTanh: {
      C inner = C(kSqrt2OverPi) * (x + C(0.044715) * x * x * x);
      return C(0.5) * x * (C(1) + m_tanh(inner));
    }
    case UnaryOp::Silu: return x / (C(1) + m_exp(-x));
    case UnaryOp::Sign: return x != x ? x : C((C(0) < x) - (x < C(0)));
    case UnaryOp::Reciprocal: return C(1) / x;
    case UnaryOp::Square: return x * x;
    case UnaryOp::Erf: return m_erf(x);
    case UnaryOp::Softplus: return x * a > b ? x : m_log1p(m_exp(x * a)) / a;
    case UnaryOp::LeakyRelu: return x > C(0) ? x : x * a;
    case UnaryOp::Elu: return x > C(0) ? x : a * (m_exp(x) - C(1));
    case UnaryOp::PowScalar:
      if (a == C(2)) return x * x;
      if (a == C(1)) return x;
      if (a == C(0.5)) return m_sqrt(x);
      if (a == C(3)) return x * x * x;
      if (a == C(-1)) return C(1) / x;
      if (a == C(-2)) return C(1) / (x * x);
      return m_pow(x, a);
    case UnaryOp::RPowScalar: return m_pow(a, x);
    case UnaryOp::Floor: return m_floor(x);
    case UnaryOp::Ceil: return m_ceil(x);
    case UnaryOp::Round: return m_rint(x);
    case UnaryOp::Trunc: return m_trunc(x);
    case UnaryOp::GeluGrad: {
      C cdf = C(0.5) * (C(1) + m_erf(x * C(kSqrt1_2)));
      C pdf = C(kInvSqrt2Pi) * m_exp(C(-0.5) * x * x);
      return cdf + x * pdf;
    }
    case UnaryOp::GeluTanhGrad: {
      C x3 = x * x * x;
      C inner = C(kSqrt2OverPi) * (x + C(0.044715) * x3);
      C t = m_tanh(inner);
      C left = C(0.5) * x, right = C(1) + t;
      C left_d = C(0.5) * right;
      C tanh_d = C(1) - t * t;
      C inner_d = C(kSqrt2OverPi) * (C(1) + C(3) * C(0.044715) * x * x);
      return left_d + left * tanh_d * inner_d;
    }
    case UnaryOp::SiluGrad: {
      C s = C(1) / (C(1) + m_exp(-x));
      return s * (C(1) + x * (C(1) - s));
    }
    case UnaryOp::SoftplusGrad: {
      C z = m_exp(x * a);
      return x * a > b ? C(1) : z / (z + C(1));
    }
    case UnaryOp::EluGrad: return x > C(0) ? C(1) : a * m_exp(x);
    default: return x;  // predicates are dispatched separately
  }
}

template <typename T>
struct UnaryFloatF {
  using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
  T* out;
  const T* in;
  UnaryOp op;
  C a, b;
  __device__ void operator()(const int64_t* off) const { apply(off[0], load_as<C>(in[off[1]])); }
  /// Computes and stores element o from its loaded input (contiguous_unary_kernel loads first).
  __device__ void apply(int64_t o, C x) const { out[o] = store_as<T>(unary_float_op<C>(op, x, a, b)); }
};

template <typename T>
struct UnaryIntF {
  T* out;
  const T* in;
  UnaryOp op;
  int64_t e;  // PowScalar exponent (>= 0, checked on the host)
  __device__ void operator()(const int64_t* off) const {
    const T x = in[off[1]];
    T r = x;
    switch (op) {
      case UnaryOp::Neg: r = static_cast<T>(-x); break;
      case UnaryOp::Abs:
        if constexpr (std::is_signed_v<T>) r = static_cast<T>(x < 0 ? -x : x);
        break;
      case UnaryOp::Sign:
        if constexpr (std::is_signed_v<T>) r = static_cast<T>((T(0) < x) - (x < T(0)));
        else r = static_cast<T>(x != 0);
        break;
      case UnaryOp::Square: r = static_cast<T>(x * x); break;
      case UnaryOp::Relu:
        if constexpr (std::is_signed_v<T>) r = static_cast<T>(x < 0 ? 0 : x);
        break;
      case UnaryOp::PowScalar: {
        T acc = 1, base = x;
        for (int64_t k = e; k; k >>= 1) {
          if (k & 1) acc = static_cast<T>(acc * base);
          base = static_cast<T>(base * base);
        }
        r = acc;
        break;
      }
      default: break;  // Floor/Ceil/Round/Trunc: the identity
    }
    out[off[0]] = r;
  }
};

template <typename T>
struct PredicateF {
  bool* out;
  const T* in;
  UnaryOp op;
  __device__ void operator()(const int64_t* off) const {
    using C = std::conditional_t<is_16bit_v<T>, float, std::conditional_t<std::is_same_v<T, bool>, int, T>>;
    const C v = load_as<C>(in[off[1]]);
    bool r;
    switch (op) {
      case UnaryOp::LogicalNot: r = !(v != C(0)); break;
      case UnaryOp::IsNan: r = v != v; break;
      case UnaryOp::IsInf:
        if constexpr (std::is_floating_point_v<C>) r = ::isinf(v);
        else r = false;
        break;
      default:  // IsFinite
        if constexpr (std::is_floating_point_v<C>) r = ::isfinite(v);
        else r = true;
    }
    out[off[0]] = r;
  }
};

// ================================================================ binary

constexpr bool is_comparison(BinaryOp op) {
  return op == BinaryOp::Eq || op == BinaryOp::Ne || op == BinaryOp::Lt || op == BinaryOp::Le ||
         op == BinaryOp::Gt || op == BinaryOp::Ge || op == BinaryOp::LogicalAnd || op == BinaryOp::LogicalOr;
}

template <typename T>
struct BinaryF {
  using C = math_t<T>;
  void* out;  // T*, or bool* for comparisons
  const T* a;
  const T* b;
  BinaryOp op;
  C alpha;
  int* err;  // set for integer division by zero / negative integer powers (null for float dtypes)
  __device__ void operator()(const int64_t* off) const { apply(off[0], load_as<C>(a[off[1]]), load_as<C>(b[off[2]])); }
  /// Computes and stores element o from its loaded operands (contiguous_binary_kernel loads first).
  __device__ void apply(int64_t o, C x, C y) const {
    bool c;
    switch (op) {
      case BinaryOp::Eq: c = x == y; break;
      case BinaryOp::Ne: c = x != y; break;
      case BinaryOp::Lt: c = x < y; break;
      case BinaryOp::Le: c = x <= y; break;
      case BinaryOp::Gt: c = x > y; break;
      case BinaryOp::Ge: c = x >= y; break;
      case BinaryOp::LogicalAnd: c = x != C(0) && y != C(0); break;
      case BinaryOp::LogicalOr: c = x != C(0) || y != C(0); break;
      default: {
        C r;
        switch (op) {
          case BinaryOp::Add: r = x + alpha * y; break;
          case BinaryOp::Sub: r = x - alpha * y; break;
          case BinaryOp::Mul: r = x * y; break;
          case BinaryOp::Div:
            if constexpr (std::is_integral_v<C>) {
              if (y == 0) {
                *err = kErrDivZero;
                r = 0;
              } else {
                r = x / y;  // floor division, as the CPU kernel
                if constexpr (std::is_signed_v<C>)
                  if ((x % y != 0) && ((x < 0) != (y < 0))) --r;
              }
            } else {
              r = x / y;
            }
            break;
          case BinaryOp::Pow:
            if constexpr (std::is_integral_v<C>) {
              r = 1;
              if constexpr (std::is_signed_v<C>) {
                if (y < 0) {
                  *err = kErrNegPow;
                  r = 0;
                  break;
                }
              }
              C base = x;
              for (C k = y; k; k >>= 1) {
                if (k & 1) r = static_cast<C>(r * base);
                base = static_cast<C>(base * base);
              }
            } else {
              r = m_pow(x, y);
            }
            break;
          case BinaryOp::Maximum: r = nan_max(x, y); break;
          case BinaryOp::Minimum: r = nan_min(x, y); break;
          case BinaryOp::ReluGrad: r = y > C(0) ? x : C(0); break;
          case BinaryOp::LeakyReluGrad: r = y > C(0) ? x : static_cast<C>(x * alpha); break;
          case BinaryOp::SigmoidGrad: r = x * y * (C(1) - y); break;
          case BinaryOp::TanhGrad: r = x * (C(1) - y * y); break;
          default: r = x; break;
        }
        static_cast<T*>(out)[o] = store_as<T>(r);
        return;
      }
    }
    static_cast<bool*>(out)[o] = c;
  }
};

// ================================================================ contiguous operands

// When every operand is contiguous (one merged dim of stride 1; an input may also be one value broadcast,
// stride 0: `x * 0.9`), a thread takes kUnroll elements a
// blockDim apart (coalesced), loads them all, then computes and stores them. The strided kernel's loop
// loads an element's operands, stores its result, then moves on: the next loads cannot pass that store
// (the output may alias an input), so a thread had one element's loads in flight, too few bytes to keep
// an H200's memory busy (a 2^26-float add at 0.70 of a device-to-device cudaMemcpy, 0.67 of PyTorch).
constexpr int kUnroll = 4;

inline unsigned grid_for_unrolled(int64_t n) {
  const int64_t per = int64_t(kThreads) * kUnroll;
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>((n + per - 1) / per, int64_t(1) << 16)));
}

template <typename F>
__global__ void __launch_bounds__(kThreads) contiguous_binary_kernel(int64_t n, int64_t sa, int64_t sb, F f) {
  using C = typename F::C;
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x * kUnroll;
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * blockDim.x * kUnroll + threadIdx.x; base < n; base += step) {
    C x[kUnroll], y[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t i = base + static_cast<int64_t>(u) * blockDim.x;
      x[u] = i < n ? load_as<C>(f.a[i * sa]) : C(0);
      y[u] = i < n ? load_as<C>(f.b[i * sb]) : C(0);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t i = base + static_cast<int64_t>(u) * blockDim.x;
      if (i < n) f.apply(i, x[u], y[u]);
    }
  }
}

template <typename F>
__global__ void __launch_bounds__(kThreads) contiguous_unary_kernel(int64_t n, int64_t si, F f) {
  using C = typename F::C;
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x * kUnroll;
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * blockDim.x * kUnroll + threadIdx.x; base < n; base += step) {
    C x[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t i = base + static_cast<int64_t>(u) * blockDim.x;
      x[u] = i < n ? load_as<C>(f.in[i * si]) : C(0);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t i = base + static_cast<int64_t>(u) * blockDim.x;
      if (i < n) f.apply(i, x[u]);
    }
  }
}

/// The output of `g` is one run of stride 1 and every input one of stride 1 or one value (stride 0).
template <int N>
bool all_contiguous(const Geom<N>& g) {
  if (g.ndim != 1 || g.strides[0][0] != 1) return false;
  for (int k = 1; k < N; ++k)
    if (g.strides[k][0] != 1 && g.strides[k][0] != 0) return false;
  return true;
}

template <typename F>
void launch_binary(int64_t n, const Geom<3>& g, const F& f) {
  if (n <= 0) return;
  if (!all_contiguous(g)) return launch_elementwise(n, g, f);
  contiguous_binary_kernel<F><<<grid_for_unrolled(n), kThreads>>>(n, g.strides[1][0], g.strides[2][0], f);
  TROUPE_CUDA_CHECK(cudaGetLastError());
}

template <typename F>
void launch_unary(int64_t n, const Geom<2>& g, const F& f) {
  if (n <= 0) return;
  if (!all_contiguous(g)) return launch_elementwise(n, g, f);
  contiguous_unary_kernel<F><<<grid_for_unrolled(n), kThreads>>>(n, g.strides[1][0], f);
  TROUPE_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void CudaBackend::unary(UnaryOp op, const Tensor& out, const Tensor& in, double p0, double p1) {
  const int dev = common_device("unary", {&out, &in});
  const bool predicate =
      op == UnaryOp::LogicalNot || op == UnaryOp::IsNan || op == UnaryOp::IsInf || op == UnaryOp::IsFinite;
  if (predicate) {
    if (out.dtype() != kBool)
      throw std::invalid_argument(std::string("[unary] predicate output must be bool, got ") +
                                  dtype_name(out.dtype()));
  } else if (out.dtype() != in.dtype()) {
    throw std::invalid_argument(std::string("[unary] input and output dtypes differ: ") + dtype_name(in.dtype()) +
                                " and " + dtype_name(out.dtype()));
  }
  if (!predicate) {
    if (out.dtype() == kBool) bad_dtype("unary", kBool);
    if (is_integral(out.dtype())) {
      switch (op) {
        case UnaryOp::Neg: case UnaryOp::Abs: case UnaryOp::Sign: case UnaryOp::Square: case UnaryOp::Relu:
        case UnaryOp::Floor: case UnaryOp::Ceil: case UnaryOp::Round: case UnaryOp::Trunc:
          break;
        case UnaryOp::PowScalar:
          if (static_cast<int64_t>(p0) < 0)
            throw std::invalid_argument("[pow] Integers to negative integer powers are not allowed.");
          break;
        default:
          throw std::invalid_argument(std::string("[unary] op not implemented for integer dtype ") +
                                      dtype_name(out.dtype()));
      }
    }
  }
  if (out.numel() == 0) return;
  DeviceGuard g(dev);
  Geom<2> geo = make_geom<2>("unary", {&out, &in});
  const int64_t n = out.numel();
  if (predicate) {
    dispatch_all(in.dtype(), [&](auto tag) {
      using T = dev_t<decltype(tag)>;
      launch_elementwise(n, geo, PredicateF<T>{ptr<bool>(out), ptr<T>(in), op});
    });
    return;
  }
  switch (out.dtype()) {
    case kFloat32: return launch_unary(n, geo, UnaryFloatF<float>{ptr<float>(out), ptr<float>(in), op,
                                                                       static_cast<float>(p0), static_cast<float>(p1)});
    case kFloat64: return launch_unary(n, geo, UnaryFloatF<double>{ptr<double>(out), ptr<double>(in), op, p0, p1});
    case kFloat16: return launch_unary(n, geo, UnaryFloatF<h16>{ptr<h16>(out), ptr<h16>(in), op,
                                                                     static_cast<float>(p0), static_cast<float>(p1)});
    case kBFloat16: return launch_unary(n, geo, UnaryFloatF<b16>{ptr<b16>(out), ptr<b16>(in), op,
                                                                      static_cast<float>(p0), static_cast<float>(p1)});
    case kUInt8: return launch_elementwise(n, geo, UnaryIntF<uint8_t>{ptr<uint8_t>(out), ptr<uint8_t>(in), op,
                                                                     static_cast<int64_t>(p0)});
    case kInt32: return launch_elementwise(n, geo, UnaryIntF<int32_t>{ptr<int32_t>(out), ptr<int32_t>(in), op,
                                                                     static_cast<int64_t>(p0)});
    case kInt64: return launch_elementwise(n, geo, UnaryIntF<int64_t>{ptr<int64_t>(out), ptr<int64_t>(in), op,
                                                                     static_cast<int64_t>(p0)});
    case kBool: break;
  }
  bad_dtype("unary", out.dtype());
}

void CudaBackend::binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b, double alpha) {
  const int dev = common_device("binary", {&out, &a, &b});
  if (a.dtype() != b.dtype())
    throw std::invalid_argument(std::string("[binary kernel] operand dtypes differ: ") + dtype_name(a.dtype()) +
                                " and " + dtype_name(b.dtype()));
  const ScalarType want = is_comparison(op) ? kBool : a.dtype();
  if (out.dtype() != want)
    throw std::invalid_argument(std::string("[binary kernel] output dtype ") + dtype_name(out.dtype()) +
                                " should be " + dtype_name(want));
  if (out.numel() == 0) return;
  DeviceGuard g(dev);
  Geom<3> geo = make_geom<3>("binary", {&out, &a, &b});
  const bool may_fail = !is_floating_point(a.dtype()) && (op == BinaryOp::Div || op == BinaryOp::Pow);
  std::unique_ptr<ErrorFlag> flag;
  if (may_fail) flag = std::make_unique<ErrorFlag>(dev);
  dispatch_all(a.dtype(), [&](auto tag) {
    using T = dev_t<decltype(tag)>;
    using C = math_t<T>;
    BinaryF<T> f{out.data_ptr(), ptr<T>(a), ptr<T>(b), op, static_cast<C>(alpha), flag ? flag->code() : nullptr};
    launch_binary(out.numel(), geo, f);
  });
  if (flag) {
    const int e = flag->read().code;
    if (e == kErrDivZero) throw std::domain_error("[div] ZeroDivisionError: integer division by zero");
    if (e == kErrNegPow) throw std::invalid_argument("[pow] Integers to negative integer powers are not allowed.");
  }
}

void CudaBackend::where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) {
  const int dev = common_device("where", {&out, &cond, &a, &b});
  if (cond.dtype() != kBool)
    throw std::invalid_argument(std::string("[where] condition must be bool, got ") + dtype_name(cond.dtype()));
  if (a.dtype() != out.dtype() || b.dtype() != out.dtype())
    throw std::invalid_argument(std::string("[where] operands must have the output's dtype ") +
                                dtype_name(out.dtype()) + ", got " + dtype_name(a.dtype()) + " and " +
                                dtype_name(b.dtype()));
  if (out.numel() == 0) return;
  DeviceGuard g(dev);
  Geom<4> geo = make_geom<4>("where", {&out, &cond, &a, &b});
  dispatch_size(out.element_size(), [&](auto u) {
    using U = decltype(u);
    launch_elementwise(out.numel(), geo, WhereF<U>{ptr<U>(out), ptr<bool>(cond), ptr<U>(a), ptr<U>(b)});
  });
}

}  // namespace troupe::cuda
