// Process groups and collectives (torch.distributed's ProcessGroup): every rank of a group calls the
// same collectives in the same order; each has a synchronous form and an `_async` form returning a Work
// handle. Backends: `local` (N ranks as threads of one process), `mpi` (Open MPI, CPU tensors) and
// `nccl` (GPU tensors), with the same results from each.
//
//   auto pg = comm::world();                       // set up by launch::init
//   Tensor g = ...;
//   pg->all_reduce(g, comm::ReduceOp::AVG);        // in place, on every rank
//   auto work = pg->all_reduce_async(g);           // starts it; overlaps with what follows
//   work->wait();
//
// Collectives of one group run one at a time in the order they were issued (a per-group queue), so
// async work completes in issue order. Each collective has a sequence number per group; a collective
// that does not complete within the group's timeout fails on every rank that waits for it with an
// error naming the group, the op, its sequence number and (where the backend can tell) the ranks that
// had not arrived.
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <troupe/tensor/device.h>
#include <troupe/tensor/tensor.h>

namespace troupe::comm {

namespace detail {
struct GroupCounters;  // comm/stats.cpp: the group's collective counters (comm/stats.h)
std::shared_ptr<GroupCounters> new_group_counters();
}  // namespace detail

/// torch.distributed.ReduceOp.
enum class ReduceOp { SUM, AVG, PRODUCT, MIN, MAX };
/// "SUM", "AVG", ...
const char* reduce_op_name(ReduceOp op);

/// What every backend throws: bad arguments, a collective that does not complete within its timeout, a
/// peer that is gone.
class CommError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// The handle of an async collective (torch.distributed's Work).
class Work {
 public:
  virtual ~Work() = default;
  /// True once the collective finished (successfully or not); never blocks.
  virtual bool is_completed() = 0;
  /// Blocks until the collective finished; rethrows its error. `timeout` bounds the wait (past it,
  /// throws CommError; the collective goes on); without one, the wait lasts until the collective ends,
  /// which the group's timeout bounds from when it started.
  virtual void wait(std::optional<std::chrono::milliseconds> timeout = std::nullopt) = 0;
  /// The error the collective ended with, or null.
  virtual std::exception_ptr exception() = 0;
};
using WorkPtr = std::shared_ptr<Work>;

/// Options of a group.
struct GroupOptions {
  /// How long a collective may take before it fails with CommError.
  std::chrono::milliseconds timeout = std::chrono::minutes(5);
  /// Printed in errors ("world", "group[0,2]").
  std::string name = "world";
};

class ProcessGroup;
using ProcessGroupPtr = std::shared_ptr<ProcessGroup>;

namespace detail {
/// True while the calling thread issues an op from one of ProcessGroup's synchronous forms: it will wait
/// for the op at once, so a backend need not wake a worker thread to start it (the waiter runs it).
inline thread_local bool t_sync_call = false;
/// Marks the op issued in its scope as synchronous (t_sync_call).
struct SyncCall {
  bool prev = t_sync_call;
  SyncCall() { t_sync_call = true; }
  ~SyncCall() { t_sync_call = prev; }
  SyncCall(const SyncCall&) = delete;
  SyncCall& operator=(const SyncCall&) = delete;
};
/// Issues an op under SyncCall and waits for it.
template <typename F>
void run_sync(F&& issue) {
  WorkPtr w;
  {
    SyncCall s;
    w = issue();
  }
  w->wait();
}
}  // namespace detail

/// A set of ranks that run collectives together. The collectives are one front for every backend: each
/// checks its arguments here (CommError naming the op, the group and the values: "[all_gather] group
/// 'world' (mpi, rank 1 of 2): outputs holds 3 tensors, expected 2 (the group size)"), then calls the
/// backend's do_* (the transport); a call that fails a check issues nothing and takes no sequence number.
class ProcessGroup : public std::enable_shared_from_this<ProcessGroup> {
 public:
  virtual ~ProcessGroup() = default;

  /// This process's (or thread's) rank in the group, 0 <= rank < size.
  virtual int rank() const = 0;
  /// Number of ranks in the group.
  virtual int size() const = 0;
  /// "local", "mpi" or "nccl".
  virtual std::string backend() const = 0;
  /// The options the group was made with (its timeout, its name).
  virtual const GroupOptions& options() const = 0;
  /// The device its tensors must be on: cpu for the local and mpi backends, cuda:i for nccl and for a
  /// staged group on cuda:i (make_staged_group).
  Device device() const { return traits_.device; }

  // ---- asynchronous collectives

  /// In place: every rank's `tensor` becomes the reduction over ranks (AVG: sum / size).
  WorkPtr all_reduce_async(Tensor& tensor, ReduceOp op = ReduceOp::SUM);
  /// In place: every rank's `tensor` becomes rank `src`'s.
  WorkPtr broadcast_async(Tensor& tensor, int src);
  /// `output` (size * input.numel() elements, dim 0 = size * input.size(0)) gets every rank's `input`
  /// concatenated in rank order (all_gather_into_tensor).
  WorkPtr all_gather_into_tensor_async(Tensor& output, const Tensor& input);
  /// `outputs[r]` gets rank r's `input` (outputs holds size() tensors of input's dtype and numel).
  WorkPtr all_gather_async(std::vector<Tensor>& outputs, const Tensor& input);
  /// `input` (size * output.numel() elements) is split in size() chunks along dim 0; rank r's `output`
  /// gets the reduction over ranks of chunk r (reduce_scatter_tensor).
  WorkPtr reduce_scatter_tensor_async(Tensor& output, const Tensor& input, ReduceOp op = ReduceOp::SUM);
  /// `output` gets the reduction over ranks of `inputs[rank()]` (inputs holds size() tensors).
  WorkPtr reduce_scatter_async(Tensor& output, const std::vector<Tensor>& inputs, ReduceOp op = ReduceOp::SUM);
  /// all_to_all_single with equal splits: chunk j of rank i's `input` (split in size() parts) goes to
  /// chunk i of rank j's `output`.
  WorkPtr all_to_all_async(Tensor& output, const Tensor& input);
  /// Point to point (not ordered with the collectives' queue beyond issue order on each side): sends
  /// `tensor` to rank `dst`, matched by the recv of (this rank, tag) there; 0 <= tag <= the backend's
  /// largest.
  WorkPtr send_async(const Tensor& tensor, int dst, int tag = 0);
  /// Receives into `tensor` (same dtype and number of elements) what rank `src` sent with `tag`.
  WorkPtr recv_async(Tensor& tensor, int src, int tag = 0);
  /// Completes once every rank has entered it.
  WorkPtr barrier_async();

  // ---- synchronous forms: the async form, then wait() (issued under detail::SyncCall)

  /// all_reduce_async, then wait.
  void all_reduce(Tensor& tensor, ReduceOp op = ReduceOp::SUM) {
    detail::run_sync([&] { return all_reduce_async(tensor, op); });
  }
  /// broadcast_async, then wait.
  void broadcast(Tensor& tensor, int src) {
    detail::run_sync([&] { return broadcast_async(tensor, src); });
  }
  /// all_gather_into_tensor_async, then wait.
  void all_gather_into_tensor(Tensor& output, const Tensor& input) {
    detail::run_sync([&] { return all_gather_into_tensor_async(output, input); });
  }
  /// all_gather_async, then wait.
  void all_gather(std::vector<Tensor>& outputs, const Tensor& input) {
    detail::run_sync([&] { return all_gather_async(outputs, input); });
  }
  /// reduce_scatter_tensor_async, then wait.
  void reduce_scatter_tensor(Tensor& output, const Tensor& input, ReduceOp op = ReduceOp::SUM) {
    detail::run_sync([&] { return reduce_scatter_tensor_async(output, input, op); });
  }
  /// reduce_scatter_async, then wait.
  void reduce_scatter(Tensor& output, const std::vector<Tensor>& inputs, ReduceOp op = ReduceOp::SUM) {
    detail::run_sync([&] { return reduce_scatter_async(output, inputs, op); });
  }
  /// all_to_all_async, then wait.
  void all_to_all(Tensor& output, const Tensor& input) {
    detail::run_sync([&] { return all_to_all_async(output, input); });
  }
  /// send_async, then wait.
  void send(const Tensor& tensor, int dst, int tag = 0) {
    detail::run_sync([&] { return send_async(tensor, dst, tag); });
  }
  /// recv_async, then wait.
  void recv(Tensor& tensor, int src, int tag = 0) {
    detail::run_sync([&] { return recv_async(tensor, src, tag); });
  }
  /// barrier_async, then wait.
  void barrier() { detail::run_sync([&] { return barrier_async(); }); }

  // ---- sub-groups (collective over this group: every rank calls them, in the same order)

  /// A group of `ranks` (ranks of this group, in the new group's rank order); null on ranks not in it
  /// (torch.distributed.new_group). Without options it takes this group's; unless they name it, it is
  /// named "<this group's name>/group[<ranks>]" ("world/group[0,2]").
  ProcessGroupPtr new_group(const std::vector<int>& ranks, std::optional<GroupOptions> options = {});
  /// Ranks with the same `color` form one group, ordered by (key, rank); color < 0: null
  /// (MPI_Comm_split). Options and name as new_group's.
  ProcessGroupPtr split(int color, int key, std::optional<GroupOptions> options = {});

  /// Number of collectives issued on this group so far, new_group and split included (the next one
  /// gets this sequence number).
  virtual uint64_t sequence_number() const = 0;

 protected:
  /// What the front checks that differs between backends.
  struct Traits {
    /// Tensors must be on this device: cpu, or cuda:i (a tensor on cuda with index -1 passes).
    Device device = Device(kCPU);
    /// Whether send and recv may name this rank as the peer.
    bool p2p_with_self = false;
    /// Tags are in [0, max_tag].
    int max_tag = 2147483647;
  };
  /// A backend's group with its traits.
  explicit ProcessGroup(Traits traits) : traits_(traits), counters_(detail::new_group_counters()) {}

  /// "[fn] group 'world' (mpi, rank 1 of 2)": the prefix of the front's errors.
  std::string where(const char* fn) const;

  // The transport of each collective, called once its arguments passed the front's checks.
  /// all_reduce_async's transport.
  virtual WorkPtr do_all_reduce(Tensor& tensor, ReduceOp op) = 0;
  /// broadcast_async's transport.
  virtual WorkPtr do_broadcast(Tensor& tensor, int src) = 0;
  /// all_gather_into_tensor_async's transport.
  virtual WorkPtr do_all_gather_into_tensor(Tensor& output, const Tensor& input) = 0;
  /// all_gather_async's transport.
  virtual WorkPtr do_all_gather(std::vector<Tensor>& outputs, const Tensor& input) = 0;
  /// reduce_scatter_tensor_async's transport.
  virtual WorkPtr do_reduce_scatter_tensor(Tensor& output, const Tensor& input, ReduceOp op) = 0;
  /// reduce_scatter_async's transport.
  virtual WorkPtr do_reduce_scatter(Tensor& output, const std::vector<Tensor>& inputs, ReduceOp op) = 0;
  /// all_to_all_async's transport.
  virtual WorkPtr do_all_to_all(Tensor& output, const Tensor& input) = 0;
  /// send_async's transport.
  virtual WorkPtr do_send(const Tensor& tensor, int dst, int tag) = 0;
  /// recv_async's transport.
  virtual WorkPtr do_recv(Tensor& tensor, int src, int tag) = 0;
  /// barrier_async's transport.
  virtual WorkPtr do_barrier() = 0;
  /// new_group's transport: `ranks` are valid; this rank's split of them is (color: 0 in the group, -1
  /// not; key: its index in ranks) and `check` is a hash of the list that every rank must agree on.
  virtual ProcessGroupPtr do_new_group(const std::vector<int>& ranks, int color, int key, int64_t check,
                                       std::optional<GroupOptions> options) = 0;
  /// split's transport (color < 0 comes as -1).
  virtual ProcessGroupPtr do_split(int color, int key, std::optional<GroupOptions> options) = 0;

 private:
  friend class StagedGroup;  // staged.cpp: runs its inner group's transports (do_*) on the staged copies

  void check_tensor(const char* fn, const char* what, const Tensor& t) const;
  void check_list(const char* fn, const char* what, const std::vector<Tensor>& list, const Tensor& like) const;
  void check_peer(const char* fn, const char* what, int peer, int tag) const;
  /// Counts op `op` (comm/stats.h) and wraps its Work to time it.
  WorkPtr counted(int op, int64_t bytes, WorkPtr work);

  Traits traits_;
  std::shared_ptr<detail::GroupCounters> counters_;
};

/// The world group: the calling thread's own (set_thread_world; run_local) if any, else the one
/// launch::init made (null before).
ProcessGroupPtr world();
/// Sets the world group (launch::init calls this; tests may too).
void set_world(ProcessGroupPtr group);
/// Sets the calling thread's own world group, which world() returns on that thread in preference to
/// the process-wide one (run_local gives each rank's thread its group); null clears it.
void set_thread_world(ProcessGroupPtr group);

}  // namespace troupe::comm
