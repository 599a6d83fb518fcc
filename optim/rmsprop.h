// RMSprop (torch.optim.RMSprop, PyTorch 1.13; spelled as libtorch's torch::optim::RMSprop):
//
//   optim::RMSprop opt(model->parameters(), optim::RMSpropOptions(1e-2).momentum(0.9).centered(true));
//
// Per step, for each parameter p with a gradient g (PyTorch's _single_tensor_rmsprop):
//   g = maximize ? -g : g;  if weight_decay != 0: g = g + weight_decay * p
//   square_avg = alpha * square_avg + (1 - alpha) * g * g
//   avg = centered ? sqrt(square_avg - grad_avg^2), grad_avg = alpha * grad_avg + (1 - alpha) * g
//                  : sqrt(square_avg);   avg = avg + eps
//   if momentum > 0: buf = momentum * buf + g / avg;  p = p - lr * buf
//   else:            p = p - lr * g / avg
// state_dict: "state.<i>.step" (an int64 scalar: PyTorch keeps a Python int), ".square_avg",
// ".momentum_buffer" (momentum > 0), ".grad_avg" (centered); options "lr", "momentum", "alpha", "eps",
// "centered", "weight_decay", "maximize".
#pragma once

#include <array>
#include <memory>
#include <vector>

#include <troupe/optim/optimizer.h>
#include <troupe/util/options.h>

namespace troupe::optim {

/// RMSprop's options (PyTorch's defaults).
struct RMSpropOptions : public OptimizerFieldOptions<RMSpropOptions> {
  RMSpropOptions(double lr = 1e-2) : lr_(lr) {}
  /// Learning rate.
  TROUPE_ARG(double, lr) = 1e-2;
  /// Smoothing constant of the running averages.
  TROUPE_ARG(double, alpha) = 0.99;
  /// Added to the denominator for numerical stability.
  TROUPE_ARG(double, eps) = 1e-8;
  /// L2 penalty added to the gradient.
  TROUPE_ARG(double, weight_decay) = 0;
  /// Momentum factor (0: none).
  TROUPE_ARG(double, momentum) = 0;
  /// Normalise by the estimated variance of the gradient instead of its second moment.
  TROUPE_ARG(bool, centered) = false;
  /// Maximize the objective instead of minimizing it.
  TROUPE_ARG(bool, maximize) = false;

 public:
  /// Every option in PyTorch's param-group order: state_dict write/read and printing use this list.
  static constexpr auto fields() {
    return std::array{
        TROUPE_OPTION_FIELD(RMSpropOptions, lr),
        TROUPE_OPTION_FIELD(RMSpropOptions, momentum),
        TROUPE_OPTION_FIELD(RMSpropOptions, alpha),
        TROUPE_OPTION_FIELD(RMSpropOptions, eps),
        TROUPE_OPTION_FIELD(RMSpropOptions, centered),
        TROUPE_OPTION_FIELD(RMSpropOptions, weight_decay),
        TROUPE_OPTION_FIELD(RMSpropOptions, maximize)};
  }
};

/// RMSprop's state of one parameter.
struct RMSpropParamState : public OptimizerCloneableParamState<RMSpropParamState> {
  /// Steps taken (PyTorch's "step").
  TROUPE_ARG(int64_t, step) = 0;
  /// Running average of the squared gradient ("square_avg").
  TROUPE_ARG(Tensor, square_avg);
  /// Defined when momentum > 0.
  TROUPE_ARG(Tensor, momentum_buffer);
  /// Defined when centered.
  TROUPE_ARG(Tensor, grad_avg);

 public:
  void write(StateDict& out, const std::string& prefix) const override;
  void read(const StateDict& in, const std::string& prefix, const Tensor& param) override;
};

/// RMSprop (Hinton's lecture 6e), optionally centered and with momentum.
class RMSprop : public Optimizer {
 public:
  /// "RMSprop".
  std::string name() const override { return "RMSprop"; }
  /// Errors as PyTorch's ("Invalid learning rate: -1", "Invalid alpha value: -0.5"), checked on
  /// `defaults` before the parameters.
  RMSprop(std::vector<OptimizerParamGroup> param_groups, RMSpropOptions defaults = {});
  RMSprop(std::vector<Tensor> params, RMSpropOptions defaults = {});

  /// One update of every parameter that has a gradient; returns the closure's loss.
  Tensor step(LossClosure closure = nullptr) override;

 protected:
  std::unique_ptr<OptimizerParamState> make_param_state() const override;
};

}  // namespace troupe::optim
