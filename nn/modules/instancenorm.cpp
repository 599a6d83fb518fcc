// InstanceNorm1d / InstanceNorm2d: PyTorch's _InstanceNorm (buffers, input checks) over F::instance_norm.
#include <troupe/nn/modules/instancenorm.h>

#include <stdexcept>

#include <troupe/nn/functional/normalization.h>
#include <troupe/nn/init.h>
#include <troupe/tensor/autograd.h>
#include <troupe/tensor/ops.h>
#include <troupe/tensor/warning.h>
#include <troupe/util/python_format.h>

namespace troupe::nn {

InstanceNormBase::InstanceNormBase(const InstanceNormOptions& options_) : options(options_) { reset(); }

void InstanceNormBase::reset() {
  const auto& o = options;
  TensorOptions topts = TensorOptions().device(o.device());
  if (o.dtype()) topts = topts.dtype(*o.dtype());
  weight = register_parameter("weight", o.affine() ? empty({o.num_features()}, topts) : Tensor());
  bias = register_parameter("bias", o.affine() ? empty({o.num_features()}, topts) : Tensor());
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

void InstanceNormBase::reset_running_stats() {
  if (!options.track_running_stats()) return;
  NoGradGuard no_grad;
  running_mean.zero_();
  running_var.fill_(1);
  num_batches_tracked.zero_();
}

void InstanceNormBase::reset_parameters() {
  if (initialization_skipped()) return;
  reset_running_stats();
  if (options.affine()) {
    init::ones_(weight);
    init::zeros_(bias);
  }
}

Tensor InstanceNormBase::forward(const Tensor& input) {
  const auto& o = options;
  const int64_t unbatched = no_batch_dim();
  if (!input.defined()) throw std::invalid_argument("[" + name() + "] got an undefined tensor");
  if (input.dim() != unbatched && input.dim() != unbatched + 1)
    throw std::invalid_argument("expected " + std::to_string(unbatched) + "D or " + std::to_string(unbatched + 1) +
                                "D input (got " + std::to_string(input.dim()) + "D input)");
  const int64_t feature_dim = input.dim() - unbatched;
  if (input.size(feature_dim) != o.num_features()) {
    if (o.affine())
      throw std::invalid_argument("expected input's size at dim=" + std::to_string(feature_dim) +
                                  " to match num_features (" + std::to_string(o.num_features()) +
                                  "), but got: " + std::to_string(input.size(feature_dim)) + ".");
    TROUPE_WARN("input's size at dim=", feature_dim,
                " does not match num_features. You can silence this warning by not passing in num_features, which "
                "is not used because affine=False");
  }
  const bool batched = input.dim() == unbatched + 1;
  Tensor out = functional::instance_norm(batched ? input : input.unsqueeze(0),
                                         functional::InstanceNormFuncOptions()
                                             .running_mean(running_mean)
                                             .running_var(running_var)
                                             .weight(weight)
                                             .bias(bias)
                                             .use_input_stats(is_training() || !o.track_running_stats())
                                             .momentum(o.momentum())
                                             .eps(o.eps()));
  return batched ? out : out.squeeze(0);
}

std::string InstanceNormBase::extra_repr() const {
  const auto& o = options;
  return std::to_string(o.num_features()) + ", eps=" + util::py_float(o.eps()) +
         ", momentum=" + util::py_float(o.momentum()) + ", affine=" + util::py_bool(o.affine()) +
         ", track_running_stats=" + util::py_bool(o.track_running_stats());
}

}  // namespace troupe::nn
