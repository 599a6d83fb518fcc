// Reverse-mode autograd: graph nodes, saved tensors with version checks, grad mode, hooks, the engine.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tensor.h"

namespace troupe {

/// Disables recording of the graph in its scope (torch.no_grad()).
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

/// Enables recording in its scope (torch.enable_grad()).
class EnableGradGuard {
 public:
  EnableGradGuard();
  ~EnableGradGuard();
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool prev_;
};

/// torch::InferenceMode: in its scope no graph is recorded (grad mode is off) and every tensor made is an
/// inference tensor (`t.is_inference()`), which outside the mode cannot be changed in place, require grad
/// or be saved for backward. `InferenceMode(false)` turns it off (and grad mode on) in a nested scope.
class InferenceMode {
 public:
  explicit InferenceMode(bool enabled = true);
  ~InferenceMode();
  InferenceMode(const InferenceMode&) = delete;
  InferenceMode& operator=(const InferenceMode&) = delete;
  /// True inside an enabled InferenceMode scope on this thread.
  static bool is_enabled();

 private:
  bool prev_inference_;
  bool prev_grad_;
};

namespace autograd {

using variable_list = std::vector<Tensor>;
/// libtorch's name for a tensor taking part in autograd.
using Variable = Tensor;

/// Inference mode is also reachable as autograd::InferenceMode.
using troupe::InferenceMode;

/// Thread-local switch for graph recording.
struct GradMode {
  static bool is_enabled();
  static void set_enabled(bool enabled);
};

struct Node;

/// An input slot of a node: gradients flowing along this edge go to input `input_nr` of `fn`.
struct Edge {
  std::shared_ptr<Node> fn;
  uint32_t input_nr = 0;
  bool valid() const { return fn != nullptr; }
};

/// Shape, dtype and device of a forward output: used to make zeros for a missing gradient and to
/// check the gradients a node returns.
struct InputMeta {
  std::vector<int64_t> sizes;
  ScalarType dtype = kFloat32;
  Device device;
};

/// PyTorch's error for a backward through freed saved tensors ("Trying to backward through the graph a
/// second time ...").
[[noreturn]] void throw_backward_twice();
/// The error for changing an inference tensor in place outside InferenceMode (`op` names the operation).
[[noreturn]] void throw_inference_inplace(const char* op);

/// A node of the backward graph: the backward of one forward op. Its inputs are the gradients of the
/// forward op's outputs; its outputs are the gradients of the forward op's inputs, sent along
/// next_edges (one per forward input; an invalid edge for an input that needs no gradient).
struct Node : std::enable_shared_from_this<Node> {
  Node();
  virtual ~Node();
  /// grads.size() == num_inputs(); returns one gradient per next edge (undefined = none).
  virtual variable_list apply(variable_list&& grads) = 0;
  virtual std::string name() const = 0;
  /// Frees saved tensors after a backward pass without retain_graph.
  virtual void release_variables() {}
  /// Drops everything the node captured (saved tensors, closures): used when tearing a graph down.
  virtual void clear_captures() {}
  /// False when apply wants missing incoming gradients as undefined tensors rather than zeros (a custom
  /// Function after ctx->set_materialize_grads(false)).
  virtual bool materializes_grads() const { return true; }
  /// True when apply computes only the outputs output_wanted() names (the engine may then apply it twice
  /// over the same incoming gradients, a part of its outputs each time: see backward_targets_first).
  bool computes_wanted_outputs = false;

  size_t num_inputs() const { return input_meta.size(); }
  size_t num_outputs() const { return next_edges.size(); }
  uint64_t sequence_nr() const { return sequence_nr_; }

  /// Hook on one incoming gradient (a tensor hook on the output `input_nr`); a defined result replaces it.
  int64_t add_tensor_pre_hook(uint32_t input_nr, std::function<Tensor(const Tensor&)> fn);
  /// Hook on all incoming gradients before apply; a non-empty result replaces them (same count).
  int64_t add_pre_hook(std::function<variable_list(const variable_list&)> fn);
  /// Hook after apply: (grad_inputs = outputs of apply, grad_outputs = inputs of apply); a non-empty
  /// result replaces the outputs (same count).
  int64_t add_post_hook(std::function<variable_list(const variable_list&, const variable_list&)> fn);
  /// Removes a hook of any kind by id; removing twice is a no-op.
  void remove_hook(int64_t id);

  std::vector<Edge> next_edges;
  std::vector<InputMeta> input_meta;

  // hook storage, in registration order
  struct TensorPreHook { int64_t id; uint32_t input_nr; std::function<Tensor(const Tensor&)> fn; };
  struct PreHook { int64_t id; std::function<variable_list(const variable_list&)> fn; };
  struct PostHook { int64_t id; std::function<variable_list(const variable_list&, const variable_list&)> fn; };
  std::vector<TensorPreHook> tensor_pre_hooks;
  std::vector<PreHook> pre_hooks;
  std::vector<PostHook> post_hooks;
  /// Non-leaf tensors that asked retain_grad(), by output number.
  std::vector<std::pair<uint32_t, std::weak_ptr<TensorImpl>>> retained;

 protected:
  /// Destroys the graph behind this node iteratively (a chain of 100k nodes must not recurse 100k deep).
  /// Derived destructors call it while their members are still alive.
  void teardown();
  uint64_t sequence_nr_;
};

/// Per-tensor autograd state.
struct AutogradMeta {
  bool requires_grad = false;
  Tensor grad;
  std::shared_ptr<Node> grad_fn;
  uint32_t output_nr = 0;
  std::weak_ptr<Node> grad_accumulator;  // leaves only
  bool retains_grad = false;
  /// Hooks registered on a leaf (run before accumulation) and post-accumulate hooks.
  std::vector<std::pair<int64_t, std::function<Tensor(const Tensor&)>>> leaf_hooks;
  std::vector<std::pair<int64_t, std::function<void(const Tensor&)>>> post_acc_hooks;
};

/// Accumulates incoming gradients into a leaf's .grad.
struct AccumulateGrad : Node {
  explicit AccumulateGrad(const Tensor& leaf);
  variable_list apply(variable_list&& grads) override;
  std::string name() const override { return "AccumulateGrad"; }
  std::weak_ptr<TensorImpl> leaf;
};

/// A tensor kept for backward. Checks on unpack that it was not changed in place since it was saved,
/// and refuses after the graph was freed.
class SavedVariable {
 public:
  SavedVariable() = default;
  /// `is_output`: the tensor is an output of the node that saves it (kept without its grad_fn to avoid
  /// a reference cycle; the node is re-attached on unpack).
  SavedVariable(const Tensor& t, bool is_output);
  /// The saved tensor; throws if it was modified in place or freed.
  Tensor unpack(const std::shared_ptr<Node>& owner = nullptr) const;
  void reset();
  bool defined() const { return was_defined_; }

 private:
  Tensor data_;          // for inputs: the tensor itself; for outputs: a detached alias
  uint32_t version_ = 0;
  bool is_output_ = false;
  bool was_defined_ = false;
  bool released_ = false;
  bool requires_grad_ = false;
  uint32_t output_nr_ = 0;
  std::weak_ptr<Node> grad_fn_;  // for outputs
  std::string producer_;         // grad_fn name at save time, for the error text
};

/// A node whose backward is a function object (how ops in this library record their backward).
struct FunctionNode : Node {
  using Fn = std::function<variable_list(const variable_list& grads)>;
  FunctionNode(std::string name, Fn fn, bool saves) : name_(std::move(name)), fn_(std::move(fn)), saves_(saves) {}
  ~FunctionNode() override { teardown(); }
  variable_list apply(variable_list&& grads) override;
  std::string name() const override { return name_; }
  void release_variables() override;
  void clear_captures() override { fn_ = nullptr; }

 private:
  std::string name_;
  Fn fn_;
  bool saves_;
  bool released_ = false;
};

/// True when grad mode is on and any of the tensors requires grad.
bool any_requires_grad(std::initializer_list<const Tensor*> ts);
bool any_requires_grad(const variable_list& ts);

/// The edge a gradient for `t` must flow along: its grad_fn, or its leaf accumulator, or none.
Edge gradient_edge(const Tensor& t);

/// Points `node`'s inputs at `inputs`' gradient edges (none where an input needs no gradient): the
/// graph edges of a node made outside record() (a custom function, a remote call).
void set_next_edges(Node& node, const variable_list& inputs);
/// Makes `node` the grad_fn of `outputs` (output i is its input i; only floating-point tensors take it)
/// and records their metadata on it (PyTorch's set_history).
void set_history(const std::shared_ptr<Node>& node, const variable_list& outputs);

/// Records `outputs` as computed from `inputs` by an op whose backward is `fn` (gradients of the
/// outputs -> gradients of the inputs, one per input, undefined where none is needed). Does nothing
/// when no input requires grad or grad mode is off. `saves`: fn holds SavedVariables (so running it
/// after the graph was freed is an error).
std::shared_ptr<Node> record(const char* name, const variable_list& inputs, const variable_list& outputs,
                             FunctionNode::Fn fn, bool saves = true);
/// One output.
std::shared_ptr<Node> record(const char* name, const variable_list& inputs, const Tensor& output,
                             FunctionNode::Fn fn, bool saves = true);

/// Records an in-place op on `self` (already applied): self's history is rebased onto a new node whose
/// inputs are self's previous value and `others`. `fn` maps grad of the new self to grads of
/// (old self, others...). Handles views (the base's history is rebased, as PyTorch's CopySlices).
/// Call check_inplace(self) before modifying the data.
void record_inplace(const char* name, const Tensor& self, const variable_list& others, FunctionNode::Fn fn,
                    bool saves = true);
/// Throws for an in-place op on a leaf that requires grad (in grad mode).
void check_inplace(const Tensor& self, const char* op);

/// Runs backward from `roots` with `grad_roots` (undefined: ones for a scalar root).
void backward(const variable_list& roots, const variable_list& grad_roots = {}, std::optional<bool> retain_graph = std::nullopt,
              bool create_graph = false, const variable_list& inputs = {});

/// backward(roots, grad_roots, retain_graph), calling `on_ready` as soon as the gradients of `targets`
/// are final (their .grad, for leaves), before the rest of the graph is done: the engine first runs the
/// nodes from which a target can be reached, asks a node that also feeds other edges (a Linear's
/// AddmmBackward0, whose weight gradient leads elsewhere) for the targets' part alone when it
/// computes_wanted_outputs (else it computes all and holds the other part back), and runs the rest after
/// on_ready returns. A pipeline stage answers with its input gradients while it computes its weights'.
/// The order of the other nodes, and so every gradient's value, is unchanged only up to the order of
/// additions into a gradient with several producers.
void backward_targets_first(const variable_list& roots, const variable_list& grad_roots, bool retain_graph,
                            const variable_list& targets, const std::function<void()>& on_ready);

/// Inside a node's apply: true when the engine wants its output `i` now (always true outside a split
/// application; see backward_targets_first). Ops whose backward computes several gradients skip the
/// ones not wanted.
bool output_wanted(size_t i);

/// PyTorch's Variable._execution_engine.queue_callback: runs `cb` on this thread when the backward pass
/// under way on it has run its whole graph, before backward() (or grad()) returns; callbacks queued by a
/// callback run too, in order. Throws outside a backward pass. A callback's exception ends the pass.
void queue_callback(std::function<void()> cb);

/// torch.autograd.grad: gradients of `outputs` with respect to `inputs`, without touching `.grad`.
variable_list grad(const variable_list& outputs, const variable_list& inputs, const variable_list& grad_outputs = {},
                   std::optional<bool> retain_graph = std::nullopt, bool create_graph = false, bool allow_unused = false);

/// The AutogradMeta of t, created on demand.
AutogradMeta& meta(const Tensor& t);
/// The AutogradMeta of t, or null.
AutogradMeta* meta_or_null(const Tensor& t);

}  // namespace autograd
}  // namespace troupe
