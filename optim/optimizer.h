// Optimizer base (torch.optim.Optimizer; spelled as libtorch's torch::optim::Optimizer): parameter
// groups with per-group options, per-parameter state, zero_grad, step, and state_dict /
// load_state_dict as a flat nn::StateDict, so that a model, its optimizer and its scheduler save into
// one checkpoint file and a resumed run continues bit for bit.
//
// state_dict layout (PyTorch's {'state': {i: {...}}, 'param_groups': [{..., 'params': [i...]}]},
// flattened; i counts parameters across groups in order, as PyTorch numbers them):
//   state.<i>.<key>                 per-parameter state tensors ("momentum_buffer", "exp_avg", "step")
//   param_groups.<g>.<option>       every option as a float64 scalar ("lr", "momentum", "betas.0")
//   param_groups.<g>.initial_lr     when a scheduler set it
//   param_groups.<g>.params         int64 vector of the group's parameter indices
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <troupe/nn/state_dict.h>
#include <troupe/tensor/tensor.h>

namespace troupe::optim {

using nn::StateDict;

/// Writes `value` as a float64 scalar tensor under `key` (options and scalar state: doubles are exact).
void write_scalar(StateDict& out, const std::string& key, double value);
/// Reads a scalar written by write_scalar; the error names the missing or malformed key.
double read_scalar(const StateDict& in, const std::string& key);
/// Reads `key` when present.
std::optional<double> read_optional_scalar(const StateDict& in, const std::string& key);

/// The options of one parameter group. Each optimizer derives its own (SGDOptions, AdamOptions...).
class OptimizerOptions {
 public:
  virtual ~OptimizerOptions() = default;
  virtual std::unique_ptr<OptimizerOptions> clone() const = 0;
  virtual double get_lr() const = 0;
  virtual void set_lr(double lr) = 0;
  /// Writes every option under prefix + name ("param_groups.0.lr").
  virtual void write(StateDict& out, const std::string& prefix) const = 0;
  /// Reads what write() wrote.
  virtual void read(const StateDict& in, const std::string& prefix) = 0;
};

/// Gives an options struct its clone().
template <class Derived>
class OptimizerCloneableOptions : public OptimizerOptions {
 public:
  std::unique_ptr<OptimizerOptions> clone() const override {
    return std::make_unique<Derived>(static_cast<const Derived&>(*this));
  }
};

/// The state an optimizer keeps for one parameter (momentum buffer, Adam's moments, step count).
class OptimizerParamState {
 public:
  virtual ~OptimizerParamState() = default;
  virtual std::unique_ptr<OptimizerParamState> clone() const = 0;
  /// Writes the state under prefix + key ("state.3.exp_avg"); undefined tensors are left out.
  virtual void write(StateDict& out, const std::string& prefix) const = 0;
  /// Reads what write() wrote; tensors are copied to `param`'s device (and floating dtype).
  virtual void read(const StateDict& in, const std::string& prefix, const Tensor& param) = 0;
};

/// Gives a state struct its clone().
template <class Derived>
class OptimizerCloneableParamState : public OptimizerParamState {
 public:
  std::unique_ptr<OptimizerParamState> clone() const override {
    return std::make_unique<Derived>(static_cast<const Derived&>(*this));
  }
};

/// A list of parameters with its own options (nullptr: the optimizer's defaults, filled in by
/// add_param_group).
class OptimizerParamGroup {
 public:
  OptimizerParamGroup(std::vector<Tensor> params) : params_(std::move(params)) {}
  OptimizerParamGroup(std::vector<Tensor> params, std::unique_ptr<OptimizerOptions> options)
      : params_(std::move(params)), options_(std::move(options)) {}
  OptimizerParamGroup(const OptimizerParamGroup& other);
  OptimizerParamGroup& operator=(const OptimizerParamGroup& other);
  OptimizerParamGroup(OptimizerParamGroup&&) = default;
  OptimizerParamGroup& operator=(OptimizerParamGroup&&) = default;

  bool has_options() const { return options_ != nullptr; }
  OptimizerOptions& options();
  const OptimizerOptions& options() const;
  void set_options(std::unique_ptr<OptimizerOptions> options) { options_ = std::move(options); }
  std::vector<Tensor>& params() { return params_; }
  const std::vector<Tensor>& params() const { return params_; }
  /// The group's lr before any scheduler changed it (PyTorch's group['initial_lr']); set by the
  /// first scheduler attached to the optimizer.
  std::optional<double>& initial_lr() { return initial_lr_; }
  const std::optional<double>& initial_lr() const { return initial_lr_; }

 private:
  std::vector<Tensor> params_;
  std::unique_ptr<OptimizerOptions> options_;
  std::optional<double> initial_lr_;
};

/// Base of every optimizer.
class Optimizer {
 public:
  Optimizer(std::vector<OptimizerParamGroup> param_groups, std::unique_ptr<OptimizerOptions> defaults);
  Optimizer(std::vector<Tensor> parameters, std::unique_ptr<OptimizerOptions> defaults);
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;
  virtual ~Optimizer() = default;

  /// Adds a group; its missing options come from the defaults. Errors for an empty list, a
  /// non-floating or non-leaf parameter, and a parameter already in another group.
  void add_param_group(const OptimizerParamGroup& param_group);
  /// Sets every parameter's gradient to None (set_to_none) or to zero.
  void zero_grad(bool set_to_none = true);

  /// A closure re-evaluating the model and returning the loss (run with gradients enabled).
  using LossClosure = std::function<Tensor()>;
  /// Performs one optimisation step; returns the closure's loss (undefined without a closure).
  virtual Tensor step(LossClosure closure = nullptr) = 0;

  std::vector<OptimizerParamGroup>& param_groups() { return param_groups_; }
  const std::vector<OptimizerParamGroup>& param_groups() const { return param_groups_; }
  OptimizerOptions& defaults() { return *defaults_; }
  const OptimizerOptions& defaults() const { return *defaults_; }
  /// Every parameter of every group, in order.
  std::vector<Tensor> parameters() const;
  /// Number of parameters over all groups.
  size_t size() const;

  /// Per-parameter state, keyed by the parameter's TensorImpl (its identity).
  std::unordered_map<const TensorImpl*, std::unique_ptr<OptimizerParamState>>& state() { return state_; }
  const std::unordered_map<const TensorImpl*, std::unique_ptr<OptimizerParamState>>& state() const {
    return state_;
  }

  /// The optimizer's state and groups as a flat dict (layout at the top of this file). Tensors are
  /// copies: later steps do not change a dict already taken.
  StateDict state_dict() const;
  /// Restores what state_dict() returned, for an optimizer over the same parameter groups sizes.
  /// Checks everything before changing anything. Errors as PyTorch's ("loaded state dict has a
  /// different number of parameter groups", ...).
  void load_state_dict(const StateDict& state_dict);

 protected:
  /// An empty state of this optimizer's kind, filled by load_state_dict.
  virtual std::unique_ptr<OptimizerParamState> make_param_state() const = 0;
  /// The state of `param`, or nullptr before its first step.
  OptimizerParamState* find_state(const Tensor& param) const;
  template <class S>
  S& state_of(const Tensor& param) {
    auto& slot = state_[param.impl()];
    if (!slot) slot = std::make_unique<S>();
    return static_cast<S&>(*slot);
  }
  /// Runs the closure with gradients enabled (step's first line).
  static Tensor run_closure(const LossClosure& closure);

  std::vector<OptimizerParamGroup> param_groups_;
  std::unordered_map<const TensorImpl*, std::unique_ptr<OptimizerParamState>> state_;
  std::unique_ptr<OptimizerOptions> defaults_;
};

/// Copies `src` (a saved state tensor) onto `like`'s device and, when both are floating point, its
/// dtype, as PyTorch's Optimizer.load_state_dict casts state to its parameter.
Tensor state_tensor_like(const Tensor& src, const Tensor& like);

}  // namespace troupe::optim
