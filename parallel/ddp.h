// DistributedDataParallel: data parallelism with replicated parameters over a process group
// (torch.nn.parallel.DistributedDataParallel, PyTorch 1.13's semantics):
//
//   auto model = std::make_shared<nn::SequentialImpl>(...);
//   auto ddp = std::make_shared<parallel::DistributedDataParallel>(model);   // on comm::world()
//   optim::SGD opt(ddp->parameters(), optim::SGDOptions(0.1));
//   Tensor loss = loss_fn((*ddp)(my_shard_of_the_batch), targets);
//   opt.zero_grad(); loss.backward(); opt.step();                         // grads averaged over ranks
//
// At construction every rank checks that it holds the same parameters (shapes, dtypes) and bucket
// layout as the others (a clear error names the first difference), then takes rank 0's parameters and
// buffers. The parameters that require grad are packed, in reverse registration order (about the
// order backward produces their gradients), into buckets of one dtype and device: the first holds
// about first_bucket_mb, the others about bucket_cap_mb (the layout PyTorch rebuilds after its first
// iteration; troupe keeps it from the start). A post-accumulate-grad hook on each parameter copies its
// gradient, times 1/size, into its bucket; once a bucket is full its SUM all-reduce starts on the
// group's queue (buckets start in index order on every rank) and runs while backward goes on. The
// hook that completes the last bucket waits for all of them and writes the averages back into .grad.
// Parameters of 256 KiB and more skip the copies: their bucket all-reduces (AVG) each one's .grad in
// place (the same .grad tensor, as PyTorch's copy_ into it leaves it).
//
// no_sync() lets gradients accumulate locally; the first backward after it reduces the sums.
// broadcast_buffers: rank 0's buffers are broadcast before each forward that follows a forward with
// gradient sync (PyTorch's require_forward_param_sync; the first forward included).
// A parameter that gets no gradient: with find_unused_parameters the forward's output graph tells
// which parameters it cannot reach; they count as ready (zero contribution) and their .grad is left
// alone when no rank used them. Without it, the next forward throws PyTorch's "Expected to have
// finished reduction in the prior iteration ..." naming the parameters that got no gradient.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <troupe/comm/process_group.h>
#include <troupe/nn/module.h>
#include <troupe/util/options.h>
#include <troupe/tensor/tensor.h>

namespace troupe::parallel {

/// Options of DistributedDataParallel (the keyword arguments of torch's constructor).
struct DDPOptions {
  /// Size of every bucket after the first, in MiB (1024*1024 bytes).
  TROUPE_ARG(double, bucket_cap_mb) = 25;
  /// Size of the first bucket (the last-registered parameters, whose gradients come first), in MiB.
  TROUPE_ARG(double, first_bucket_mb) = 1;
  /// Broadcast rank 0's buffers before each forward (in sync mode).
  TROUPE_ARG(bool, broadcast_buffers) = true;
  /// Find the parameters the forward's output does not reach and count them as ready.
  TROUPE_ARG(bool, find_unused_parameters) = false;
  /// After the first reduction each .grad is a view into its bucket (no copy in or out).
  TROUPE_ARG(bool, gradient_as_bucket_view) = false;
};

/// Wraps a module so that backward averages its gradients over the ranks of a group.
class DistributedDataParallel : public nn::Module {
 public:
  /// Registers `module` as the child "module" (state_dict keys "module.<name>"), checks every rank's
  /// model matches, broadcasts rank 0's parameters and buffers, builds the buckets and hooks. Every
  /// rank of `group` must construct it (collective).
  explicit DistributedDataParallel(nn::ModulePtr module, comm::ProcessGroupPtr group = comm::world(), DDPOptions options = {});
  /// Removes the gradient hooks; waits (bounded by the group's timeout) for reductions in flight.
  ~DistributedDataParallel() override;
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  /// "DistributedDataParallel".
  std::string name() const override { return "DistributedDataParallel"; }
  /// Calls the wrapped module with one tensor (through forward_args).
  Tensor forward(const Tensor& input) override;
  /// Syncs buffers if due, calls the wrapped module, and prepares the reduction of the next backward.
  nn::Value forward_args(const nn::Args& args, const nn::Kwargs& kwargs) override;

  /// The wrapped module.
  const nn::ModulePtr& module() const { return module_; }
  /// The group gradients are averaged over.
  const comm::ProcessGroupPtr& process_group() const { return group_; }
  /// The options given.
  const DDPOptions& options() const { return options_; }

  /// Restores gradient sync when it goes out of scope (see no_sync()).
  class NoSyncGuard {
   public:
    /// Turns sync off on `ddp` and remembers the previous setting.
    explicit NoSyncGuard(DistributedDataParallel& ddp);
    /// Restores the previous setting.
    ~NoSyncGuard();
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    DistributedDataParallel& ddp_;
    bool previous_;
  };
  /// Within the guard's scope, forward/backward accumulate gradients locally without communication;
  /// the first backward after it (of a forward run with sync) reduces the accumulated gradients.
  [[nodiscard]] NoSyncGuard no_sync() { return NoSyncGuard(*this); }
  /// Whether a forward run now prepares a gradient reduction (false inside no_sync()).
  bool require_backward_grad_sync() const { return require_backward_grad_sync_; }

  /// The buckets, in reduction order: each lists its parameters as indices into
  /// module()->parameters() (in the bucket's order: reverse registration order).
  std::vector<std::vector<size_t>> bucket_indices() const;
  /// The size in bytes of each bucket, in reduction order.
  std::vector<int64_t> bucket_bytes() const;

  struct Reducer;  // implementation detail (ddp.cpp)

 private:
  void sync_buffers();

  nn::ModulePtr module_;
  comm::ProcessGroupPtr group_;
  DDPOptions options_;
  bool require_backward_grad_sync_ = true;
  bool require_forward_param_sync_ = true;
  std::shared_ptr<Reducer> reducer_;
};

namespace detail {
/// Parameters of at least this many bytes (default 256 KiB) are all-reduced in place on their .grad,
/// one all-reduce each, instead of through their bucket's flat buffer (no copy in and back). For tests
/// and the bench: 0 reduces every parameter so, a huge value none. Read when a DDP is constructed.
void set_ddp_in_place_bytes(int64_t bytes);
/// The current threshold (set_ddp_in_place_bytes).
int64_t ddp_in_place_bytes();
}  // namespace detail

}  // namespace troupe::parallel
