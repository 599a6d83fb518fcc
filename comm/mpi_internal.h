// The mpi backend's internals, shared by its files (internal): an op as steps of nonblocking MPI calls, the
// Engine that queues and polls them (mpi_engine.cpp, mpi_diagnose.cpp, mpi_allreduce.cpp) and the helpers
// the group (mpi.cpp) builds ops with. Only the mpi*.cpp files include it (it includes <mpi.h>).
#pragma once

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
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace troupe::comm::mpi_impl {

using Clock = std::chrono::steady_clock;

/// Largest element count of one MPI call (detail::set_mpi_max_count).
inline std::atomic<int64_t> g_max_count{INT_MAX};
/// The debug checks (set_mpi_debug_checks, TROUPE_COMM_DEBUG).
inline std::atomic<bool> g_debug{[] {
  const char* e = std::getenv("TROUPE_COMM_DEBUG");
  return e && *e && std::strcmp(e, "0") != 0;
}()};

/// MPI is initialised and not finalised.
inline bool mpi_alive() {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  return init && !fin;
}

/// MPI_Error_string of `code`.
inline std::string mpi_error_string(int code) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, buf, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(buf, len);
}

/// float16 or bfloat16 (reduced in float32).
inline bool is_16bit_float(ScalarType t) { return t == kFloat16 || t == kBFloat16; }

/// The MPI type that moves elements of `t` (16-bit floats move as their bits).
inline MPI_Datatype move_type(ScalarType t) {
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
MPI_Op mpi_op(Combine c, MPI_Datatype type);

/// Raw bytes; the staging buffers of ops.
using Buffer = std::shared_ptr<std::vector<char>>;
inline Buffer make_buffer(size_t bytes) { return std::make_shared<std::vector<char>>(bytes); }

/// 16-bit floats (t) -> float32, n elements.
void widen(const void* src, float* dst, int64_t n, ScalarType t);
/// float32 -> 16-bit floats (t), rounded once.
void narrow(const float* src, void* dst, int64_t n, ScalarType t);
/// In place x /= size over a float32 or float64 buffer (AVG).
void divide_by(void* p, int64_t n, MPI_Datatype type, int size);

/// The two byte ranges overlap.
inline bool overlaps(const void* a, size_t an, const void* b, size_t bn) {
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
inline std::mutex g_leak_mu;
inline std::vector<OpPtr> g_leaked;  // ops of destroyed groups whose MPI requests never completed

// ---- the recursive doubling of small all-reduces (mpi_allreduce.cpp)

/// One exchange of the recursive doubling: send the buffer to `send` and/or receive into the partner
/// buffer (then combine) or into the buffer itself (the folded ranks' result) from `recv` (-1: none).
struct SmallStep {
  int send = -1, recv = -1, tag = 0;
  bool combine = false;  // received into tmp, then buf = buf op tmp
};

/// This rank's exchanges (same tags on every rank).
std::vector<SmallStep> small_allreduce_plan(int rank, int size);
/// Starts the requests of step `s` (1 or 2 of them, receive first); returns the MPI error code.
int start_small_step(const SmallStep& s, MPI_Comm comm, char* buf, char* tmp, int count, MPI_Datatype type,
                     MPI_Request* r, int* nreq);
/// dst[i] = dst[i] op src[i] over n elements of `type` (reduce_op.h's meaning of `c`).
void combine(void* dst, const void* src, int64_t n, MPI_Datatype type, Combine c);
/// The recursive doubling as steps of a queued op. `tmp` holds n elements (the partner's data).
void add_small_allreduce(OpState& op, MPI_Comm comm, int rank, int size, char* buf, int64_t n, MPI_Datatype type,
                         Combine c, Buffer tmp);
/// AVG of float32 / float64 above the small-all-reduce bytes: troupe's ring (a reduce-scatter, then an
/// all-gather, p - 1 exchanges of n / p elements each with the neighbours), whose last reduce-scatter
/// step divides while it adds, (partial + received) / size, so that the average costs no pass of its own
/// over the buffer (MPI_Iallreduce's SUM and then a division pass did). `tmp` holds n / p + 1 elements.
void add_ring_avg_allreduce(OpState& op, MPI_Comm comm, int rank, int size, char* buf, int64_t n, MPI_Datatype type,
                            Buffer tmp);
/// All-reduces of at most this many bytes run the recursive doubling, by where the group's ranks live
/// (comm_bench --threshold, bench/results.txt): on one host (shared memory) it wins up to 32 KB and
/// MPI_Iallreduce from 64 KB; across hosts on TCP every message round costs far more than the bytes and
/// doubling (log2 p rounds) won up to 2 MB against Iallreduce's schedule.
constexpr int64_t kSmallAllreduceOneHost = int64_t{64} << 10;
constexpr int64_t kSmallAllreduceAcrossHosts = int64_t{2} << 20;
/// detail::set_mpi_small_allreduce_bytes: one threshold for every group (tests, the bench), or -1: by host.
inline std::atomic<int64_t> g_small_allreduce_override{-1};

// ---- chunked MPI calls

/// Bytes per element of an MPI type.
inline size_t type_size(MPI_Datatype t) {
  int s = 0;
  MPI_Type_size(t, &s);
  return static_cast<size_t>(s);
}
/// The element count one MPI call may take (g_max_count, at least 1).
inline int64_t max_count() { return std::max<int64_t>(1, g_max_count.load()); }
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

// ---- the engine

class Engine;
/// Every live engine (mpi_finalize stops them).
inline std::mutex g_engines_mu;
inline std::vector<std::weak_ptr<Engine>> g_engines;


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
    // Do the ranks share one host? (collective, like the dups above; the node communicator is only counted)
    MPI_Comm node = MPI_COMM_NULL;
    int on_node = size_;
    if (MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node) == MPI_SUCCESS &&
        node != MPI_COMM_NULL) {
      MPI_Comm_size(node, &on_node);
      MPI_Comm_free(&node);
    }
    spans_hosts_ = on_node < size_;
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
  /// True when the group's ranks are on more than one host (MPI_COMM_TYPE_SHARED splits them).
  bool spans_hosts() const { return spans_hosts_; }
  /// All-reduces of at most this many bytes run the recursive doubling (see kSmallAllreduceOneHost).
  int64_t small_allreduce_bytes() const {
    const int64_t o = g_small_allreduce_override.load();
    return o >= 0 ? o : spans_hosts_ ? kSmallAllreduceAcrossHosts : kSmallAllreduceOneHost;
  }

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
  bool start_step(const OpPtr& op);

  /// Hands op's requests still active to orphans_ (kept until MPI is done with them).
  void orphan_requests(const OpPtr& op);

  /// Begins `op` on this thread; false when it already ended.
  bool begin(const OpPtr& op);

  /// All steps done: runs `after`, completes. Returns false (op ended).
  bool finish(const OpPtr& op);

  /// Tests op's request; advances steps. Returns {still running, progressed}.
  std::pair<bool, bool> poll(const OpPtr& op);

  void timed_out(const OpPtr& op);

  // ---- "which op are you at?": how a timed-out rank names the ranks that had not arrived

  static constexpr int kQueryTag = 1, kReplyTag = 2;

  /// Posts the receive of the next query (from any rank). Under diag_mu_ or before the worker starts.
  void post_query_recv();

  /// Answers the queries that arrived with {the latest collective this rank began (-1: none), the
  /// number it issued}. Called by the worker, and by a rank diagnosing a timeout (which may itself be
  /// the worker): whoever holds diag_mu_.
  void serve_queries();

  /// Asks every other rank which collective it began last and names those that had not begun `seq`:
  /// "1 (its latest op is #3), 2 (no answer within 1000 ms: dead, stopped or not calling MPI)", or
  /// "none (...)". Waits for the answers at most the group's timeout, clamped to [200 ms, 2 s].
  std::string not_arrived(uint64_t seq);

  /// One round: pops and starts what can start, tests what is in flight. True when something moved.
  bool progress();

  void test_orphans();

  void worker_loop();

  static constexpr auto kIdleLook = std::chrono::milliseconds(1);
  // After kDozeAfter idle looks in a row (nothing queued, in flight or orphaned), the idle worker looks
  // every kDozeLook instead (a look a millisecond woke each process's workers 1,000 times a second,
  // each wake taking a core from a thread that polls the actor lane on a small machine); a submit
  // then wakes it, and a timeout query waits for its answer at least 200 ms.
  static constexpr int kDozeAfter = 50;
  static constexpr auto kDozeLook = std::chrono::milliseconds(20);
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
  bool spans_hosts_ = false;

  // under diag_mu_ (serve_queries)
  std::mutex diag_mu_;
  int64_t query_in_ = 0;
  MPI_Request query_req_ = MPI_REQUEST_NULL;
  std::vector<Orphan> replies_;
  // An op of this group timed out: a rank that was late (stopped, stalled) may still send to this one
  // afterwards (its part of the collective, its answer to our query), so shutdown keeps the
  // communicators (a message for a freed one crashes Open MPI's matching).
  std::atomic<bool> timed_out_once_{false};
  std::atomic<int64_t> pending_{0};  // submitted, not yet retired
  std::atomic<size_t> orphan_count_{0};

  std::mutex q_mu_;
  std::condition_variable q_cv_;
  std::deque<OpPtr> queue_;
  std::string broken_;
  bool kicked_ = false;  // the worker was woken on purpose (not its periodic look)
  bool dozing_ = false;  // the worker sleeps kDozeLook at a time (idle for long): submit wakes it
  bool stopping_ = false;
  bool stopped_ = false;

  // under exec_mu_
  OpPtr current_;
  std::vector<OpPtr> inflight_;
  std::vector<Orphan> orphans_;
  uint64_t orphan_tick_ = 0;

  std::thread worker_;
};


}  // namespace troupe::comm::mpi_impl
