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
#include <ostream>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <variant>
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
  /// (name, Python's text of the value) of every option, as print(optimizer) shows them ("lr", "0.1");
  /// by default the lr alone.
  virtual std::vector<std::pair<std::string, std::string>> repr_items() const;
};

namespace detail {
/// One option of a param group: its name (state_dict key; a pair such as betas is written as "betas.0"
/// and "betas.1") and the member that holds it.
template <class O>
struct OptionField {
  const char* name;
  std::variant<double O::*, bool O::*, std::tuple<double, double> O::*> member;
};
/// The OptionField of options struct O's TROUPE_ARG `name` (member name_), for O::fields().
#define TROUPE_OPTION_FIELD(O, name) ::troupe::optim::detail::option_field(#name, &O::name##_)
/// An OptionField of O's member `m`.
template <class O, class T>
constexpr OptionField<O> option_field(const char* name, T O::*m) {
  return {name, m};
}
void write_option(StateDict& out, const std::string& key, double v);
void write_option(StateDict& out, const std::string& key, bool v);
void write_option(StateDict& out, const std::string& key, const std::tuple<double, double>& v);
void read_option(const StateDict& in, const std::string& key, double& v);
void read_option(const StateDict& in, const std::string& key, bool& v);
void read_option(const StateDict& in, const std::string& key, std::tuple<double, double>& v);
/// Python's text of an option value: 0.1, 0 (an integral value as the int a user writes), True, (0.9, 0.999).
std::string option_repr(double v);
std::string option_repr(bool v);
std::string option_repr(const std::tuple<double, double>& v);
}  // namespace detail

/// Gives an options struct its clone() (libtorch's OptimizerCloneableOptions).
template <class Derived>
class OptimizerCloneableOptions : public OptimizerOptions {
 public:
  std::unique_ptr<OptimizerOptions> clone() const override {
    return std::make_unique<Derived>(static_cast<const Derived&>(*this));
  }
};

/// Gives an options struct clone(), the lr accessors, and state_dict write/read and printing, all
/// driven by its one list of fields, `static constexpr auto fields()` (an array of
/// TROUPE_OPTION_FIELD, in PyTorch's param-group order).
template <class Derived>
class OptimizerFieldOptions : public OptimizerCloneableOptions<Derived> {
 public:
  double get_lr() const override { return self().lr(); }
  void set_lr(double lr) override { static_cast<Derived&>(*this).lr(lr); }
  void write(StateDict& out, const std::string& prefix) const override {
    for (const auto& f : Derived::fields())
      std::visit([&](auto m) { detail::write_option(out, prefix + f.name, self().*m); }, f.member);
  }
  void read(const StateDict& in, const std::string& prefix) override {
    for (const auto& f : Derived::fields())
      std::visit([&](auto m) { detail::read_option(in, prefix + f.name, static_cast<Derived&>(*this).*m); },
                 f.member);
  }
  std::vector<std::pair<std::string, std::string>> repr_items() const override {
    std::vector<std::pair<std::string, std::string>> items;
    for (const auto& f : Derived::fields())
      std::visit([&](auto m) { items.emplace_back(f.name, detail::option_repr(self().*m)); }, f.member);
    return items;
  }

 private:
  const Derived& self() const { return static_cast<const Derived&>(*this); }
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
  /// The class name print(optimizer) starts with ("SGD", "Adam").
  virtual std::string name() const { return "Optimizer"; }
  /// print(optimizer) in PyTorch's layout: "SGD (\nParameter Group 0\n    dampening: 0\n    lr: 0.1\n...)",
  /// each group's options (and initial_lr once a scheduler set it) sorted by name.
  std::string repr() const;

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

/// Writes optimizer.repr().
std::ostream& operator<<(std::ostream& os, const Optimizer& optimizer);

/// Copies `src` (a saved state tensor) onto `like`'s device and, when both are floating point, its
/// dtype, as PyTorch's Optimizer.load_state_dict casts state to its parameter.
Tensor state_tensor_like(const Tensor& src, const Tensor& like);

}  // namespace troupe::optim
