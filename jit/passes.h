// The graph passes of ScriptModule::compile(): dead-code elimination, constant folding, fusion of chains
// of elementwise ops (with the matmul + bias add of an aten::linear at their head) into prim::FusedChain
// nodes that run in one loop with one autograd node, runs of Linear-headed chains into one
// prim::FusedLinearStack node with one autograd node, and the liveness plan that frees each intermediate
// after its last use so the allocator hands its buffer to a later op.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include <troupe/jit/ir.h>

namespace troupe::jit {

/// A chain of elementwise ops fused into one node (prim::FusedChain): inputs (x) for an elementwise head,
/// (x, weight, bias) for an aten::linear head (bias may be None); one output.
struct FusedChain : std::enable_shared_from_this<FusedChain> {
  /// One elementwise op of the chain; `p` is its scalar (leaky_relu's slope, add's other * alpha, ...).
  struct Step {
    enum Kind { Relu, Sigmoid, Tanh, LeakyRelu, AddScalar, SubScalar, MulScalar, DivScalar } kind;
    double p = 0;
    double alpha = 1;  // add / sub: x + alpha * p
  };
  /// The chain starts with aten::linear (matmul + bias add) rather than its first elementwise op.
  bool linear_head = false;
  std::vector<Step> steps;
  /// The fused ops' names, in order ("aten::linear, aten::relu"), as graph printing shows them.
  std::string ops;
  /// needed[k]: value k of the chain (0 its input, steps.size() its output) is read by a derivative; set by
  /// fuse_elementwise (run_fused_chain works it out when it is not set).
  std::vector<bool> needed;
};

/// Consecutive Linear-headed chains (an MLP's Linear + activation layers) fused into one node
/// (prim::FusedLinearStack): inputs (x, weight_0, bias_0, weight_1, bias_1, ...), a bias may be None; one output.
struct LinearStack : std::enable_shared_from_this<LinearStack> {
  /// The layers in order, each a FusedChain with a linear head.
  std::vector<std::shared_ptr<const FusedChain>> layers;
  /// The layers' ops, layers separated by " | " ("aten::linear, aten::relu | aten::linear"), as printed.
  std::string ops;
};

/// Removes every node whose outputs are unused and that has no effect (constants, attribute reads, lists,
/// and aten ops that are neither in place, random, nor batch_norm in training); returns how many it removed.
size_t eliminate_dead_code(Graph& g);
/// Replaces each deterministic aten op (and list) whose inputs are all constants by a prim::Constant of its
/// result, computed once; parameters and buffers (prim::GetAttr) are never folded. Returns how many it folded.
size_t fold_constants(Graph& g);
/// Replaces chains of elementwise ops (relu, sigmoid, tanh, leaky_relu, add/sub/mul/div by a constant
/// scalar), optionally headed by an aten::linear, by prim::FusedChain nodes. A value used by anything
/// outside the chain (a second use, a graph output) ends the chain before it. Returns how many it made.
size_t fuse_elementwise(Graph& g);
/// Runs a fused chain on its inputs: one pass over the data in blocks (each block through every op while
/// it is in cache), one autograd node whose backward keeps only what the chain's derivatives need.
IValue run_fused_chain(const FusedChain& chain, const std::vector<IValue>& args);

/// Replaces each run of two or more Linear-headed prim::FusedChain nodes, where each chain's output is used
/// only as the next one's input (not a graph output, no other use), by one prim::FusedLinearStack node.
/// Run after fuse_elementwise. Returns how many it made.
size_t fuse_linear_stacks(Graph& g);
/// Runs a fused Linear stack: each layer's gemm and steps as run_fused_chain runs them (same kernels, same
/// bits), and one autograd node whose backward runs every layer's derivative back to back on the saved
/// activations. Operands the fast path does not take (not CPU float32/float64 contiguous 2-D) run layer by
/// layer through run_fused_chain.
IValue run_linear_stack(const LinearStack& stack, const std::vector<IValue>& args);

/// For each node of `g` (by position), the value slots whose last use it is (graph outputs are never
/// listed): the compiled interpreter clears them after the node runs.
std::vector<std::vector<size_t>> last_uses(const Graph& g);

}  // namespace troupe::jit
