// A non-owning view of a contiguous run of values, constructible from a vector, an array, a braced list
// or a single value (c10::ArrayRef's role): the argument type of every shape- and dim-taking function.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <vector>

namespace troupe {

template <typename T>
class ArrayRef {
 public:
  ArrayRef() = default;
  ArrayRef(const T& one) : data_(&one), size_(1) {}
  ArrayRef(const T* data, size_t n) : data_(data), size_(n) {}
  ArrayRef(const std::vector<T>& v) : data_(v.data()), size_(v.size()) {}
  template <size_t N>
  ArrayRef(const std::array<T, N>& a) : data_(a.data()), size_(N) {}
  // The list must outlive the ArrayRef: true for a braced argument of a call.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Winit-list-lifetime"
  ArrayRef(std::initializer_list<T> l) : data_(l.begin()), size_(l.size()) {}
#pragma GCC diagnostic pop

  const T* begin() const { return data_; }
  const T* end() const { return data_ + size_; }
  const T* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  const T& operator[](size_t i) const { return data_[i]; }
  const T& front() const { return data_[0]; }
  const T& back() const { return data_[size_ - 1]; }
  std::vector<T> vec() const { return std::vector<T>(data_, data_ + size_); }
  bool equals(ArrayRef o) const {
    if (size_ != o.size_) return false;
    for (size_t i = 0; i < size_; ++i)
      if (!(data_[i] == o.data_[i])) return false;
    return true;
  }
  bool operator==(ArrayRef o) const { return equals(o); }

 private:
  const T* data_ = nullptr;
  size_t size_ = 0;
};

using IntArrayRef = ArrayRef<int64_t>;

/// Prints a shape as PyTorch does in error messages: `(2, 3)`; one dim prints `(5,)`? no: `(5)`.
std::string shape_str(IntArrayRef s);
/// Prints `[2, 3]` (torch.Size style without the prefix).
std::string list_str(IntArrayRef s);

inline std::ostream& operator<<(std::ostream& os, IntArrayRef s) { return os << list_str(s); }

}  // namespace troupe
