// The CPU backend's fused reductions (Backend::fuses): softmax / log_softmax forward and backward, logsumexp,
// the reverse cumulative sum and the per-row var/mean and 2-norm, over the loops of softmax_kernels.h.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "cpu_backend.h"
#include "softmax_kernels.h"

namespace troupe::cpu {

namespace {

[[noreturn]] void not_for_dtype(const char* op, ScalarType t) {
  throw std::invalid_argument(std::string("[") + op + "] not implemented for dtype " + dtype_name(t));
}

template <typename F>
void dispatch_float(const char* op, ScalarType t, F&& f) {
  switch (t) {
    case kFloat32: f(float{}); return;
    case kFloat64: f(double{}); return;
    case kFloat16: f(Half{}); return;
    case kBFloat16: f(BFloat16{}); return;
    default: not_for_dtype(op, t);
  }
}

/// Writes vals (double) into the contiguous floating tensor t.
void write_doubles(const Tensor& t, const std::vector<double>& vals) {
  dispatch_float("reduce", t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* p = t.data_ptr<T>();
    for (size_t i = 0; i < vals.size(); ++i) p[i] = T(static_cast<opmath_t<T>>(vals[i]));
  });
}

}  // namespace

void CpuBackend::softmax(const Tensor& out, const Tensor& in, int64_t outer, int64_t r, int64_t inner, bool log) {
  dispatch_float(log ? "log_softmax" : "softmax", in.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if (log) softmax_forward_cpu<T, true>(in.data_ptr<T>(), out.data_ptr<T>(), outer, r, inner);
    else softmax_forward_cpu<T, false>(in.data_ptr<T>(), out.data_ptr<T>(), outer, r, inner);
  });
}

void CpuBackend::softmax_backward(const Tensor& grad_in, const Tensor& grad_out, const Tensor& out, int64_t rows,
                                  int64_t r, bool log) {
  dispatch_float(log ? "log_softmax" : "softmax", out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if (log) softmax_backward_cpu<T, true>(grad_out.data_ptr<T>(), out.data_ptr<T>(), grad_in.data_ptr<T>(), rows, r);
    else softmax_backward_cpu<T, false>(grad_out.data_ptr<T>(), out.data_ptr<T>(), grad_in.data_ptr<T>(), rows, r);
  });
}

void CpuBackend::logsumexp(const Tensor& out, const Tensor& in, int64_t outer, int64_t r, int64_t inner) {
  dispatch_float("logsumexp", in.dtype(), [&](auto tag) {
    using T = decltype(tag);
    logsumexp_cpu<T>(in.data_ptr<T>(), out.data_ptr<T>(), outer, r, inner);
  });
}

void CpuBackend::reverse_cumsum(const Tensor& out, const Tensor& in, int64_t outer, int64_t r, int64_t inner) {
  dispatch_all(in.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bool>) not_for_dtype("cumsum", in.dtype());
    else reverse_cumsum_cpu<T>(in.data_ptr<T>(), out.data_ptr<T>(), outer, r, inner);
  });
}

void CpuBackend::var_mean_rows(const Tensor& var, const Tensor& mean, const Tensor& in, int64_t rows, int64_t r,
                               int64_t correction) {
  // fused two-pass moments in double, no temporaries
  std::vector<double> mu(static_cast<size_t>(rows)), m2(static_cast<size_t>(rows));
  dispatch_float("var", in.dtype(), [&](auto tag) {
    using T = decltype(tag);
    row_moments_cpu<T>(in.data_ptr<T>(), rows, r, mu.data(), m2.data());
  });
  const double dof = static_cast<double>(std::max<int64_t>(0, r - correction));
  for (double& v : m2) v /= dof;
  write_doubles(var, m2);
  write_doubles(mean, mu);
}

void CpuBackend::norm2_rows(const Tensor& out, const Tensor& in, int64_t rows, int64_t r) {
  // fused sum of squares in double
  std::vector<double> ss(static_cast<size_t>(rows));
  dispatch_float("norm", in.dtype(), [&](auto tag) {
    using T = decltype(tag);
    row_sumsq_cpu<T>(in.data_ptr<T>(), rows, r, ss.data());
  });
  for (double& v : ss) v = std::sqrt(v);
  write_doubles(out, ss);
}

}  // namespace troupe::cpu
