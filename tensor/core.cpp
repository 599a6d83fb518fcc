// Small pieces of the tensor layer: dtype names and promotion, device parsing, shape printing, Scalar.
#include <sstream>
#include <stdexcept>

#include "array_ref.h"
#include "device.h"
#include "dtype.h"
#include "scalar.h"

namespace troupe {

const char* dtype_name(ScalarType t) {
  switch (t) {
    case kBool: return "bool";
    case kUInt8: return "uint8";
    case kInt32: return "int32";
    case kInt64: return "int64";
    case kFloat16: return "float16";
    case kBFloat16: return "bfloat16";
    case kFloat32: return "float32";
    case kFloat64: return "float64";
  }
  return "unknown";
}

const char* legacy_type_name(ScalarType t) {
  switch (t) {
    case kBool: return "BoolTensor";
    case kUInt8: return "ByteTensor";
    case kInt32: return "IntTensor";
    case kInt64: return "LongTensor";
    case kFloat16: return "HalfTensor";
    case kBFloat16: return "BFloat16Tensor";
    case kFloat32: return "FloatTensor";
    case kFloat64: return "DoubleTensor";
  }
  return "UnknownTensor";
}

std::ostream& operator<<(std::ostream& os, ScalarType t) { return os << "torch." << dtype_name(t); }

ScalarType promote_types(ScalarType a, ScalarType b) {
  if (a == b) return a;
  // float16 with bfloat16 promotes to float32 (neither holds the other)
  if ((a == kFloat16 && b == kBFloat16) || (a == kBFloat16 && b == kFloat16)) return kFloat32;
  // otherwise the lattice order of the enum is the promotion order
  return static_cast<int>(a) > static_cast<int>(b) ? a : b;
}

namespace {
ScalarType g_default_dtype = kFloat32;
}
ScalarType get_default_dtype() { return g_default_dtype; }
void set_default_dtype(ScalarType t) {
  if (!is_floating_point(t))
    throw std::invalid_argument(std::string("[set_default_dtype] only floating-point types are supported as the "
                                            "default type, got ") + dtype_name(t));
  g_default_dtype = t;
}

ScalarType Scalar::dtype() const {
  switch (kind_) {
    case Kind::Bool: return kBool;
    case Kind::Int: return kInt64;
    case Kind::Double: return get_default_dtype();
  }
  return kFloat32;
}

std::ostream& operator<<(std::ostream& os, DeviceType t) { return os << (t == kCPU ? "cpu" : "cuda"); }

Device::Device(const std::string& s) {
  if (s == "cpu" || s == "cpu:0") {
    type = kCPU;
    index = s == "cpu" ? -1 : 0;
    return;
  }
  if (s.rfind("cuda", 0) == 0) {
    type = kCUDA;
    if (s.size() == 4) {
      index = -1;
      return;
    }
    if (s[4] == ':' && s.size() > 5) {
      size_t pos = 0;
      int i = -1;
      try {
        i = std::stoi(s.substr(5), &pos);
      } catch (...) {
        pos = 0;
      }
      if (pos == s.size() - 5 && i >= 0) {
        index = i;
        return;
      }
    }
  }
  throw std::invalid_argument("[Device] expected a device string like 'cpu', 'cuda' or 'cuda:0', got '" + s + "'");
}

std::string Device::str() const {
  if (type == kCPU) return "cpu";
  return index < 0 ? "cuda" : "cuda:" + std::to_string(index());
}

std::ostream& operator<<(std::ostream& os, const Device& d) { return os << d.str(); }

std::string shape_str(IntArrayRef s) {
  std::ostringstream os;
  os << '(';
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << ')';
  return os.str();
}

std::string list_str(IntArrayRef s) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << ']';
  return os.str();
}

}  // namespace troupe
