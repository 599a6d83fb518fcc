// The collective counters (stats.h): the registry of every group's counters and the timing wrapper
// the front puts around each op's Work.
#include <troupe/comm/stats.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <tuple>
#include <vector>

#include <troupe/comm/stats_internal.h>

namespace troupe::comm {
namespace detail {
namespace {

using Clock = std::chrono::steady_clock;

std::mutex g_mu;
std::vector<std::weak_ptr<GroupCounters>>& registry() {
  static std::vector<std::weak_ptr<GroupCounters>> r;
  return r;
}

/// The op's Work, timed from issue until a wait() returns or is_completed() says so (recorded once).
class TimedWork final : public Work {
 public:
  TimedWork(WorkPtr inner, std::shared_ptr<GroupCounters> g, int op)
      : inner_(std::move(inner)), g_(std::move(g)), op_(op), t0_(Clock::now()) {}
  bool is_completed() override {
    const bool done = inner_->is_completed();
    if (done) note();
    return done;
  }
  void wait(std::optional<std::chrono::milliseconds> timeout) override {
    if (timeout && timeout->count() < 0)
      throw CommError("[Work::wait] timeout must not be negative, got " + std::to_string(timeout->count()) + " ms");
    inner_->wait(timeout);
    note();
  }
  std::exception_ptr exception() override { return inner_->exception(); }

 private:
  void note() {
    if (noted_.exchange(true, std::memory_order_relaxed)) return;
    const int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0_).count();
    auto& o = g_->ops[op_];
    o.completed.fetch_add(1, std::memory_order_relaxed);
    o.total_ns.fetch_add(ns, std::memory_order_relaxed);
    o.last_ns.store(ns, std::memory_order_relaxed);
    int64_t prev = o.max_ns.load(std::memory_order_relaxed);
    while (ns > prev && !o.max_ns.compare_exchange_weak(prev, ns, std::memory_order_relaxed)) {
    }
  }

  WorkPtr inner_;
  std::shared_ptr<GroupCounters> g_;
  int op_;
  Clock::time_point t0_;
  std::atomic<bool> noted_{false};
};

}  // namespace

const char* counted_op_name(int op) {
  static const char* names[kCountedOps] = {"all_reduce", "broadcast", "all_gather_into_tensor", "all_gather",
                                           "reduce_scatter_tensor", "reduce_scatter", "all_to_all", "send",
                                           "recv", "barrier"};
  return op >= 0 && op < kCountedOps ? names[op] : "unknown";
}

std::shared_ptr<GroupCounters> new_group_counters() {
  auto g = std::make_shared<GroupCounters>();
  std::lock_guard<std::mutex> lock(g_mu);
  auto& r = registry();
  if (r.size() >= 64) r.erase(std::remove_if(r.begin(), r.end(), [](const auto& w) { return w.expired(); }), r.end());
  r.push_back(g);
  return g;
}

WorkPtr count_op(GroupCounters& g, const ProcessGroup& pg, int op, int64_t bytes, WorkPtr work) {
  std::call_once(g.labelled, [&] {
    g.group = pg.options().name;
    g.backend = pg.backend();
    g.rank = pg.rank();
    g.size = pg.size();
    g.used.store(true, std::memory_order_release);
  });
  auto& o = g.ops[op];
  o.count.fetch_add(1, std::memory_order_relaxed);
  o.bytes.fetch_add(bytes, std::memory_order_relaxed);
  if (!work) return work;
  return std::make_shared<TimedWork>(std::move(work), g.shared_from_this(), op);  // a Work may outlive its group
}

}  // namespace detail

std::vector<CollectiveStats> collective_stats() {
  std::vector<std::shared_ptr<detail::GroupCounters>> groups;
  {
    std::lock_guard<std::mutex> lock(detail::g_mu);
    for (const auto& w : detail::registry())
      if (auto p = w.lock()) groups.push_back(std::move(p));
  }
  std::vector<CollectiveStats> out;
  for (const auto& g : groups) {
    if (!g->used.load(std::memory_order_acquire)) continue;
    for (int op = 0; op < detail::kCountedOps; ++op) {
      const auto& o = g->ops[op];
      CollectiveStats s;
      s.count = o.count.load(std::memory_order_relaxed);
      if (s.count == 0) continue;
      s.group = g->group;
      s.backend = g->backend;
      s.rank = g->rank;
      s.size = g->size;
      s.op = detail::counted_op_name(op);
      s.completed = o.completed.load(std::memory_order_relaxed);
      s.bytes = o.bytes.load(std::memory_order_relaxed);
      s.total_seconds = 1e-9 * static_cast<double>(o.total_ns.load(std::memory_order_relaxed));
      s.last_seconds = 1e-9 * static_cast<double>(o.last_ns.load(std::memory_order_relaxed));
      s.max_seconds = 1e-9 * static_cast<double>(o.max_ns.load(std::memory_order_relaxed));
      out.push_back(std::move(s));
    }
  }
  std::sort(out.begin(), out.end(), [](const CollectiveStats& a, const CollectiveStats& b) {
    return std::tie(a.group, a.rank, a.op) < std::tie(b.group, b.rank, b.op);
  });
  return out;
}

}  // namespace troupe::comm
