// Activation modules (torch/nn/modules/activation.py): forward calls nn::functional, extra_repr
// prints PyTorch's text.
#include <troupe/nn/modules/activation.h>

#include <stdexcept>

#include <troupe/nn/functional/activation.h>
#include <troupe/nn/init.h>
#include <troupe/tensor/ops.h>
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

Tensor SoftplusImpl::forward(const Tensor& input) { return F::softplus(input, options); }
std::string SoftplusImpl::extra_repr() const {
  // PyTorch prints the numbers as given; its defaults are the ints 1 and 20
  return "beta=" + util::py_number(options.beta()) + ", threshold=" + util::py_number(options.threshold());
}

void HardtanhImpl::reset() {
  if (options.max_val() <= options.min_val())
    throw std::invalid_argument("[Hardtanh] max_val must be greater than min_val, got min_val=" +
                                util::py_float(options.min_val()) + ", max_val=" + util::py_float(options.max_val()));
}
Tensor HardtanhImpl::forward(const Tensor& input) { return F::hardtanh(input, options); }
std::string HardtanhImpl::extra_repr() const {
  return "min_val=" + util::py_float(options.min_val()) + ", max_val=" + util::py_float(options.max_val()) +
         (options.inplace() ? ", inplace=True" : "");
}

Tensor MishImpl::forward(const Tensor& input) { return F::mish(input); }

PReLUImpl::PReLUImpl(const PReLUOptions& options_) : options(options_) { reset(); }
void PReLUImpl::reset() {
  TensorOptions topts = TensorOptions().device(options.device());
  if (options.dtype()) topts = topts.dtype(*options.dtype());
  weight = register_parameter("weight", empty({options.num_parameters()}, topts));
  reset_parameters();
}
void PReLUImpl::reset_parameters() {
  if (initialization_skipped()) return;
  init::constant_(weight, options.init());
}
Tensor PReLUImpl::forward(const Tensor& input) { return F::prelu(input, weight); }
std::string PReLUImpl::extra_repr() const { return "num_parameters=" + std::to_string(options.num_parameters()); }

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
