// The local backend's rendezvous state and op queue (internal, shared by local_queue.cpp, local.cpp and
// local_run.cpp): what the ranks of a group share (its rendezvous by sequence number, its mailboxes), the
// universe of groups a failing rank aborts, and each rank's queue of ops with their Work.
#pragma once

#include <troupe/comm/local.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace troupe::comm::local_impl {

using Clock = std::chrono::steady_clock;

/// The collectives (send and recv are not: they have no rendezvous).
enum class OpKind {
  AllReduce, Broadcast, AllGatherIntoTensor, AllGather, ReduceScatterTensor, ReduceScatter, AllToAll,
  Barrier, NewGroup, Split
};

struct WorldState;

// The groups of one make_local_groups call and every sub-group made from them: a failing rank aborts
// them together.
struct Universe {
  std::atomic<bool> aborted{false};
  std::mutex mu;
  std::string reason;
  std::vector<std::weak_ptr<WorldState>> states;

  void add(const std::shared_ptr<WorldState>& s) {
    std::lock_guard<std::mutex> g(mu);
    std::erase_if(states, [](const auto& w) { return w.expired(); });
    states.push_back(s);
  }
  std::string why() {
    std::lock_guard<std::mutex> g(mu);
    return reason;
  }
  /// Fails every pending and later collective of these groups with `why` (the first reason wins).
  void abort(const std::string& why);
};

// What one rank brought to a rendezvous.
struct Slot {
  OpKind kind = OpKind::Barrier;
  ReduceOp op = ReduceOp::SUM;
  int src = -1;
  bool has_tensor = false;  // dtype and in_shape are compared across ranks
  bool has_out = false;     // out_shape too
  const char* in_label = "tensor";
  ScalarType dtype = kFloat32;
  std::vector<int64_t> in_shape, out_shape;
  const std::byte* in = nullptr;
  std::byte* out = nullptr;
  std::vector<const std::byte*> ins;  // reduce_scatter: inputs[q]
  std::vector<std::byte*> outs;       // all_gather: outputs[q]
  std::vector<int> ranks;             // new_group
  int color = 0, key = 0;             // split
  std::optional<GroupOptions> options;  // new_group, split
};

struct Rendezvous {
  explicit Rendezvous(int size) : slots(size), arrived(size, false) {}
  std::vector<Slot> slots;
  std::vector<bool> arrived;
  int n_arrived = 0, n_computed = 0, n_left = 0;
  bool ready = false;  // every rank arrived, consistently: phase 1 may start
  std::string error;   // set instead of ready (mismatch, timeout, abort) or by a failing phase 1
  std::byte* staging = nullptr;  // all_reduce: the group's staging buffer
  std::vector<std::shared_ptr<WorldState>> new_states;  // per rank: its new group's state, or null
  std::vector<int> new_ranks;                           // per rank: its rank in that group
};

struct Message {
  ScalarType dtype;
  std::vector<int64_t> shape;
  std::vector<std::byte> bytes;
};

// What the ranks of one group share.
struct WorldState {
  int size = 1;
  GroupOptions options;
  std::shared_ptr<Universe> universe;
  std::mutex mu;
  std::condition_variable cv;
  std::atomic<uint64_t> events{0};  // bumped before every cv.notify_all (see wait_briefly)
  std::map<uint64_t, std::shared_ptr<Rendezvous>> rendezvous;           // by sequence number
  std::map<std::tuple<int, int, int>, std::deque<Message>> mailboxes;  // by (src, dst, tag)
  // all_reduce's staging buffer, kept between collectives: collective s+1 becomes ready only once every
  // rank has finished collective s, so one buffer per group is never used by two at once.
  std::unique_ptr<std::byte[]> staging;
  size_t staging_bytes = 0;
};

/// Wakes every waiter on st (st.mu need not be held).
void notify(WorldState& st);
/// Before sleeping on st.cv with lk held: polls for up to kSpin (yielding) until something is notified;
/// returns with lk held.
void wait_briefly(WorldState& st, std::unique_lock<std::mutex>& lk);
/// The state of a new group of `size` ranks in `universe`.
std::shared_ptr<WorldState> make_state(int size, GroupOptions options, std::shared_ptr<Universe> universe);

// ---- Work and the op queue

class LocalWork;

// A rank's ops in issue order, run one at a time: by the rank's worker thread, or by a thread that waits
// for one of them while nobody runs an op (it runs the queue up to its own op: no hand-off to the worker
// and back, two context switches a synchronous collective saved).
struct OpQueue {
  struct Task {
    std::function<void()> fn;
    std::shared_ptr<LocalWork> work;
  };
  std::mutex mu;
  std::condition_variable cv;  // to the worker: an op to run, or stop
  std::deque<Task> tasks;
  bool running = false;  // the worker or a waiter is running an op
  bool stop = false;

  // Pops the front task and runs it (mu held on entry and on return).
  void run_front(std::unique_lock<std::mutex>& lk);
};

/// The Work of a local op: completes when its task ran; a waiter without a timeout runs the queue up to it.
class LocalWork final : public Work {
 public:
  LocalWork(std::string what, std::weak_ptr<OpQueue> queue) : what_(std::move(what)), queue_(std::move(queue)) {}

  bool is_completed() override;
  void wait(std::optional<std::chrono::milliseconds> timeout) override;
  std::exception_ptr exception() override;
  /// Completes the Work (with the op's error, or null).
  void finish(std::exception_ptr e);

 private:
  friend struct OpQueue;

  // While this op is queued and nobody runs one, runs the queue's ops up to this one on this thread.
  void run_queue_up_to_this();

  // A synchronous call's op is queued without waking the worker; whoever polls or waits with a timeout
  // for it wakes it.
  void wake_worker();

  std::string what_;
  std::weak_ptr<OpQueue> queue_;
  bool queued_ = true;  // in its queue, not yet taken (guarded by OpQueue::mu)
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
};

/// The universe of a local group (run_local aborts it when a rank throws).
std::shared_ptr<Universe> universe_of(const ProcessGroup& group);

}  // namespace troupe::comm::local_impl
