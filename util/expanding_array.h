// ExpandingArray<D>: a size argument of a layer given as one int (used for every spatial dim) or as D
// ints, as PyTorch's kernel_size=2 / kernel_size=(2, 3); it remembers which, so that extra_repr prints
// what PyTorch prints ("2" or "(2, 3)"). ExpandingArrayWithOptional<D>: the same where a value may be None
// (an adaptive pool's output_size=(5, None) keeps that dim's input size).
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <troupe/tensor/array_ref.h>

namespace troupe {

template <size_t D>
class ExpandingArray {
 public:
  /// One value for every dim (printed as the int).
  ExpandingArray(int64_t v) : single_(true) { values_.fill(v); }
  /// D values (printed as a tuple).
  ExpandingArray(std::initializer_list<int64_t> v) { assign(v.begin(), v.size()); }
  ExpandingArray(const std::vector<int64_t>& v) { assign(v.data(), v.size()); }
  ExpandingArray(IntArrayRef v) { assign(v.data(), v.size()); }

  /// The D values.
  IntArrayRef ref() const { return IntArrayRef(values_.data(), D); }
  operator IntArrayRef() const { return ref(); }
  int64_t operator[](size_t i) const { return values_[i]; }
  const int64_t* begin() const { return values_.data(); }
  const int64_t* end() const { return values_.data() + D; }
  std::vector<int64_t> vec() const { return std::vector<int64_t>(begin(), end()); }
  /// True when given as one int.
  bool is_single() const { return single_; }
  /// As Python prints the argument: "2" when given as one int, else "(2, 3)".
  std::string str() const { return single_ ? std::to_string(values_[0]) : tuple_str(); }
  /// Always the tuple: "(2, 2)" (what _pair(x) prints).
  std::string tuple_str() const {
    std::string s = "(";
    for (size_t i = 0; i < D; ++i) s += (i ? ", " : "") + std::to_string(values_[i]);
    return s + (D == 1 ? ",)" : ")");
  }
  bool operator==(const ExpandingArray& o) const { return values_ == o.values_; }
  bool operator!=(const ExpandingArray& o) const { return values_ != o.values_; }

 private:
  void assign(const int64_t* p, size_t n) {
    if (n != D)
      throw std::invalid_argument("[ExpandingArray] expected " + std::to_string(D) + " values, got " +
                                  list_str(IntArrayRef(p, n)));
    for (size_t i = 0; i < D; ++i) values_[i] = p[i];
  }
  std::array<int64_t, D> values_{};
  bool single_ = false;
};

/// D sizes, each an int or None (std::nullopt), given as one value for every dim or as D values.
template <size_t D>
class ExpandingArrayWithOptional {
 public:
  /// One value for every dim (printed as the int).
  ExpandingArrayWithOptional(int64_t v) : single_(true) { values_.fill(v); }
  /// None for every dim (printed as None).
  ExpandingArrayWithOptional(std::nullopt_t) : single_(true) {}
  /// D values (printed as a tuple).
  ExpandingArrayWithOptional(std::initializer_list<std::optional<int64_t>> v) { assign(v.begin(), v.size()); }
  ExpandingArrayWithOptional(const std::vector<std::optional<int64_t>>& v) { assign(v.data(), v.size()); }
  ExpandingArrayWithOptional(const std::vector<int64_t>& v) {
    std::vector<std::optional<int64_t>> o(v.begin(), v.end());
    assign(o.data(), o.size());
  }
  ExpandingArrayWithOptional(const ExpandingArray<D>& v) : single_(v.is_single()) {
    for (size_t i = 0; i < D; ++i) values_[i] = v[i];
  }

  const std::optional<int64_t>& operator[](size_t i) const { return values_[i]; }
  /// As Python prints the argument: "5", "None", or "(5, None)".
  std::string str() const { return single_ ? item(values_[0]) : tuple_str(); }
  std::string tuple_str() const {
    std::string s = "(";
    for (size_t i = 0; i < D; ++i) s += (i ? ", " : "") + item(values_[i]);
    return s + (D == 1 ? ",)" : ")");
  }
  bool is_single() const { return single_; }

 private:
  static std::string item(const std::optional<int64_t>& v) { return v ? std::to_string(*v) : "None"; }
  void assign(const std::optional<int64_t>* p, size_t n) {
    if (n != D)
      throw std::invalid_argument("[ExpandingArrayWithOptional] expected " + std::to_string(D) + " values, got " +
                                  std::to_string(n));
    for (size_t i = 0; i < D; ++i) values_[i] = p[i];
  }
  std::array<std::optional<int64_t>, D> values_{};
  bool single_ = false;
};

}  // namespace troupe
