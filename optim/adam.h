// Adam (torch.optim.Adam, PyTorch 1.13; spelled as libtorch's torch::optim::Adam):
//
//   optim::Adam opt(model->parameters(), optim::AdamOptions(1e-3).betas({0.9, 0.999}).weight_decay(1e-4));
//
// Per step, for each parameter p with a gradient g (PyTorch's _single_tensor_adam), with t the
// parameter's step count after incrementing it:
//   g = maximize ? -g : g;  if weight_decay != 0: g = g + weight_decay * p
//   m = beta1 * m + (1 - beta1) * g;   v = beta2 * v + (1 - beta2) * g * g
//   if amsgrad: v_max = max(v_max, v), used for v below
//   p = p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
// state_dict: "state.<i>.step" (a float32 scalar, as PyTorch's), ".exp_avg", ".exp_avg_sq",
// ".max_exp_avg_sq" (amsgrad); options "lr", "betas.0", "betas.1", "eps", "weight_decay", "amsgrad",
// "maximize".
#pragma once

#include <array>
#include <memory>
#include <tuple>
#include <vector>

#include <troupe/optim/optimizer.h>
#include <troupe/util/options.h>

namespace troupe::optim {

/// Adam's options (PyTorch's defaults).
struct AdamOptions : public OptimizerFieldOptions<AdamOptions> {
  AdamOptions(double lr = 1e-3) : lr_(lr) {}
  /// Learning rate.
  TROUPE_ARG(double, lr) = 1e-3;

 public:
  /// (beta1, beta2): the decay rates of the gradient's first and second moment estimates.
  typedef std::tuple<double, double> betas_t;
  TROUPE_ARG(betas_t, betas) = std::make_tuple(0.9, 0.999);
  /// Added to the denominator for numerical stability.
  TROUPE_ARG(double, eps) = 1e-8;
  /// L2 penalty added to the gradient.
  TROUPE_ARG(double, weight_decay) = 0;
  /// AMSGrad: normalise by the running maximum of the second moment.
  TROUPE_ARG(bool, amsgrad) = false;
  /// Maximize the objective instead of minimizing it.
  TROUPE_ARG(bool, maximize) = false;

 public:
  /// Every option in PyTorch's param-group order: state_dict write/read and printing use this list.
  static constexpr auto fields() {
    return std::array{
        TROUPE_OPTION_FIELD(AdamOptions, lr),
        TROUPE_OPTION_FIELD(AdamOptions, betas),
        TROUPE_OPTION_FIELD(AdamOptions, eps),
        TROUPE_OPTION_FIELD(AdamOptions, weight_decay),
        TROUPE_OPTION_FIELD(AdamOptions, amsgrad),
        TROUPE_OPTION_FIELD(AdamOptions, maximize)};
  }
};

/// Adam's (and AdamW's) state of one parameter.
struct AdamParamState : public OptimizerCloneableParamState<AdamParamState> {
  /// Steps taken (PyTorch's "step").
  TROUPE_ARG(int64_t, step) = 0;
  /// First moment estimate ("exp_avg").
  TROUPE_ARG(Tensor, exp_avg);
  /// Second moment estimate ("exp_avg_sq").
  TROUPE_ARG(Tensor, exp_avg_sq);
  /// Defined with amsgrad only.
  TROUPE_ARG(Tensor, max_exp_avg_sq);

 public:
  void write(StateDict& out, const std::string& prefix) const override;
  void read(const StateDict& in, const std::string& prefix, const Tensor& param) override;
};

/// Adam: adaptive moment estimation, with L2 weight decay added to the gradient and optional AMSGrad.
class Adam : public Optimizer {
 public:
  /// "Adam".
  std::string name() const override { return "Adam"; }
  /// Errors as PyTorch's ("Invalid learning rate: -1", "Invalid beta parameter at index 0: 1.5"),
  /// checked on `defaults` before the parameters.
  Adam(std::vector<OptimizerParamGroup> param_groups, AdamOptions defaults = {});
  Adam(std::vector<Tensor> params, AdamOptions defaults = {});

  /// One update of every parameter that has a gradient; returns the closure's loss.
  Tensor step(LossClosure closure = nullptr) override;

 protected:
  std::unique_ptr<OptimizerParamState> make_param_state() const override;
};

}  // namespace troupe::optim
