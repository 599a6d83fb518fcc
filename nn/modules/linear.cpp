// Linear, Flatten, Unflatten (torch/nn/modules/linear.py, flatten.py).
#include <troupe/nn/modules/linear.h>

#include <cmath>
#include <stdexcept>

#include <troupe/nn/functional/linear.h>
#include <troupe/nn/init.h>
#include <troupe/util/python_format.h>
#include <troupe/tensor/ops.h>

namespace troupe::nn {

LinearImpl::LinearImpl(const LinearOptions& options_) : options(options_) { reset(); }

LinearImpl::LinearImpl(int64_t in_features, int64_t out_features, bool bias)
    : LinearImpl(LinearOptions(in_features, out_features).bias(bias)) {}

void LinearImpl::reset() {
  if (options.in_features() < 0 || options.out_features() < 0)
    throw std::invalid_argument("[Linear] in_features and out_features must be non-negative, got in_features=" +
                                std::to_string(options.in_features()) +
                                ", out_features=" + std::to_string(options.out_features()));
  TensorOptions opts = TensorOptions().device(options.device());
  if (options.dtype()) opts = opts.dtype(*options.dtype());
  weight = register_parameter("weight", empty({options.out_features(), options.in_features()}, opts));
  bias = register_parameter("bias", options.bias() ? empty({options.out_features()}, opts) : Tensor());
  reset_parameters();
}

void LinearImpl::reset_parameters() {
  if (initialization_skipped()) return;
  // kaiming_uniform_ with a = sqrt(5) is U(-1/sqrt(fan_in), 1/sqrt(fan_in)); see pytorch/pytorch#57109
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    const int64_t fan_in = init::calculate_fan_in_and_fan_out(weight).first;
    const double bound = fan_in > 0 ? 1 / std::sqrt(static_cast<double>(fan_in)) : 0;
    init::uniform_(bias, -bound, bound);
  }
}

Tensor LinearImpl::forward(const Tensor& input) { return functional::linear(input, weight, bias); }

std::string LinearImpl::extra_repr() const {
  return "in_features=" + std::to_string(options.in_features()) +
         ", out_features=" + std::to_string(options.out_features()) + ", bias=" + util::py_bool(bias.defined());
}

Tensor FlattenImpl::forward(const Tensor& input) { return input.flatten(options.start_dim(), options.end_dim()); }

std::string FlattenImpl::extra_repr() const {
  return "start_dim=" + std::to_string(options.start_dim()) + ", end_dim=" + std::to_string(options.end_dim());
}

Tensor UnflattenImpl::forward(const Tensor& input) { return input.unflatten(options.dim(), options.unflattened_size()); }

std::string UnflattenImpl::extra_repr() const {
  return "dim=" + std::to_string(options.dim()) + ", unflattened_size=" + util::py_tuple(options.unflattened_size());
}

}  // namespace troupe::nn
