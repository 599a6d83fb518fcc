// The nccl backend's communicator lifetime (Comm): settling nonblocking NCCL calls within the timeout,
// polling an op's completion event, aborting a stuck communicator, the bounded shutdown, and creating
// a Comm for a new communicator (make_comm).
#include "nccl_internal.h"

#include <cstring>

namespace troupe::comm::nccl_impl {

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

}  // namespace troupe::comm::nccl_impl
