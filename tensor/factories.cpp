// Factories that make tensors from sizes and values (the random ones are in random.cpp).
#include <cmath>
#include <stdexcept>

#include "autograd.h"
#include "backend.h"
#include "ops.h"

namespace troupe {

namespace {
void check_sizes(IntArrayRef sizes, const char* op) {
  for (auto s : sizes)
    if (s < 0)
      throw std::invalid_argument(std::string("[") + op + "] Trying to create tensor with negative dimension " +
                                  std::to_string(s) + ": " + list_str(sizes));
}
}  // namespace

namespace detail {
Tensor finish_factory(Tensor t, const TensorOptions& opts) {
  if (opts.has_dtype() && opts.dtype() != t.dtype()) t = t.to(opts.dtype());
  if (opts.device() != t.device()) t = t.to(opts.device());
  if (opts.requires_grad()) t.requires_grad_(true);
  return t;
}
}  // namespace detail

Tensor empty(IntArrayRef sizes, TensorOptions opts) {
  check_sizes(sizes, "empty");
  int64_t n = 1;
  for (auto s : sizes) n *= s;
  ScalarType dt = opts.dtype();
  auto storage = std::make_shared<StorageImpl>(static_cast<size_t>(n) * element_size(dt), opts.device());
  auto sz = sizes.vec();
  auto st = contiguous_strides(sz);
  auto impl = std::make_shared<TensorImpl>(std::move(storage), std::move(sz), std::move(st), 0, dt);
  Tensor t(std::move(impl));
  if (opts.requires_grad()) t.requires_grad_(true);
  return t;
}

Tensor empty_strided(IntArrayRef sizes, IntArrayRef strides, TensorOptions opts) {
  check_sizes(sizes, "empty_strided");
  if (sizes.size() != strides.size())
    throw std::invalid_argument("[empty_strided] sizes " + list_str(sizes) + " and strides " + list_str(strides) +
                                " differ in length");
  int64_t extent = 1;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == 0) { extent = 0; break; }
    extent += (sizes[i] - 1) * strides[i];
  }
  ScalarType dt = opts.dtype();
  auto storage = std::make_shared<StorageImpl>(static_cast<size_t>(extent) * element_size(dt), opts.device());
  Tensor t(std::make_shared<TensorImpl>(std::move(storage), sizes.vec(), strides.vec(), 0, dt));
  if (opts.requires_grad()) t.requires_grad_(true);
  return t;
}

Tensor full(IntArrayRef sizes, Scalar v, TensorOptions opts) {
  if (!opts.has_dtype()) opts = opts.dtype(v.dtype());
  Tensor t = empty(sizes, opts.requires_grad(false));
  backend(t).fill(t, v);
  if (opts.requires_grad()) t.requires_grad_(true);
  return t;
}

Tensor zeros(IntArrayRef sizes, TensorOptions opts) {
  Tensor t = empty(sizes, opts.requires_grad(false));
  backend(t).fill(t, Scalar(0));
  if (opts.requires_grad()) t.requires_grad_(true);
  return t;
}

Tensor ones(IntArrayRef sizes, TensorOptions opts) {
  Tensor t = empty(sizes, opts.requires_grad(false));
  backend(t).fill(t, Scalar(1));
  if (opts.requires_grad()) t.requires_grad_(true);
  return t;
}

namespace {
TensorOptions like(const Tensor& t, const std::optional<TensorOptions>& o) {
  TensorOptions r = t.options();
  if (o) {
    if (o->has_dtype()) r = r.dtype(o->dtype());
    r = r.device(o->device() == Device(kCPU) && !t.is_cpu() ? t.device() : o->device());
    r = r.requires_grad(o->requires_grad());
  }
  return r;
}
}  // namespace

Tensor empty_like(const Tensor& t, std::optional<TensorOptions> o) { return empty(t.sizes(), like(t, o)); }
Tensor zeros_like(const Tensor& t, std::optional<TensorOptions> o) { return zeros(t.sizes(), like(t, o)); }
Tensor ones_like(const Tensor& t, std::optional<TensorOptions> o) { return ones(t.sizes(), like(t, o)); }
Tensor full_like(const Tensor& t, Scalar v, std::optional<TensorOptions> o) { return full(t.sizes(), v, like(t, o)); }

Tensor arange(Scalar end, TensorOptions opts) { return arange(Scalar(0), end, Scalar(1), opts); }

Tensor arange(Scalar start, Scalar end, Scalar step, TensorOptions opts) {
  double s = start.to_double(), e = end.to_double(), st = step.to_double();
  if (st == 0) throw std::invalid_argument("[arange] step must be nonzero");
  if ((st > 0 && e < s) || (st < 0 && e > s))
    throw std::invalid_argument("[arange] upper bound and larger bound inconsistent with step sign: start=" +
                                std::to_string(s) + ", end=" + std::to_string(e) + ", step=" + std::to_string(st));
  bool all_int = start.is_integral() && end.is_integral() && step.is_integral();
  if (!opts.has_dtype()) opts = opts.dtype(all_int ? kInt64 : get_default_dtype());
  int64_t n;
  if (all_int) {
    int64_t a = start.to_long(), b = end.to_long(), c = step.to_long();
    n = c > 0 ? (b - a + c - 1) / c : (a - b - c - 1) / (-c);
  } else {
    n = static_cast<int64_t>(std::ceil((e - s) / st));
  }
  if (n < 0) n = 0;
  Tensor t = empty({n}, opts.requires_grad(false));
  dispatch_all(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bool>) {
      throw std::invalid_argument("[arange] not implemented for bool");
    } else {
      Tensor c = t.is_cpu() ? t : empty({n}, TensorOptions().dtype(t.dtype()));
      T* p = static_cast<T*>(c.data_ptr());
      if (all_int) {
        int64_t a = start.to_long(), st_i = step.to_long();
        for (int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(a + i * st_i);
      } else {
        for (int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(static_cast<opmath_t<T>>(s + i * st));
      }
      if (!t.is_cpu()) t.copy_(c);
    }
  });
  if (opts.requires_grad()) t.requires_grad_(true);
  return t;
}

Tensor linspace(Scalar start, Scalar end, int64_t steps, TensorOptions opts) {
  if (steps < 0) throw std::invalid_argument("[linspace] number of steps must be non-negative, got " + std::to_string(steps));
  Tensor t64 = empty({steps}, TensorOptions().dtype(kFloat64));
  double a = start.to_double(), b = end.to_double();
  double* p = t64.data_ptr<double>();
  if (steps == 1) {
    p[0] = a;
  } else if (steps > 1) {
    // PyTorch fills the first half from start and the second half from end, so both ends are exact
    double step = (b - a) / static_cast<double>(steps - 1);
    int64_t half = steps / 2;
    for (int64_t i = 0; i < steps; ++i) p[i] = i < half ? a + step * i : b - step * (steps - 1 - i);
  }
  return detail::finish_factory(t64.to(opts.dtype()), opts.dtype(opts.dtype()));
}

Tensor eye(int64_t n, TensorOptions opts) { return eye(n, n, opts); }

Tensor eye(int64_t n, int64_t m, TensorOptions opts) {
  if (n < 0 || m < 0)
    throw std::invalid_argument("[eye] n and m must be non-negative, got n=" + std::to_string(n) + ", m=" + std::to_string(m));
  Tensor t = zeros({n, m}, opts.requires_grad(false));
  Tensor diag = t.as_strided({std::min(n, m)}, {m + 1}, 0);
  backend(diag).fill(diag, Scalar(1));
  if (opts.requires_grad()) t.requires_grad_(true);
  return t;
}

Tensor tensor(detail::TensorDataContainer data, TensorOptions opts) { return data.to_tensor(opts); }

Tensor scalar_tensor(Scalar v, TensorOptions opts) {
  if (!opts.has_dtype()) opts = opts.dtype(v.dtype());
  return full({}, v, opts);
}

Tensor from_blob(void* data, IntArrayRef sizes, TensorOptions opts, std::function<void(void*)> deleter) {
  return from_blob(data, sizes, contiguous_strides(sizes.vec()), opts, std::move(deleter));
}

Tensor from_blob(void* data, IntArrayRef sizes, IntArrayRef strides, TensorOptions opts,
                 std::function<void(void*)> deleter) {
  check_sizes(sizes, "from_blob");
  int64_t extent = 1;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == 0) { extent = 0; break; }
    extent += (sizes[i] - 1) * strides[i];
  }
  ScalarType dt = opts.dtype();
  auto storage = std::make_shared<StorageImpl>(data, static_cast<size_t>(extent) * element_size(dt), opts.device(),
                                               std::move(deleter));
  Tensor t(std::make_shared<TensorImpl>(std::move(storage), sizes.vec(), strides.vec(), 0, dt));
  if (opts.requires_grad()) t.requires_grad_(true);
  return t;
}

}  // namespace troupe
