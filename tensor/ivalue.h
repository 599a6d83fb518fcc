// IValue: the tagged value a custom autograd Function keeps in ctx->saved_data, with libtorch's accessors
// (`ctx->saved_data["c"] = 2.0; ... ctx->saved_data["c"].toDouble()`). It holds what such code saves: None,
// a double, an int64, a bool, a string, a tensor or a list of int64.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "array_ref.h"
#include "tensor.h"

namespace troupe {

/// A value of one of a few kinds (c10::IValue's subset). Asking for the wrong kind throws
/// `[IValue::toDouble] expected Double but got Int`.
class IValue {
 public:
  IValue() = default;
  IValue(double v) : v_(v) {}
  IValue(float v) : v_(static_cast<double>(v)) {}
  IValue(int v) : v_(static_cast<int64_t>(v)) {}
  IValue(long v) : v_(static_cast<int64_t>(v)) {}
  IValue(long long v) : v_(static_cast<int64_t>(v)) {}
  /// Unsigned integers (size_t, ...) are kept as int64.
  template <typename T, std::enable_if_t<std::is_integral_v<T> && std::is_unsigned_v<T> && !std::is_same_v<T, bool>, int> = 0>
  IValue(T v) : v_(static_cast<int64_t>(v)) {}
  IValue(bool v) : v_(v) {}
  IValue(std::string v) : v_(std::move(v)) {}
  IValue(const char* v) : v_(std::string(v)) {}
  IValue(Tensor v) : v_(std::move(v)) {}
  IValue(std::vector<int64_t> v) : v_(std::move(v)) {}
  IValue(IntArrayRef v) : v_(v.vec()) {}

  bool isNone() const { return v_.index() == 0; }
  bool isDouble() const { return std::holds_alternative<double>(v_); }
  bool isInt() const { return std::holds_alternative<int64_t>(v_); }
  bool isBool() const { return std::holds_alternative<bool>(v_); }
  bool isString() const { return std::holds_alternative<std::string>(v_); }
  bool isTensor() const { return std::holds_alternative<Tensor>(v_); }
  bool isIntList() const { return std::holds_alternative<std::vector<int64_t>>(v_); }

  double toDouble() const { return get<double>("toDouble"); }
  int64_t toInt() const { return get<int64_t>("toInt"); }
  bool toBool() const { return get<bool>("toBool"); }
  const std::string& toStringRef() const { return get<std::string>("toStringRef"); }
  Tensor toTensor() const { return get<Tensor>("toTensor"); }
  std::vector<int64_t> toIntVector() const { return get<std::vector<int64_t>>("toIntVector"); }
  /// A number of either kind, as a double (c10::IValue::toScalar().to<double>()).
  Scalar toScalar() const;

  /// The kind's name as c10 spells it: "None", "Double", "Int", "Bool", "String", "Tensor", "IntList".
  std::string tagKind() const;

 private:
  template <typename T>
  const T& get(const char* fn) const {
    if (const T* p = std::get_if<T>(&v_)) return *p;
    throw_wrong_kind(fn);
  }
  [[noreturn]] void throw_wrong_kind(const char* fn) const;

  std::variant<std::monostate, double, int64_t, bool, std::string, Tensor, std::vector<int64_t>> v_;
};

}  // namespace troupe
