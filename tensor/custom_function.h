// Custom autograd functions written as libtorch writes them (torch::autograd::Function<T>):
//
//   struct MulConst : public troupe::autograd::Function<MulConst> {
//     static Variable forward(AutogradContext* ctx, Variable x, double c) {
//       ctx->saved_data["c"] = c;
//       return x * c;
//     }
//     static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
//       return {grad_out[0] * ctx->saved_data["c"].toDouble(), Variable()};  // none for the double
//     }
//   };
//   Variable y = MulConst::apply(x, 2.0);
//
// apply runs forward with grad mode off and, when grad mode is on and a tensor argument requires grad,
// puts one CppNode<T> in the graph whose apply calls T::backward with one gradient per forward output
// and takes one gradient per forward argument back (undefined for arguments that are not tensors).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "autograd.h"
#include "ivalue.h"

namespace troupe::autograd {

template <class T>
struct CppNode;

/// What forward keeps for backward (torch::autograd::AutogradContext).
struct AutogradContext {
  AutogradContext() = default;
  AutogradContext(const AutogradContext&) = delete;
  AutogradContext& operator=(const AutogradContext&) = delete;

  /// Values other than tensors, by name (`ctx->saved_data["n"] = n; ... .toInt()`).
  std::unordered_map<std::string, IValue> saved_data;

  /// Keeps tensors (inputs or outputs of forward) for backward; call it at most once, in forward.
  void save_for_backward(variable_list to_save);
  /// Declares inputs that forward changed in place; they are returned as outputs with this node as history.
  void mark_dirty(const variable_list& inputs);
  /// Declares outputs that get no gradient: they do not require grad.
  void mark_non_differentiable(const variable_list& outputs);
  /// false: backward gets undefined tensors instead of zeros for outputs that received no gradient.
  void set_materialize_grads(bool value);
  /// The tensors given to save_for_backward; throws if one was changed in place since, or after the graph
  /// was freed by a backward without retain_graph.
  variable_list get_saved_variables() const;
  /// Whether tensor argument number `i` of forward (counting tensor arguments only) needs a gradient.
  bool needs_input_grad(size_t i) const;

  /// The inputs given to mark_dirty, after bumping their version counters (used by apply).
  const std::unordered_set<TensorImpl*>& get_and_bump_dirty() const;
  const std::unordered_set<TensorImpl*>& get_non_differentiable() const { return non_differentiable_; }

 private:
  std::unordered_set<TensorImpl*> non_differentiable_;
  std::unordered_set<TensorImpl*> dirty_inputs_;
  std::vector<SavedVariable> saved_variables_;
  variable_list to_save_;
  bool materialize_grads_ = true;
  std::weak_ptr<Node> grad_fn_;  // the node owning this context (weak: no cycle)
  bool has_freed_buffers_ = false;

  void save_variables();
  void release_variables();
  template <class T>
  friend struct CppNode;
  template <class T>
  friend struct Function;
};

namespace detail {
/// A C++ type name without its mangling ("(anonymous namespace)::MulConst").
std::string demangle(const char* mangled);
/// libtorch's _wrap_outputs: gives forward's outputs their history (this node for differentiable ones,
/// a rebase for dirty inputs, a fresh alias for returned inputs), registers their metadata on `node`
/// (null when nothing is recorded) and returns them.
variable_list wrap_outputs(const variable_list& inputs, const std::unordered_set<TensorImpl*>& non_differentiable,
                           const std::unordered_set<TensorImpl*>& dirty, variable_list outputs,
                           const std::shared_ptr<Node>& node);
/// Checks backward's result (one gradient per forward argument, undefined for non-tensor ones; extra
/// trailing undefined ones are dropped) and returns the gradients of the tensor arguments.
variable_list tensor_argument_grads(const std::string& node_name, const std::vector<bool>& is_variable_input,
                                    variable_list grads);

inline void extract_var(std::vector<bool>& is_var, variable_list& list, const Tensor& x) {
  is_var.push_back(true);
  list.push_back(x);
}
inline void extract_var(std::vector<bool>& is_var, variable_list& list, const std::optional<Tensor>& x) {
  const bool present = x.has_value() && x->defined();
  is_var.push_back(present);
  if (present) list.push_back(*x);
}
inline void extract_var(std::vector<bool>& is_var, variable_list& list, TensorList xs) {
  for (const Tensor& x : xs) {
    is_var.push_back(true);
    list.push_back(x);
  }
}
/// Any other argument is not a tensor: it gets no gradient.
template <typename T>
void extract_var(std::vector<bool>& is_var, variable_list&, const T&) {
  is_var.push_back(false);
}

inline variable_list to_list(const Tensor& t) { return {t}; }
inline variable_list to_list(const variable_list& ts) { return ts; }
template <typename R>
R from_list(variable_list& ts) {
  if constexpr (std::is_same_v<R, Tensor>) return ts.at(0);
  else return ts;
}
}  // namespace detail

/// The return type of X::forward for these arguments.
template <typename X, typename... Args>
using forward_t = decltype(X::forward(nullptr, std::declval<Args>()...));

/// Base of a custom function T with static `forward(AutogradContext*, args...)` returning a Variable or a
/// variable_list and static `backward(AutogradContext*, variable_list)` returning one gradient per argument.
template <class T>
struct Function {
  /// Runs T::forward on `args` and records T::backward for them.
  template <typename X = T, typename... Args>
  static auto apply(Args&&... args) -> std::enable_if_t<std::is_same_v<X, T>, forward_t<X, Args...>>;
};

/// The graph node of a custom function: its apply calls T::backward.
template <class T>
struct CppNode : Node {
  ~CppNode() override { teardown(); }
  variable_list apply(variable_list&& grads) override {
    variable_list result = T::backward(&ctx_, std::move(grads));
    return detail::tensor_argument_grads(name(), is_variable_input_, std::move(result));
  }
  /// "troupe::autograd::CppNode<MulConst>", as libtorch names it (with its namespace).
  std::string name() const override { return "troupe::autograd::CppNode<" + detail::demangle(typeid(T).name()) + ">"; }
  void release_variables() override { ctx_.release_variables(); }
  void clear_captures() override {
    ctx_.saved_variables_.clear();
    ctx_.saved_data.clear();
  }
  bool materializes_grads() const override { return ctx_.materialize_grads_; }

  AutogradContext ctx_;
  /// One entry per forward argument: whether it was a (defined) tensor.
  std::vector<bool> is_variable_input_;
};

template <class T>
template <typename X, typename... Args>
auto Function<T>::apply(Args&&... args) -> std::enable_if_t<std::is_same_v<X, T>, forward_t<X, Args...>> {
  auto node = std::make_shared<CppNode<T>>();
  variable_list inputs;
  (detail::extract_var(node->is_variable_input_, inputs, args), ...);
  const bool is_executable = any_requires_grad(inputs);  // false in no-grad mode
  node->ctx_.grad_fn_ = node;
  if (is_executable)
    for (const Tensor& v : inputs) node->next_edges.push_back(v.defined() && v.requires_grad() ? gradient_edge(v) : Edge{});

  using R = forward_t<X, Args...>;
  static_assert(std::is_same_v<R, Tensor> || std::is_same_v<R, variable_list>,
                "a custom Function's forward returns a Variable or a variable_list");
  R outputs;
  {
    NoGradGuard no_grad;
    outputs = T::forward(&node->ctx_, std::forward<Args>(args)...);
  }
  variable_list wrapped = detail::wrap_outputs(inputs, node->ctx_.get_non_differentiable(),
                                               node->ctx_.get_and_bump_dirty(), detail::to_list(outputs),
                                               is_executable ? std::shared_ptr<Node>(node) : nullptr);
  if (is_executable) node->ctx_.save_variables();
  return detail::from_list<R>(wrapped);
}

}  // namespace troupe::autograd
