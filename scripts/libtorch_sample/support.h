// troupe's stand-in for the helpers that libtorch's C++ API tests take from their support.h
// (test/cpp/api/support.h and test/cpp/common/support.h), used only by scripts/libtorch_sample.py.
// Written for troupe: the names are the ones those tests call, the bodies are ours and use only
// troupe's public API. Every sample file gets this header (through prelude.h), so it must keep
// compiling: a helper that needs an API troupe may lack is guarded with a requires-expression.
#pragma once

#include <cmath>
#include <exception>
#include <iostream>
#include <mutex>
#include <sstream>
#include <streambuf>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include <troupe/troupe.h>

// ASSERT_THROWS_WITH(statement, substring): the statement throws, and the message contains substring.
#define ASSERT_THROWS_WITH(statement, substring)                                                   \
  {                                                                                                \
    std::string assert_throws_with_error_message;                                                  \
    try {                                                                                          \
      (void)statement;                                                                             \
      FAIL() << "Expected statement `" #statement "` to throw an exception, but it did not";       \
    } catch (const std::exception& e) {                                                            \
      assert_throws_with_error_message = e.what();                                                 \
    }                                                                                              \
    if (assert_throws_with_error_message.find(substring) == std::string::npos) {                   \
      FAIL() << "Error message \"" << assert_throws_with_error_message                             \
             << "\" did not contain expected substring \"" << substring << "\"";                   \
    }                                                                                              \
  }

namespace troupe::test {

// A container module without a class of its own: add(holder, name) registers a child.
class SimpleContainer : public nn::Cloneable<SimpleContainer> {
 public:
  void reset() override {}

  template <typename ModuleHolder>
  ModuleHolder add(ModuleHolder module_holder, std::string name = std::string()) {
    return nn::Module::register_module(std::move(name), module_holder);
  }
};

// A fixture that seeds the default generator with 0 before each case.
struct SeedingFixture : public ::testing::Test {
  SeedingFixture() { troupe::manual_seed(0); }
};

// Swaps std::cerr's buffer for the given one while alive.
struct CerrRedirect {
  explicit CerrRedirect(std::streambuf* new_buffer) : prev_buffer(std::cerr.rdbuf(new_buffer)) {}
  ~CerrRedirect() { std::cerr.rdbuf(prev_buffer); }

 private:
  std::streambuf* prev_buffer;
};

// Collects warnings while alive. troupe has no warning-handler hook (libtorch's WarningHandler), so
// this captures what is written to std::cerr: one message per line.
struct WarningCapture {
  WarningCapture() : redirect_(buffer_.rdbuf()) {}

  const std::vector<std::string>& messages() {
    messages_.clear();
    std::istringstream in(buffer_.str());
    for (std::string line; std::getline(in, line);) {
      if (!line.empty()) messages_.push_back(line);
    }
    return messages_;
  }

  std::string str() {
    std::string out;
    for (const auto& m : messages()) {
      if (!out.empty()) out += "\n";
      out += m;
    }
    return out;
  }

 private:
  std::ostringstream buffer_;
  CerrRedirect redirect_;
  std::vector<std::string> messages_;
};

inline bool pointer_equal(const Tensor& first, const Tensor& second) {
  return first.data_ptr() == second.data_ptr();
}

// Same sizes, NaNs (and with allow_inf, infinities) in the same places, and every other element
// within 1e-5 (as TestCase.assertEqual for two tensors).
inline void assert_tensor_equal(Tensor a, Tensor b, bool allow_inf = false) {
  ASSERT_TRUE(a.sizes() == b.sizes());
  if (a.numel() == 0) return;
  a = a.to(kDouble);
  b = b.to(kDouble);
  auto nan_a = troupe::isnan(a);
  ASSERT_TRUE(troupe::equal(nan_a, troupe::isnan(b)));
  auto diff = a - b;
  diff.index_put_({nan_a}, 0);
  if (allow_inf) {
    auto inf_a = troupe::isinf(a);
    ASSERT_TRUE(troupe::equal(inf_a, troupe::isinf(b)));
    ASSERT_TRUE(troupe::equal(a.index({inf_a}), b.index({inf_a})));
    diff.index_put_({inf_a}, 0);
  }
  const double max_err = diff.abs().max().template item<double>();
  ASSERT_LE(max_err, 1e-5);
}

// Different sizes, or some element differs by at least 1e-5.
inline void assert_tensor_not_equal(Tensor x, Tensor y) {
  if (x.sizes() != y.sizes()) return;
  ASSERT_GT(x.numel(), 0);
  x = x.to(kDouble);
  y = y.to(kDouble);
  auto nan_x = troupe::isnan(x);
  if (troupe::equal(nan_x, troupe::isnan(y))) {
    auto diff = x - y;
    diff.index_put_({nan_x}, 0);
    const double max_err = diff.abs().max().template item<double>();
    ASSERT_GE(max_err, 1e-5);
  }
}

inline int count_substr_occurrences(const std::string& str, const std::string& substr) {
  int count = 0;
  for (size_t pos = str.find(substr); pos != std::string::npos; pos = str.find(substr, pos + substr.size())) {
    ++count;
  }
  return count;
}

// Sets the default dtype while alive (one guard at a time, across threads).
struct AutoDefaultDtypeMode {
  static std::mutex& default_dtype_mutex() {
    static std::mutex m;
    return m;
  }
  explicit AutoDefaultDtypeMode(ScalarType default_dtype) : lock_(default_dtype_mutex()) {
    prev_default_dtype = troupe::get_default_dtype();
    troupe::set_default_dtype(default_dtype);
  }
  ~AutoDefaultDtypeMode() { troupe::set_default_dtype(prev_default_dtype); }
  std::lock_guard<std::mutex> lock_;
  ScalarType prev_default_dtype;
};

}  // namespace troupe::test
