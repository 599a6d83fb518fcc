// Activation modules (torch/nn/modules/activation.py): forward calls nn::functional, extra_repr
// prints PyTorch's text.
#include <troupe/nn/modules/activation.h>

#include <troupe/nn/functional/activation.h>
#include <troupe/util/python_format.h>

namespace troupe::nn {

namespace F = functional;

Tensor ReLUImpl::forward(const Tensor& input) { return F::relu(input, options); }
std::string ReLUImpl::extra_repr() const { return options.inplace() ? "inplace=True" : ""; }

Tensor LeakyReLUImpl::forward(const Tensor& input) { return F::leaky_relu(input, options); }
std::string LeakyReLUImpl::extra_repr() const {
  return "negative_slope=" + util::py_float(options.negative_slope()) + (options.inplace() ? ", inplace=True" : "");
}

Tensor ELUImpl::forward(const Tensor& input) { return F::elu(input, options); }
std::string ELUImpl::extra_repr() const {
  return "alpha=" + util::py_float(options.alpha()) + (options.inplace() ? ", inplace=True" : "");
}

Tensor GELUImpl::forward(const Tensor& input) { return F::gelu(input, options); }
std::string GELUImpl::extra_repr() const { return "approximate=" + util::py_str(options.approximate()); }

Tensor SiLUImpl::forward(const Tensor& input) { return F::silu(input, options); }
std::string SiLUImpl::extra_repr() const { return options.inplace() ? "inplace=True" : ""; }

Tensor TanhImpl::forward(const Tensor& input) { return F::tanh(input); }

Tensor SigmoidImpl::forward(const Tensor& input) { return F::sigmoid(input); }

Tensor SoftmaxImpl::forward(const Tensor& input) { return F::softmax(input, F::SoftmaxFuncOptions(options.dim())); }
std::string SoftmaxImpl::extra_repr() const {
  return "dim=" + (options.dim() ? std::to_string(*options.dim()) : std::string("None"));
}

Tensor LogSoftmaxImpl::forward(const Tensor& input) {
  return F::log_softmax(input, F::LogSoftmaxFuncOptions(options.dim()));
}
std::string LogSoftmaxImpl::extra_repr() const {
  return "dim=" + (options.dim() ? std::to_string(*options.dim()) : std::string("None"));
}

}  // namespace troupe::nn
