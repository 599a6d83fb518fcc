// The mpi backend's timeout diagnosis: a collective past the group's timeout breaks the group, and the
// timed-out rank asks every other rank's worker (on a communicator of its own) which op it began last, to
// name the ranks that had not arrived.
#include "mpi_internal.h"

namespace troupe::comm::mpi_impl {

void Engine::timed_out(const OpPtr& op) {
  timed_out_once_.store(true);
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

void Engine::post_query_recv() {
  if (MPI_Irecv(&query_in_, 1, MPI_INT64_T, MPI_ANY_SOURCE, kQueryTag, diag_comm_, &query_req_) != MPI_SUCCESS) {
    query_req_ = MPI_REQUEST_NULL;
  }
}

void Engine::serve_queries() {
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

std::string Engine::not_arrived(uint64_t seq) {
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

}  // namespace troupe::comm::mpi_impl
