// The averager actor (averager.h): an AveragedModel fed snapshots by message, and the trainer's side with
// its bounded, coalescing queue.
#include <troupe/actors/averager.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <cstdio>
#include <stdexcept>

#include <troupe/actors/actor.h>
#include <troupe/actors/remote_module.h>
#include <troupe/actors/supervisor.h>
#include <troupe/tensor/autograd.h>

namespace troupe::actors {

namespace {

namespace swa = optim::swa_utils;

std::mutex g_fn_mu;
std::map<std::string, swa::MultiAvgFn>& avg_fns() {
  static std::map<std::string, swa::MultiAvgFn> m;
  return m;
}
std::atomic<int64_t> g_next_averager{1};

// Copies: in one process a reply passes tensors by handle, and the averager goes on updating its own.
List pairs_of(const nn::StateDict& d) {
  nn::StateDict copy;
  for (const auto& [k, t] : d) copy.insert_or_assign(k, t.detach().clone());
  return detail::state_pairs(copy);
}

/// A module whose parameters and buffers are the tensors of one snapshot, in the trainer's order:
/// AveragedModel::update_parameters zips them with its own.
struct Snapshot : nn::Module {
  Snapshot(const List& params, const List& buffers) {
    for (size_t i = 0; i < params.size(); ++i) register_parameter("p" + std::to_string(i), params[i].as<Tensor>(), false);
    for (size_t i = 0; i < buffers.size(); ++i) register_buffer("b" + std::to_string(i), buffers[i].as<Tensor>());
  }
};

class AveragerActor : public Actor {
 public:
  AveragerActor(const List& spec, const std::string& avg, double decay, bool use_buffers) {
    nn::ModulePtr model = detail::build_module(spec);
    swa::MultiAvgFn fn;
    if (avg == "ema") {
      fn = swa::get_ema_multi_avg_fn(decay);
    } else if (avg == "copy") {
      fn = [](std::vector<Tensor>& averaged, const std::vector<Tensor>& current, const Tensor&) {
        NoGradGuard no_grad;
        for (size_t i = 0; i < averaged.size(); ++i) averaged[i].copy_(current[i]);
      };
    } else if (avg != "swa") {
      std::lock_guard<std::mutex> g(g_fn_mu);
      auto it = avg_fns().find(avg);
      if (it == avg_fns().end()) {
        std::string known = "swa, ema, copy";
        for (const auto& [k, f] : avg_fns()) known += ", " + k;
        throw ActorError("no averaging function '" + avg + "' (known: " + known +
                         "); register it on every rank with actors::register_avg_fn");
      }
      fn = it->second;
    }
    avg_ = std::make_shared<swa::AveragedModel>(model, std::nullopt, nullptr, fn, use_buffers);
    handle("upd", [this](int64_t version, List params, List buffers) {
      Snapshot s(params, buffers);
      avg_->update_parameters(s);
      applied_.push_back(version);
      return version;
    });
    handle("applied", [this] { return applied_; });
    // a consistent cut: the averaged model and the versions in it; and its restore
    handle("ckpt", [this] { return List{Value(pairs_of(avg_->state_dict())), to_value(applied_)}; });
    handle("restore", [this](Value sd, std::vector<int64_t> applied) {
      avg_->load_state_dict(detail::state_dict_from(sd));
      applied_ = std::move(applied);
    });
    handle("sd", [this] { return Value(pairs_of(avg_->state_dict())); });
    handle("fwd", [this](Tensor x) {
      NoGradGuard g;
      return (*avg_)(x);
    });
    handle("train", [this](bool mode) { avg_->train(mode); });
    handle("bn", [this](std::vector<Tensor> batches) { swa::update_bn(batches, *avg_); });
  }

 private:
  std::shared_ptr<swa::AveragedModel> avg_;
  std::vector<int64_t> applied_;
};

const bool g_registered = [] {
  register_factory("troupe.Averager", [](const List& a) -> std::unique_ptr<Actor> {
    if (a.size() != 4) detail::throw_arity("factory 'troupe.Averager'", 4, a.size());
    return std::make_unique<AveragerActor>(a[0].as<List>(), a[1].as<std::string>(), a[2].as<double>(), a[3].as<bool>());
  });
  return true;
}();

// The trainer's snapshot: copies of its parameters and buffers (it goes on changing them in place).
List snapshot_of(const nn::Module& model) {
  NoGradGuard g;
  List params, buffers;
  for (const auto& p : model.parameters()) params.emplace_back(p.detach().clone());
  for (const auto& b : model.buffers()) buffers.emplace_back(b.detach().clone());
  return List{Value(std::move(params)), Value(std::move(buffers))};
}

}  // namespace

void register_avg_fn(const std::string& name, optim::swa_utils::MultiAvgFn fn) {
  if (name == "swa" || name == "ema" || name == "copy") throw ActorError("[actors] register_avg_fn: '" + name + "' is built in");
  std::lock_guard<std::mutex> g(g_fn_mu);
  avg_fns()[name] = std::move(fn);
}

struct Averager::Queue {
  std::mutex mu;
  ActorRef ref;
  int max_in_flight = 1;
  int64_t sent = 0;       // versions given out
  int64_t update_every = 1, calls = 0;  // update() sends on every update_every-th call
  int64_t coalesced = 0;  // snapshots dropped for a newer one
  int64_t lost = 0;       // updates that died with a failed averager
  std::vector<std::pair<int64_t, Future<int64_t>>> in_flight;
  bool has_waiting = false;
  int64_t waiting_version = 0;
  List waiting;
  std::string error;  // the first failure, thrown by flush()
  // supervision
  Runtime* rt = nullptr;
  int rank = 0;
  std::string name;
  List spawn_args;               // the factory's arguments, with a module spec to build from again
  nn::ModulePtr model_template;  // in one process: a copy to hand to a restarted averager
  detail::RestartBudget budget;  // max_restarts, the restarts so far, the limit's text
  int64_t checkpoint_every = 0, applied_since_ckpt = 0;
  bool has_ckpt = false;
  Value ckpt_state;
  std::vector<int64_t> ckpt_applied;
  Future<List> ckpt_pending;
};

Averager::Averager(ActorRef ref, int max_in_flight) : q_(std::make_shared<Queue>()) {
  if (max_in_flight < 1) throw ActorError("[actors] Averager: max_in_flight must be at least 1, got " + std::to_string(max_in_flight));
  q_->ref = std::move(ref);
  q_->max_in_flight = max_in_flight;
}

ActorRef Averager::ref() const {
  std::lock_guard<std::mutex> g(q_->mu);
  return q_->ref;
}

// Forgets finished updates; a failure restarts the averager (supervised) or is kept for flush().
void Averager::prune_locked(std::unique_lock<std::mutex>&) {
  Queue& q = *q_;
  std::string failure;
  for (auto it = q.in_flight.begin(); it != q.in_flight.end();) {
    if (!it->second.ready()) {
      ++it;
      continue;
    }
    try {
      it->second.get();
      ++q.applied_since_ckpt;
    } catch (const std::exception& e) {
      if (failure.empty()) failure = e.what();
      ++q.lost;
    }
    it = q.in_flight.erase(it);
  }
  if (q.ckpt_pending.valid() && q.ckpt_pending.ready()) {
    try {
      List c = q.ckpt_pending.get();
      q.ckpt_state = c.at(0);
      q.ckpt_applied = from_value<std::vector<int64_t>>(c.at(1));
      q.has_ckpt = true;
    } catch (const std::exception& e) {
      if (failure.empty()) failure = e.what();
    }
    q.ckpt_pending = {};
  }
  if (!failure.empty()) {
    if (q.budget.policy().max_restarts > 0 && q.rt && q.error.empty()) {
      try {
        q.budget.admit("[actors] averager '" + q.name + "' (rank " + std::to_string(q.rank) + ")", failure);
        restart_locked(failure);
      } catch (const ActorError& e) {
        q.error = e.what();  // past max_restarts (or the restart failed): flush() throws it
      }
    } else if (q.error.empty()) {
      q.error = failure;
    }
  }
  if (q.checkpoint_every > 0 && q.applied_since_ckpt >= q.checkpoint_every && !q.ckpt_pending.valid()) {
    q.applied_since_ckpt = 0;
    q.ckpt_pending = q.ref.request<List>("ckpt");  // taken without waiting, kept when it answers
  }
}

void Averager::restart_locked(const std::string& why) {
  Queue& q = *q_;
  // what was in flight is lost with the old actor
  q.lost += static_cast<int64_t>(q.in_flight.size());
  q.in_flight.clear();
  q.ckpt_pending = {};
  try {
    q.ref.stop();
  } catch (const std::exception&) {
  }
  List args = q.spawn_args;
  if (q.model_template) {  // one process: hand over a fresh copy
    args[0] = Value(detail::module_spec(*q.rt, q.model_template->clone(), q.rank, "", {}));
  }
  q.ref = q.rt->spawn_on_list(q.rank, q.name + ".r" + std::to_string(q.budget.restarts()), "troupe.Averager", args);
  if (q.has_ckpt) q.ref.request<void>("restore", q.ckpt_state, q.ckpt_applied).get();
  std::fprintf(stderr, "[actors] averager '%s' (rank %d) failed (%s); spawned again from its %s (restart %d of %d)\n",
               q.name.c_str(), q.rank, why.c_str(), q.has_ckpt ? "last checkpoint" : "initial state (no checkpoint yet)",
               q.budget.restarts(), q.budget.policy().max_restarts);
}

Averager Averager::spawn(Runtime& rt, int rank, const nn::ModulePtr& model, AveragerOptions o, std::string name) {
  if (!model) throw ActorError("[actors] Averager::spawn: the model is null");
  if (o.update_every < 1)
    throw ActorError("[actors] Averager::spawn: update_every must be at least 1, got " + std::to_string(o.update_every));
  if (name.empty()) name = "troupe.averager" + std::to_string(g_next_averager++);
  // In one process the averager gets its own copy (the trainer keeps changing its model).
  nn::ModulePtr sent = rt.networked() ? model : model->clone();
  List spec = detail::module_spec(rt, sent, rank, o.factory, o.factory_args);
  List args{Value(spec), Value(o.avg), Value(o.decay), Value(o.use_buffers)};
  ActorRef ref;
  try {
    ref = rt.spawn_on_list(rank, name, "troupe.Averager", args);
  } catch (...) {
    detail::drop_handoff(spec);
    throw;
  }
  Averager a(ref, o.max_in_flight);
  Queue& q = *a.q_;
  q.rt = &rt;
  q.rank = rank;
  q.name = name;
  q.spawn_args = args;
  q.budget = detail::RestartBudget(RestartPolicy().restarts(o.max_restarts));
  q.checkpoint_every = o.checkpoint_every;
  q.update_every = o.update_every;
  if (!rt.networked() && o.max_restarts > 0) q.model_template = model->clone();
  return a;
}

void Averager::send_locked(std::unique_lock<std::mutex>&, int64_t version, List snapshot) {
  const List& s = snapshot;
  q_->in_flight.emplace_back(version, q_->ref.request<int64_t>("upd", version, s[0], s[1]));
}

int64_t Averager::update(const nn::Module& model) {
  if (!q_) throw ActorError("[actors] Averager::update on an empty handle");
  {
    std::lock_guard<std::mutex> g(q_->mu);
    if (++q_->calls % q_->update_every != 0) return q_->sent;
  }
  List snap = snapshot_of(model);
  std::unique_lock<std::mutex> lock(q_->mu);
  const int64_t version = ++q_->sent;
  prune_locked(lock);
  auto room = [&] { return static_cast<int>(q_->in_flight.size()) < q_->max_in_flight; };
  if (room() && q_->has_waiting) {
    q_->has_waiting = false;
    send_locked(lock, q_->waiting_version, std::move(q_->waiting));
  }
  if (room()) {
    send_locked(lock, version, std::move(snap));
  } else {
    if (q_->has_waiting) ++q_->coalesced;
    q_->has_waiting = true;
    q_->waiting_version = version;
    q_->waiting = std::move(snap);
  }
  return version;
}

void Averager::flush() {
  if (!q_) return;
  std::unique_lock<std::mutex> lock(q_->mu);
  while (true) {
    for (auto& vf : q_->in_flight) vf.second.wait_for(default_timeout());  // never past the request's deadline
    if (q_->ckpt_pending.valid()) q_->ckpt_pending.wait_for(default_timeout());
    prune_locked(lock);
    if (!q_->in_flight.empty()) continue;  // a restart's re-sent work, or still travelling
    if (!q_->has_waiting) break;
    q_->has_waiting = false;
    send_locked(lock, q_->waiting_version, std::move(q_->waiting));
  }
  if (!q_->error.empty()) {
    std::string e = std::move(q_->error);
    q_->error.clear();
    throw ActorError(e);
  }
}

void Averager::checkpoint() {
  flush();
  std::unique_lock<std::mutex> lock(q_->mu);
  List c = q_->ref.request<List>("ckpt").get();
  q_->ckpt_state = c.at(0);
  q_->ckpt_applied = from_value<std::vector<int64_t>>(c.at(1));
  q_->has_ckpt = true;
  q_->applied_since_ckpt = 0;
}

void Averager::load_state_dict(const nn::StateDict& state, const std::vector<int64_t>& applied) {
  flush();
  std::unique_lock<std::mutex> lock(q_->mu);
  Value sd(detail::state_pairs(state));
  q_->ref.request<void>("restore", sd, applied).get();
  q_->ckpt_state = sd;
  q_->ckpt_applied = applied;
  q_->has_ckpt = true;
  q_->applied_since_ckpt = 0;
  for (int64_t v : applied) q_->sent = std::max(q_->sent, v);
}

int64_t Averager::lost() const {
  std::lock_guard<std::mutex> g(q_->mu);
  return q_->lost;
}
int Averager::restarts() const {
  std::lock_guard<std::mutex> g(q_->mu);
  return q_->budget.restarts();
}

int64_t Averager::versions_sent() const {
  std::lock_guard<std::mutex> g(q_->mu);
  return q_->sent;
}
int64_t Averager::coalesced() const {
  std::lock_guard<std::mutex> g(q_->mu);
  return q_->coalesced;
}
std::vector<int64_t> Averager::applied_versions() { return ref().request<std::vector<int64_t>>("applied").get(); }

nn::StateDict Averager::state_dict() const { return detail::state_dict_from(ref().request<Value>("sd").get()); }

void Averager::load_into(nn::Module& model) const {
  nn::StateDict all = state_dict(), mine;
  const std::string prefix = "module.";
  for (const auto& [k, t] : all)
    if (k.compare(0, prefix.size(), prefix) == 0) mine.insert_or_assign(k.substr(prefix.size()), t);
  model.load_state_dict(mine);
}

Tensor Averager::forward(const Tensor& x) const { return ref().request<Tensor>("fwd", x).get(); }
void Averager::train(bool mode) const { ref().request<void>("train", mode).get(); }
void Averager::update_bn(const std::vector<Tensor>& batches) const { ref().request<void>("bn", batches).get(); }

}  // namespace troupe::actors
