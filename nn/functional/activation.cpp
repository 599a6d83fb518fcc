// nn::functional activations: thin compositions of the tensor library's ops, plus the in-place forms
// and the legacy implicit softmax dim.
#include <troupe/nn/functional/activation.h>
#include <troupe/tensor/tracing.h>

#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include <troupe/tensor/autograd.h>
#include <troupe/tensor/ops.h>
#include <troupe/tensor/warning.h>
#include <troupe/util/python_format.h>

namespace troupe::nn::functional {

namespace {

// Writes op(input) into input and returns it. When input needs a gradient, op runs on a clone so that
// what op saves for backward is not the tensor overwritten here (copy_ then routes the gradient).
Tensor inplace_unary(const Tensor& input, const std::function<Tensor(const Tensor&)>& op) {
  Tensor self = input;
  const bool track = autograd::GradMode::is_enabled() && input.requires_grad();
  Tensor y = op(track ? input.clone() : input);
  self.copy_(y);
  return self;
}

// torch.nn.functional._get_softmax_dim: 0 for 0-, 1- and 3-D inputs, else 1 (with a warning).
int64_t softmax_dim(const char* name, const Tensor& input, std::optional<int64_t> dim) {
  if (dim) return *dim;
  TROUPE_WARN_ONCE("Implicit dimension choice for ", name,
                   " has been deprecated. Change the call to include dim=X as an argument.");
  const int64_t nd = input.dim();
  return (nd == 0 || nd == 1 || nd == 3) ? 0 : 1;
}

}  // namespace

Tensor relu(const Tensor& input, const ReLUFuncOptions& options) {
  if (options.inplace()) {
    TROUPE_TRACE_OP("aten::relu_", relu(input, options), input);
    Tensor self = input;
    self.relu_();
    return self;
  }
  return troupe::relu(input);
}

Tensor leaky_relu(const Tensor& input, const LeakyReLUFuncOptions& options) {
  const double negative_slope = options.negative_slope();
  TROUPE_TRACE_OP(options.inplace() ? "aten::leaky_relu_" : "aten::leaky_relu", leaky_relu(input, options), input,
                  negative_slope);
  if (options.inplace())
    return inplace_unary(input, [negative_slope](const Tensor& x) { return troupe::leaky_relu(x, negative_slope); });
  return troupe::leaky_relu(input, negative_slope);
}

Tensor elu(const Tensor& input, const ELUFuncOptions& options) {
  const double alpha = options.alpha();
  if (options.inplace()) return inplace_unary(input, [alpha](const Tensor& x) { return troupe::elu(x, alpha); });
  return troupe::elu(input, alpha);
}

Tensor softplus(const Tensor& input, const SoftplusFuncOptions& options) {
  return troupe::softplus(input, options.beta(), options.threshold());
}

Tensor hardtanh(const Tensor& input, const HardtanhFuncOptions& options) {
  const double lo = options.min_val(), hi = options.max_val();
  if (lo > hi)
    throw std::invalid_argument("[hardtanh] min_val cannot be greater than max_val, got min_val=" +
                                util::py_number(lo) + ", max_val=" + util::py_number(hi));
  auto op = [lo, hi](const Tensor& x) {
    // PyTorch's hardtanh_backward passes the gradient only strictly inside (min_val, max_val)
    Tensor inside = logical_and(gt(x, lo), lt(x, hi));
    return where(inside, x, troupe::clamp(x.detach(), lo, hi));
  };
  if (options.inplace()) return inplace_unary(input, op);
  return op(input);
}

Tensor mish(const Tensor& input) { return input * troupe::tanh(troupe::softplus(input)); }

Tensor prelu(const Tensor& input, const Tensor& weight) {
  if (!input.defined() || !weight.defined()) throw std::invalid_argument("[prelu] got an undefined tensor");
  if (weight.dim() > 1)
    throw std::invalid_argument("prelu: Expected `weight` to be a scalar or 1D tensor, but got: ndim = " +
                                std::to_string(weight.dim()));
  Tensor w = weight;
  const int64_t n = weight.numel();
  if (n != 1) {
    const int64_t channels = input.dim() >= 2 ? input.size(1) : 1;
    if (n != channels)
      throw std::invalid_argument("Mismatch of parameter numbers and input channel size. Found parameter numbers = " +
                                  std::to_string(n) + " and channel size = " + std::to_string(channels) + ".");
    // (C) as (1, C, 1, ...) against (N, C, *)
    std::vector<int64_t> shape(static_cast<size_t>(input.dim()), 1);
    shape[1] = n;
    w = weight.reshape(shape);
  } else {
    w = weight.reshape({});
  }
  return where(gt(input, 0), input, w * input);
}

Tensor gelu(const Tensor& input, const GELUFuncOptions& options) { return troupe::gelu(input, options.approximate()); }

Tensor silu(const Tensor& input, const SiLUFuncOptions& options) {
  if (options.inplace()) return inplace_unary(input, [](const Tensor& x) { return troupe::silu(x); });
  return troupe::silu(input);
}

Tensor tanh(const Tensor& input) { return troupe::tanh(input); }

Tensor sigmoid(const Tensor& input) { return troupe::sigmoid(input); }

Tensor softmax(const Tensor& input, const SoftmaxFuncOptions& options) {
  return troupe::softmax(input, softmax_dim("softmax", input, options.dim()), options.dtype());
}

Tensor log_softmax(const Tensor& input, const LogSoftmaxFuncOptions& options) {
  return troupe::log_softmax(input, softmax_dim("log_softmax", input, options.dim()), options.dtype());
}

}  // namespace troupe::nn::functional
