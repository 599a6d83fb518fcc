// The mpi backend's progress engine: each group's queue of ops in issue order, run one at a time by the
// worker thread or by a thread that waits for one of them (polling MPI_Test with a backoff), buffered
// point to point in flight beside them, and the shutdown that fails what is left.
#include "mpi_internal.h"

namespace troupe::comm::mpi_impl {
namespace {

// Ops this large wake the worker when queued (a wake costs ~15 us here, under 10% of a 256 KB
// all-reduce); smaller ones run when waited on, or within the worker's 1 ms look. DDP buckets (1 MB and
// up) must start at once to overlap backward.
constexpr size_t kWakeBytes = size_t{256} << 10;

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

}  // namespace

bool Engine::begin(const OpPtr& op) {
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

bool Engine::finish(const OpPtr& op) {
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

std::pair<bool, bool> Engine::poll(const OpPtr& op) {
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

bool Engine::start_step(const OpPtr& op) {
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

void Engine::orphan_requests(const OpPtr& op) {
  for (int i = 0; i < op->nreq; ++i) {
    if (op->req[i] != MPI_REQUEST_NULL) orphans_.push_back({op->req[i], op});
    op->req[i] = MPI_REQUEST_NULL;
  }
  op->nreq = 0;
}

bool Engine::progress() {
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

void Engine::test_orphans() {
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

void Engine::worker_loop() {
  Backoff b;
  int idle_looks = 0;
  for (;;) {
    serve_queries();
    {
      std::unique_lock<std::mutex> l(q_mu_);
      if (stopping_) return;
      if (pending_.load() == 0) {
        // Idle. Small ops are queued without waking us (the thread that waits for one runs it, with no
        // hand-off); this periodic look picks up those that nobody waits for yet. Idle for long, it
        // dozes (kDozeLook), and submit wakes it.
        idle_looks = orphan_count_.load() == 0 ? idle_looks + 1 : 0;
        dozing_ = idle_looks > kDozeAfter;
        q_cv_.wait_for(l, dozing_ ? std::chrono::duration_cast<std::chrono::milliseconds>(kDozeLook) : kIdleLook,
                       [&] { return stopping_ || pending_.load() > 0; });
        dozing_ = false;
        b.reset();
      } else if (b.sleepy()) {
        q_cv_.wait_for(l, std::chrono::microseconds(100));
      }
      if (stopping_) return;
      if (pending_.load() == 0 && orphan_count_.load() == 0) continue;
      idle_looks = 0;
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
      wake = !detail::t_sync_call && (dozing_ || op->bytes >= kWakeBytes || queue_.size() > 1);
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
  // A communicator with active collectives cannot be freed (libnbc would use it after): it leaks too, as
  // do those of a group whose op timed out: a late rank may still send on them (comm_mpi_np3 once
  // crashed in ob1's matching of such a message, MpiTimeout.StoppedRankIsNamedAsNotAnswering: the
  // stopped rank's answer to the diagnosis query came after the others had freed the group).
  if (alive && orphans_.empty() && !timed_out_once_.load()) {
    for (MPI_Comm* c : {&comm_, &coll_comm_, &diag_comm_}) {
      if (*c != MPI_COMM_NULL) MPI_Comm_free(c);
    }
  }
  orphans_.clear();
  comm_ = coll_comm_ = diag_comm_ = MPI_COMM_NULL;
}

}  // namespace troupe::comm::mpi_impl
