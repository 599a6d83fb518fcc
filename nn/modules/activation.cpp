// Activation modules (torch/nn/modules/activation.py): forward calls nn::functional, extra_repr
// prints PyTorch's text.
#include <troupe/nn/modules/activation.h>

#include <troupe/nn/functional/activation.h>
#include <troupe/util/python_format.h>

namespace troupe::nn {

namespace F = functional;

Tensor ReLU::forward(const Tensor& input) { return F::relu(input, options); }
std::string ReLU::extra_repr() const { return options.inplace() ? "inplace=True" : ""; }

Tensor LeakyReLU::forward(const Tensor& input) { return F::leaky_relu(input, options); }
std::string LeakyReLU::extra_repr() const {
  return "negative_slope=" + util::py_float(options.negative_slope()) + (options.inplace() ? ", inplace=True" : "");
}

Tensor ELU::forward(const Tensor& input) { return F::elu(input, options); }
std::string ELU::extra_repr() const {
  return "alpha=" + util::py_float(options.alpha()) + (options.inplace() ? ", inplace=True" : "");
}

Tensor GELU::forward(const Tensor& input) { return F::gelu(input, options); }
std::string GELU::extra_repr() const { return "approximate=" + util::py_str(options.approximate()); }

Tensor SiLU::forward(const Tensor& input) { return F::silu(input, options); }
std::string SiLU::extra_repr() const { return options.inplace() ? "inplace=True" : ""; }

Tensor Tanh::forward(const Tensor& input) { return F::tanh(input); }

Tensor Sigmoid::forward(const Tensor& input) { return F::sigmoid(input); }

Tensor Softmax::forward(const Tensor& input) { return F::softmax(input, F::SoftmaxFuncOptions(options.dim())); }
std::string Softmax::extra_repr() const {
  return "dim=" + (options.dim() ? std::to_string(*options.dim()) : std::string("None"));
}

Tensor LogSoftmax::forward(const Tensor& input) {
  return F::log_softmax(input, F::LogSoftmaxFuncOptions(options.dim()));
}
std::string LogSoftmax::extra_repr() const {
  return "dim=" + (options.dim() ? std::to_string(*options.dim()) : std::string("None"));
}

}  // namespace troupe::nn
