// The `mpi` backend (mpi.h). An Engine per group owns a duplicate communicator, a queue of ops in issue
// order and a worker thread. An op is a list of steps, each one nonblocking MPI call (several when a
// message is chunked past INT_MAX elements), polled with MPI_Test by whichever thread holds the
// engine's exec lock: the worker, or a thread waiting for one of the group's ops (so a synchronous
// collective runs on the caller's thread with no hand-off). Collectives run one at a time; point to
// point ops are started in issue order and then complete in the background.
#include <troupe/comm/checks.h>
#include <troupe/comm/mpi.h>
#include <troupe/comm/reduce_op.h>

#define OMPI_SKIP_MPICXX 1  // the C API only
#include <mpi.h>
#include <sched.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <climits>
#include <cmath>
#include <limits>
#include <type_traits>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <sstream>
#include <thread>

namespace troupe::comm {
namespace {

using Clock = std::chrono::steady_clock;

std::atomic<int64_t> g_max_count{INT_MAX};
// Ops this large wake the worker when queued (a wake costs ~15 us here, under 10% of a 256 KB
// all-reduce); smaller ones run when waited on, or within the worker's 1 ms look. DDP buckets (1 MB and
// up) must start at once to overlap backward.
constexpr size_t kWakeBytes = size_t{256} << 10;
std::atomic<bool> g_debug{[] {
  const char* e = std::getenv("TROUPE_COMM_DEBUG");
  return e && *e && std::strcmp(e, "0") != 0;
}()};
bool g_we_initialized = false;  // MPI_Init_thread was ours: mpi_finalize calls MPI_Finalize

bool mpi_alive() {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  return init && !fin;
}

std::string mpi_error_string(int code) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, buf, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(buf, len);
}

bool is_16bit_float(ScalarType t) { return t == kFloat16 || t == kBFloat16; }

/// The MPI type that moves elements of `t` (16-bit floats move as their bits).
MPI_Datatype move_type(ScalarType t) {
  switch (t) {
    case kBool: return MPI_C_BOOL;
    case kUInt8: return MPI_UINT8_T;
    case kInt32: return MPI_INT32_T;
    case kInt64: return MPI_INT64_T;
    case kFloat16: case kBFloat16: return MPI_UINT16_T;
    case kFloat32: return MPI_FLOAT;
    case kFloat64: return MPI_DOUBLE;
  }
  return MPI_BYTE;
}

using detail::Combine;

/// The MPI op of a combination (reduce_op.h's table; AVG is a SUM divided after).
MPI_Op mpi_op(Combine c) {
  switch (c) {
    case Combine::Sum: return MPI_SUM;
    case Combine::Product: return MPI_PROD;
    case Combine::Min: return MPI_MIN;
    case Combine::Max: return MPI_MAX;
    case Combine::Or: return MPI_LOR;
    case Combine::And: return MPI_LAND;
  }
  return MPI_SUM;
}

using detail::shape_str;

/// Raw bytes; the staging buffers of ops.
using Buffer = std::shared_ptr<std::vector<char>>;
Buffer make_buffer(size_t bytes) { return std::make_shared<std::vector<char>>(bytes); }

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
template <typename T>
void divide(void* p, int64_t n, int size) {
  T* x = static_cast<T*>(p);
  for (int64_t i = 0; i < n; ++i) x[i] /= static_cast<T>(size);
}
/// In place x /= size over a float32 or float64 buffer (AVG).
void divide_by(void* p, int64_t n, MPI_Datatype type, int size) {
  if (type == MPI_DOUBLE) divide<double>(p, n, size);
  else divide<float>(p, n, size);
}

bool overlaps(const void* a, size_t an, const void* b, size_t bn) {
  auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
  return an && bn && pa < pb + bn && pb < pa + an;
}

/// One or two nonblocking MPI calls of an op (a send and a receive that must be in flight together),
/// and what to do once they completed (may throw).
struct Step {
  std::function<int(MPI_Request*)> start;  // starts `nreq` requests at r[0..nreq); returns the MPI error code
  std::function<void(const MPI_Status&)> done;  // gets the status of the last request
  int nreq = 1;
};

/// One queued op and its completion.
struct OpState {
  std::string name;  // "all_reduce"
  uint64_t seq = 0;  // collectives only: send and recv take no sequence number
  std::shared_ptr<const std::string> group;  // "group 'world' (mpi, rank 1 of 2)", set by submit
  /// "[all_reduce] group 'world' (mpi, rank 1 of 2), op #3" (built only for errors: it costs more than
  /// a small all-reduce).
  std::string label() const {
    return "[" + name + "] " + (group ? *group : std::string("group ?")) + (p2p ? peer : ", op #" + std::to_string(seq));
  }
  std::string peer;   // p2p: " from rank 1 (tag 0)"
  bool p2p = false;
  size_t bytes = 0;  // payload; decides whether submit wakes the worker
  bool timed = true;  // fails past the group's timeout (buffered sends do not)
  std::vector<Step> steps;
  size_t next = 0;  // index of the step in flight (or to start)
  std::array<MPI_Request, 2> req{MPI_REQUEST_NULL, MPI_REQUEST_NULL};  // of the step in flight
  int nreq = 0;                                                       // how many of req it uses
  uint32_t polls = 0;  // unsuccessful MPI_Tests (the deadline is checked every 64th)
  Clock::time_point queued_at;
  std::function<void()> before;  // on the executing thread, before the first step
  std::function<void()> after;   // after the last step
  std::vector<Tensor> keep;      // tensors MPI reads or writes
  std::vector<Buffer> buffers;   // staging MPI reads or writes
  Clock::time_point deadline;

  std::atomic<bool> done{false};
  std::exception_ptr error;
  std::mutex mu;
  std::condition_variable cv;

  void complete(std::exception_ptr e) {
    {
      std::lock_guard<std::mutex> g(mu);
      if (done.load()) return;
      error = std::move(e);
      done.store(true);
    }
    cv.notify_all();
  }
};
using OpPtr = std::shared_ptr<OpState>;

/// Requests (and what they touch) that can no longer be cancelled: kept until MPI is done with them.
struct Orphan {
  MPI_Request req;
  OpPtr op;
};
std::mutex g_leak_mu;
std::vector<OpPtr> g_leaked;  // ops of destroyed groups whose MPI requests never completed

// The recursive doubling of small all-reduces (the functions are defined below, with the other
// algorithm helpers).
/// One exchange of the recursive doubling: send the buffer to `send` and/or receive into the partner
/// buffer (then combine) or into the buffer itself (the folded ranks' result) from `recv` (-1: none).
struct SmallStep {
  int send = -1, recv = -1, tag = 0;
  bool combine = false;  // received into tmp, then buf = buf op tmp
};

std::vector<SmallStep> small_allreduce_plan(int rank, int size);
int start_small_step(const SmallStep& s, MPI_Comm comm, char* buf, char* tmp, int count, MPI_Datatype type,
                     MPI_Request* r, int* nreq);
void combine(void* dst, const void* src, int64_t n, MPI_Datatype type, Combine c);
size_t type_size(MPI_Datatype t);

class Engine;
std::mutex g_engines_mu;
std::vector<std::weak_ptr<Engine>> g_engines;

class Engine : public std::enable_shared_from_this<Engine> {
 public:
  Engine(MPI_Comm comm, GroupOptions opts) : comm_(comm), opts_(std::move(opts)) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    // Two more communicators over the same ranks: the point-to-point messages of troupe's own collective
    // algorithms (so that no user recv can match them), and the "which op are you at?" queries a
    // timed-out rank sends (answered by each rank's worker thread).
    MPI_Comm_dup(comm_, &coll_comm_);
    MPI_Comm_dup(comm_, &diag_comm_);
    MPI_Comm_set_errhandler(coll_comm_, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(diag_comm_, MPI_ERRORS_RETURN);
    small_plan_ = small_allreduce_plan(rank_, size_);
    desc_ = std::make_shared<const std::string>(detail::group_desc(opts_.name, "mpi", rank_, size_, Device(kCPU)));
  }
  ~Engine() { shutdown("group destroyed"); }

  void start_worker() {
    post_query_recv();
    worker_ = std::thread([this] { worker_loop(); });
    std::lock_guard<std::mutex> g(g_engines_mu);
    g_engines.push_back(weak_from_this());
  }

  int rank() const { return rank_; }
  int size() const { return size_; }
  MPI_Comm comm() const { return comm_; }
  MPI_Comm coll_comm() const { return coll_comm_; }

  /// A staging buffer of at least `bytes`: the group's cached one when no op holds it any longer (ops
  /// keep theirs through op->buffers), else a new one, which becomes the cached one.
  Buffer scratch(size_t bytes) {
    std::lock_guard<std::mutex> g(scratch_mu_);
    if (!scratch_ || scratch_.use_count() > 1 || scratch_->size() < bytes) scratch_ = make_buffer(bytes);
    return scratch_;
  }
  const GroupOptions& options() const { return opts_; }
  uint64_t sequence_number() const { return seq_.load(); }

  /// "[recv] group 'world' (mpi, rank 1 of 2)".
  std::string where(const std::string& name) const { return "[" + name + "] " + *desc_; }

  OpPtr new_op(const std::string& name) {
    auto op = std::make_shared<OpState>();
    op->name = name;
    return op;
  }

  /// Queues `op` (its sequence number is taken here) and returns its Work.
  WorkPtr submit(OpPtr op);

  /// The fast path of a synchronous all-reduce (SUM, PRODUCT, MIN, MAX; AVG divides after): run at once
  /// on the calling thread while the group is idle, with no op object and no queue, so that it costs
  /// what MPI's messages cost. Up to the small-all-reduce bytes: troupe's recursive doubling; above:
  /// one MPI_Iallreduce (n <= INT_MAX). Returns null, having done nothing, when ops are queued or in flight
  /// or another thread runs them (the caller then queues the op). Otherwise a completed Work, failed as
  /// the queued op would fail (a timeout names the late ranks and breaks the group).
  WorkPtr allreduce_now(const Tensor& t, char* buf, int64_t n, MPI_Datatype type, Combine c, bool avg);

  /// Runs ops (this thread holds exec_mu_) until `op` is done or `deadline`.
  void run_until(const OpPtr& op, Clock::time_point deadline) {
    Backoff b;
    bool bounded = deadline != Clock::time_point::max();
    while (!op->done.load() && !(bounded && b.tick() && Clock::now() >= deadline)) {
      if (progress()) b.reset();
      else b.pause();
    }
  }

  std::mutex exec_mu_;

  void notify_worker() {
    {
      std::lock_guard<std::mutex> g(q_mu_);
      kicked_ = true;
    }
    q_cv_.notify_one();
  }
  bool has_pending() const { return pending_.load() > 0; }

  /// Stops the worker, fails what is queued or in flight, frees the communicator. Idempotent.
  void shutdown(const std::string& why);

 private:
  /// Pacing of the polling loops while nothing moves: spin first (MPI_Test drives the progress of
  /// nonblocking collectives, and a blocking MPI call spins too), then yield, then sleep.
  /// (The clock is read every 64 idle polls only: a read costs about what an MPI_Test does.)
  struct Backoff {
    Clock::time_point since = Clock::now();
    uint32_t polls = 0;
    int phase = 0;  // 0 spin, 1 yield, 2 sleep
    void reset() {
      if (polls || phase) since = Clock::now();
      polls = 0;
      phase = 0;
    }
    /// True every 64th call: time to look at the clock.
    bool tick() const { return (polls & 63) == 0; }
    /// Idle for long: the poller should let go for a while.
    bool sleepy() const { return phase == 2; }
    void pause() {
      if ((++polls & 63) == 0) {
        auto idle = Clock::now() - since;
        phase = idle < std::chrono::milliseconds(1) ? 0 : idle < std::chrono::milliseconds(200) ? 1 : 2;
      }
      if (phase == 1) sched_yield();
      else if (phase == 2) std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  };

  void fail(const OpPtr& op, const std::string& msg) {
    op->complete(std::make_exception_ptr(CommError(msg)));
    retire(op);
  }
  void retire(const OpPtr&) { pending_.fetch_sub(1); }

  /// Starts op->steps[op->next]; returns false (op failed) when MPI refused.
  bool start_step(const OpPtr& op) {
    const Step& s = op->steps[op->next];
    op->req = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    op->nreq = s.nreq;
    int rc = s.start(op->req.data());
    if (rc != MPI_SUCCESS) {
      orphan_requests(op);  // a first request of two may have started
      fail(op, op->label() + ": MPI call failed: " + mpi_error_string(rc));
      return false;
    }
    return true;
  }

  /// Hands op's requests still active to orphans_ (kept until MPI is done with them).
  void orphan_requests(const OpPtr& op) {
    for (int i = 0; i < op->nreq; ++i) {
      if (op->req[i] != MPI_REQUEST_NULL) orphans_.push_back({op->req[i], op});
      op->req[i] = MPI_REQUEST_NULL;
    }
    op->nreq = 0;
  }

  /// Begins `op` on this thread; false when it already ended.
  bool begin(const OpPtr& op) {
    if (op->timed) op->deadline = Clock::now() + opts_.timeout;
    if (!op->p2p) begun_.store(static_cast<int64_t>(op->seq));
    try {
      if (op->before) op->before();
    } catch (...) {
      op->complete(std::current_exception());
      retire(op);
      return false;
    }
    if (op->steps.empty()) return finish(op);
    return start_step(op);
  }

  /// All steps done: runs `after`, completes. Returns false (op ended).
  bool finish(const OpPtr& op) {
    std::exception_ptr e;
    try {
      if (op->after) op->after();
    } catch (...) {
      e = std::current_exception();
    }
    op->complete(e);
    retire(op);
    return false;
  }

  /// Tests op's request; advances steps. Returns {still running, progressed}.
  std::pair<bool, bool> poll(const OpPtr& op) {
    int flag = 0;
    MPI_Status st[2];
    std::memset(st, 0, sizeof st);
    int rc = op->nreq == 1 ? MPI_Test(op->req.data(), &flag, st) : MPI_Testall(op->nreq, op->req.data(), &flag, st);
    if (rc != MPI_SUCCESS) {
      orphan_requests(op);
      fail(op, op->label() + ": MPI_Test failed: " + mpi_error_string(rc));
      return {false, true};
    }
    if (!flag) {
      if (op->timed && (++op->polls & 63) == 0 && Clock::now() > op->deadline) {
        timed_out(op);
        return {false, true};
      }
      return {true, false};
    }
    try {
      op->nreq = 0;
      if (op->steps[op->next].done) op->steps[op->next].done(st[op->steps[op->next].nreq - 1]);
    } catch (...) {
      op->complete(std::current_exception());
      retire(op);
      return {false, true};
    }
    if (++op->next == op->steps.size()) return {finish(op), true};
    return {start_step(op), true};
  }

  void timed_out(const OpPtr& op) {
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(opts_.timeout).count();
    std::string msg = op->label() + ": did not complete within " + std::to_string(ms) + " ms";
    if (!op->p2p) msg += "; ranks not arrived: " + not_arrived(op->seq);
    if (op->p2p) {
      // A point-to-point request can be cancelled; the group stays usable.
      for (int i = 0; i < op->nreq; ++i) {
        if (op->req[i] != MPI_REQUEST_NULL) MPI_Cancel(&op->req[i]);
      }
      orphan_requests(op);
      fail(op, msg);
      return;
    }
    // A collective cannot be cancelled: its buffers stay with MPI, and the group is unusable.
    orphan_requests(op);
    {
      std::lock_guard<std::mutex> g(q_mu_);
      if (broken_.empty()) broken_ = "op #" + std::to_string(op->seq) + " (" + op->name + ") timed out";
    }
    fail(op, msg);
  }

  // ---- "which op are you at?": how a timed-out rank names the ranks that had not arrived

  static constexpr int kQueryTag = 1, kReplyTag = 2;

  /// Posts the receive of the next query (from any rank). Under diag_mu_ or before the worker starts.
  void post_query_recv() {
    if (MPI_Irecv(&query_in_, 1, MPI_INT64_T, MPI_ANY_SOURCE, kQueryTag, diag_comm_, &query_req_) != MPI_SUCCESS) {
      query_req_ = MPI_REQUEST_NULL;
    }
  }

  /// Answers the queries that arrived with {the latest collective this rank began (-1: none), the
  /// number it issued}. Called by the worker, and by a rank diagnosing a timeout (which may itself be
  /// the worker): whoever holds diag_mu_.
  void serve_queries() {
    std::unique_lock<std::mutex> l(diag_mu_, std::try_to_lock);
    if (!l.owns_lock() || query_req_ == MPI_REQUEST_NULL) return;
    for (int answered = 0; answered < size_; ++answered) {
      int flag = 0;
      MPI_Status st;
      if (MPI_Test(&query_req_, &flag, &st) != MPI_SUCCESS || !flag) break;
      auto reply = std::make_shared<OpState>();  // holds the reply's buffer until MPI is done with it
      Buffer b = make_buffer(2 * sizeof(int64_t));
      int64_t v[2] = {begun_.load(), static_cast<int64_t>(seq_.load())};
      std::memcpy(b->data(), v, sizeof v);
      reply->buffers.push_back(b);
      MPI_Request r = MPI_REQUEST_NULL;
      if (MPI_Isend(b->data(), 2, MPI_INT64_T, st.MPI_SOURCE, kReplyTag, diag_comm_, &r) == MPI_SUCCESS) {
        replies_.push_back({r, reply});
      }
      post_query_recv();
      if (query_req_ == MPI_REQUEST_NULL) break;
    }
    for (size_t i = 0; i < replies_.size();) {
      int flag = 0;
      if (MPI_Test(&replies_[i].req, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS || flag) {
        replies_[i] = replies_.back();
        replies_.pop_back();
      } else {
        ++i;
      }
    }
  }

  /// Asks every other rank which collective it began last and names those that had not begun `seq`:
  /// "1 (its latest op is #3), 2 (no answer within 1000 ms: dead, stopped or not calling MPI)", or
  /// "none (...)". Waits for the answers at most the group's timeout, clamped to [200 ms, 2 s].
  std::string not_arrived(uint64_t seq) {
    auto wait = std::clamp<std::chrono::milliseconds>(std::chrono::duration_cast<std::chrono::milliseconds>(opts_.timeout),
                                                      std::chrono::milliseconds(200), std::chrono::milliseconds(2000));
    int n = size_;
    auto holder = std::make_shared<OpState>();  // the buffers, kept while any request may be active
    Buffer q = make_buffer(sizeof(int64_t)), a = make_buffer(2 * sizeof(int64_t) * n);
    holder->buffers = {q, a};
    int64_t k = static_cast<int64_t>(seq);
    std::memcpy(q->data(), &k, sizeof k);
    auto* ans = reinterpret_cast<int64_t*>(a->data());
    std::vector<MPI_Request> sends(n, MPI_REQUEST_NULL), recvs(n, MPI_REQUEST_NULL);
    std::vector<int> state(n, 0);  // 0 waiting, 1 answered, 2 could not ask
    for (int r = 0; r < n; ++r) {
      if (r == rank_) continue;
      if (MPI_Irecv(ans + 2 * r, 2, MPI_INT64_T, r, kReplyTag, diag_comm_, &recvs[r]) != MPI_SUCCESS ||
          MPI_Isend(q->data(), 1, MPI_INT64_T, r, kQueryTag, diag_comm_, &sends[r]) != MPI_SUCCESS) {
        state[r] = 2;
      }
    }
    auto until = Clock::now() + wait;
    Backoff b;
    for (;;) {
      bool all = true;
      for (int r = 0; r < n; ++r) {
        if (r == rank_ || state[r] != 0) continue;
        int flag = 0;
        if (MPI_Test(&recvs[r], &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS) state[r] = 2;
        else if (flag) state[r] = 1;
        else all = false;
      }
      serve_queries();  // others may be asking us at the same time
      if (all || Clock::now() >= until) break;
      b.pause();
    }
    std::vector<std::string> late;
    for (int r = 0; r < n; ++r) {
      if (r == rank_) continue;
      if (state[r] == 1) {
        int64_t began = ans[2 * r];
        if (began >= k) continue;
        late.push_back(std::to_string(r) + (began < 0 ? " (has begun no op of this group)"
                                                      : " (its latest op is #" + std::to_string(began) + ")"));
      } else {
        auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(wait).count();
        late.push_back(std::to_string(r) + (state[r] == 2 ? " (could not be asked)"
                                                          : " (no answer within " + std::to_string(ms) +
                                                                " ms: dead, stopped or its process stalled)"));
      }
    }
    for (int r = 0; r < n; ++r) {
      for (MPI_Request* req : {&recvs[r], &sends[r]}) {
        if (*req == MPI_REQUEST_NULL) continue;
        int flag = 0;
        if (MPI_Test(req, &flag, MPI_STATUS_IGNORE) == MPI_SUCCESS && flag) continue;
        if (req == &recvs[r]) MPI_Cancel(req);
        orphans_.push_back({*req, holder});
      }
    }
    if (late.empty()) return "none (every rank began op #" + std::to_string(k) + "; it stalled inside MPI)";
    std::string out;
    for (size_t i = 0; i < late.size(); ++i) out += (i ? ", " : "") + late[i];
    return out;
  }

  /// One round: pops and starts what can start, tests what is in flight. True when something moved.
  bool progress() {
    bool moved = false;
    for (;;) {
      if (current_) break;
      OpPtr op;
      std::string broken;
      {
        std::lock_guard<std::mutex> g(q_mu_);
        if (queue_.empty()) break;
        op = queue_.front();
        queue_.pop_front();
        broken = broken_;
      }
      moved = true;
      if (!broken.empty()) {
        fail(op, op->label() + ": group unusable: " + broken);
        continue;
      }
      if (!begin(op)) continue;
      if (op->p2p) {
        if (!op->timed) op->complete(nullptr);  // buffered send: done once the data is copied
        inflight_.push_back(op);
      } else {
        current_ = op;
      }
    }
    if (current_) {
      auto [running, moved_now] = poll(current_);
      moved |= moved_now;
      if (!running) current_.reset();
    }
    for (size_t i = 0; i < inflight_.size();) {
      auto [running, moved_now] = poll(inflight_[i]);
      moved |= moved_now;
      if (running) {
        ++i;
      } else {
        inflight_[i] = inflight_.back();
        inflight_.pop_back();
      }
    }
    if (!orphans_.empty() && (moved || ++orphan_tick_ % 64 == 0)) test_orphans();
    return moved;
  }

  void test_orphans() {
    for (size_t i = 0; i < orphans_.size();) {
      int flag = 0;
      MPI_Status st;
      if (MPI_Test(&orphans_[i].req, &flag, &st) != MPI_SUCCESS || flag) {
        orphans_[i] = orphans_.back();
        orphans_.pop_back();
      } else {
        ++i;
      }
    }
    orphan_count_.store(orphans_.size());
  }

  void worker_loop() {
    Backoff b;
    for (;;) {
      serve_queries();
      {
        std::unique_lock<std::mutex> l(q_mu_);
        if (stopping_) return;
        if (pending_.load() == 0) {
          // Idle. Small ops are queued without waking us (the thread that waits for one runs it, with no
          // hand-off); this periodic look picks up those that nobody waits for yet.
          q_cv_.wait_for(l, kIdleLook, [&] { return stopping_ || pending_.load() > 0; });
          b.reset();
        } else if (b.sleepy()) {
          q_cv_.wait_for(l, std::chrono::microseconds(100));
        }
        if (stopping_) return;
        if (pending_.load() == 0 && orphan_count_.load() == 0) continue;
        // Not woken for it: leave a just-queued small op to the thread about to wait for it (taking it
        // would make that thread sleep until we are done).
        if (!kicked_ && !queue_.empty() && Clock::now() - queue_.front()->queued_at < kGrace) continue;
        kicked_ = false;
      }
      std::unique_lock<std::mutex> ex(exec_mu_, std::try_to_lock);
      if (!ex.owns_lock()) {
        // A waiting thread runs the ops; it wakes us if it leaves some behind.
        std::unique_lock<std::mutex> l(q_mu_);
        q_cv_.wait_for(l, kIdleLook);
        continue;
      }
      // Poll while there is work; let go of the lock now and then so that waiters can take over.
      for (int i = 0; i < 4096; ++i) {
        if ((i & 63) == 63) serve_queries();
        if (progress()) {
          b.reset();
        } else {
          if (b.sleepy()) break;
          b.pause();
        }
        if (pending_.load() == 0 && current_ == nullptr && inflight_.empty()) break;
      }
      if (pending_.load() == 0 && !orphans_.empty()) test_orphans();
    }
  }

  static constexpr auto kIdleLook = std::chrono::milliseconds(1);
  static constexpr auto kGrace = std::chrono::microseconds(500);

  MPI_Comm comm_;
  MPI_Comm coll_comm_ = MPI_COMM_NULL;  // troupe's own collective algorithms' messages
  MPI_Comm diag_comm_ = MPI_COMM_NULL;  // timeout queries and their answers
  GroupOptions opts_;
  int rank_ = 0, size_ = 1;
  std::shared_ptr<const std::string> desc_;  // "group 'world' (mpi, rank 1 of 2)"
  std::atomic<uint64_t> seq_{0};
  std::atomic<int64_t> begun_{-1};  // sequence number of the latest collective begun here
  std::mutex scratch_mu_;
  Buffer scratch_;
  std::vector<SmallStep> small_plan_;  // this rank's recursive-doubling exchanges

  // under diag_mu_ (serve_queries)
  std::mutex diag_mu_;
  int64_t query_in_ = 0;
  MPI_Request query_req_ = MPI_REQUEST_NULL;
  std::vector<Orphan> replies_;
  std::atomic<int64_t> pending_{0};  // submitted, not yet retired
  std::atomic<size_t> orphan_count_{0};

  std::mutex q_mu_;
  std::condition_variable q_cv_;
  std::deque<OpPtr> queue_;
  std::string broken_;
  bool kicked_ = false;  // the worker was woken on purpose (not its periodic look)
  bool stopping_ = false;
  bool stopped_ = false;

  // under exec_mu_
  OpPtr current_;
  std::vector<OpPtr> inflight_;
  std::vector<Orphan> orphans_;
  uint64_t orphan_tick_ = 0;

  std::thread worker_;
  friend class MpiWork;
};

class MpiWork : public Work {
 public:
  MpiWork(std::shared_ptr<Engine> engine, OpPtr op) : engine_(std::move(engine)), op_(std::move(op)) {}
  bool is_completed() override { return op_->done.load(); }
  std::exception_ptr exception() override { return op_->done.load() ? op_->error : nullptr; }
  void wait(std::optional<std::chrono::milliseconds> timeout) override {
    auto deadline = timeout ? Clock::now() + *timeout : Clock::time_point::max();
    while (!op_->done.load()) {
      if (engine_->exec_mu_.try_lock()) {
        // Nobody is running the group's ops: run them here, up to ours.
        engine_->run_until(op_, deadline);
        engine_->exec_mu_.unlock();
        if (engine_->has_pending()) engine_->notify_worker();
      } else {
        std::unique_lock<std::mutex> l(op_->mu);
        op_->cv.wait_for(l, std::chrono::microseconds(500), [&] { return op_->done.load(); });
      }
      if (!op_->done.load() && Clock::now() >= deadline) {
        throw CommError("[wait] " + op_->label() + ": did not complete within " + std::to_string(timeout->count()) +
                        " ms (Work::wait's timeout; the op goes on)");
      }
    }
    if (op_->error) std::rethrow_exception(op_->error);
  }

 private:
  std::shared_ptr<Engine> engine_;
  OpPtr op_;
};

WorkPtr Engine::submit(OpPtr op) {
  for (auto& t : op->keep) op->bytes += t.nbytes();
  for (auto& b : op->buffers) op->bytes += b->size();
  bool refused = false;
  bool wake = false;
  std::string why;
  {
    std::lock_guard<std::mutex> g(q_mu_);
    op->group = desc_;
    if (!op->p2p) op->seq = seq_.fetch_add(1);
    if (stopped_ || stopping_) {
      refused = true;
      why = "group was shut down (destroyed or mpi_finalize called)";
    } else if (!broken_.empty()) {
      refused = true;
      why = "group unusable: " + broken_;
    } else {
      pending_.fetch_add(1);
      op->queued_at = Clock::now();
      queue_.push_back(op);
      // Waking the worker costs a futex call and a context switch per op, about 15 us here, 6% of a
      // 1 MB all-reduce (comm_bench): async ops below kWakeBytes are left to the thread that waits for
      // them (or the worker's next look, within kIdleLook); larger ones, or ops queued behind others,
      // start at once. A synchronous call's thread runs its op as soon as it waits: never a wake.
      wake = !detail::t_sync_call && (op->bytes >= kWakeBytes || queue_.size() > 1);
      if (wake) kicked_ = true;
    }
  }
  if (refused) op->complete(std::make_exception_ptr(CommError(op->label() + ": " + why)));
  else if (wake) q_cv_.notify_one();
  return std::make_shared<MpiWork>(shared_from_this(), op);
}

void Engine::shutdown(const std::string& why) {
  {
    std::lock_guard<std::mutex> g(q_mu_);
    if (stopped_ || stopping_) return;  // done, or being done by another thread
    stopping_ = true;
  }
  q_cv_.notify_all();
  if (worker_.joinable()) {
    if (worker_.get_id() == std::this_thread::get_id()) worker_.detach();
    else worker_.join();
  }
  std::lock_guard<std::mutex> ex(exec_mu_);
  std::deque<OpPtr> queued;
  {
    std::lock_guard<std::mutex> g(q_mu_);
    queued.swap(queue_);
    stopped_ = true;
  }
  bool alive = mpi_alive();
  auto msg = [&](const OpPtr& op) { return op->label() + ": " + why; };
  for (auto& op : queued) fail(op, msg(op));
  std::vector<OpPtr> running = inflight_;
  if (current_) running.push_back(current_);
  for (auto& op : running) {
    if (op->p2p && alive) {
      for (int i = 0; i < op->nreq; ++i) {
        if (op->req[i] != MPI_REQUEST_NULL) MPI_Cancel(&op->req[i]);
      }
    }
    orphan_requests(op);
    if (!op->done.load()) fail(op, msg(op));
  }
  inflight_.clear();
  current_.reset();
  {
    std::lock_guard<std::mutex> d(diag_mu_);
    if (query_req_ != MPI_REQUEST_NULL && alive) {
      MPI_Cancel(&query_req_);
      orphans_.push_back({query_req_, nullptr});
    }
    query_req_ = MPI_REQUEST_NULL;
    for (auto& r : replies_) orphans_.push_back(r);
    replies_.clear();
  }
  if (alive) test_orphans();
  // Requests still active (a collective cannot be freed or cancelled): their memory stays allocated.
  // MPI keeps progressing them from any thread's MPI calls.
  if (!orphans_.empty()) {
    std::lock_guard<std::mutex> g(g_leak_mu);
    for (auto& o : orphans_) g_leaked.push_back(o.op);
  }
  // A communicator with active collectives cannot be freed (libnbc would use it after): it leaks too.
  if (alive && orphans_.empty()) {
    for (MPI_Comm* c : {&comm_, &coll_comm_, &diag_comm_}) {
      if (*c != MPI_COMM_NULL) MPI_Comm_free(c);
    }
  }
  orphans_.clear();
  comm_ = coll_comm_ = diag_comm_ = MPI_COMM_NULL;
}

// ---- chunked MPI calls: each helper appends Steps to an op

int64_t max_count() { return std::max<int64_t>(1, g_max_count.load()); }

/// Chunks [0, n) into pieces of at most max_count(); at least one (possibly empty) chunk.
template <typename F>
void for_chunks(int64_t n, F f) {
  int64_t m = max_count();
  if (n == 0) {
    f(int64_t{0}, int64_t{0});
    return;
  }
  for (int64_t off = 0; off < n; off += m) f(off, std::min(m, n - off));
}

size_t type_size(MPI_Datatype t) {
  int s = 0;
  MPI_Type_size(t, &s);
  return static_cast<size_t>(s);
}

/// An MPI type of `count` elements of `base`, spaced `stride_elems` apart (lb 0, extent stride*size).
MPI_Datatype block_type(MPI_Datatype base, int64_t count, int64_t stride_elems) {
  MPI_Datatype contig, resized;
  MPI_Type_contiguous(static_cast<int>(count), base, &contig);
  MPI_Type_create_resized(contig, 0, static_cast<MPI_Aint>(stride_elems * type_size(base)), &resized);
  MPI_Type_commit(&resized);
  MPI_Type_free(&contig);
  return resized;
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

/// All-reduces of at most this many bytes run troupe's recursive doubling over point-to-point messages
/// (one exchange of the whole buffer per doubling step) instead of MPI_Iallreduce, whose libnbc schedule
/// costs more than the transfer below ~256 KB (comm_bench: 4 KB took 4.2 us against MPI_Allreduce's 3.2
/// us, the exchange 2.7 us). Settable for tests (detail::set_mpi_small_allreduce_bytes).
std::atomic<int64_t> g_small_allreduce_bytes{64 << 10};

/// Recursive doubling on `comm` (a communicator of the group's own, so that user tags never match):
/// with p2 the largest power of two <= size and rem = size - p2, ranks below 2 * rem fold in pairs
/// first (the even one sends, the odd one combines), the p2 remaining ranks exchange and combine with
/// partners at distance 1, 2, 4, ..., and the folded ranks get the result back. Every rank ends with
/// the same bits.
/// This rank's exchanges (same tags on every rank).
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

/// Starts the requests of step `s` (1 or 2 of them, receive first); returns the MPI error code.
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

/// The recursive doubling as steps of a queued op. `tmp` holds n elements (the partner's data).
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
  const bool small = static_cast<int64_t>(n * type_size(type)) <= g_small_allreduce_bytes.load();
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
                   : MPI_Iallreduce(MPI_IN_PLACE, buf, count, type, mpi_op(c), comm_, req.data());
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

  WorkPtr do_all_reduce(Tensor& tensor, ReduceOp op) override {
    const char* fn = "all_reduce";
    char* data = static_cast<char*>(tensor.data_ptr());
    int64_t n = tensor.numel();
    ScalarType dt = tensor.dtype();
    int size = this->size();
    // A synchronous all-reduce on an idle group runs at once, with no op object.
    if (detail::t_sync_call && !is_16bit_float(dt) && !g_debug.load() && size > 1 && n <= max_count()) {
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
      for (size_t r = 0; r < outs.size(); ++r) std::memcpy(outs[r].data_ptr(), staged->data() + r * bytes, bytes);
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
      std::memcpy(s->data(), in, input.nbytes());
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
    for (size_t r = 0; r < inputs.size(); ++r) std::memcpy(s->data() + r * bytes, inputs[r].data_ptr(), bytes);
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
    std::memcpy(s->data(), tensor.data_ptr(), tensor.nbytes());
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
  /// The all-reduce's steps: troupe's recursive doubling for small buffers, MPI_Iallreduce otherwise.
  void add_allreduce_op(OpState& o, char* buf, int64_t n, MPI_Datatype type, Combine c) {
    if (size() > 1 && n <= max_count() &&
        static_cast<int64_t>(n * type_size(type)) <= g_small_allreduce_bytes.load()) {
      add_small_allreduce(o, e_->coll_comm(), rank(), size(), buf, n, type, c,
                          e_->scratch(std::max<size_t>(1, n * type_size(type))));
    } else {
      add_allreduce(o, e_->comm(), buf, n, type, mpi_op(c));
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
    std::memcpy(s->data(), in, input.nbytes());
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
      add_reduce_scatter(o, e_->comm(), rank(), size, fin->data(), fout->data(), n, MPI_FLOAT, mpi_op(detail::combine_of(op, dt)));
      o.after = [=] {
        if (op == ReduceOp::AVG) divide_by(fout->data(), n, MPI_FLOAT, size);
        narrow(reinterpret_cast<float*>(fout->data()), out, n, dt);
      };
    } else {
      MPI_Datatype type = move_type(dt);
      add_reduce_scatter(o, e_->comm(), rank(), size, in, out, n, type, mpi_op(detail::combine_of(op, dt)));
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
      auto& a = *all;
      for (int r = 0; r < n; ++r) {
        if (a[3 * r + 2] != check) {
          throw CommError(where + ": ranks passed different rank lists (rank " + std::to_string(r) + "'s differs from rank " +
                          std::to_string(me) + "'s)");
        }
      }
      MPI_Comm sub = MPI_COMM_NULL;
      int rc = MPI_Comm_split(comm, color < 0 ? MPI_UNDEFINED : color, key, &sub);
      if (rc != MPI_SUCCESS) throw CommError(where + ": MPI_Comm_split failed: " + mpi_error_string(rc));
      if (color < 0 || sub == MPI_COMM_NULL) return;
      // Members in new-rank order: by (key, parent rank).
      std::vector<std::pair<int64_t, int>> members;
      for (int r = 0; r < n; ++r) {
        if (a[3 * r] == color) members.push_back({a[3 * r + 1], r});
      }
      std::sort(members.begin(), members.end());
      GroupOptions opts = options ? *options : parent;
      if (!options || opts.name.empty() || opts.name == GroupOptions{}.name) {
        std::string name = parent.name + "/group[";
        for (size_t i = 0; i < members.size(); ++i) name += (i ? "," : "") + std::to_string(members[i].second);
        opts.name = name + "]";
      }
      auto engine = std::make_shared<Engine>(sub, opts);
      engine->start_worker();
      *result = std::make_shared<MpiProcessGroup>(engine);
    };
    e_->submit(o)->wait();
    return *result;
  }

  std::shared_ptr<Engine> e_;
};

}  // namespace

bool started_by_mpirun() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMI_SIZE") != nullptr ||
         std::getenv("PMIX_RANK") != nullptr;
}

void set_mpi_debug_checks(bool on) { g_debug.store(on); }

namespace detail {
void set_mpi_max_count(int64_t count) { g_max_count.store(count < 1 ? 1 : std::min<int64_t>(count, INT_MAX)); }
void set_mpi_small_allreduce_bytes(int64_t bytes) { g_small_allreduce_bytes.store(std::max<int64_t>(0, bytes)); }
int64_t mpi_small_allreduce_bytes() { return g_small_allreduce_bytes.load(); }
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
