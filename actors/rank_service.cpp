// The rank service: one actor per rank that spawns actors there from the factory registry and keeps the
// rank's part of the directory (its named actors) and their counters (introspect.h). Runtime::spawn_on /
// lookup / names and actors::inspect talk to it.
#include <unistd.h>
#if defined(__x86_64__)
#include <cpuid.h>
#include <x86intrin.h>
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>

#include <troupe/actors/internal/services.h>

namespace troupe::actors::detail {
namespace {

double wall_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

int64_t steady_ns(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

/// The clock a handler's counters read twice a message: the CPU's time-stamp counter where it runs at a
/// constant rate on every core (x86-64 with an invariant TSC: 9-10 ns a read where steady_clock takes
/// 24 on the AMD EPYC VM of 2026-11-29), else steady_clock's nanoseconds. Ticks become seconds only when
/// the counters are read (Ticks::ns), by the ratio of ticks to steady_clock since the process started.
class Ticks {
 public:
  static int64_t now() {
#if defined(__x86_64__)
    if (invariant_tsc()) return static_cast<int64_t>(__rdtsc());
#endif
    return steady_ns(std::chrono::steady_clock::now());
  }
  /// `ticks` (a difference of now()) in nanoseconds.
  static double ns(int64_t ticks) {
    static const Origin origin;
    if (!invariant_tsc()) return static_cast<double>(ticks);
    const double elapsed_ns = static_cast<double>(steady_ns(std::chrono::steady_clock::now()) - origin.ns);
    const double elapsed_ticks = static_cast<double>(now() - origin.ticks);
    // Right after start-up the ratio is not known yet; the counters are then near zero anyway.
    if (elapsed_ns < 1e6 || elapsed_ticks <= 0) return static_cast<double>(ticks) * origin.guess;
    return static_cast<double>(ticks) * (elapsed_ns / elapsed_ticks);
  }
  /// Fixes the origin (at the first spawn, long before any counter is read).
  static void start() { ns(0); }

 private:
  struct Origin {
    int64_t ticks = now();
    int64_t ns = steady_ns(std::chrono::steady_clock::now());
    double guess = 1.0 / 2.5;  // ns a tick at 2.5 GHz, for the first millisecond
  };
  static bool invariant_tsc() {
#if defined(__x86_64__)
    static const bool ok = [] {
      unsigned a = 0, b = 0, c = 0, d = 0;
      if (!__get_cpuid(0x80000000u, &a, &b, &c, &d) || a < 0x80000007u) return false;
      __get_cpuid(0x80000007u, &a, &b, &c, &d);
      return (d & (1u << 8)) != 0;  // CPUID 8000_0007h EDX bit 8: the TSC is invariant
    }();
    return ok;
#else
    return false;
#endif
  }
};

std::string host_name() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

/// One spawned actor's counters, filled by its wrapped handlers (on the actor's thread) and read by
/// the service's "stats" (on another).
struct Counters {
  std::string factory;
  double spawned_at = 0;
  std::vector<std::string> modules;
  // messages, busy_ticks and last_tick have one writer at a time (the actor's handlers run one at a
  // time), so a relaxed load and store, not a locked add, counts a message.
  std::atomic<int64_t> messages{0}, errors{0}, busy_ticks{0};
  std::atomic<int64_t> last_tick{0};  // Ticks::now() at the end of the last message (0: none yet)
  std::atomic<const std::string*> current{nullptr};  // the method running now (a key of the handler map)
  std::mutex mu;
  std::string last_error;

  ActorInfo info(const std::string& name) {
    ActorInfo a;
    a.name = name;
    a.factory = factory;
    a.messages = messages.load(std::memory_order_relaxed);
    a.errors = errors.load(std::memory_order_relaxed);
    a.busy_seconds = 1e-9 * Ticks::ns(busy_ticks.load(std::memory_order_relaxed));
    if (const std::string* m = current.load(std::memory_order_acquire)) {
      a.busy = true;
      a.current_method = *m;
    }
    a.spawned_at = spawned_at;
    if (const int64_t l = last_tick.load(std::memory_order_relaxed)) {
      // wall time from the tick clock's (a handler reads one clock, not two)
      a.last_message_at = wall_now() - 1e-9 * Ticks::ns(std::max<int64_t>(Ticks::now() - l, 0));
    }
    a.modules = modules;
    std::lock_guard<std::mutex> g(mu);
    a.last_error = last_error;
    return a;
  }
};

/// Wraps every handler of `actor` so that each call counts in `c` (time, errors, the running method).
void count_handlers(Actor& actor, const std::shared_ptr<Counters>& c) {
  Ticks::start();
  for (auto& [method, fn] : ActorAccess::handlers(actor)) {
    fn = [c, m = &method, inner = std::move(fn)](const List& args) -> Value {
      const int64_t t0 = Ticks::now();
      c->current.store(m, std::memory_order_release);
      auto done = [&](const char* what) {
        const int64_t t1 = Ticks::now();
        // (never negative: a handler that moved to a core whose counter lags does not take time back)
        c->busy_ticks.store(c->busy_ticks.load(std::memory_order_relaxed) + std::max<int64_t>(t1 - t0, 0),
                            std::memory_order_relaxed);
        c->messages.store(c->messages.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
        c->last_tick.store(t1, std::memory_order_relaxed);
        c->current.store(nullptr, std::memory_order_release);
        if (what) {
          c->errors.fetch_add(1, std::memory_order_relaxed);
          std::lock_guard<std::mutex> g(c->mu);
          c->last_error = *m + ": " + what;
        }
      };
      try {
        Value v = inner(args);
        done(nullptr);
        return v;
      } catch (const std::exception& e) {
        done(e.what());
        throw;
      } catch (...) {
        done("a non-std exception");
        throw;
      }
    };
  }
}

class RankService : public Actor {
 public:
  explicit RankService(int rank) : rank_(rank) {
    handle("spawn", [this](std::string name, std::string factory, List args) {
      return spawn(std::move(name), factory, args);
    });
    handle("lookup", [this](std::string name) -> Value {
      auto it = names_.find(name);
      return it == names_.end() ? Value() : Value(it->second);
    });
    handle("names", [this] {
      std::vector<std::string> out;
      for (const auto& [k, v] : names_) out.push_back(k);
      return out;
    });
    handle("hello", [](int64_t rank, ActorRef service, ActorRef router) {
      set_service(static_cast<int>(rank), service);
      return exchange_router(static_cast<int>(rank), router);
    });
    handle("forget", [this](std::string name) {
      names_.erase(name);
      counters_.erase(name);
    });
    handle("ping", [this] { return static_cast<int64_t>(rank_); });
    handle("stats", [this] { return encode_rank_info(stats()); });
  }

 private:
  ActorRef spawn(std::string name, const std::string& factory, const List& args) {
    if (names_.count(name)) {
      throw ActorError("rank " + std::to_string(rank_) + " already has an actor named '" + name + "'");
    }
    Factory make = find_factory(factory);
    if (!make) {
      std::string known;
      for (const auto& n : factory_names()) known += (known.empty() ? "" : ", ") + n;
      throw ActorError("no factory '" + factory + "' in the registry (registered: " +
                       (known.empty() ? std::string("none") : known) +
                       "); register it on every rank with actors::register_actor / register_factory");
    }
    std::unique_ptr<Actor> actor;
    try {
      actor = make(args);
    } catch (const std::exception& e) {
      throw ActorError("factory '" + factory + "' threw: " + e.what());
    }
    if (!actor) throw ActorError("factory '" + factory + "' returned no actor");
    auto c = std::make_shared<Counters>();
    c->factory = factory;
    c->spawned_at = wall_now();
    c->modules = take_hosted_modules(actor.get());
    count_handlers(*actor, c);
    ActorRef ref = spawn_host(rank_, name, std::move(actor));
    names_[name] = ref;
    counters_[name] = std::move(c);
    return ref;
  }

  RankInfo stats() {
    RankInfo r;
    r.rank = rank_;
    r.host = host_name();
    r.pid = static_cast<int64_t>(getpid());
    for (const auto& [name, c] : counters_) {
      r.actors.push_back(c->info(name));
      auto ref = names_.find(name);
      if (ref != names_.end()) r.actors.back().queued = std::max<int64_t>(queued_messages(ref->second), 0);
    }
    r.collectives = comm::collective_stats();
    return r;
  }

  int rank_;
  std::map<std::string, ActorRef> names_;
  std::map<std::string, std::shared_ptr<Counters>> counters_;
};

}  // namespace

std::unique_ptr<Actor> make_rank_service(int rank) { return std::make_unique<RankService>(rank); }
std::string service_name(int rank) { return "troupe.rank" + std::to_string(rank); }

}  // namespace troupe::actors::detail
