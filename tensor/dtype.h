// Element types: the eight dtypes troupe stores, their C++ types, and PyTorch's promotion rules.
#pragma once

#include <cstdint>
#include <cstring>
#include <ostream>
#include <string>

namespace troupe {

/// The element type of a tensor. Order matters: it is the promotion lattice's order within a category.
enum class ScalarType : int8_t { Bool, UInt8, Int32, Int64, Float16, BFloat16, Float32, Float64 };
using Dtype = ScalarType;

constexpr ScalarType kBool = ScalarType::Bool;
constexpr ScalarType kUInt8 = ScalarType::UInt8;
constexpr ScalarType kByte = ScalarType::UInt8;
constexpr ScalarType kInt32 = ScalarType::Int32;
constexpr ScalarType kInt = ScalarType::Int32;
constexpr ScalarType kInt64 = ScalarType::Int64;
constexpr ScalarType kLong = ScalarType::Int64;
constexpr ScalarType kFloat16 = ScalarType::Float16;
constexpr ScalarType kHalf = ScalarType::Float16;
constexpr ScalarType kBFloat16 = ScalarType::BFloat16;
constexpr ScalarType kFloat32 = ScalarType::Float32;
constexpr ScalarType kFloat = ScalarType::Float32;
constexpr ScalarType kFloat64 = ScalarType::Float64;
constexpr ScalarType kDouble = ScalarType::Float64;
constexpr int kNumScalarTypes = 8;

/// IEEE 754 binary16, stored as its 16 bits; arithmetic goes through float.
struct Half {
  uint16_t x = 0;
  Half() = default;
  Half(float f) : x(from_float(f)) {}
  operator float() const { return to_float(x); }
  static uint16_t from_float(float f);  // round to nearest even, overflow to inf, NaN kept
  static float to_float(uint16_t h);
  static Half from_bits(uint16_t b) { Half h; h.x = b; return h; }
};

/// bfloat16: the top 16 bits of a float32, rounded to nearest even.
struct BFloat16 {
  uint16_t x = 0;
  BFloat16() = default;
  BFloat16(float f) : x(from_float(f)) {}
  operator float() const { return to_float(x); }
  static uint16_t from_float(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return static_cast<uint16_t>(u >> 16);
  }
  static float to_float(uint16_t b) {
    uint32_t u = static_cast<uint32_t>(b) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  static BFloat16 from_bits(uint16_t b) { BFloat16 h; h.x = b; return h; }
};

inline float Half::to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  uint32_t u;
  if (exp == 0) {
    if (man == 0) {
      u = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do { ++e; man <<= 1; } while ((man & 0x400u) == 0);
      u = sign | (static_cast<uint32_t>(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
    }
  } else if (exp == 0x1f) {
    u = sign | 0x7f800000u | (man << 13);
  } else {
    u = sign | ((exp + 127 - 15) << 23) | (man << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t Half::from_float(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (a < 0x38800000u) {  // below 2^-14: subnormal half (or zero)
    // value * 2^24 rounded to nearest even gives the subnormal mantissa
    float af;
    std::memcpy(&af, &a, 4);
    float scaled = af * 16777216.0f;  // exact: power-of-two scaling of a float
    // round half to even on the integer part
    uint32_t m = static_cast<uint32_t>(scaled);
    float rem = scaled - static_cast<float>(m);
    if (rem > 0.5f || (rem == 0.5f && (m & 1u))) ++m;
    return static_cast<uint16_t>(sign | m);
  }
  uint32_t mant_odd = (a >> 13) & 1u;
  a += 0xfffu + mant_odd;  // round to nearest even at bit 13
  a -= (127u - 15u) << 23;
  return static_cast<uint16_t>(sign | (a >> 13));
}

/// Size in bytes of one element.
constexpr size_t element_size(ScalarType t) {
  switch (t) {
    case kBool: case kUInt8: return 1;
    case kFloat16: case kBFloat16: return 2;
    case kInt32: case kFloat32: return 4;
    case kInt64: case kFloat64: return 8;
  }
  return 0;
}

constexpr bool is_floating_point(ScalarType t) {
  return t == kFloat16 || t == kBFloat16 || t == kFloat32 || t == kFloat64;
}
constexpr bool is_integral(ScalarType t, bool include_bool = false) {
  return t == kUInt8 || t == kInt32 || t == kInt64 || (include_bool && t == kBool);
}

/// PyTorch's name for the dtype, as `torch.float32` prints it (without the `torch.` prefix).
const char* dtype_name(ScalarType t);
/// PyTorch's legacy type name used in error messages: `FloatTensor`, `LongTensor`, ...
const char* legacy_type_name(ScalarType t);
std::ostream& operator<<(std::ostream& os, ScalarType t);

/// torch.promote_types: the smallest type both a and b convert to without losing category.
ScalarType promote_types(ScalarType a, ScalarType b);

/// The default floating dtype for factories (torch.get_default_dtype()).
ScalarType get_default_dtype();
void set_default_dtype(ScalarType t);

/// The C++ type stored for each dtype, and the reverse map.
template <ScalarType T> struct ctype_of;
template <> struct ctype_of<kBool> { using type = bool; };
template <> struct ctype_of<kUInt8> { using type = uint8_t; };
template <> struct ctype_of<kInt32> { using type = int32_t; };
template <> struct ctype_of<kInt64> { using type = int64_t; };
template <> struct ctype_of<kFloat16> { using type = Half; };
template <> struct ctype_of<kBFloat16> { using type = BFloat16; };
template <> struct ctype_of<kFloat32> { using type = float; };
template <> struct ctype_of<kFloat64> { using type = double; };

template <typename T> struct dtype_of;
template <> struct dtype_of<bool> { static constexpr ScalarType value = kBool; };
template <> struct dtype_of<uint8_t> { static constexpr ScalarType value = kUInt8; };
template <> struct dtype_of<int32_t> { static constexpr ScalarType value = kInt32; };
template <> struct dtype_of<int64_t> { static constexpr ScalarType value = kInt64; };
template <> struct dtype_of<Half> { static constexpr ScalarType value = kFloat16; };
template <> struct dtype_of<BFloat16> { static constexpr ScalarType value = kBFloat16; };
template <> struct dtype_of<float> { static constexpr ScalarType value = kFloat32; };
template <> struct dtype_of<double> { static constexpr ScalarType value = kFloat64; };

/// The type arithmetic on T is carried out in: float for the 16-bit floats, T otherwise.
template <typename T> struct opmath { using type = T; };
template <> struct opmath<Half> { using type = float; };
template <> struct opmath<BFloat16> { using type = float; };
template <typename T> using opmath_t = typename opmath<T>::type;

/// Calls `f` with a value whose type is the C++ element type of `t`:
/// `dispatch_all(t, [&](auto tag) { using T = decltype(tag); ... });`
template <typename F>
decltype(auto) dispatch_all(ScalarType t, F&& f) {
  switch (t) {
    case kBool: return f(bool{});
    case kUInt8: return f(uint8_t{});
    case kInt32: return f(int32_t{});
    case kInt64: return f(int64_t{});
    case kFloat16: return f(Half{});
    case kBFloat16: return f(BFloat16{});
    case kFloat32: return f(float{});
    case kFloat64: return f(double{});
  }
  return f(float{});
}

}  // namespace troupe
