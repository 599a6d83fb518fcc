// The `local` backend (local.h). A collective is a rendezvous of the group's ranks, keyed by its sequence
// number: each rank deposits pointers to its tensors (a Slot), the last to arrive checks that every rank
// called the same thing with the same shapes, then every rank computes its own share (phase 1, reading
// the peers' memory), meets the others at a barrier (after which no rank reads another's memory), and
// copies its result in place (phase 2). all_reduce: rank r reduces elements [r*n/size, (r+1)*n/size)
// into a shared staging buffer in phase 1 and copies the whole buffer into its tensor in phase 2, so the
// work is spread over the ranks' threads.
#include "local_internal.h"

#include <troupe/comm/checks.h>
#include <troupe/comm/reduce_op.h>

#include <troupe/tensor/parallel.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <tuple>
#include <type_traits>

namespace troupe::comm {

namespace {

using namespace local_impl;

const char* op_name(OpKind k) {
  switch (k) {
    case OpKind::AllReduce: return "all_reduce";
    case OpKind::Broadcast: return "broadcast";
    case OpKind::AllGatherIntoTensor: return "all_gather_into_tensor";
    case OpKind::AllGather: return "all_gather";
    case OpKind::ReduceScatterTensor: return "reduce_scatter_tensor";
    case OpKind::ReduceScatter: return "reduce_scatter";
    case OpKind::AllToAll: return "all_to_all";
    case OpKind::Barrier: return "barrier";
    case OpKind::NewGroup: return "new_group";
    case OpKind::Split: return "split";
  }
  return "collective";
}

bool is_reduction(OpKind k) {
  return k == OpKind::AllReduce || k == OpKind::ReduceScatterTensor || k == OpKind::ReduceScatter;
}

template <typename T>
std::string list_str(const std::vector<T>& v, const char* sep = ", ") {
  std::ostringstream os;
  for (size_t i = 0; i < v.size(); ++i) os << (i ? sep : "") << v[i];
  return os.str();
}

std::string shape_str(const std::vector<int64_t>& s) { return "[" + list_str(s) + "]"; }

std::string tensor_str(const std::vector<int64_t>& shape, ScalarType dtype) {
  return "shape " + shape_str(shape) + " (" + dtype_name(dtype) + ")";
}

std::byte* bytes_of(const Tensor& t) { return static_cast<std::byte*>(t.data_ptr()); }

bool overlaps(const std::byte* a, size_t an, const std::byte* b, size_t bn) {
  return an > 0 && bn > 0 && a < b + bn && b < a + an;
}

// ---- reductions: out[i] = op over ranks q of in[q][i], in T's opmath type (16-bit floats in float),
// with reduce_op.h's meaning of each op.

// Reduces n elements of each of ins (one pointer per rank) into out, block by block: every input of a
// block is read before the block is written, so out may be one of the inputs at the same offset.
template <typename T>
void reduce_typed(ReduceOp op, ScalarType dtype, const std::vector<const T*>& ins, T* out, int64_t n) {
  using A = opmath_t<T>;
  constexpr int64_t kBlock = 256;
  A acc[kBlock];
  const int size = static_cast<int>(ins.size());
  detail::with_combine<A>(detail::combine_of(op, dtype), [&](auto combine) {
    for (int64_t b = 0; b < n; b += kBlock) {
      const int64_t m = std::min(kBlock, n - b);
      for (int64_t j = 0; j < m; ++j) acc[j] = static_cast<A>(ins[0][b + j]);
      for (int q = 1; q < size; ++q) {
        const T* p = ins[q] + b;
        for (int64_t j = 0; j < m; ++j) acc[j] = combine(acc[j], static_cast<A>(p[j]));
      }
      if constexpr (std::is_floating_point_v<A>) {
        if (op == ReduceOp::AVG)
          for (int64_t j = 0; j < m; ++j) acc[j] = acc[j] / static_cast<A>(size);
      }
      for (int64_t j = 0; j < m; ++j) out[b + j] = static_cast<T>(acc[j]);
    }
  });
}

void reduce_into(ScalarType dtype, ReduceOp op, const std::vector<const std::byte*>& ins, std::byte* out,
                 int64_t n) {
  if (n <= 0) return;
  dispatch_all(dtype, [&](auto tag) {
    using T = decltype(tag);
    std::vector<const T*> typed(ins.size());
    for (size_t q = 0; q < ins.size(); ++q) typed[q] = reinterpret_cast<const T*>(ins[q]);
    reduce_typed<T>(op, dtype, typed, reinterpret_cast<T*>(out), n);
  });
}

// ---- the group object of one rank

class LocalGroup final : public ProcessGroup {
 public:
  LocalGroup(std::shared_ptr<WorldState> state, int rank)
      : ProcessGroup(Traits{}),  // CPU tensors, no send to self, any tag >= 0
        st_(std::move(state)), rank_(rank), q_(std::make_shared<OpQueue>()), worker_([this] { work_loop(); }) {}

  ~LocalGroup() override {
    closing_.store(true);
    {
      std::lock_guard<std::mutex> g(st_->mu);
    }
    notify(*st_);  // an op of this rank waiting for its peers fails now
    {
      std::lock_guard<std::mutex> g(q_->mu);
      q_->stop = true;
    }
    q_->cv.notify_all();
    worker_.join();  // the remaining queued ops fail fast (closing_); no waiter is running one after
  }

  int rank() const override { return rank_; }
  int size() const override { return st_->size; }
  std::string backend() const override { return "local"; }
  const GroupOptions& options() const override { return st_->options; }
  uint64_t sequence_number() const override { return seq_.load(); }
  const std::shared_ptr<Universe>& universe() const { return st_->universe; }

  WorkPtr do_all_reduce(Tensor& tensor, ReduceOp op) override {
    Slot s = tensor_slot(OpKind::AllReduce, "tensor", tensor);
    s.op = op;
    s.out = bytes_of(tensor);
    const int64_t n = tensor.numel();
    const size_t es = tensor.element_size();
    return issue(OpKind::AllReduce, [this, tensor, s, n, es, op](uint64_t seq) {
      if (size() == 1) return collective(seq, s, nullptr, nullptr);  // the identity, for every op
      collective(
          seq, s,
          [&](Rendezvous& rv) {  // under the group's lock
            const size_t bytes = n * es;
            if (st_->staging_bytes < bytes) {
              st_->staging.reset();
              st_->staging.reset(new std::byte[bytes]);
              st_->staging_bytes = bytes;
            }
            rv.staging = st_->staging.get();
          },
          [&](const Rendezvous& rv) {
            const int64_t b = n * rank_ / size(), e = n * (rank_ + 1) / size();
            std::vector<const std::byte*> ins(size());
            for (int q = 0; q < size(); ++q) ins[q] = rv.slots[q].in + b * es;
            reduce_into(s.dtype, op, ins, rv.staging + b * es, e - b);
          },
          [&](const Rendezvous& rv) {
            if (n > 0) std::memcpy(s.out, rv.staging, n * es);
          });
    });
  }

  WorkPtr do_broadcast(Tensor& tensor, int src) override {
    Slot s = tensor_slot(OpKind::Broadcast, "tensor", tensor);
    s.src = src;
    s.out = bytes_of(tensor);
    const size_t nbytes = tensor.nbytes();
    return issue(OpKind::Broadcast, [this, tensor, s, src, nbytes](uint64_t seq) {
      collective(seq, s, nullptr, [&](const Rendezvous& rv) {
        if (rank_ != src && nbytes > 0) std::memcpy(s.out, rv.slots[src].in, nbytes);
      });
    });
  }

  WorkPtr do_all_gather_into_tensor(Tensor& output, const Tensor& input) override {
    const size_t chunk = input.nbytes();
    Slot s = tensor_slot(OpKind::AllGatherIntoTensor, "input", input);
    s.has_out = true;
    s.out_shape = output.sizes().vec();
    s.out = bytes_of(output);
    auto staged = stage_overlap(s, input, output, chunk);
    return issue(OpKind::AllGatherIntoTensor, [this, output, input, s, chunk, staged](uint64_t seq) {
      collective(seq, s, nullptr, [&](const Rendezvous& rv) {
        for (int q = 0; q < size(); ++q) {
          std::byte* dst = s.out + q * chunk;
          if (chunk > 0 && dst != rv.slots[q].in) std::memcpy(dst, rv.slots[q].in, chunk);
        }
      });
    });
  }

  WorkPtr do_all_gather(std::vector<Tensor>& outputs, const Tensor& input) override {
    Slot s = tensor_slot(OpKind::AllGather, "input", input);
    for (const Tensor& out : outputs) s.outs.push_back(bytes_of(out));
    const size_t nbytes = input.nbytes();
    return issue(OpKind::AllGather, [this, outputs, input, s, nbytes](uint64_t seq) {
      collective(seq, s, nullptr, [&](const Rendezvous& rv) {
        for (int q = 0; q < size(); ++q)
          if (nbytes > 0 && s.outs[q] != rv.slots[q].in) std::memcpy(s.outs[q], rv.slots[q].in, nbytes);
      });
    });
  }

  WorkPtr do_reduce_scatter_tensor(Tensor& output, const Tensor& input, ReduceOp op) override {
    const int64_t m = output.numel();
    const size_t es = output.element_size();
    Slot s = tensor_slot(OpKind::ReduceScatterTensor, "input", input);
    s.op = op;
    s.has_out = true;
    s.out_shape = output.sizes().vec();
    s.out = bytes_of(output);
    auto staged = stage_overlap(s, input, output, m * es);
    return issue(OpKind::ReduceScatterTensor, [this, output, input, s, op, m, es, staged](uint64_t seq) {
      collective(seq, s, nullptr, [&](const Rendezvous& rv) {
        std::vector<const std::byte*> ins(size());
        for (int q = 0; q < size(); ++q) ins[q] = rv.slots[q].in + rank_ * m * es;
        reduce_into(s.dtype, op, ins, s.out, m);
      });
    });
  }

  WorkPtr do_reduce_scatter(Tensor& output, const std::vector<Tensor>& inputs, ReduceOp op) override {
    Slot s = tensor_slot(OpKind::ReduceScatter, "output", output);
    s.op = op;
    s.out = bytes_of(output);
    for (const Tensor& in : inputs) s.ins.push_back(bytes_of(in));
    const int64_t m = output.numel();
    return issue(OpKind::ReduceScatter, [this, output, inputs, s, op, m](uint64_t seq) {
      collective(seq, s, nullptr, [&](const Rendezvous& rv) {
        std::vector<const std::byte*> ins(size());
        for (int q = 0; q < size(); ++q) ins[q] = rv.slots[q].ins[rank_];
        reduce_into(s.dtype, op, ins, s.out, m);
      });
    });
  }

  WorkPtr do_all_to_all(Tensor& output, const Tensor& input) override {
    Slot s = tensor_slot(OpKind::AllToAll, "input", input);
    s.has_out = true;
    s.out_shape = output.sizes().vec();
    s.out = bytes_of(output);
    const size_t chunk = input.nbytes() / size();
    // In place (output over input): the peers read this rank's input during phase 1, so the result is
    // gathered into a buffer and copied after the barrier.
    const bool stage = overlaps(s.out, output.nbytes(), s.in, input.nbytes());
    auto buffer = std::make_shared<std::vector<std::byte>>();
    return issue(OpKind::AllToAll, [this, output, input, s, chunk, stage, buffer](uint64_t seq) {
      collective(
          seq, s, nullptr,
          [&](const Rendezvous& rv) {
            if (chunk == 0) return;
            std::byte* dst = s.out;
            if (stage) {
              buffer->resize(chunk * size());
              dst = buffer->data();
            }
            for (int q = 0; q < size(); ++q) std::memcpy(dst + q * chunk, rv.slots[q].in + rank_ * chunk, chunk);
          },
          [&](const Rendezvous&) {
            if (stage && chunk > 0) std::memcpy(s.out, buffer->data(), chunk * size());
          });
    });
  }

  WorkPtr do_send(const Tensor& tensor, int dst, int tag) override {
    const std::string what = p2p_where("send to", dst, tag);
    return issue_p2p(what, [this, tensor, dst, tag, what] {
      if (universe()->aborted.load()) throw CommError("[comm] " + what + " aborted: " + universe()->why());
      Message msg{tensor.dtype(), tensor.sizes().vec(), std::vector<std::byte>(tensor.nbytes())};
      if (!msg.bytes.empty()) std::memcpy(msg.bytes.data(), tensor.data_ptr(), msg.bytes.size());
      {
        std::lock_guard<std::mutex> g(st_->mu);
        st_->mailboxes[{rank_, dst, tag}].push_back(std::move(msg));
      }
      notify(*st_);
    });
  }

  WorkPtr do_recv(Tensor& tensor, int src, int tag) override {
    const std::string what = p2p_where("recv from", src, tag);
    return issue_p2p(what, [this, tensor, src, tag, what] {
      const auto deadline = Clock::now() + st_->options.timeout;
      const std::tuple<int, int, int> key{src, rank_, tag};
      Message msg;
      {
        std::unique_lock<std::mutex> lk(st_->mu);
        for (;;) {
          auto it = st_->mailboxes.find(key);
          if (it != st_->mailboxes.end() && !it->second.empty()) {
            msg = std::move(it->second.front());
            it->second.pop_front();
            if (it->second.empty()) st_->mailboxes.erase(it);
            break;
          }
          if (universe()->aborted.load()) throw CommError("[comm] " + what + " aborted: " + universe()->why());
          if (closing_.load())
            throw CommError("[comm] " + what + " failed: the group object of rank " + std::to_string(rank_) +
                            " was destroyed while it was pending");
          if (st_->cv.wait_until(lk, deadline) == std::cv_status::timeout) {
            auto again = st_->mailboxes.find(key);
            if (again == st_->mailboxes.end() || again->second.empty())
              throw CommError("[comm] " + what + " timed out after " + std::to_string(st_->options.timeout.count()) +
                              " ms: rank " + std::to_string(src) + " sent nothing with tag " + std::to_string(tag));
          }
        }
      }
      if (msg.dtype != tensor.dtype() || msg.bytes.size() != tensor.nbytes())
        throw CommError("[comm] " + what + ": rank " + std::to_string(src) + " sent " + tensor_str(msg.shape, msg.dtype) +
                        ", rank " + std::to_string(rank_) + " receives into " +
                        tensor_str(tensor.sizes().vec(), tensor.dtype()));
      if (!msg.bytes.empty()) std::memcpy(tensor.data_ptr(), msg.bytes.data(), msg.bytes.size());
    });
  }

  WorkPtr do_barrier() override {
    Slot s;
    s.kind = OpKind::Barrier;
    return issue(OpKind::Barrier, [this, s](uint64_t seq) { collective(seq, s, nullptr, nullptr); });
  }

  ProcessGroupPtr do_new_group(const std::vector<int>& ranks, int, int, int64_t,
                               std::optional<GroupOptions> options) override {
    Slot s;
    s.kind = OpKind::NewGroup;
    s.ranks = ranks;
    s.options = std::move(options);
    auto result = std::make_shared<ProcessGroupPtr>();
    issue(OpKind::NewGroup, [this, s, result](uint64_t seq) {
      collective(
          seq, s,
          [&](Rendezvous& rv) {
            rv.new_states.assign(size(), nullptr);
            rv.new_ranks.assign(size(), -1);
            const auto& members = rv.slots[0].ranks;
            auto st = make_state(static_cast<int>(members.size()), sub_options(rv, members), universe());
            for (size_t i = 0; i < members.size(); ++i) {
              rv.new_states[members[i]] = st;
              rv.new_ranks[members[i]] = static_cast<int>(i);
            }
          },
          nullptr,
          [&](const Rendezvous& rv) {
            if (rv.new_states[rank_]) *result = std::make_shared<LocalGroup>(rv.new_states[rank_], rv.new_ranks[rank_]);
          });
    })->wait();
    return *result;
  }

  ProcessGroupPtr do_split(int color, int key, std::optional<GroupOptions> options) override {
    Slot s;
    s.kind = OpKind::Split;
    s.color = color;
    s.key = key;
    s.options = std::move(options);
    auto result = std::make_shared<ProcessGroupPtr>();
    issue(OpKind::Split, [this, s, result](uint64_t seq) {
      collective(
          seq, s,
          [&](Rendezvous& rv) {
            rv.new_states.assign(size(), nullptr);
            rv.new_ranks.assign(size(), -1);
            std::map<int, std::vector<int>> by_color;
            for (int r = 0; r < size(); ++r)
              if (rv.slots[r].color >= 0) by_color[rv.slots[r].color].push_back(r);
            for (auto& [c, members] : by_color) {
              std::stable_sort(members.begin(), members.end(),
                               [&](int a, int b) { return rv.slots[a].key < rv.slots[b].key; });
              auto st = make_state(static_cast<int>(members.size()), sub_options(rv, members), universe());
              for (size_t i = 0; i < members.size(); ++i) {
                rv.new_states[members[i]] = st;
                rv.new_ranks[members[i]] = static_cast<int>(i);
              }
            }
          },
          nullptr,
          [&](const Rendezvous& rv) {
            if (rv.new_states[rank_]) *result = std::make_shared<LocalGroup>(rv.new_states[rank_], rv.new_ranks[rank_]);
          });
    })->wait();
    return *result;
  }

 private:
  const std::string& name() const { return st_->options.name; }

  // "all_reduce #17 on group 'world' (local, 4 ranks)"
  std::string where(OpKind k, uint64_t seq) const {
    return std::string(op_name(k)) + " #" + std::to_string(seq) + " on group '" + name() + "' (local, " +
           std::to_string(size()) + (size() == 1 ? " rank)" : " ranks)");
  }
  // "send to rank 1 (tag 0) on group 'world' (local, 2 ranks)"
  std::string p2p_where(const char* verb, int peer, int tag) const {
    return std::string(verb) + " rank " + std::to_string(peer) + " (tag " + std::to_string(tag) + ") on group '" +
           name() + "' (local, " + std::to_string(size()) + " ranks)";
  }

  // The peers read `read` (at s.in) while this rank writes `written` (at s.out): unless the two are apart,
  // or one is chunk rank() of the other (`chunk` bytes each: the in-place forms), s.in is pointed at a
  // copy of `read` made now, which the returned buffer keeps.
  std::shared_ptr<std::vector<std::byte>> stage_overlap(Slot& s, const Tensor& read, const Tensor& written,
                                                        size_t chunk) const {
    if (!overlaps(s.in, read.nbytes(), s.out, written.nbytes())) return nullptr;
    if (s.in == s.out + rank_ * chunk || s.out == s.in + rank_ * chunk) return nullptr;
    auto copy = std::make_shared<std::vector<std::byte>>(read.nbytes());
    std::memcpy(copy->data(), s.in, copy->size());
    s.in = copy->data();
    return copy;
  }

  static Slot tensor_slot(OpKind k, const char* label, const Tensor& t) {
    Slot s;
    s.kind = k;
    s.has_tensor = true;
    s.in_label = label;
    s.dtype = t.dtype();
    s.in_shape = t.sizes().vec();
    s.in = bytes_of(t);
    return s;
  }

  // A sub-group's options: those the lowest member passed, else this group's; its name, unless given,
  // is this group's name + "/group[<members' ranks here>]".
  GroupOptions sub_options(const Rendezvous& rv, const std::vector<int>& members) const {
    return detail::subgroup_options(st_->options, rv.slots[members[0]].options, members);
  }

  WorkPtr issue(OpKind k, std::function<void(uint64_t)> body) {
    std::lock_guard<std::mutex> g(q_->mu);
    const uint64_t seq = seq_.fetch_add(1);
    auto w = std::make_shared<LocalWork>(where(k, seq), q_);
    q_->tasks.push_back(OpQueue::Task{[body = std::move(body), seq] { body(seq); }, w});
    if (!detail::t_sync_call) q_->cv.notify_one();  // a synchronous call's thread runs it as it waits
    return w;
  }

  WorkPtr issue_p2p(const std::string& what, std::function<void()> body) {
    std::lock_guard<std::mutex> g(q_->mu);
    auto w = std::make_shared<LocalWork>(what, q_);
    q_->tasks.push_back(OpQueue::Task{std::move(body), w});
    if (!detail::t_sync_call) q_->cv.notify_one();
    return w;
  }

  // Runs the queue's ops whenever no waiter does; once stopped, drains it and returns.
  void work_loop() {
    OpQueue& q = *q_;
    std::unique_lock<std::mutex> lk(q.mu);
    for (;;) {
      q.cv.wait(lk, [&] { return !q.running && (q.stop || !q.tasks.empty()); });
      if (q.tasks.empty()) return;
      q.run_front(lk);
    }
  }

  // The first mismatch between the ranks' slots, or "".
  std::string validate(const Rendezvous& rv, uint64_t seq) const {
    const Slot& a = rv.slots[0];
    const std::string head = "[comm] " + where(a.kind, seq) + ": ";
    for (int r = 1; r < size(); ++r) {
      const Slot& b = rv.slots[r];
      const std::string rb = "rank " + std::to_string(r);
      if (b.kind != a.kind)
        return "[comm] collective #" + std::to_string(seq) + " on group '" + name() + "' (local, " +
               std::to_string(size()) + " ranks): " + rb + " called " + op_name(b.kind) + ", rank 0 called " +
               op_name(a.kind) + " (every rank must issue the same collectives in the same order)";
      if (is_reduction(a.kind) && b.op != a.op)
        return head + rb + " reduces with " + reduce_op_name(b.op) + ", rank 0 with " + reduce_op_name(a.op);
      if (a.kind == OpKind::Broadcast && b.src != a.src)
        return head + rb + " broadcasts from rank " + std::to_string(b.src) + ", rank 0 from rank " +
               std::to_string(a.src);
      if (a.has_tensor && (b.dtype != a.dtype || b.in_shape != a.in_shape))
        return head + a.in_label + " on " + rb + " has " + tensor_str(b.in_shape, b.dtype) + ", rank 0 has " +
               tensor_str(a.in_shape, a.dtype);
      if (a.has_out && b.out_shape != a.out_shape)
        return head + "output on " + rb + " has shape " + shape_str(b.out_shape) + ", rank 0 has shape " +
               shape_str(a.out_shape);
      if (a.kind == OpKind::NewGroup && b.ranks != a.ranks)
        return head + rb + " asks for ranks [" + list_str(b.ranks) + "], rank 0 for [" + list_str(a.ranks) + "]";
    }
    return "";
  }

  // Runs collective `seq` on this rank's worker: deposit `mine` and wait for every rank (or an error:
  // mismatch, timeout, abort); the last to arrive validates and runs `prepare`. Then phase1 (may read the
  // peers' slots), a barrier, and phase2 (this rank's memory only).
  void collective(uint64_t seq, Slot mine, const std::function<void(Rendezvous&)>& prepare,
                  const std::function<void(const Rendezvous&)>& phase1,
                  const std::function<void(const Rendezvous&)>& phase2 = nullptr) {
    WorldState& st = *st_;
    const OpKind kind = mine.kind;
    const auto deadline = Clock::now() + st.options.timeout;
    std::unique_lock<std::mutex> lk(st.mu);
    auto& entry = st.rendezvous[seq];
    if (!entry) entry = std::make_shared<Rendezvous>(size());
    std::shared_ptr<Rendezvous> rv = entry;
    auto leave = [&] {
      if (++rv->n_left == size()) st.rendezvous.erase(seq);
    };

    if (!rv->ready && rv->error.empty()) {
      rv->slots[rank_] = std::move(mine);
      rv->arrived[rank_] = true;
      if (++rv->n_arrived == size()) {
        std::string err = validate(*rv, seq);
        if (err.empty() && prepare) {
          try {
            prepare(*rv);
          } catch (const std::exception& e) {
            err = "[comm] " + where(kind, seq) + ": " + e.what();
          }
        }
        if (err.empty()) rv->ready = true;
        else rv->error = std::move(err);
        notify(st);
      }
    }
    bool spun = false;
    while (!rv->ready && rv->error.empty()) {
      if (st.universe->aborted.load()) {
        rv->error = "[comm] " + where(kind, seq) + " aborted: " + st.universe->why();
      } else if (closing_.load()) {
        rv->error = "[comm] " + where(kind, seq) + " failed: the group object of rank " + std::to_string(rank_) +
                    " was destroyed while it was pending";
      } else if (!spun) {
        spun = true;
        wait_briefly(st, lk);
      } else if (st.cv.wait_until(lk, deadline) == std::cv_status::timeout && !rv->ready && rv->error.empty()) {
        std::vector<int> missing;
        for (int r = 0; r < size(); ++r)
          if (!rv->arrived[r]) missing.push_back(r);
        rv->error = "[comm] " + where(kind, seq) + " timed out after " + std::to_string(st.options.timeout.count()) +
                    " ms; ranks not arrived: " + list_str(missing);
      }
      if (!rv->error.empty()) notify(st);
    }
    if (!rv->ready) {  // failed before any rank read another's memory
      std::string err = rv->error;
      leave();
      throw CommError(err);
    }

    lk.unlock();
    std::string failed;
    if (phase1) {
      try {
        phase1(*rv);
      } catch (const std::exception& e) {
        failed = "[comm] " + where(kind, seq) + " failed on rank " + std::to_string(rank_) + ": " + e.what();
      }
    }
    lk.lock();
    if (!failed.empty() && rv->error.empty()) rv->error = failed;
    if (++rv->n_computed == size()) notify(st);
    // Every rank got here or is computing its phase 1 (no waiting in it): this wait is short, and it
    // must not give up early, since a peer may still be reading this rank's memory.
    if (rv->n_computed != size()) wait_briefly(st, lk);
    st.cv.wait(lk, [&] { return rv->n_computed == size(); });
    std::string err = rv->error;
    leave();
    lk.unlock();
    if (!err.empty()) throw CommError(err);
    if (phase2) phase2(*rv);
  }

  std::shared_ptr<WorldState> st_;
  const int rank_;
  std::atomic<uint64_t> seq_{0};
  std::atomic<bool> closing_{false};
  std::shared_ptr<OpQueue> q_;  // shared with the Works, which may outlive this object
  std::thread worker_;  // last: starts once everything above is constructed
};

}  // namespace

namespace local_impl {
std::shared_ptr<Universe> universe_of(const ProcessGroup& group) {
  return static_cast<const LocalGroup&>(group).universe();
}
}  // namespace local_impl

std::vector<ProcessGroupPtr> make_local_groups(int n, GroupOptions options) {
  if (n < 1) throw CommError("[make_local_groups] n must be at least 1, got " + std::to_string(n));
  if (options.timeout.count() <= 0)
    throw CommError("[make_local_groups] timeout must be positive, got " +
                    std::to_string(options.timeout.count()) + " ms");
  auto state = make_state(n, std::move(options), std::make_shared<Universe>());
  std::vector<ProcessGroupPtr> groups;
  groups.reserve(n);
  for (int r = 0; r < n; ++r) groups.push_back(std::make_shared<LocalGroup>(state, r));
  return groups;
}

}  // namespace troupe::comm
