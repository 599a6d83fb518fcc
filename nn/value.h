// Value: what a Module's forward takes and returns when it is not one tensor (arguments, kwargs,
// tuple outputs), and what forward hooks see.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include <troupe/tensor/tensor.h>

namespace troupe::nn {

/// None, a Tensor, a number, a bool, a string, or a tuple of tensors.
class Value {
 public:
  using TensorTuple = std::vector<Tensor>;

  Value() = default;
  Value(Tensor t) : v_(std::move(t)) {}
  Value(double d) : v_(d) {}
  Value(float d) : v_(static_cast<double>(d)) {}
  Value(int64_t i) : v_(i) {}
  Value(int i) : v_(static_cast<int64_t>(i)) {}
  Value(bool b) : v_(b) {}
  Value(std::string s) : v_(std::move(s)) {}
  Value(const char* s) : v_(std::string(s)) {}
  Value(TensorTuple ts) : v_(std::move(ts)) {}

  bool is_none() const { return v_.index() == 0; }
  bool is_tensor() const { return v_.index() == 1; }
  bool is_double() const { return v_.index() == 2; }
  bool is_int() const { return v_.index() == 3; }
  bool is_bool() const { return v_.index() == 4; }
  bool is_string() const { return v_.index() == 5; }
  bool is_tuple() const { return v_.index() == 6; }

  /// The tensor; throws naming the kind held when it is not one.
  const Tensor& tensor() const;
  Tensor& tensor();
  /// A number (an int converts).
  double to_double() const;
  int64_t to_int() const;
  bool to_bool() const;
  const std::string& str() const;
  /// The tensors of a tuple.
  const TensorTuple& tuple() const;
  TensorTuple& tuple();
  /// Every tensor inside: one for a Tensor, all of a tuple, none otherwise.
  std::vector<Tensor> tensors() const;
  /// "None", "Tensor", "float", "int", "bool", "str" or "tuple" (for error messages).
  std::string kind() const;

  /// Implicit access to the tensor, so that `Tensor y = (*module)({x, mask});` reads naturally.
  operator const Tensor&() const { return tensor(); }

 private:
  std::variant<std::monostate, Tensor, double, int64_t, bool, std::string, TensorTuple> v_;
};

/// Positional arguments of a forward call.
using Args = std::vector<Value>;
/// Keyword arguments of a forward call (name -> value).
using Kwargs = std::map<std::string, Value>;

}  // namespace troupe::nn
