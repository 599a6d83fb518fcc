// The graph passes of ScriptModule::compile(): dead-code elimination, constant folding, fusion of chains
// of elementwise ops (with the matmul + bias add of an aten::linear at their head) into prim::FusedChain
// nodes that run in one loop with one autograd node, and the liveness plan that frees each intermediate
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

/// For each node of `g` (by position), the value slots whose last use it is (graph outputs are never
/// listed): the compiled interpreter clears them after the node runs.
std::vector<std::vector<size_t>> last_uses(const Graph& g);

}  // namespace troupe::jit
