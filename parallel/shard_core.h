// ZeRO's shared state (internal): detail::ShardCore, what ZeroOptimizer and FullyShardedDataParallel
// wrap. Its state is declared here, grouped by the file that works on it:
//   zero.cpp               construction, zero_grad, step; the public classes
//   flat_param.cpp         the flat per-dtype buffers padded to a multiple of size(), shards, all_gather
//   fsdp_units.cpp         units (stage 3): gather before forward, free after, again in backward; prefetch
//   grad_reducer.cpp       gradients: buckets reduce-scattered from the post-accumulate-grad hooks; stage 1
//   shard_memory.cpp       memory_per_rank and its peaks
//   sharded_checkpoint.cpp the sharded state dict, rank<r>.troupe + index.troupe, loading at any size
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <troupe/parallel/grad_buckets.h>
#include <troupe/parallel/zero.h>

namespace troupe::parallel::detail {

/// A shape as a vector.
inline std::vector<int64_t> to_shape(IntArrayRef s) { return std::vector<int64_t>(s.begin(), s.end()); }
/// Bytes of a tensor's elements (0 when undefined).
inline int64_t bytes_of(const Tensor& t) { return t.defined() ? t.numel() * static_cast<int64_t>(t.element_size()) : 0; }
/// Bytes of a tensor's storage now (0 when undefined; a freed flat buffer's is 0).
int64_t storage_bytes(const Tensor& t);
/// [lo, lo + len) of member k's flattened tensor (member_numel elements) that rank r's slice of `g`
/// covers (len may be 0).
std::pair<int64_t, int64_t> piece_of(const FlatShardInfo& g, int64_t member_numel, size_t k, int r);

/// One entry of the sharded state dict and where it lies in the flat buffers.
struct ShardEntry {
  /// The entry.
  ShardedTensor t;
  /// Its flat buffer (sharded entries; -1 for replicated ones).
  int g = -1;
  /// Its member index in that buffer.
  int k = -1;
};

/// The flat buffers, shards, units, gradient buckets and inner optimizer of one ZeRO wrapper.
struct ShardCore : std::enable_shared_from_this<ShardCore> {
  // ---- configuration
  comm::ProcessGroupPtr group;
  int stage = 1;
  std::string who;  // "[ZeroOptimizer]", "[FullyShardedDataParallel]"
  double first_bucket_mb = 1, bucket_cap_mb = 25;
  int64_t first_bucket_bytes = 0, bucket_cap_bytes = 0;
  bool overlap = true;
  bool reshard_after_forward = true;
  bool prefetch = true;
  AutoWrapPolicy policy;

  // ---- parameters and layout (flat_param.cpp)
  std::vector<std::string> names;
  std::vector<Tensor> params;  // parameters that require grad, registration order
  std::vector<std::vector<int64_t>> shapes;
  std::vector<size_t> unit_of_param;      // parameter -> unit
  std::vector<size_t> group_of, slot_of;  // parameter -> flat buffer, member index in it
  std::vector<FlatShardInfo> groups;
  std::vector<size_t> launch_order;  // flat buffers in reduction order (reverse registration)
  std::vector<Tensor> full;     // per buffer: the flat buffer (stage 3: storage released while freed)
  std::vector<Tensor> shards;   // per buffer: the shard the inner optimizer steps (stages 1-2: full's slice)
  std::vector<Tensor> views;    // per parameter: its view of its buffer
  std::vector<Tensor> empties;  // stage 3, per parameter: what it points at while freed
  std::unique_ptr<optim::Optimizer> opt;
  bool registered = false;

  // ---- units (fsdp_units.cpp; stages 1-2 have the root unit only)
  struct UnitState {
    nn::Module* module = nullptr;
    bool gathered = false;
    std::vector<comm::WorkPtr> gathering;  // all_gathers in flight (prefetch)
    std::vector<uint32_t> versions;        // the buffers' version counters before the gather
    size_t pending = 0;                    // parameters without their gradient in this reduction round
  };
  std::vector<ShardUnit> units;
  std::vector<UnitState> ustate;
  std::vector<size_t> forward_order;  // units in the order their forward started, since the root's
  std::vector<nn::RemovableHandle> module_hooks;

  // ---- gradient reduction (grad_reducer.cpp; stages 2-3)
  struct Bucket {
    Tensor flat;  // this round's full gradient of the buffer (allocated at its first member)
    size_t pending = 0;
  };
  struct InFlight {
    size_t g = 0;
    Tensor flat, out;  // the reduce-scatter's input and output (out is flat when size() == 1)
    comm::WorkPtr work;
  };
  GradReadyHooks grad_hooks;  // stages 2-3: on every parameter
  std::vector<Bucket> buckets;
  bool round_active = false;
  std::vector<char> ready;
  size_t next_launch = 0;
  std::deque<std::unique_ptr<InFlight>> in_flight;  // launched, in launch order

  // ---- memory (shard_memory.cpp)
  ShardMemory peak;

  /// Removes the hooks, waits (quietly) for collectives in flight, unregisters the parameters.
  ~ShardCore();

  // ---- zero.cpp
  /// Checks the arguments, lays out and fills the flat buffers, makes the optimizer, installs the hooks.
  void build(const nn::ModulePtr& module, const OptimizerFactory& factory);
  /// Sets every .grad (parameters and shards) to None after dropping the reduction in flight.
  void zero_grad();
  /// The stage's step: reduce, step the shards, all_gather (stages 1-2) or free the units (stage 3).
  void step();

  // ---- flat_param.cpp
  /// DDP's bucket assignment per (unit, dtype, device), one flat buffer per bucket, padded to size().
  void assign_buckets();
  /// Rank 0's values into the flat buffers; the parameters' views and this rank's shards.
  void make_flat_buffers();
  /// Elements of parameter i.
  int64_t numel_of(size_t i) const;
  /// The updated shards back into every rank's flat buffer (stages 1-2).
  void all_gather_full();

  // ---- fsdp_units.cpp
  /// Units: [0] the root, then the submodules the policy picks that end up with parameters.
  void make_units(const nn::ModulePtr& module);
  /// Stage 3: forward pre- and post-hooks on the modules of units other than the root.
  void install_unit_hooks();
  /// Starts the all_gather of unit u's buffers into their storage (given back in place).
  void start_gather(size_t u);
  /// Unit u's parameters view its gathered buffers (waits for a prefetch in flight).
  void gather_unit(size_t u);
  /// Unit u's parameters point at empty tensors; its buffers' storage is released (stage 3).
  void free_unit(size_t u);
  /// Every unit gathered.
  void gather_all();
  /// Every unit freed.
  void free_all();
  /// Whether every unit with buffers is gathered.
  bool all_gathered() const;
  /// FullyShardedDataParallel::forward_args, before and after the wrapped module runs.
  void root_pre_forward();
  void root_post_forward(const nn::Value& out);
  /// The forward hooks of unit u's module.
  void pre_forward(size_t u);
  void post_forward(size_t u, const nn::Value& out);
  /// FSDP's pre-backward hook on the gradients of unit u's outputs.
  void hook_outputs(size_t u, const nn::Value& out);
  /// Backward reached unit u: gather it; with prefetch, start gathering the unit backward reaches next.
  void pre_backward(size_t u);

  // ---- grad_reducer.cpp
  /// Stages 2-3: the post-accumulate-grad hook on every parameter.
  void install_grad_hooks();
  void start_round();
  /// The post-accumulate-grad hook of parameter i.
  void on_grad_ready(size_t i);
  /// Bucket g's full gradient (allocated zero at first use in a round).
  Tensor& bucket_flat(size_t g);
  /// Parameter i's .grad (defined) into its place in `flat`, a full gradient of its flat buffer.
  void copy_grad_into(Tensor& flat, size_t i) const;
  /// Moves parameter i's .grad (or zeros) into its bucket and frees it.
  void take_grad(size_t i);
  void mark_ready(size_t i);
  /// Starts bucket g's reduce-scatter (AVG).
  void launch(size_t g);
  /// Launches, in reduction order, every bucket whose members are all in.
  void launch_ready();
  void launch_remaining();
  /// A finished reduce-scatter: its result joins the shard's gradient.
  void complete(InFlight& f);
  void poll();
  void wait_all();
  /// Launches what is left of the round and waits for every reduce-scatter.
  void finish_reduction();
  /// Waits for the reductions in flight and drops them with the round's partial buckets.
  void drop_reduction();
  /// Stage 1: the gradients all-reduced (AVG) into .grad (full) and the shard's.
  void all_reduce_gradients();

  // ---- shard_memory.cpp
  int64_t shard_bytes() const;
  int64_t param_bytes() const;
  /// Gradients held besides the parameters' .grad: the shards', the buckets', those in flight.
  int64_t reduction_grad_bytes() const;
  /// What this rank holds now.
  ShardMemory memory() const;
  void note_peak_params();
  void note_peak_grads(int64_t extra);
  void note_peak(const ShardMemory& m);

  // ---- sharded_checkpoint.cpp
  /// The inner optimizer's parameter `idx` -> its flat buffer (-1: none).
  int group_of_opt_index(size_t idx) const;
  /// This rank's piece of every parameter and optimizer state tensor (layout in zero.h).
  std::vector<ShardEntry> entries() const;
  /// Writes rank<r>.troupe (every rank) and index.troupe (rank 0) into `dir` (collective).
  void save(const std::string& dir) const;
  /// Loads a checkpoint save wrote at any world size (collective).
  void load(const std::string& dir);
};

}  // namespace troupe::parallel::detail
