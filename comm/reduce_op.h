// The one meaning of ReduceOp, elementwise, that every backend reduces with (internal): local and mpi
// combine with these functors (mpi's MPI_Iallreduce too, through user ops for float MIN/MAX), nccl maps
// the same table to ncclRedOp_t (nccl.cpp's nccl_op; NCCL's own MIN/MAX decide signed zeros and NaN).
//   SUM, AVG  a + b (AVG divides by the group size once, after the sum); integers wrap around
//   PRODUCT   a * b; integers wrap around
//   MIN, MAX  floats: a NaN on any rank gives the quiet NaN; MIN(-0, +0) = -0, MAX(-0, +0) = +0; both
//             are commutative to the bit, so ranks that combine in different orders end equal
//   bool      SUM and MAX are OR, PRODUCT and MIN are AND (as NCCL does on 0/1 bytes)
// 16-bit floats are combined in float32 and rounded once (the backends widen them first).
#pragma once

#include <cmath>
#include <limits>
#include <type_traits>

#include <troupe/comm/process_group.h>
#include <troupe/tensor/dtype.h>

namespace troupe::comm::detail {

/// The elementwise combination a ReduceOp comes down to for one dtype.
enum class Combine { Sum, Product, Min, Max, Or, And };

/// SUM and AVG: Sum, ...; on bool: Or (SUM, MAX) or And (PRODUCT, MIN).
constexpr Combine combine_of(ReduceOp op, ScalarType t) {
  if (t == kBool) return (op == ReduceOp::PRODUCT || op == ReduceOp::MIN) ? Combine::And : Combine::Or;
  switch (op) {
    case ReduceOp::SUM: case ReduceOp::AVG: return Combine::Sum;
    case ReduceOp::PRODUCT: return Combine::Product;
    case ReduceOp::MIN: return Combine::Min;
    case ReduceOp::MAX: return Combine::Max;
  }
  return Combine::Sum;
}

/// a + b; integers wrap (through the unsigned type), bool is OR.
template <typename T>
struct SumOf {
  T operator()(T a, T b) const {
    if constexpr (std::is_same_v<T, bool>) {
      return a || b;
    } else if constexpr (std::is_integral_v<T>) {
      using U = std::make_unsigned_t<T>;
      return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
    } else {
      return a + b;
    }
  }
};
/// a * b; integers wrap, bool is AND.
template <typename T>
struct ProductOf {
  T operator()(T a, T b) const {
    if constexpr (std::is_same_v<T, bool>) {
      return a && b;
    } else if constexpr (std::is_integral_v<T>) {
      using U = std::make_unsigned_t<T>;
      return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
    } else {
      return a * b;
    }
  }
};
/// The smaller; floats: -0 beats +0, a NaN gives the quiet NaN (symmetric to the bit).
template <typename T>
struct MinOf {
  T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) {
      if (a < b) return a;
      if (b < a) return b;
      if (a == b) return std::signbit(a) ? a : b;
      return std::numeric_limits<T>::quiet_NaN();
    } else {
      return b < a ? b : a;
    }
  }
};
/// The larger; floats: +0 beats -0, a NaN gives the quiet NaN (symmetric to the bit).
template <typename T>
struct MaxOf {
  T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) {
      if (a > b) return a;
      if (b > a) return b;
      if (a == b) return std::signbit(a) ? b : a;
      return std::numeric_limits<T>::quiet_NaN();
    } else {
      return b > a ? b : a;
    }
  }
};
/// a || b.
template <typename T>
struct OrOf {
  T operator()(T a, T b) const { return static_cast<T>(a || b); }
};
/// a && b.
template <typename T>
struct AndOf {
  T operator()(T a, T b) const { return static_cast<T>(a && b); }
};

/// Calls f(functor) with the functor of `c` on T, so that a loop over elements is compiled once per
/// combination with the functor inlined: `with_combine<T>(c, [&](auto op) { d[i] = op(d[i], s[i]); })`.
template <typename T, typename F>
decltype(auto) with_combine(Combine c, F&& f) {
  switch (c) {
    case Combine::Sum: return f(SumOf<T>{});
    case Combine::Product: return f(ProductOf<T>{});
    case Combine::Min: return f(MinOf<T>{});
    case Combine::Max: return f(MaxOf<T>{});
    case Combine::Or: return f(OrOf<T>{});
    case Combine::And: break;
  }
  return f(AndOf<T>{});
}

/// dst[i] = dst[i] op src[i] for i < n.
template <typename T>
void combine_into(Combine c, T* dst, const T* src, int64_t n) {
  with_combine<T>(c, [&](auto op) {
    for (int64_t i = 0; i < n; ++i) dst[i] = op(dst[i], src[i]);
  });
}

}  // namespace troupe::comm::detail
