// Opt-in spellings of libtorch's c10 helpers for code ported from libtorch: c10::irange, c10::str,
// c10::optional / c10::nullopt, c10::IValue, c10::Warning and its handlers, TORCH_WARN. No troupe header
// includes this one (a translation unit that also includes libtorch, as bench/ does, must not see it).
#pragma once

#include <algorithm>
#include <cstddef>
#include <iterator>
#include <optional>
#include <type_traits>

#include <troupe/tensor/array_ref.h>
#include <troupe/tensor/ivalue.h>
#include <troupe/tensor/warning.h>

namespace c10 {

/// The integers [begin, end) for a range-for (c10::integer_range).
template <typename I>
class integer_range {
  static_assert(std::is_integral_v<I>, "c10::irange takes integers");

 public:
  class iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = I;
    using difference_type = std::ptrdiff_t;
    using pointer = const I*;
    using reference = I;
    explicit iterator(I v) : v_(v) {}
    I operator*() const { return v_; }
    iterator& operator++() {
      ++v_;
      return *this;
    }
    iterator operator++(int) {
      iterator old = *this;
      ++v_;
      return old;
    }
    bool operator==(const iterator& o) const { return v_ == o.v_; }
    bool operator!=(const iterator& o) const { return v_ != o.v_; }

   private:
    I v_;
  };
  integer_range(I begin, I end) : begin_(begin), end_(end) {}
  iterator begin() const { return iterator(begin_); }
  iterator end() const { return iterator(end_); }

 private:
  I begin_, end_;
};

/// 0, 1, ..., end - 1 (empty when end <= 0): `for (const auto i : c10::irange(n))`.
template <typename I, std::enable_if_t<std::is_integral_v<I>, int> = 0>
integer_range<I> irange(I end) {
  return {I(), std::max(I(), end)};
}
/// begin, ..., end - 1, in end's type (empty when end <= begin).
template <typename I1, typename I2, std::enable_if_t<std::is_integral_v<I1> && std::is_integral_v<I2>, int> = 0>
integer_range<I2> irange(I1 begin, I2 end) {
  return {static_cast<I2>(begin), std::max(static_cast<I2>(begin), end)};
}

/// The arguments streamed into one string: c10::str("got ", n, " items").
using troupe::detail::str;

template <typename T>
using optional = std::optional<T>;
using std::make_optional;
using std::nullopt;

using troupe::ArrayRef;
using troupe::IntArrayRef;
using troupe::IValue;
using troupe::SourceLocation;
using troupe::Warning;
using troupe::WarningHandler;
namespace WarningUtils = troupe::WarningUtils;
using troupe::warn;

}  // namespace c10

/// ATen's namespace: `at::Tensor`, `at::kFloat`, `at::zeros` name troupe's.
namespace at = troupe;

#ifndef TORCH_WARN
/// libtorch's TORCH_WARN: TROUPE_WARN.
#define TORCH_WARN(...) TROUPE_WARN(__VA_ARGS__)
#endif
#ifndef TORCH_WARN_ONCE
#define TORCH_WARN_ONCE(...) TROUPE_WARN_ONCE(__VA_ARGS__)
#endif
