// TensorDataContainer: what troupe::tensor(...) takes, as libtorch's torch::tensor: a number, or a braced
// list of numbers or of lists, nested to any depth. Each list checks that its elements have one scalar
// type and its sub-lists one shape, with libtorch's messages.
//
//   troupe::tensor(1.5)                  // 0-dim, the default dtype (float32)
//   troupe::tensor({1, 2, 3})            // int64 (integers give int64)
//   troupe::tensor({{1., 2.}, {3., 4.}}) // (2, 2), the default dtype
//   troupe::tensor({true, false})        // bool
//   troupe::tensor({1, 2}, kFloat64)     // dtype and options as given
#pragma once

#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <type_traits>
#include <vector>

#include "array_ref.h"
#include "dtype.h"
#include "scalar.h"
#include "tensor.h"

namespace troupe::detail {

/// The dtype torch::tensor gives values written in C++ type `written` (braced lists, std::vector,
/// ArrayRef alike): int32 and int64 give int64, float32 and float64 the default dtype, others their own.
inline ScalarType literal_dtype(ScalarType written) {
  if (written == kInt32 || written == kInt64) return kInt64;
  if (written == kFloat32 || written == kFloat64) return get_default_dtype();
  return written;
}

/// A number or a (nested) braced list of numbers, with its shape and element scalar type.
class TensorDataContainer {
 public:
  /// `{}`: an empty list, shape (0,).
  TensorDataContainer();
  TensorDataContainer(bool v) : TensorDataContainer(Scalar(v), kBool) {}
  TensorDataContainer(uint8_t v) : TensorDataContainer(Scalar(v), kUInt8) {}
  TensorDataContainer(int v) : TensorDataContainer(Scalar(v), kInt32) {}
  TensorDataContainer(long v) : TensorDataContainer(Scalar(static_cast<int64_t>(v)), kInt64) {}
  TensorDataContainer(long long v) : TensorDataContainer(Scalar(static_cast<int64_t>(v)), kInt64) {}
  TensorDataContainer(float v) : TensorDataContainer(Scalar(v), kFloat32) {}
  TensorDataContainer(double v) : TensorDataContainer(Scalar(v), kFloat64) {}
  TensorDataContainer(Half v) : TensorDataContainer(Scalar(v), kFloat16) {}
  TensorDataContainer(BFloat16 v) : TensorDataContainer(Scalar(v), kBFloat16) {}
  /// A braced list: every element a number, or every element a list of one shape.
  TensorDataContainer(std::initializer_list<TensorDataContainer> list);
  /// A 1-D list of the values in `values`.
  template <class T>
  TensorDataContainer(ArrayRef<T> values) : TensorDataContainer() {
    assign(values.begin(), values.end(), values.size());
  }
  /// A braced list of one number type (also a named std::initializer_list<int64_t> and the like).
  template <class T, std::enable_if_t<std::is_arithmetic_v<T>, int> = 0>
  TensorDataContainer(std::initializer_list<T> values) : TensorDataContainer() {
    assign(values.begin(), values.end(), values.size());
  }

  bool is_scalar() const { return is_scalar_; }
  /// The shape: () for a number, (n, ...) for a list.
  const std::vector<int64_t>& sizes() const { return sizes_; }
  /// The element type as written (int gives kInt32, double kFloat64; an empty list the default dtype).
  ScalarType scalar_type() const { return scalar_type_; }
  /// The dtype troupe::tensor gives without options: int and int64 give int64, float and double the
  /// default dtype, the others their own.
  ScalarType default_dtype() const;
  /// A new contiguous tensor of these values in `opts` (dtype: default_dtype() unless given).
  Tensor to_tensor(TensorOptions opts) const;
  /// The values as written: `{{1, 2}, {3, 4}}`, `1.5`.
  void print(std::ostream& os) const;

 private:
  TensorDataContainer(Scalar v, ScalarType type) : is_scalar_(true), scalar_type_(type), value_(v) {}
  template <class It>
  void assign(It begin, It end, size_t n) {
    sizes_ = {static_cast<int64_t>(n)};
    for (It it = begin; it != end; ++it) elements_.push_back(TensorDataContainer(*it));
    if (!elements_.empty()) scalar_type_ = elements_.front().scalar_type_;
  }
  /// Writes the values in row-major order into p (of dtype `dtype`).
  void fill(void* p, ScalarType dtype, int64_t& offset) const;

  bool is_scalar_ = false;
  std::vector<int64_t> sizes_;
  ScalarType scalar_type_;
  Scalar value_;
  std::vector<TensorDataContainer> elements_;
};

std::ostream& operator<<(std::ostream& os, const TensorDataContainer& c);

}  // namespace troupe::detail
