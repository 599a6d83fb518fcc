// AdamW (torch.optim.AdamW, PyTorch 1.13; spelled as libtorch's torch::optim::AdamW): Adam with the
// weight decay decoupled from the gradient (Loshchilov & Hutter):
//
//   optim::AdamW opt(model->parameters(), optim::AdamWOptions(1e-3).weight_decay(1e-2));
//
// Per step, for each parameter p with a gradient g (PyTorch's _single_tensor_adamw):
//   p = p * (1 - lr * weight_decay), then Adam's update with no weight decay on g (adam.h).
// state_dict: as Adam's ("step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"; the same options).
#pragma once

#include <array>
#include <memory>
#include <tuple>
#include <vector>

#include <troupe/optim/adam.h>
#include <troupe/optim/optimizer.h>
#include <troupe/util/options.h>

namespace troupe::optim {

/// AdamW's options (PyTorch's defaults: weight_decay 1e-2, unlike Adam's 0).
struct AdamWOptions : public OptimizerFieldOptions<AdamWOptions> {
  AdamWOptions(double lr = 1e-3) : lr_(lr) {}
  /// Learning rate.
  TROUPE_ARG(double, lr) = 1e-3;

 public:
  /// (beta1, beta2): the decay rates of the gradient's first and second moment estimates.
  typedef std::tuple<double, double> betas_t;
  TROUPE_ARG(betas_t, betas) = std::make_tuple(0.9, 0.999);
  /// Added to the denominator for numerical stability.
  TROUPE_ARG(double, eps) = 1e-8;
  /// Decoupled weight decay: p *= 1 - lr * weight_decay each step.
  TROUPE_ARG(double, weight_decay) = 1e-2;
  /// AMSGrad: normalise by the running maximum of the second moment.
  TROUPE_ARG(bool, amsgrad) = false;
  /// Maximize the objective instead of minimizing it.
  TROUPE_ARG(bool, maximize) = false;

 public:
  /// Every option in PyTorch's param-group order: state_dict write/read and printing use this list.
  static constexpr auto fields() {
    return std::array{
        TROUPE_OPTION_FIELD(AdamWOptions, lr),
        TROUPE_OPTION_FIELD(AdamWOptions, betas),
        TROUPE_OPTION_FIELD(AdamWOptions, eps),
        TROUPE_OPTION_FIELD(AdamWOptions, weight_decay),
        TROUPE_OPTION_FIELD(AdamWOptions, amsgrad),
        TROUPE_OPTION_FIELD(AdamWOptions, maximize)};
  }
};

/// AdamW's state of one parameter: the same as Adam's.
using AdamWParamState = AdamParamState;

/// AdamW: Adam with decoupled weight decay.
class AdamW : public Optimizer {
 public:
  /// "AdamW".
  std::string name() const override { return "AdamW"; }
  /// Errors as Adam's, checked on `defaults` before the parameters.
  AdamW(std::vector<OptimizerParamGroup> param_groups, AdamWOptions defaults = {});
  AdamW(std::vector<Tensor> params, AdamWOptions defaults = {});

  /// One update of every parameter that has a gradient; returns the closure's loss.
  Tensor step(LossClosure closure = nullptr) override;

 protected:
  std::unique_ptr<OptimizerParamState> make_param_state() const override;
};

}  // namespace troupe::optim
