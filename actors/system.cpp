// The process's CAF actor system (runtime.h): start (local or connected over the world group), stop,
// the router actor that completes requests (replies, dead peers, deadlines), the host actor that runs a
// troupe Actor's handlers, ActorRef and Runtime. The only translation unit besides payload.cpp that
// includes CAF.
#include <unistd.h>
#include <sched.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <new>
#include <optional>
#include <set>
#include <thread>
#include <unordered_map>
#include <utility>

#include <caf/io/all.hpp>

#include <troupe/actors/auth.h>
#include <troupe/actors/internal/caf_types.h>
#include <troupe/actors/internal/gate.h>
#include <troupe/util/env.h>
#include <troupe/actors/internal/groups.h>
#include <troupe/actors/internal/services.h>
#include <troupe/actors/runtime.h>
#include <troupe/actors/wire.h>
#include <troupe/comm/message_lane.h>
#include <troupe/tensor/autograd.h>
#include <troupe/tensor/ops.h>

namespace troupe::actors {
namespace detail {

namespace {
constexpr auto kTick = std::chrono::milliseconds(20);  // how often the router fails expired requests
// stop(): how long the actors of this process may take to end, per step (a handler that runs must return
// first) (TROUPE_ACTOR_STOP_S).
constexpr int64_t kStopWaitS = 10;
// The lane (Calls and Replies between the processes of an MPI job as MPI messages; see System::lane_call).
// A message's tensors are copied into its head while their bytes together stay within the lane's eager
// limit (MessageLane::eager_bytes) less kLaneHeadRoom for the head's other fields; the others travel as
// bodies of their own (sent from and received into the tensor's memory). TROUPE_ACTOR_LANE_INLINE_BYTES
// sets that budget. A head above MPI's eager limit goes by rendezvous and is copied twice, where a small
// head and a body do not (2026-11-28, --loop, quiet, 4 alternations, vader's eager limit 4 KB: 4 KB 11.6-
// 12.3 us a request as a body against 13.0-13.9 us in the head, 8 KB 12.2-12.4 against 14.2-15.2, 16 KB
// 12.6 against 18.4-19.3; at 1-3 KB the head is as fast or faster). Up to then 32 KB for every size, then
// 4 KB (any tensor below it in the head) until the budget followed the eager limit.
constexpr int64_t kLaneHeadRoom = 256;
// A poll of the lane reads at most 64 messages, and stops at the first Call it claimed to run on its
// thread, or at the reply its thread waits for (System::lane_poll_some).
// The lane thread polls (yielding the core between looks) for this long after the last message and while
// its sends are in flight (MPI moves a large message only while someone polls), then sleeps on its
// doorbell, which a rank of this node rings when it posts to this one; at most kLaneNapUs, or 200 us when
// some rank is on another node (it cannot ring) (TROUPE_ACTOR_LANE_SPIN_US, _NAP_US).
// 20 us until 2026-11-29, with kLaneWaitSpinUs 50: a loop of 4 KB requests between 2 ranks of one host
// (remote_bench --loop=300000, 2 cores) then fell into the slow phase (docs/actors-performance.md: a
// spin that ends before the next message, so every hop pays a futex wake-up of 30-60 us)
// in some runs, 3.9-13.1 us a request (median 5.0, 6 runs), against 3.3-5.0 (median 4.4) with both
// spins at 100 us and 3.0-6.7 (median 4.2) at 200 us, alternated in the same session; the split train
// step and the transfer table did not move beyond their noise.
constexpr int64_t kLaneSpinUs = 100;
constexpr int64_t kLaneNapUs = 2000;
// A rank of another node cannot ring the doorbell: a message from it waits for the end of a nap (200 us),
// and waking a sleeping thread on another core costs 30-80 us on this VM (a futex wake, median 43 us),
// against MPI's receive, which spins. So after a message from a rank of another node the lane thread keeps
// polling for this long while no waiter polls, and a thread waiting for a reply after a message to or
// from one (TROUPE_ACTOR_LANE_REMOTE_SPIN_US; 0: as on one node): a core of each side while such
// messages come, as MPI's own waits take. Between two test hosts (2026-11-28, 4 alternated runs each) a
// 4 KB request went from 0.34 ms to 0.035, 64 KB from 0.13 to 0.10. Tried and dropped: the lane thread
// polling after messages it sent as well (a third thread polling on 2 cores: 1% of 4 KB replies waited
// 1 ms, a time slice), and a doorbell over UDP for ranks of other nodes (a datagram beside each message
// after 10 us or 500 us without one; the lane thread then slept 2 ms at a time): 4 KB requests at 0.32
// and 0.55 of raw MPI against 0.61 and 0.59 without it in the same alternated runs.
constexpr int64_t kLaneRemoteSpinUs = 1000;
// While a thread of its process polls the lane for its reply (lane_wait), the lane thread of a process
// with peers on other nodes sleeps this long at a time instead of 200 us: it woke 3,700 times a second
// in a loop of 4 KB requests between two test hosts, each time taking a core from a polling thread of
// either host (the host's lane thread was preempted 3,600 times a second), for nothing (the waiter reads
// the replies). A waiter that stops polling before its reply came wakes it (the reply is then the lane
// thread's to read), and so does the last waiter to leave when Calls came from another node in the last
// kLaneRemoteCallsMs (so a process that serves them reads them as promptly as before); else a message
// from another node that comes right after may wait this long. The mean cycle of that loop went from
// 30.0-42.1 us to 24.4-29.9 (4 alternated runs each, trace; raw MPI 17.7-24.4); naps of 20 ms without
// the waiters' wake-ups had made it 260-1,100 us (TROUPE_ACTOR_LANE_POLLED_NAP_US).
constexpr int64_t kLanePolledNapUs = 2000;
constexpr int64_t kLaneRemoteCallsMs = 10;
// A thread waiting for a reply that comes on the lane polls it itself for at most this long before it
// sleeps (the lane thread then delivers the reply) (TROUPE_ACTOR_LANE_WAIT_SPIN_US; 50 us until
// 2026-11-29, see kLaneSpinUs).
constexpr int64_t kLaneWaitSpinUs = 100;
// ... and at most this long in all while a message this process posted is still being read by its peer
// (MessageLane::peer_reads_under_way; 64 MB take about 20 ms under CMA): the reply follows it.
constexpr auto kLaneReaderWaitSpin = std::chrono::milliseconds(100);
// Inline runs (TROUPE_ACTOR_LANE_RUN_INLINE_US=N; 0 turns them off): a Call the lane thread (or a polling
// waiter) reads for an idle actor that allows inline requests runs on that thread (no wake-up of the
// actor's thread) when that actor's last handler took at most N us; a longer one goes to the actor's
// thread, so that a long forward does not hold the process's other lane messages. On by default since
// 2026-11-28 (opt-in before: a helper's loaded runs had lost the CAF connection to rank 1 in 8 of 11 full
// remote_bench runs with it on; 0 of 29 full runs since, loaded and not; architecture.md, the lane).
constexpr int64_t kLaneRunInlineUs = 200;
// Which way a Call or Reply goes while the lane is on (measured by bench/remote_bench on 2 loaded cores):
// messages whose values weigh at most kLaneSmallBytes take the lane, and so does one with a tensor of at
// least kLaneBodyBytes (its big tensors as bodies); only one heavier than that made of smaller tensors
// goes by CAF. Up to 2026-11-27 kLaneSmallBytes was 3 KB (vader's eager limit) and 4 KB - 1 MB went by
// CAF, measured slower on the lane (0.33-0.64 ms against CAF's 0.17-0.26 ms); but in those runs the
// benchmark's rank 1 sat in a blocking MPI_Recv, which spins, beside its lane thread. Without it (load
// 10-11, same runs): 4 KB 0.105-0.108 ms on the lane against 0.120-0.139 by CAF, 64 KB 0.104-0.113 against
// 0.197-0.214 (TROUPE_ACTOR_LANE_SMALL_BYTES, TROUPE_ACTOR_LANE_BODY_BYTES).
constexpr int64_t kLaneSmallBytes = int64_t{1} << 20;
// To a rank of another node messages take the lane by the same rule as on one node (kLaneSmallBytes)
// unless TROUPE_ACTOR_LANE_REMOTE_BYTES=N is set: then only those with a tensor of N bytes or more (and
// one-way messages that fit in one eager head) take it, the rest go by CAF's connection. Up to 2026-11-28
// that was the default with N = 4 MB, then 1 MB: between two test hosts CAF had carried 4 KB - 64 KB
// faster than the lane. Those runs had both hosts' ranks on one core (Open MPI bound each host's first
// rank to core 0; tests/multihost/hosts.sh). Unbound, with the lane polling after traffic between nodes
// (kLaneRemoteSpinUs), the lane took 0.055 ms for a 4 KB request against CAF's 0.32, 0.10 against 0.31
// at 64 KB, 0.56 against 0.97 at 1 MB, 2.6 against 3.9 at 4 MB (scripts/remote_bench.sh --hosts).
constexpr int64_t kLaneRemoteBytes = 0;
constexpr int64_t kLaneBodyBytes = int64_t{1} << 20;
// A body announced by a head must arrive within this (its sender posted it right after the head).
constexpr auto kLaneBodyTimeout = std::chrono::seconds(30);

/// A whole-number tuning variable (>= `lo`): a bad value is an ActorError naming it (util/env.h).
int64_t env_int(const char* name, int64_t fallback, int64_t lo = 0) {
  try {
    return util::env_int(name, fallback, lo);
  } catch (const std::invalid_argument& e) {
    throw ActorError(std::string("[actors] ") + e.what());
  }
}
}  // namespace

class System;

namespace {
/// True when `v` holds an ActorRef (such values cross by CAF, which makes the proxies).
bool has_refs(const Value& v) {
  if (v.is<ActorRef>()) return true;
  if (!v.is<List>()) return false;
  for (const Value& x : v.as<List>())
    if (has_refs(x)) return true;
  return false;
}
bool has_refs(const List& l) {
  for (const Value& x : l)
    if (has_refs(x)) return true;
  return false;
}
/// What a message's values weigh on the wire, roughly (bytes), and its largest tensor.
void weigh(const Value& v, int64_t& total, int64_t& largest) {
  if (v.is<Tensor>()) {
    const Tensor& t = v.as<Tensor>();
    const int64_t n = t.defined() ? static_cast<int64_t>(t.nbytes()) : 0;
    total += n + 16 + 8 * (t.defined() ? t.dim() : 0);
    largest = std::max(largest, n);
  } else if (v.is<std::string>()) {
    total += static_cast<int64_t>(v.as<std::string>().size()) + 9;
  } else if (v.is<List>()) {
    total += 5;
    for (const Value& x : v.as<List>()) weigh(x, total, largest);
  } else {
    total += 9;
  }
}

/// Throws what wire::encode would (a Call sent by CAF must not fail inside CAF's serialiser).
void check_encodable(const List& l, int depth = 0) {
  if (depth > 32) throw ActorError("[actors] wire: lists nest deeper than 32");
  for (const Value& v : l) {
    if (v.is<List>()) check_encodable(v.as<List>(), depth + 1);
    else if (v.is<Tensor>() && v.as<Tensor>().defined() && v.as<Tensor>().dim() > 64)
      throw ActorError("[actors] wire: a tensor of more than 64 dimensions");
  }
}
}  // namespace

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

/// A lock for the few instructions a mailbox holds it (a push, a swap): spins, then yields the core, never
/// sleeps in the kernel (a std::mutex made the sender and the draining actor wake each other with futex
/// calls at every contended push).
class SpinLock {
 public:
  void lock() {
    for (int spins = 0; flag_.exchange(true, std::memory_order_acquire); ++spins) {
      while (flag_.load(std::memory_order_relaxed)) {
        if (++spins < 64) cpu_relax();
        else std::this_thread::yield();
      }
    }
  }
  void unlock() { flag_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> flag_{false};
};

/// One queued message of an actor in this process: a Call, whom to answer when it came from another
/// process, or the stop marker ActorRef::stop() queues (so it lands after what was sent before it).
struct Item {
  Call call;
  caf::strong_actor_ptr reply_to;  // set when it came from another process: the Reply goes there
  bool exit = false;
  CallStatePtr state;  // a request from this process: completed directly, no id lookup
  int lane_from = -1;  // came on the lane from this rank: the Reply goes back on the lane
};

/// A FIFO of Items in blocks of kBlock; emptied blocks are kept (up to kKeep) and reused, so a burst of
/// messages lands in warm memory instead of growing a vector into fresh pages. Not thread-safe: the
/// host's lock guards it. A block is raw storage: emplace_with constructs an Item in its slot, and whoever
/// runs it destroys it there (Block::item, pop_front); nothing writes the slot after its Item ran, so a
/// sender that refills a recycled block finds its lines clean, not last written by the drainer's core.
class ItemQueue {
 public:
  static constexpr size_t kBlock = 64;
  struct Block {
    alignas(Item) unsigned char slots[kBlock * sizeof(Item)];
    size_t begin = 0, end = 0;  // [begin, end): live Items
    Block* next = nullptr;
    Item& item(size_t k) { return *std::launder(reinterpret_cast<Item*>(slots + k * sizeof(Item))); }
    /// Destroys the live Items of [begin, end) (they were not run).
    void destroy_live() {
      for (size_t k = begin; k < end; ++k) item(k).~Item();
      begin = end;
    }
  };
  ItemQueue() = default;
  ItemQueue(const ItemQueue&) = delete;
  ItemQueue& operator=(const ItemQueue&) = delete;
  ~ItemQueue() {
    for (Block* b = head_; b; b = b->next) b->destroy_live();
    free_chain(head_);
    free_chain(free_);
  }
  bool empty() const { return head_ == nullptr; }
  /// Appends the Item that `make(void* slot)` constructs in its slot (placement new: no temporary moved in).
  template <class F>
  void emplace_with(F&& make) {
    if (!tail_ || tail_->end == kBlock) {
      Block* b = fresh();
      (tail_ ? tail_->next : head_) = b;
      tail_ = b;
    }
    make(static_cast<void*>(tail_->slots + tail_->end * sizeof(Item)));
    ++tail_->end;
  }
  /// The i-th queued item, or null.
  Item* at(size_t i) {
    for (Block* b = head_; b; b = b->next) {
      if (i < b->end - b->begin) return &b->item(b->begin + i);
      i -= b->end - b->begin;
    }
    return nullptr;
  }
  /// Removes the first item into `out`.
  void pop_front(Item& out) {
    Item& first = head_->item(head_->begin);
    out = std::move(first);
    first.~Item();
    if (++head_->begin == head_->end) {
      Block* b = head_;
      head_ = b->next;
      if (!head_) tail_ = nullptr;
      recycle(b);
    }
  }
  /// Every queued block, for the caller to run without the lock, destroying each Item after it ran, and
  /// hand back (give_back).
  Block* take_all() {
    Block* h = head_;
    head_ = tail_ = nullptr;
    return h;
  }
  /// Keeps the blocks of a chain from take_all(), whose Items were destroyed.
  void give_back(Block* chain) {
    while (chain) {
      Block* n = chain->next;
      recycle(chain);
      chain = n;
    }
  }

 private:
  static constexpr size_t kKeep = 16;
  Block* fresh() {
    if (!free_) return new Block;  // default-initialised: the slots are not zeroed
    Block* b = free_;
    free_ = b->next;
    --n_free_;
    b->begin = b->end = 0;
    b->next = nullptr;
    return b;
  }
  void recycle(Block* b) {
    if (n_free_ >= kKeep) {
      delete b;
      return;
    }
    b->next = free_;
    free_ = b;
    ++n_free_;
  }
  static void free_chain(Block* b) {
    while (b) {
      Block* n = b->next;
      delete b;
      b = n;
    }
  }
  Block* head_ = nullptr;
  Block* tail_ = nullptr;
  Block* free_ = nullptr;
  size_t n_free_ = 0;
};

/// Actors this thread woke (Host::push): the lane thread, or a waiter, yields its core once after a
/// poll that woke one, when the process may use no more cores than its node has ranks
/// (System::lane_yield_).
thread_local uint64_t t_woke_actors = 0;

/// A troupe actor in this process: its Actor and its mailbox. A message from this process is queued here
/// under the host's lock (no CAF message of its own); a `tr_drain` CAF message wakes the CAF actor when it
/// is idle, which then runs what is queued, one message at a time, in arrival order. Calls from other
/// processes arrive as CAF messages and join the same queue. When the Actor allows it, a thread waiting
/// for a request that is first in the queue of an idle host runs it itself (run_inline).
struct Host : InlineRunner {
  std::unique_ptr<Actor> actor;
  std::string name;
  int rank = -1;
  System* sys = nullptr;
  caf::actor_addr addr;
  bool inline_ok = false;

  /// Queues `it`, waking the actor when it is idle; the reason it ended instead when it has. A one-way
  /// message to an idle actor that allows inline requests, with nothing queued, runs on this thread
  /// instead (as a waiter runs a request: RemoteModule's "rel" then wakes no thread).
  std::optional<std::string> push(Item&& it, const caf::actor& handle) {
    const bool one_way_here = !it.state && !it.exit && !it.reply_to && it.lane_from < 0;
    return push_with(one_way_here, [&](void* slot) { ::new (slot) Item(std::move(it)); }, handle);
  }
  /// push() of a Call from this process (a request when `state` is set), its Item built in its queue
  /// slot, not moved in: the hot path of messages between actors of one process.
  std::optional<std::string> push_call(uint64_t id, const std::string& method, List&& args, CallStatePtr&& state,
                                       const caf::actor& handle) {
    const bool one_way = !state;
    return push_with(one_way, [&](void* slot) {
      ::new (slot) Item{Call{id, method, Payload{std::move(args), nullptr}, -1}, nullptr, false, std::move(state)};
    }, handle);
  }
  /// A Call that came as a CAF message (from another process): queued, and run now when nothing runs.
  void push_remote(caf::event_based_actor* self, Call&& c, caf::strong_actor_ptr sender) {
    {
      std::lock_guard<SpinLock> g(mu_);
      if (closed_) return;
      q_.emplace_with([&](void* slot) { ::new (slot) Item{std::move(c), std::move(sender), false, nullptr}; });
      count_pushed();
      if (running_ || posted_) return;
    }
    drain(self, false);
  }
  /// Runs what is queued (on the CAF actor), at most kBudget messages before it lets CAF deliver what
  /// else waits for the actor (an exit) and comes back.
  void drain(caf::event_based_actor* self, bool from_post);
  bool run_inline(uint64_t id, const CallState& waiting) override;
  /// A synchronous request from this process, run on this thread when the actor allows inline requests,
  /// is idle and has nothing queued (as run_inline would run it, without a request state or a queue
  /// entry); false when it did not run. `error` gets the handler's failure.
  bool call_here(const std::string& method, const List& args, Value& result, std::string& error);
  /// Runs `it` on this thread (running_ is set), then wakes the actor for what arrived meanwhile.
  void run_here(Item& it, const caf::actor& handle);
  /// For the lane thread: true (running_ now set) when the actor allows inline requests, its last handler
  /// took at most `max_ns` (a long one would hold every other message of this process that comes on the
  /// lane), and it is open and idle, with nothing queued and no wake-up posted, so that the Call just read
  /// may run on the lane thread (run_claimed) instead of waking the actor's thread; messages that come
  /// meanwhile queue behind it.
  bool claim_idle(int64_t max_ns) {
    if (!inline_ok) return false;
    const int64_t last = last_run_ns_.load(std::memory_order_relaxed);
    if (last < 0 || last > max_ns) return false;
    std::lock_guard<SpinLock> g(mu_);
    if (closed_ || running_ || posted_ || !q_.empty()) return false;
    running_ = true;
    return true;
  }
  /// For the lane thread that claimed this actor (claim_idle) for `claimed` Calls of the poll under way:
  /// true when the Call just read may run there too, after them (instead of queueing for the actor's
  /// thread, which that would wake while the lane thread runs the first): nothing else queued for it
  /// meanwhile, and its last handler's time, times the Calls so claimed, at most `max_ns`.
  bool extend_claim(int64_t max_ns, int64_t claimed) {
    const int64_t last = last_run_ns_.load(std::memory_order_relaxed);
    if (last < 0 || (claimed + 1) * std::max<int64_t>(last, 1) > max_ns) return false;
    std::lock_guard<SpinLock> g(mu_);
    return running_ && !closed_ && !posted_ && q_.empty();
  }
  /// Records how long a handler of this actor took (claim_idle's measure).
  void note_run(std::chrono::steady_clock::duration d) {
    last_run_ns_.store(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count(), std::memory_order_relaxed);
  }
  /// Runs `it` after claim_idle() on this thread; after the `last` Call claimed, the host is idle again
  /// (a drain posted for what came meanwhile).
  void run_claimed(Item& it, bool last) {
    {
      InferenceMode mode(false);  // as on the actor's own threads: grad mode on, inference mode off
      run(it);
    }
    if (last) end_inline();
  }
  /// The handler of `method` (null: none), remembering the last one looked up.
  Handler* handler(std::unordered_map<std::string, Handler>& handlers, const std::string& method) {
    if (last_handler_ && method == last_method_) return last_handler_;
    auto it = handlers.find(method);
    if (it == handlers.end()) return nullptr;
    last_method_ = method;
    return last_handler_ = &it->second;
  }
  /// The actor ended (`reason` in words): fails the requests still queued (and those of `left`),
  /// refuses later ones.
  void close(const std::string& reason, std::vector<Item> left = {});
  /// Messages queued and not yet started (read from any thread; a snapshot).
  int64_t queued() const {
    const int64_t n = pushed_.load(std::memory_order_relaxed) - taken_.load(std::memory_order_relaxed);
    return n > 0 ? n : 0;
  }

 private:
  static constexpr size_t kBudget = 4096;  // messages per tr_drain
  /// push()'s mechanism: `make(void* slot)` constructs the Item (once) in its queue slot, or, when
  /// `may_run_here` (a one-way message a caller may run itself) and the actor is idle with nothing
  /// queued, on this thread's stack, where it runs at once (run_here).
  template <class Make>
  std::optional<std::string> push_with(bool may_run_here, Make&& make, const caf::actor& handle) {
    bool post = false, here = false;
    {
      std::lock_guard<SpinLock> g(mu_);
      if (closed_) return closed_reason_;
      here = may_run_here && inline_ok && !running_ && !posted_ && q_.empty();
      if (here) {
        running_ = true;
      } else {
        q_.emplace_with(make);
        count_pushed();
        post = !running_ && !posted_;
        if (post) posted_ = true;
      }
    }
    if (here) {
      alignas(Item) unsigned char buf[sizeof(Item)];
      make(static_cast<void*>(buf));
      struct Destroy {
        Item& it;
        ~Destroy() { it.~Item(); }
      } mine{*std::launder(reinterpret_cast<Item*>(buf))};
      run_here(mine.it, handle);
    } else if (post) {
      caf::anon_send(handle, tr_drain_atom::value);
      ++t_woke_actors;
    }
    return std::nullopt;
  }
  void run(Item& it);
  /// After a run on a caller's thread (run_inline, call_here): the host is idle again, and is posted a
  /// drain if messages came in meanwhile.
  void end_inline();
  /// close() under mu_: marks the mailbox closed and moves what is queued to `left`.
  void close_locked(const std::string& reason, std::vector<Item>& left);
  /// Fails the requests of `left` with "the actor is gone (<reason>)" (without the lock).
  void fail_left(const std::string& reason, std::vector<Item>& left);

  SpinLock mu_;
  // The queue length for introspection is pushed_ - taken_. Each has one writer at a time (pushed_ the
  // sender under mu_, taken_ whoever runs the queue), so a relaxed load and store, not a locked add;
  // taken_ sits on a cache line of its own, so that the drainer's store per message does not bounce
  // the line the senders write.
  std::atomic<int64_t> pushed_{0};
  ItemQueue q_;                        // queued, in arrival order
  bool running_ = false;               // a handler runs (on the actor, or on a waiting caller's thread)
  bool posted_ = false;                // a tr_drain is on its way
  bool closed_ = false;
  std::string closed_reason_;
  std::string last_method_;  // the last handler looked up
  Handler* last_handler_ = nullptr;
  std::atomic<int64_t> last_run_ns_{-1};  // how long its last message took (inline_ok actors; -1: none yet)
  void count_pushed() { pushed_.store(pushed_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed); }
  void count_taken(int64_t n) { taken_.store(taken_.load(std::memory_order_relaxed) + n, std::memory_order_relaxed); }
  alignas(64) std::atomic<int64_t> taken_{0};
};

namespace {
/// A Call the lane thread read for an idle actor that allows inline requests (Host::claim_idle): it runs
/// there once the poll is over (System::run_lane_calls), not on the actor's thread.
struct LaneRun {
  std::shared_ptr<Host> host;
  Item item;
};
// The message a handler on this thread answers (Actor::reply_now): a request of `host`'s queue (`item`:
// System::answer sends it), or one run by call_here (`kept` takes the value).
struct EarlyAnswer {
  const Actor* actor = nullptr;
  Host* host = nullptr;
  Item* item = nullptr;
  Value* kept = nullptr;
  bool answered = false;
};
thread_local EarlyAnswer* t_answer = nullptr;

// A handler that answered early (Actor::reply_now) and failed afterwards: the caller has its answer, so the
// failure can only be reported here.
void report_failed_after_answer(const std::string& method, const std::string& actor, int rank,
                                const std::string& error) {
  std::fprintf(stderr, "[actors] message '%s' to actor '%s' (rank %d) failed after it was answered: %s\n",
               method.c_str(), actor.c_str(), rank, error.c_str());
}

thread_local std::vector<LaneRun>* t_lane_runs = nullptr;  // this thread's while it polls the lane outside a handler
thread_local bool t_lane_handler = false;                  // the lane thread runs a handler
// How long the lane thread, waiting inside a handler, sleeps on its doorbell between looks: a reply that
// completes by another path (CAF's router, an actor of this process) rings no doorbell.
constexpr auto kLaneNestedNap = std::chrono::microseconds(200);
}  // namespace

bool on_lane_thread() { return t_lane_handler; }

namespace {
/// Counts this thread in `n` while it lives (System::lane_waiters_: a thread waiting for a reply on the
/// lane, or posting on it).
struct LaneWaiterCount {
  std::atomic<int>& n;
  explicit LaneWaiterCount(std::atomic<int>& w) : n(w) { n.fetch_add(1, std::memory_order_relaxed); }
  ~LaneWaiterCount() { n.fetch_sub(1, std::memory_order_relaxed); }
  LaneWaiterCount(const LaneWaiterCount&) = delete;
  LaneWaiterCount& operator=(const LaneWaiterCount&) = delete;
};

/// TROUPE_ACTOR_LANE_TRACE=<path prefix>: the first kLaneTraceMax hops of lane requests, as (request id,
/// hop, steady-clock ns, on the lane thread), written to <prefix>.<rank> when the system stops (the
/// clock is the machine's monotonic one, shared by the processes of a node). Hops: 0 the caller posts
/// the Call, 1 the Call's head is read, 2 its handler starts, 3 its Reply is posted, 4 the Reply is read
/// (its request completes there; on the lane thread: its waiter is then woken), 5 the caller's post
/// returned (its sends complete, or left to the lane thread after 50 ms). The last field: for hop
/// 2, the handler ran on the thread that read the Call (the lane thread or a waiter); else, the lane
/// thread recorded it. For measuring only: off, it costs a relaxed load per hop.
struct LaneTrace {
  struct Hop {
    uint64_t id;
    int hop;
    int64_t ns;
    bool lane;
  };
  static constexpr size_t kLaneTraceMax = 1 << 16;
  std::atomic<bool> on{false};
  std::atomic<size_t> n{0};
  std::vector<Hop> hops;
  std::string path;
  void record(uint64_t id, int hop) {
    if (!on.load(std::memory_order_relaxed)) return;
    const size_t i = n.fetch_add(1, std::memory_order_relaxed);
    if (i >= hops.size()) return;
    hops[i] = Hop{id, hop, std::chrono::duration_cast<std::chrono::nanoseconds>(
                               std::chrono::steady_clock::now().time_since_epoch()).count(),
                   hop == 2 ? t_lane_handler : t_lane_thread};
  }
  static thread_local bool t_lane_thread;
};
thread_local bool LaneTrace::t_lane_thread = false;
LaneTrace g_lane_trace;
}  // namespace

/// The process's actor system: one per process, shared by the ranks that live in it.
class System {
 public:
  System(int first_rank, int local_ranks, int size, bool networked)
      : first_rank_(first_rank), local_ranks_(local_ranks), size_(size), networked_(networked) {
    cfg_.add_message_type<Call>("troupe_call");
    cfg_.add_message_type<Reply>("troupe_reply");
    cfg_.add_message_type<Routed>("troupe_routed");
    // DESIGN.md's measurements: the sharing policy and no middleman workers cut the cross-process
    // round trip from ~285 us to ~118 us.
    cfg_.set("scheduler.policy", caf::atom("sharing"));
    cfg_.set("scheduler.max-threads", env_int("TROUPE_ACTOR_THREADS", 4, 1));
    if (networked_) {
      cfg_.load<caf::io::middleman>();
      cfg_.set("middleman.workers", int64_t{0});
      // A stopped (not killed) peer is only noticed with both set (TROUPE_ACTOR_CONNECTION_TIMEOUT_S: how
      // long a silent peer's connection is kept; its heartbeats come every 500 ms).
      cfg_.set("middleman.heartbeat-interval", caf::timespan(std::chrono::milliseconds(500)));
      cfg_.set("middleman.connection-timeout",
               caf::timespan(std::chrono::seconds(env_int("TROUPE_ACTOR_CONNECTION_TIMEOUT_S", 5, 1))));
    }
    system_ = std::make_unique<caf::actor_system>(cfg_);
    router_ = system_->spawn<caf::detached>(router_behavior, this);
    watch_end(router_);
    services_.resize(size_);
    routers_.resize(size_);
    seq_in_.resize(size_);
    seq_out_ = std::make_unique<std::atomic<uint64_t>[]>(size_);
    for (int r = 0; r < size_; ++r) seq_out_[r].store(0);
  }

  ~System() { stop(); }

  bool networked() const { return networked_; }
  /// False once stop() began.
  bool running() const { return running_.load(std::memory_order_relaxed); }
  int size() const { return size_; }
  caf::actor_system& sys() { return *system_; }

  bool is_local_rank(int rank) const { return rank >= first_rank_ && rank < first_rank_ + local_ranks_; }

  /// Spawns the rank services of this process's ranks.
  void spawn_services() {
    for (int r = first_rank_; r < first_rank_ + local_ranks_; ++r) set_service(r, spawn_host(r, service_name(r), make_rank_service(r)));
  }

  void set_service(int rank, const ActorRef& ref) {
    if (rank < 0 || rank >= size_) throw ActorError("[actors] a service for rank " + std::to_string(rank) + " of " + std::to_string(size_));
    std::lock_guard<std::mutex> g(mu_);
    services_[rank] = ref;
  }

  ActorRef service(int rank) {
    if (rank < 0 || rank >= size_) {
      throw ActorError("[actors] rank " + std::to_string(rank) + " does not exist (the world has " + std::to_string(size_) +
                       " rank" + (size_ == 1 ? "" : "s") + ")");
    }
    std::lock_guard<std::mutex> g(mu_);
    if (!services_[rank].valid()) throw ActorError("[actors] rank " + std::to_string(rank) + " is not connected");
    return services_[rank];
  }

  ActorRef spawn_host(int rank, const std::string& name, std::unique_ptr<Actor> actor) {
    if (!running_) throw ActorError("[actors] the actor runtime stopped");
    auto h = std::make_shared<Host>();
    h->actor = std::move(actor);
    h->name = name;
    h->rank = rank;
    h->sys = this;
    h->inline_ok = ActorAccess::inline_requests(*h->actor);
    caf::actor a = ActorAccess::own_thread(*h->actor) ? system_->spawn<caf::detached>(host_behavior, h)
                                                      : system_->spawn(host_behavior, h);
    watch_end(a);
    h->addr = a.address();
    {
      std::lock_guard<std::mutex> g(mu_);
      local_actors_.push_back(a.address());
      hosts_[a.id()] = h;
    }
    ActorRef ref = make_ref(a, name, rank);
    ActorAccess::set_self(*h->actor, ref);
    return ref;
  }

  /// The mailbox of `a` when it is an actor of this process.
  std::weak_ptr<Host> find_host(const caf::actor& a) {
    if (!a || a.node() != system_->node()) return {};
    std::lock_guard<std::mutex> g(mu_);
    auto it = hosts_.find(a.id());
    return it == hosts_.end() ? std::weak_ptr<Host>() : it->second;
  }
  /// The actor `id` ended (`reason` in words): a Call for it that arrives later is answered with it.
  void forget_host(caf::actor_id id, const std::string& reason) {
    std::lock_guard<std::mutex> g(mu_);
    hosts_.erase(id);
    if (lane_) gone_[id] = reason;
  }
  const caf::node_id& node() const { return system_->node(); }
  /// True when stop() left the actor system running (an actor still ran a handler): its actors still
  /// reach this System when they end, so it must outlive them (actors::stop keeps it).
  bool left_running() const { return left_running_; }

  /// Sends to an actor of this process: through its mailbox, with no CAF message unless it is idle.
  CallStatePtr issue_local(const ActorRef& to, Host& host, const std::string& method, List args, bool want_reply,
                           const std::function<std::string()>& what) {
    CallStatePtr state;
    uint64_t id = 0;
    const RefImpl& ri = *to.impl();
    if (want_reply) {
      auto timeout = to.timeout();
      state = std::make_shared<CallState>(method, to, CallState::Clock::now() + timeout, timeout);
      id = next_id_++;
      if (host.inline_ok) state->set_inline(ri.local, id);
    }
    CallStatePtr queued = state;
    if (auto gone = host.push_call(id, method, std::move(args), std::move(queued), ri.handle)) {
      if (!state) throw ActorError("[actors] " + what() + " failed: the actor is gone (" + *gone + ")");
      state->fail("[actors] " + what() + " failed: the actor is gone (" + *gone + ")");
    }
    return state;
  }

  CallStatePtr issue(const ActorRef& to, const std::string& method, List args, bool want_reply) {
    // The hot path of one-way messages: no strings built, one uncontended lock.
    auto what = [&] { return "request '" + method + "' to actor " + to.str(); };
    if (!to.valid()) throw ActorError("[actors] " + what() + ": the ActorRef is empty");
    if (!running_) throw ActorError("[actors] " + what() + ": the actor runtime stopped");
    if (auto host = to.impl()->local.lock()) return issue_local(to, *host, method, std::move(args), want_reply, what);
    CallStatePtr state;
    if (want_reply) {
      auto timeout = to.timeout();
      state = std::make_shared<CallState>(method, to, CallState::Clock::now() + timeout, timeout);
    }
    const caf::actor& h = to.impl()->handle;
    uint64_t id = 0;
    bool monitor = false;
    if (!running_) throw ActorError("[actors] " + what() + ": the actor runtime stopped");
    if (state || n_dead_.load(std::memory_order_acquire) > 0) {  // a one-way send to a live world takes no lock
      std::lock_guard<std::mutex> g(mu_);
      auto dead = dead_.find(h.address());
      if (dead != dead_.end()) {
        std::string err = "[actors] " + what() + " failed: the actor is gone (" + dead->second + ")";
        if (!state) throw ActorError(err);
        state->fail(err);
        return state;
      }
      if (state) {
        id = next_id_++;
        pending_.emplace(id, Pending{state, h.address()});
        monitor = monitored_.insert(h.address()).second;
      }
    }
    if (monitor) caf::anon_send(router_, tr_mon_atom::value, h);
    if (lane_on_.load(std::memory_order_acquire) && h.node() != system_->node() && to.rank() >= 0 && to.rank() < size_ &&
        to.rank() != first_rank_) {
      try {
        lane_call(to, h, id, method, std::move(args), state);
      } catch (...) {
        if (id != 0) {
          std::lock_guard<std::mutex> g(mu_);
          pending_.erase(id);
        }
        throw;
      }
      return state;
    }
    Call call{id, method, Payload{std::move(args), nullptr}, networked_ ? first_rank_ : -1};
    if (networked_ && h.node() != system_->node()) send_data_plane(call.args, to.rank());
    // A request names the router as its sender (a reply from another process goes there); a one-way
    // message needs no sender, and leaves the router's reference count alone.
    if (id != 0) caf::send_as(router_, h, std::move(call));
    else caf::anon_send(h, std::move(call));
    return state;
  }

  /// Completes request `id` (a no-op when it already expired or failed).
  void finish(uint64_t id, bool ok, Value v, const std::string& error) {
    CallStatePtr st;
    {
      std::lock_guard<std::mutex> g(mu_);
      auto it = pending_.find(id);
      if (it == pending_.end()) return;
      st = std::move(it->second.state);
      pending_.erase(it);
    }
    if (ok) st->complete(std::move(v));
    else st->fail("[actors] " + st->what() + " failed: " + error);
  }

  // ---- the lane: Calls and Replies between the processes of an MPI job as MPI messages
  //
  // Every Call from this process to another gets the next number of this process's sequence to that
  // process; the receiver hands Calls to their actors in that order (deliver), whichever way each came: on
  // the lane (values without ActorRefs: one head, tensors beyond the eager budget as bodies), or by
  // CAF to the receiver's router as a Routed (values with ActorRefs, whose proxies CAF makes). So one
  // thread's messages to one actor arrive in the order sent. Replies need no order: a Reply whose value
  // holds an ActorRef goes by CAF to the caller's router, any other on the lane. The failure detector
  // stays CAF's (the router monitors every target; a dead or stopped peer's down_msg fails what is
  // pending), and nothing on the lane blocks: sends are MPI_Isend, receives follow an MPI_Improbe.

  /// Turns the lane on (start_connected, after every rank is connected): from now on Calls to other
  /// processes take it.
  void start_lane(std::shared_ptr<comm::MessageLane> lane) {
    lane_ = std::move(lane);
    lane_inline_bytes_ = env_int("TROUPE_ACTOR_LANE_INLINE_BYTES", lane_->eager_bytes() - kLaneHeadRoom);
    lane_remote_inline_bytes_ = env_int("TROUPE_ACTOR_LANE_REMOTE_INLINE_BYTES",
                                        std::max(lane_inline_bytes_, lane_->slot_bytes() - kLaneHeadRoom));
    lane_small_bytes_ = env_int("TROUPE_ACTOR_LANE_SMALL_BYTES", kLaneSmallBytes);
    lane_body_bytes_ = env_int("TROUPE_ACTOR_LANE_BODY_BYTES", kLaneBodyBytes);
    lane_remote_bytes_ = env_int("TROUPE_ACTOR_LANE_REMOTE_BYTES", kLaneRemoteBytes);
    lane_spin_ = std::chrono::microseconds(env_int("TROUPE_ACTOR_LANE_SPIN_US", kLaneSpinUs));
    lane_max_nap_ = std::chrono::microseconds(
        std::max<int64_t>(1, env_int("TROUPE_ACTOR_LANE_NAP_US", lane_->all_on_node() ? kLaneNapUs : 200)));
    lane_wait_spin_ = std::chrono::microseconds(env_int("TROUPE_ACTOR_LANE_WAIT_SPIN_US", kLaneWaitSpinUs));
    lane_remote_spin_ns_ = lane_->all_on_node() ? 0 : env_int("TROUPE_ACTOR_LANE_REMOTE_SPIN_US", kLaneRemoteSpinUs) * 1000;
    lane_run_inline_ns_ = env_int("TROUPE_ACTOR_LANE_RUN_INLINE_US", kLaneRunInlineUs) * 1000;
    {  // see lane_yield_
      cpu_set_t cpus;
      CPU_ZERO(&cpus);
      int node_ranks = 1;
      for (int r = 0; r < lane_->size(); ++r) node_ranks += r != lane_->rank() && lane_->on_node(r) ? 1 : 0;
      const bool crowded = sched_getaffinity(0, sizeof cpus, &cpus) == 0 && CPU_COUNT(&cpus) <= node_ranks;
      lane_yield_ = env_int("TROUPE_ACTOR_LANE_YIELD", crowded ? 1 : 0) != 0;
    }
    lane_polled_nap_ = std::chrono::microseconds(
        lane_->all_on_node() ? 0 : env_int("TROUPE_ACTOR_LANE_POLLED_NAP_US", kLanePolledNapUs));
    if (const char* tp = std::getenv("TROUPE_ACTOR_LANE_TRACE"); tp && *tp && !g_lane_trace.on.load()) {
      g_lane_trace.hops.resize(LaneTrace::kLaneTraceMax);
      g_lane_trace.path = std::string(tp) + "." + std::to_string(first_rank_);
      g_lane_trace.on.store(true);
    }
    lane_waiter_ = std::make_shared<LaneWaiter>(this);
    lane_on_.store(true, std::memory_order_release);
    lane_thread_ = std::thread([this] { lane_loop(); });
  }
  bool lane_on() const { return lane_on_.load(std::memory_order_acquire); }
  /// Sends later Calls on the lane (true) or through CAF (false); false when there is no lane to turn on.
  bool set_lane_on(bool on) {
    std::lock_guard<std::mutex> g(lane_progress_mu_);
    if (on && (!lane_thread_.joinable() || lane_stop_.load())) return false;
    lane_on_.store(on, std::memory_order_release);
    return true;
  }

  /// Records `router` as rank `rank`'s router (the hello of start_connected).
  void set_router(int rank, const ActorRef& router) {
    if (rank < 0 || rank >= size_ || !router.valid()) return;
    std::lock_guard<std::mutex> g(mu_);
    routers_[rank] = router.impl()->handle;
  }
  /// This process's router, as an ActorRef to send to the others.
  ActorRef router_ref() { return make_ref(router_, "troupe.router", first_rank_); }

  /// Sends Call (id, method, args) to actor `h` of another process (rank to.rank()) by the lane, or by
  /// CAF to that process's router when the values hold an ActorRef; either way with its sequence number.
  void lane_call(const ActorRef& to, const caf::actor& h, uint64_t id, const std::string& method, List args,
                 const CallStatePtr& state) {
    const int dest = to.rank();
    int64_t weight = -1;
    if (has_refs(args) || !lane_fits(args, dest, /*one_way=*/id == 0, &weight)) {
      check_encodable(args);  // a Call CAF fails to serialise would leave a hole in the sequence
      caf::actor router;
      {
        std::lock_guard<std::mutex> g(mu_);
        router = routers_[dest];
      }
      if (!router) throw ActorError("[actors] request '" + method + "' to actor " + to.str() + ": rank " + std::to_string(dest) + " is not connected");
      Routed r{next_seq(dest), h.id(), Call{id, method, Payload{std::move(args), nullptr}, first_rank_}};
      send_data_plane(r.call.args, dest);
      if (id != 0) caf::send_as(router_, router, std::move(r));
      else caf::anon_send(router, std::move(r));
      return;
    }
    wire::LaneHead lh;
    lh.kind = wire::LaneHead::kCall;
    lh.id = id;
    lh.target = h.id();
    lh.from_rank = first_rank_;
    lh.text = method;
    std::vector<Tensor> bodies;
    std::string& head = lane_head_buffer();
    lane_encode(head, lh, args, bodies, weight, inline_budget(dest));
    const uint64_t seq = next_seq(dest);
    std::memcpy(head.data() + wire::kLaneSeqOffset, &seq, sizeof seq);
    if (state) state->set_inline(lane_waiter_, id);
    g_lane_trace.record(id, 0);
    lane_post(*lane_, dest, std::move(head), std::move(bodies), /*awaited=*/id != 0);
    g_lane_trace.record(id, 5);
  }

  /// Posts on the lane (MessageLane::post). A post above the eager limit polls its own sends until they
  /// are out; meanwhile this thread counts as a waiter, so that the lane thread does not poll after
  /// traffic with another node beside it (kLaneRemoteSpinUs: three threads polling on 2 cores; a 1 MB
  /// request between two test hosts at 0.66 of raw MPI without this, 0.94 with it, medians of 4
  /// alternated runs; 64 KB 0.54 and 0.82).
  void lane_post(comm::MessageLane& lane, int dest, std::string&& head, std::vector<Tensor> bodies, bool awaited) {
    note_remote(dest, false);
    LaneWaiterCount posting(lane_waiters_);
    lane.post(dest, std::move(head), std::move(bodies), awaited);
  }

  /// ActorRef::stop() of `to`, an actor of another process, in this process's sequence to it (so it lands
  /// after what was sent before it); false when the lane is off.
  bool lane_stop(const ActorRef& to) {
    const caf::actor& h = to.impl()->handle;
    const int dest = to.rank();
    if (!lane_on() || !h || h.node() == system_->node() || dest < 0 || dest >= size_ || dest == first_rank_) return false;
    wire::LaneHead lh;
    lh.kind = wire::LaneHead::kStop;
    lh.target = h.id();
    lh.from_rank = first_rank_;
    std::vector<Tensor> bodies;
    std::string head;
    lane_encode(head, lh, List{}, bodies);
    const uint64_t seq = next_seq(dest);
    std::memcpy(head.data() + wire::kLaneSeqOffset, &seq, sizeof seq);
    lane_->post(dest, std::move(head), std::move(bodies));
    return true;
  }

  /// Answers request `id` of rank `dest`, which came on the lane.
  void lane_reply(int dest, uint64_t id, bool ok, Value result, std::string error) {
    // The result in this thread's List, which keeps its buffer between replies (one allocation fewer
    // each; none of what runs until it is cleared replies on this thread).
    static thread_local List t_values;
    struct Cleared {
      List& l;
      ~Cleared() { l.clear(); }
    } cleared{t_values};
    List& values = t_values;
    values.clear();
    if (ok) values.push_back(std::move(result));
    int64_t weight = -1;
    if (ok && (has_refs(values.front()) || !lane_fits(values, dest, false, &weight))) {
      caf::actor router;
      {
        std::lock_guard<std::mutex> g(mu_);
        router = routers_[dest];
      }
      Reply r{id, ok, std::move(error), Payload{}};
      r.result.values.push_back(std::move(values.front()));
      send_data_plane(r.result, dest);
      caf::anon_send(router, std::move(r));
      return;
    }
    wire::LaneHead lh;
    lh.kind = wire::LaneHead::kReply;
    lh.id = id;
    lh.from_rank = first_rank_;
    lh.ok = ok;
    lh.text = std::move(error);
    std::vector<Tensor> bodies;
    std::string& head = lane_head_buffer();
    try {
      lane_encode(head, lh, values, bodies, weight, inline_budget(dest));
    } catch (const std::exception& e) {
      lh.ok = false;
      lh.text = std::string("its result could not be sent: ") + e.what();
      lh.bodies.clear();
      bodies.clear();
      lane_encode(head, lh, List{}, bodies);
    }
    try {
      g_lane_trace.record(id, 3);
      if (auto lane = lane_) lane_post(*lane, dest, std::move(head), std::move(bodies), false);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "[actors] the reply to rank %d's request could not be sent on the lane: %s\n", dest, e.what());
    }
  }

  /// Hands Call `it` (the `seq`-th from rank `src`) to actor `target` in the sender's order: now when it
  /// is the next one, else kept until those before it came.
  void deliver(int src, uint64_t seq, uint64_t target, Item&& it) {
    std::vector<std::pair<Item, std::string>> refused;
    {
      std::lock_guard<std::mutex> g(seq_mu_);
      SeqIn& in = seq_in_[src];
      if (seq != in.next) {
        if (seq > in.next) in.held.emplace(seq, Held{target, std::move(it)});
        return;
      }
      place(target, std::move(it), refused);
      ++in.next;
      for (auto h = in.held.find(in.next); h != in.held.end(); h = in.held.find(in.next)) {
        place(h->second.target, std::move(h->second.item), refused);
        in.held.erase(h);
        ++in.next;
      }
    }
    for (auto& [item, why] : refused) {
      std::string err = "the actor is gone (" + why + ")";
      if (item.lane_from >= 0) {
        lane_reply(item.lane_from, item.call.id, false, Value(), err);
      } else if (item.reply_to) {
        caf::anon_send(caf::actor_cast<caf::actor>(item.reply_to), Reply{item.call.id, false, err, Payload{}});
      }
    }
  }

  static int64_t ns_of(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
  }
  /// Records a message to (`incoming` false) or from `rank` when it is on another node.
  void note_remote(int rank, bool incoming, bool call = false) {
    if (lane_remote_spin_ns_ <= 0 || lane_->on_node(rank)) return;
    const int64_t now = ns_of(std::chrono::steady_clock::now());
    lane_remote_ns_.store(now, std::memory_order_relaxed);
    if (incoming) lane_remote_in_ns_.store(now, std::memory_order_relaxed);
    if (call) lane_remote_call_ns_.store(now, std::memory_order_relaxed);
  }
  /// Whether, at `now`, a message came from another node (`incoming`), or went to or came from one, within
  /// lane_remote_spin_ns_.
  bool remote_recent(bool incoming, std::chrono::steady_clock::time_point now) const {
    if (lane_remote_spin_ns_ <= 0) return false;
    return ns_of(now) - (incoming ? lane_remote_in_ns_ : lane_remote_ns_).load(std::memory_order_relaxed) < lane_remote_spin_ns_;
  }

  /// Polls the lane once, handling at most 64 messages, until `awaited` completes or a Call was claimed
  /// to run on this thread; true when one came. The caller holds lane_progress_mu_.
  bool lane_poll_some(const CallState* awaited = nullptr) {
    bool got = false;
    try {
      for (int k = 0; k < 64; ++k) {
        auto in = lane_->poll();
        if (!in) break;
        got = true;
        on_lane_message(in->source, in->head);
        // A waiter whose reply this was, or a thread that claimed a Call to run, stops here (and lets
        // the head go, as the next poll would): one more look cost a 4 KB request between two test hosts
        // about 2 us (an MPI progress call through TCP), and the Call waited for it (trace medians of
        // 5,000: the cycle 21.1-22.7 us against 23.3-24.9, the Call read to its handler 0.8-0.9 against
        // 1.3-1.6; on one host no change beyond the noise). Up to 2026-11-28 a poll went on reading and
        // ran the Calls it claimed after, bounded by 1 MB of their bodies (64 Calls of 4 MB each were once
        // alive at a time, each a fresh block from the allocator: a 4 MB stream at 0.67-0.7 of raw MPI).
        if ((awaited && awaited->done()) || (t_lane_runs && !t_lane_runs->empty())) {
          lane_->release_head();
          break;
        }
      }
    } catch (const std::exception& e) {
      if (!lane_complained_.exchange(true)) std::fprintf(stderr, "[actors] lane: %s\n", e.what());
    }
    return got;
  }

  /// A waiter's turn (Future::wait on a request whose reply comes on the lane): polls the lane itself
  /// until the reply is there, at most lane_wait_spin_; true when it is.
  /// Calls it reads for idle actors that allow inline requests run here after the poll, as on the lane
  /// thread (not while this thread already runs one: no nesting).
  bool lane_wait(const CallState& w) {
    const auto t_start = std::chrono::steady_clock::now();
    auto t0 = t_start;
    std::vector<LaneRun> runs;
    // While this thread polls, posts to this rank do not wake the lane thread (a wake-up per reply cost
    // a core switch on both sides on 2 loaded cores); the end of the poll wakes it when something came.
    auto lane = lane_;
    if (!lane) return false;
    LaneWaiterCount waiting(lane_waiters_);
    // Also counted in lane_pollers_ (the lane thread naps kLanePolledNapUs meanwhile); the last to leave
    // wakes it when this one gave up, or when Calls come from another node (see kLanePolledNapUs).
    struct Poller {
      System* sys;
      comm::MessageLane* l;
      bool gave_up = false;
      Poller(System* s, comm::MessageLane* x) : sys(s), l(x) { enter(); }
      ~Poller() { leave(false); }
      /// Not a poller while it runs the Calls it claimed: heads that come meanwhile are the lane thread's
      /// to read (its idle_wait leaves a head to a thread that polls, and posters do not ring for it).
      void pause() { leave(true); }
      void resume() { enter(); }
      void enter() {
        l->polling(true);
        sys->lane_pollers_.fetch_add(1, std::memory_order_relaxed);
      }
      /// The last poller to leave wakes the lane thread from its long nap when `always`, when this one
      /// gave up, or when Calls came from another node within kLaneRemoteCallsMs.
      void leave(bool always) {
        if (sys->lane_pollers_.fetch_sub(1, std::memory_order_relaxed) == 1 && sys->lane_polled_nap_.count() > 0 &&
            (always || gave_up ||
             ns_of(std::chrono::steady_clock::now()) - sys->lane_remote_call_ns_.load(std::memory_order_relaxed) <
                 kLaneRemoteCallsMs * 1000000)) {
          l->wake_idle();
        }
        l->polling(false);
      }
    } poller(this, lane.get());
    while (!w.done()) {
      bool got = false, handed = false;
      {
        std::unique_lock<std::mutex> g(lane_progress_mu_, std::try_to_lock);
        if (g.owns_lock()) {
          if (!lane_on_.load(std::memory_order_relaxed)) return false;
          t_lane_runs = lane_run_inline_ns_ > 0 && !t_lane_handler ? &runs : nullptr;
          const uint64_t woke = t_woke_actors;
          got = lane_poll_some(&w);
          t_lane_runs = nullptr;
          handed = t_woke_actors != woke;
        }
      }
      if (handed && lane_yield_) sched_yield();  // as the lane thread does (lane_yield_)
      if (!runs.empty()) {
        struct Paused {
          Poller& p;
          explicit Paused(Poller& x) : p(x) { p.pause(); }
          ~Paused() { p.resume(); }
        } paused(poller);
        run_lane_calls(runs, false);
      }
      if (got) continue;
      // Never sched_yield here: on a loaded machine a yield gives the core away for a whole time slice
      // (a millisecond and more), where a sleeper that is woken runs at once.
      const auto now = std::chrono::steady_clock::now();
      // One-way messages posted before this request that their peer reads itself (MessageLane::peer_reads:
      // post returned before they left) are still being read: the reply comes after them, so the short
      // spin starts once they are done (at most kLaneReaderWaitSpin in all). Counted from the post, the
      // spin could end before they were read, and the reply then came to a sleeping waiter (two wake-ups:
      // a 1 MB request, when requests too were left so, took 0.16 ms against 0.09).
      if (now - t0 > lane_wait_spin_ && lane->peer_reads_under_way() > 0 && now - t_start < kLaneReaderWaitSpin) {
        t0 = now;
      }
      if (now - t0 > lane_wait_spin_ && !remote_recent(false, now)) {
        poller.gave_up = true;
        return false;
      }
      cpu_relax();
    }
    return true;
  }

  void on_down(const caf::actor_addr& who, const std::string& reason) {
    std::vector<CallStatePtr> failed;
    {
      std::lock_guard<std::mutex> g(mu_);
      dead_[who] = reason;
      n_dead_.store(dead_.size(), std::memory_order_release);
      for (auto it = pending_.begin(); it != pending_.end();) {
        if (it->second.target == who) {
          failed.push_back(std::move(it->second.state));
          it = pending_.erase(it);
        } else {
          ++it;
        }
      }
    }
    for (auto& st : failed) st->fail("[actors] " + st->what() + " failed: the actor is gone (" + reason + ")");
  }

  /// Fails `s` at its deadline even when nobody waits (requests in this process are not in pending_).
  void watch(const CallStatePtr& s) {
    std::lock_guard<std::mutex> g(mu_);
    if (running_) watched_.push_back(s);  // weak: a state nobody holds any more needs no deadline
  }

  void sweep() {
    std::vector<CallStatePtr> expired;
    auto now = CallState::Clock::now();
    {
      std::lock_guard<std::mutex> g(mu_);
      for (size_t i = 0; i < watched_.size();) {
        auto st = watched_[i].lock();
        if (!st || st->done() || st->deadline() <= now) {
          if (st && !st->done()) expired.push_back(std::move(st));
          watched_[i] = std::move(watched_.back());
          watched_.pop_back();
        } else {
          ++i;
        }
      }
      for (auto it = pending_.begin(); it != pending_.end();) {
        if (it->second.state->deadline() <= now || it->second.state->done()) {
          expired.push_back(std::move(it->second.state));
          it = pending_.erase(it);
        } else {
          ++it;
        }
      }
    }
    for (auto& st : expired) st->expire();
  }

  std::string render(const caf::error& e) { return system_ ? system_->render(e) : caf::to_string(e); }

  /// Opens the gate (every connection must prove `secret`) and publishes this rank's service behind it
  /// on an ephemeral port of `bind_addr` (null: every interface); returns the port.
  uint16_t publish(const std::string& secret, const char* bind_addr) {
    gate_ = spawn_gate(*system_, secret);
    watch_end(gate_.mm);
    auto h = service(first_rank_).impl()->handle;
    try {
      return gate_publish(*system_, gate_, h, bind_addr);
    } catch (const ActorError& e) {
      throw ActorError("[actors] rank " + std::to_string(first_rank_) + ": " + e.what());
    }
  }

  /// Connects (through the gate) to rank `rank`'s service at host:port, in up to kConnectTries attempts
  /// kConnectPause apart: under load CAF's connect once failed at start-up with connection_timeout within
  /// a second (1 mpirun -np 3 run in about 50), where the next try would have found the peer listening.
  void connect(int rank, const std::string& host, uint16_t port) {
    constexpr int kConnectTries = 3;
    constexpr auto kConnectPause = std::chrono::milliseconds(250);
    caf::actor a;
    for (int attempt = 1;; ++attempt) {
      try {
        a = gate_connect(*system_, gate_, host, port);
        break;
      } catch (const ActorError& e) {
        if (attempt < kConnectTries) {
          std::this_thread::sleep_for(kConnectPause);
          continue;
        }
        throw ActorError("[actors] rank " + std::to_string(first_rank_) + ": could not connect to rank " + std::to_string(rank) +
                         " at " + host + ":" + std::to_string(port) + " in " + std::to_string(kConnectTries) +
                         " attempts: " + e.what());
      }
    }
    set_service(rank, make_ref(a, service_name(rank), rank));
  }

  /// Connections the gate refused and admitted so far.
  std::pair<int64_t, int64_t> gate_counts() {
    if (!gate_.state) return {0, 0};
    std::lock_guard<std::mutex> g(gate_.state->mu);
    return {gate_.state->refused, gate_.state->admitted};
  }

  std::vector<std::string> endpoints;  // "host:port" of every rank (networked)

  void stop() {
    std::vector<CallStatePtr> failed;
    std::vector<caf::actor_addr> actors;
    {
      std::lock_guard<std::mutex> g(mu_);
      if (!running_) return;
      running_ = false;
    }
    stop_lane();
    if (g_lane_trace.on.exchange(false)) {
      if (FILE* f = std::fopen(g_lane_trace.path.c_str(), "w")) {
        const size_t n = std::min(g_lane_trace.n.load(), g_lane_trace.hops.size());
        for (size_t i = 0; i < n; ++i) {
          const auto& h = g_lane_trace.hops[i];
          std::fprintf(f, "%llu %d %lld %d\n", static_cast<unsigned long long>(h.id), h.hop, static_cast<long long>(h.ns), h.lane ? 1 : 0);
        }
        std::fclose(f);
      }
    }
    {
      std::lock_guard<std::mutex> g(mu_);
      for (auto& [id, p] : pending_) failed.push_back(std::move(p.state));
      pending_.clear();
      for (auto& w : watched_)
        if (auto st = w.lock()) failed.push_back(std::move(st));
      watched_.clear();
      actors.swap(local_actors_);
      services_.clear();
    }
    for (auto& st : failed) st->fail("[actors] " + st->what() + " failed: the actor runtime stopped");
    failed.clear();  // a state's value may hold an ActorRef: none may outlive this into system_.reset()
    // The shutdown order (each step bounded by stop_wait()): every actor of this process and the router
    // end, and each has finished its cleanup (end_watch_: a functor attached when it was spawned, so it
    // runs after every monitor's down_msg was sent, the BASP broker's among them); then the gate; then
    // the BASP broker, which thereby handles every down_msg queued before (each holds the ended actor);
    // only then ~actor_system stops the middleman. Before, the middleman could stop the broker with a
    // down_msg still in its mailbox, which a broker's cleanup does not drain: the detached router it
    // held was never destroyed and ~actor_system waited for its thread for ever (1 run in 30-50 of
    // `mpirun -np 3 launch_demo` on the loaded machine, with the lane or without).
    std::vector<caf::actor> ending;
    for (auto& a : actors)
      if (auto h = caf::actor_cast<caf::actor>(a)) ending.push_back(std::move(h));
    if (router_) ending.push_back(router_);
    router_ = nullptr;
    size_t stuck = end_and_await(std::move(ending), caf::exit_reason::user_shutdown);
    gate_close(gate_);  // admits no connection from here on
    // The gate is a middleman actor, which ignores every exit message but kill.
    if (gate_.mm) stuck += end_and_await({gate_.mm}, caf::exit_reason::kill);
    gate_.mm = nullptr;
    if (networked_ && stuck == 0) {
      auto basp = system_->middleman().named_broker<caf::io::basp_broker>(caf::atom("BASP"));
      watch_end(basp);
      stuck += end_and_await({basp}, caf::exit_reason::kill);
    }
    {
      std::lock_guard<std::mutex> g(mu_);
      std::fill(routers_.begin(), routers_.end(), caf::actor());  // proxies: none outlives the system
    }
    if (stuck > 0) {
      // One still runs a handler: ~actor_system would wait for it for ever. Leave the system to the
      // process's end (its threads hold no MPI state; the lane is stopped already).
      std::fprintf(stderr,
                   "[actors] rank %d: %zu actor(s) did not end within %lld s of the runtime's stop (a handler still "
                   "runs); the actor system is left to the process's exit\n",
                   first_rank_, stuck, static_cast<long long>(stop_wait().count()));
      (void)system_.release();
      left_running_ = true;
    } else {
      system_.reset();  // every actor ended: it stops the scheduler and the middleman (closes connections)
    }
    lane_.reset();  // before MPI_Finalize (launch::finalize stops the actors first)
  }

 private:
  struct Pending {
    CallStatePtr state;
    caf::actor_addr target;
  };

  /// How long each step of stop() waits (TROUPE_ACTOR_STOP_S, default kStopWaitS).
  static std::chrono::seconds stop_wait() { return std::chrono::seconds(std::max<int64_t>(1, env_int("TROUPE_ACTOR_STOP_S", kStopWaitS))); }

  /// Records in end_watch_ when `a` has finished its cleanup. Called right after a spawn, before the
  /// handle leaves this function: the functor is then the oldest attached one, which CAF runs last.
  void watch_end(const caf::actor& a) {
    if (!a) return;
    auto w = end_watch_;
    const caf::actor_id id = a.id();
    a->attach_functor([w, id] {
      std::lock_guard<std::mutex> g(w->mu);
      w->ended.insert(id);
      w->cv.notify_all();
    });
  }

  /// Sends an exit (`how`) to each of `who` (watched by watch_end) and waits until each has finished its
  /// cleanup, at most stop_wait() in all; returns how many had not by then.
  size_t end_and_await(std::vector<caf::actor> who, caf::exit_reason how) {
    std::vector<caf::actor_id> ids;
    for (auto& h : who) {
      ids.push_back(h.id());
      caf::anon_send_exit(h, how);
    }
    who.clear();  // our references go now: the last one may be dropped on the actor's own thread
    std::unique_lock<std::mutex> g(end_watch_->mu);
    auto left = [&] {
      return static_cast<size_t>(std::count_if(ids.begin(), ids.end(), [&](caf::actor_id id) { return !end_watch_->ended.count(id); }));
    };
    end_watch_->cv.wait_for(g, stop_wait(), [&] { return left() == 0; });
    return left();
  }

  /// The lane's InlineRunner: a waiter polls the lane itself (lane_wait).
  struct LaneWaiter : InlineRunner {
    explicit LaneWaiter(System* s) : sys(s) {}
    bool run_inline(uint64_t, const CallState& waiting) override { return sys->lane_wait(waiting); }
    System* sys;
  };
  /// The lane thread's WaitProgress while it runs a handler (lane_wait_until).
  struct LaneProgress : WaitProgress {
    explicit LaneProgress(System* s) : sys(s) {}
    bool wait_until(const CallState& w, std::chrono::steady_clock::time_point tp) override { return sys->lane_wait_until(w, tp); }
    System* sys;
  };
  /// A Call from another process that came before one it must follow.
  struct Held {
    uint64_t target;
    Item item;
  };
  /// What has arrived from one process: the next sequence number to deliver, and those that came early.
  struct SeqIn {
    uint64_t next = 1;
    std::map<uint64_t, Held> held;
  };

  /// True when values take the lane (the others go by CAF; see kLaneSmallBytes); their bytes into *weight
  /// (for lane_encode's buffer).
  bool lane_fits(const List& values, int dest, bool one_way = false, int64_t* weight = nullptr) const {
    int64_t total = 0, largest = 0;
    for (const Value& v : values) weigh(v, total, largest);
    if (weight) *weight = total;
    // To another node with TROUPE_ACTOR_LANE_REMOTE_BYTES=N set: only a message with a tensor of N bytes
    // or more takes the lane, and a one-way message that fits in one eager head (see kLaneRemoteBytes).
    if (lane_remote_bytes_ > 0 && !lane_->on_node(dest)) {
      return largest >= lane_remote_bytes_ || (one_way && total <= lane_inline_bytes_);
    }
    return total <= lane_small_bytes_ || largest >= lane_body_bytes_;
  }

  /// How many bytes of tensors a message to `dest` carries inside its head. On this node: MPI's eager
  /// limit less the head's fields (a head within it leaves as it is posted). To another node: what fits
  /// in the receive the peer posted ahead for heads (MessageLane::slot_bytes), so that a tensor of up to
  /// 64 KB travels in one TCP message, as raw MPI's does, not as a head and a body whose receive the
  /// peer posts only once it has read the head (a 64 KB stream between two test hosts: 0.88-1.07 of raw
  /// MPI against 0.78-0.83, 3 alternated runs; TROUPE_ACTOR_LANE_REMOTE_INLINE_BYTES sets it).
  int64_t inline_budget(int dest) const { return lane_->on_node(dest) ? lane_inline_bytes_ : lane_remote_inline_bytes_; }

  uint64_t next_seq(int dest) { return seq_out_[dest].fetch_add(1, std::memory_order_relaxed) + 1; }

  /// The lane's head (fields and the values' blob) for `values`: tensors in it, in order, while their bytes
  /// together stay within `budget` (inline_budget(dest); lane_inline_bytes_ when not given); the others
  /// to `bodies` (contiguous CPU), their sizes into lh.bodies.
  /// Into `head` (cleared; its capacity kept: the callers on the hot path pass a buffer of their thread's,
  /// lane_head_buffer(), which a head copied into a ring leaves as it was, so it is not allocated anew
  /// per message: a 4 KB head's malloc also consolidated glibc's fast bins each time).
  void lane_encode(std::string& head, wire::LaneHead& lh, const List& values, std::vector<Tensor>& bodies, int64_t weight = -1,
                   int64_t budget = -1) {
    if (budget < 0) budget = lane_inline_bytes_;
    // The fields (no bodies yet: the body count is their last 4 bytes), then the values' blob straight
    // after them, in one buffer sized ahead; a message with bodies gets their sizes put in after the
    // count (one move of the blob). Until 2026-11-28 the blob was built apart and copied in after the
    // fields (a second allocation and copy of every inlined tensor).
    // `weight`: the values' bytes as lane_fits weighed them (negative: weighed here).
    lh.bodies.clear();
    int64_t total = weight, largest = 0;
    if (total < 0) {
      total = 0;
      for (const Value& v : values) weigh(v, total, largest);
    }
    head.clear();
    head.reserve(static_cast<size_t>(96 + static_cast<int64_t>(lh.text.size()) + std::min(total, budget + 4096)));
    wire::encode_lane_head(lh, head);
    const size_t count_at = head.size() - sizeof(uint32_t);
    // (The offloader reaches its state through one pointer: a lambda that captured each by reference
    // outgrew std::function's inline buffer, a heap allocation per message.)
    struct Offload {
      int64_t inlined, limit;
      std::vector<Tensor>* bodies;
      wire::LaneHead* lh;
    } off{0, budget, &bodies, &lh};
    wire::encode(
        values, head, [](const ActorRef&) -> uint32_t { throw ActorError("[actors] wire: an ActorRef on the lane"); },
        [o = &off](const Tensor& t0) -> int64_t {
          const int64_t n = static_cast<int64_t>(t0.nbytes());
          if (o->inlined + n <= o->limit) {
            o->inlined += n;
            return -1;
          }
          Tensor t = t0.is_cpu() ? t0 : t0.cpu();
          if (!t.is_contiguous()) t = t.contiguous();
          o->bodies->push_back(t);
          o->lh->bodies.push_back(t.nbytes());
          return static_cast<int64_t>(o->bodies->size() - 1);
        });
    if (!lh.bodies.empty()) {
      const uint32_t count = static_cast<uint32_t>(lh.bodies.size());
      std::memcpy(head.data() + count_at, &count, sizeof count);
      std::string sizes(lh.bodies.size() * sizeof(uint64_t), '\0');
      for (size_t i = 0; i < lh.bodies.size(); ++i) std::memcpy(sizes.data() + i * sizeof(uint64_t), &lh.bodies[i], sizeof(uint64_t));
      head.insert(count_at + sizeof count, sizes);
    }
  }
  /// This thread's buffer for the heads it encodes (lane_encode).
  static std::string& lane_head_buffer() {
    static thread_local std::string buf;
    return buf;
  }

  /// Queues `it` for actor `target` of this process, or adds it to `refused` with the reason it cannot be.
  /// Under seq_mu_.
  void place(uint64_t target, Item&& it, std::vector<std::pair<Item, std::string>>& refused) {
    std::shared_ptr<Host> h;
    std::string why;
    {
      std::lock_guard<std::mutex> g(mu_);
      auto f = hosts_.find(static_cast<caf::actor_id>(target));
      if (f != hosts_.end()) h = f->second.lock();
      if (!h) {
        auto gn = gone_.find(static_cast<caf::actor_id>(target));
        why = gn != gone_.end() ? gn->second : "rank " + std::to_string(first_rank_) + " has no actor " + std::to_string(target);
      }
    }
    if (h) {
      // Read by the lane thread, for an idle actor that allows inline requests: run on the lane thread
      // after the poll (run_lane_calls), instead of waking the actor's thread; what comes for it meanwhile
      // queues behind it (running_ is set), so one message at a time and the sender's order hold.
      // A Call for an actor already claimed in this poll runs after the ones claimed (extend_claim).
      if (t_lane_runs && it.lane_from >= 0 && !it.exit) {
        int64_t claimed = 0;
        for (const LaneRun& r : *t_lane_runs) claimed += r.host == h ? 1 : 0;
        if (claimed > 0 ? h->extend_claim(lane_run_inline_ns_, claimed) : h->claim_idle(lane_run_inline_ns_)) {
          t_lane_runs->push_back(LaneRun{std::move(h), std::move(it)});
          return;
        }
      }
      auto gone = h->push(std::move(it), caf::actor_cast<caf::actor>(h->addr));
      if (!gone) return;
      why = *gone;
    }
    if (it.call.id != 0) refused.emplace_back(std::move(it), why);
  }

  /// A head from rank `src`: its values decoded (its bodies received into fresh tensors), then a Call
  /// delivered in its sequence or a Reply completing its request.
  void on_lane_message(int src, std::string_view head) {
    wire::LaneHead lh;
    try {
      lh = wire::decode_lane_head(head.data(), head.size());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "[actors] lane: a malformed message from rank %d was dropped: %s\n", src, e.what());
      return;
    }
    g_lane_trace.record(lh.id, lh.kind == wire::LaneHead::kReply ? 4 : 1);
    note_remote(src, true, lh.kind != wire::LaneHead::kReply);
    List values;
    std::string err;
    // The fetcher's state behind one pointer (see lane_encode's Offload).
    struct Fetch {
      size_t next;
      const wire::LaneHead* lh;
      comm::MessageLane* lane;
      int src;
    } fetch{0, &lh, lane_.get(), src};
    size_t& next = fetch.next;
    try {
      values = wire::decode(
          head.data() + lh.blob_offset, head.size() - lh.blob_offset,
          [](uint32_t, std::string, int) -> ActorRef { throw ActorError("[actors] wire: an ActorRef on the lane"); },
          [f = &fetch](ScalarType dtype, const std::vector<int64_t>& shape, int64_t idx) {
            const std::vector<uint64_t>& bodies = f->lh->bodies;
            if (idx < 0 || static_cast<size_t>(idx) != f->next || f->next >= bodies.size()) {
              throw ActorError("[actors] wire: lane body " + std::to_string(idx) + " where body " + std::to_string(f->next) +
                               " of " + std::to_string(bodies.size()) + " comes next");
            }
            uint64_t numel = 1;
            for (int64_t d : shape) numel *= static_cast<uint64_t>(d);  // bounded by the decoder
            const uint64_t want = numel * element_size(dtype);
            if (want != bodies[f->next]) {
              throw ActorError("[actors] wire: a lane tensor of " + std::to_string(want) + " bytes whose body has " +
                               std::to_string(bodies[f->next]));
            }
            ++f->next;
            return f->lane->recv_body(f->src, dtype, shape, kLaneBodyTimeout);
          });
    } catch (const std::exception& e) {
      err = e.what();
      values.clear();
    }
    for (; next < lh.bodies.size(); ++next) {  // what a failed decode left: the next head must line up
      try {
        lane_->skip_body(src, static_cast<int64_t>(lh.bodies[next]), kLaneBodyTimeout);
      } catch (const std::exception&) {
        break;
      }
    }
    if (lh.kind == wire::LaneHead::kReply) {
      if (!err.empty()) finish(lh.id, false, Value(), "its reply could not be decoded: " + err);
      else finish(lh.id, lh.ok, values.empty() ? Value() : std::move(values.front()), lh.text);
      return;
    }
    Item it;
    it.exit = lh.kind == wire::LaneHead::kStop;
    it.call.id = it.exit ? 0 : lh.id;
    it.call.method = std::move(lh.text);
    it.call.args.values = std::move(values);
    if (!err.empty()) it.call.args.ext().decode_error = err;
    it.call.from_rank = src;
    it.lane_from = src;
    deliver(src, lh.seq, lh.target, std::move(it));
  }

  /// The lane thread: polls (yielding between looks) while messages come and while its sends are in
  /// flight, then sleeps on the doorbell (at most lane_max_nap_), so idle ranks sharing cores cost little
  /// and a sleeping one wakes when a peer posts to it.
  /// One turn of the lane thread's polling (lane_loop, and lane_wait_until inside a handler): polls the
  /// lane when no waiter does (Calls claimed for idle inline actors go to `runs`; null: to their actors'
  /// threads), then spins while messages came within lane_spin_ or a large send is under way (MPI moves it
  /// only while polled), else sleeps on the doorbell at most `nap`, without the poll lock (a waiter may poll
  /// meanwhile, and a ring wakes this thread anyway). `last`: when a message last came.
  void lane_turn(std::vector<LaneRun>* runs, std::chrono::steady_clock::time_point& last,
                 std::chrono::microseconds nap, bool top = false) {
    bool got = false, busy = false, polled = false, handed = false;
    {
      std::unique_lock<std::mutex> g(lane_progress_mu_, std::try_to_lock);
      if (g.owns_lock()) {
        polled = true;
        t_lane_runs = runs;
        const uint64_t woke = t_woke_actors;
        got = lane_poll_some();
        t_lane_runs = nullptr;
        busy = !got && lane_->pending_sends() > 0;
        handed = t_woke_actors != woke;
      }
    }
    if (handed && lane_yield_) sched_yield();
    const auto now = std::chrono::steady_clock::now();
    if (got) {
      last = now;
    } else if (busy || now - last < lane_spin_ ||
               (polled && lane_waiters_.load(std::memory_order_relaxed) == 0 && remote_recent(true, now))) {
      // (While a waiter polls, this thread sleeps: two threads of a process polling, and the peer's, took
      // turns on 2 cores a time slice at a time, 1 ms for a 4 KB reply in 1% of requests. The waiter's
      // polling(false) wakes it when a message came.)
      cpu_relax();  // no sched_yield: see lane_wait
    } else {
      // (`top`: the lane thread's own loop; a waiter polls: see kLanePolledNapUs.)
      const bool polled_nap = top && lane_polled_nap_ > nap && lane_pollers_.load(std::memory_order_relaxed) > 0;
      lane_->idle_wait(polled_nap ? lane_polled_nap_ : nap);
    }
  }

  void lane_loop() {
    auto last = std::chrono::steady_clock::now();
    std::vector<LaneRun> runs;
    LaneTrace::t_lane_thread = true;
    while (!lane_stop_.load(std::memory_order_relaxed)) {
      lane_turn(lane_run_inline_ns_ > 0 ? &runs : nullptr, last, lane_max_nap_, /*top=*/true);
      if (!runs.empty()) {  // without the poll lock: a handler that waits polls the lane itself
        run_lane_calls(runs, true);
        last = std::chrono::steady_clock::now();
      }
    }
  }

  /// Runs the Calls this thread claimed while it polled (place) in the order read, each on its idle actor,
  /// here. On the lane thread a wait inside a handler keeps the lane moving (lane_wait_until) instead of
  /// sleeping: no other thread would receive its reply.
  /// On a waiter that read them (lane_wait; `lane_thread` false) a wait inside a handler sleeps as any
  /// other: the lane thread is free to read its reply.
  void run_lane_calls(std::vector<LaneRun>& runs, bool lane_thread) {
    t_lane_handler = true;
    if (lane_thread) wait_progress() = &lane_progress_;
    for (size_t i = 0; i < runs.size(); ++i) {
      bool last = true;  // the last Call claimed for its actor in this poll
      for (size_t j = i + 1; j < runs.size() && last; ++j) last = runs[j].host != runs[i].host;
      runs[i].host->run_claimed(runs[i].item, last);
    }
    if (lane_thread) wait_progress() = nullptr;
    t_lane_handler = false;
    runs.clear();
  }

  /// A wait on the lane thread inside a handler (CallState::wait_until through wait_progress()): polls
  /// the lane while messages come, else sleeps on the doorbell kLaneNestedNap at a time, until `w`
  /// completes or `tp`; true when complete. Calls read meanwhile go to their actors' threads.
  bool lane_wait_until(const CallState& w, std::chrono::steady_clock::time_point tp) {
    using Clock = std::chrono::steady_clock;
    auto last = Clock::now();
    while (!w.done()) {
      const auto now = Clock::now();
      if (now >= tp) return w.done();
      if (lane_stop_.load(std::memory_order_relaxed)) {  // stop(): the lane goes; sleep as any waiter
        WaitProgress* self = std::exchange(wait_progress(), nullptr);
        const bool r = w.wait_until(tp);
        wait_progress() = self;
        return r;
      }
      lane_turn(nullptr, last, std::chrono::duration_cast<std::chrono::microseconds>(
                                   std::min<Clock::duration>(kLaneNestedNap, tp - now) + std::chrono::microseconds(1)));
    }
    return true;
  }

  /// Stops the lane thread (stop()); the lane itself stays until the system is gone.
  void stop_lane() {
    if (!lane_thread_.joinable()) return;
    {
      std::lock_guard<std::mutex> g(lane_progress_mu_);
      lane_on_.store(false, std::memory_order_release);
    }
    lane_stop_.store(true);
    lane_->abort();
    lane_thread_.join();
  }

  /// Why an actor ended, in words ("stopped", "its process is unreachable", or CAF's text).
  static std::string describe_exit(System* sys, const caf::error& reason) {
    if (reason == caf::exit_reason::remote_link_unreachable) {
      return "its process is unreachable: killed, or the connection to it was lost (remote_link_unreachable)";
    }
    if (reason == caf::exit_reason::user_shutdown) return "it was stopped (user_shutdown)";
    return sys->render(reason);
  }

  static caf::behavior router_behavior(caf::event_based_actor* self, System* sys) {
    self->set_down_handler([=](caf::down_msg& dm) { sys->on_down(dm.source, describe_exit(sys, dm.reason)); });
    self->delayed_send(self, kTick, tr_tick_atom::value);
    return {
        [=](Reply& r) {
          Value v;
          if (r.ok && r.result.decode_error().empty() && r.result.awaits_data_plane()) {
            std::string err = await_data_plane(r.result, default_timeout());
            if (!err.empty()) {
              sys->finish(r.id, false, Value(), err);
              return;
            }
          }
          if (r.ok && !r.result.decode_error().empty()) {
            sys->finish(r.id, false, Value(), "its reply could not be decoded: " + r.result.decode_error());
            return;
          }
          if (r.ok && !r.result.values.empty()) v = std::move(r.result.values.front());
          sys->finish(r.id, r.ok, std::move(v), r.error);
        },
        [=](Routed& r) {  // a Call by CAF while the lane is on: delivered in its sender's sequence
          const int src = r.call.from_rank;
          if (src < 0 || src >= sys->size()) return;
          Item it;
          it.call = std::move(r.call);
          it.reply_to = self->current_sender();
          sys->deliver(src, r.seq, r.target, std::move(it));
        },
        [=](tr_mon_atom, caf::actor& a) { self->monitor(a); },
        [=](tr_tick_atom) {
          sys->sweep();
          self->delayed_send(self, kTick, tr_tick_atom::value);
        },
    };
  }

  static caf::behavior host_behavior(caf::event_based_actor* self, std::shared_ptr<Host> h) {
    // On exit (stop(), or a failure) the queued requests fail and the rank's directory forgets the name.
    System* sys = h->sys;
    caf::actor_id id = self->id();
    const bool named = h->name != service_name(h->rank);
    // (It holds the host: CAF drops the behavior, and with it the other reference, before it runs this.)
    self->attach_functor([sys, id, named, h, rank = h->rank, name = h->name](const caf::error& reason) {
      std::string why = describe_exit(sys, reason);
      sys->forget_host(id, why);
      h->close(why);
      if (!named) return;
      try {
        if (sys->running_) sys->service(rank).send("forget", name);
      } catch (const std::exception&) {
      }
    });
    return {
        [=](Call& c) { h->push_remote(self, std::move(c), self->current_sender()); },
        [=](tr_drain_atom) { h->drain(self, true); },
    };
  }

 public:
  /// Runs `method(args)` on `h`'s actor (its handler, or the error when there is none or it threw).
  /// `early` (when given) is the answer reply_now sends; its `answered` tells whether it did.
  static void invoke(Host& h, const std::string& method, const List& args, Value& result, std::string& error,
                     EarlyAnswer* early = nullptr) {
    Handler* fn = h.handler(ActorAccess::handlers(*h.actor), method);
    if (!fn) {
      std::string known;
      for (const auto& m : h.actor->methods()) known += (known.empty() ? "" : ", ") + m;
      error = "it has no method '" + method + "' (its methods: " + known + ")";
      return;
    }
    struct Scope {
      EarlyAnswer* prev;
      ~Scope() { t_answer = prev; }
    } scope{t_answer};
    if (early) early->actor = h.actor.get();
    t_answer = early;
    try {
      result = (*fn)(args);
    } catch (const std::exception& e) {
      error = std::string("the handler threw: ") + e.what();
    } catch (...) {
      error = "the handler threw a non-std exception";
    }
  }

  /// Runs one message of `h` (on its CAF actor or on a waiting caller) and answers it.
  static void dispatch(Host& h, Item& item) {
    Call& c = item.call;
    Value result;
    std::string error;
    if (c.args.extra) {  // only a message from another process has one
      if (c.args.decode_error().empty() && c.args.awaits_data_plane()) error = await_data_plane(c.args, default_timeout());
      if (error.empty() && !c.args.decode_error().empty()) error = "its arguments could not be decoded: " + c.args.decode_error();
    }
    if (item.lane_from >= 0) g_lane_trace.record(c.id, 2);
    EarlyAnswer early;
    early.host = &h;
    early.item = &item;
    if (error.empty()) {
      if (h.inline_ok && h.sys->lane_run_inline_ns_ > 0) {  // how long it takes decides where the next Call from the lane runs
        const auto t0 = std::chrono::steady_clock::now();
        invoke(h, c.method, c.args.values, result, error, &early);
        h.note_run(std::chrono::steady_clock::now() - t0);
      } else {
        invoke(h, c.method, c.args.values, result, error, &early);
      }
    }
    const bool ok = error.empty();
    if (early.answered) {
      if (!ok) report_failed_after_answer(c.method, h.name, h.rank, error);
      return;
    }
    if (c.id == 0) {
      if (!ok) {
        std::fprintf(stderr, "[actors] message '%s' to actor '%s' (rank %d) failed: %s\n", c.method.c_str(), h.name.c_str(),
                     h.rank, error.c_str());
      }
      return;
    }
    answer(h, item, ok, std::move(result), std::move(error));
  }

  /// Sends the answer to request `item` (id != 0) of `h`: its result, or its error.
  static void answer(Host& h, Item& item, bool ok, Value result, std::string error) {
    Call& c = item.call;
    if (item.state) {  // a request from this process
      if (ok) item.state->complete(std::move(result));
      else item.state->fail("[actors] " + item.state->what() + " failed: " + error);
      return;
    }
    if (item.lane_from >= 0) {  // it came on the lane: so goes the reply
      h.sys->lane_reply(item.lane_from, c.id, ok, std::move(result), std::move(error));
      return;
    }
    const auto& sender = item.reply_to;
    if (!sender || sender->node() == h.sys->node()) {
      h.sys->finish(c.id, ok, std::move(result), error);  // same process: complete the Future directly
    } else {
      Reply r{c.id, ok, std::move(error), Payload{}};
      if (ok) r.result.values.push_back(std::move(result));
      if (ok && c.from_rank >= 0) send_data_plane(r.result, c.from_rank);
      caf::anon_send(caf::actor_cast<caf::actor>(sender), std::move(r));
    }
  }

 private:
  // The lane thread yields its core once after a poll that woke an actor's thread (a Call for an actor
  // that does not run inline: CAF's shared workers or its own thread) when this process may use no more
  // cores than the node has ranks (mpirun binds each of 2 ranks to a core of its own): it spins on after
  // a Call (lane_spin_), and the woken thread waited for that core until the spin ended. Requests to
  // the benchmark's shared-thread sink on one host took 0.022-0.025 ms at 4 KB and 0.028-0.045 at 64 KB
  // without, 0.010-0.013 and 0.016-0.020 with (6 alternated runs each; unbound, 2 ranks on 2 cores:
  // 0.050-0.056 and 0.028-0.035 at 4 KB). Not where the process has cores to spare: between two test
  // hosts (one rank each) a forced yield made that sink slower (0.145 ms against 0.045 at 4 KB, one run
  // each). TROUPE_ACTOR_LANE_YIELD=0/1 overrides.
  bool lane_yield_ = false;
  int first_rank_;
  int local_ranks_;
  int size_;
  bool networked_;
  caf::actor_system_config cfg_;
  std::unique_ptr<caf::actor_system> system_;
  caf::actor router_;
  Gate gate_;
  std::mutex mu_;
  std::atomic<bool> running_{true};
  bool left_running_ = false;  // stop() left the actor system to the process's exit
  std::atomic<uint64_t> next_id_{1};
  std::unordered_map<uint64_t, Pending> pending_;  // requests to actors of other processes
  std::vector<std::weak_ptr<CallState>> watched_;               // then() on requests in this process: failed at their deadline
  std::set<caf::actor_addr> monitored_;
  std::map<caf::actor_addr, std::string> dead_;
  std::unordered_map<caf::actor_id, std::weak_ptr<Host>> hosts_;  // the mailboxes of this process's actors
  std::atomic<size_t> n_dead_{0};
  std::vector<ActorRef> services_;
  std::vector<caf::actor_addr> local_actors_;
  // Actors of this process that finished their cleanup (watch_end), for stop().
  struct EndWatch {
    std::mutex mu;
    std::condition_variable cv;
    std::set<caf::actor_id> ended;
  };
  std::shared_ptr<EndWatch> end_watch_ = std::make_shared<EndWatch>();
  // The lane (see lane_call).
  std::shared_ptr<comm::MessageLane> lane_;
  std::atomic<bool> lane_on_{false};
  std::atomic<bool> lane_stop_{false};
  std::atomic<bool> lane_complained_{false};
  std::thread lane_thread_;
  std::mutex lane_progress_mu_;  // one thread polls the lane at a time (the lane thread or a waiter)
  std::shared_ptr<LaneWaiter> lane_waiter_;
  LaneProgress lane_progress_{this};
  int64_t lane_run_inline_ns_ = kLaneRunInlineUs * 1000;  // see kLaneRunInlineUs (0: off)
  int64_t lane_inline_bytes_ = 0;
  int64_t lane_remote_inline_bytes_ = 0;  // the same to a rank of another node (inline_budget)
  int64_t lane_small_bytes_ = kLaneSmallBytes;
  int64_t lane_body_bytes_ = kLaneBodyBytes;
  int64_t lane_remote_bytes_ = kLaneRemoteBytes;
  std::chrono::microseconds lane_spin_{kLaneSpinUs}, lane_max_nap_{kLaneNapUs}, lane_wait_spin_{kLaneWaitSpinUs};
  // kLaneRemoteSpinUs in ns (0 when every rank is on this node), and when (steady_clock ns) a message last
  // went to or came from a rank of another node, and came from one (note_remote).
  int64_t lane_remote_spin_ns_ = 0;
  std::atomic<int64_t> lane_remote_ns_{0}, lane_remote_in_ns_{0};
  std::atomic<int> lane_waiters_{0};  // threads in lane_wait or lane_post (LaneWaiterCount)
  std::atomic<int> lane_pollers_{0};  // threads in lane_wait (see kLanePolledNapUs)
  std::atomic<int64_t> lane_remote_call_ns_{0};  // when a Call last came from another node (note_remote)
  std::chrono::microseconds lane_polled_nap_{0};  // kLanePolledNapUs; 0 when every rank is on this node
  std::unique_ptr<std::atomic<uint64_t>[]> seq_out_;  // per rank: the last sequence number given
  std::mutex seq_mu_;
  std::vector<SeqIn> seq_in_;                          // per rank (under seq_mu_)
  std::vector<caf::actor> routers_;                    // per rank (under mu_)
  std::unordered_map<caf::actor_id, std::string> gone_;  // actors of this process that ended, why (under mu_)
};

namespace {
std::mutex g_mu;
std::shared_ptr<System> g_system;
// The same system, for the hot path (requests, sends) without a lock or a reference count: it stays alive
// while any Runtime holds it, and is cleared before stop() ends it.
std::atomic<System*> g_raw{nullptr};

std::shared_ptr<System> current() {
  std::lock_guard<std::mutex> g(g_mu);
  return g_system;
}

std::shared_ptr<System> require_current(const char* fn) {
  auto s = current();
  if (!s) {
    throw ActorError(std::string("[actors] ") + fn +
                     ": no actor runtime runs in this process (launch::run / launch::init start one: ctx.actors())");
  }
  return s;
}
}  // namespace

ActorRef make_ref(caf::actor h, std::string name, int rank) {
  auto impl = std::make_shared<RefImpl>();
  if (System* s = g_raw.load(std::memory_order_acquire)) impl->local = s->find_host(h);
  impl->handle = std::move(h);
  impl->name = std::move(name);
  impl->rank = rank;
  return ActorRef(std::move(impl));
}

// ---- Host: the mailbox of an actor in this process

namespace {
std::mutex g_stop_hook_mu;
std::function<void(const std::string&)> g_stop_hook;  // under g_stop_hook_mu
std::atomic<bool> g_has_stop_hook{false};

void run_stop_hook(const std::string& actor) {
  if (!g_has_stop_hook.load(std::memory_order_acquire)) return;
  std::function<void(const std::string&)> hook;
  {
    std::lock_guard<std::mutex> g(g_stop_hook_mu);
    hook = g_stop_hook;
  }
  if (hook) hook(actor);
}
}  // namespace

void set_stop_hook(std::function<void(const std::string& actor)> hook) {
  std::lock_guard<std::mutex> g(g_stop_hook_mu);
  g_has_stop_hook.store(static_cast<bool>(hook), std::memory_order_release);
  g_stop_hook = std::move(hook);
}

void Host::run(Item& it) { System::dispatch(*this, it); }

void Host::drain(caf::event_based_actor* self, bool from_post) {
  std::unique_lock<SpinLock> lk(mu_);
  if (from_post) posted_ = false;
  size_t done = 0;
  while (!running_ && !closed_ && !q_.empty()) {
    if (done >= kBudget) {
      if (!posted_) {
        posted_ = true;
        lk.unlock();
        caf::anon_send(caf::actor_cast<caf::actor>(self), tr_drain_atom::value);
      }
      return;
    }
    ItemQueue::Block* chain = q_.take_all();
    running_ = true;
    lk.unlock();
    bool stop = false;
    std::vector<Item> rest;  // after ActorRef::stop()'s marker: they fail, as after CAF's exit
    for (ItemQueue::Block* b = chain; b; b = b->next) {
      for (size_t k = b->begin; k < b->end; ++k) {
        Item& it = b->item(k);
        count_taken(1);
        if (it.exit) stop = true;
        else if (stop) rest.push_back(std::move(it));
        else run(it);
        it.~Item();
        ++done;
      }
      b->begin = b->end;
    }
    if (stop) {
      // Closed in the same hold of the lock that clears running_: in between, a caller waiting on a
      // request sent after stop() (run_inline), or a one-way message (push), found the host idle and
      // open and ran it on the stopped actor (a supervised host's state query then did not notice the
      // stop, and its restart came one call late).
      const std::string why = "it was stopped (user_shutdown)";
      lk.lock();
      q_.give_back(chain);
      running_ = false;
      close_locked(why, rest);
      lk.unlock();
      run_stop_hook(name);
      fail_left(why, rest);
      self->quit(caf::exit_reason::user_shutdown);
      return;
    }
    lk.lock();
    q_.give_back(chain);
    running_ = false;
  }
}

void Host::run_here(Item& it, const caf::actor& handle) {
  {
    InferenceMode mode(false);  // as on the actor's own threads
    run(it);
  }
  bool post;
  {
    std::lock_guard<SpinLock> g(mu_);
    running_ = false;
    post = !q_.empty() && !posted_ && !closed_;
    if (post) posted_ = true;
  }
  if (post) caf::anon_send(handle, tr_drain_atom::value);
}

bool Host::run_inline(uint64_t id, const CallState&) {
  if (!inline_ok) return false;
  // The request and the few queued before it (a one-way message such as RemoteModule's "rel") run here,
  // in their order; a stop marker before it leaves it to the actor.
  constexpr size_t kAhead = 8;
  std::array<Item, kAhead + 1> here;
  size_t n = 0;
  {
    std::lock_guard<SpinLock> g(mu_);
    if (closed_ || running_ || q_.empty()) return false;
    for (Item* it; n <= kAhead && (it = q_.at(n)) && !it->exit; ++n) {
      if (it->call.id == id && !it->reply_to && it->lane_from < 0) break;
    }
    Item* mine = q_.at(n);
    if (n > kAhead || !mine || mine->exit) return false;
    for (size_t k = 0; k <= n; ++k) q_.pop_front(here[k]);
    count_taken(static_cast<int64_t>(n + 1));
    running_ = true;
  }
  {
    InferenceMode mode(false);  // as on the actor's own threads: grad mode on, inference mode off
    for (size_t k = 0; k <= n; ++k) run(here[k]);
  }
  end_inline();
  return true;
}

void Host::end_inline() {
  bool post;
  {
    std::lock_guard<SpinLock> g(mu_);
    running_ = false;
    post = !q_.empty() && !posted_ && !closed_;
    if (post) posted_ = true;
  }
  if (post) {
    if (auto a = caf::actor_cast<caf::actor>(addr)) caf::anon_send(a, tr_drain_atom::value);
  }
}

bool Host::call_here(const std::string& method, const List& args, Value& result, std::string& error) {
  if (!inline_ok) return false;
  {
    std::lock_guard<SpinLock> g(mu_);
    if (closed_ || running_ || posted_ || !q_.empty()) return false;
    running_ = true;
  }
  {
    InferenceMode mode(false);  // as on the actor's own threads: grad mode on, inference mode off
    Value answered;
    EarlyAnswer early;
    early.kept = &answered;
    System::invoke(*this, method, args, result, error, &early);
    if (early.answered) {
      if (!error.empty()) report_failed_after_answer(method, name, rank, error);
      result = std::move(answered);
      error.clear();
    }
  }
  end_inline();
  return true;
}

/// Actor::reply_now: answers the message `actor`'s handler on this thread handles.
void answer_now(const Actor* actor, Value result) {
  EarlyAnswer* a = t_answer;
  if (!a || a->actor != actor) throw ActorError("[actors] reply_now() outside a handler of actor '" + actor->name() + "'");
  if (a->answered) throw ActorError("[actors] reply_now() called twice in one handler of actor '" + actor->name() + "'");
  a->answered = true;
  if (a->kept) *a->kept = std::move(result);
  else if (a->item->call.id != 0) System::answer(*a->host, *a->item, true, std::move(result), std::string());
}

void Host::close(const std::string& reason, std::vector<Item> left) {
  {
    std::lock_guard<SpinLock> g(mu_);
    if (closed_) return;
    close_locked(reason, left);
  }
  fail_left(reason, left);
}

void Host::close_locked(const std::string& reason, std::vector<Item>& left) {
  if (closed_) return;
  closed_ = true;
  closed_reason_ = reason;
  while (!q_.empty()) {
    left.emplace_back();
    q_.pop_front(left.back());
  }
  taken_.store(pushed_.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

void Host::fail_left(const std::string& reason, std::vector<Item>& left) {
  for (auto& x : left) {
    if (x.state) x.state->fail("[actors] " + x.state->what() + " failed: the actor is gone (" + reason + ")");
    else if (x.lane_from >= 0 && x.call.id != 0) sys->lane_reply(x.lane_from, x.call.id, false, Value(), "the actor is gone (" + reason + ")");
  }
}

DataPlane g_data_plane;
std::atomic<bool> g_has_data_plane{false};
std::atomic<int64_t> g_next_dp_id{1};

const DataPlane* data_plane() { return g_has_data_plane.load(std::memory_order_acquire) ? &g_data_plane : nullptr; }

namespace {
void collect_data_plane(const DataPlane& dp, const Value& v, std::vector<Tensor>& out) {
  if (v.is<Tensor>()) {
    if (on_data_plane(dp, v.as<Tensor>())) out.push_back(v.as<Tensor>());
  } else if (v.is<List>()) {
    for (const auto& x : v.as<List>()) collect_data_plane(dp, x, out);
  }
}
}  // namespace

void send_data_plane(Payload& p, int peer) {
  const DataPlane* dp = data_plane();
  if (!dp || peer < 0 || peer == dp->rank) return;
  std::vector<Tensor> big;
  for (const auto& v : p.values) collect_data_plane(*dp, v, big);  // the encoder's order
  for (const Tensor& t0 : big) {
    Tensor t = t0.is_cpu() ? t0 : t0.cpu();
    if (!t.is_contiguous()) t = t.contiguous();
    const int64_t id = g_next_dp_id.fetch_add(1) % (int64_t{1} << 30) + 1;
    dp->group->send_async(t, peer, static_cast<int>(id));
    p.ext().dp_ids.push_back(id);
  }
}

std::string await_data_plane(Payload& p, std::chrono::milliseconds timeout) {
  try {
    for (auto& w : p.ext().dp_in) w->wait(timeout);
  } catch (const std::exception& e) {
    return std::string("its tensor data did not arrive on the data plane: ") + e.what();
  }
  p.ext().dp_in.clear();
  return "";
}

void watch_deadline(const CallStatePtr& st) {
  if (System* s = g_raw.load(std::memory_order_acquire)) s->watch(st);
}

bool call_inline(const ActorRef& to, const std::string& method, const List& args, Value& result) {
  if (!to.valid()) return false;
  std::shared_ptr<Host> host = to.impl()->local.lock();
  if (!host || !host->inline_ok || !host->sys->running()) return false;
  std::string error;
  if (!host->call_here(method, args, result, error)) return false;
  if (!error.empty()) throw ActorError("[actors] request '" + method + "' to actor " + to.str() + " failed: " + error);
  return true;
}

CallStatePtr issue(const ActorRef& to, const std::string& method, List args, bool want_reply) {
  System* s = g_raw.load(std::memory_order_acquire);
  if (!s) require_current("request");  // throws the error
  return s->issue(to, method, std::move(args), want_reply);
}

ActorRef spawn_host(int rank, const std::string& name, std::unique_ptr<Actor> actor) {
  return require_current("spawn")->spawn_host(rank, name, std::move(actor));
}

void set_service(int rank, const ActorRef& ref) { require_current("hello")->set_service(rank, ref); }

ActorRef exchange_router(int rank, const ActorRef& router) {
  auto s = require_current("hello");
  s->set_router(rank, router);
  return s->router_ref();
}

}  // namespace detail

// ---- ActorRef

namespace {
const std::string kEmptyName;
}

const std::string& ActorRef::name() const { return impl_ ? impl_->name : kEmptyName; }
int ActorRef::rank() const { return impl_ ? impl_->rank : -1; }
std::string ActorRef::str() const {
  if (!impl_) return "<empty ActorRef>";
  return "'" + impl_->name + "' (rank " + std::to_string(impl_->rank) + ")";
}
std::chrono::milliseconds ActorRef::timeout() const {
  return timeout_.count() > 0 ? timeout_ : default_timeout();
}
ActorRef ActorRef::with_timeout(std::chrono::milliseconds t) const {
  if (t.count() <= 0)
    throw ActorError("[ActorRef::with_timeout] timeout must be positive, got " + std::to_string(t.count()) + " ms");
  ActorRef r = *this;
  r.timeout_ = t;
  return r;
}
void ActorRef::stop() const {
  if (!impl_) return;
  if (auto h = impl_->local.lock()) {  // in this process: after what this thread queued before
    detail::Item it;
    it.exit = true;
    h->push(std::move(it), impl_->handle);
    return;
  }
  detail::System* s = detail::g_raw.load(std::memory_order_acquire);
  if (s && s->lane_stop(*this)) return;  // in its sender's sequence, after what this thread sent before
  caf::anon_send_exit(impl_->handle, caf::exit_reason::user_shutdown);
}
namespace detail {
int64_t queued_messages(const ActorRef& ref) {
  if (!ref.impl()) return -1;
  auto h = ref.impl()->local.lock();
  return h ? h->queued() : -1;
}
}  // namespace detail

bool ActorRef::operator==(const ActorRef& o) const {
  if (!impl_ || !o.impl_) return impl_ == o.impl_;
  return impl_->handle == o.impl_->handle;
}

// ---- Runtime

Runtime::Runtime(int rank, int size, std::shared_ptr<detail::System> sys) : rank_(rank), size_(size), sys_(std::move(sys)) {}
Runtime::~Runtime() = default;

bool Runtime::networked() const { return sys_->networked(); }

ActorRef Runtime::service(int rank) const { return sys_->service(rank); }

std::string Runtime::endpoint(int rank) const {
  if (rank < 0 || rank >= static_cast<int>(sys_->endpoints.size())) return "";
  return sys_->endpoints[rank];
}

std::pair<int64_t, int64_t> Runtime::gate_counts() const { return sys_->gate_counts(); }

Future<ActorRef> Runtime::spawn_on_async(int rank, const std::string& name, const std::string& factory, List args) {
  if (rank < 0 || rank >= size_) {
    throw ActorError("[actors] spawn_on(" + std::to_string(rank) + ", '" + name + "', '" + factory + "'): rank " +
                     std::to_string(rank) + " does not exist (the world has " + std::to_string(size_) + " ranks)");
  }
  return service(rank).request<ActorRef>("spawn", name, factory, std::move(args));
}

ActorRef Runtime::spawn_on_list(int rank, const std::string& name, const std::string& factory, List args) {
  if (rank < 0 || rank >= size_) {
    throw ActorError("[actors] spawn_on(" + std::to_string(rank) + ", '" + name + "', '" + factory + "'): rank " +
                     std::to_string(rank) + " does not exist (the world has " + std::to_string(size_) + " ranks)");
  }
  try {
    return spawn_on_async(rank, name, factory, std::move(args)).get();
  } catch (const ActorError& e) {
    throw ActorError("[actors] spawn_on(" + std::to_string(rank) + ", '" + name + "', '" + factory + "'): " + e.what());
  }
}

std::optional<ActorRef> Runtime::find(const std::string& name) const {
  std::vector<Future<Value>> asks;
  for (int r = 0; r < size_; ++r) asks.push_back(service(r).request<Value>("lookup", name));
  for (auto& f : asks) {
    Value v = f.get();
    if (v.is<ActorRef>()) return v.as<ActorRef>();
  }
  return std::nullopt;
}

ActorRef Runtime::lookup(const std::string& name) const {
  if (auto r = find(name)) return *r;
  std::string known;
  for (const auto& n : names()) known += (known.empty() ? "" : ", ") + n;
  throw ActorError("[actors] lookup('" + name + "'): no actor of that name on any of the " + std::to_string(size_) +
                   " ranks (named actors: " + (known.empty() ? std::string("none") : known) + ")");
}

std::vector<std::string> Runtime::names() const {
  std::vector<Future<std::vector<std::string>>> asks;
  for (int r = 0; r < size_; ++r) asks.push_back(service(r).request<std::vector<std::string>>("names"));
  std::vector<std::string> out;
  for (int r = 0; r < size_; ++r) {
    for (auto& n : asks[r].get()) out.push_back(n + "@" + std::to_string(r));
  }
  return out;
}

// ---- start / stop

namespace {
// Tensors of at least this many bytes go on the data plane across processes. bench/actors_bench (an echo
// through an actor over loopback, mpirun -np 2): up to 256 KB the extra MPI message costs 0.1-0.3 ms more
// than carrying the bytes in the CAF message; at 1 MB they are even; from 4 MB the data plane is 2.5-9x
// faster (BASP moves large payloads slowly).
constexpr int64_t kDataPlaneBytes = int64_t{1} << 20;

/// TROUPE_ACTOR_LANE: "mpi" (or unset) takes the lane under mpirun, "caf" keeps every Call on CAF.
bool lane_wanted() {
  const char* v = std::getenv("TROUPE_ACTOR_LANE");
  if (!v || !*v || std::strcmp(v, "mpi") == 0 || std::strcmp(v, "lane") == 0) return true;
  if (std::strcmp(v, "caf") == 0) return false;
  throw ActorError(std::string("[actors] TROUPE_ACTOR_LANE=") + v + ": expected mpi (the lane) or caf");
}

std::shared_ptr<detail::System> install(std::shared_ptr<detail::System> s) {
  std::lock_guard<std::mutex> g(detail::g_mu);
  if (detail::g_system) throw ActorError("[actors] an actor runtime already runs in this process");
  detail::g_system = s;
  detail::g_raw.store(s.get(), std::memory_order_release);
  return s;
}

std::string host_name() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

/// Every rank's `text` (at most 255 bytes), gathered over `world`.
std::vector<std::string> all_gather_text(const comm::ProcessGroupPtr& world, const std::string& text) {
  constexpr int64_t n = 256;
  Tensor in = zeros({n}, TensorOptions().dtype(kByte));
  std::memcpy(in.data_ptr(), text.data(), std::min<size_t>(text.size(), n - 1));
  std::vector<Tensor> outs;
  for (int r = 0; r < world->size(); ++r) outs.push_back(zeros({n}, TensorOptions().dtype(kByte)));
  world->all_gather(outs, in);
  std::vector<std::string> res;
  for (auto& t : outs) res.emplace_back(static_cast<const char*>(t.data_ptr()));
  return res;
}
}  // namespace

std::vector<std::shared_ptr<Runtime>> start_local(int ranks) {
  if (ranks < 1) throw ActorError("[actors] start_local: needs at least one rank, got " + std::to_string(ranks));
  (void)default_timeout();  // a bad TROUPE_ACTOR_TIMEOUT fails here, naming it
  auto sys = install(std::make_shared<detail::System>(0, ranks, ranks, false));
  try {
    sys->spawn_services();
  } catch (...) {
    stop();
    throw;
  }
  std::vector<std::shared_ptr<Runtime>> out;
  for (int r = 0; r < ranks; ++r) out.push_back(std::make_shared<Runtime>(r, ranks, sys));
  return out;
}

std::shared_ptr<Runtime> start_connected(const comm::ProcessGroupPtr& world) {
  const int rank = world->rank(), size = world->size();
  (void)default_timeout();  // a bad TROUPE_ACTOR_TIMEOUT fails here on every rank, before any collective
  auto sys = install(std::make_shared<detail::System>(rank, 1, size, true));
  try {
    sys->spawn_services();
    // The job's secret: TROUPE_SECRET's hash on every rank, else rank 0's random one, shared over the world.
    std::string secret = auth::secret_from_env();
    if (secret.empty()) {
      Tensor s = zeros({32}, TensorOptions().dtype(kByte));
      if (rank == 0) {
        std::string r = auth::random_secret();
        std::memcpy(s.data_ptr(), r.data(), r.size());
      }
      world->broadcast(s, 0);
      secret.assign(static_cast<const char*>(s.data_ptr()), 32);
    }
    auth::set_job_secret(secret);  // the dashboard's token derives from it (launch/dashboard.h)
    // Loopback when every rank is on this host; across hosts every interface, behind the gate.
    auto hosts = all_gather_text(world, host_name());
    const bool one_host = std::all_of(hosts.begin(), hosts.end(), [&](const std::string& h) { return h == hosts[0]; });
    uint16_t port = sys->publish(secret, one_host ? "127.0.0.1" : nullptr);
    auto ports = all_gather_text(world, std::to_string(port));
    for (int j = 0; j < size; ++j) sys->endpoints.push_back((one_host ? std::string("127.0.0.1") : hosts[j]) + ":" + ports[j]);
    // The data plane: a group of every rank of its own, for tensors of at least the threshold.
    {
      std::vector<int> all(size);
      for (int j = 0; j < size; ++j) all[j] = j;
      comm::GroupOptions o;
      o.name = "actors-data-plane";
      detail::g_data_plane.group = world->new_group(all, o);
      detail::g_data_plane.rank = rank;
      detail::g_data_plane.threshold = detail::env_int("TROUPE_ACTOR_DATA_PLANE_BYTES", kDataPlaneBytes, INT64_MIN);
      if (detail::g_data_plane.threshold.load() <= 0) detail::g_data_plane.threshold = std::numeric_limits<int64_t>::max();
      detail::g_has_data_plane.store(world->backend() != "local", std::memory_order_release);
    }
    // The lane (Calls and Replies as MPI messages; System::lane_call) unless TROUPE_ACTOR_LANE=caf.
    std::shared_ptr<comm::MessageLane> lane;
    if (lane_wanted()) {
#ifdef TROUPE_HAVE_MPI
      lane = comm::make_message_lane(world);  // collective; null when the world is not MPI's
#endif
    }
    // place()'s groups (replicated / sharded) are sub-groups of a group of every rank of their own
    // (placement.cpp), so that making one queues behind nothing else.
    {
      std::vector<int> all(size);
      for (int j = 0; j < size; ++j) all[j] = j;
      comm::GroupOptions o;
      o.name = "actors-groups";
      o.timeout = default_timeout();
      detail::groups_world() = world->new_group(all, o);
    }
    // Rank r connects to every lower rank and says hello (so both sides know each other's service and
    // router). Every rank then learns whether every other got through: a rank that could not fails, and
    // so does every other, naming it (a rank that threw here had left the others in the barrier below
    // for good).
    std::string failed;
    for (int j = 0; j < rank && failed.empty(); ++j) {
      try {
        sys->connect(j, one_host ? "127.0.0.1" : hosts[j], static_cast<uint16_t>(std::stoi(ports[j])));
        sys->set_router(j, sys->service(j).request<ActorRef>("hello", rank, sys->service(rank), sys->router_ref()).get());
      } catch (const std::exception& e) {
        failed = e.what();
        if (failed.empty()) failed = "an error without a text";
      }
    }
    const auto outcomes = all_gather_text(world, failed);
    for (int j = 0; j < size; ++j) {
      if (outcomes[static_cast<size_t>(j)].empty()) continue;
      if (j == rank) throw ActorError(failed);
      throw ActorError("[actors] rank " + std::to_string(rank) + ": the actor systems did not connect: rank " + std::to_string(j) +
                       " failed: " + outcomes[static_cast<size_t>(j)]);
    }
    world->barrier();
    if (lane) sys->start_lane(std::move(lane));
  } catch (...) {
    stop();
    throw;
  }
  return std::make_shared<Runtime>(rank, size, sys);
}

void stop() {
  detail::g_has_data_plane.store(false, std::memory_order_release);
  std::shared_ptr<detail::System> s;
  {
    std::lock_guard<std::mutex> g(detail::g_mu);
    s.swap(detail::g_system);
    detail::g_raw.store(nullptr, std::memory_order_release);
  }
  if (s) s->stop();
  if (s && s->left_running()) {
    // An actor still runs a handler: when it ends, its exit functor reaches this System (forget_host).
    // Kept to the process's exit with the actor system it left (freed here, that was a use after free
    // in ActorsRuntime.StopIsBoundedWhenAHandlerStillRuns under ASan).
    static std::mutex kept_mu;
    static std::vector<std::shared_ptr<detail::System>> kept;
    std::lock_guard<std::mutex> g(kept_mu);
    kept.push_back(std::move(s));
  }
  detail::g_data_plane.group.reset();
  detail::groups_world().reset();
}

bool running() { return detail::current() != nullptr; }

std::string cross_process_path() {
  auto s = detail::current();
  if (!s || !s->networked()) return "local";
  return s->lane_on() ? "lane" : "caf";
}

void set_cross_process_path(const std::string& path) {
  if (path != "lane" && path != "caf") throw ActorError("[actors] set_cross_process_path('" + path + "'): expected 'lane' or 'caf'");
  auto s = detail::require_current("set_cross_process_path");
  if (!s->set_lane_on(path == "lane")) {
    throw ActorError("[actors] set_cross_process_path('lane'): this process has no lane (" +
                     std::string(!s->networked() ? "one process" : "TROUPE_ACTOR_LANE=caf, or the world is not MPI's") + ")");
  }
}

int64_t data_plane_bytes() {
  int64_t t = detail::g_data_plane.threshold.load();
  return t == std::numeric_limits<int64_t>::max() ? 0 : t;
}

void set_data_plane_bytes(int64_t bytes) {
  detail::g_data_plane.threshold = bytes > 0 ? bytes : std::numeric_limits<int64_t>::max();
}

void Actor::reply_now(Value result) { detail::answer_now(this, std::move(result)); }

}  // namespace troupe::actors
