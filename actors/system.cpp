// The process's CAF actor system (runtime.h): start (local or connected over the world group), stop,
// the router actor that completes requests (replies, dead peers, deadlines), the host actor that runs a
// troupe Actor's handlers, ActorRef and Runtime. The only translation unit besides payload.cpp that
// includes CAF.
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <unordered_map>

#include <caf/io/all.hpp>

#include <troupe/actors/auth.h>
#include <troupe/actors/internal/caf_types.h>
#include <troupe/actors/internal/gate.h>
#include <troupe/actors/internal/services.h>
#include <troupe/actors/runtime.h>
#include <troupe/tensor/autograd.h>
#include <troupe/tensor/ops.h>

namespace troupe::actors {
namespace detail {

namespace {
constexpr auto kTick = std::chrono::milliseconds(20);  // how often the router fails expired requests

int64_t env_int(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoll(v) : fallback;
}
}  // namespace

class System;

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
};

/// A FIFO of Items in blocks of kBlock; emptied blocks are kept (up to kKeep) and reused, so a burst of
/// messages lands in warm memory instead of growing a vector into fresh pages. Not thread-safe: the
/// host's lock guards it.
class ItemQueue {
 public:
  static constexpr size_t kBlock = 64;
  struct Block {
    Item items[kBlock];
    size_t begin = 0, end = 0;
    Block* next = nullptr;
  };
  ItemQueue() = default;
  ItemQueue(const ItemQueue&) = delete;
  ItemQueue& operator=(const ItemQueue&) = delete;
  ~ItemQueue() {
    free_chain(head_);
    free_chain(free_);
  }
  bool empty() const { return head_ == nullptr; }
  void push(Item&& it) {
    if (!tail_ || tail_->end == kBlock) {
      Block* b = fresh();
      (tail_ ? tail_->next : head_) = b;
      tail_ = b;
    }
    tail_->items[tail_->end++] = std::move(it);
  }
  /// The i-th queued item, or null.
  Item* at(size_t i) {
    for (Block* b = head_; b; b = b->next) {
      if (i < b->end - b->begin) return &b->items[b->begin + i];
      i -= b->end - b->begin;
    }
    return nullptr;
  }
  /// Removes the first item into `out`.
  void pop_front(Item& out) {
    out = std::move(head_->items[head_->begin]);
    head_->items[head_->begin++] = Item();
    if (head_->begin == head_->end) {
      Block* b = head_;
      head_ = b->next;
      if (!head_) tail_ = nullptr;
      recycle(b);
    }
  }
  /// Every queued block, for the caller to run without the lock and hand back (give_back).
  Block* take_all() {
    Block* h = head_;
    head_ = tail_ = nullptr;
    return h;
  }
  /// Keeps the blocks of a chain from take_all(), whose items were reset.
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
    if (!free_) return new Block;
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

  /// Queues `it`, waking the actor when it is idle; the reason it ended instead when it has.
  std::optional<std::string> push(Item&& it, const caf::actor& handle) {
    bool post;
    {
      std::lock_guard<SpinLock> g(mu_);
      if (closed_) return closed_reason_;
      q_.push(std::move(it));
      post = !running_ && !posted_;
      if (post) posted_ = true;
    }
    if (post) caf::anon_send(handle, tr_drain_atom::value);
    return std::nullopt;
  }
  /// A Call that came as a CAF message (from another process): queued, and run now when nothing runs.
  void push_remote(caf::event_based_actor* self, Call&& c, caf::strong_actor_ptr sender) {
    {
      std::lock_guard<SpinLock> g(mu_);
      if (closed_) return;
      q_.push(Item{std::move(c), std::move(sender), false, nullptr});
      if (running_ || posted_) return;
    }
    drain(self, false);
  }
  /// Runs what is queued (on the CAF actor), at most kBudget messages before it lets CAF deliver what
  /// else waits for the actor (an exit) and comes back.
  void drain(caf::event_based_actor* self, bool from_post);
  bool run_inline(uint64_t id) override;
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

 private:
  static constexpr size_t kBudget = 4096;  // messages per tr_drain
  void run(Item& it);

  SpinLock mu_;
  ItemQueue q_;                        // queued, in arrival order
  bool running_ = false;               // a handler runs (on the actor, or on a waiting caller's thread)
  bool posted_ = false;                // a tr_drain is on its way
  bool closed_ = false;
  std::string closed_reason_;
  std::string last_method_;  // the last handler looked up
  Handler* last_handler_ = nullptr;
};

/// The process's actor system: one per process, shared by the ranks that live in it.
class System {
 public:
  System(int first_rank, int local_ranks, int size, bool networked)
      : first_rank_(first_rank), local_ranks_(local_ranks), size_(size), networked_(networked) {
    cfg_.add_message_type<Call>("troupe_call");
    cfg_.add_message_type<Reply>("troupe_reply");
    // DESIGN.md's measurements: the sharing policy and no middleman workers cut the cross-process
    // round trip from ~285 us to ~118 us.
    cfg_.set("scheduler.policy", caf::atom("sharing"));
    cfg_.set("scheduler.max-threads", env_int("TROUPE_ACTOR_THREADS", 4));
    if (networked_) {
      cfg_.load<caf::io::middleman>();
      cfg_.set("middleman.workers", int64_t{0});
      // A stopped (not killed) peer is only noticed with both set.
      cfg_.set("middleman.heartbeat-interval", caf::timespan(std::chrono::milliseconds(500)));
      cfg_.set("middleman.connection-timeout", caf::timespan(std::chrono::seconds(5)));
    }
    system_ = std::make_unique<caf::actor_system>(cfg_);
    router_ = system_->spawn<caf::detached>(router_behavior, this);
    services_.resize(size_);
  }

  ~System() { stop(); }

  bool networked() const { return networked_; }
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
  void forget_host(caf::actor_id id) {
    std::lock_guard<std::mutex> g(mu_);
    hosts_.erase(id);
  }
  const caf::node_id& node() const { return system_->node(); }

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
    Item it;
    it.call.id = id;
    it.call.method = method;
    it.call.args.values = std::move(args);
    it.state = state;
    if (auto gone = host.push(std::move(it), ri.handle)) {
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
      state = std::make_shared<CallState>(what(), CallState::Clock::now() + timeout, timeout);
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
    auto h = service(first_rank_).impl()->handle;
    try {
      return gate_publish(*system_, gate_, h, bind_addr);
    } catch (const ActorError& e) {
      throw ActorError("[actors] rank " + std::to_string(first_rank_) + ": " + e.what());
    }
  }

  /// Connects (through the gate) to rank `rank`'s service at host:port.
  void connect(int rank, const std::string& host, uint16_t port) {
    caf::actor a;
    try {
      a = gate_connect(*system_, gate_, host, port);
    } catch (const ActorError& e) {
      throw ActorError("[actors] rank " + std::to_string(first_rank_) + ": could not connect to rank " + std::to_string(rank) +
                       " at " + host + ":" + std::to_string(port) + ": " + e.what());
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
    for (auto& a : actors) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(router_, caf::exit_reason::user_shutdown);
    router_ = nullptr;
    gate_close(gate_);  // admits no connection from here on
    if (gate_.mm) caf::anon_send_exit(gate_.mm, caf::exit_reason::user_shutdown);
    gate_.mm = nullptr;
    system_.reset();  // waits for every actor to end; the middleman closes its connections
  }

 private:
  struct Pending {
    CallStatePtr state;
    caf::actor_addr target;
  };

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
      sys->forget_host(id);
      h->close(describe_exit(sys, reason));
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
  /// Runs one message of `h` (on its CAF actor or on a waiting caller) and answers it.
  static void dispatch(Host& h, Item& item) {
    Call& c = item.call;
    Value result;
    std::string error;
    auto& handlers = ActorAccess::handlers(*h.actor);
    Handler* fn = nullptr;
    if (c.args.decode_error().empty() && c.args.awaits_data_plane()) error = await_data_plane(c.args, default_timeout());
    if (!error.empty()) {
      // the tensor data of the arguments did not arrive
    } else if (!c.args.decode_error().empty()) {
      error = "its arguments could not be decoded: " + c.args.decode_error();
    } else if (!(fn = h.handler(handlers, c.method))) {
      std::string known;
      for (const auto& m : h.actor->methods()) known += (known.empty() ? "" : ", ") + m;
      error = "it has no method '" + c.method + "' (its methods: " + known + ")";
    } else {
      try {
        result = (*fn)(c.args.values);
      } catch (const std::exception& e) {
        error = std::string("the handler threw: ") + e.what();
      } catch (...) {
        error = "the handler threw a non-std exception";
      }
    }
    const bool ok = error.empty();
    if (c.id == 0) {
      if (!ok) {
        std::fprintf(stderr, "[actors] message '%s' to actor '%s' (rank %d) failed: %s\n", c.method.c_str(), h.name.c_str(),
                     h.rank, error.c_str());
      }
      return;
    }
    if (item.state) {  // a request from this process
      if (ok) item.state->complete(std::move(result));
      else item.state->fail("[actors] " + item.state->what() + " failed: " + error);
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
  std::atomic<uint64_t> next_id_{1};
  std::unordered_map<uint64_t, Pending> pending_;  // requests to actors of other processes
  std::vector<std::weak_ptr<CallState>> watched_;               // then() on requests in this process: failed at their deadline
  std::set<caf::actor_addr> monitored_;
  std::map<caf::actor_addr, std::string> dead_;
  std::unordered_map<caf::actor_id, std::weak_ptr<Host>> hosts_;  // the mailboxes of this process's actors
  std::atomic<size_t> n_dead_{0};
  std::vector<ActorRef> services_;
  std::vector<caf::actor_addr> local_actors_;
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
        Item& it = b->items[k];
        if (it.exit) stop = true;
        else if (stop) rest.push_back(std::move(it));
        else run(it);
        it = Item();
        ++done;
      }
    }
    if (stop) {
      lk.lock();
      q_.give_back(chain);
      running_ = false;
      lk.unlock();
      close("it was stopped (user_shutdown)", std::move(rest));
      self->quit(caf::exit_reason::user_shutdown);
      return;
    }
    lk.lock();
    q_.give_back(chain);
    running_ = false;
  }
}

bool Host::run_inline(uint64_t id) {
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
      if (it->call.id == id && !it->reply_to) break;
    }
    Item* mine = q_.at(n);
    if (n > kAhead || !mine || mine->exit) return false;
    for (size_t k = 0; k <= n; ++k) q_.pop_front(here[k]);
    running_ = true;
  }
  {
    InferenceMode mode(false);  // as on the actor's own threads: grad mode on, inference mode off
    for (size_t k = 0; k <= n; ++k) run(here[k]);
  }
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
  return true;
}

void Host::close(const std::string& reason, std::vector<Item> left) {
  {
    std::lock_guard<SpinLock> g(mu_);
    if (closed_) return;
    closed_ = true;
    closed_reason_ = reason;
    while (!q_.empty()) {
      left.emplace_back();
      q_.pop_front(left.back());
    }
  }
  for (auto& x : left)
    if (x.state) x.state->fail("[actors] " + x.state->what() + " failed: the actor is gone (" + reason + ")");
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

CallStatePtr issue(const ActorRef& to, const std::string& method, List args, bool want_reply) {
  System* s = g_raw.load(std::memory_order_acquire);
  if (!s) require_current("request");  // throws the error
  return s->issue(to, method, std::move(args), want_reply);
}

ActorRef spawn_host(int rank, const std::string& name, std::unique_ptr<Actor> actor) {
  return require_current("spawn")->spawn_host(rank, name, std::move(actor));
}

void set_service(int rank, const ActorRef& ref) { require_current("hello")->set_service(rank, ref); }

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
  caf::anon_send_exit(impl_->handle, caf::exit_reason::user_shutdown);
}
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
      const char* v = std::getenv("TROUPE_ACTOR_DATA_PLANE_BYTES");
      detail::g_data_plane.threshold = v && *v ? std::atoll(v) : kDataPlaneBytes;
      if (detail::g_data_plane.threshold.load() <= 0) detail::g_data_plane.threshold = std::numeric_limits<int64_t>::max();
      detail::g_has_data_plane.store(world->backend() != "local", std::memory_order_release);
    }
    // Rank r connects to every lower rank and says hello (so both sides know each other's service).
    for (int j = 0; j < rank; ++j) {
      sys->connect(j, one_host ? "127.0.0.1" : hosts[j], static_cast<uint16_t>(std::stoi(ports[j])));
      sys->service(j).request<void>("hello", rank, sys->service(rank)).get();
    }
    world->barrier();
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
  detail::g_data_plane.group.reset();
}

bool running() { return detail::current() != nullptr; }

int64_t data_plane_bytes() {
  int64_t t = detail::g_data_plane.threshold.load();
  return t == std::numeric_limits<int64_t>::max() ? 0 : t;
}

void set_data_plane_bytes(int64_t bytes) {
  detail::g_data_plane.threshold = bytes > 0 ? bytes : std::numeric_limits<int64_t>::max();
}

}  // namespace troupe::actors
