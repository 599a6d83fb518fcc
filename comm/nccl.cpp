// The `nccl` backend (nccl.h). A Comm per group owns the NCCL communicator (nonblocking mode), a
// non-blocking CUDA stream, an event used to order that stream after the legacy default stream (where
// troupe's kernels run), a small device scratch buffer (barrier) and the list of ops in flight. An op
// is issued under the Comm's mutex: staging buffers are allocated, the ready event is recorded on the
// legacy stream and waited for on the group's stream, the NCCL call(s) are enqueued (ncclInProgress is
// waited out with ncclCommGetAsyncError, bounded by the group's timeout), and a completion event is
// recorded. Work::wait polls that event (and the communicator's async error) until the op completes or
// its deadline passes, which aborts the communicator.
#include <troupe/comm/checks.h>
#include <troupe/comm/nccl.h>
#include <troupe/comm/reduce_op.h>

#include <cuda_runtime.h>
#include <nccl.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <sstream>
#include <thread>

#include <troupe/tensor/ops.h>

namespace troupe::comm {
namespace {

using Clock = std::chrono::steady_clock;

const char* base_name(const char* file) {
  const char* s = std::strrchr(file, '/');
  return s ? s + 1 : file;
}

std::string cuda_failure(cudaError_t e, const char* call, const char* file, int line) {
  return std::string(base_name(file)) + ":" + std::to_string(line) + ": " + call + " failed: " + cudaGetErrorName(e) +
         " (" + cudaGetErrorString(e) + ")";
}

std::string nccl_failure(ncclResult_t r, ncclComm_t comm, const char* call, const char* file, int line) {
  std::string s = std::string(base_name(file)) + ":" + std::to_string(line) + ": " + call + " failed: " +
                  ncclGetErrorString(r);
  const char* last = ncclGetLastError(comm);
  if (last && *last) s += std::string(" (") + last + ")";
  return s;
}

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

ncclDataType_t nccl_type(ScalarType t) {
  switch (t) {
    case kBool: case kUInt8: return ncclUint8;
    case kInt32: return ncclInt32;
    case kInt64: return ncclInt64;
    case kFloat16: return ncclFloat16;
    case kBFloat16: return ncclBfloat16;
    case kFloat32: return ncclFloat32;
    case kFloat64: return ncclFloat64;
  }
  return ncclUint8;
}

/// The NCCL op of `op` on `t`: reduce_op.h's table (bool moves as 0/1 bytes: OR is ncclMax, AND ncclMin),
/// AVG as ncclAvg on floating dtypes.
ncclRedOp_t nccl_op(ReduceOp op, ScalarType t) {
  if (op == ReduceOp::AVG && t != kBool) return ncclAvg;
  switch (detail::combine_of(op, t)) {
    case detail::Combine::Sum: return ncclSum;
    case detail::Combine::Product: return ncclProd;
    case detail::Combine::Min: case detail::Combine::And: return ncclMin;
    case detail::Combine::Max: case detail::Combine::Or: return ncclMax;
  }
  return ncclSum;
}

using detail::shape_str;

bool overlaps(const void* a, size_t an, const void* b, size_t bn) {
  auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
  return an && bn && pa < pb + bn && pb < pa + an;
}

std::string ms_str(std::chrono::milliseconds ms) { return std::to_string(ms.count()) + " ms"; }

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
std::mutex g_leak_mu;
std::vector<OpPtr> g_leaked;

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
};

#define TROUPE_NCCL_CALL(comm, op, call) (comm).check((call), (op), #call, __FILE__, __LINE__)

void Comm::settle(ncclComm_t h, const Op& op, Clock::time_point deadline, const char* call, const char* file, int line) {
  uint32_t polls = 0;
  for (;;) {
    ncclResult_t st = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(h, &st);
    if (r != ncclSuccess) throw CommError(op.label() + ": " + nccl_failure(r, h, "ncclCommGetAsyncError", file, line));
    if (st == ncclSuccess) return;
    if (st != ncclInProgress) throw CommError(op.label() + ": " + nccl_failure(st, h, call, file, line));
    if (Clock::now() > deadline) {
      (void)ncclCommAbort(h);
      if (h == comm_) {
        aborted_ = true;
        broken_ = "op #" + std::to_string(op.seq) + " (" + op.name + ") timed out in " + call;
      }
      throw CommError(op.label() + ": " + base_name(file) + ":" + std::to_string(line) + ": " + call +
                      " did not complete within " + ms_str(opts_.timeout) + "; communicator aborted (ncclCommAbort)");
    }
    if (++polls < 64) sched_yield();
    else std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

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

void Comm::poll_locked(const OpPtr& op) {
  if (op->finished) return;
  cudaError_t q = op->done_event ? cudaEventQuery(op->done_event) : cudaSuccess;
  if (q == cudaSuccess) {
    finish(op, nullptr);
    return;
  }
  if (q != cudaErrorNotReady) {
    std::string msg = op->label() + ": " + cuda_failure(q, "cudaEventQuery(done)", __FILE__, __LINE__);
    abort_locked(msg);
    finish(op, std::make_exception_ptr(CommError(msg)));
    return;
  }
  if (!aborted_) {
    ncclResult_t st = ncclSuccess;
    if (ncclCommGetAsyncError(comm_, &st) == ncclSuccess && st != ncclSuccess && st != ncclInProgress) {
      std::string msg = op->label() + ": NCCL reported an asynchronous error: " + ncclGetErrorString(st);
      const char* last = ncclGetLastError(comm_);
      if (last && *last) msg += std::string(" (") + last + ")";
      abort_locked("op #" + std::to_string(op->seq) + " (" + op->name + "): " + ncclGetErrorString(st));
      finish(op, std::make_exception_ptr(CommError(msg + "; communicator aborted (ncclCommAbort)")));
      return;
    }
  }
  if (Clock::now() > op->deadline) {
    std::string msg = op->label() + ": did not complete within " + ms_str(opts_.timeout) +
                      " (the group's timeout); communicator aborted (ncclCommAbort), the group is unusable";
    abort_locked("op #" + std::to_string(op->seq) + " (" + op->name + ") timed out");
    finish(op, std::make_exception_ptr(CommError(msg)));
  }
}

void Comm::abort_locked(const std::string& why) {
  if (broken_.empty()) broken_ = why;
  if (!aborted_ && comm_) {
    aborted_ = true;
    DeviceGuard dg(device_);
    (void)ncclCommAbort(comm_);
  }
  for (auto& o : inflight_) {
    if (!o->finished) {
      finish(o, std::make_exception_ptr(CommError(o->label() + ": group aborted: " + broken_)));
    }
  }
}

void Comm::shutdown() {
  std::lock_guard<std::mutex> g(mu_);
  if (shut_) return;
  shut_ = true;
  int cur = -1;
  if (cudaGetDevice(&cur) != cudaSuccess) cur = -1;
  bool switched = cur != device_ && cudaSetDevice(device_) == cudaSuccess;
  if (!aborted_ && comm_) {
    // Let what is in flight end (bounded by the timeout), then free the communicator.
    auto deadline = Clock::now() + opts_.timeout;
    bool drained = false;
    for (;;) {
      cudaError_t q = cudaStreamQuery(stream_);
      if (q == cudaSuccess) {
        drained = true;
        break;
      }
      if (q != cudaErrorNotReady || Clock::now() > deadline) break;
      ncclResult_t st = ncclSuccess;
      if (ncclCommGetAsyncError(comm_, &st) != ncclSuccess || (st != ncclSuccess && st != ncclInProgress)) break;
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    bool freed = false;
    if (drained) {
      ncclResult_t r = ncclCommFinalize(comm_);
      ncclResult_t st = r;
      while (r == ncclSuccess || r == ncclInProgress) {
        if (ncclCommGetAsyncError(comm_, &st) != ncclSuccess) break;
        if (st != ncclInProgress || Clock::now() > deadline) break;
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
      if ((r == ncclSuccess || r == ncclInProgress) && st == ncclSuccess) {
        freed = ncclCommDestroy(comm_) == ncclSuccess;
      }
    }
    if (!freed) (void)ncclCommAbort(comm_);
    aborted_ = true;
  }
  for (auto& o : inflight_) {
    if (!o->finished) finish(o, std::make_exception_ptr(CommError(o->label() + ": group destroyed")));
  }
  std::vector<OpPtr> stuck;
  for (auto& o : inflight_) {
    if (pending_event(o)) stuck.push_back(o);
  }
  inflight_.clear();
  if (!stuck.empty()) {
    std::lock_guard<std::mutex> lg(g_leak_mu);
    g_leaked.insert(g_leaked.end(), stuck.begin(), stuck.end());
  } else {
    if (stream_) (void)cudaStreamDestroy(stream_);
    if (scratch_) (void)cudaFree(scratch_);
  }
  if (ready_) (void)cudaEventDestroy(ready_);
  stream_ = nullptr;
  scratch_ = nullptr;
  ready_ = nullptr;
  comm_ = nullptr;
  if (switched && cur >= 0) (void)cudaSetDevice(cur);
}

/// Creates a stream and the Comm for an NCCL communicator being initialised (`pending`: the result of
/// ncclCommInitRankConfig / ncclCommSplit), waiting until it is up or the timeout passes.
std::shared_ptr<Comm> make_comm(ncclComm_t h, ncclResult_t pending, int device, int rank, int size, GroupOptions opts,
                                const char* fn, const char* call) {
  std::string label = "[" + std::string(fn) + "] " + Comm::describe(opts.name, rank, size, device);
  if (pending != ncclSuccess && pending != ncclInProgress) {
    if (h) (void)ncclCommAbort(h);
    throw CommError(label + ": " + nccl_failure(pending, h, call, __FILE__, __LINE__));
  }
  auto deadline = Clock::now() + opts.timeout;
  uint32_t polls = 0;
  for (;;) {
    ncclResult_t st = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(h, &st);
    if (r != ncclSuccess) st = r;
    if (st == ncclSuccess) break;
    if (st != ncclInProgress) {
      std::string msg = label + ": " + nccl_failure(st, h, call, __FILE__, __LINE__);
      (void)ncclCommAbort(h);
      throw CommError(msg);
    }
    if (Clock::now() > deadline) {
      (void)ncclCommAbort(h);
      throw CommError(label + ": " + call + " did not complete within " + ms_str(opts.timeout) +
                      " (ranks missing?); communicator aborted");
    }
    if (++polls < 64) sched_yield();
    else std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  cudaStream_t stream = nullptr;
  cudaError_t e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  if (e != cudaSuccess) {
    (void)ncclCommAbort(h);
    throw CommError(label + ": " + cuda_failure(e, "cudaStreamCreateWithFlags", __FILE__, __LINE__));
  }
  auto c = std::make_shared<Comm>(h, stream, device, rank, size, std::move(opts));
  c->setup();
  return c;
}

// ---- the group

class NcclProcessGroup : public ProcessGroup {
 public:
  /// CUDA tensors on the group's device; no send to self; tags >= 0 (and ignored).
  explicit NcclProcessGroup(std::shared_ptr<Comm> c)
      : ProcessGroup(Traits{Device(kCUDA, c->device()), false, 2147483647}), c_(std::move(c)) {}
  ~NcclProcessGroup() override { c_->shutdown(); }

  int rank() const override { return c_->rank(); }
  int size() const override { return c_->size(); }
  std::string backend() const override { return "nccl"; }
  const GroupOptions& options() const override { return c_->options(); }
  uint64_t sequence_number() const override { return c_->sequence_number(); }

  WorkPtr do_all_reduce(Tensor& tensor, ReduceOp op) override {
    const char* fn = "all_reduce";
    auto o = c_->new_op(fn);
    o->keep.push_back(tensor);
    void* p = tensor.data_ptr();
    size_t n = static_cast<size_t>(tensor.numel());
    ncclDataType_t type = nccl_type(tensor.dtype());
    ncclRedOp_t rop = nccl_op(op, tensor.dtype());
    Comm& c = *c_;
    return c_->submit(o, [] {}, [&] {
      if (n) TROUPE_NCCL_CALL(c, *o, ncclAllReduce(p, p, n, type, rop, c.handle(), c.stream()));
    });
  }

  WorkPtr do_broadcast(Tensor& tensor, int src) override {
    const char* fn = "broadcast";
    auto o = c_->new_op(fn);
    o->keep.push_back(tensor);
    void* p = tensor.data_ptr();
    size_t n = static_cast<size_t>(tensor.numel());
    ncclDataType_t type = nccl_type(tensor.dtype());
    Comm& c = *c_;
    return c_->submit(o, [] {}, [&] {
      if (n) TROUPE_NCCL_CALL(c, *o, ncclBroadcast(p, p, n, type, src, c.handle(), c.stream()));
    });
  }

  WorkPtr do_all_gather_into_tensor(Tensor& output, const Tensor& input) override {
    const char* fn = "all_gather_into_tensor";
    auto o = c_->new_op(fn);
    o->keep = {output, input};
    char* out = static_cast<char*>(output.data_ptr());
    const char* in = static_cast<const char*>(input.data_ptr());
    size_t n = static_cast<size_t>(input.numel());
    size_t bytes = input.nbytes();
    // NCCL's in-place form: input is this rank's slot of output. Any other overlap is staged.
    bool stage = in != out + rank() * bytes && overlaps(in, bytes, out, output.nbytes());
    ncclDataType_t type = nccl_type(input.dtype());
    Comm& c = *c_;
    Tensor staged;
    return c_->submit(o, [&] {
      if (stage) {
        staged = empty({input.numel()}, input.options());
        o->keep.push_back(staged);
      }
    }, [&] {
      if (!n) return;
      const char* src = in;
      if (stage) {
        TROUPE_NCCL_CUDA(o->label(), cudaMemcpyAsync(staged.data_ptr(), in, bytes, cudaMemcpyDeviceToDevice, c.stream()));
        src = static_cast<const char*>(staged.data_ptr());
      }
      TROUPE_NCCL_CALL(c, *o, ncclAllGather(src, out, n, type, c.handle(), c.stream()));
    });
  }

  WorkPtr do_all_gather(std::vector<Tensor>& outputs, const Tensor& input) override {
    const char* fn = "all_gather";
    auto o = c_->new_op(fn);
    o->keep.push_back(input);
    for (auto& t : outputs) o->keep.push_back(t);
    size_t n = static_cast<size_t>(input.numel());
    size_t bytes = input.nbytes();
    const void* in = input.data_ptr();
    ncclDataType_t type = nccl_type(input.dtype());
    Comm& c = *c_;
    Tensor flat;
    return c_->submit(o, [&] {
      if (!n) return;
      flat = empty({input.numel() * size()}, input.options());
      o->keep.push_back(flat);
    }, [&] {
      if (!n) return;
      char* f = static_cast<char*>(flat.data_ptr());
      TROUPE_NCCL_CALL(c, *o, ncclAllGather(in, f, n, type, c.handle(), c.stream()));
      for (size_t r = 0; r < outputs.size(); ++r) {
        TROUPE_NCCL_CUDA(o->label(), cudaMemcpyAsync(outputs[r].data_ptr(), f + r * bytes, bytes,
                                                     cudaMemcpyDeviceToDevice, c.stream()));
      }
    });
  }

  WorkPtr do_reduce_scatter_tensor(Tensor& output, const Tensor& input, ReduceOp op) override {
    const char* fn = "reduce_scatter_tensor";
    auto o = c_->new_op(fn);
    o->keep = {output, input};
    char* out = static_cast<char*>(output.data_ptr());
    const char* in = static_cast<const char*>(input.data_ptr());
    size_t n = static_cast<size_t>(output.numel());
    // NCCL's in-place form: output is this rank's slot of input. Any other overlap is staged.
    bool stage = out != in + rank() * output.nbytes() && overlaps(in, input.nbytes(), out, output.nbytes());
    ncclDataType_t type = nccl_type(input.dtype());
    ncclRedOp_t rop = nccl_op(op, input.dtype());
    Comm& c = *c_;
    Tensor staged;
    return c_->submit(o, [&] {
      if (stage) {
        staged = empty({input.numel()}, input.options());
        o->keep.push_back(staged);
      }
    }, [&] {
      if (!n) return;
      const char* src = in;
      if (stage) {
        TROUPE_NCCL_CUDA(o->label(), cudaMemcpyAsync(staged.data_ptr(), in, input.nbytes(), cudaMemcpyDeviceToDevice,
                                                     c.stream()));
        src = static_cast<const char*>(staged.data_ptr());
      }
      TROUPE_NCCL_CALL(c, *o, ncclReduceScatter(src, out, n, type, rop, c.handle(), c.stream()));
    });
  }

  WorkPtr do_reduce_scatter(Tensor& output, const std::vector<Tensor>& inputs, ReduceOp op) override {
    const char* fn = "reduce_scatter";
    auto o = c_->new_op(fn);
    o->keep.push_back(output);
    for (auto& t : inputs) o->keep.push_back(t);
    size_t n = static_cast<size_t>(output.numel());
    size_t bytes = output.nbytes();
    void* out = output.data_ptr();
    ncclDataType_t type = nccl_type(output.dtype());
    ncclRedOp_t rop = nccl_op(op, output.dtype());
    Comm& c = *c_;
    Tensor flat;
    return c_->submit(o, [&] {
      if (!n) return;
      flat = empty({output.numel() * size()}, output.options());
      o->keep.push_back(flat);
    }, [&] {
      if (!n) return;
      char* f = static_cast<char*>(flat.data_ptr());
      for (size_t r = 0; r < inputs.size(); ++r) {
        TROUPE_NCCL_CUDA(o->label(), cudaMemcpyAsync(f + r * bytes, inputs[r].data_ptr(), bytes,
                                                     cudaMemcpyDeviceToDevice, c.stream()));
      }
      TROUPE_NCCL_CALL(c, *o, ncclReduceScatter(f, out, n, type, rop, c.handle(), c.stream()));
    });
  }

  WorkPtr do_all_to_all(Tensor& output, const Tensor& input) override {
    const char* fn = "all_to_all";
    auto o = c_->new_op(fn);
    o->keep = {output, input};
    char* out = static_cast<char*>(output.data_ptr());
    const char* in = static_cast<const char*>(input.data_ptr());
    size_t n = static_cast<size_t>(input.numel() / size());
    size_t bytes = n * input.element_size();
    bool stage = overlaps(in, input.nbytes(), out, output.nbytes());
    ncclDataType_t type = nccl_type(input.dtype());
    Comm& c = *c_;
    int sz = size();
    Tensor staged;
    return c_->submit(o, [&] {
      if (stage) {
        staged = empty({input.numel()}, input.options());
        o->keep.push_back(staged);
      }
    }, [&] {
      if (!n) return;
      const char* src = in;
      if (stage) {
        TROUPE_NCCL_CUDA(o->label(), cudaMemcpyAsync(staged.data_ptr(), in, input.nbytes(), cudaMemcpyDeviceToDevice,
                                                     c.stream()));
        src = static_cast<const char*>(staged.data_ptr());
      }
      TROUPE_NCCL_CALL(c, *o, ncclGroupStart());
      try {
        for (int j = 0; j < sz; ++j) {
          TROUPE_NCCL_CALL(c, *o, ncclSend(src + j * bytes, n, type, j, c.handle(), c.stream()));
          TROUPE_NCCL_CALL(c, *o, ncclRecv(out + j * bytes, n, type, j, c.handle(), c.stream()));
        }
      } catch (...) {
        (void)ncclGroupEnd();  // close this thread's group; the op fails and the group is aborted
        throw;
      }
      TROUPE_NCCL_CALL(c, *o, ncclGroupEnd());
    });
  }

  WorkPtr do_send(const Tensor& tensor, int dst, int tag) override {
    const char* fn = "send";
    auto o = c_->new_op(fn);
    o->p2p = true;
    o->peer = " to rank " + std::to_string(dst) + " (tag " + std::to_string(tag) + ")";
    o->keep.push_back(tensor);
    const void* p = tensor.data_ptr();
    size_t n = static_cast<size_t>(tensor.numel());
    ncclDataType_t type = nccl_type(tensor.dtype());
    Comm& c = *c_;
    return c_->submit(o, [] {}, [&] {
      if (n) TROUPE_NCCL_CALL(c, *o, ncclSend(p, n, type, dst, c.handle(), c.stream()));
    });
  }

  WorkPtr do_recv(Tensor& tensor, int src, int tag) override {
    const char* fn = "recv";
    auto o = c_->new_op(fn);
    o->p2p = true;
    o->peer = " from rank " + std::to_string(src) + " (tag " + std::to_string(tag) + ")";
    o->keep.push_back(tensor);
    void* p = tensor.data_ptr();
    size_t n = static_cast<size_t>(tensor.numel());
    ncclDataType_t type = nccl_type(tensor.dtype());
    Comm& c = *c_;
    return c_->submit(o, [] {}, [&] {
      if (n) TROUPE_NCCL_CALL(c, *o, ncclRecv(p, n, type, src, c.handle(), c.stream()));
    });
  }

  WorkPtr do_barrier() override {
    auto o = c_->new_op("barrier");
    Comm& c = *c_;
    return c_->submit(o, [] {}, [&] {
      TROUPE_NCCL_CALL(c, *o, ncclAllReduce(c.scratch(), c.scratch(), 1, ncclInt32, ncclSum, c.handle(), c.stream()));
    });
  }

  ProcessGroupPtr do_new_group(const std::vector<int>&, int color, int key, int64_t check,
                               std::optional<GroupOptions> options) override {
    return make_subgroup("new_group", color, key, check, std::move(options));
  }

  ProcessGroupPtr do_split(int color, int key, std::optional<GroupOptions> options) override {
    return make_subgroup("split", color, key, 0, std::move(options));
  }

 private:
  /// new_group / split: every rank's (color, key, check) is all-gathered on the device (one timed op),
  /// checked, then ncclCommSplit.
  ProcessGroupPtr make_subgroup(const char* fn, int color, int key, int64_t check, std::optional<GroupOptions> options) {
    int n = size();
    Tensor mine = tensor(std::vector<int64_t>{color, key, check}).to(Device(kCUDA, c_->device()));
    Tensor all = empty({3 * n}, mine.options());
    auto o = c_->new_op(fn);
    o->keep = {mine, all};
    Comm& c = *c_;
    c_->submit(o, [] {}, [&] {
      TROUPE_NCCL_CALL(c, *o, ncclAllGather(mine.data_ptr(), all.data_ptr(), 3, ncclInt64, c.handle(), c.stream()));
    })->wait();
    std::vector<int64_t> a = all.cpu().to_vector<int64_t>();
    std::string label = o->label();
    for (int r = 0; r < n; ++r) {
      if (a[3 * r + 2] != check) {
        throw CommError(label + ": ranks passed different rank lists (rank " + std::to_string(r) +
                        "'s differs from rank " + std::to_string(rank()) + "'s)");
      }
    }
    std::vector<std::pair<int64_t, int>> members;  // by (key, parent rank): the new ranks' order
    for (int r = 0; r < n; ++r) {
      if (color >= 0 && a[3 * r] == color) members.push_back({a[3 * r + 1], r});
    }
    std::sort(members.begin(), members.end());
    GroupOptions opts = options ? *options : c_->options();
    if (!options || opts.name.empty() || opts.name == GroupOptions{}.name) {
      std::string name = c_->options().name + "/group[";
      for (size_t i = 0; i < members.size(); ++i) name += (i ? "," : "") + std::to_string(members[i].second);
      opts.name = name + "]";
    }
    ncclComm_t sub = nullptr;
    ncclResult_t r;
    {
      std::lock_guard<std::mutex> g(c_->mutex());
      DeviceGuard dg(c_->device());
      ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
      cfg.blocking = 0;
      r = ncclCommSplit(c_->handle(), color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &sub, &cfg);
      if (r == ncclInProgress) {
        // The parent settles first; the child (if any) is waited for by make_comm.
        c_->settle(c_->handle(), *o, Clock::now() + c_->options().timeout, "ncclCommSplit", __FILE__, __LINE__);
        r = ncclSuccess;
      }
      if (r != ncclSuccess) {
        throw CommError(label + ": " + nccl_failure(r, c_->handle(), "ncclCommSplit", __FILE__, __LINE__));
      }
    }
    if (color < 0 || sub == nullptr) return nullptr;
    int new_rank = 0;
    for (size_t i = 0; i < members.size(); ++i) {
      if (members[i].second == rank()) new_rank = static_cast<int>(i);
    }
    DeviceGuard dg(c_->device());
    auto comm = make_comm(sub, ncclInProgress, c_->device(), new_rank, static_cast<int>(members.size()),
                          std::move(opts), fn, "ncclCommSplit");
    return std::make_shared<NcclProcessGroup>(comm);
  }

  std::shared_ptr<Comm> c_;
};

}  // namespace

int nccl_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky-free error of a missing driver
    return 0;
  }
  return n;
}

int nccl_version() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return 0;
  return v;
}

ProcessGroupPtr make_nccl_group(ProcessGroupPtr bootstrap, int device, GroupOptions options) {
  const char* fn = "make_nccl_group";
  if (!bootstrap) throw CommError(std::string("[") + fn + "] bootstrap group is null");
  int rank = bootstrap->rank(), size = bootstrap->size();
  std::string who = std::string("[") + fn + "] rank " + std::to_string(rank) + " of " + std::to_string(size);
  int count = 0;
  cudaError_t ce = cudaGetDeviceCount(&count);
  if (ce != cudaSuccess || count < 1) {
    (void)cudaGetLastError();
    std::string why = ce != cudaSuccess ? cuda_failure(ce, "cudaGetDeviceCount", __FILE__, __LINE__)
                                        : std::string("cudaGetDeviceCount found 0 devices");
    throw CommError(who + ": no CUDA device (" + why + "); the nccl backend needs a GPU per rank");
  }
  if (device < 0) TROUPE_NCCL_CUDA(who, cudaGetDevice(&device));
  if (device >= count) {
    throw CommError(who + ": device " + std::to_string(device) + " is not in [0, " + std::to_string(count) +
                    ") (visible CUDA devices)");
  }
  // Rank 0's unique id travels over the bootstrap group; the last byte says whether rank 0 got one (so
  // that a failure there fails every rank instead of leaving them waiting).
  Tensor id_bytes = zeros({NCCL_UNIQUE_ID_BYTES + 1}, TensorOptions().dtype(kUInt8));
  uint8_t* idp = static_cast<uint8_t*>(id_bytes.data_ptr());
  std::string root_error;
  if (rank == 0) {
    ncclUniqueId id;
    ncclResult_t r = ncclGetUniqueId(&id);
    if (r == ncclSuccess) {
      std::memcpy(idp, id.internal, NCCL_UNIQUE_ID_BYTES);
      idp[NCCL_UNIQUE_ID_BYTES] = 1;
    } else {
      root_error = nccl_failure(r, nullptr, "ncclGetUniqueId", __FILE__, __LINE__);
    }
  }
  bootstrap->broadcast(id_bytes, 0);
  idp = static_cast<uint8_t*>(id_bytes.data_ptr());
  if (idp[NCCL_UNIQUE_ID_BYTES] != 1) {
    throw CommError(who + ": rank 0 could not create the NCCL unique id" +
                    (root_error.empty() ? std::string() : ": " + root_error));
  }
  ncclUniqueId id;
  std::memcpy(id.internal, idp, NCCL_UNIQUE_ID_BYTES);

  DeviceGuard dg(device);
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;  // every NCCL call returns at once; we poll with the group's timeout
  ncclComm_t h = nullptr;
  ncclResult_t r = ncclCommInitRankConfig(&h, size, id, rank, &cfg);
  auto comm = make_comm(h, r, device, rank, size, std::move(options), fn, "ncclCommInitRankConfig");
  return std::make_shared<NcclProcessGroup>(comm);
}

}  // namespace troupe::comm
