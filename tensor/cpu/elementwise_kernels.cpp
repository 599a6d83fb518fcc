// CPU kernels: memory, copy with dtype conversion, fill, and the elementwise unary/binary/where ops.
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "../storage.h"
#include "cpu_backend.h"
#include "loops.h"

namespace troupe::cpu {

void* CpuBackend::allocate(size_t nbytes, Device) { return cpu_allocator::allocate(nbytes); }
void CpuBackend::deallocate(void* p, size_t nbytes, Device) { cpu_allocator::deallocate(p, nbytes); }

namespace {

template <typename To, typename From>
inline To convert(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (std::is_same_v<To, bool>) {
    return static_cast<opmath_t<From>>(v) != opmath_t<From>(0);
  } else if constexpr (std::is_same_v<To, Half> || std::is_same_v<To, BFloat16>) {
    return To(static_cast<float>(static_cast<opmath_t<From>>(v)));
  } else if constexpr (std::is_integral_v<To> && !std::is_integral_v<opmath_t<From>>) {
    // float -> int truncates toward zero (as C and PyTorch do for in-range values)
    return static_cast<To>(static_cast<opmath_t<From>>(v));
  } else {
    return static_cast<To>(static_cast<opmath_t<From>>(v));
  }
}

}  // namespace

void CpuBackend::copy(const Tensor& dst, const Tensor& src) {
  if (dst.numel() == 0) return;
  if (dst.dtype() == src.dtype() && dst.is_contiguous() && src.is_contiguous()) {
    char* d = static_cast<char*>(dst.data_ptr());
    const char* s = static_cast<const char*>(src.data_ptr());
    int64_t n = static_cast<int64_t>(dst.nbytes());
    if (d == s) return;
    parallel_for(0, n, kGrainSize * 8, [&](int64_t b, int64_t e) { std::memcpy(d + b, s + b, e - b); });
    return;
  }
  dispatch_all(dst.dtype(), [&](auto dtag) {
    using D = decltype(dtag);
    dispatch_all(src.dtype(), [&](auto stag) {
      using S = decltype(stag);
      unary_loop<D, S>(dst, src, [](S v) { return convert<D>(v); });
    });
  });
}

void CpuBackend::fill(const Tensor& dst, Scalar v) {
  dispatch_all(dst.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T value = v.to<T>();
    StridedLoop<1> it({&dst});
    it.run([&](char** p, const int64_t* s, int64_t n) {
      if (s[0] == sizeof(T)) {
        T* o = reinterpret_cast<T*>(p[0]);
        for (int64_t i = 0; i < n; ++i) o[i] = value;
      } else {
        for (int64_t i = 0; i < n; ++i) *reinterpret_cast<T*>(p[0] + i * s[0]) = value;
      }
    });
  });
}

namespace {

constexpr double kSqrt1_2 = 0.70710678118654752440;
constexpr double kSqrt2OverPi = 0.79788456080286535588;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;

[[noreturn]] void bad_dtype(const char* what, ScalarType t) {
  throw std::invalid_argument(std::string("[") + what + "] not implemented for dtype " + dtype_name(t));
}

template <typename T>
void unary_float(UnaryOp op, const Tensor& out, const Tensor& in, double p0, double p1) {
  using C = opmath_t<T>;
  auto run = [&](auto f) { unary_loop<T, T>(out, in, [f](T x) { return T(f(static_cast<C>(x))); }); };
  const C a = static_cast<C>(p0), b = static_cast<C>(p1);
  switch (op) {
    case UnaryOp::Neg: return run([](C x) { return -x; });
    case UnaryOp::Abs: return run([](C x) { return std::abs(x); });
    case UnaryOp::Exp: return run([](C x) { return std::exp(x); });
    case UnaryOp::Log: return run([](C x) { return std::log(x); });
    case UnaryOp::Log1p: return run([](C x) { return std::log1p(x); });
    case UnaryOp::Sqrt: return run([](C x) { return std::sqrt(x); });
    case UnaryOp::Rsqrt: return run([](C x) { return C(1) / std::sqrt(x); });
    case UnaryOp::Sin: return run([](C x) { return std::sin(x); });
    case UnaryOp::Cos: return run([](C x) { return std::cos(x); });
    case UnaryOp::Tanh: return run([](C x) { return std::tanh(x); });
    case UnaryOp::Sigmoid: return run([](C x) { return C(1) / (C(1) + std::exp(-x)); });
    case UnaryOp::Relu: return run([](C x) { return x < C(0) ? C(0) : x; });
    case UnaryOp::Gelu: return run([](C x) { return C(0.5) * x * (C(1) + std::erf(x * C(kSqrt1_2))); });
    case UnaryOp::GeluTanh:
      return run([](C x) {
        C inner = C(kSqrt2OverPi) * (x + C(0.044715) * x * x * x);
        return C(0.5) * x * (C(1) + std::tanh(inner));
      });
    case UnaryOp::Silu: return run([](C x) { return x / (C(1) + std::exp(-x)); });
    case UnaryOp::Sign: return run([](C x) { return x != x ? x : C((C(0) < x) - (x < C(0))); });
    case UnaryOp::Reciprocal: return run([](C x) { return C(1) / x; });
    case UnaryOp::Square: return run([](C x) { return x * x; });
    case UnaryOp::Erf: return run([](C x) { return std::erf(x); });
    case UnaryOp::Softplus:
      return run([a, b](C x) { return x * a > b ? x : std::log1p(std::exp(x * a)) / a; });
    case UnaryOp::LeakyRelu: return run([a](C x) { return x > C(0) ? x : x * a; });
    case UnaryOp::Elu: return run([a](C x) { return x > C(0) ? x : a * (std::exp(x) - C(1)); });
    case UnaryOp::PowScalar:
      if (p0 == 2) return run([](C x) { return x * x; });
      if (p0 == 1) return run([](C x) { return x; });
      if (p0 == 0.5) return run([](C x) { return std::sqrt(x); });
      if (p0 == 3) return run([](C x) { return x * x * x; });
      if (p0 == -1) return run([](C x) { return C(1) / x; });
      if (p0 == -2) return run([](C x) { return C(1) / (x * x); });
      return run([a](C x) { return std::pow(x, a); });
    case UnaryOp::RPowScalar: return run([a](C x) { return std::pow(a, x); });
    case UnaryOp::Floor: return run([](C x) { return std::floor(x); });
    case UnaryOp::Ceil: return run([](C x) { return std::ceil(x); });
    case UnaryOp::Round: return run([](C x) { return std::nearbyint(x); });
    case UnaryOp::Trunc: return run([](C x) { return std::trunc(x); });
    case UnaryOp::GeluGrad:
      return run([](C x) {
        C cdf = C(0.5) * (C(1) + std::erf(x * C(kSqrt1_2)));
        C pdf = C(kInvSqrt2Pi) * std::exp(C(-0.5) * x * x);
        return cdf + x * pdf;
      });
    case UnaryOp::GeluTanhGrad:
      return run([](C x) {
        C x3 = x * x * x;
        C inner = C(kSqrt2OverPi) * (x + C(0.044715) * x3);
        C t = std::tanh(inner);
        C left = C(0.5) * x, right = C(1) + t;
        C left_d = C(0.5) * right;
        C tanh_d = C(1) - t * t;
        C inner_d = C(kSqrt2OverPi) * (C(1) + C(3) * C(0.044715) * x * x);
        return left_d + left * tanh_d * inner_d;
      });
    case UnaryOp::SiluGrad:
      return run([](C x) {
        C s = C(1) / (C(1) + std::exp(-x));
        return s * (C(1) + x * (C(1) - s));
      });
    case UnaryOp::SoftplusGrad:
      return run([a, b](C x) {
        C z = std::exp(x * a);
        return x * a > b ? C(1) : z / (z + C(1));
      });
    case UnaryOp::EluGrad: return run([a](C x) { return x > C(0) ? C(1) : a * std::exp(x); });
    default: bad_dtype("unary", out.dtype());
  }
}

template <typename T>
void unary_int(UnaryOp op, const Tensor& out, const Tensor& in, double p0) {
  auto run = [&](auto f) { unary_loop<T, T>(out, in, f); };
  switch (op) {
    case UnaryOp::Neg: return run([](T x) { return static_cast<T>(-x); });
    case UnaryOp::Abs: return run([](T x) { return static_cast<T>(x < 0 ? -x : x); });
    case UnaryOp::Sign: return run([](T x) { return static_cast<T>((T(0) < x) - (x < T(0))); });
    case UnaryOp::Square: return run([](T x) { return static_cast<T>(x * x); });
    case UnaryOp::Relu: return run([](T x) { return static_cast<T>(x < 0 ? 0 : x); });
    case UnaryOp::Floor: case UnaryOp::Ceil: case UnaryOp::Round: case UnaryOp::Trunc:
      return run([](T x) { return x; });
    case UnaryOp::PowScalar: {
      int64_t e = static_cast<int64_t>(p0);
      if (e < 0) throw std::invalid_argument("[pow] Integers to negative integer powers are not allowed.");
      return run([e](T x) {
        T r = 1, base = x;
        for (int64_t k = e; k; k >>= 1) {
          if (k & 1) r = static_cast<T>(r * base);
          base = static_cast<T>(base * base);
        }
        return r;
      });
    }
    default:
      throw std::invalid_argument(std::string("[unary] op not implemented for integer dtype ") +
                                  dtype_name(out.dtype()));
  }
}

}  // namespace

void CpuBackend::unary(UnaryOp op, const Tensor& out, const Tensor& in, double p0, double p1) {
  // predicates: any input dtype, bool output
  if (op == UnaryOp::LogicalNot || op == UnaryOp::IsNan || op == UnaryOp::IsInf || op == UnaryOp::IsFinite) {
    dispatch_all(in.dtype(), [&](auto tag) {
      using T = decltype(tag);
      using C = opmath_t<T>;
      switch (op) {
        case UnaryOp::LogicalNot: unary_loop<bool, T>(out, in, [](T x) { return !(static_cast<C>(x) != C(0)); }); break;
        case UnaryOp::IsNan: unary_loop<bool, T>(out, in, [](T x) { C v = x; return v != v; }); break;
        case UnaryOp::IsInf:
          unary_loop<bool, T>(out, in, [](T x) {
            if constexpr (std::is_floating_point_v<C>) return std::isinf(static_cast<C>(x));
            else return false;
          });
          break;
        default:
          unary_loop<bool, T>(out, in, [](T x) {
            if constexpr (std::is_floating_point_v<C>) return std::isfinite(static_cast<C>(x));
            else return true;
          });
      }
    });
    return;
  }
  dispatch_all(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bool>) {
      bad_dtype("unary", kBool);
    } else if constexpr (std::is_integral_v<T>) {
      unary_int<T>(op, out, in, p0);
    } else {
      unary_float<T>(op, out, in, p0, p1);
    }
  });
}

namespace {

template <typename C>
inline C nan_max(C a, C b) {
  if constexpr (std::is_floating_point_v<C>) {
    if (a != a) return a;
    if (b != b) return b;
  }
  return a > b ? a : b;
}
template <typename C>
inline C nan_min(C a, C b) {
  if constexpr (std::is_floating_point_v<C>) {
    if (a != a) return a;
    if (b != b) return b;
  }
  return a < b ? a : b;
}

template <typename T>
void binary_typed(BinaryOp op, const Tensor& out, const Tensor& x, const Tensor& y, double alpha) {
  using C = std::conditional_t<std::is_same_v<T, bool>, int, opmath_t<T>>;
  auto run = [&](auto f) {
    binary_loop<T, T>(out, x, y, [f](T a, T b) { return static_cast<T>(f(static_cast<C>(a), static_cast<C>(b))); });
  };
  auto cmp = [&](auto f) {
    binary_loop<bool, T>(out, x, y, [f](T a, T b) { return static_cast<bool>(f(static_cast<C>(a), static_cast<C>(b))); });
  };
  const C al = static_cast<C>(alpha);
  switch (op) {
    case BinaryOp::Add:
      if (alpha == 1) return run([](C a, C b) { return a + b; });
      return run([al](C a, C b) { return a + al * b; });
    case BinaryOp::Sub:
      if (alpha == 1) return run([](C a, C b) { return a - b; });
      return run([al](C a, C b) { return a - al * b; });
    case BinaryOp::Mul: return run([](C a, C b) { return a * b; });
    case BinaryOp::Div:
      if constexpr (std::is_integral_v<C>) {
        return run([](C a, C b) {
          if (b == 0) throw std::domain_error("[div] ZeroDivisionError: integer division by zero");
          C q = a / b;  // floor division, as PyTorch's rounding_mode='floor' (true division promotes first)
          if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
          return q;
        });
      } else {
        return run([](C a, C b) { return a / b; });
      }
    case BinaryOp::Pow:
      if constexpr (std::is_integral_v<C>) {
        return run([](C a, C b) {
          if (b < 0) throw std::invalid_argument("[pow] Integers to negative integer powers are not allowed.");
          C r = 1;
          for (C k = b, base = a; k; k >>= 1) {
            if (k & 1) r = r * base;
            base = base * base;
          }
          return r;
        });
      } else {
        return run([](C a, C b) { return std::pow(a, b); });
      }
    case BinaryOp::Maximum: return run([](C a, C b) { return nan_max(a, b); });
    case BinaryOp::Minimum: return run([](C a, C b) { return nan_min(a, b); });
    case BinaryOp::Eq: return cmp([](C a, C b) { return a == b; });
    case BinaryOp::Ne: return cmp([](C a, C b) { return a != b; });
    case BinaryOp::Lt: return cmp([](C a, C b) { return a < b; });
    case BinaryOp::Le: return cmp([](C a, C b) { return a <= b; });
    case BinaryOp::Gt: return cmp([](C a, C b) { return a > b; });
    case BinaryOp::Ge: return cmp([](C a, C b) { return a >= b; });
    case BinaryOp::LogicalAnd: return cmp([](C a, C b) { return a != C(0) && b != C(0); });
    case BinaryOp::LogicalOr: return cmp([](C a, C b) { return a != C(0) || b != C(0); });
    case BinaryOp::ReluGrad: return run([](C g, C v) { return v > C(0) ? g : C(0); });
    case BinaryOp::LeakyReluGrad: return run([al](C g, C v) { return v > C(0) ? g : g * al; });
    case BinaryOp::SigmoidGrad: return run([](C g, C s) { return g * s * (C(1) - s); });
    case BinaryOp::TanhGrad: return run([](C g, C t) { return g * (C(1) - t * t); });
  }
}

}  // namespace

void CpuBackend::binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b, double alpha) {
  if (a.dtype() != b.dtype())
    throw std::invalid_argument(std::string("[binary kernel] operand dtypes differ: ") + dtype_name(a.dtype()) +
                                " and " + dtype_name(b.dtype()));
  dispatch_all(a.dtype(), [&](auto tag) { binary_typed<decltype(tag)>(op, out, a, b, alpha); });
}

void CpuBackend::where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) {
  dispatch_all(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    StridedLoop<4> it({&out, &cond, &a, &b});
    it.run([&](char** p, const int64_t* s, int64_t n) {
      for (int64_t i = 0; i < n; ++i) {
        bool c = *reinterpret_cast<const bool*>(p[1] + i * s[1]);
        *reinterpret_cast<T*>(p[0] + i * s[0]) =
            c ? *reinterpret_cast<const T*>(p[2] + i * s[2]) : *reinterpret_cast<const T*>(p[3] + i * s[3]);
      }
    });
  });
}

}  // namespace troupe::cpu
