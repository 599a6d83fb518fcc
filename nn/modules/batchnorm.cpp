// BatchNorm1d / BatchNorm2d: buffers and the running-average factor of PyTorch's _BatchNorm, over
// F::batch_norm.
#include <troupe/nn/modules/batchnorm.h>

#include <stdexcept>

#include <troupe/nn/functional/normalization.h>
#include <troupe/nn/init.h>
#include <troupe/util/python_format.h>
#include <troupe/tensor/autograd.h>
#include <troupe/tensor/ops.h>

namespace troupe::nn {

BatchNormBase::BatchNormBase(const BatchNormOptions& options_) : options(options_) { reset(); }

void BatchNormBase::reset() {
  const auto& o = options;
  TensorOptions topts = TensorOptions().device(o.device());
  if (o.dtype()) topts = topts.dtype(*o.dtype());
  if (o.affine()) {
    weight = register_parameter("weight", empty({o.num_features()}, topts));
    bias = register_parameter("bias", empty({o.num_features()}, topts));
  } else {
    weight = register_parameter("weight", Tensor());
    bias = register_parameter("bias", Tensor());
  }
  if (o.track_running_stats()) {
    running_mean = register_buffer("running_mean", zeros({o.num_features()}, topts));
    running_var = register_buffer("running_var", ones({o.num_features()}, topts));
    num_batches_tracked =
        register_buffer("num_batches_tracked", zeros({}, TensorOptions().dtype(kInt64).device(o.device())));
  } else {
    running_mean = register_buffer("running_mean", Tensor());
    running_var = register_buffer("running_var", Tensor());
    num_batches_tracked = register_buffer("num_batches_tracked", Tensor());
  }
  reset_parameters();
}

void BatchNormBase::reset_running_stats() {
  if (!options.track_running_stats()) return;
  NoGradGuard no_grad;
  running_mean.zero_();
  running_var.fill_(1);
  num_batches_tracked.zero_();
}

void BatchNormBase::reset_parameters() {
  if (initialization_skipped()) return;
  reset_running_stats();
  if (options.affine()) {
    init::ones_(weight);
    init::zeros_(bias);
  }
}

Tensor BatchNormBase::forward(const Tensor& input) {
  check_input_dim(input);
  const auto& o = options;
  double factor = o.momentum() ? *o.momentum() : 0.0;
  if (is_training() && o.track_running_stats() && num_batches_tracked.defined()) {
    {
      NoGradGuard no_grad;
      num_batches_tracked.add_(1);
    }
    // momentum None: cumulative moving average
    factor = o.momentum() ? *o.momentum() : 1.0 / num_batches_tracked.item<double>();
  }
  // batch statistics in training, and in eval when there are no running statistics
  const bool bn_training = is_training() || (!running_mean.defined() && !running_var.defined());
  const bool pass_stats = !is_training() || o.track_running_stats();
  return functional::batch_norm(
      input, pass_stats ? running_mean : Tensor(), pass_stats ? running_var : Tensor(),
      functional::BatchNormFuncOptions().weight(weight).bias(bias).training(bn_training).momentum(factor).eps(o.eps()));
}

std::string BatchNormBase::extra_repr() const {
  const auto& o = options;
  return std::to_string(o.num_features()) + ", eps=" + util::py_float(o.eps()) +
         ", momentum=" + (o.momentum() ? util::py_float(*o.momentum()) : std::string("None")) +
         ", affine=" + util::py_bool(o.affine()) + ", track_running_stats=" + util::py_bool(o.track_running_stats());
}

void BatchNorm1dImpl::check_input_dim(const Tensor& input) const {
  if (input.dim() != 2 && input.dim() != 3)
    throw std::invalid_argument("expected 2D or 3D input (got " + std::to_string(input.dim()) + "D input)");
}

void BatchNorm2dImpl::check_input_dim(const Tensor& input) const {
  if (input.dim() != 4)
    throw std::invalid_argument("expected 4D input (got " + std::to_string(input.dim()) + "D input)");
}

}  // namespace troupe::nn
