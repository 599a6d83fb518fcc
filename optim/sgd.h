// SGD (torch.optim.SGD, PyTorch 1.13; spelled as libtorch's torch::optim::SGD):
//
//   optim::SGD opt(model->parameters(), optim::SGDOptions(0.1).momentum(0.9));
//   opt.zero_grad(); loss.backward(); opt.step();
//
// Per step, for each parameter p with a gradient g (PyTorch's _single_tensor_sgd):
//   g = maximize ? -g : g;  if weight_decay != 0: g = g + weight_decay * p
//   if momentum != 0: buf = first step ? g : momentum * buf + (1 - dampening) * g
//                     g = nesterov ? g + momentum * buf : buf
//   p = p - lr * g
// state_dict: "state.<i>.momentum_buffer" (when momentum != 0); the options as "param_groups.<g>.lr",
// ".momentum", ".dampening", ".weight_decay", ".nesterov", ".maximize" (bools as 0/1).
#pragma once

#include <array>
#include <memory>
#include <vector>

#include <troupe/optim/optimizer.h>
#include <troupe/util/options.h>

namespace troupe::optim {

/// SGD's options (PyTorch's defaults; lr has none, as PyTorch's `required`).
struct SGDOptions : public OptimizerFieldOptions<SGDOptions> {
  SGDOptions(double lr) : lr_(lr) {}
  /// Learning rate.
  TROUPE_ARG(double, lr);
  /// Momentum factor (0: plain SGD).
  TROUPE_ARG(double, momentum) = 0;
  /// Dampening of the gradient added to the momentum buffer.
  TROUPE_ARG(double, dampening) = 0;
  /// L2 penalty added to the gradient.
  TROUPE_ARG(double, weight_decay) = 0;
  /// Nesterov momentum (needs momentum > 0 and dampening 0).
  TROUPE_ARG(bool, nesterov) = false;
  /// Maximize the objective instead of minimizing it.
  TROUPE_ARG(bool, maximize) = false;

 public:
  /// Every option in PyTorch's param-group order: state_dict write/read and printing use this list.
  static constexpr auto fields() {
    return std::array{
        TROUPE_OPTION_FIELD(SGDOptions, lr),
        TROUPE_OPTION_FIELD(SGDOptions, momentum),
        TROUPE_OPTION_FIELD(SGDOptions, dampening),
        TROUPE_OPTION_FIELD(SGDOptions, weight_decay),
        TROUPE_OPTION_FIELD(SGDOptions, nesterov),
        TROUPE_OPTION_FIELD(SGDOptions, maximize)};
  }
};

/// SGD's state of one parameter: the momentum buffer (undefined while momentum is 0).
struct SGDParamState : public OptimizerCloneableParamState<SGDParamState> {
  /// The momentum buffer (PyTorch's "momentum_buffer").
  TROUPE_ARG(Tensor, momentum_buffer);

 public:
  void write(StateDict& out, const std::string& prefix) const override;
  void read(const StateDict& in, const std::string& prefix, const Tensor& param) override;
};

/// Stochastic gradient descent, optionally with momentum, Nesterov momentum and weight decay.
class SGD : public Optimizer {
 public:
  /// "SGD".
  std::string name() const override { return "SGD"; }
  /// Errors as PyTorch's ("Invalid learning rate: -1", "Nesterov momentum requires a momentum and
  /// zero dampening"), checked on `defaults` before the parameters.
  SGD(std::vector<OptimizerParamGroup> param_groups, SGDOptions defaults);
  SGD(std::vector<Tensor> params, SGDOptions defaults);

  /// One update of every parameter that has a gradient; returns the closure's loss.
  Tensor step(LossClosure closure = nullptr) override;

 protected:
  std::unique_ptr<OptimizerParamState> make_param_state() const override;
};

}  // namespace troupe::optim
