// The `mpi` backend's group (mpi.h): each collective as an op of nonblocking MPI calls (chunked past INT_MAX
// elements) for its group's Engine; make_mpi_world, sub-groups, mpi_finalize. An Engine per group owns a duplicate communicator, a queue of ops in issue
// order and a worker thread. An op is a list of steps, each one nonblocking MPI call (several when a
// message is chunked past INT_MAX elements), polled with MPI_Test by whichever thread holds the
// engine's exec lock: the worker, or a thread waiting for one of the group's ops (so a synchronous
// collective runs on the caller's thread with no hand-off). Collectives run one at a time; point to
// point ops are started in issue order and then complete in the background.
#include "mpi_internal.h"

namespace troupe::comm {
namespace {

using namespace mpi_impl;

/// memcpy of `n` bytes that allows n == 0: an empty tensor's data pointer and a 0-byte buffer's are null,
/// and memcpy with a null pointer is undefined even for 0 bytes (UBSan: "null pointer passed as argument").
void copy_bytes(void* dst, const void* src, size_t n) {
  if (n > 0) std::memcpy(dst, src, n);
}

// ---- chunked MPI calls: each helper appends Steps to an op

/// An MPI type of `count` elements of `base`, spaced `stride_elems` apart (lb 0, extent stride*size).
MPI_Datatype block_type(MPI_Datatype base, int64_t count, int64_t stride_elems) {
  MPI_Datatype contig, resized;
  MPI_Type_contiguous(static_cast<int>(count), base, &contig);
  MPI_Type_create_resized(contig, 0, static_cast<MPI_Aint>(stride_elems * type_size(base)), &resized);
  MPI_Type_commit(&resized);
  MPI_Type_free(&contig);
  return resized;
}

void add_allreduce(OpState& op, MPI_Comm comm, char* buf, int64_t n, MPI_Datatype type, MPI_Op mop) {
  size_t es = type_size(type);
  for_chunks(n, [&](int64_t off, int64_t m) {
    op.steps.push_back({[=](MPI_Request* r) {
      return MPI_Iallreduce(MPI_IN_PLACE, buf + off * es, static_cast<int>(m), type, mop, comm, r);
    }, nullptr});
  });
}

void add_bcast(OpState& op, MPI_Comm comm, char* buf, int64_t n, MPI_Datatype type, int root) {
  size_t es = type_size(type);
  for_chunks(n, [&](int64_t off, int64_t m) {
    op.steps.push_back({[=](MPI_Request* r) {
      return MPI_Ibcast(buf + off * es, static_cast<int>(m), type, root, comm, r);
    }, nullptr});
  });
}

/// out[r*n + i] = rank r's in[i] for i < n.
void add_allgather(OpState& op, MPI_Comm comm, const char* in, char* out, int64_t n, MPI_Datatype type) {
  size_t es = type_size(type);
  if (n <= max_count()) {
    op.steps.push_back({[=](MPI_Request* r) {
      return MPI_Iallgather(in, static_cast<int>(n), type, out, static_cast<int>(n), type, comm, r);
    }, nullptr});
    return;
  }
  for_chunks(n, [&](int64_t off, int64_t m) {
    op.steps.push_back({[=](MPI_Request* r) {
      MPI_Datatype rt = block_type(type, m, n);  // rank r's chunk lands at r*n + off
      int rc = MPI_Iallgather(in + off * es, static_cast<int>(m), type, out + off * es, 1, rt, comm, r);
      MPI_Type_free(&rt);  // freed once the call is done with it
      return rc;
    }, nullptr});
  });
}

/// Rank r's out[i] = reduction over ranks of in[r*n + i].
void add_reduce_scatter(OpState& op, MPI_Comm comm, int rank, int size, const char* in, char* out, int64_t n,
                        MPI_Datatype type, MPI_Op mop) {
  size_t es = type_size(type);
  if (n <= max_count()) {
    op.steps.push_back({[=](MPI_Request* r) {
      return MPI_Ireduce_scatter_block(in, out, static_cast<int>(n), type, mop, comm, r);
    }, nullptr});
    return;
  }
  // Blocks past INT_MAX elements: one reduce per destination rank and chunk.
  for (int root = 0; root < size; ++root) {
    for_chunks(n, [&](int64_t off, int64_t m) {
      op.steps.push_back({[=](MPI_Request* r) {
        return MPI_Ireduce(in + (root * n + off) * es, rank == root ? out + off * es : nullptr,
                           static_cast<int>(m), type, mop, root, comm, r);
      }, nullptr});
    });
  }
}

/// Chunk j of in (n elements) goes to rank j; chunk i of out comes from rank i.
void add_alltoall(OpState& op, MPI_Comm comm, const char* in, char* out, int64_t n, MPI_Datatype type) {
  size_t es = type_size(type);
  if (n <= max_count()) {
    op.steps.push_back({[=](MPI_Request* r) {
      return MPI_Ialltoall(in, static_cast<int>(n), type, out, static_cast<int>(n), type, comm, r);
    }, nullptr});
    return;
  }
  for_chunks(n, [&](int64_t off, int64_t m) {
    op.steps.push_back({[=](MPI_Request* r) {
      MPI_Datatype bt = block_type(type, m, n);
      int rc = MPI_Ialltoall(in + off * es, 1, bt, out + off * es, 1, bt, comm, r);
      MPI_Type_free(&bt);
      return rc;
    }, nullptr});
  });
}

// ---- the group

class MpiProcessGroup : public ProcessGroup {
 public:
  explicit MpiProcessGroup(std::shared_ptr<Engine> e) : ProcessGroup(traits()), e_(std::move(e)) {}
  ~MpiProcessGroup() override { e_->shutdown("group destroyed"); }

  int rank() const override { return e_->rank(); }
  int size() const override { return e_->size(); }
  std::string backend() const override { return "mpi"; }
  const GroupOptions& options() const override { return e_->options(); }
  uint64_t sequence_number() const override { return e_->sequence_number(); }
  const Engine& engine() const { return *e_; }

  WorkPtr do_all_reduce(Tensor& tensor, ReduceOp op) override {
    const char* fn = "all_reduce";
    char* data = static_cast<char*>(tensor.data_ptr());
    int64_t n = tensor.numel();
    ScalarType dt = tensor.dtype();
    int size = this->size();
    const bool ring_avg = op == ReduceOp::AVG && ring_avg_fits(n, dt);
    // A synchronous all-reduce on an idle group runs at once, with no op object.
    if (detail::t_sync_call && !ring_avg && !is_16bit_float(dt) && !g_debug.load() && size > 1 && n <= max_count()) {
      if (WorkPtr w = e_->allreduce_now(tensor, data, n, move_type(dt), detail::combine_of(op, dt), op == ReduceOp::AVG)) {
        return w;
      }
    }
    auto o = e_->new_op(fn);
    o->keep.push_back(tensor);
    add_debug_check(*o, fn, tensor.numel(), tensor.dtype());
    if (is_16bit_float(dt)) {
      Buffer f = make_buffer(n * sizeof(float));
      o->buffers.push_back(f);
      o->before = [=] { widen(data, reinterpret_cast<float*>(f->data()), n, dt); };
      add_allreduce_op(*o, f->data(), n, MPI_FLOAT, detail::combine_of(op, dt));
      o->after = [=] {
        if (op == ReduceOp::AVG) divide_by(f->data(), n, MPI_FLOAT, size);
        narrow(reinterpret_cast<float*>(f->data()), data, n, dt);
      };
    } else if (ring_avg) {
      MPI_Datatype type = move_type(dt);
      add_ring_avg_allreduce(*o, e_->coll_comm(), rank(), size, data, n, type,
                             e_->scratch((static_cast<size_t>(n / size) + 1) * type_size(type)));
    } else {
      MPI_Datatype type = move_type(dt);
      add_allreduce_op(*o, data, n, type, detail::combine_of(op, dt));
      if (op == ReduceOp::AVG) o->after = [=] { divide_by(data, n, type, size); };
    }
    return e_->submit(o);
  }

  WorkPtr do_broadcast(Tensor& tensor, int src) override {
    const char* fn = "broadcast";
    auto o = e_->new_op(fn);
    o->keep.push_back(tensor);
    add_debug_check(*o, fn, tensor.numel(), tensor.dtype());
    add_bcast(*o, e_->comm(), static_cast<char*>(tensor.data_ptr()), tensor.numel(), move_type(tensor.dtype()), src);
    return e_->submit(o);
  }

  WorkPtr do_all_gather_into_tensor(Tensor& output, const Tensor& input) override {
    const char* fn = "all_gather_into_tensor";
    auto o = e_->new_op(fn);
    o->keep = {output, input};
    add_debug_check(*o, fn, input.numel(), input.dtype());
    char* out = static_cast<char*>(output.data_ptr());
    const char* in = stage_if_overlapping(*o, input, output);
    add_allgather(*o, e_->comm(), in, out, input.numel(), move_type(input.dtype()));
    return e_->submit(o);
  }

  WorkPtr do_all_gather(std::vector<Tensor>& outputs, const Tensor& input) override {
    const char* fn = "all_gather";
    auto o = e_->new_op(fn);
    o->keep.push_back(input);
    for (auto& t : outputs) o->keep.push_back(t);
    add_debug_check(*o, fn, input.numel(), input.dtype());
    size_t bytes = input.nbytes();
    Buffer staged = make_buffer(bytes * size());
    o->buffers.push_back(staged);
    add_allgather(*o, e_->comm(), static_cast<const char*>(input.data_ptr()), staged->data(), input.numel(),
                  move_type(input.dtype()));
    std::vector<Tensor> outs = outputs;
    o->after = [staged, outs, bytes] {
      for (size_t r = 0; r < outs.size(); ++r) copy_bytes(outs[r].data_ptr(), staged->data() + r * bytes, bytes);
    };
    return e_->submit(o);
  }

  WorkPtr do_reduce_scatter_tensor(Tensor& output, const Tensor& input, ReduceOp op) override {
    const char* fn = "reduce_scatter_tensor";
    auto o = e_->new_op(fn);
    o->keep = {output, input};
    add_debug_check(*o, fn, output.numel(), output.dtype());
    const char* in = static_cast<const char*>(input.data_ptr());
    if (overlaps(in, input.nbytes(), output.data_ptr(), output.nbytes())) {
      Buffer s = make_buffer(input.nbytes());
      o->buffers.push_back(s);
      copy_bytes(s->data(), in, input.nbytes());
      in = s->data();
    }
    add_reduce_scatter_op(*o, in, output, op);
    return e_->submit(o);
  }

  WorkPtr do_reduce_scatter(Tensor& output, const std::vector<Tensor>& inputs, ReduceOp op) override {
    const char* fn = "reduce_scatter";
    auto o = e_->new_op(fn);
    o->keep.push_back(output);
    add_debug_check(*o, fn, output.numel(), output.dtype());
    size_t bytes = output.nbytes();
    Buffer s = make_buffer(bytes * size());
    o->buffers.push_back(s);
    for (size_t r = 0; r < inputs.size(); ++r) copy_bytes(s->data() + r * bytes, inputs[r].data_ptr(), bytes);
    add_reduce_scatter_op(*o, s->data(), output, op);
    return e_->submit(o);
  }

  WorkPtr do_all_to_all(Tensor& output, const Tensor& input) override {
    const char* fn = "all_to_all";
    auto o = e_->new_op(fn);
    o->keep = {output, input};
    add_debug_check(*o, fn, input.numel(), input.dtype());
    const char* in = stage_if_overlapping(*o, input, output);
    add_alltoall(*o, e_->comm(), in, static_cast<char*>(output.data_ptr()), input.numel() / size(),
                 move_type(input.dtype()));
    return e_->submit(o);
  }

  WorkPtr do_send(const Tensor& tensor, int dst, int tag) override {
    const char* fn = "send";
    auto o = e_->new_op(fn);
    o->p2p = true;
    o->timed = false;
    o->peer = " to rank " + std::to_string(dst) + " (tag " + std::to_string(tag) + ")";
    // Buffered: the data is copied now, so the caller may reuse the tensor once send_async returns.
    Buffer s = make_buffer(tensor.nbytes());
    copy_bytes(s->data(), tensor.data_ptr(), tensor.nbytes());
    o->buffers.push_back(s);
    MPI_Datatype type = move_type(tensor.dtype());
    size_t es = type_size(type);
    MPI_Comm comm = e_->comm();
    for_chunks(tensor.numel(), [&](int64_t off, int64_t m) {
      o->steps.push_back({[=](MPI_Request* r) {
        return MPI_Isend(s->data() + off * es, static_cast<int>(m), type, dst, tag, comm, r);
      }, nullptr});
    });
    return e_->submit(o);
  }

  WorkPtr do_recv(Tensor& tensor, int src, int tag) override {
    const char* fn = "recv";
    auto o = e_->new_op(fn);
    o->p2p = true;
    o->peer = " from rank " + std::to_string(src) + " (tag " + std::to_string(tag) + ")";
    o->keep.push_back(tensor);
    MPI_Datatype type = move_type(tensor.dtype());
    size_t es = type_size(type);
    MPI_Comm comm = e_->comm();
    char* data = static_cast<char*>(tensor.data_ptr());
    std::string where = e_->where(fn);
    for_chunks(tensor.numel(), [&](int64_t off, int64_t m) {
      o->steps.push_back({[=](MPI_Request* r) {
        return MPI_Irecv(data + off * es, static_cast<int>(m), type, src, tag, comm, r);
      }, [=](const MPI_Status& st) {
        int got = 0;
        MPI_Get_count(&st, type, &got);
        if (st.MPI_ERROR != MPI_SUCCESS && st.MPI_ERROR != 0) {
          throw CommError(where + ": from rank " + std::to_string(src) + " tag " + std::to_string(tag) + ": " +
                          mpi_error_string(st.MPI_ERROR));
        }
        if (got != m) {
          throw CommError(where + ": expected " + std::to_string(m) + " elements from rank " + std::to_string(src) +
                          " (tag " + std::to_string(tag) + "), got " + std::to_string(got));
        }
      }});
    });
    return e_->submit(o);
  }

  WorkPtr do_barrier() override {
    auto o = e_->new_op("barrier");
    MPI_Comm comm = e_->comm();
    o->steps.push_back({[=](MPI_Request* r) { return MPI_Ibarrier(comm, r); }, nullptr});
    return e_->submit(o);
  }

  ProcessGroupPtr do_new_group(const std::vector<int>&, int color, int key, int64_t check,
                               std::optional<GroupOptions> options) override {
    return make_subgroup("new_group", color, key, check, std::move(options));
  }

  ProcessGroupPtr do_split(int color, int key, std::optional<GroupOptions> options) override {
    return make_subgroup("split", color, key, 0, std::move(options));
  }

 private:
  /// AVG of this many float32 / float64 elements runs troupe's ring with the division fused
  /// (add_ring_avg_allreduce): above the small-all-reduce bytes, within one MPI call's count.
  bool ring_avg_fits(int64_t n, ScalarType dt) const {
    return size() > 1 && (dt == kFloat32 || dt == kFloat64) && n <= max_count() &&
           n * static_cast<int64_t>(element_size(dt)) > e_->small_allreduce_bytes();
  }

  /// The all-reduce's steps: troupe's recursive doubling for small buffers, MPI_Iallreduce otherwise.
  void add_allreduce_op(OpState& o, char* buf, int64_t n, MPI_Datatype type, Combine c) {
    if (size() > 1 && n <= max_count() &&
        static_cast<int64_t>(n * type_size(type)) <= e_->small_allreduce_bytes()) {
      add_small_allreduce(o, e_->coll_comm(), rank(), size(), buf, n, type, c,
                          e_->scratch(std::max<size_t>(1, n * type_size(type))));
    } else {
      add_allreduce(o, e_->comm(), buf, n, type, mpi_op(c, type));
    }
  }

  /// CPU tensors, send to self (buffered), tags up to MPI_TAG_UB.
  static Traits traits() {
    int* ub = nullptr;
    int flag = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
    return Traits{Device(kCPU), true, flag && ub ? *ub : 32767};
  }

  /// Input's data, or a copy of it when it overlaps `output` (MPI forbids aliased buffers).
  const char* stage_if_overlapping(OpState& o, const Tensor& input, const Tensor& output) {
    const char* in = static_cast<const char*>(input.data_ptr());
    if (!overlaps(in, input.nbytes(), output.data_ptr(), output.nbytes())) return in;
    Buffer s = make_buffer(input.nbytes());
    copy_bytes(s->data(), in, input.nbytes());
    o.buffers.push_back(s);
    return s->data();
  }

  void add_reduce_scatter_op(OpState& o, const char* in, Tensor& output, ReduceOp op) {
    int64_t n = output.numel();
    ScalarType dt = output.dtype();
    int size = this->size();
    char* out = static_cast<char*>(output.data_ptr());
    if (is_16bit_float(dt)) {
      Buffer fin = make_buffer(n * size * sizeof(float)), fout = make_buffer(n * sizeof(float));
      o.buffers.push_back(fin);
      o.buffers.push_back(fout);
      o.before = [=] { widen(in, reinterpret_cast<float*>(fin->data()), n * size, dt); };
      add_reduce_scatter(o, e_->comm(), rank(), size, fin->data(), fout->data(), n, MPI_FLOAT, mpi_op(detail::combine_of(op, dt), MPI_FLOAT));
      o.after = [=] {
        if (op == ReduceOp::AVG) divide_by(fout->data(), n, MPI_FLOAT, size);
        narrow(reinterpret_cast<float*>(fout->data()), out, n, dt);
      };
    } else {
      MPI_Datatype type = move_type(dt);
      add_reduce_scatter(o, e_->comm(), rank(), size, in, out, n, type, mpi_op(detail::combine_of(op, dt), type));
      if (op == ReduceOp::AVG) o.after = [=] { divide_by(out, n, type, size); };
    }
  }

  /// With debug checks on: a first step all-reducing (numel, dtype) so that every rank fails alike when
  /// they differ.
  void add_debug_check(OpState& o, const char* fn, int64_t numel, ScalarType dt) {
    if (!g_debug.load()) return;
    auto v = std::make_shared<std::array<int64_t, 4>>();
    *v = {numel, static_cast<int64_t>(dt), -numel, -static_cast<int64_t>(dt)};
    MPI_Comm comm = e_->comm();
    std::string where = e_->where(fn);
    int rank = this->rank();
    o.steps.insert(o.steps.begin(), Step{[=](MPI_Request* r) {
      return MPI_Iallreduce(MPI_IN_PLACE, v->data(), 4, MPI_INT64_T, MPI_MAX, comm, r);
    }, [=](const MPI_Status&) {
      auto& a = *v;
      if (a[0] != -a[2]) {
        throw CommError(where + ": ranks disagree on the tensor size: rank " + std::to_string(rank) + " has " +
                        std::to_string(numel) + " elements; across ranks from " + std::to_string(-a[2]) + " to " +
                        std::to_string(a[0]));
      }
      if (a[1] != -a[3]) {
        throw CommError(where + ": ranks disagree on the dtype: rank " + std::to_string(rank) + " has " +
                        dtype_name(dt) + ", another rank has " +
                        dtype_name(static_cast<ScalarType>(a[1] == static_cast<int64_t>(dt) ? -a[3] : a[1])));
      }
    }});
  }

  /// new_group / split: all ranks exchange (color, key, check) with a timed MPI_Iallgather, then call
  /// MPI_Comm_split, which no longer waits for anyone.
  ProcessGroupPtr make_subgroup(const char* fn, int color, int key, int64_t check, std::optional<GroupOptions> options) {
    auto o = e_->new_op(fn);
    int n = size();
    auto mine = std::make_shared<std::array<int64_t, 3>>();
    *mine = {color, key, check};
    auto all = std::make_shared<std::vector<int64_t>>(3 * n);
    auto result = std::make_shared<ProcessGroupPtr>();
    MPI_Comm comm = e_->comm();
    o->steps.push_back({[=](MPI_Request* r) {
      return MPI_Iallgather(mine->data(), 3, MPI_INT64_T, all->data(), 3, MPI_INT64_T, comm, r);
    }, nullptr});
    GroupOptions parent = e_->options();
    int me = rank();
    std::string where = e_->where(fn);
    o->after = [=] {
      auto plan = detail::plan_subgroup(where, *all, me, color, check, parent, options);
      MPI_Comm sub = MPI_COMM_NULL;
      int rc = MPI_Comm_split(comm, color < 0 ? MPI_UNDEFINED : color, key, &sub);
      if (rc != MPI_SUCCESS) throw CommError(where + ": MPI_Comm_split failed: " + mpi_error_string(rc));
      if (color < 0 || sub == MPI_COMM_NULL) return;
      auto engine = std::make_shared<Engine>(sub, plan.options);
      engine->start_worker();
      *result = std::make_shared<MpiProcessGroup>(engine);
    };
    e_->submit(o)->wait();
    return *result;
  }

  std::shared_ptr<Engine> e_;
};

}  // namespace

namespace {
bool g_we_initialized = false;  // MPI_Init_thread was ours: mpi_finalize calls MPI_Finalize
}  // namespace

bool started_by_mpirun() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMI_SIZE") != nullptr ||
         std::getenv("PMIX_RANK") != nullptr;
}

void set_mpi_debug_checks(bool on) { g_debug.store(on); }

namespace detail {
void set_mpi_max_count(int64_t count) { g_max_count.store(count < 1 ? 1 : std::min<int64_t>(count, INT_MAX)); }
void set_mpi_small_allreduce_bytes(int64_t bytes) { g_small_allreduce_override.store(std::max<int64_t>(-1, bytes)); }
int64_t mpi_small_allreduce_bytes() { return g_small_allreduce_override.load(); }
int64_t mpi_small_allreduce_bytes(const ProcessGroup& pg) {
  auto* m = dynamic_cast<const MpiProcessGroup*>(&pg);
  return m ? m->engine().small_allreduce_bytes() : -1;
}
bool mpi_group_spans_hosts(const ProcessGroup& pg) {
  auto* m = dynamic_cast<const MpiProcessGroup*>(&pg);
  return m && m->engine().spans_hosts();
}
}  // namespace detail

ProcessGroupPtr make_mpi_world(GroupOptions options) {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (fin) throw CommError("[make_mpi_world] MPI was already finalized");
  int provided = 0;
  if (!init) {
    // libnbc's default MPI_Iallreduce algorithms (binomial / Rabenseifner) ran 2-4x slower than the
    // blocking MPI_Allreduce here; its ring matches it. A value the user set wins.
    setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "1", 0);
    // Open MPI's shared-memory transport sends messages up to its eager limit (4 KB with its header by
    // default) at once and larger ones by rendezvous, which waits for the receiver to match and for the
    // sender to poll again. 32 KB, the most it allows (its largest fragment, btl_vader_max_send_size): a
    // 4 KB tensor with its actor message leaves in one eager message and its sender goes on (the actor
    // lane's one-way stream of 4 KB tensors 2.3-3 us a transfer against 5.3-6.7 us at 4 KB, raw MPI_Send
    // 2.3-2.6 against 3.2-3.4 us; bench/remote_bench --loop), and so do the 16 KB messages of troupe's
    // recursive-doubling all-reduce (comm_bench, 16 KB: 1.19-1.25 of MPI_Allreduce at 32 KB, 0.76 at 16 KB,
    // whose limit counts MPI's header; 4 KB: 1.29 against 0.67-0.70 at 4 KB). A value the user set wins.
    setenv("OMPI_MCA_btl_vader_eager_limit", "32768", 0);
    int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
    if (rc != MPI_SUCCESS) throw CommError("[make_mpi_world] MPI_Init_thread failed: " + mpi_error_string(rc));
    g_we_initialized = true;
  } else {
    MPI_Query_thread(&provided);
  }
  if (provided < MPI_THREAD_MULTIPLE) {
    throw CommError("[make_mpi_world] MPI provides thread level " + std::to_string(provided) +
                    ", the mpi backend needs MPI_THREAD_MULTIPLE (" + std::to_string(MPI_THREAD_MULTIPLE) +
                    "): each group's worker thread calls MPI");
  }
  MPI_Comm comm = MPI_COMM_NULL;
  int rc = MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  if (rc != MPI_SUCCESS) throw CommError("[make_mpi_world] MPI_Comm_dup failed: " + mpi_error_string(rc));
  auto engine = std::make_shared<Engine>(comm, std::move(options));
  engine->start_worker();
  return std::make_shared<MpiProcessGroup>(engine);
}

void mpi_finalize() {
  std::vector<std::shared_ptr<Engine>> live;
  {
    std::lock_guard<std::mutex> g(g_engines_mu);
    for (auto& w : g_engines) {
      if (auto e = w.lock()) live.push_back(e);
    }
    g_engines.clear();
  }
  for (auto& e : live) e->shutdown("mpi_finalize was called");
  live.clear();
  if (g_we_initialized && mpi_alive()) MPI_Finalize();
}

}  // namespace troupe::comm
