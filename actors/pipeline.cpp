// Pipeline (pipeline.h): the caller's event loop over micro-batches. Each micro-batch is a small state
// machine (forward at stage i, waiting for its backward, backward at stage i, done); the loop issues the
// next request of a micro-batch as soon as its previous one answered, and the schedule decides when new
// micro-batches enter and when backwards start. Hosts serve their requests in the order they arrive.
#include <troupe/actors/pipeline.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <stdexcept>

#include <troupe/tensor/autograd.h>
#include <troupe/tensor/ops.h>

namespace troupe::actors {

Pipeline::Pipeline(std::vector<RemoteModulePtr> stages, int chunks, Schedule schedule)
    : stages_(std::move(stages)), chunks_(chunks), schedule_(schedule) {
  if (stages_.empty()) throw std::invalid_argument("[Pipeline] no stages");
  for (size_t i = 0; i < stages_.size(); ++i)
    if (!stages_[i]) throw std::invalid_argument("[Pipeline] stage " + std::to_string(i) + " is null");
    else if (stages_[i]->host_proxies().size() != 1)
      throw std::invalid_argument("[Pipeline] stage " + std::to_string(i) + " is hosted by a group of ranks (replicated or "
                                  "sharded): a stage must be hosted on one rank");
  if (chunks_ < 1) throw std::invalid_argument("[Pipeline] chunks must be at least 1, got " + std::to_string(chunks_));
}

namespace {
enum class Phase { Waiting, Forward, LossDone, Backward, Done };
struct Micro {
  Phase phase = Phase::Waiting;
  int stage = 0;
  Future<List> pending;
  std::vector<int64_t> keys;
  Tensor grad;  // of the last stage's output
};
}  // namespace

Tensor Pipeline::train_step(const Tensor& input, const Tensor& target, const LossFn& loss_fn) {
  if (!loss_fn) throw std::invalid_argument("[Pipeline] train_step needs a loss function");
  if (input.dim() == 0 || input.size(0) < 1) throw std::invalid_argument("[Pipeline] the input needs a batch dimension");
  if (target.defined() && target.dim() > 0 && target.size(0) != input.size(0))
    throw std::invalid_argument("[Pipeline] input has " + std::to_string(input.size(0)) + " rows but target has " +
                                std::to_string(target.size(0)));
  const auto t0 = std::chrono::steady_clock::now();
  const int p = num_stages();
  std::vector<Tensor> xs = input.chunk(chunks_, 0);
  std::vector<Tensor> ts = target.chunk(chunks_, 0);
  const int M = static_cast<int>(xs.size());
  const double N = static_cast<double>(input.size(0));
  std::vector<Micro> mbs(M);
  for (auto& mb : mbs) mb.keys.assign(p, 0);
  stats_ = Stats{};
  stats_.max_kept_per_stage.assign(p, 0);
  std::vector<int64_t> kept(p, 0);
  double loss_total = 0;
  int next_start = 0, in_flight = 0, forwards_done = 0, done = 0;
  bool backwards_started = false;
  // 1F1B: stage i holds at most p - i micro-batches (forward started, backward not finished there);
  // a micro-batch whose next stage is full waits here with its activation.
  const bool one_f_one_b = schedule_ == Schedule::OneFOneB;
  std::vector<int> occupancy(p, 0);
  std::vector<std::vector<std::pair<int, Tensor>>> waiting(p);  // per stage: (micro-batch, input)

  auto start_forward = [&](Micro& mb, int i, const Tensor& x, bool needs_grad) {
    ++occupancy[i];
    mb.keys[i] = stages_[i]->next_key();
    mb.pending = stages_[i]->forward_keyed(nn::Args{nn::Value(x)}, mb.keys[i], {needs_grad});
    mb.phase = Phase::Forward;
    mb.stage = i;
  };
  // A stage answers with its input's gradient before it computes its weights' (the stage before starts
  // its backward meanwhile); `finishing` holds the answers that say a stage's part is all done.
  std::deque<Future<void>> finishing;  // (a deque: backward_keyed fills the element in place)
  auto start_backward = [&](Micro& mb, int i, const Tensor& g) {
    finishing.emplace_back();
    mb.pending = stages_[i]->backward_keyed(mb.keys[i], {g}, finishing.back());
    mb.phase = Phase::Backward;
    mb.stage = i;
  };
  auto release_all = [&] {
    for (auto& mb : mbs)
      for (int i = 0; i < p; ++i)
        if (mb.keys[i]) stages_[i]->release_key(mb.keys[i]);
  };

  try {
    while (done < M) {
      // micro-batches waiting for room at a stage
      for (int i = 1; i < p; ++i)
        while (!waiting[i].empty() && (!one_f_one_b || occupancy[i] < p - i)) {
          auto [m, x] = std::move(waiting[i].front());
          waiting[i].erase(waiting[i].begin());
          start_forward(mbs[m], i, x, true);
        }
      while (next_start < M && (!one_f_one_b || (in_flight < p && occupancy[0] < p))) {
        start_forward(mbs[next_start], 0, xs[next_start], false);
        ++next_start;
        stats_.max_in_flight = std::max<int64_t>(stats_.max_in_flight, ++in_flight);
      }
      if (schedule_ == Schedule::FillDrain && forwards_done == M && !backwards_started) {
        backwards_started = true;
        for (auto& mb : mbs) start_backward(mb, p - 1, mb.grad);
      }
      bool progress = false;
      for (int m = 0; m < M; ++m) {
        Micro& mb = mbs[m];
        if ((mb.phase != Phase::Forward && mb.phase != Phase::Backward) || !mb.pending.ready()) continue;
        List r = mb.pending.get();
        progress = true;
        const int i = mb.stage;
        if (mb.phase == Phase::Forward) {
          if (!r.at(0).as<bool>())
            throw ActorError("[Pipeline] stage " + std::to_string(i) +
                             " recorded no graph (does it have parameters that require grad?)");
          stats_.max_kept_per_stage[i] = std::max(stats_.max_kept_per_stage[i], ++kept[i]);
          Tensor out = from_value<nn::Value>(r.at(1)).tensor();
          if (i + 1 < p) {
            if (!one_f_one_b || occupancy[i + 1] < p - (i + 1)) start_forward(mb, i + 1, out, true);
            else {
              waiting[i + 1].emplace_back(m, out);
              mb.phase = Phase::Waiting;  // until stage i + 1 has room
              mb.pending = {};
            }
          } else {
            Tensor y = out.detach().requires_grad_(true);
            Tensor l = loss_fn(y, ts[m]) * (static_cast<double>(xs[m].size(0)) / N);
            mb.grad = autograd::grad({l}, {y})[0];
            loss_total += l.item<double>();
            mb.phase = Phase::LossDone;
            ++forwards_done;
            if (schedule_ == Schedule::OneFOneB) start_backward(mb, p - 1, mb.grad);
          }
        } else {
          --kept[i];
          --occupancy[i];
          stages_[i]->release_key(mb.keys[i]);
          mb.keys[i] = 0;
          if (i > 0) {
            if (r.empty() || r[0].is_none())
              throw ActorError("[Pipeline] stage " + std::to_string(i) + " returned no gradient for its input");
            start_backward(mb, i - 1, r[0].as<Tensor>());
          } else {
            mb.phase = Phase::Done;
            --in_flight;
            ++done;
          }
        }
      }
      if (!progress) {
        for (auto& mb : mbs)
          if (mb.phase == Phase::Forward || mb.phase == Phase::Backward) {
            mb.pending.wait_for(std::chrono::milliseconds(1));
            break;
          }
      }
    }
    for (const auto& f : finishing) f.wait();  // every stage's gradients are final
  } catch (...) {
    release_all();
    throw;
  }
  stats_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return scalar_tensor(loss_total, TensorOptions().dtype(kFloat64));
}

Tensor Pipeline::forward(const Tensor& input) {
  NoGradGuard no_grad;
  const int p = num_stages();
  std::vector<Tensor> xs = input.chunk(chunks_, 0);
  const int M = static_cast<int>(xs.size());
  std::vector<Future<nn::Value>> pending(M);
  std::vector<int> stage(M, 0);
  std::vector<Tensor> out(M);
  for (int m = 0; m < M; ++m) pending[m] = stages_[0]->forward_async({nn::Value(xs[m])});
  int done = 0;
  while (done < M) {
    bool progress = false;
    for (int m = 0; m < M; ++m) {
      if (!pending[m].valid() || !pending[m].ready()) continue;
      Tensor y = pending[m].get().tensor();
      progress = true;
      if (++stage[m] < p) {
        pending[m] = stages_[stage[m]]->forward_async({nn::Value(y)});
      } else {
        out[m] = y;
        pending[m] = {};
        ++done;
      }
    }
    if (!progress)
      for (int m = 0; m < M; ++m)
        if (pending[m].valid()) {
          pending[m].wait_for(std::chrono::milliseconds(1));
          break;
        }
  }
  return cat(out, 0);
}

}  // namespace troupe::actors
