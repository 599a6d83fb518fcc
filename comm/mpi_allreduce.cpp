// The mpi backend's reductions: reduce_op.h's table on MPI's types (combine, mpi_op), 16-bit float and
// AVG staging, the recursive doubling of small all-reduces and the synchronous all-reduce fast path.
#include "mpi_internal.h"

namespace troupe::comm::mpi_impl {

namespace {
// MIN and MAX of floats as reduce_op.h defines them (NaN wins, -0 < +0): MPI's built-in MPI_MIN/MPI_MAX
// follow C's comparisons, which keep whichever operand came first, so ranks could end with different
// bits. Commutative user ops, made once per process on first use (MPI frees them at MPI_Finalize).
template <Combine C>
void float_min_max(void* in, void* inout, int* len, MPI_Datatype* type) {
  auto run = [&](auto* d, const auto* s) {
    using T = std::remove_pointer_t<decltype(d)>;
    if constexpr (C == Combine::Min) {
      detail::MinOf<T> op;
      for (int i = 0; i < *len; ++i) d[i] = op(s[i], d[i]);
    } else {
      detail::MaxOf<T> op;
      for (int i = 0; i < *len; ++i) d[i] = op(s[i], d[i]);
    }
  };
  if (*type == MPI_DOUBLE) run(static_cast<double*>(inout), static_cast<const double*>(in));
  else run(static_cast<float*>(inout), static_cast<const float*>(in));
}
template <Combine C>
MPI_Op float_op() {
  static MPI_Op op = [] {
    MPI_Op o;
    MPI_Op_create(&float_min_max<C>, /*commute=*/1, &o);
    return o;
  }();
  return op;
}
}  // namespace

/// The MPI op of a combination on `type` (reduce_op.h's table; AVG is a SUM divided after).
MPI_Op mpi_op(Combine c, MPI_Datatype type) {
  const bool floating = type == MPI_FLOAT || type == MPI_DOUBLE;
  switch (c) {
    case Combine::Sum: return MPI_SUM;
    case Combine::Product: return MPI_PROD;
    case Combine::Min: return floating ? float_op<Combine::Min>() : MPI_MIN;
    case Combine::Max: return floating ? float_op<Combine::Max>() : MPI_MAX;
    case Combine::Or: return MPI_LOR;
    case Combine::And: return MPI_LAND;
  }
  return MPI_SUM;
}

// 16-bit floats <-> float32 staging.
void widen(const void* src, float* dst, int64_t n, ScalarType t) {
  const uint16_t* s = static_cast<const uint16_t*>(src);
  if (t == kBFloat16) {
    for (int64_t i = 0; i < n; ++i) dst[i] = BFloat16::to_float(s[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = Half::to_float(s[i]);
  }
}
void narrow(const float* src, void* dst, int64_t n, ScalarType t) {
  uint16_t* d = static_cast<uint16_t*>(dst);
  if (t == kBFloat16) {
    for (int64_t i = 0; i < n; ++i) d[i] = BFloat16::from_float(src[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) d[i] = Half::from_float(src[i]);
  }
}
namespace {
template <typename T>
void divide(void* p, int64_t n, int size) {
  T* x = static_cast<T*>(p);
  for (int64_t i = 0; i < n; ++i) x[i] /= static_cast<T>(size);
}
}  // namespace

void divide_by(void* p, int64_t n, MPI_Datatype type, int size) {
  if (type == MPI_DOUBLE) divide<double>(p, n, size);
  else divide<float>(p, n, size);
}

// ---- reductions done here (the all-reduce for small messages)

/// dst[i] = dst[i] op src[i] over n elements of `type` (the types move_type gives) with reduce_op.h's
/// meaning of `c`. Commutative to the bit: the partners of a recursive-doubling step end equal.
void combine(void* dst, const void* src, int64_t n, MPI_Datatype type, Combine c) {
  auto as = [&](auto tag) {
    using T = decltype(tag);
    detail::combine_into<T>(c, static_cast<T*>(dst), static_cast<const T*>(src), n);
  };
  if (type == MPI_FLOAT) as(float{});
  else if (type == MPI_DOUBLE) as(double{});
  else if (type == MPI_INT32_T) as(int32_t{});
  else if (type == MPI_INT64_T) as(int64_t{});
  else if (type == MPI_UINT8_T) as(uint8_t{});
  else if (type == MPI_C_BOOL) as(bool{});
  else throw std::logic_error("[all_reduce] no local reduction for this MPI type");
}

// All-reduces of at most Engine::small_allreduce_bytes() (64 KB on one host, 2 MB across hosts) run troupe's recursive doubling over point-to-point messages
// (one exchange of the whole buffer per doubling step) instead of MPI_Iallreduce, whose libnbc schedule
// costs more than the transfer below ~256 KB (comm_bench: 4 KB took 4.2 us against MPI_Allreduce's 3.2
// us, the exchange 2.7 us). Settable for tests (detail::set_mpi_small_allreduce_bytes).

/// Recursive doubling on `comm` (a communicator of the group's own, so that user tags never match):
/// with p2 the largest power of two <= size and rem = size - p2, ranks below 2 * rem fold in pairs
/// first (the even one sends, the odd one combines), the p2 remaining ranks exchange and combine with
/// partners at distance 1, 2, 4, ..., and the folded ranks get the result back. Every rank ends with
/// the same bits.
std::vector<SmallStep> small_allreduce_plan(int rank, int size) {
  std::vector<SmallStep> plan;
  int p2 = 1;
  while (p2 * 2 <= size) p2 *= 2;
  int rem = size - p2;
  bool folded = rank < 2 * rem;
  int v = folded ? (rank % 2 ? rank / 2 : -1) : rank - rem;  // rank among the p2; -1: folded out
  auto real = [rem](int virt) { return virt < rem ? virt * 2 + 1 : virt + rem; };
  int tag = 0;
  if (folded) {
    if (rank % 2 == 0) plan.push_back({rank + 1, -1, tag, false});
    else plan.push_back({-1, rank - 1, tag, true});
  }
  ++tag;
  for (int mask = 1; mask < p2; mask <<= 1, ++tag) {
    if (v >= 0) plan.push_back({real(v ^ mask), real(v ^ mask), tag, true});
  }
  if (folded) {
    if (rank % 2) plan.push_back({rank - 1, -1, tag, false});
    else plan.push_back({-1, rank + 1, tag, false});
  }
  return plan;
}

int start_small_step(const SmallStep& s, MPI_Comm comm, char* buf, char* tmp, int count, MPI_Datatype type,
                     MPI_Request* r, int* nreq) {
  *nreq = 0;
  if (s.recv >= 0) {
    int rc = MPI_Irecv(s.combine ? tmp : buf, count, type, s.recv, s.tag, comm, &r[(*nreq)++]);
    if (rc != MPI_SUCCESS) return rc;
  }
  if (s.send >= 0) return MPI_Isend(buf, count, type, s.send, s.tag, comm, &r[(*nreq)++]);
  return MPI_SUCCESS;
}

void add_small_allreduce(OpState& op, MPI_Comm comm, int rank, int size, char* buf, int64_t n, MPI_Datatype type,
                         Combine c, Buffer tmp) {
  int count = static_cast<int>(n);
  op.buffers.push_back(tmp);
  char* t = tmp->data();
  for (const SmallStep& s : small_allreduce_plan(rank, size)) {
    Step step{[=](MPI_Request* r) {
      int k = 0;
      return start_small_step(s, comm, buf, t, count, type, r, &k);
    }, nullptr, (s.send >= 0) + (s.recv >= 0)};
    if (s.combine) step.done = [=](const MPI_Status&) { combine(buf, t, n, type, c); };
    op.steps.push_back(std::move(step));
  }
}

namespace {
// dst = (dst + src) / size. For a power of two the product with its exact reciprocal gives the same bits
// (and vectorises better than a division).
template <typename T>
void add_divide(T* dst, const T* src, int64_t n, int size) {
  if ((size & (size - 1)) == 0) {
    const T r = T(1) / static_cast<T>(size);
    for (int64_t i = 0; i < n; ++i) dst[i] = (dst[i] + src[i]) * r;
    return;
  }
  const T p = static_cast<T>(size);
  for (int64_t i = 0; i < n; ++i) dst[i] = (dst[i] + src[i]) / p;
}
}  // namespace

void add_ring_avg_allreduce(OpState& op, MPI_Comm comm, int rank, int size, char* buf, int64_t n, MPI_Datatype type,
                            Buffer tmp) {
  op.buffers.push_back(tmp);
  char* t = tmp->data();
  const size_t es = type_size(type);
  const int p = size;
  auto off = [=](int c) { return n * c / p; };  // chunk c: [off(c), off(c + 1))
  auto len = [=](int c) { return static_cast<int>(off(c + 1) - off(c)); };
  const int right = (rank + 1) % p, left = (rank + p - 1) % p;
  auto exchange = [=](int send_chunk, char* recv_into, int recv_chunk, int tag) {
    return [=](MPI_Request* r) {
      int rc = MPI_Irecv(recv_into, len(recv_chunk), type, left, tag, comm, &r[0]);
      if (rc != MPI_SUCCESS) return rc;
      return MPI_Isend(buf + off(send_chunk) * es, len(send_chunk), type, right, tag, comm, &r[1]);
    };
  };
  // Reduce-scatter: at step s, send chunk rank - s, add the left neighbour's chunk rank - s - 1; after
  // p - 1 steps this rank holds chunk rank + 1 summed over every rank (divided in the last step).
  for (int s = 0; s < p - 1; ++s) {
    const int send_chunk = (rank - s + 2 * p) % p, recv_chunk = (rank - s - 1 + 2 * p) % p;
    const bool last = s == p - 2;
    Step step{exchange(send_chunk, t, recv_chunk, s), nullptr, 2};
    step.done = [=](const MPI_Status&) {
      char* dst = buf + off(recv_chunk) * es;
      const int64_t m = len(recv_chunk);
      if (type == MPI_DOUBLE) {
        if (last) add_divide(reinterpret_cast<double*>(dst), reinterpret_cast<const double*>(t), m, p);
        else combine(dst, t, m, type, Combine::Sum);
      } else {
        if (last) add_divide(reinterpret_cast<float*>(dst), reinterpret_cast<const float*>(t), m, p);
        else combine(dst, t, m, type, Combine::Sum);
      }
    };
    op.steps.push_back(std::move(step));
  }
  // All-gather: at step s, send chunk rank + 1 - s (the one finished last), receive chunk rank - s.
  for (int s = 0; s < p - 1; ++s) {
    const int send_chunk = (rank + 1 - s + 2 * p) % p, recv_chunk = (rank - s + 2 * p) % p;
    op.steps.push_back(Step{exchange(send_chunk, buf + off(recv_chunk) * es, recv_chunk, p - 1 + s), nullptr, 2});
  }
}

/// A Work that ended before it was returned (the synchronous fast path).
class DoneWork : public Work {
 public:
  explicit DoneWork(std::exception_ptr e) : e_(std::move(e)) {}
  bool is_completed() override { return true; }
  std::exception_ptr exception() override { return e_; }
  void wait(std::optional<std::chrono::milliseconds>) override {
    if (e_) std::rethrow_exception(e_);
  }

 private:
  std::exception_ptr e_;
};

WorkPtr Engine::allreduce_now(const Tensor& t, char* buf, int64_t n, MPI_Datatype type, Combine c, bool avg) {
  std::unique_lock<std::mutex> ex(exec_mu_, std::try_to_lock);
  if (!ex.owns_lock() || current_ || !inflight_.empty()) return nullptr;
  uint64_t seq = 0;
  {
    std::lock_guard<std::mutex> g(q_mu_);
    if (!queue_.empty() || stopping_ || stopped_ || !broken_.empty()) return nullptr;
    seq = seq_.fetch_add(1);
  }
  begun_.store(static_cast<int64_t>(seq));
  const auto deadline = Clock::now() + opts_.timeout;
  const bool small = static_cast<int64_t>(n * type_size(type)) <= small_allreduce_bytes();
  Buffer tmp = small ? scratch(std::max<size_t>(1, static_cast<size_t>(n) * type_size(type))) : nullptr;
  const int count = static_cast<int>(n);
  // A failure: an op object after all (it keeps the buffers MPI may still use, and names the op).
  auto failed = [&](const std::array<MPI_Request, 2>& req, int nreq, int rc, bool timeout) -> WorkPtr {
    auto op = new_op("all_reduce");
    op->seq = seq;
    op->group = desc_;
    op->keep.push_back(t);
    if (tmp) op->buffers.push_back(tmp);
    op->req = req;
    op->nreq = nreq;
    pending_.fetch_add(1);  // fail / timed_out retire it
    if (timeout) {
      timed_out(op);
    } else {
      orphan_requests(op);
      fail(op, op->label() + ": MPI call failed: " + mpi_error_string(rc));
    }
    return std::make_shared<DoneWork>(op->error);
  };
  static const std::vector<SmallStep> kOneIallreduce(1);
  for (const SmallStep& s : small ? small_plan_ : kOneIallreduce) {
    std::array<MPI_Request, 2> req{MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    int nreq = 1;
    int rc = small ? start_small_step(s, coll_comm_, buf, tmp->data(), count, type, req.data(), &nreq)
                   : MPI_Iallreduce(MPI_IN_PLACE, buf, count, type, mpi_op(c, type), comm_, req.data());
    if (rc != MPI_SUCCESS) return failed(req, nreq, rc, false);
    Backoff b;
    for (uint32_t polls = 1;; ++polls) {
      int flag = 0;
      rc = nreq == 1 ? MPI_Test(req.data(), &flag, MPI_STATUS_IGNORE)
                     : MPI_Testall(nreq, req.data(), &flag, MPI_STATUSES_IGNORE);
      if (rc != MPI_SUCCESS) return failed(req, nreq, rc, false);
      if (flag) break;
      if ((polls & 63) == 0 && Clock::now() > deadline) return failed(req, nreq, MPI_SUCCESS, true);
      b.pause();
    }
    if (small && s.combine) combine(buf, tmp->data(), n, type, c);
  }
  if (avg) divide_by(buf, n, type, size_);
  return std::make_shared<DoneWork>(nullptr);
}

}  // namespace troupe::comm::mpi_impl
