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

/// Device::type: reads as a DeviceType (`d.type == kCPU`) and is also callable, libtorch's `d.type()`.
struct DeviceTypeField {
  DeviceType value = DeviceType::CPU;
  constexpr DeviceTypeField() = default;
  constexpr DeviceTypeField(DeviceType t) : value(t) {}
  constexpr operator DeviceType() const { return value; }
  constexpr DeviceType operator()() const { return value; }
};

/// Device::index: reads as an int (`d.index == 0`, `d.index = 1`) and is also callable, libtorch's
/// `d.index()`.
struct DeviceIndexField {
  int value = -1;
  constexpr DeviceIndexField() = default;
  constexpr DeviceIndexField(int i) : value(i) {}
  constexpr operator int() const { return value; }
  constexpr int operator()() const { return value; }
};

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
