#include <troupe/nn/utils/clip_grad.h>

#include <charconv>
#include <cmath>
#include <stdexcept>
#include <string>

#include <troupe/tensor/autograd.h>
#include <troupe/tensor/ops.h>

namespace troupe::nn::utils {

namespace {

// Python's str(float): "2.0", "inf", "0.5".
std::string py_float_str(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), v);
  std::string s(buf, res.ptr);
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s;
}

}  // namespace

Tensor clip_grad_norm_(const std::vector<Tensor>& parameters, double max_norm, double norm_type,
                       bool error_if_nonfinite) {
  NoGradGuard no_grad;
  std::vector<Tensor> grads;
  for (const auto& p : parameters)
    if (p.defined() && p.grad().defined()) grads.push_back(p.grad().detach());
  if (grads.empty()) return scalar_tensor(0.0, TensorOptions().dtype(kFloat32));
  const Device device = grads[0].device();
  Tensor total_norm;
  if (std::isinf(norm_type) && norm_type > 0) {
    std::vector<Tensor> norms;
    for (const auto& g : grads) norms.push_back(g.abs().max().to(device));
    total_norm = norms.size() == 1 ? norms[0] : max(stack(norms));
  } else {
    std::vector<Tensor> norms;
    for (const auto& g : grads) norms.push_back(norm(g, norm_type).to(device));
    total_norm = norm(stack(norms), norm_type);
  }
  if (error_if_nonfinite && logical_or(isnan(total_norm), isinf(total_norm)).item<bool>())
    throw std::runtime_error("The total norm of order " + py_float_str(norm_type) +
                             " for gradients from `parameters` is non-finite, so it cannot be clipped. To disable "
                             "this error and scale the gradients by the non-finite norm anyway, set "
                             "`error_if_nonfinite=False`");
  // max_norm / (total_norm + 1e-6), as PyTorch evaluates `float / tensor`: reciprocal, then multiply.
  Tensor clip_coef = reciprocal(total_norm + 1e-6) * max_norm;
  Tensor clip_coef_clamped = clamp(clip_coef, std::nullopt, Scalar(1.0));
  for (auto& g : grads) g.mul_(clip_coef_clamped.to(g.device()));
  return total_norm;
}

Tensor clip_grad_norm_(const Tensor& parameter, double max_norm, double norm_type, bool error_if_nonfinite) {
  return clip_grad_norm_(std::vector<Tensor>{parameter}, max_norm, norm_type, error_if_nonfinite);
}

void clip_grad_value_(const std::vector<Tensor>& parameters, double clip_value) {
  NoGradGuard no_grad;
  for (const auto& p : parameters) {
    if (!p.defined() || !p.grad().defined()) continue;
    Tensor g = p.grad().detach();
    g.clamp_(Scalar(-clip_value), Scalar(clip_value));
  }
}

void clip_grad_value_(const Tensor& parameter, double clip_value) {
  clip_grad_value_(std::vector<Tensor>{parameter}, clip_value);
}

}  // namespace troupe::nn::utils
