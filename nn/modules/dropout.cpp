// Dropout (torch/nn/modules/dropout.py).
#include <troupe/nn/modules/dropout.h>

#include <stdexcept>

#include <troupe/nn/functional/dropout.h>
#include <troupe/util/python_format.h>

namespace troupe::nn {

DropoutImpl::DropoutImpl(const DropoutOptions& options_) : options(options_) {
  const double p = options.p();
  if (!(p >= 0.0 && p <= 1.0))
    throw std::invalid_argument("dropout probability has to be between 0 and 1, but got " + util::py_float(p));
}

Tensor DropoutImpl::forward(const Tensor& input) {
  return functional::dropout(
      input, functional::DropoutFuncOptions().p(options.p()).training(is_training()).inplace(options.inplace()));
}

std::string DropoutImpl::extra_repr() const {
  return "p=" + util::py_float(options.p()) + ", inplace=" + util::py_bool(options.inplace());
}

}  // namespace troupe::nn
