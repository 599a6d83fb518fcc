// Value: accessors with errors naming what was held.
#include <troupe/nn/value.h>

#include <stdexcept>

namespace troupe::nn {

namespace {
[[noreturn]] void wrong_kind(const Value& v, const char* want) {
  throw std::runtime_error(std::string("[Value] expected ") + want + ", got " + v.kind());
}
}  // namespace

const Tensor& Value::tensor() const {
  if (!is_tensor()) wrong_kind(*this, "a Tensor");
  return std::get<Tensor>(v_);
}
Tensor& Value::tensor() {
  if (!is_tensor()) wrong_kind(*this, "a Tensor");
  return std::get<Tensor>(v_);
}
double Value::to_double() const {
  if (is_double()) return std::get<double>(v_);
  if (is_int()) return static_cast<double>(std::get<int64_t>(v_));
  wrong_kind(*this, "a number");
}
int64_t Value::to_int() const {
  if (!is_int()) wrong_kind(*this, "an int");
  return std::get<int64_t>(v_);
}
bool Value::to_bool() const {
  if (!is_bool()) wrong_kind(*this, "a bool");
  return std::get<bool>(v_);
}
const std::string& Value::str() const {
  if (!is_string()) wrong_kind(*this, "a str");
  return std::get<std::string>(v_);
}
const Value::TensorTuple& Value::tuple() const {
  if (!is_tuple()) wrong_kind(*this, "a tuple of tensors");
  return std::get<TensorTuple>(v_);
}
Value::TensorTuple& Value::tuple() {
  if (!is_tuple()) wrong_kind(*this, "a tuple of tensors");
  return std::get<TensorTuple>(v_);
}
std::vector<Tensor> Value::tensors() const {
  if (is_tensor()) return {std::get<Tensor>(v_)};
  if (is_tuple()) return std::get<TensorTuple>(v_);
  return {};
}
std::string Value::kind() const {
  switch (v_.index()) {
    case 0: return "None";
    case 1: return "Tensor";
    case 2: return "float";
    case 3: return "int";
    case 4: return "bool";
    case 5: return "str";
    default: return "tuple";
  }
}

}  // namespace troupe::nn
