// The averager actor (averager.h): an AveragedModel fed snapshots by message, and the trainer's side with
// its bounded, coalescing queue.
#include <troupe/actors/averager.h>

#include <atomic>
#include <map>
#include <stdexcept>

#include <troupe/actors/actor.h>
#include <troupe/actors/remote_module.h>
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

List pairs_of(const nn::StateDict& d) {
  List l;
  for (const auto& [k, t] : d) l.emplace_back(List{Value(k), Value(t)});
  return l;
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
    } else if (avg != "swa") {
      std::lock_guard<std::mutex> g(g_fn_mu);
      auto it = avg_fns().find(avg);
      if (it == avg_fns().end()) {
        std::string known = "swa, ema";
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
  if (name == "swa" || name == "ema") throw ActorError("[actors] register_avg_fn: '" + name + "' is built in");
  std::lock_guard<std::mutex> g(g_fn_mu);
  avg_fns()[name] = std::move(fn);
}

struct Averager::Queue {
  std::mutex mu;
  int max_in_flight = 1;
  int64_t sent = 0;       // versions given out
  int64_t coalesced = 0;  // snapshots dropped for a newer one
  std::vector<std::pair<int64_t, Future<int64_t>>> in_flight;
  bool has_waiting = false;
  int64_t waiting_version = 0;
  List waiting;
  std::string error;  // the first failure, thrown by flush()

  // Forgets finished updates (recording a failure); true when another may be sent.
  bool prune() {
    for (auto it = in_flight.begin(); it != in_flight.end();) {
      if (!it->second.ready()) {
        ++it;
        continue;
      }
      try {
        it->second.get();
      } catch (const std::exception& e) {
        if (error.empty()) error = e.what();
      }
      it = in_flight.erase(it);
    }
    return static_cast<int>(in_flight.size()) < max_in_flight;
  }
};

Averager::Averager(ActorRef ref, int max_in_flight) : ref_(std::move(ref)), q_(std::make_shared<Queue>()) {
  if (max_in_flight < 1) throw ActorError("[actors] Averager: max_in_flight must be at least 1, got " + std::to_string(max_in_flight));
  q_->max_in_flight = max_in_flight;
}

Averager Averager::spawn(Runtime& rt, int rank, const nn::ModulePtr& model, AveragerOptions o, std::string name) {
  if (!model) throw ActorError("[actors] Averager::spawn: the model is null");
  if (name.empty()) name = "troupe.averager" + std::to_string(g_next_averager++);
  // In one process the averager gets its own copy (the trainer keeps changing its model).
  nn::ModulePtr sent = rt.networked() ? model : model->clone();
  List spec = detail::module_spec(rt, sent, rank, o.factory, o.factory_args);
  ActorRef ref;
  try {
    ref = rt.spawn_on_list(rank, name, "troupe.Averager", List{Value(spec), Value(o.avg), Value(o.decay), Value(o.use_buffers)});
  } catch (...) {
    detail::drop_handoff(spec);
    throw;
  }
  return Averager(ref, o.max_in_flight);
}

void Averager::send_locked(std::unique_lock<std::mutex>&, int64_t version, List snapshot) {
  const List& s = snapshot;
  q_->in_flight.emplace_back(version, ref_.request<int64_t>("upd", version, s[0], s[1]));
}

int64_t Averager::update(const nn::Module& model) {
  if (!q_) throw ActorError("[actors] Averager::update on an empty handle");
  List snap = snapshot_of(model);
  std::unique_lock<std::mutex> lock(q_->mu);
  const int64_t version = ++q_->sent;
  if (q_->prune() && q_->has_waiting) {
    q_->has_waiting = false;
    send_locked(lock, q_->waiting_version, std::move(q_->waiting));
  }
  if (q_->prune()) {
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
    q_->prune();
    if (!q_->in_flight.empty()) continue;  // still travelling (wait_for returned at the deadline: prune fails them)
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

int64_t Averager::versions_sent() const {
  std::lock_guard<std::mutex> g(q_->mu);
  return q_->sent;
}
int64_t Averager::coalesced() const {
  std::lock_guard<std::mutex> g(q_->mu);
  return q_->coalesced;
}
std::vector<int64_t> Averager::applied_versions() { return ref_.request<std::vector<int64_t>>("applied").get(); }

nn::StateDict Averager::state_dict() const {
  nn::StateDict out;
  for (const auto& e : ref_.request<List>("sd").get()) {
    const List& p = e.as<List>();
    out.insert_or_assign(p.at(0).as<std::string>(), p.at(1).as<Tensor>());
  }
  return out;
}

void Averager::load_into(nn::Module& model) const {
  nn::StateDict all = state_dict(), mine;
  const std::string prefix = "module.";
  for (const auto& [k, t] : all)
    if (k.compare(0, prefix.size(), prefix) == 0) mine.insert_or_assign(k.substr(prefix.size()), t);
  model.load_state_dict(mine);
}

Tensor Averager::forward(const Tensor& x) const { return ref_.request<Tensor>("fwd", x).get(); }
void Averager::train(bool mode) const { ref_.request<void>("train", mode).get(); }
void Averager::update_bn(const std::vector<Tensor>& batches) const { ref_.request<void>("bn", batches).get(); }

}  // namespace troupe::actors
