// Argument checks (dim wrapping, defined, same device), error prefixes and raw (autograd-free) tensors shared
// by the op files of tensor/; internal, not a public header.
#pragma once

#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "autograd.h"
#include "tensor.h"
#include "tensor_impl.h"

namespace troupe::op_detail {

/// "[op] ", the start of every error message.
inline std::string op_prefix(const char* op) { return std::string("[") + op + "] "; }

/// "[op] msg".
inline std::string err(const char* op, const std::string& msg) { return op_prefix(op) + msg; }

/// d wrapped into [0, ndim) (a 0-dim tensor counts as one dim); throws PyTorch's out-of-range message.
inline int64_t wrap_dim(int64_t d, int64_t ndim, const char* op) {
  int64_t n = ndim <= 0 ? 1 : ndim;
  if (d < -n || d >= n) {
    std::ostringstream os;
    os << "[" << op << "] Dimension out of range (expected to be in range of [" << -n << ", " << n - 1
       << "], but got " << d << ")";
    throw std::out_of_range(os.str());
  }
  return d < 0 ? d + n : d;
}

/// A tensor over t's storage with the given geometry: no autograd, no view tracking (kernel arguments).
inline Tensor raw_view(const Tensor& t, std::vector<int64_t> sizes, std::vector<int64_t> strides, int64_t offset) {
  return Tensor(std::make_shared<TensorImpl>(t.impl()->storage, std::move(sizes), std::move(strides), offset, t.dtype()));
}

/// A contiguous version of t (t itself when it already is), outside the graph.
inline Tensor contiguous_raw(const Tensor& t) {
  if (t.is_contiguous()) return t;
  NoGradGuard ng;
  return t.detach().contiguous();
}

inline void check_defined(const Tensor& t, const char* op, const char* what) {
  if (!t.defined()) throw std::invalid_argument(op_prefix(op) + what + " is an undefined tensor");
}

inline void check_same_device(const char* op, const Tensor& a, const Tensor& b) {
  if (a.device() != b.device())
    throw std::invalid_argument(op_prefix(op) +
                                "Expected all tensors to be on the same device, but found at least two devices, " +
                                a.device().str() + " and " + b.device().str() + "!");
}

}  // namespace troupe::op_detail
