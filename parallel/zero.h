// Sharded data parallelism (ZeRO stages 1, 2 and 3; DeepSpeed's ZeRO, PyTorch's
// ZeroRedundancyOptimizer and FullyShardedDataParallel) and the sharded checkpoint.
//
// Flat sharding (FSDP's FlatParameter): the parameters of the model that require grad are packed into
// flat buffers ("flat shards"), each padded with zeros to a multiple of size(); rank r owns the
// contiguous slice [r * S, (r + 1) * S), S = padded / size(), of every buffer. A buffer holds one
// gradient bucket: the parameters of one unit (below) and one dtype, taken in reverse registration
// order (about the order backward produces their gradients) until the bucket holds first_bucket_mb
// (the first bucket of each unit and dtype) or bucket_cap_mb (the others), as DDP's buckets; inside a
// buffer the members lie in registration order, and flat_shards() lists the buffers by their first
// member. The inner optimizer (made by the factory) sees one shard tensor per buffer as its
// parameters, so its state is 1/size() of the unsharded optimizer's.
//
//   parallel::ZeroOptimizer zero(model, [](std::vector<Tensor> shards) {
//     return std::make_unique<optim::Adam>(shards, optim::AdamOptions(1e-3));
//   }, /*stage=*/2);                                  // on comm::world()
//   Tensor loss = loss_fn((*model)(my_rows), my_targets);
//   zero.zero_grad(); loss.backward(); zero.step();
//
//   auto fsdp = std::make_shared<parallel::FullyShardedDataParallel>(model, factory, comm::world(),
//       parallel::FSDPOptions().auto_wrap_policy(parallel::children_wrap_policy()));   // one unit per child
//   Tensor loss = loss_fn((*fsdp)(my_rows), my_targets);
//   fsdp->zero_grad(); loss.backward(); fsdp->step();
//
// stage 1: step() all-reduces (AVG) the full gradients (written back into .grad), each rank steps its
//          shard, then all_gather puts the updated shards back into the full parameters.
// stage 2: a post-accumulate-grad hook on every parameter (DDP's mechanism) copies its .grad into its
//          bucket's flat gradient buffer and frees the .grad; once every member of a bucket is in, the
//          bucket's reduce-scatter (AVG) starts asynchronously (buckets start in reduction order on every
//          rank), overlapping the rest of backward, and its result is added to the shard's gradient;
//          the bucket's full gradient is freed once its reduce-scatter is done. step() starts the
//          buckets whose members did not all get a gradient (a missing .grad counts as zeros), waits for
//          every reduce-scatter, steps the shard and all_gathers as stage 1. With overlap_comm(false)
//          the reduce-scatters start in step() instead (the previous behaviour).
// stage 3: FullyShardedDataParallel (a Module): each rank stores its shards only. Units (FSDP's
//          auto-wrap): by default the whole model is one unit (the root); with auto_wrap_policy every
//          submodule the policy picks is a unit of its own, and the root unit keeps the parameters no
//          picked submodule holds (and those shared between units). A parameter belongs to the
//          innermost unit that contains every module holding it. A unit's buffers are all-gathered
//          before its forward (a forward pre-hook on its module; the root's in
//          FullyShardedDataParallel::forward) and, for units other than the root, freed after it unless
//          reshard_after_forward is false; a hook on the unit's outputs gathers them again when
//          backward reaches the unit (and, with backward_prefetch, starts gathering the unit that
//          backward reaches next, so that its all-gather is queued before this unit's
//          reduce-scatters); once every parameter of the unit has its gradient, the unit's full
//          parameters are freed. Gradients are reduced from the hooks as in stage 2. step() finishes the
//          reduction, frees every unit still gathered (units whose parameters did not all get a
//          gradient) and steps the shards. Peak parameter memory is about the shards plus the root unit
//          plus the largest unit (two in backward with prefetch), or every unit with
//          reshard_after_forward false. A freed unit's buffers release their storage: the parameters
//          point at empty tensors, and the views autograd saved keep the (empty) storage, which the next
//          gather fills again in place. Units must be called through Module::call (operator()), so
//          that their hooks run.
// In stages 1 and 2 the model's parameters are views into the flat buffers (their storage changes at
// construction; identities and autograd state stay). Every rank starts from rank 0's parameters.
// Every rank of the group must construct, forward/backward and step in lockstep (collectives), with the
// same graph: a parameter that gets a gradient on one rank must get one on every rank in the same
// backward. In stages 2 and 3 .grad is None after backward (the shard gradients hold the averages).
// Gradients accumulate: two backward calls before step() add up, as in a single process (a bucket that
// still misses members when a parameter's hook fires a second time is completed with zeros first).
// A parameter without .grad counts as a zero gradient (the shard is stepped as a whole, so momentum and
// weight decay still act); in stage 3 a step() with no backward since the last one steps nothing (the
// shard gradients are None). A parameter can be wrapped by one ZeroOptimizer or
// FullyShardedDataParallel at a time. memory_per_rank() measures what is held when it is called (after
// step(): the figures of the stage); max_memory_per_rank() the most seen since construction or
// reset_peak_memory_stats(). FullyShardedDataParallel's Module::state_dict() shows empty parameters
// while they are freed: use sharded_state_dict / save_sharded.
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
// optimizer's scalars and options, g = flat buffer) as written by optim::Optimizer::state_dict().
// Entries are per parameter, so the unit and bucket layout may differ between save and load.
// load_sharded: each rank reads from the old files only the pieces that overlap its new shard; when the
// number of flat buffers differs, every buffer takes the per-buffer scalars (Adam's step) of the first
// saved buffer that has them (the buffers step together, so they are equal), and "params" lists come
// from the new optimizer.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <troupe/comm/process_group.h>
#include <troupe/nn/module.h>
#include <troupe/optim/optimizer.h>
#include <troupe/util/options.h>
#include <troupe/tensor/tensor.h>

namespace troupe::parallel {

/// Makes the inner optimizer over this rank's flat shard tensors (one per flat buffer).
using OptimizerFactory = std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor> shard_params)>;

/// Options of ZeroOptimizer (DeepSpeed's reduce_bucket_size and overlap_comm, in DDP's units).
struct ZeroOptions {
  /// Size of every gradient bucket (flat buffer) after the first of each dtype, in MiB.
  TROUPE_ARG(double, bucket_cap_mb) = 25;
  /// Size of the first bucket of each dtype (the last-registered parameters), in MiB.
  TROUPE_ARG(double, first_bucket_mb) = 1;
  /// Stage 2: start each bucket's reduce-scatter from the gradient hooks during backward (false: in step()).
  TROUPE_ARG(bool, overlap_comm) = true;
};

/// Picks the submodules that become FSDP units: called with each submodule's dotted name and the module
/// (pre-order, the wrapped module itself excluded); true makes it a unit.
using AutoWrapPolicy = std::function<bool(const std::string& name, const nn::Module& module)>;
/// Every direct child of the wrapped module is a unit.
AutoWrapPolicy children_wrap_policy();
/// These submodules (by identity) are units (a user-given list; PyTorch's lambda_auto_wrap_policy).
AutoWrapPolicy modules_wrap_policy(std::vector<nn::ModulePtr> modules);

/// Options of FullyShardedDataParallel.
struct FSDPOptions {
  /// Which submodules are units of their own (empty: the whole model is one unit).
  TROUPE_ARG(AutoWrapPolicy, auto_wrap_policy);
  /// Free a unit's full parameters after its forward (PyTorch's ShardingStrategy.FULL_SHARD); false
  /// keeps them until its backward is done (SHARD_GRAD_OP). The root unit is never freed after forward.
  TROUPE_ARG(bool, reshard_after_forward) = true;
  /// When backward reaches a unit, start gathering the unit backward reaches next (BackwardPrefetch.
  /// BACKWARD_PRE; off by default as PyTorch 1.13's None: it holds two units' parameters in backward).
  TROUPE_ARG(bool, backward_prefetch) = false;
  /// Size of every gradient bucket after the first of each unit and dtype, in MiB.
  TROUPE_ARG(double, bucket_cap_mb) = 25;
  /// Size of the first bucket of each unit and dtype, in MiB.
  TROUPE_ARG(double, first_bucket_mb) = 1;
  /// Start each bucket's reduce-scatter from the gradient hooks during backward (false: in step()).
  TROUPE_ARG(bool, overlap_comm) = true;
};

/// One flat buffer (one gradient bucket: one unit, one dtype) and this rank's slice of it.
struct FlatShardInfo {
  /// The dtype of the buffer's parameters.
  ScalarType dtype = kFloat32;
  /// Indices into the wrapped parameters (requires_grad, registration order) of the members, ascending.
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
  /// The unit the buffer belongs to (index into FullyShardedDataParallel::units(); 0 in stages 1-2).
  size_t unit = 0;
};

/// One FSDP unit: what is gathered and freed together.
struct ShardUnit {
  /// Dotted name of the unit's module ("" for the root unit).
  std::string name;
  /// Indices into the wrapped parameters of the unit's parameters, ascending.
  std::vector<size_t> params;
  /// Indices into flat_shards() of the unit's buffers.
  std::vector<size_t> flat_shards;
  /// Bytes of the unit's gathered (padded) buffers.
  int64_t full_bytes = 0;
};

/// What a rank holds, in bytes (measured on the tensors it keeps).
struct ShardMemory {
  /// Parameter storage (full flat buffers in stages 1-2; the shards, plus the buffers of the units
  /// gathered, in stage 3).
  int64_t params = 0;
  /// Gradients held (.grad of the parameters and of the shards, and the buckets' flat gradients and
  /// reduce-scatter outputs in flight).
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
struct ShardCore;  // the flat buffers, shards, units, gradient buckets and inner optimizer (shard_core.h)
}

/// ZeRO stages 1 and 2: an optimizer wrapper whose inner optimizer steps this rank's shard only.
class ZeroOptimizer {
 public:
  /// Wraps the parameters of `module` that require grad (collective over `group`: checks every rank
  /// holds the same parameters and buffer layout, then takes rank 0's). stage must be 1 or 2 (3:
  /// FullyShardedDataParallel).
  ZeroOptimizer(nn::ModulePtr module, OptimizerFactory factory, int stage = 1, comm::ProcessGroupPtr group = comm::world(),
                ZeroOptions options = {});
  /// Removes the gradient hooks; waits (bounded by the group's timeout) for reductions in flight.
  ~ZeroOptimizer();
  ZeroOptimizer(const ZeroOptimizer&) = delete;
  ZeroOptimizer& operator=(const ZeroOptimizer&) = delete;

  /// Sets the gradients of the parameters and of the shards to None (waits for reductions in flight
  /// and drops them).
  void zero_grad();
  /// Averages the gradients over the ranks (stage 1: all_reduce; 2: finishes the bucket reduce-scatters),
  /// steps the shard, all_gathers the updated parameters (collective).
  void step();

  /// 1 or 2.
  int stage() const;
  /// The group.
  const comm::ProcessGroupPtr& process_group() const;
  /// The options given.
  const ZeroOptions& options() const;
  /// The inner optimizer (over the shard tensors).
  optim::Optimizer& inner();
  /// The flat shard tensors (one per flat buffer) the inner optimizer steps.
  std::vector<Tensor> shard_parameters() const;
  /// The layout of every flat buffer.
  const std::vector<FlatShardInfo>& flat_shards() const;
  /// What this rank holds now.
  ShardMemory memory_per_rank() const;
  /// The most of each field seen (each field's own maximum) since construction or the last reset.
  ShardMemory max_memory_per_rank() const;
  /// Restarts max_memory_per_rank() from what is held now.
  void reset_peak_memory_stats();
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
  ZeroOptions options_;
  std::shared_ptr<detail::ShardCore> core_;
};

/// ZeRO stage 3: wraps a module whose parameters each rank stores only a shard of, by units.
class FullyShardedDataParallel : public nn::Module {
 public:
  /// Registers `module` as the child "module", takes rank 0's parameters, keeps this rank's shards
  /// and frees the full parameters (collective over `group`).
  FullyShardedDataParallel(nn::ModulePtr module, OptimizerFactory factory, comm::ProcessGroupPtr group = comm::world(),
                           FSDPOptions options = {});
  /// Removes the hooks; waits (bounded by the group's timeout) for collectives in flight.
  ~FullyShardedDataParallel() override;
  FullyShardedDataParallel(const FullyShardedDataParallel&) = delete;
  FullyShardedDataParallel& operator=(const FullyShardedDataParallel&) = delete;

  /// "FullyShardedDataParallel".
  std::string name() const override { return "FullyShardedDataParallel"; }
  /// Calls the wrapped module with one tensor (through forward_args).
  Tensor forward(const Tensor& input) override;
  /// Gathers the root unit when freed, then calls the wrapped module (whose units gather themselves).
  nn::Value forward_args(const nn::Args& args, const nn::Kwargs& kwargs) override;

  /// Sets the gradients of the parameters and of the shards to None (waits for reductions in flight
  /// and drops them).
  void zero_grad();
  /// Finishes the gradient reduce-scatters (AVG) into the shard gradients, frees every unit still
  /// gathered, steps the shards (collective; steps nothing when no backward ran since the last step).
  void step();
  /// all_gathers the full parameters of every unit (collective; forward does this unit by unit).
  void gather_parameters();
  /// Points every parameter at an empty tensor and releases the gathered buffers' storage.
  void free_parameters();
  /// Whether every unit's full parameters are gathered now.
  bool parameters_gathered() const;
  /// Whether unit `unit`'s full parameters are gathered now.
  bool unit_gathered(size_t unit) const;

  /// The wrapped module.
  const nn::ModulePtr& module() const { return module_; }
  /// The group.
  const comm::ProcessGroupPtr& process_group() const;
  /// The options given.
  const FSDPOptions& options() const { return options_; }
  /// The units: [0] is the root unit (the parameters no other unit holds; it may have none).
  const std::vector<ShardUnit>& units() const;
  /// The inner optimizer (over the shard tensors).
  optim::Optimizer& inner();
  /// The flat shard tensors (one per flat buffer).
  std::vector<Tensor> shard_parameters() const;
  /// The layout of every flat buffer.
  const std::vector<FlatShardInfo>& flat_shards() const;
  /// What this rank holds now.
  ShardMemory memory_per_rank() const;
  /// As ZeroOptimizer's.
  ShardMemory max_memory_per_rank() const;
  /// As ZeroOptimizer's.
  void reset_peak_memory_stats();
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
  FSDPOptions options_;
  std::shared_ptr<detail::ShardCore> core_;
};

}  // namespace troupe::parallel
