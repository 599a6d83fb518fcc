// The graph IR of a traced method: values, nodes (aten ops and the few prim nodes a trace holds) and
// graphs, printed in TorchScript's form (`graph(%self.1 : __torch__.Net, %x : Float(...)):` ...).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <troupe/tensor/ivalue.h>
#include <troupe/tensor/tensor.h>

namespace troupe::jit {

/// What a tensor value looked like when it was traced (printed as `Float(4, 64, strides=[64, 1], ...)`).
struct TensorMeta {
  ScalarType dtype = kFloat32;
  std::vector<int64_t> sizes, strides;
  bool requires_grad = false;
  Device device;
};

/// The type of a value: a tensor (with its traced shape when known), a number, a list, None, a string
/// or a module (by its qualified class name, `__torch__.torch.nn.modules.linear.Linear`).
struct Type {
  enum Kind { Tensor, Int, Float, Bool, Str, None, IntList, Module };
  Kind kind = Tensor;
  std::string cls;                  // Module: the qualified class name
  std::optional<TensorMeta> meta;   // Tensor: the traced shape, printed instead of `Tensor`
  /// TorchScript's spelling: `Tensor`, `Float(2, 3, strides=[3, 1], requires_grad=0, device=cpu)`,
  /// `int`, `float`, `bool`, `str`, `NoneType`, `int[]`, or the class name.
  std::string str() const;
};

struct Node;
struct FusedChain;   // jit/passes.h
struct LinearStack;  // jit/passes.h
/// Runs one aten op on its arguments (schema order) and returns its single result (jit/ops.h).
using OpFn = IValue (*)(const std::vector<IValue>& args);

/// One SSA value: produced by a node (or a graph input), used by later nodes.
struct Value {
  size_t id = 0;
  std::string name;  // debug name ("x", "weight", "input.1"); empty: printed as its number
  Type type;
  Node* node = nullptr;  // null for a graph input
  /// `%name` or `%<number>`.
  std::string ref() const { return "%" + (name.empty() ? std::to_string(id) : name); }
};

/// One operation: `kind` is "aten::<op>" or one of prim::Constant, prim::GetAttr, prim::CallMethod,
/// prim::ListConstruct, prim::TupleConstruct.
struct Node {
  std::string kind;
  std::vector<Value*> inputs;
  std::vector<Value*> outputs;
  std::string attr;   // GetAttr / CallMethod: the attribute or method name
  IValue constant;    // prim::Constant: its value (None when the constant is None)
  mutable OpFn op = nullptr;  // aten ops: the function, found on first run
  /// prim::GetAttr in a compiled graph: where the attribute was last found (the interpreter's hint: which of
  /// the owner's parameters / buffers / children in bits 30-31, its index in insertion order below; 0 when
  /// unknown). Checked against the name on every use, so a re-registered attribute is found again by name.
  mutable std::atomic<uint32_t> attr_hint{0};
  std::shared_ptr<const FusedChain> fused;  // prim::FusedChain (compile()): the chain it runs
  std::shared_ptr<const LinearStack> stack;  // prim::FusedLinearStack (compile()): the layers it runs
};

/// A method's graph: inputs (the module itself first), nodes in order, outputs.
class Graph {
 public:
  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  /// A new graph input of this type.
  Value* add_input(Type type, std::string name = "");
  /// Appends a node with these inputs and `n_outputs` outputs (typed Tensor until set).
  Node* append(std::string kind, std::vector<Value*> inputs, size_t n_outputs = 1);
  /// Inserts a node before `before` (at the end when null).
  Node* insert(Node* before, std::string kind, std::vector<Value*> inputs, size_t n_outputs = 1);
  /// Gives `v` the debug name `name`, PyTorch's way: a value already holding the name is renamed to
  /// `name.<n>` with the first free n.
  void set_name(Value* v, const std::string& name);
  /// Marks these values as the graph's results.
  void set_outputs(std::vector<Value*> outs) { outputs_ = std::move(outs); }

  const std::vector<Value*>& inputs() const { return inputs_; }
  const std::vector<Value*>& outputs() const { return outputs_; }
  /// The nodes in execution order.
  const std::vector<Node*>& nodes() const { return order_; }
  /// One more than the largest value id (the interpreter's slot count).
  size_t value_slots() const { return next_id_; }
  /// Removes nodes whose outputs are unused and that have no effect (constants, attribute reads, lists).
  void remove_dead_pure_nodes();
  /// Removes `n` from the node order (its outputs must be unused by then).
  void erase(Node* n);
  /// Makes every use of `from` (node inputs and graph outputs) use `to` instead.
  void replace_uses(const Value* from, Value* to);

  /// The printed form (torch.jit's `str(graph)`), ending in a newline.
  std::string str() const;
  /// A deep copy.
  std::shared_ptr<Graph> copy() const;

 private:
  Value* new_value(Type type);
  std::vector<std::unique_ptr<Node>> node_store_;
  std::vector<std::unique_ptr<Value>> value_store_;
  std::vector<Node*> order_;
  std::vector<Value*> inputs_, outputs_;
  std::map<std::string, Value*> names_;
  size_t next_id_ = 0;
};

/// The printed form of a constant as `prim::Constant[value=...]` shows it (`1`, `0.10000000000000001`,
/// `1.0000000000000001e-05`, `"none"`, `{1}` for a one-element tensor).
std::string constant_text(const IValue& v);
/// A float as TorchScript prints it: 17 significant digits, `1.` for whole numbers.
std::string float_text(double d);
/// The dtype's TorchScript name: Float, Double, Long, Int, Half, BFloat16, Bool, Byte.
std::string scalar_type_name(ScalarType t);
/// The dtype of a PyTorch ScalarType code (tracing::scalar_type_code's inverse).
ScalarType scalar_type_of_code(int64_t code);

}  // namespace troupe::jit
