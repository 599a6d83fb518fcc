// MessageLane over MPI (message_lane.h): heads on tag 1, bodies on tag 2 (a body larger than 1 GiB as
// several messages of at most 1 GiB), MPI_Isend from the caller's thread, MPI_Improbe / MPI_Mrecv on the
// polling thread.
#include <troupe/comm/message_lane.h>

#include <linux/futex.h>

#include <deque>
#include <fcntl.h>
#include <random>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <troupe/tensor/ops.h>

#include "mpi_internal.h"
#include "shm_ring.h"

namespace troupe::comm {
namespace {

using mpi_impl::mpi_alive;
using mpi_impl::mpi_error_string;

constexpr int kHeadTag = 1;
constexpr int kBodyTag = 2;
constexpr int kBigHeadTag = 3;  // a head above kSlotBytes, announced by an empty message on kHeadTag
// Heads land in receives posted ahead (kSlots of kSlotBytes each, taken in posting order), so that MPI
// copies one from its shared-memory queue straight into place: a head nobody had posted a receive for
// was copied into an MPI buffer on arrival, then out of it by the receive (a third of the lane thread's
// time in the 4 KB stream went to that matching and copying). 72 KB, not 64 (until 2026-11-29): a 64 KB
// tensor with its actor message fits, and between nodes the actors' lane sends it inside its head, one
// TCP message (the 64 KB stream between two test hosts 0.88-1.07 of raw MPI against 0.78-0.83 as a head
// and a body, alternated runs). 32 slots: 2.3 MB a process.
constexpr int kSlots = 32;
constexpr int64_t kSlotBytes = int64_t{72} << 10;
// How long poll() waits for a large head once its announcement came (it was posted right after).
constexpr auto kBigHeadWait = std::chrono::seconds(60);
constexpr int64_t kChunk = int64_t{1} << 30;
// post() retires completed sends (test_sends_locked: one MPI_Testsome, a poll of every transport) only
// once this many are outstanding; polls retire them too. Retiring at every post cost a 4 KB request
// between two test hosts 1.5 us of its 10.6-11.1 us post (medians of 5,000, 2 alternated runs each).
constexpr size_t kReclaimAt = 16;
// How long post() polls its own sends before it leaves them to the polling thread.
constexpr auto kOwnProgress = std::chrono::milliseconds(50);
// Messages above the eager limit that the peer reads itself (post's by_reader) under way at a time.
constexpr size_t kReaderWindow = 8;
// ... and the largest such message (head and bodies). Requests (post's `awaited`) are not left to the
// peer: measured through the lane, a 1 MB request ran at 0.85 of raw MPI left so (median of 8 alternated
// pairs; 0.96 in 8 more) against 1.02 (1.00) when post waited for its end, and a 64 KB request took 12.6 us
// against 11.1 (6 pairs); the caller has nothing else to do meanwhile. A 64 KB stream gained (above).
constexpr int64_t kReaderMaxBytes = int64_t{256} << 10;
// Heads between the ranks of a node travel in shared-memory rings (ShmRing), one from each rank to each
// other, in a second shared window: the sender copies the head in, the receiver decodes it in place, and
// neither calls MPI (no matching, no request, no progress of every transport). A 4 KB request on the lane
// between two ranks of this machine (remote_bench --loop, TROUPE_ACTOR_LANE_TRACE, medians of 20,000):
// post to the Call read 1.5 us by MPI, 0.9 in the ring; Reply posted to read 0.7 and 0.5; a whole cycle
// 5.7 and 4.0 (2026-11-28; raw MPI's round trip 2.1-2.3 us). A ring holds 1 MB, less on
// a node of more than 8 ranks (each rank's rings together at most kRingBytesPerRank: 64 KB a ring at 128
// ranks), none above kRingMaxRanks ranks on a node or with TROUPE_LANE_SHM=0 on any rank (heads then go by
// MPI, as between nodes). A head above a quarter of its ring goes by MPI on kBigHeadTag, announced by a
// record in the ring, so that the heads of one sender keep their order.
constexpr size_t kRingBytes = size_t{1} << 20;
constexpr size_t kRingBytesPerRank = size_t{8} << 20;
constexpr int kRingMaxRanks = 128;
constexpr uint32_t kRingHead = 1;       // a record holding a head
constexpr uint32_t kRingAnnounce = 2;   // a head that follows on kBigHeadTag
constexpr uint32_t kRingHeadB = 3;      // a head whose bodies of at most ring_body_bytes_ follow in the ring
constexpr uint32_t kRingBody = 4;       // a piece of a body, more pieces of it follow
constexpr uint32_t kRingBodyEnd = 5;    // the last piece of a body
// Bodies of at most a quarter of the ring travel in it too, in pieces of kRingPiece bytes that the
// receiver copies out while the sender copies the next ones in (MPI's rendezvous in its shared-memory
// transport, single copy off, pushes fragments so as well, after a handshake); larger ones by MPI,
// whose single copy (CMA) reads them once. A 64 KB request (remote_bench --loop, alternated runs, single
// copy off): 11.6-11.9 us in 16 KB pieces against 13.3-14.5 by MPI (raw MPI 8.4-9.5); the transfer case's
// ratio 0.89-0.94 against 0.60-0.85, its stream 1.05-1.33 against 0.76-0.86 (0.75-0.80 and 0.72-0.95
// under CMA, against 0.60-0.68 and 0.68-0.83).
constexpr size_t kRingPiece = size_t{16} << 10;
// A body that goes in the ring (at most ring_body_bytes_) is copied once, by the sender, into the pair's
// arena when it has room: a shared-memory file of kArenaPage pages that the receiver maps too, where the
// received tensor then lives (from_blob; its deleter marks its pages free for the sender to reuse). The
// ring carries a kRingBodyAt record naming the pages. Pieces (two copies, overlapped) remain for a body
// that finds no room (the receiver holds earlier ones) and with TROUPE_LANE_ARENA=0. Under Open MPI's
// default single copy (CMA) raw MPI copies a 64 KB message once, where the pieces copy it twice.
constexpr uint32_t kRingBodyAt = 6;  // a body in the arena: an ArenaRecord
constexpr size_t kArenaPage = size_t{16} << 10;
constexpr size_t kArenaBytes = size_t{4} << 20;          // from one rank to another
constexpr size_t kArenaBytesPerRank = size_t{16} << 20;  // a rank's incoming arenas together
constexpr int kArenaMaxRanks = 16;                        // none on a node of more ranks

struct ArenaRecord {
  uint32_t page;   // the first page
  uint32_t pages;  // how many
  uint64_t bytes;  // the body's size
};

/// One process's mapping of an arena file: `pages` pages of data, then a flag per page that the receiver
/// sets (release) when the body starting there is freed; unmapped when the last holder goes (the lane and
/// every tensor received into it).
struct ArenaMap {
  char* base = nullptr;
  size_t bytes = 0, pages = 0;
  ArenaMap() = default;
  ArenaMap(const ArenaMap&) = delete;
  ArenaMap& operator=(const ArenaMap&) = delete;
  ~ArenaMap() {
    if (base) munmap(base, bytes);
  }
  std::atomic<uint32_t>* freed() const { return reinterpret_cast<std::atomic<uint32_t>*>(base + pages * kArenaPage); }
  static size_t file_bytes(size_t pages) { return pages * kArenaPage + pages * sizeof(uint32_t); }
  /// Maps shared-memory object `name` of `pages` pages, creating it (its pages allocated, so that a full
  /// /dev/shm is an error here, not a SIGBUS later) or opening the one a peer created; null on failure.
  static std::shared_ptr<ArenaMap> open(const std::string& name, size_t pages, bool create) {
    const size_t bytes = file_bytes(pages);
    int fd = shm_open(name.c_str(), create ? O_CREAT | O_EXCL | O_RDWR : O_RDWR, 0600);
    if (fd < 0) return nullptr;
    bool ok = true;
    if (create) ok = ftruncate(fd, static_cast<off_t>(bytes)) == 0 && posix_fallocate(fd, 0, static_cast<off_t>(bytes)) == 0;
    struct stat st {};
    ok = ok && fstat(fd, &st) == 0 && static_cast<size_t>(st.st_size) == bytes;
    void* p = ok ? mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0) : MAP_FAILED;
    close(fd);
    if (p == MAP_FAILED) return nullptr;
    auto m = std::make_shared<ArenaMap>();
    m->base = static_cast<char*>(p);
    m->bytes = bytes;
    m->pages = pages;
    return m;
  }
};

/// The sender's side of the arena to one rank: which pages its bodies hold (the receiver frees them by
/// their flags), allocated next-fit. Under send_mu_.
struct ArenaOut {
  std::shared_ptr<ArenaMap> map;
  std::vector<uint32_t> run;   // per page: the length of the body's run that starts there (0: none)
  std::vector<uint8_t> used;   // per page
  size_t cursor = 0;
  /// The first of `np` free pages in a row, marked used; -1 when there are none (after taking back the
  /// runs the receiver freed).
  int64_t alloc(size_t np) {
    const size_t n = map->pages;
    if (np == 0 || np > n) return -1;
    for (int pass = 0; pass < 2; ++pass) {
      if (pass == 1) reclaim();
      for (size_t i = 0; i < n; ++i) {
        const size_t p = (cursor + i) % n;
        if (p + np > n) continue;
        size_t k = 0;
        while (k < np && !used[p + k]) ++k;
        if (k < np) continue;
        for (k = 0; k < np; ++k) used[p + k] = 1;
        run[p] = static_cast<uint32_t>(np);
        cursor = (p + np) % n;
        return static_cast<int64_t>(p);
      }
    }
    return -1;
  }
  void reclaim() {
    std::atomic<uint32_t>* f = map->freed();
    for (size_t p = 0; p < map->pages; ++p) {
      if (run[p] == 0 || f[p].load(std::memory_order_acquire) == 0) continue;
      f[p].store(0, std::memory_order_relaxed);
      for (size_t k = 0; k < run[p]; ++k) used[p + k] = 0;
      run[p] = 0;
    }
  }
};

/// False when environment variable `name` is set to 0 (an A/B switch for measurements).
bool env_flag_off(const char* name) {
  const char* v = std::getenv(name);
  return v && std::string(v) == "0";
}

/// A rank's doorbell, in the node's shared window: `sleeping` while it waits in idle_wait, `ring`
/// bumped (and futex-woken) by a poster that saw it sleeping and no other thread of that rank polling
/// (`pollers`, MessageLane::polling).
struct Doorbell {
  std::atomic<uint32_t> ring;
  std::atomic<uint32_t> sleeping;
  std::atomic<uint32_t> pollers;
};
static_assert(std::atomic<uint32_t>::is_always_lock_free);

void futex_wait(std::atomic<uint32_t>* w, uint32_t expected, std::chrono::microseconds timeout) {
  timespec ts{static_cast<time_t>(timeout.count() / 1000000), static_cast<long>(timeout.count() % 1000000) * 1000};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(w), FUTEX_WAIT, expected, &ts, nullptr, 0);
}
void futex_wake(std::atomic<uint32_t>* w) { syscall(SYS_futex, reinterpret_cast<uint32_t*>(w), FUTEX_WAKE, 1, nullptr, nullptr, 0); }

/// An MPI_T session (MPI_T_init_thread here, MPI_T_finalize at the end), to read Open MPI's control
/// variables.
class MpiTSession {
 public:
  MpiTSession() {
    int provided = 0;
    ok_ = MPI_T_init_thread(MPI_THREAD_MULTIPLE, &provided) == MPI_SUCCESS;
  }
  ~MpiTSession() {
    if (ok_) MPI_T_finalize();
  }
  MpiTSession(const MpiTSession&) = delete;
  MpiTSession& operator=(const MpiTSession&) = delete;

  /// Reads control variable `name`, one value, into `out` (as large as its type); false when it cannot
  /// be read (a transport Open MPI did not select has no variables). An enumerated one's name of its
  /// value goes to `item` when given (false when it has none).
  bool read(const char* name, void* out, std::string* item = nullptr) const {
    int idx = -1;
    if (!ok_ || MPI_T_cvar_get_index(name, &idx) != MPI_SUCCESS) return false;
    char vname[256], desc[256];
    int vname_len = sizeof vname, desc_len = sizeof desc, verbosity = 0, bind = 0, scope = 0;
    MPI_Datatype type;
    MPI_T_enum en = MPI_T_ENUM_NULL;
    if (MPI_T_cvar_get_info(idx, vname, &vname_len, &verbosity, &type, &en, desc, &desc_len, &bind, &scope) != MPI_SUCCESS) {
      return false;
    }
    MPI_T_cvar_handle h;
    int count = 0;
    if (MPI_T_cvar_handle_alloc(idx, nullptr, &h, &count) != MPI_SUCCESS) return false;
    bool read = count == 1 && MPI_T_cvar_read(h, out) == MPI_SUCCESS;
    MPI_T_cvar_handle_free(&h);
    if (!read || !item) return read;
    // The enumeration's item whose value was read (an enumerated variable is an int).
    int items = 0;
    char en_name[64];
    int en_len = sizeof en_name;
    if (type != MPI_INT || en == MPI_T_ENUM_NULL || MPI_T_enum_get_info(en, &items, en_name, &en_len) != MPI_SUCCESS) return false;
    for (int i = 0; i < items; ++i) {
      int v = 0;
      char it[64];
      int it_len = sizeof it;
      if (MPI_T_enum_get_item(en, i, &v, it, &it_len) == MPI_SUCCESS && v == *static_cast<const int*>(out)) {
        *item = it;
        return true;
      }
    }
    return false;
  }

 private:
  bool ok_ = false;
};

/// The largest message Open MPI sends eagerly to a peer: the smallest eager limit of its transports in use
/// here, shared memory's between the ranks of a node (btl_vader_eager_limit) and TCP's between nodes
/// (btl_tcp_eager_limit, 64 KB by default), read through MPI_T (a transport Open MPI did not select has
/// no such variable), less 64 bytes for MPI's own header; 4 KB (shared memory's default) when neither
/// can be read.
int64_t eager_limit_bytes(const MpiTSession& t) {
  int64_t limit = -1;
  for (const char* name : {"btl_vader_eager_limit", "btl_tcp_eager_limit"}) {
    unsigned long long v = 0;  // a size_t variable (MPI_UNSIGNED_LONG_LONG in Open MPI)
    if (t.read(name, &v) && v >= 256) {
      limit = limit < 0 ? static_cast<int64_t>(v) : std::min(limit, static_cast<int64_t>(v));
    }
  }
  return (limit < 0 ? 4096 : limit) - 64;
}

/// Whether Open MPI's shared-memory transport copies a message above its eager limit with a single copy
/// made by the receiver (btl_vader_single_copy_mechanism cma, xpmem or knem, read through MPI_T): the
/// receiver reads the sender's memory itself once it matched the message, so the sender need not poll for
/// it to move (it only learns of the end at its next look). False when the variable cannot be read, is
/// `none` or `emulated` (fragments the sender pushes while it polls).
bool single_copy_by_reader(const MpiTSession& t) {
  int value = -1;
  std::string mech;
  return t.read("btl_vader_single_copy_mechanism", &value, &mech) && (mech == "cma" || mech == "xpmem" || mech == "knem");
}

class MpiLane final : public MessageLane {
 public:
  MpiLane(MPI_Comm comm, int rank, int size)
      : comm_(comm), rank_(rank), size_(size), bells_(size, nullptr), on_node_(size, 0) {
    on_node_[rank] = 1;
    slots_.resize(kSlots);
    for (Slot& sl : slots_) {
      sl.buf.reset(new char[kSlotBytes]);
      post_slot(sl);
    }
    // The doorbells: one slot per rank of this node in a shared window (collective over the world).
    MPI_Comm node = MPI_COMM_NULL;
    if (MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) != MPI_SUCCESS) return;
    int nsize = 0;
    MPI_Comm_size(node, &nsize);
    MPI_Group wg, ng;
    MPI_Comm_group(comm_, &wg);
    MPI_Comm_group(node, &ng);
    std::vector<int> nranks(nsize), wranks(nsize);
    for (int i = 0; i < nsize; ++i) nranks[i] = i;
    MPI_Group_translate_ranks(ng, nsize, nranks.data(), wg, wranks.data());
    for (int i = 0; i < nsize; ++i)
      if (wranks[i] >= 0 && wranks[i] < size_) on_node_[wranks[i]] = 1;
    void* base = nullptr;
    if (MPI_Win_allocate_shared(sizeof(Doorbell), 1, MPI_INFO_NULL, node, &base, &win_) != MPI_SUCCESS) {
      MPI_Group_free(&wg);
      MPI_Group_free(&ng);
      return;
    }
    for (int i = 0; i < nsize; ++i) {
      MPI_Aint sz = 0;
      int disp = 0;
      void* p = nullptr;
      if (MPI_Win_shared_query(win_, i, &sz, &disp, &p) == MPI_SUCCESS && p && sz >= static_cast<MPI_Aint>(sizeof(Doorbell))) {
        // Each rank constructs its own slot; the barrier below orders that before any peer rings it.
        bells_[wranks[i]] = wranks[i] == rank_ ? new (p) Doorbell{} : static_cast<Doorbell*>(p);
      }
    }
    MPI_Group_free(&wg);
    MPI_Group_free(&ng);
    all_on_node_ = nsize == size_;
    MPI_Barrier(node);  // every slot constructed before anyone rings
    node_ = node;
    make_rings(node, nsize, wranks);
  }

  ~MpiLane() override {
    std::lock_guard<std::mutex> g(send_mu_);
    if (!mpi_alive()) return;
    bool clean = cancel_slots();
    test_sends_locked();
    // Sends a dead or stopped peer never took stay posted (MPI may still complete them): their memory
    // is kept, and the communicator is not freed under them.
    if (!out_.empty()) {
      static std::mutex leak_mu;
      static std::vector<std::shared_ptr<Keep>> leaked;
      std::lock_guard<std::mutex> l(leak_mu);
      for (auto& o : out_) leaked.push_back(o.keep);
      return;
    }
    // The window and the node communicator stay: freeing them is collective, and a peer may be dead.
    if (clean) MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  /// lane_testing::overwrite_ring_counters.
  bool overwrite_ring_counters(int dest, uint64_t head, uint64_t tail) {
    std::lock_guard<std::mutex> g(send_mu_);
    if (dest < 0 || static_cast<size_t>(dest) >= out_rings_.size() || !out_rings_[static_cast<size_t>(dest)]) return false;
    out_rings_[static_cast<size_t>(dest)]->overwrite_counters(head, tail);
    return true;
  }

  void post(int dest, std::string&& head, std::vector<Tensor> bodies, bool awaited) override {
    if (dest < 0 || dest >= size_ || dest == rank_) {
      throw CommError("[message_lane] post to rank " + std::to_string(dest) + " (world of " + std::to_string(size_) +
                      ", this is rank " + std::to_string(rank_) + ")");
    }
    if (head.empty()) throw CommError("[message_lane] post to rank " + std::to_string(dest) + ": an empty head");
    if (bodies.empty() && !out_rings_.empty() && out_rings_[dest] && head.size() <= out_rings_[dest]->max_record()) {
      // A head alone, copied into the ring when nothing waits for room in it: nothing to keep.
      bool in = false;
      {
        std::lock_guard<std::mutex> g(send_mu_);
        if (out_.size() >= kReclaimAt) test_sends_locked();
        in = overflow_[dest].empty() && out_rings_[dest]->push(kRingHead, head.data(), head.size());
      }
      if (in) {
        std::atomic_thread_fence(std::memory_order_seq_cst);  // the head is out before we look
        ring(dest);
        return;
      }
    }
    auto keep = std::make_shared<Keep>();
    keep->head = std::move(head);
    keep->bodies = std::move(bodies);
    for (const Tensor& t : keep->bodies) {
      if (!t.defined() || !t.is_cpu() || !t.is_contiguous()) throw CommError("[message_lane] a body must be a contiguous CPU tensor");
    }
    // Every piece within the eager limit: MPI copies it out during MPI_Isend, and it reaches the peer
    // without this process polling again; its request is only reclaimed later (by the next post or poll).
    // A head in the ring is out once post returns.
    ShmRing* shm = out_rings_.empty() ? nullptr : out_rings_[dest].get();
    const bool ring_head = shm && keep->head.size() <= shm->max_record();
    int64_t total = ring_head ? 0 : static_cast<int64_t>(keep->head.size());
    bool eager = total <= eager_bytes_;
    bool ring_bodies = false;  // some body goes in the ring (its pieces are out once in it)
    for (const Tensor& t : keep->bodies) {
      if (ring_head && in_ring(t)) {
        ring_bodies = true;
        continue;
      }
      eager = eager && static_cast<int64_t>(t.nbytes()) <= eager_bytes_;
      total += static_cast<int64_t>(t.nbytes());
    }
    // Above the eager limit, at most kReaderMaxBytes, to a rank of this node whose shared-memory transport
    // copies by the reader (single_copy_by_reader): the peer moves it, so post returns at once, as for an
    // eager message, and the caller prepares its next message while this one is read (a 64 KB stream
    // under Open MPI's default CMA: 8.6 us a transfer against 10.2 when post waited for each one's end,
    // medians of 10 alternated runs; raw MPI_Send 7.2-7.4; a raw MPI program whose sender is busy 0.7 us
    // between sends went from 10.0 to 7.8 us with such a window, MPI_Send's 7.5). At most kReaderWindow
    // pieces of such messages are under way at a time (bodies, in practice: a head within the eager limit
    // is out at once): post waits for the oldest, at most kOwnProgress (a peer that stopped reading: then
    // it goes on).
    const bool by_reader = !eager && !awaited && total <= kReaderMaxBytes && peer_reads(dest);
    std::vector<MPI_Request> mine;
    bool waits = false;  // records wait for room in a ring (overflow_)
    {
      std::lock_guard<std::mutex> g(send_mu_);  // one message's pieces in a row: posts to one rank keep their order
      if (out_.size() >= kReclaimAt) test_sends_locked();
      if (by_reader) {
        const auto until = mpi_impl::Clock::now() + kOwnProgress;
        for (int k = 0; peer_reads_under_way() >= kReaderWindow; ++k) {
          test_sends_locked();
          if ((k & 63) == 63 && mpi_impl::Clock::now() > until) break;  // a stuck peer: go on, memory kept
#if defined(__x86_64__) || defined(__i386__)
          __builtin_ia32_pause();
#endif
        }
      }
      try {
        if (shm) {  // in the ring (or queued behind what waits for room in it); a large one announced there
          if (ring_head) {
            ring_push_locked(dest, *shm, Waiting{keep, ring_bodies ? kRingHeadB : kRingHead});
          } else {
            ring_push_locked(dest, *shm, Waiting{keep, kRingAnnounce});
            isend(mine, keep->head.data(), static_cast<int64_t>(keep->head.size()), dest, kBigHeadTag);
          }
        } else if (static_cast<int64_t>(keep->head.size()) <= kSlotBytes) {
          isend(mine, keep->head.data(), static_cast<int64_t>(keep->head.size()), dest, kHeadTag);
        } else {  // announced by an empty head, then on a tag of its own (in order: one sender, one tag)
          isend(mine, keep->head.data(), 0, dest, kHeadTag);
          isend(mine, keep->head.data(), static_cast<int64_t>(keep->head.size()), dest, kBigHeadTag);
        }
        for (size_t b = 0; b < keep->bodies.size(); ++b) {
          const Tensor& t = keep->bodies[b];
          const char* p = static_cast<const char*>(t.data_ptr());
          const int64_t n = static_cast<int64_t>(t.nbytes());
          if (ring_bodies && in_ring(t)) {  // after the head, in the ring: in the arena when it has room, else in pieces
            if (n > 0 && !arena_out_.empty() && arena_out_[static_cast<size_t>(dest)].map) {
              ArenaOut& a = arena_out_[static_cast<size_t>(dest)];
              const int64_t page = a.alloc((static_cast<size_t>(n) + kArenaPage - 1) / kArenaPage);
              if (page >= 0) {
                std::memcpy(a.map->base + static_cast<size_t>(page) * kArenaPage, p, static_cast<size_t>(n));
                ring_push_locked(dest, *shm, Waiting{keep, kRingBodyAt, static_cast<int>(b), static_cast<size_t>(page), static_cast<size_t>(n)});
                continue;
              }
            }
            size_t off = 0;
            do {  // (an empty body is one empty piece)
              const size_t len = std::min(ring_piece_, static_cast<size_t>(n) - off);
              ring_push_locked(dest, *shm, Waiting{keep, off + len == static_cast<size_t>(n) ? kRingBodyEnd : kRingBody,
                                                   static_cast<int>(b), off, len});
              off += len;
            } while (off < static_cast<size_t>(n));
            continue;
          }
          int64_t off = 0;
          do {
            const int64_t c = std::min(kChunk, n - off);
            isend(mine, p + off, c, dest, kBodyTag);
            off += c;
          } while (off < n);
        }
      } catch (...) {
        for (MPI_Request r : mine) out_.push_back(Out{r, keep, dest, false});  // what was posted keeps its memory
        throw;
      }
      if (eager || by_reader) {
        for (MPI_Request r : mine) out_.push_back(Out{r, keep, dest, true, by_reader});
        if (by_reader) reader_out_.fetch_add(mine.size(), std::memory_order_relaxed);
      }
      waits = overflow_n_ > 0;
    }
    std::atomic_thread_fence(std::memory_order_seq_cst);  // the message is out before we look
    ring(dest);
    // Records wait for room in a ring: the polling thread moves them, and may have seen no pending send
    // (pending_sends() while this post held the lock) and gone to sleep.
    if (waits && !ring_bodies) ring(rank_);
    if (ring_bodies) own_ring_progress(dest);
    if (eager || by_reader) return;
    // A message above MPI's eager limit moves only while this process polls MPI once the peer matched it.
    // The posting thread runs now, so it polls its own sends for up to kOwnProgress (on a loaded machine
    // a poller that must first be scheduled costs a time slice, milliseconds); what is left then goes to
    // the polling thread (woken), so no post blocks longer on a dead or stopped peer.
    const auto until = mpi_impl::Clock::now() + kOwnProgress;
    for (int k = 0;; ++k) {
      int done = 0;
      MPI_Testall(static_cast<int>(mine.size()), mine.data(), &done, MPI_STATUSES_IGNORE);
      if (done) {
        // A send MPI could not start at once leaves during a later poll: ring again now that it is out
        // (a peer that woke at the first ring, found nothing and slept again would miss it).
        ring(dest);
        return;
      }
      if ((k & 63) == 63 && mpi_impl::Clock::now() > until) break;
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    }
    {
      std::lock_guard<std::mutex> g(send_mu_);
      for (MPI_Request r : mine)
        if (r != MPI_REQUEST_NULL) out_.push_back(Out{r, keep, dest, false});
    }
    ring(rank_);
  }

  /// Wakes `r`'s idle_wait when it sleeps and no other thread of `r` polls (that one reads the message).
  void ring(int r) {
    Doorbell* b = bells_[r];
    if (b && b->sleeping.load(std::memory_order_seq_cst) && b->pollers.load(std::memory_order_seq_cst) == 0) wake(b);
  }
  static void wake(Doorbell* b) {
    b->ring.fetch_add(1, std::memory_order_seq_cst);
    futex_wake(&b->ring);
  }

  void polling(bool on) override {
    Doorbell* mine = bells_[rank_];
    if (!mine) return;
    if (on) {
      mine->pollers.fetch_add(1, std::memory_order_seq_cst);
      return;
    }
    if (mine->pollers.fetch_sub(1, std::memory_order_seq_cst) != 1 || !mine->sleeping.load(std::memory_order_seq_cst)) return;
    // The last poller leaves while the idle_wait thread sleeps: a poster that saw it polling did not ring,
    // and its message, out before that look, is visible to this probe; sends left to progress wake it too.
    int flag = 0;
    {
      std::lock_guard<std::mutex> r(ring_mu_);  // the sleeper holds it for a look at most
      flag = head_ready_locked();
    }
    if (!flag) {
      std::lock_guard<std::mutex> g(send_mu_);
      flag = progress_pending_locked() > 0;
    }
    if (flag) wake(mine);
  }

  void wake_idle() override {
    Doorbell* mine = bells_[rank_];
    if (mine && mine->sleeping.load(std::memory_order_seq_cst)) wake(mine);
  }

  void idle_wait(std::chrono::microseconds timeout) override {
    Doorbell* mine = bells_[rank_];
    if (!mine) {
      std::this_thread::sleep_for(timeout);
      return;
    }
    mine->sleeping.store(1, std::memory_order_seq_cst);
    std::atomic_thread_fence(std::memory_order_seq_cst);  // before the looks below (a ring's head is a plain load)
    const uint32_t seen = mine->ring.load(std::memory_order_seq_cst);
    int flag = 0;
    if (mine->pollers.load(std::memory_order_seq_cst) == 0) {
      // Posted before we slept? Not asked while another thread polls (a waiter for its reply): that one
      // reads what is there, and its polling(false) looks again and wakes us. Up to 2026-11-28 a head
      // there (the waiter's reply, about to be read) sent this thread back to poll at once: in a loop of
      // 4 KB requests between 2 ranks of a node the caller's lane thread took 26% of a core racing its
      // waiter for the reply (1,300-1,500 preemptions a second), against 2% since; raw MPI time / the
      // lane's went from 0.31-0.39 to 0.41-0.54 (5 alternated runs each, single copy off).
      std::unique_lock<std::mutex> r(ring_mu_, std::try_to_lock);
      flag = r.owns_lock() && head_ready_locked();
    }
    if (!flag) {
      std::unique_lock<std::mutex> g(send_mu_, std::try_to_lock);
      if (g.owns_lock() && progress_pending_locked() > 0) flag = 1;  // a send to progress
    }
    if (!flag) futex_wait(&mine->ring, seen, timeout);
    mine->sleeping.store(0, std::memory_order_relaxed);
  }

  bool all_on_node() const override { return all_on_node_; }
  bool on_node(int rank) const override { return rank >= 0 && rank < size_ && on_node_[rank] != 0; }
  size_t peer_reads_under_way() const override { return reader_out_.load(std::memory_order_relaxed); }
  bool peer_reads(int dest) const override {
    return reader_copies_ && dest >= 0 && dest < size_ && dest != rank_ && bells_[dest] != nullptr;
  }
  int64_t eager_bytes() const override { return eager_bytes_; }
  int64_t slot_bytes() const override { return kSlotBytes; }
  int64_t ring_body_bytes(int dest) const override {
    const bool r = !out_rings_.empty() && dest >= 0 && dest < size_ && out_rings_[static_cast<size_t>(dest)];
    return r ? ring_body_bytes_ : -1;
  }
  int64_t head_bytes(int dest) const override {
    const ShmRing* r = out_rings_.empty() || dest < 0 || dest >= size_ ? nullptr : out_rings_[static_cast<size_t>(dest)].get();
    return r ? static_cast<int64_t>(r->max_record()) : eager_bytes_;
  }

  std::optional<Incoming> poll() override {
    {
      std::unique_lock<std::mutex> g(send_mu_, std::try_to_lock);
      if (g.owns_lock() && (!out_.empty() || overflow_n_ > 0)) test_sends_locked();
    }
    std::lock_guard<std::mutex> r(ring_mu_);
    release_locked();
    // The rings first, from the one after the last read (no sender starves the others), then MPI's heads
    // (from other nodes, or from every rank when there are no rings).
    for (size_t k = 0; k < in_rings_.size(); ++k) {
      const size_t i = (next_ring_ + k) % in_rings_.size();
      InRing& ir = in_rings_[i];
      if (!ir.broken.empty()) continue;
      uint32_t kind = 0;
      std::string_view rec;
      if (!peek_ring(ir, &kind, &rec)) continue;
      next_ring_ = i + 1;
      popped_ = static_cast<int>(i);
      Incoming in;
      in.source = ir.source;
      if (kind == kRingHead) {
        in.head = rec;
        return in;
      }
      if (kind == kRingHeadB) {  // its bodies follow in the ring: the head is copied out, its record freed
        ring_head_.assign(rec.data(), rec.size());
        ir.ring.pop();
        popped_ = -1;
        ring_bodies_from_ = static_cast<int>(i);
        in.head = ring_head_;
        return in;
      }
      if (kind != kRingAnnounce) {
        // A body's piece nobody asked for (its head was dropped above this layer without its bodies being
        // skipped): freed, so that the ring goes on (a body in the arena: its pages too).
        if (kind == kRingBodyAt) {
          if (auto r = arena_record(i, rec)) arena_in_[i]->freed()[r->page].store(1, std::memory_order_release);
        }
        ir.ring.pop();
        popped_ = -1;
        throw CommError("[message_lane] a record of kind " + std::to_string(kind) + " in the ring from rank " +
                        std::to_string(ir.source) + " where a head was due (dropped)");
      }
      in.head = big_head(in.source);
      return in;
    }
    if (!mpi_heads_ || !mpi_head_ready_locked()) return std::nullopt;
    const int i = static_cast<int>(next_slot_);
    Slot& sl = slots_[i];
    next_slot_ = (next_slot_ + 1) % slots_.size();
    repost_ = i;
    if (sl.rc != MPI_SUCCESS) throw CommError("[message_lane] receiving a head failed: " + mpi_error_string(sl.rc));
    int n = 0;
    MPI_Get_count(&sl.st, MPI_BYTE, &n);
    Incoming in;
    in.source = sl.st.MPI_SOURCE;
    if (n > 0) {
      in.head = std::string_view(sl.buf.get(), static_cast<size_t>(n));
      return in;
    }
    // An empty head announces a large one on kBigHeadTag.
    in.head = big_head(in.source);
    return in;
  }

  void release_head() override {
    std::lock_guard<std::mutex> r(ring_mu_);
    release_locked();
  }

  Tensor recv_body(int source, ScalarType dtype, const std::vector<int64_t>& shape,
                   std::chrono::milliseconds timeout) override {
    int64_t numel = 1;
    for (int64_t d : shape) numel *= d;  // the caller checked the shape against its bound
    const int64_t n = numel * static_cast<int64_t>(element_size(dtype));
    const auto deadline = mpi_impl::Clock::now() + timeout;
    if (InRing* ir = ring_bodies_of(source, n)) {
      if (!arena_in_.empty()) {  // in the arena when the sender found room there: the tensor stays in it
        uint32_t kind = 0;
        std::string_view rec;
        wait_record(*ir, deadline, timeout, &kind, &rec);
        if (kind == kRingBodyAt) return arena_tensor(*ir, rec, dtype, shape, static_cast<size_t>(n));
      }
      Tensor t = empty(shape, TensorOptions().dtype(dtype));
      ring_body(*ir, static_cast<char*>(t.data_ptr()), static_cast<size_t>(n), deadline, timeout);
      return t;
    }
    // A receive posted for the announced size, not a probe for the message first: a matched probe of a
    // message above the eager limit, then its receive, took 2-3 us longer than a posted receive at 64 KB
    // (Open MPI 4.1, shared memory). A message of another size is consumed all the same, then refused.
    Tensor t = empty(shape, TensorOptions().dtype(dtype));
    char* p = static_cast<char*>(t.data_ptr());
    int64_t off = 0;
    do {
      const int64_t want = std::min(kChunk, n - off);
      MPI_Request req = MPI_REQUEST_NULL;
      int rc = MPI_Irecv(p + off, static_cast<int>(want), MPI_BYTE, source, kBodyTag, comm_, &req);
      if (rc != MPI_SUCCESS) throw CommError("[message_lane] MPI_Irecv of a body failed: " + mpi_error_string(rc));
      MPI_Status st;
      for (int spins = 0;; ++spins) {
        int done = 0;
        rc = MPI_Test(&req, &done, &st);
        if (rc != MPI_SUCCESS || done) break;
        const bool stop = aborted_.load();
        if (stop || ((spins & 63) == 63 && mpi_impl::Clock::now() > deadline)) {
          abandon(req, t);
          if (stop) throw CommError("[message_lane] stopped while a body from rank " + std::to_string(source) + " was awaited");
          throw CommError("[message_lane] a body from rank " + std::to_string(source) + " did not arrive within " +
                          std::to_string(timeout.count()) + " ms");
        }
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();  // no sched_yield: on a loaded machine it gives the core away for a time slice
#endif
      }
      int got = 0;
      if (rc == MPI_SUCCESS) MPI_Get_count(&st, MPI_BYTE, &got);
      int err_class = MPI_SUCCESS;
      if (rc != MPI_SUCCESS) MPI_Error_class(rc == MPI_ERR_IN_STATUS ? st.MPI_ERROR : rc, &err_class);
      if (err_class == MPI_ERR_TRUNCATE || (rc == MPI_SUCCESS && got != want)) {
        throw CommError("[message_lane] a body from rank " + std::to_string(source) + " holds " +
                        (rc == MPI_SUCCESS ? std::to_string(got) : "more than " + std::to_string(want)) + " bytes where " +
                        std::to_string(want) + " were announced");
      }
      if (rc != MPI_SUCCESS) throw CommError("[message_lane] receiving a body failed: " + mpi_error_string(rc));
      off += want;
    } while (off < n);
    return t;
  }

  void skip_body(int source, int64_t nbytes, std::chrono::milliseconds timeout) override {
    const auto deadline = mpi_impl::Clock::now() + timeout;
    if (InRing* ir = ring_bodies_of(source, nbytes)) {
      try {
        ring_body(*ir, nullptr, static_cast<size_t>(nbytes), deadline, timeout);
      } catch (const CommError& e) {
        if (std::string(e.what()).find("were announced") == std::string::npos) throw;  // consumed all the same
      }
      return;
    }
    int64_t off = 0;
    do {
      MPI_Message msg;
      MPI_Status st;
      int got = wait_probe(source, kBodyTag, "a body from rank " + std::to_string(source), deadline,
                           std::to_string(timeout.count()) + " ms", &msg, &st);
      std::vector<char> sink(static_cast<size_t>(std::max(got, 0)));
      MPI_Mrecv(sink.data(), got, MPI_BYTE, &msg, MPI_STATUS_IGNORE);
      off += std::max(got, 1);
    } while (off < nbytes);
  }

  void abort() override { aborted_.store(true); }

  size_t pending_sends() override {
    // Not a blocking lock: the lane thread asks after each empty poll, and waiting here while a poster
    // sends (an MPI_Isend through TCP holds it for microseconds) cost a futex sleep and a wake-up per
    // message of a stream between hosts. A poster that holds it is under way: the count of the last look
    // stands (a send it leaves unfinished rings this rank's doorbell, see post()).
    std::unique_lock<std::mutex> g(send_mu_, std::try_to_lock);
    if (!g.owns_lock()) return pending_seen_.load(std::memory_order_relaxed);
    test_sends_locked();
    const size_t n = progress_pending_locked();
    pending_seen_.store(n, std::memory_order_relaxed);
    return n;
  }

 private:
  struct Keep {
    std::string head;
    std::vector<Tensor> bodies;
  };
  struct InRing {
    int source;
    ShmRing ring;
    // Why it is no longer read (its counters were found overwritten): one error, then it is skipped, so
    // that a poll reaches the rings after it (the error came again at every poll, before any other ring).
    std::string broken;
  };
  struct Waiting {  // a record that found no room in its ring yet: a head, an announcement, a body's piece
    std::shared_ptr<Keep> keep;
    uint32_t kind;
    int body = -1;  // the piece's body, of keep->bodies
    size_t off = 0, len = 0;
  };
  /// A receive posted ahead for a head (the ring).
  struct Slot {
    std::unique_ptr<char[]> buf;
    MPI_Request req = MPI_REQUEST_NULL;
    bool done = false;  // completed (st, rc), not yet handed out
    int rc = MPI_SUCCESS;
    MPI_Status st{};
  };

  void post_slot(Slot& sl) {
    sl.done = false;
    sl.rc = MPI_Irecv(sl.buf.get(), static_cast<int>(kSlotBytes), MPI_BYTE, MPI_ANY_SOURCE, kHeadTag, comm_, &sl.req);
    if (sl.rc != MPI_SUCCESS) {  // handed out as an error by poll()
      sl.req = MPI_REQUEST_NULL;
      sl.done = true;
    }
  }

  /// Under ring_mu_: the head handed out by the last poll is done with: its receive goes again, or its
  /// record in a ring is freed.
  void release_locked() {
    if (repost_ >= 0) {
      post_slot(slots_[repost_]);
      repost_ = -1;
    }
    if (popped_ >= 0) {
      in_rings_[popped_].ring.pop();
      popped_ = -1;
    }
    ring_bodies_from_ = -1;
  }

  /// The large head `source` announced (on kBigHeadTag, posted right after the announcement), received
  /// into big_head_.
  std::string_view big_head(int source) {
    MPI_Message msg;
    MPI_Status st;
    const int n = wait_probe(source, kBigHeadTag, "a large head announced by rank " + std::to_string(source),
                             mpi_impl::Clock::now() + kBigHeadWait,
                             std::to_string(std::chrono::duration_cast<std::chrono::seconds>(kBigHeadWait).count()) + " s", &msg, &st);
    big_head_.resize(static_cast<size_t>(n));
    int rc = MPI_Mrecv(big_head_.data(), n, MPI_BYTE, &msg, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) throw CommError("[message_lane] MPI_Mrecv of a large head failed: " + mpi_error_string(rc));
    return big_head_;
  }

  /// Under ring_mu_: whether a head is there, in a ring or by MPI.
  bool head_ready_locked() {
    for (const InRing& ir : in_rings_)
      if (ir.ring.ready()) return true;
    return mpi_heads_ && mpi_head_ready_locked();
  }

  /// Under ring_mu_: whether the oldest head receive completed (tested once, remembered until poll()
  /// hands it out).
  bool mpi_head_ready_locked() {
    Slot& sl = slots_[next_slot_];
    if (sl.done) return true;
    if (sl.req == MPI_REQUEST_NULL) return false;  // not posted again yet (poll does)
    int flag = 0;
    const int rc = MPI_Test(&sl.req, &flag, &sl.st);
    if (rc != MPI_SUCCESS) {
      sl.rc = rc;
      sl.done = true;
    } else if (flag) {
      sl.rc = MPI_SUCCESS;
      sl.done = true;
    }
    return sl.done;
  }

  /// The ring's receives cancelled (the destructor); false when one could not be within 100 ms (a
  /// message landing in it: the buffers are kept for good, and the communicator is not freed).
  bool cancel_slots() {
    std::lock_guard<std::mutex> r(ring_mu_);
    bool clean = true;
    for (Slot& sl : slots_) {
      if (sl.req == MPI_REQUEST_NULL || cancelled(sl.req)) continue;
      clean = false;
      sl.buf.release();  // MPI may still write into it
    }
    return clean;
  }

  /// Cancels receive `req` and waits up to 100 ms for it to end (cancelled, or completed after all); false
  /// when it has not (a message may be landing in its buffer).
  static bool cancelled(MPI_Request& req) {
    MPI_Cancel(&req);
    const auto until = mpi_impl::Clock::now() + std::chrono::milliseconds(100);
    for (int spins = 0;; ++spins) {
      int done = 0;
      if (MPI_Test(&req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS || done) return true;
      if ((spins & 63) == 63 && mpi_impl::Clock::now() > until) return false;
    }
  }
  struct Out {
    MPI_Request req;
    std::shared_ptr<Keep> keep;
    int dest;
    bool eager;  // needs no polling of ours to arrive (post): within the eager limit, or by_reader
    bool by_reader = false;  // above the eager limit, read by the peer (post's window)
  };

  void isend(std::vector<MPI_Request>& mine, const char* p, int64_t n, int dest, int tag) {
    MPI_Request r;
    int rc = MPI_Isend(p, static_cast<int>(n), MPI_BYTE, dest, tag, comm_, &r);
    if (rc != MPI_SUCCESS) throw CommError("[message_lane] MPI_Isend to rank " + std::to_string(dest) + " failed: " + mpi_error_string(rc));
    mine.push_back(r);
  }

  /// The rings (collective over `node`, after the doorbells): each rank's segment of a second shared
  /// window holds a ring from every other rank of the node (node rank j's at j * ShmRing::bytes(cap)).
  /// Every rank of the node uses them or none does (MPI_Allreduce of whether each wants and got them).
  void make_rings(MPI_Comm node, int nsize, const std::vector<int>& wranks) {
    int me = -1;
    for (int i = 0; i < nsize; ++i) me = wranks[i] == rank_ ? i : me;
    int ok = !env_flag_off("TROUPE_LANE_SHM") && nsize >= 2 && nsize <= kRingMaxRanks && me >= 0;
    int all = 0;
    if (MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, node) != MPI_SUCCESS || !all) return;
    size_t cap = kRingBytes;
    while (cap > (size_t{64} << 10) && cap * static_cast<size_t>(nsize) > kRingBytesPerRank) cap >>= 1;
    const size_t stride = ShmRing::bytes(cap);
    void* base = nullptr;
    ok = MPI_Win_allocate_shared(static_cast<MPI_Aint>(stride * static_cast<size_t>(nsize) + 64), 1, MPI_INFO_NULL, node, &base,
                                 &ring_win_) == MPI_SUCCESS && base != nullptr;
    std::vector<char*> seg(static_cast<size_t>(nsize), nullptr);
    for (int j = 0; ok && j < nsize; ++j) {
      MPI_Aint sz = 0;
      int disp = 0;
      void* p = nullptr;
      ok = MPI_Win_shared_query(ring_win_, j, &sz, &disp, &p) == MPI_SUCCESS && p &&
           sz >= static_cast<MPI_Aint>(stride * static_cast<size_t>(nsize) + 64);
      // Open MPI's segments start 8 bytes into a cache line: the rings start at the next line (the same
      // offset in every process: the mappings are page-aligned).
      if (ok) seg[static_cast<size_t>(j)] = static_cast<char*>(p) + (64 - reinterpret_cast<uintptr_t>(p) % 64) % 64;
    }
    if (ok) {  // this rank's rings in: constructed before the barrier below, as the doorbells
      for (int j = 0; j < nsize; ++j)
        if (j != me) ShmRing::init(seg[static_cast<size_t>(me)] + stride * static_cast<size_t>(j), cap);
    }
    if (MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, node) != MPI_SUCCESS || !all) return;  // (the window stays)
    out_rings_.resize(static_cast<size_t>(size_));
    overflow_.resize(static_cast<size_t>(size_));
    for (int j = 0; j < nsize; ++j) {
      if (j == me) continue;
      out_rings_[static_cast<size_t>(wranks[j])] =
          std::make_unique<ShmRing>(seg[static_cast<size_t>(j)] + stride * static_cast<size_t>(me), cap);
      in_rings_.push_back(InRing{wranks[j], ShmRing(seg[static_cast<size_t>(me)] + stride * static_cast<size_t>(j), cap), {}});
    }
    mpi_heads_ = !all_on_node_;
    ring_body_bytes_ = static_cast<int64_t>(cap / 4);
    ring_piece_ = std::min(kRingPiece, out_rings_[static_cast<size_t>(wranks[me == 0 ? 1 : 0])]->max_record() & ~size_t{7});
    make_arenas(node, nsize, me, wranks);
  }

  /// The arenas (collective over `node`, after the rings): each rank creates a shared-memory object for
  /// the bodies from each other rank of the node (named by a token of node rank 0's, the two node ranks),
  /// maps it, then maps those of the others to it; once all are mapped each unlinks its own (the mappings
  /// stay; nothing is left in /dev/shm). Every rank of the node uses them or none does (TROUPE_LANE_ARENA=0
  /// on any rank, a node of more than kArenaMaxRanks ranks, or /dev/shm short of room: MPI_Allreduce).
  void make_arenas(MPI_Comm node, int nsize, int me, const std::vector<int>& wranks) {
    int ok = !env_flag_off("TROUPE_LANE_ARENA") && nsize <= kArenaMaxRanks;
    int all = 0;
    if (MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, node) != MPI_SUCCESS || !all) return;
    size_t bytes = kArenaBytes;
    while (bytes > (size_t{1} << 20) && bytes * static_cast<size_t>(nsize - 1) > kArenaBytesPerRank) bytes >>= 1;
    const size_t pages = bytes / kArenaPage;
    // The node's arenas take at most an eighth of /dev/shm's free room (a container's is often 64 MB, and
    // Open MPI's own shared-memory segments, made later, must find theirs).
    struct statvfs fs {};
    const double node_bytes = static_cast<double>(ArenaMap::file_bytes(pages)) * nsize * (nsize - 1);
    ok = statvfs("/dev/shm", &fs) == 0 && node_bytes * 8 <= static_cast<double>(fs.f_bavail) * static_cast<double>(fs.f_frsize);
    if (MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, node) != MPI_SUCCESS || !all) return;
    unsigned long long token = 0;
    if (me == 0) token = (static_cast<unsigned long long>(std::random_device{}()) << 32) ^ static_cast<unsigned long long>(getpid()) ^
                         static_cast<unsigned long long>(std::chrono::steady_clock::now().time_since_epoch().count());
    MPI_Bcast(&token, 1, MPI_UNSIGNED_LONG_LONG, 0, node);
    char tok[32];
    std::snprintf(tok, sizeof tok, "%llx", token);
    auto name = [&](int to, int from) { return "/troupe-lane-" + std::string(tok) + "-" + std::to_string(to) + "-" + std::to_string(from); };
    std::vector<std::shared_ptr<ArenaMap>> in(static_cast<size_t>(nsize)), out(static_cast<size_t>(nsize));
    for (int j = 0; j < nsize && ok; ++j)
      if (j != me) ok = (in[static_cast<size_t>(j)] = ArenaMap::open(name(me, j), pages, true)) != nullptr;
    if (MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, node) == MPI_SUCCESS && all) {
      for (int j = 0; j < nsize && ok; ++j)
        if (j != me) ok = (out[static_cast<size_t>(j)] = ArenaMap::open(name(j, me), pages, false)) != nullptr;
      if (MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, node) != MPI_SUCCESS) all = 0;
    }
    for (int j = 0; j < nsize; ++j)
      if (j != me && in[static_cast<size_t>(j)]) shm_unlink(name(me, j).c_str());
    if (!all) return;  // (the maps go with `in` and `out`)
    arena_out_.resize(static_cast<size_t>(size_));
    for (int j = 0; j < nsize; ++j) {
      if (j == me) continue;
      ArenaOut& a = arena_out_[static_cast<size_t>(wranks[j])];
      a.map = out[static_cast<size_t>(j)];
      a.run.assign(pages, 0);
      a.used.assign(pages, 0);
      arena_in_.push_back(in[static_cast<size_t>(j)]);  // in in_rings_'s order (make_rings)
    }
  }

  /// Whether `t`'s memory lies in an arena this rank receives into (a body it received with no copy).
  bool in_arena(const Tensor& t) const override {
    if (!t.defined() || !t.is_cpu() || arena_in_.empty()) return false;
    const char* p = static_cast<const char*>(t.data_ptr());
    for (const auto& m : arena_in_)
      if (m && p >= m->base && p < m->base + m->pages * kArenaPage) return true;
    return false;
  }

  /// The ring a body of `n` bytes from `source` comes in: the one the last head came from when its
  /// bodies follow there (kRingHeadB) and it is small enough; null: by MPI.
  InRing* ring_bodies_of(int source, int64_t n) {
    if (ring_bodies_from_ < 0 || n > ring_body_bytes_) return nullptr;
    InRing& ir = in_rings_[static_cast<size_t>(ring_bodies_from_)];
    return ir.source == source ? &ir : nullptr;
  }

  /// Whether body `t` travels in the ring (to a rank with rings, after a head in the ring).
  bool in_ring(const Tensor& t) const { return static_cast<int64_t>(t.nbytes()) <= ring_body_bytes_; }

  /// Under send_mu_: puts record `w` (a head, an announcement or a piece of a body) in `ring` to `dest`,
  /// or behind what already waits for room there (flush_overflow_locked sends it on).
  void ring_push_locked(int dest, ShmRing& ring, Waiting w) {
    auto& q = overflow_[static_cast<size_t>(dest)];
    if ((q.empty() || flush_dest_locked(static_cast<size_t>(dest))) && push_record(ring, w)) return;
    q.push_back(std::move(w));
    ++overflow_n_;
  }
  static bool push_record(ShmRing& ring, const Waiting& w) {
    if (w.kind == kRingBodyAt) {  // off: the first page, len: the body's bytes
      const ArenaRecord r{static_cast<uint32_t>(w.off), static_cast<uint32_t>((w.len + kArenaPage - 1) / kArenaPage),
                          static_cast<uint64_t>(w.len)};
      return ring.push(kRingBodyAt, reinterpret_cast<const char*>(&r), sizeof r);
    }
    if (w.body >= 0) {
      return ring.push(w.kind, static_cast<const char*>(w.keep->bodies[static_cast<size_t>(w.body)].data_ptr()) + w.off, w.len);
    }
    return ring.push(w.kind, w.keep->head.data(), w.kind == kRingAnnounce ? 0 : w.keep->head.size());
  }

  /// Under send_mu_: moves the records that waited for room into their rings, in order, while room is
  /// there; rings each destination it moved one to.
  void flush_overflow_locked() {
    for (size_t d = 0; d < overflow_.size() && overflow_n_ > 0; ++d) flush_dest_locked(d);
  }
  /// ... those to `d` alone; true when none is left waiting.
  bool flush_dest_locked(size_t d) {
    auto& q = overflow_[d];
    bool moved = false;
    while (!q.empty() && push_record(*out_rings_[d], q.front())) {
      q.pop_front();
      --overflow_n_;
      moved = true;
    }
    if (moved) ring(static_cast<int>(d));
    return q.empty();
  }

  /// After a post whose body pieces went in the ring to `dest`: what found no room waits there, and this
  /// thread, which runs now, moves it as the peer frees room, for at most kOwnProgress (then the polling
  /// thread does, as for a send above the eager limit).
  void own_ring_progress(int dest) {
    const auto until = mpi_impl::Clock::now() + kOwnProgress;
    for (int k = 0;; ++k) {
      {
        std::lock_guard<std::mutex> g(send_mu_);
        if (flush_dest_locked(static_cast<size_t>(dest))) return;
      }
      if ((k & 63) == 63 && mpi_impl::Clock::now() > until) break;
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    }
    ring(rank_);  // the polling thread goes on with it
  }

  /// The next record of `ir` (ShmRing::peek), or false. A ring whose counters or records were found
  /// overwritten is broken from then on: its error, naming the rank, is thrown once by poll(), which then
  /// skips it (see InRing::broken), and by every later read of a body from it.
  bool peek_ring(InRing& ir, uint32_t* kind, std::string_view* rec) {
    const auto fail = [&] {
      return CommError("[message_lane] the ring from rank " + std::to_string(ir.source) + ": " + ir.broken +
                       " (nothing more is read from it)");
    };
    if (!ir.broken.empty()) throw fail();
    try {
      return ir.ring.peek(kind, rec);
    } catch (const std::exception& e) {
      ir.broken = e.what();
    }
    throw fail();
  }

  /// Waits for the next record of `ir` (a body's): moves this process's own waiting records meanwhile,
  /// fails on abort() or at the deadline.
  void wait_record(InRing& ir, mpi_impl::Clock::time_point deadline, std::chrono::milliseconds timeout, uint32_t* kind,
                   std::string_view* rec) {
    auto from = [&] { return "a body from rank " + std::to_string(ir.source); };
    for (int spins = 0;; ++spins) {
      if (peek_ring(ir, kind, rec)) return;
      if (aborted_.load()) throw CommError("[message_lane] stopped while " + from() + " was awaited");
      if ((spins & 63) == 63) {
        if (mpi_impl::Clock::now() > deadline) {
          throw CommError("[message_lane] " + from() + " did not arrive within " + std::to_string(timeout.count()) + " ms");
        }
        // The sender may be waiting the same way for this process's pieces that found no room in its
        // ring: move them meanwhile (else two ranks sending each other bodies wait for each other until
        // the timeout).
        std::unique_lock<std::mutex> g(send_mu_, std::try_to_lock);
        if (g.owns_lock() && overflow_n_ > 0) flush_overflow_locked();
      }
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();  // no sched_yield: see recv_body
#endif
    }
  }

  /// kRingBodyAt record `rec` from in_rings_[idx], checked against that ring's arena; nullopt when it is
  /// malformed (another size, pages outside the arena, more bytes than its pages).
  std::optional<ArenaRecord> arena_record(size_t idx, std::string_view rec) const {
    ArenaRecord r{};
    if (idx >= arena_in_.size() || rec.size() != sizeof r) return std::nullopt;
    std::memcpy(&r, rec.data(), sizeof r);
    if (r.pages == 0 || static_cast<size_t>(r.page) + r.pages > arena_in_[idx]->pages ||
        r.bytes > static_cast<uint64_t>(r.pages) * kArenaPage) {
      return std::nullopt;
    }
    return r;
  }

  /// The body of `n` bytes whose kRingBodyAt record `rec` is next in `ir` (the ring of in_rings_'s entry
  /// ring_bodies_from_): a tensor of `dtype` and `shape` over its pages of the arena, which it frees for
  /// the sender when it goes; the record popped. A record of another size frees its pages and is refused
  /// as a body of another size is.
  Tensor arena_tensor(InRing& ir, std::string_view rec, ScalarType dtype, const std::vector<int64_t>& shape, size_t n) {
    const size_t idx = static_cast<size_t>(&ir - in_rings_.data());
    const std::optional<ArenaRecord> got = arena_record(idx, rec);
    const size_t rec_bytes = rec.size();
    ir.ring.pop();
    if (!got) {
      throw CommError("[message_lane] a malformed arena record (" + std::to_string(rec_bytes) + " bytes) in the ring from rank " +
                      std::to_string(ir.source));
    }
    const ArenaRecord r = *got;
    const std::shared_ptr<ArenaMap> m = arena_in_[idx];
    std::atomic<uint32_t>* flag = &m->freed()[r.page];
    if (r.bytes != n) {
      flag->store(1, std::memory_order_release);
      throw CommError("[message_lane] a body from rank " + std::to_string(ir.source) + " holds " +
                      (r.bytes > n ? "more than " + std::to_string(n) : std::to_string(r.bytes)) + " bytes where " + std::to_string(n) +
                      " were announced");  // (MPI's texts: a receive cannot tell how much more came)
    }
    return from_blob(m->base + static_cast<size_t>(r.page) * kArenaPage, shape, TensorOptions().dtype(dtype),
                     [m, flag](void*) { flag->store(1, std::memory_order_release); });
  }

  /// A body from the ring of `ir` (the message whose head poll() handed out last): `n` bytes in pieces
  /// into `dst` (null: dropped); a body of another size is consumed and refused as MPI's are.
  void ring_body(InRing& ir, char* dst, size_t n, mpi_impl::Clock::time_point deadline, std::chrono::milliseconds timeout) {
    const std::string from = "a body from rank " + std::to_string(ir.source);
    size_t off = 0;
    for (;;) {
      uint32_t kind = 0;
      std::string_view rec;
      wait_record(ir, deadline, timeout, &kind, &rec);
      if (kind == kRingBodyAt && off == 0) {  // in the arena (skip_body; recv_body takes it in place first)
        Tensor t = arena_tensor(ir, rec, kUInt8, {static_cast<int64_t>(n)}, n);
        if (dst && n) std::memcpy(dst, t.data_ptr(), n);
        return;
      }
      if (kind != kRingBody && kind != kRingBodyEnd) {
        throw CommError("[message_lane] a record of kind " + std::to_string(kind) + " in the ring from rank " +
                        std::to_string(ir.source) + " where " + from + " was due");
      }
      const size_t want = std::min(ring_piece_, n - std::min(n, off));
      const bool end = kind == kRingBodyEnd;
      if (rec.size() != want || (end != (off + want >= n))) {
        // Another size than announced: the rest of the sender's body is consumed, then refused.
        const size_t got = off + rec.size();
        bool last = end;
        ir.ring.pop();
        while (!last) {
          for (int spins = 0;; ++spins) {
            if (peek_ring(ir, &kind, &rec)) break;
            if (aborted_.load() || ((spins & 63) == 63 && mpi_impl::Clock::now() > deadline)) {
              throw CommError("[message_lane] " + from + " ended neither as announced nor within " + std::to_string(timeout.count()) + " ms");
            }
          }
          last = kind != kRingBody;
          ir.ring.pop();
        }
        throw CommError("[message_lane] " + from + " holds " +
                        (got > n ? "more than " + std::to_string(n) : std::to_string(got)) + " bytes where " +
                        std::to_string(n) + " were announced");
      }
      if (dst && want) std::memcpy(dst + off, rec.data(), want);
      ir.ring.pop();
      off += want;
      if (end) return;
    }
  }

  /// Retires the sends that completed (one MPI_Testsome: MPI polls its transports once, not once a send).
  void test_sends_locked() {
    if (overflow_n_ > 0) flush_overflow_locked();
    if (out_.empty()) return;
    reqs_.resize(out_.size());
    idx_.resize(out_.size());
    for (size_t i = 0; i < out_.size(); ++i) reqs_[i] = out_[i].req;
    int ndone = 0;
    if (MPI_Testsome(static_cast<int>(reqs_.size()), reqs_.data(), &ndone, idx_.data(), MPI_STATUSES_IGNORE) != MPI_SUCCESS ||
        ndone == MPI_UNDEFINED || ndone == 0) {
      return;
    }
    size_t k = 0;
    for (size_t i = 0; i < out_.size(); ++i) {
      if (reqs_[i] == MPI_REQUEST_NULL) {  // completed (and freed by MPI_Testsome)
        if (!out_[i].eager) ring(out_[i].dest);  // it is out now (see post)
        if (out_[i].by_reader) reader_out_.fetch_sub(1, std::memory_order_relaxed);
        continue;
      }
      if (k != i) out_[k] = std::move(out_[i]);
      ++k;
    }
    out_.resize(k);
  }

  /// A body's receive given up (timeout, abort): cancelled; when MPI cannot say at once that the cancel
  /// took (the message may be landing), the receive and its tensor are kept for good, as are sends a
  /// dead peer never took (the destructor).
  static void abandon(MPI_Request& req, const Tensor& t) {
    if (cancelled(req)) return;
    static std::mutex leak_mu;
    static std::vector<std::pair<MPI_Request, Tensor>> leaked;
    std::lock_guard<std::mutex> l(leak_mu);
    leaked.emplace_back(req, t);
  }

  /// Sends not complete that need this process's polling to move (not the eager ones).
  size_t progress_pending_locked() const {
    size_t n = overflow_n_;  // heads waiting for room in a ring: this process must look again
    for (const Out& o : out_) n += o.eager ? 0 : 1;
    return n;
  }

  /// Probes for the next message from `source` on `tag` (`what`, in errors) until it is there (its byte
  /// count), abort(), or the deadline (`limit`, in words).
  int wait_probe(int source, int tag, const std::string& what, mpi_impl::Clock::time_point deadline,
                 const std::string& limit, MPI_Message* msg, MPI_Status* st) {
    for (int spins = 0;; ++spins) {
      int flag = 0;
      int rc = MPI_Improbe(source, tag, comm_, &flag, msg, st);
      if (rc != MPI_SUCCESS) throw CommError("[message_lane] MPI_Improbe failed: " + mpi_error_string(rc));
      if (flag) {
        int n = 0;
        MPI_Get_count(st, MPI_BYTE, &n);
        return n;
      }
      if (aborted_.load()) throw CommError("[message_lane] stopped while " + what + " was awaited");
      if ((spins & 63) == 63 && mpi_impl::Clock::now() > deadline) {
        throw CommError("[message_lane] " + what + " did not arrive within " + limit);
      }
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();  // no sched_yield: on a loaded machine it gives the core away for a time slice
#endif
    }
  }

  MPI_Comm comm_;
  int rank_, size_;
  std::vector<Doorbell*> bells_;  // per world rank: its doorbell when on this node
  MPI_Win win_ = MPI_WIN_NULL;
  MPI_Comm node_ = MPI_COMM_NULL;
  bool all_on_node_ = false;
  std::vector<char> on_node_;  // per world rank: shares this node (MPI_COMM_TYPE_SHARED)
  std::mutex send_mu_;
  std::atomic<size_t> pending_seen_{0};  // pending_sends()'s last count (returned while a poster holds send_mu_)
  std::vector<Out> out_;  // posted, not yet complete
  std::vector<MPI_Request> reqs_;  // test_sends_locked's scratch
  std::vector<int> idx_;
  std::atomic<bool> aborted_{false};
  int64_t eager_bytes_ = eager_limit_bytes(MpiTSession());
  bool reader_copies_ = single_copy_by_reader(MpiTSession()) && !env_flag_off("TROUPE_LANE_READER_SENDS");
  std::atomic<size_t> reader_out_{0};  // out_'s by_reader pieces (updated under send_mu_)
  std::mutex ring_mu_;  // the head receives: poll(), and a look from idle_wait or polling(false)
  std::vector<Slot> slots_;
  size_t next_slot_ = 0;  // the oldest posted: messages fill the receives in posting order
  int repost_ = -1;        // handed out by the last poll(), posted again by the next
  std::string big_head_;  // the last large head handed out
  // The rings (make_rings): to each rank of this node (per world rank; empty without rings), and from each.
  MPI_Win ring_win_ = MPI_WIN_NULL;
  std::vector<std::unique_ptr<ShmRing>> out_rings_;  // under send_mu_
  std::vector<std::deque<Waiting>> overflow_;         // per destination, under send_mu_
  size_t overflow_n_ = 0;                             // all of overflow_'s (under send_mu_)
  std::vector<InRing> in_rings_;                      // under ring_mu_
  size_t next_ring_ = 0;  // the ring poll() looks at first
  int popped_ = -1;       // in_rings_'s record handed out by the last poll(), freed by the next
  int ring_bodies_from_ = -1;  // in_rings_'s head handed out by the last poll() had its bodies follow there
  std::string ring_head_;      // ... and that head, copied out (its record is freed for the bodies behind it)
  int64_t ring_body_bytes_ = -1;  // the largest body in the rings (a quarter of one; -1: no rings)
  size_t ring_piece_ = kRingPiece;  // a body's piece in the rings (less when a ring's record is smaller)
  std::vector<ArenaOut> arena_out_;                 // per world rank (empty without arenas), under send_mu_
  std::vector<std::shared_ptr<ArenaMap>> arena_in_;  // per in_rings_ entry (empty without arenas)
  bool mpi_heads_ = true;  // heads may come by MPI (false when every rank is on this node, with rings)
};

}  // namespace

namespace lane_testing {
bool overwrite_ring_counters(MessageLane& lane, int dest, uint64_t head, uint64_t tail) {
  auto* l = dynamic_cast<MpiLane*>(&lane);
  return l && l->overwrite_ring_counters(dest, head, tail);
}
}  // namespace lane_testing

std::shared_ptr<MessageLane> make_message_lane(const ProcessGroupPtr& world) {
  if (!world || world->backend() != "mpi" || !mpi_alive()) return nullptr;
  int wsize = 0, wrank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &wsize);
  MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
  if (wsize != world->size() || wrank != world->rank()) return nullptr;  // not the world group
  MPI_Comm comm = MPI_COMM_NULL;
  int rc = MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  if (rc != MPI_SUCCESS) throw CommError("[make_message_lane] MPI_Comm_dup failed: " + mpi_error_string(rc));
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  return std::make_shared<MpiLane>(comm, wrank, wsize);
}

}  // namespace troupe::comm
