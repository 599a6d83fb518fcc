// TensorDataContainer (tensor_data.h): troupe::tensor's braced lists and numbers, libtorch's semantics.
#include "tensor_data.h"

#include <cmath>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>

#include "ops.h"

namespace troupe::detail {

namespace {

// c10's ScalarType names, which libtorch's messages print ("Int", "Double"): legacy_type_name less "Tensor".
std::string c10_name(ScalarType t) {
  std::string n = legacy_type_name(t);
  return n.substr(0, n.size() - 6);
}

std::string join_sizes(const std::vector<int64_t>& sizes) {
  std::string out;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (i) out += ' ';
    out += std::to_string(sizes[i]);
  }
  return out;
}

template <class T>
const char* type_name() {
  if constexpr (std::is_same_v<T, uint8_t>) return "uint8_t";
  else if constexpr (std::is_same_v<T, int32_t>) return "int";
  else return "int64_t";
}

// Scalar -> T as libtorch's checked conversion: an integral target refuses a value it cannot hold.
template <class T>
T checked(const Scalar& v) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    const double d = v.to_double();
    const bool fits = v.is_floating_point()
                          ? (std::isnan(d) || (d > static_cast<double>(std::numeric_limits<T>::lowest()) - 1 &&
                                               d < static_cast<double>(std::numeric_limits<T>::max()) + 1))
                          : (v.to_long() >= static_cast<int64_t>(std::numeric_limits<T>::lowest()) &&
                             (v.to_long() < 0 ||
                              static_cast<uint64_t>(v.to_long()) <= static_cast<uint64_t>(std::numeric_limits<T>::max())));
    if (!fits)
      throw std::runtime_error(std::string("value cannot be converted to type ") + type_name<T>() +
                               " without overflow");
  }
  return v.to<T>();
}

}  // namespace

TensorDataContainer::TensorDataContainer() : sizes_{0}, scalar_type_(get_default_dtype()) {}

TensorDataContainer::TensorDataContainer(std::initializer_list<TensorDataContainer> list)
    : scalar_type_(list.size() ? list.begin()->scalar_type_ : get_default_dtype()), elements_(list) {
  const TensorDataContainer* first = list.size() ? list.begin() : nullptr;
  // Shapes first, then scalar types, in libtorch's order.
  for (const auto& e : list) {
    if (e.sizes_ != first->sizes_) {
      std::ostringstream m;
      m << "Expected all sub-lists to have sizes: " << join_sizes(first->sizes_) << " (e.g. " << *first
        << "), but got sub-list " << e << " with sizes: " << join_sizes(e.sizes_);
      throw std::invalid_argument(m.str());
    }
    if (e.scalar_type_ != scalar_type_) {
      std::ostringstream m;
      m << "Expected all elements of the tensor to have the same scalar type: " << c10_name(scalar_type_)
        << ", but got element of scalar type: " << c10_name(e.scalar_type_);
      throw std::invalid_argument(m.str());
    }
  }
  sizes_ = {static_cast<int64_t>(list.size())};
  if (first) sizes_.insert(sizes_.end(), first->sizes_.begin(), first->sizes_.end());
}

ScalarType TensorDataContainer::default_dtype() const { return literal_dtype(scalar_type_); }

void TensorDataContainer::fill(void* p, ScalarType dtype, int64_t& offset) const {
  if (is_scalar_) {
    dispatch_all(dtype, [&](auto tag) {
      using T = decltype(tag);
      static_cast<T*>(p)[offset] = checked<T>(value_);
    });
    ++offset;
    return;
  }
  for (const auto& e : elements_) e.fill(p, dtype, offset);
}

Tensor TensorDataContainer::to_tensor(TensorOptions opts) const {
  const ScalarType dtype = opts.has_dtype() ? opts.dtype() : default_dtype();
  Tensor t = empty(sizes_, TensorOptions().dtype(dtype));
  int64_t offset = 0;
  fill(t.data_ptr(), dtype, offset);
  return finish_factory(t, opts.dtype(dtype));
}

void TensorDataContainer::print(std::ostream& os) const {
  if (is_scalar_) {
    if (value_.is_boolean()) os << (value_.to_bool() ? "true" : "false");
    else if (value_.is_integral()) os << value_.to_long();
    else os << value_.to_double();
    return;
  }
  os << "{";
  for (size_t i = 0; i < elements_.size(); ++i) {
    if (i) os << ", ";
    elements_[i].print(os);
  }
  os << "}";
}

std::ostream& operator<<(std::ostream& os, const TensorDataContainer& c) {
  c.print(os);
  return os;
}

}  // namespace troupe::detail
