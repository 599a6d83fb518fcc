// nn::functional::dropout, as PyTorch's CPU kernel (ATen _dropout_impl): a Bernoulli(1 - p) mask in the
// input's dtype, divided by 1 - p, multiplied in (MulBackward0).
#include <troupe/nn/functional/dropout.h>
#include <troupe/tensor/tracing.h>

#include <stdexcept>

#include <troupe/util/python_format.h>
#include <troupe/tensor/autograd.h>
#include <troupe/tensor/ops.h>

namespace troupe::nn::functional {

Tensor dropout(const Tensor& input, const DropoutFuncOptions& options) {
  TROUPE_TRACE_OP(options.inplace() ? "aten::dropout_" : "aten::dropout", dropout(input, options), input, options.p(),
                  options.training());
  const double p = options.p();
  const bool inplace = options.inplace();
  if (p < 0.0 || p > 1.0 || p != p)
    throw std::invalid_argument("dropout probability has to be between 0 and 1, but got " + util::py_float(p));
  if (!input.defined()) throw std::invalid_argument("[dropout] got an undefined tensor");
  if (p == 0 || !options.training() || input.numel() == 0) return input;
  Tensor self = input;
  if (p == 1) {
    Tensor zero = zeros({}, input.options());
    return inplace ? self.mul_(zero) : troupe::mul(input, zero);
  }
  Tensor noise;
  {
    NoGradGuard no_grad;
    noise = empty_like(input);
    noise.bernoulli_(1 - p);
    noise.div_(1 - p);
  }
  return inplace ? self.mul_(noise) : troupe::mul(input, noise);
}

}  // namespace troupe::nn::functional
