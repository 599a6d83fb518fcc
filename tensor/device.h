// Where a tensor's storage lives: the CPU, or a CUDA device by index.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

namespace troupe {

enum class DeviceType : int8_t { CPU = 0, CUDA = 1 };
constexpr DeviceType kCPU = DeviceType::CPU;
constexpr DeviceType kCUDA = DeviceType::CUDA;
constexpr int kNumDeviceTypes = 2;

/// "cpu" or "cuda", as libtorch prints a DeviceType.
std::ostream& operator<<(std::ostream& os, DeviceType t);

/// A field of Device that reads and assigns as a T (`d.type == kCPU`, `d.index = 1`) and is also
/// callable, as libtorch spells it (`d.type()`, `d.index()`).
template <class T, T kDefault>
struct CallableField {
  T value = kDefault;
  constexpr CallableField() = default;
  constexpr CallableField(T v) : value(v) {}
  constexpr operator T() const { return value; }
  constexpr T operator()() const { return value; }
};
using DeviceTypeField = CallableField<DeviceType, DeviceType::CPU>;
using DeviceIndexField = CallableField<int, -1>;

/// A device: `cpu`, or `cuda:N`. Parses PyTorch's strings ("cpu", "cpu:0", "cuda", "cuda:1").
struct Device {
  DeviceTypeField type;
  DeviceIndexField index;  // -1: the current device of that type

  Device() = default;
  Device(DeviceType t, int i = -1) : type(t), index(i) {}
  Device(const std::string& s);
  Device(const char* s) : Device(std::string(s)) {}

  bool is_cpu() const { return type == kCPU; }
  bool is_cuda() const { return type == kCUDA; }
  /// True when an index was given (libtorch's has_index()).
  bool has_index() const { return index >= 0; }
  /// libtorch's set_index().
  void set_index(int i) { index = i; }
  bool operator==(const Device& o) const {
    return type == o.type && (type == kCPU || index() == o.index() || index < 0 || o.index < 0);
  }
  bool operator!=(const Device& o) const { return !(*this == o); }
  /// "cpu" or "cuda:0".
  std::string str() const;
};

std::ostream& operator<<(std::ostream& os, const Device& d);

}  // namespace troupe
