// LayerNorm and GroupNorm over F::layer_norm / F::group_norm.
#include <troupe/nn/modules/normalization.h>

#include <stdexcept>

#include <troupe/nn/functional/normalization.h>
#include <troupe/nn/init.h>
#include <troupe/util/python_format.h>
#include <troupe/tensor/ops.h>

namespace troupe::nn {

LayerNormImpl::LayerNormImpl(const LayerNormOptions& options_) : options(options_) { reset(); }

LayerNormImpl::LayerNormImpl(std::vector<int64_t> normalized_shape, double eps, bool elementwise_affine)
    : LayerNormImpl(LayerNormOptions(std::move(normalized_shape)).eps(eps).elementwise_affine(elementwise_affine)) {}

LayerNormImpl::LayerNormImpl(int64_t normalized_shape, double eps, bool elementwise_affine)
    : LayerNormImpl(std::vector<int64_t>{normalized_shape}, eps, elementwise_affine) {}

void LayerNormImpl::reset() {
  const auto& o = options;
  if (o.elementwise_affine()) {
    TensorOptions topts = TensorOptions().device(o.device());
    if (o.dtype()) topts = topts.dtype(*o.dtype());
    weight = register_parameter("weight", empty(o.normalized_shape(), topts));
    bias = register_parameter("bias", empty(o.normalized_shape(), topts));
  } else {
    weight = register_parameter("weight", Tensor());
    bias = register_parameter("bias", Tensor());
  }
  reset_parameters();
}

void LayerNormImpl::reset_parameters() {
  if (initialization_skipped() || !options.elementwise_affine()) return;
  init::ones_(weight);
  init::zeros_(bias);
}

Tensor LayerNormImpl::forward(const Tensor& input) {
  return functional::layer_norm(
      input, functional::LayerNormFuncOptions(options.normalized_shape()).weight(weight).bias(bias).eps(options.eps()));
}

std::string LayerNormImpl::extra_repr() const {
  return util::py_tuple(options.normalized_shape()) + ", eps=" + util::py_float(options.eps()) +
         ", elementwise_affine=" + util::py_bool(options.elementwise_affine());
}

GroupNormImpl::GroupNormImpl(const GroupNormOptions& options_) : options(options_) { reset(); }

GroupNormImpl::GroupNormImpl(int64_t num_groups, int64_t num_channels, double eps, bool affine)
    : GroupNormImpl(GroupNormOptions(num_groups, num_channels).eps(eps).affine(affine)) {}

void GroupNormImpl::reset() {
  const auto& o = options;
  if (o.num_groups() <= 0 || o.num_channels() % o.num_groups() != 0)
    throw std::invalid_argument("num_channels must be divisible by num_groups, got num_channels=" +
                                std::to_string(o.num_channels()) + " and num_groups=" + std::to_string(o.num_groups()));
  if (o.affine()) {
    TensorOptions topts = TensorOptions().device(o.device());
    if (o.dtype()) topts = topts.dtype(*o.dtype());
    weight = register_parameter("weight", empty({o.num_channels()}, topts));
    bias = register_parameter("bias", empty({o.num_channels()}, topts));
  } else {
    weight = register_parameter("weight", Tensor());
    bias = register_parameter("bias", Tensor());
  }
  reset_parameters();
}

void GroupNormImpl::reset_parameters() {
  if (initialization_skipped() || !options.affine()) return;
  init::ones_(weight);
  init::zeros_(bias);
}

Tensor GroupNormImpl::forward(const Tensor& input) {
  return functional::group_norm(
      input, functional::GroupNormFuncOptions(options.num_groups()).weight(weight).bias(bias).eps(options.eps()));
}

std::string GroupNormImpl::extra_repr() const {
  return std::to_string(options.num_groups()) + ", " + std::to_string(options.num_channels()) +
         ", eps=" + util::py_float(options.eps()) + ", affine=" + util::py_bool(options.affine());
}

}  // namespace troupe::nn
