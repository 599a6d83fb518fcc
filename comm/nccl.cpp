// The `nccl` backend's group (nccl.h): each collective as NCCL calls issued on its group's Comm
// (nccl_comm.cpp); make_nccl_group and sub-groups (ncclCommSplit). A Comm per group owns the NCCL
// communicator (nonblocking mode), a non-blocking CUDA stream, an event used to order that stream after
// the legacy default stream (where troupe's kernels run), a small device scratch buffer (barrier) and the
// list of ops in flight. An op is issued under the Comm's mutex: staging buffers are allocated, the ready
// event is recorded on the legacy stream and waited for on the group's stream, the NCCL call(s) are
// enqueued (ncclInProgress is waited out with ncclCommGetAsyncError, bounded by the group's timeout), and
// a completion event is recorded. Work::wait polls that event (and the communicator's async error) until
// the op completes or its deadline passes, which aborts the communicator.
#include "nccl_internal.h"

#include <troupe/comm/reduce_op.h>
#include <troupe/tensor/ops.h>

#include <algorithm>
#include <cstring>

namespace troupe::comm {
namespace {

using namespace nccl_impl;

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
/// A group of one rank sums instead: the same numbers, and NCCL's one-rank ncclAvg left the last
/// element of a 65,537-element float64 reduce_scatter unwritten on an H200.
ncclRedOp_t nccl_op(ReduceOp op, ScalarType t, int group_size) {
  if (op == ReduceOp::AVG && t != kBool) return group_size == 1 ? ncclSum : ncclAvg;
  switch (detail::combine_of(op, t)) {
    case detail::Combine::Sum: return ncclSum;
    case detail::Combine::Product: return ncclProd;
    case detail::Combine::Min: case detail::Combine::And: return ncclMin;
    case detail::Combine::Max: case detail::Combine::Or: return ncclMax;
  }
  return ncclSum;
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
    ncclRedOp_t rop = nccl_op(op, tensor.dtype(), size());
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
    ncclRedOp_t rop = nccl_op(op, input.dtype(), size());
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
    ncclRedOp_t rop = nccl_op(op, output.dtype(), size());
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
    std::string label = o->label();
    auto plan = detail::plan_subgroup(label, all.cpu().to_vector<int64_t>(), rank(), color, check, c_->options(), options);
    // A non-blocking split writes the child's handle through the pointer once the child is set up,
    // which can be after the call returned and after the parent reports success (seen with a one-rank
    // group on an H200): the slot outlives this call and is polled below.
    ncclComm_t* slot = c_->new_split_slot();
    ncclComm_t sub = nullptr;
    ncclResult_t r;
    {
      std::lock_guard<std::mutex> g(c_->mutex());
      DeviceGuard dg(c_->device());
      ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
      cfg.blocking = 0;
      r = ncclCommSplit(c_->handle(), color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, slot, &cfg);
      if (r == ncclInProgress) {
        // The parent settles first; the child (if any) is waited for by make_comm.
        c_->settle(c_->handle(), *o, Clock::now() + c_->options().timeout, "ncclCommSplit", __FILE__, __LINE__);
        r = ncclSuccess;
      }
      if (r != ncclSuccess) {
        throw CommError(label + ": " + nccl_failure(r, c_->handle(), "ncclCommSplit", __FILE__, __LINE__));
      }
    }
    if (color < 0) return nullptr;
    const auto deadline = Clock::now() + c_->options().timeout;
    for (uint32_t polls = 0; (sub = __atomic_load_n(slot, __ATOMIC_ACQUIRE)) == nullptr; ++polls) {
      if (Clock::now() > deadline)
        throw CommError(label + ": ncclCommSplit reported success but gave no communicator for color " +
                        std::to_string(color) + " within " + ms_str(c_->options().timeout));
      if (polls < 64) sched_yield();
      else std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    DeviceGuard dg(c_->device());
    auto comm = make_comm(sub, ncclInProgress, c_->device(), plan.new_rank, static_cast<int>(plan.members.size()),
                          std::move(plan.options), fn, "ncclCommSplit");
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
