// The non-template parts of custom autograd functions: AutogradContext, wrapping forward's outputs
// (libtorch's _wrap_outputs), checking backward's results; and IValue's accessors.
#include "custom_function.h"

#include <cxxabi.h>

#include <cstdlib>
#include <stdexcept>

#include "ops.h"
#include "warning.h"

namespace troupe {

// ---------------------------------------------------------------- IValue

std::string IValue::tagKind() const {
  static const char* const names[] = {"None", "Double", "Int", "Bool", "String", "Tensor", "IntList"};
  return names[v_.index()];
}

void IValue::throw_wrong_kind(const char* fn) const {
  std::string want = fn;
  if (want == "toDouble") want = "Double";
  else if (want == "toInt") want = "Int";
  else if (want == "toBool") want = "Bool";
  else if (want == "toStringRef") want = "String";
  else if (want == "toTensor") want = "Tensor";
  else if (want == "toIntVector") want = "IntList";
  else if (want == "toScalar") want = "Double or Int";
  throw std::runtime_error("[IValue::" + std::string(fn) + "] expected " + want + " but got " + tagKind());
}

Scalar IValue::toScalar() const {
  if (isDouble()) return Scalar(toDouble());
  if (isInt()) return Scalar(toInt());
  if (isBool()) return Scalar(toBool());
  throw_wrong_kind("toScalar");
}

namespace autograd {

// ---------------------------------------------------------------- AutogradContext

void AutogradContext::save_for_backward(variable_list to_save) { to_save_ = std::move(to_save); }

void AutogradContext::mark_dirty(const variable_list& inputs) {
  dirty_inputs_.clear();
  for (const Tensor& t : inputs) dirty_inputs_.insert(t.impl());
}

void AutogradContext::mark_non_differentiable(const variable_list& outputs) {
  non_differentiable_.clear();
  for (const Tensor& t : outputs) non_differentiable_.insert(t.impl());
}

void AutogradContext::set_materialize_grads(bool value) { materialize_grads_ = value; }

const std::unordered_set<TensorImpl*>& AutogradContext::get_and_bump_dirty() const {
  for (TensorImpl* impl : dirty_inputs_) ++impl->storage->version;
  return dirty_inputs_;
}

void AutogradContext::save_variables() {
  saved_variables_.clear();
  auto node = grad_fn_.lock();
  for (const Tensor& t : to_save_) {
    // An output of this node is kept without its grad_fn (no cycle) and re-attached on unpack.
    const bool is_output = t.defined() && t.grad_fn() == node;
    saved_variables_.emplace_back(t, is_output);
  }
  to_save_.clear();
}

void AutogradContext::release_variables() {
  for (auto& v : saved_variables_) v.reset();
  has_freed_buffers_ = true;
}

variable_list AutogradContext::get_saved_variables() const {
  if (has_freed_buffers_) throw_backward_twice();
  auto node = grad_fn_.lock();
  variable_list out;
  out.reserve(saved_variables_.size());
  for (const auto& v : saved_variables_) out.push_back(v.unpack(node));
  return out;
}

bool AutogradContext::needs_input_grad(size_t i) const {
  auto node = grad_fn_.lock();
  if (!node || node->next_edges.empty()) return false;  // nothing is recorded
  if (i >= node->next_edges.size())
    throw std::out_of_range("[needs_input_grad] index " + std::to_string(i) + " is out of range for a Function with " +
                            std::to_string(node->next_edges.size()) + " tensor arguments");
  return node->next_edges[i].valid();
}

namespace detail {

std::string demangle(const char* mangled) {
  int status = 0;
  char* s = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  if (status != 0 || !s) return mangled;
  std::string out(s);
  std::free(s);
  return out;
}

variable_list wrap_outputs(const variable_list& inputs, const std::unordered_set<TensorImpl*>& non_differentiable,
                           const std::unordered_set<TensorImpl*>& dirty, variable_list outputs,
                           const std::shared_ptr<Node>& node) {
  std::unordered_set<TensorImpl*> input_impls;
  for (const Tensor& t : inputs) input_impls.insert(t.impl());
  const size_t n = outputs.size();
  for (size_t i = 0; i < n; ++i) {
    Tensor& var = outputs[i];
    if (!var.defined()) {
      if (node) node->input_meta.push_back({{}, get_default_dtype(), Device(kCPU)});
      continue;
    }
    const bool is_input = input_impls.count(var.impl()) > 0;
    const bool is_modified = dirty.count(var.impl()) > 0;
    const bool is_differentiable =
        node && non_differentiable.count(var.impl()) == 0 && is_floating_point(var.dtype());
    if (node) node->input_meta.push_back({var.sizes().vec(), var.dtype(), var.device()});

    if (!is_differentiable) {
      if (!var.requires_grad()) {
        if (is_input && !is_modified) {
          NoGradGuard no_grad;
          var = var.view_as(var);  // a new tensor, so that the caller's input keeps its identity
        }
        continue;
      }
      // Detached aliases, rather than changing the requires_grad of what the caller holds.
      if (is_input) var = var.detach();
      else if (!var.is_view()) var.detach_();
    } else if (is_modified) {
      if (var.is_leaf() && var.requires_grad())
        throw std::runtime_error("a leaf Variable that requires grad has been used in an in-place operation.");
      if (!is_input)
        TROUPE_WARN("Only input Tensors should be given to ctx.mark_dirty(). If a Tensor is not an input, there is "
                    "no need to pass it to mark_dirty().");
      if (var.is_view())
        throw std::runtime_error(
            "[Function::apply] the input marked dirty is a view of another tensor; troupe cannot rebase a view's "
            "history onto a custom Function yet. Clone it before passing it in.");
      auto& m = meta(var);  // rebase: the modified input's history is now this node
      m.grad_fn = node;
      m.output_nr = static_cast<uint32_t>(i);
    } else {
      if (is_input) {
        // An input returned unchanged: a fresh alias carries the new history.
        NoGradGuard no_grad;
        var = var.view_as(var);
      }
      auto& m = meta(var);
      m.grad_fn = node;
      m.output_nr = static_cast<uint32_t>(i);
    }
  }
  return outputs;
}

variable_list tensor_argument_grads(const std::string& node_name, const std::vector<bool>& is_variable_input,
                                    variable_list grads) {
  const size_t num_forward_inputs = is_variable_input.size();
  if (grads.size() > num_forward_inputs) {
    // Returning too many results is allowed when the extra ones are undefined.
    bool all_undefined = true;
    for (size_t i = num_forward_inputs; i < grads.size(); ++i) all_undefined &= !grads[i].defined();
    if (all_undefined) grads.resize(num_forward_inputs);
  }
  if (grads.size() != num_forward_inputs)
    throw std::runtime_error("function " + node_name + " returned an incorrect number of gradients (expected " +
                             std::to_string(num_forward_inputs) + ", got " + std::to_string(grads.size()) + ")");
  variable_list results;
  results.reserve(num_forward_inputs);
  for (size_t i = 0; i < num_forward_inputs; ++i) {
    if (!is_variable_input[i]) {
      if (grads[i].defined())
        throw std::runtime_error("function " + node_name +
                                 " returned a gradient different that is defined at position " + std::to_string(i + 1) +
                                 ", but the corresponding forward input was not a Variable");
      continue;
    }
    results.push_back(std::move(grads[i]));
  }
  return results;
}

}  // namespace detail
}  // namespace autograd
}  // namespace troupe
