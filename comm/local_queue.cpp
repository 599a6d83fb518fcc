// The local backend's rendezvous plumbing and op queue: waking and briefly polling for peers, aborting a
// universe of groups, and running a rank's ops in issue order (on its worker or on a waiting thread).
#include "local_internal.h"

#include <thread>

namespace troupe::comm::local_impl {

// How long a rank polls for its peers before it sleeps on st.cv.
constexpr auto kSpin = std::chrono::microseconds(50);

// Wakes every waiter on st (st.mu need not be held).
void notify(WorldState& st) {
  st.events.fetch_add(1, std::memory_order_release);
  st.cv.notify_all();
}

// Called with lk (on st.mu) held before sleeping on st.cv: lets go of the lock and polls, yielding the
// core each time, until something is notified or kSpin passed; returns with lk held. Peers that arrive
// within kSpin then cost no futex wake-up and context switch (10-20 us each on 2 cores, and a scheduler
// slice when other processes hold the core), as MPI's polling costs it none.
void wait_briefly(WorldState& st, std::unique_lock<std::mutex>& lk) {
  const uint64_t seen = st.events.load(std::memory_order_acquire);
  lk.unlock();
  const auto until = Clock::now() + kSpin;
  for (int i = 1; st.events.load(std::memory_order_acquire) == seen; ++i) {
    if (i % 16 == 0 && Clock::now() >= until) break;
    std::this_thread::yield();
  }
  lk.lock();
}

void Universe::abort(const std::string& why) {
  std::vector<std::shared_ptr<WorldState>> live;
  {
    std::lock_guard<std::mutex> g(mu);
    if (!aborted.load()) reason = why;
    aborted.store(true);
    for (auto& w : states)
      if (auto s = w.lock()) live.push_back(std::move(s));
  }
  for (auto& s : live) {
    { std::lock_guard<std::mutex> g(s->mu); }  // a waiter is either before its predicate check or waiting
    notify(*s);
  }
}

std::shared_ptr<WorldState> make_state(int size, GroupOptions options, std::shared_ptr<Universe> universe) {
  auto s = std::make_shared<WorldState>();
  s->size = size;
  s->options = std::move(options);
  s->universe = std::move(universe);
  s->universe->add(s);
  return s;
}

bool LocalWork::is_completed() {
  {
    std::lock_guard<std::mutex> g(mu_);
    if (done_) return true;
  }
  wake_worker();
  return false;
}

void LocalWork::wait(std::optional<std::chrono::milliseconds> timeout) {
  // With a timeout, running the op here could outlast it: the worker runs it.
  if (timeout) wake_worker();
  else run_queue_up_to_this();
  std::unique_lock<std::mutex> lk(mu_);
  if (timeout) {
    if (!cv_.wait_for(lk, *timeout, [&] { return done_; }))
      throw CommError("[comm] wait on " + what_ + ": not completed within " + std::to_string(timeout->count()) +
                      " ms");
  } else {
    cv_.wait(lk, [&] { return done_; });  // bounded: the op itself fails once the group's timeout passes
  }
  if (error_) std::rethrow_exception(error_);
}

std::exception_ptr LocalWork::exception() {
  std::lock_guard<std::mutex> g(mu_);
  return error_;
}

void LocalWork::finish(std::exception_ptr e) {
  {
    std::lock_guard<std::mutex> g(mu_);
    done_ = true;
    error_ = std::move(e);
  }
  cv_.notify_all();
}

void LocalWork::run_queue_up_to_this() {
  auto q = queue_.lock();
  if (!q) return;
  std::unique_lock<std::mutex> lk(q->mu);
  if (!queued_ || q->running) return;
  while (queued_) q->run_front(lk);
  const bool more = !q->tasks.empty() || q->stop;
  lk.unlock();
  if (more) q->cv.notify_one();  // the ops queued after this one, or a stopping worker, go on
}

void LocalWork::wake_worker() {
  auto q = queue_.lock();
  if (!q) return;
  bool queued;
  {
    std::lock_guard<std::mutex> g(q->mu);
    queued = queued_;
  }
  if (queued) q->cv.notify_one();
}

void OpQueue::run_front(std::unique_lock<std::mutex>& lk) {
  Task t = std::move(tasks.front());
  tasks.pop_front();
  t.work->queued_ = false;
  running = true;
  lk.unlock();
  std::exception_ptr e;
  try {
    t.fn();
  } catch (...) {
    e = std::current_exception();
  }
  t.fn = nullptr;  // drop the op's tensors before it reports completion
  t.work->finish(std::move(e));
  lk.lock();
  running = false;
}

}  // namespace troupe::comm::local_impl
