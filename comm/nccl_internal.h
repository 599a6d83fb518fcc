// The nccl backend's internals (internal; nccl_comm.cpp and nccl.cpp): the Comm that owns a group's
// communicator, stream and ops in flight, issues ops (submit) and polls, aborts and frees them, and the
// CUDA/NCCL error helpers. Only the nccl*.cpp files include it (it includes the CUDA runtime and NCCL).
#pragma once

#include <troupe/comm/checks.h>
#include <troupe/comm/nccl.h>

#include <cuda_runtime.h>
#include <nccl.h>
#include <sched.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace troupe::comm::nccl_impl {

using Clock = std::chrono::steady_clock;

/// "nccl.cpp" of "/path/to/nccl.cpp".
const char* base_name(const char* file);

/// "file:line: call failed: cudaErrorX (its description)".
std::string cuda_failure(cudaError_t e, const char* call, const char* file, int line);

/// "file:line: call failed: <NCCL's error string> (its last error)".
std::string nccl_failure(ncclResult_t r, ncclComm_t comm, const char* call, const char* file, int line);

/// Throws CommError("<label>: file:line: call failed: ...") unless `call` returned cudaSuccess; `label`
/// is evaluated only on failure.
#define TROUPE_NCCL_CUDA(label, call)                                                          \
  do {                                                                                         \
    cudaError_t e_ = (call);                                                                   \
    if (e_ != cudaSuccess) throw CommError((label) + ": " + cuda_failure(e_, #call, __FILE__, __LINE__)); \
  } while (0)

/// Makes `device` current for this host thread for the guard's lifetime.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    if (cudaGetDevice(&prev_) != cudaSuccess) prev_ = -1;
    if (prev_ != device) {
      TROUPE_NCCL_CUDA(std::string("[nccl] selecting cuda:") + std::to_string(device), cudaSetDevice(device));
      changed_ = prev_ >= 0;
    }
  }
  ~DeviceGuard() {
    if (changed_) (void)cudaSetDevice(prev_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int prev_ = -1;
  bool changed_ = false;
};

/// The two byte ranges overlap.
inline bool overlaps(const void* a, size_t an, const void* b, size_t bn) {
  auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
  return an && bn && pa < pb + bn && pb < pa + an;
}

/// "250 ms".
inline std::string ms_str(std::chrono::milliseconds ms) { return std::to_string(ms.count()) + " ms"; }

/// One issued op and its completion.
struct Op {
  std::string name;  // "all_reduce"
  uint64_t seq = 0;  // collectives only
  bool p2p = false;
  std::string peer;  // p2p: " to rank 1"
  std::shared_ptr<const std::string> group;  // "group 'world' (nccl, rank 1 of 2, cuda:0)"
  cudaEvent_t done_event = nullptr;
  Clock::time_point deadline = Clock::time_point::max();
  std::vector<Tensor> keep;  // tensors the op reads or writes (staging included)

  bool finished = false;  // under the Comm's mutex
  std::exception_ptr error;
  std::atomic<bool> done{false};  // finished, readable without the mutex

  /// "[all_reduce] group 'world' (nccl, rank 1 of 2, cuda:0), op #3".
  std::string label() const {
    return "[" + name + "] " + (group ? *group : std::string("group ?")) +
           (p2p ? peer : ", op #" + std::to_string(seq));
  }
  ~Op() {
    if (done_event) (void)cudaEventDestroy(done_event);
  }
};
using OpPtr = std::shared_ptr<Op>;

// Ops of destroyed or aborted groups whose completion event never fired: their tensors stay allocated.
inline std::mutex g_leak_mu;
inline std::vector<OpPtr> g_leaked;

/// One group's NCCL communicator, stream and ops in flight.
class Comm : public std::enable_shared_from_this<Comm> {
 public:
  Comm(ncclComm_t comm, cudaStream_t stream, int device, int rank, int size, GroupOptions opts)
      : comm_(comm), stream_(stream), device_(device), rank_(rank), size_(size), opts_(std::move(opts)) {
    desc_ = std::make_shared<const std::string>(describe(opts_.name, rank_, size_, device_));
  }
  ~Comm() { shutdown(); }

  static std::string describe(const std::string& name, int rank, int size, int device) {
    return detail::group_desc(name, "nccl", rank, size, Device(kCUDA, device));
  }

  /// Creates the ready event and the scratch buffer (the device must be current).
  void setup() {
    TROUPE_NCCL_CUDA(*desc_, cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
    TROUPE_NCCL_CUDA(*desc_, cudaMalloc(&scratch_, 64));
    TROUPE_NCCL_CUDA(*desc_, cudaMemset(scratch_, 0, 64));
  }

  int rank() const { return rank_; }
  int size() const { return size_; }
  int device() const { return device_; }
  ncclComm_t handle() const { return comm_; }
  cudaStream_t stream() const { return stream_; }
  void* scratch() const { return scratch_; }
  const GroupOptions& options() const { return opts_; }
  uint64_t sequence_number() const { return seq_.load(); }
  std::mutex& mutex() { return mu_; }

  OpPtr new_op(const char* name) {
    auto op = std::make_shared<Op>();
    op->name = name;
    op->group = desc_;
    return op;
  }

  /// Issues `op`: `prepare` (allocations, before the ready event), then `enqueue` (NCCL calls and copies
  /// on stream()) after the stream waits for the legacy default stream. The returned Work is already
  /// failed when the group is unusable or issuing failed.
  template <typename Prepare, typename Enqueue>
  WorkPtr submit(const OpPtr& op, Prepare&& prepare, Enqueue&& enqueue);

  /// One look at `op` (the caller holds mutex()): finishes it when its event fired, fails it (aborting
  /// the communicator) on an NCCL error or past its deadline.
  void poll_locked(const OpPtr& op);

  /// Waits out an ncclInProgress of `h` (this comm or a new one) until `deadline`; throws on an error or
  /// past it (aborting `h`).
  void settle(ncclComm_t h, const Op& op, Clock::time_point deadline, const char* call, const char* file, int line);

  /// Checks an NCCL call's result on this comm: ncclInProgress is settled, errors throw.
  void check(ncclResult_t r, const Op& op, const char* call, const char* file, int line) {
    if (r == ncclSuccess) return;
    if (r == ncclInProgress) {
      settle(comm_, op, op.deadline, call, file, line);
      return;
    }
    throw CommError(op.label() + ": " + nccl_failure(r, comm_, call, file, line));
  }

  /// Aborts the communicator (ncclCommAbort) and fails every op in flight with `why` (mutex held).
  void abort_locked(const std::string& why);

  /// Waits (bounded by the timeout) for the ops in flight, then frees the communicator: finalize and
  /// destroy, or abort when something is stuck. Idempotent.
  void shutdown();

 private:
  static void finish(const OpPtr& op, std::exception_ptr e) {
    if (op->finished) return;
    op->finished = true;
    op->error = std::move(e);
    op->done.store(true);
  }
  void reap_locked() {
    for (size_t i = 0; i < inflight_.size();) {
      poll_locked(inflight_[i]);
      if (inflight_[i]->finished && !pending_event(inflight_[i])) {
        inflight_[i] = inflight_.back();
        inflight_.pop_back();
      } else {
        ++i;
      }
    }
  }
  /// True while the op's event has not fired (its buffers may still be in use on the device).
  static bool pending_event(const OpPtr& op) {
    return op->done_event && cudaEventQuery(op->done_event) == cudaErrorNotReady;
  }

  ncclComm_t comm_;
  cudaStream_t stream_;
  cudaEvent_t ready_ = nullptr;
  void* scratch_ = nullptr;
  int device_, rank_, size_;
  GroupOptions opts_;
  std::shared_ptr<const std::string> desc_;
  std::atomic<uint64_t> seq_{0};

  std::mutex mu_;
  std::string broken_;  // non-empty: aborted, and why
  bool aborted_ = false;
  bool shut_ = false;
  std::vector<OpPtr> inflight_;

 public:
  /// Where ncclCommSplit writes a child's handle (see make_subgroup): NCCL may write it after the
  /// call returns, so each slot lives as long as this parent communicator.
  ncclComm_t* new_split_slot() {
    std::lock_guard<std::mutex> g(slots_mu_);
    split_slots_.push_back(std::make_unique<ncclComm_t>(nullptr));
    return split_slots_.back().get();
  }

 private:
  std::mutex slots_mu_;
  std::vector<std::unique_ptr<ncclComm_t>> split_slots_;
};

#define TROUPE_NCCL_CALL(comm, op, call) (comm).check((call), (op), #call, __FILE__, __LINE__)

#define TROUPE_NCCL_CALL(comm, op, call) (comm).check((call), (op), #call, __FILE__, __LINE__)

class NcclWork : public Work {
 public:
  NcclWork(std::shared_ptr<Comm> comm, OpPtr op) : comm_(std::move(comm)), op_(std::move(op)) {}

  bool is_completed() override {
    if (op_->done.load()) return true;
    std::lock_guard<std::mutex> g(comm_->mutex());
    comm_->poll_locked(op_);
    return op_->done.load();
  }

  std::exception_ptr exception() override {
    if (!is_completed()) return nullptr;
    std::lock_guard<std::mutex> g(comm_->mutex());
    return op_->error;
  }

  void wait(std::optional<std::chrono::milliseconds> timeout) override {
    auto until = timeout ? Clock::now() + *timeout : Clock::time_point::max();
    uint32_t polls = 0;
    while (!is_completed()) {
      if (timeout && Clock::now() >= until) {
        throw CommError("[wait] " + op_->label() + ": did not complete within " + ms_str(*timeout) +
                        " (Work::wait's timeout; the op goes on)");
      }
      // Pacing: yield for the first polls (small ops end within microseconds), then sleep.
      ++polls;
      if (polls < 256) sched_yield();
      else std::this_thread::sleep_for(std::chrono::microseconds(polls < 4096 ? 20 : 200));
    }
    std::exception_ptr e;
    {
      std::lock_guard<std::mutex> g(comm_->mutex());
      e = op_->error;
    }
    if (e) std::rethrow_exception(e);
  }

 private:
  std::shared_ptr<Comm> comm_;
  OpPtr op_;
};

template <typename Prepare, typename Enqueue>
WorkPtr Comm::submit(const OpPtr& op, Prepare&& prepare, Enqueue&& enqueue) {
  std::lock_guard<std::mutex> g(mu_);
  if (!op->p2p) op->seq = seq_.fetch_add(1);
  auto work = std::make_shared<NcclWork>(shared_from_this(), op);
  if (shut_ || !broken_.empty()) {
    finish(op, std::make_exception_ptr(CommError(
                   op->label() + ": group unusable: " + (shut_ ? std::string("group was shut down") : broken_))));
    return work;
  }
  try {
    // Nothing is issued yet: a failure here (no memory for staging) fails this op only.
    DeviceGuard dg(device_);
    reap_locked();
    prepare();
  } catch (...) {
    finish(op, std::current_exception());
    return work;
  }
  try {
    DeviceGuard dg(device_);
    op->deadline = Clock::now() + opts_.timeout;
    TROUPE_NCCL_CUDA(op->label(), cudaEventRecord(ready_, cudaStreamLegacy));
    TROUPE_NCCL_CUDA(op->label(), cudaStreamWaitEvent(stream_, ready_, 0));
    enqueue();
    TROUPE_NCCL_CUDA(op->label(), cudaEventCreateWithFlags(&op->done_event, cudaEventDisableTiming));
    TROUPE_NCCL_CUDA(op->label(), cudaEventRecord(op->done_event, stream_));
    inflight_.push_back(op);
  } catch (...) {
    // The stream or the communicator may hold part of this op: the group cannot be trusted any more.
    std::exception_ptr e = std::current_exception();
    std::string why;
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      why = ex.what();
    } catch (...) {
      why = "unknown error";
    }
    if (op->done_event == nullptr) (void)cudaEventCreateWithFlags(&op->done_event, cudaEventDisableTiming);
    if (op->done_event) (void)cudaEventRecord(op->done_event, stream_);
    inflight_.push_back(op);
    abort_locked("op #" + std::to_string(op->seq) + " (" + op->name + ") failed to issue: " + why);
    finish(op, e);
  }
  return work;
}

/// Creates a stream and the Comm for an NCCL communicator being initialised (`pending`: the result of
/// ncclCommInitRankConfig / ncclCommSplit), waiting until it is up or the timeout passes.
std::shared_ptr<Comm> make_comm(ncclComm_t h, ncclResult_t pending, int device, int rank, int size, GroupOptions opts,
                                const char* fn, const char* call);

}  // namespace troupe::comm::nccl_impl
