// A number passed to an op (`x + 2`, `fill_(0.5)`, `clamp(min)`): integral, floating or boolean.
#pragma once

#include <cstdint>
#include <type_traits>

#include "dtype.h"

namespace troupe {

class Scalar {
 public:
  enum class Kind : int8_t { Bool, Int, Double };
  Scalar() : kind_(Kind::Int), i_(0) {}
  Scalar(bool b) : kind_(Kind::Bool), i_(b) {}
  template <typename T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>, int> = 0>
  Scalar(T v) : kind_(Kind::Int), i_(static_cast<int64_t>(v)) {}
  template <typename T, std::enable_if_t<std::is_floating_point_v<T>, int> = 0>
  Scalar(T v) : kind_(Kind::Double), d_(static_cast<double>(v)) {}
  Scalar(Half h) : kind_(Kind::Double), d_(static_cast<float>(h)) {}
  Scalar(BFloat16 h) : kind_(Kind::Double), d_(static_cast<float>(h)) {}

  Kind kind() const { return kind_; }
  bool is_floating_point() const { return kind_ == Kind::Double; }
  bool is_integral() const { return kind_ == Kind::Int; }
  bool is_boolean() const { return kind_ == Kind::Bool; }
  double to_double() const { return kind_ == Kind::Double ? d_ : static_cast<double>(i_); }
  int64_t to_long() const { return kind_ == Kind::Double ? static_cast<int64_t>(d_) : i_; }
  bool to_bool() const { return kind_ == Kind::Double ? d_ != 0 : i_ != 0; }
  template <typename T>
  T to() const {
    if constexpr (std::is_same_v<T, bool>) return to_bool();
    else if constexpr (std::is_integral_v<T>) return static_cast<T>(to_long());
    else return static_cast<T>(static_cast<opmath_t<T>>(to_double()));
  }
  /// The dtype a tensor made from this number gets: bool, int64 or the default float dtype.
  ScalarType dtype() const;
  Scalar operator-() const { return kind_ == Kind::Double ? Scalar(-d_) : Scalar(-i_); }

 private:
  Kind kind_;
  union {
    int64_t i_;
    double d_;
  };
};

}  // namespace troupe
