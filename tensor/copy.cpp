// Copies: contiguous, clone, dtype/device conversion, copy_, fill_, zero_.
#include <stdexcept>

#include "autograd.h"
#include "backend.h"
#include "ops.h"

namespace troupe {

using autograd::variable_list;

Tensor contiguous(const Tensor& t) {
  if (t.is_contiguous()) return t;
  return clone(t);
}

Tensor clone(const Tensor& t) {
  Tensor out = empty(t.sizes(), t.options());
  backend(t).copy(out, t);
  if (autograd::any_requires_grad({&t}))
    autograd::record("CloneBackward0", {t}, out, [](const variable_list& g) { return variable_list{g[0]}; }, false);
  return out;
}

Tensor to(const Tensor& t, Device device, ScalarType dtype, bool copy) {
  bool same_device = t.device() == device;
  if (same_device && t.dtype() == dtype && !copy) return t;
  Tensor out;
  if (same_device) {
    out = empty(t.sizes(), t.options().dtype(dtype));
    backend(t).copy(out, t);
  } else {
    // cross-device: convert dtype on the source side, then a contiguous byte copy
    Tensor src = t.dtype() == dtype ? t.contiguous() : t.to(dtype).contiguous();
    out = empty(t.sizes(), TensorOptions().dtype(dtype).device(device));
    Backend& b = device.is_cpu() ? backend(src) : backend(device.type);
    b.copy_between(out, src);
  }
  if (autograd::any_requires_grad({&t}) && is_floating_point(dtype)) {
    Device src_dev = t.device();
    ScalarType src_dt = t.dtype();
    autograd::record("ToCopyBackward0", {t}, out,
                     [src_dev, src_dt](const variable_list& g) { return variable_list{g[0].to(src_dev, src_dt)}; },
                     false);
  }
  return out;
}

Tensor& Tensor::copy_(const Tensor& src, bool) {
  if (!src.defined()) throw std::invalid_argument("[copy_] source tensor is undefined");
  autograd::check_inplace(*this, "copy_");
  Tensor s = src;
  if (!s.sizes().equals(sizes())) {
    try {
      s = troupe::expand(src.detach(), sizes());
    } catch (const std::exception&) {
      throw std::invalid_argument("[copy_] source of shape " + shape_str(src.sizes()) +
                                  " cannot be broadcast to destination of shape " + shape_str(sizes()));
    }
  } else {
    s = src.detach();
  }
  if (s.device() == device()) {
    // a source that overlaps this destination is copied out first
    if (s.impl()->storage == impl()->storage && !(s.is_same(*this))) s = s.clone();
    backend(*this).copy(*this, s);
  } else {
    Tensor tmp = s.to(device(), dtype()).contiguous();
    backend(*this).copy(*this, tmp);
  }
  bump_version();
  if (autograd::GradMode::is_enabled() && (requires_grad() || src.requires_grad())) {
    auto src_sizes = src.sizes().vec();
    ScalarType src_dt = src.dtype();
    Device src_dev = src.device();
    autograd::record_inplace("CopyBackwards", *this, {src}, [src_sizes, src_dt, src_dev](const variable_list& g) {
      return variable_list{zeros_like(g[0]), sum_to(g[0], src_sizes).to(src_dev, src_dt)};
    }, false);
  }
  return *this;
}

Tensor& Tensor::fill_(Scalar v) {
  autograd::check_inplace(*this, "fill_");
  backend(*this).fill(*this, v);
  bump_version();
  if (requires_grad() || (is_view() && Tensor(impl()->view_base).requires_grad()))
    autograd::record_inplace("FillBackward0", *this, {},
                             [](const variable_list& g) { return variable_list{zeros_like(g[0])}; }, false);
  return *this;
}

Tensor& Tensor::fill_(const Tensor& v) {
  if (v.dim() != 0)
    throw std::invalid_argument("[fill_] fill_ only supports 0-dimension value tensor but got tensor with " +
                                std::to_string(v.dim()) + " dimensions.");
  return fill_(v.item());
}

Tensor& Tensor::zero_() { return fill_(Scalar(0)); }

}  // namespace troupe
