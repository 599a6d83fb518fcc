// Sharded data parallelism (ZeRO stages 1, 2 and 3; DeepSpeed's ZeRO, PyTorch's
// ZeroRedundancyOptimizer and FullyShardedDataParallel) and the sharded checkpoint.
//
// Flat sharding (FSDP's FlatParameter): the parameters of the model that require grad, in registration
// order, grouped by dtype (groups in order of first appearance), are concatenated into one flat buffer
// per dtype, padded with zeros to a multiple of size(); rank r owns the contiguous slice
// [r * S, (r + 1) * S), S = padded / size(). The inner optimizer (made by the factory) sees one flat
// shard tensor per dtype as its parameters, so its state is 1/size() of the unsharded optimizer's.
//
//   comm::ZeroOptimizer zero(model, [](std::vector<Tensor> shards) {
//     return std::make_unique<optim::Adam>(shards, optim::AdamOptions(1e-3));
//   }, /*stage=*/2);                                  // on comm::world()
//   Tensor loss = loss_fn((*model)(my_rows), my_targets);
//   zero.zero_grad(); loss.backward(); zero.step();
//
// stage 1: step() all-reduces (AVG) the full gradients (written back into .grad), each rank steps its
//          shard, then all_gather puts the updated shards back into the full parameters.
// stage 2: step() reduce-scatters (AVG) the gradients so each rank keeps its shard's gradient only
//          (every parameter's full .grad is freed), then steps and all_gathers as stage 1.
// stage 3: FullyShardedDataParallel (a Module): each rank stores its shard only; forward all_gathers the
//          flat buffers and points every parameter (set_data) at its view of them; the gathered
//          parameters live through backward (the model is one flat unit, so freeing them after forward
//          would only mean gathering them again for backward); step() reduce-scatters (AVG) the
//          gradients into the shard gradients, frees the full parameters (empty until the next forward)
//          and their .grad, and steps the shard.
// In stages 1 and 2 the model's parameters are views into the flat buffers (their storage changes at
// construction; identities and autograd state stay). Every rank starts from rank 0's parameters.
// Every rank of the group must construct, forward/backward and step in lockstep (collectives).
// Gradients are reduced in step() (no overlap with backward, unlike DDP's bucket hooks): between
// backward and step every rank holds the full .grad, also in stages 2 and 3; memory_per_rank() measures
// what is held when it is called (after step(): the figures of the stage). A parameter without .grad
// counts as a zero gradient (the shard is stepped as a whole, so momentum and weight decay still act).
// FullyShardedDataParallel's Module::state_dict() shows empty parameters while they are freed: use
// sharded_state_dict / save_sharded.
//
// Sharded checkpoint (save_sharded / load_sharded, at any world size):
//   <dir>/index.troupe            written by rank 0: an nn::save StateDict; "__world_size__" = int64
//                                 scalar N; for every entry name an int64 vector
//                                 [replicated, ndim, shape..., N, offset_0, length_0, ..., offset_{N-1},
//                                 length_{N-1}]: rank r's piece covers [offset_r, offset_r + length_r) of
//                                 the entry's flattened full tensor.
//   <dir>/rank<r>.troupe          written by rank r: an nn::save StateDict; for every entry "<name>" its
//                                 piece (1-d, `length` elements; replicated entries whole, as saved) and
//                                 "__meta__.<name>" = int64 [offset, length, replicated, ndim, shape...].
// Entry names: "model.<parameter name>" (the parameter's piece), "optim.<parameter name>.<key>" for
// every sharded optimizer state tensor (exp_avg, exp_avg_sq, momentum_buffer: the parameter's piece of
// the flat state), and "optim.state.<g>.<key>" / "optim.param_groups.<...>" (replicated: the inner
// optimizer's scalars and options, g = dtype group) as written by optim::Optimizer::state_dict().
// load_sharded: each rank reads from the old files only the pieces that overlap its new shard.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <troupe/comm/process_group.h>
#include <troupe/nn/module.h>
#include <troupe/nn/optim/optimizer.h>
#include <troupe/tensor/tensor.h>

namespace troupe::comm {

/// Makes the inner optimizer over this rank's flat shard tensors (one per dtype group).
using OptimizerFactory = std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor> shard_params)>;

/// One flat buffer (one dtype group) and this rank's slice of it.
struct FlatShardInfo {
  /// The dtype of the group's parameters.
  ScalarType dtype = kFloat32;
  /// Indices into the wrapped parameters (requires_grad, registration order) of the group's members.
  std::vector<size_t> params;
  /// Element offset of each member in the flat buffer.
  std::vector<int64_t> offsets;
  /// Elements of the members together (unpadded).
  int64_t numel = 0;
  /// numel rounded up to a multiple of the group size.
  int64_t padded_numel = 0;
  /// padded_numel / size: the elements each rank owns.
  int64_t shard_numel = 0;
  /// rank * shard_numel: where this rank's slice starts.
  int64_t shard_offset = 0;
};

/// What a rank holds, in bytes (measured on the tensors it keeps).
struct ShardMemory {
  /// Parameter storage (full flat buffers in stages 1-2; the shards, plus the gathered buffers while
  /// gathered, in stage 3).
  int64_t params = 0;
  /// Gradients held (.grad of the parameters and of the shards).
  int64_t grads = 0;
  /// Tensors of the inner optimizer's state (its scalars included).
  int64_t optimizer_state = 0;
  /// params + grads + optimizer_state.
  int64_t total() const { return params + grads + optimizer_state; }
};

/// One entry of a sharded state dict: this rank's piece of a tensor.
struct ShardedTensor {
  /// "model.<param>", "optim.<param>.<key>", "optim.state.<g>.<key>", "optim.param_groups.<...>".
  std::string name;
  /// This rank's piece (1-d, `length` elements), or the whole tensor when replicated.
  Tensor shard;
  /// The shape of the full tensor.
  std::vector<int64_t> full_shape;
  /// Where the piece starts in the flattened full tensor.
  int64_t offset = 0;
  /// Elements in the piece.
  int64_t length = 0;
  /// True for tensors every rank holds whole (optimizer scalars and options).
  bool replicated = false;
};

namespace detail {
struct ShardCore;  // the flat buffers, shards and inner optimizer (zero.cpp)
}

/// ZeRO stages 1 and 2: an optimizer wrapper whose inner optimizer steps this rank's shard only.
class ZeroOptimizer {
 public:
  /// Wraps the parameters of `module` that require grad (collective over `group`: checks every rank
  /// holds the same parameters, then takes rank 0's). stage must be 1 or 2 (3: FullyShardedDataParallel).
  ZeroOptimizer(nn::ModulePtr module, OptimizerFactory factory, int stage = 1, ProcessGroupPtr group = world());
  ~ZeroOptimizer();
  ZeroOptimizer(const ZeroOptimizer&) = delete;
  ZeroOptimizer& operator=(const ZeroOptimizer&) = delete;

  /// Sets the gradients of the parameters and of the shards to None.
  void zero_grad();
  /// Averages the gradients over the ranks (stage 1: all_reduce; 2: reduce_scatter), steps the shard,
  /// all_gathers the updated parameters (collective).
  void step();

  /// 1 or 2.
  int stage() const;
  /// The group.
  const ProcessGroupPtr& process_group() const;
  /// The inner optimizer (over the shard tensors).
  optim::Optimizer& inner();
  /// The flat shard tensors (one per dtype group) the inner optimizer steps.
  std::vector<Tensor> shard_parameters() const;
  /// The layout of every flat buffer.
  const std::vector<FlatShardInfo>& flat_shards() const;
  /// What this rank holds now.
  ShardMemory memory_per_rank() const;
  /// memory_per_rank().total().
  int64_t bytes_per_rank() const { return memory_per_rank().total(); }

  /// This rank's piece of every parameter and optimizer state tensor (layout at the top of this file).
  std::vector<ShardedTensor> sharded_state_dict() const;
  /// Writes rank<r>.troupe (every rank) and index.troupe (rank 0) into `dir` (collective: returns once
  /// every rank's file is written).
  void save_sharded(const std::string& dir) const;
  /// Loads a checkpoint save_sharded wrote at any world size into the parameters and optimizer state
  /// (collective). Errors name the missing file or the entry and shapes that differ.
  void load_sharded(const std::string& dir);

 private:
  std::unique_ptr<detail::ShardCore> core_;
};

/// ZeRO stage 3: wraps a module whose parameters each rank stores only a shard of (one flat unit).
class FullyShardedDataParallel : public nn::Module {
 public:
  /// Registers `module` as the child "module", takes rank 0's parameters, keeps this rank's shards
  /// and frees the full parameters (collective over `group`).
  FullyShardedDataParallel(nn::ModulePtr module, OptimizerFactory factory, ProcessGroupPtr group = world());
  ~FullyShardedDataParallel() override;
  FullyShardedDataParallel(const FullyShardedDataParallel&) = delete;
  FullyShardedDataParallel& operator=(const FullyShardedDataParallel&) = delete;

  /// "FullyShardedDataParallel".
  std::string name() const override { return "FullyShardedDataParallel"; }
  /// Calls the wrapped module with one tensor (through forward_args).
  Tensor forward(const Tensor& input) override;
  /// Gathers the parameters when freed, then calls the wrapped module.
  nn::Value forward_args(const nn::Args& args, const nn::Kwargs& kwargs) override;

  /// Sets the gradients of the parameters and of the shards to None.
  void zero_grad();
  /// Reduce-scatters (AVG) the gradients into the shard gradients, frees the full parameters and
  /// gradients, steps the shard (collective; a no-op reduction when no forward ran since the last step).
  void step();
  /// all_gathers the full parameters (collective; forward does this when they are freed).
  void gather_parameters();
  /// Points every parameter at an empty tensor and drops the gathered buffers.
  void free_parameters();
  /// Whether the full parameters are gathered now.
  bool parameters_gathered() const;

  /// The wrapped module.
  const nn::ModulePtr& module() const { return module_; }
  /// The group.
  const ProcessGroupPtr& process_group() const;
  /// The inner optimizer (over the shard tensors).
  optim::Optimizer& inner();
  /// The flat shard tensors (one per dtype group).
  std::vector<Tensor> shard_parameters() const;
  /// The layout of every flat buffer.
  const std::vector<FlatShardInfo>& flat_shards() const;
  /// What this rank holds now.
  ShardMemory memory_per_rank() const;
  /// memory_per_rank().total().
  int64_t bytes_per_rank() const { return memory_per_rank().total(); }

  /// As ZeroOptimizer's.
  std::vector<ShardedTensor> sharded_state_dict() const;
  /// As ZeroOptimizer's.
  void save_sharded(const std::string& dir) const;
  /// As ZeroOptimizer's; leaves the parameters freed.
  void load_sharded(const std::string& dir);

 private:
  nn::ModulePtr module_;
  std::unique_ptr<detail::ShardCore> core_;
};

}  // namespace troupe::comm
