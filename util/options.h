// TROUPE_ARG: the option fields of layer options structs, spelled as libtorch's TORCH_ARG:
//   struct LinearOptions { TROUPE_ARG(bool, bias) = true; };
//   LinearOptions(4, 3).bias(false).bias()  // setter returns *this, getter returns the value
#pragma once

#include <utility>

/// Declares a setter `name(value)` returning *this, a getter `name()`, and the member `name_`
/// (followed by its default initialiser).
#define TROUPE_ARG(T, name)                                         \
 public:                                                            \
  inline auto name(const T& new_##name)->decltype(*this) {          \
    this->name##_ = new_##name;                                     \
    return *this;                                                   \
  }                                                                 \
  inline auto name(T&& new_##name)->decltype(*this) {               \
    this->name##_ = std::move(new_##name);                          \
    return *this;                                                   \
  }                                                                 \
  inline const T& name() const noexcept { return this->name##_; }   \
  inline T& name() noexcept { return this->name##_; }               \
                                                                    \
 private:                                                           \
  T name##_
