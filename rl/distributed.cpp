// RL on actors (distributed.h): the collector worker and replay actors, and the learner's side of them.
#include <troupe/rl/distributed.h>

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <stdexcept>

#include <troupe/actors/actor.h>
#include <troupe/actors/supervisor.h>
#include <troupe/rl/cartpole.h>
#include <troupe/rl/collector.h>
#include <troupe/rl/multistep.h>
#include <troupe/rl/replay.h>
#include <troupe/tensor/autograd.h>

namespace troupe::actors {

Value ValueTraits<rl::TensorDict>::to(const rl::TensorDict& td) {
  List batch;
  for (int64_t s : td.batch_size()) batch.emplace_back(s);
  List entries;
  for (const auto& k : td.keys(/*include_nested=*/true, /*leaves_only=*/true))
    entries.emplace_back(List{Value(k.str()), Value(td.get(k))});
  return Value(List{Value(std::move(batch)), Value(std::move(entries))});
}

rl::TensorDict ValueTraits<rl::TensorDict>::from(const Value& v) {
  const List& l = v.as<List>();
  if (l.size() != 2) throw ActorError("[rl] a TensorDict travels as [batch_size, entries], got a list of " + std::to_string(l.size()));
  rl::TensorDict td(from_value<std::vector<int64_t>>(l[0]));
  for (const auto& e : l[1].as<List>()) {
    const List& p = e.as<List>();
    td.set(rl::Key(p.at(0).as<std::string>()), p.at(1).as<Tensor>());
  }
  return td;
}

}  // namespace troupe::actors

namespace troupe::rl {

using actors::ActorError;
using actors::ActorRef;
using actors::List;
using actors::Value;

namespace {

std::mutex g_env_mu;
std::map<std::string, EnvFactory>& envs() {
  static std::map<std::string, EnvFactory> m{
      {"CartPole", [](int64_t n) -> std::shared_ptr<EnvBase> { return std::make_shared<CartPoleEnv>(n); }},
      {"Pendulum", [](int64_t n) -> std::shared_ptr<EnvBase> { return std::make_shared<PendulumEnv>(n); }},
  };
  return m;
}
std::atomic<int64_t> g_next_id{1};

List encode(const CollectorSpec& s) {
  return List{Value(s.env), Value(s.num_envs), Value(static_cast<int64_t>(s.seed)), Value(s.policy), Value(s.eps_init),
              Value(s.eps_end), Value(s.annealing_frames), Value(s.gamma), Value(s.n_steps), Value(s.frames_per_batch),
              Value(s.init_random_frames), Value(s.max_frames_per_traj)};
}
CollectorSpec decode(const List& l) {
  if (l.size() != 12) throw ActorError("[rl] a collector spec has 12 fields, got " + std::to_string(l.size()));
  CollectorSpec s;
  s.env = l[0].as<std::string>();
  s.num_envs = l[1].as<int64_t>();
  s.seed = static_cast<uint64_t>(l[2].as<int64_t>());
  s.policy = l[3].as<std::string>();
  s.eps_init = actors::from_value<double>(l[4]);
  s.eps_end = actors::from_value<double>(l[5]);
  s.annealing_frames = l[6].as<int64_t>();
  s.gamma = actors::from_value<double>(l[7]);
  s.n_steps = l[8].as<int64_t>();
  s.frames_per_batch = l[9].as<int64_t>();
  s.init_random_frames = l[10].as<int64_t>();
  s.max_frames_per_traj = l[11].as<int64_t>();
  return s;
}

List pairs_of(const nn::StateDict& d) { return actors::detail::state_pairs(d); }
nn::StateDict dict_of(const Value& v) { return actors::detail::state_dict_from(v); }

// ---- the replay actor

// sampler: [] uniform, [alpha, beta, eps] prioritized
TensorDictReplayBuffer make_buffer(int64_t capacity, int64_t seed, const List& sampler) {
  if (sampler.empty()) return TensorDictReplayBuffer(capacity, RandomSampler{}, static_cast<uint64_t>(seed));
  if (sampler.size() != 3)
    throw ActorError("[rl] a replay sampler travels as [] or [alpha, beta, eps], got " + std::to_string(sampler.size()) + " fields");
  using actors::from_value;
  PrioritizedSampler p(capacity, from_value<double>(sampler[0]), from_value<double>(sampler[1]), from_value<double>(sampler[2]));
  return TensorDictReplayBuffer(capacity, std::move(p), static_cast<uint64_t>(seed));
}

class ReplayActor : public actors::Actor {
 public:
  ReplayActor(int64_t capacity, int64_t seed, List sampler) : buf_(make_buffer(capacity, seed, sampler)) {
    handle("extend", [this](TensorDict td) { buf_.extend(td); return buf_.size(); });
    handle("sample", [this](int64_t n) {
      if (pending_error_.empty()) return buf_.sample(n);
      std::string e;
      e.swap(pending_error_);
      throw ActorError("an earlier update_priority or set_beta failed: " + e);
    });
    // one-way: an error is kept for the next sample (and shows as the actor's last error)
    handle("prio", [this](Tensor index, Tensor priority) { keep_error([&] { buf_.update_priority(index, priority); }); });
    handle("beta", [this](double beta) { keep_error([&] { buf_.sampler().set_beta(beta); }); });
    handle("size", [this] { return buf_.size(); });
    handle("sd", [this] { return Value(pairs_of(buf_.state_dict())); });
    handle("load", [this](Value sd) { buf_.load_state_dict(dict_of(sd)); });
  }

 private:
  template <class F>
  void keep_error(F&& f) {
    try {
      f();
    } catch (const std::exception& e) {
      pending_error_ = e.what();
      throw;
    }
  }

  TensorDictReplayBuffer buf_;
  std::string pending_error_;  // of a one-way message, thrown by the next sample
};

// ---- the collector worker actor

class CollectorActor : public actors::Actor {
 public:
  CollectorActor(const List& spec, const List& module_spec, ActorRef replay, int64_t worker, int64_t restart)
      : spec_(decode(spec)), replay_(std::move(replay)), traj_offset_((worker << 40) + (restart << 32)) {
    use_own_thread();  // collecting takes milliseconds and waits on the replay actor
    net_ = actors::detail::build_module(module_spec);
    const uint64_t seed = spec_.seed + 1000 * static_cast<uint64_t>(worker) + 100000 * static_cast<uint64_t>(restart);
    env_ = make_env(spec_.env, spec_.num_envs);
    env_->set_seed(seed);
    explore_ = std::make_unique<EGreedy>(QValuePolicy(net_), env_, spec_.eps_init, spec_.eps_end, spec_.annealing_frames, seed);
    std::function<TensorDict(TensorDict)> post;
    if (spec_.n_steps > 0) {
      multistep_ = std::make_unique<MultiStep>(spec_.gamma, spec_.n_steps);
      post = [this](TensorDict b) { return (*multistep_)(b); };
    }
    collector_ = std::make_unique<SyncDataCollector>(
        env_, [this](TensorDict td) { return (*explore_)(std::move(td)); },
        SyncDataCollectorOptions()
            .frames_per_batch(spec_.frames_per_batch)
            .init_random_frames(spec_.init_random_frames)
            .max_frames_per_traj(spec_.max_frames_per_traj),
        post);
    handle("next", [this] { return collect(); });
    handle("weights", [this](int64_t version, Value sd) {
      net_->load_state_dict(dict_of(sd));
      version_ = version;
      collector_->update_policy_weights_();
    });
    handle("eps", [this] { return explore_->eps(); });
  }

 private:
  // [frames, policy version, episode returns, batch or none]
  List collect() {
    auto b = collector_->next();
    if (!b) throw ActorError("the collector has no more frames");
    explore_->step(b->numel());
    TensorDict flat = b->exclude({"action_value"}).reshape({-1});
    // trajectory ids unique across workers and restarts: worker << 40, restart << 32
    if (flat.contains("collector.traj_ids")) flat.set("collector.traj_ids", flat.get("collector.traj_ids") + traj_offset_);
    const int64_t frames = flat.numel();
    std::vector<double> returns = collector_->take_episode_returns();
    Value batch;
    if (replay_.valid()) replay_.request<int64_t>("extend", flat).get();
    else batch = actors::to_value(flat);
    return List{Value(frames), Value(version_), actors::to_value(returns), std::move(batch)};
  }

  CollectorSpec spec_;
  ActorRef replay_;
  nn::ModulePtr net_;
  std::shared_ptr<EnvBase> env_;
  std::unique_ptr<EGreedy> explore_;
  std::unique_ptr<MultiStep> multistep_;
  std::unique_ptr<SyncDataCollector> collector_;
  int64_t version_ = 0;
  int64_t traj_offset_;
};

const bool g_registered = [] {
  actors::register_actor<ReplayActor, int64_t, int64_t, List>("troupe.rl.Replay");
  actors::register_factory("troupe.rl.Collector", [](const List& a) -> std::unique_ptr<actors::Actor> {
    if (a.size() != 5) actors::detail::throw_arity("factory 'troupe.rl.Collector'", 5, a.size());
    ActorRef replay = a[2].is_none() ? ActorRef() : a[2].as<ActorRef>();
    return std::make_unique<CollectorActor>(a[0].as<List>(), a[1].as<List>(), replay, a[3].as<int64_t>(), a[4].as<int64_t>());
  });
  return true;
}();

// Copies of the weights (the learner changes them in place while they travel).
nn::StateDict snapshot(const nn::Module& m) {
  NoGradGuard g;
  nn::StateDict out;
  for (const auto& [k, t] : const_cast<nn::Module&>(m).state_dict()) out.insert_or_assign(k, t.detach().clone());
  return out;
}

}  // namespace

// ---- environments

void register_env(const std::string& name, EnvFactory factory) {
  std::lock_guard<std::mutex> g(g_env_mu);
  envs()[name] = std::move(factory);
}

std::shared_ptr<EnvBase> make_env(const std::string& name, int64_t num_envs) {
  EnvFactory f;
  std::string known;
  {
    std::lock_guard<std::mutex> g(g_env_mu);
    auto it = envs().find(name);
    if (it != envs().end()) f = it->second;
    for (const auto& [k, v] : envs()) known += (known.empty() ? "" : ", ") + k;
  }
  if (!f) throw std::invalid_argument("[rl] no environment '" + name + "' (registered: " + known + "; rl::register_env adds one)");
  return f(num_envs);
}

// ---- RemoteReplayBuffer

RemoteReplayBuffer RemoteReplayBuffer::spawn(actors::Runtime& rt, int rank, int64_t capacity, uint64_t seed, std::string name) {
  (void)g_registered;
  if (capacity <= 0) throw std::invalid_argument("[rl] RemoteReplayBuffer: capacity must be positive, got " + std::to_string(capacity));
  if (name.empty()) name = "troupe.replay" + std::to_string(g_next_id++);
  return RemoteReplayBuffer(rt.spawn_on(rank, name, "troupe.rl.Replay", capacity, static_cast<int64_t>(seed), List{}));
}
RemoteReplayBuffer RemoteReplayBuffer::spawn(actors::Runtime& rt, int rank, int64_t capacity, PrioritizedReplayOptions p,
                                             uint64_t seed, std::string name) {
  (void)g_registered;
  if (capacity <= 0) throw std::invalid_argument("[rl] RemoteReplayBuffer: capacity must be positive, got " + std::to_string(capacity));
  PrioritizedSampler check(1, p.alpha, p.beta, p.eps);  // the argument errors here, not in the actor
  if (name.empty()) name = "troupe.replay" + std::to_string(g_next_id++);
  return RemoteReplayBuffer(rt.spawn_on(rank, name, "troupe.rl.Replay", capacity, static_cast<int64_t>(seed),
                                        List{Value(p.alpha), Value(p.beta), Value(p.eps)}));
}
void RemoteReplayBuffer::update_priority(const Tensor& index, const Tensor& priority) const {
  ref_.send("prio", index.detach().to(kInt64).contiguous(), priority.detach().to(kFloat64).contiguous());
}
void RemoteReplayBuffer::set_beta(double beta) const {
  if (beta < 0) throw std::invalid_argument("[rl] RemoteReplayBuffer.set_beta: beta must be >= 0, got " + std::to_string(beta));
  ref_.send("beta", beta);
}
int64_t RemoteReplayBuffer::extend(const TensorDict& frames) const { return ref_.request<int64_t>("extend", frames).get(); }
TensorDict RemoteReplayBuffer::sample(int64_t batch_size) const { return ref_.request<TensorDict>("sample", batch_size).get(); }
int64_t RemoteReplayBuffer::size() const { return ref_.request<int64_t>("size").get(); }
nn::StateDict RemoteReplayBuffer::state_dict() const { return dict_of(ref_.request<Value>("sd").get()); }
void RemoteReplayBuffer::load_state_dict(const nn::StateDict& state) const {
  ref_.request<void>("load", Value(pairs_of(state))).get();
}

// ---- the learner's side of the workers

struct MultiaSyncDataCollector::Worker {
  ActorRef ref;
  actors::Future<List> pending;
  actors::detail::RestartBudget budget;  // its restarts against max_restarts, the limit's text
};

MultiaSyncDataCollector::MultiaSyncDataCollector(actors::Runtime& rt, std::vector<int> ranks, CollectorSpec spec,
                                                 const nn::ModulePtr& policy, int64_t total_frames, RemoteReplayBuffer replay,
                                                 int max_restarts)
    : rt_(rt),
      ranks_(std::move(ranks)),
      spec_(std::move(spec)),
      policy_(policy),
      total_frames_(total_frames),
      replay_(std::move(replay)),
      max_restarts_(max_restarts) {
  (void)g_registered;
  if (ranks_.empty()) throw std::invalid_argument("[rl] MultiaSyncDataCollector: no worker ranks");
  if (!policy_) throw std::invalid_argument("[rl] MultiaSyncDataCollector: no policy network");
  if (spec_.policy.empty() && rt.networked())
    throw std::invalid_argument("[rl] MultiaSyncDataCollector: CollectorSpec::policy must name the policy's module factory "
                                "(actors::register_module) so that other processes can build it");
  for (int r : ranks_)
    if (r < 0 || r >= rt.size())
      throw std::invalid_argument("[rl] MultiaSyncDataCollector: worker rank " + std::to_string(r) + " of " + std::to_string(rt.size()));
  weights_ = snapshot(*policy_);
  workers_.resize(ranks_.size());
  for (size_t i = 0; i < ranks_.size(); ++i) {
    workers_[i] = std::make_unique<Worker>();
    workers_[i]->budget = actors::detail::RestartBudget(actors::RestartPolicy().restarts(max_restarts_));
    start(i);
  }
}

MultiaSyncDataCollector::~MultiaSyncDataCollector() { shutdown(); }

void MultiaSyncDataCollector::start(size_t i) {
  Worker& w = *workers_[i];
  nn::ModulePtr sent = rt_.networked() ? policy_ : policy_->clone();
  List mspec = actors::detail::module_spec(rt_, sent, ranks_[i], spec_.policy, {});
  const std::string name = "troupe.collector" + std::to_string(g_next_id++) + "." + std::to_string(i);
  try {
    w.ref = rt_.spawn_on(ranks_[i], name, "troupe.rl.Collector", encode(spec_), mspec,
                         replay_.ref().valid() ? Value(replay_.ref()) : Value(), static_cast<int64_t>(i),
                         static_cast<int64_t>(w.budget.restarts()));
  } catch (...) {
    actors::detail::drop_handoff(mspec);
    throw;
  }
  if (version_ > 0) w.ref.send("weights", version_, Value(pairs_of(weights_)));
  w.pending = w.ref.request<List>("next");
}

std::optional<CollectedBatch> MultiaSyncDataCollector::take(size_t i) {
  Worker& w = *workers_[i];
  List r;
  try {
    r = w.pending.get();
  } catch (const ActorError& e) {
    w.budget.admit("[rl] collector worker " + std::to_string(i) + " (rank " + std::to_string(ranks_[i]) + ")", e.what());
    ++restarts_;
    try {
      w.ref.stop();
    } catch (const std::exception&) {
    }
    start(i);  // its lost batch is collected again by the new worker
    return std::nullopt;
  }
  CollectedBatch b;
  b.worker = static_cast<int>(i);
  b.frames = r.at(0).as<int64_t>();
  b.policy_version = r.at(1).as<int64_t>();
  b.episode_returns = actors::from_value<std::vector<double>>(r.at(2));
  if (!r.at(3).is_none()) b.batch = actors::from_value<TensorDict>(r.at(3));
  frames_ += b.frames;
  if (!done()) w.pending = w.ref.request<List>("next");
  else w.pending = {};
  return b;
}

std::optional<CollectedBatch> MultiaSyncDataCollector::next() {
  while (!done()) {
    for (size_t k = 0; k < workers_.size(); ++k) {
      const size_t i = (next_ + k) % workers_.size();
      if (workers_[i]->pending.valid() && workers_[i]->pending.ready()) {
        next_ = i + 1;
        if (auto b = take(i)) return b;
      }
    }
    // none ready: wait a little on the next worker in turn
    auto& w = *workers_[next_ % workers_.size()];
    if (w.pending.valid()) w.pending.wait_for(std::chrono::milliseconds(1));
  }
  return std::nullopt;
}

std::optional<CollectedBatch> MultiSyncDataCollector::next() {
  if (done()) return std::nullopt;
  std::vector<CollectedBatch> got;
  for (size_t i = 0; i < workers_.size(); ++i) {
    std::optional<CollectedBatch> b;
    while (!b) {
      if (!workers_[i]->pending.valid()) workers_[i]->pending = workers_[i]->ref.request<List>("next");
      b = take(i);
    }
    got.push_back(std::move(*b));
  }
  CollectedBatch all;
  all.worker = -1;
  all.policy_version = got.front().policy_version;
  std::vector<TensorDict> parts;
  for (auto& b : got) {
    all.frames += b.frames;
    all.policy_version = std::min(all.policy_version, b.policy_version);
    all.episode_returns.insert(all.episode_returns.end(), b.episode_returns.begin(), b.episode_returns.end());
    if (b.batch) parts.push_back(std::move(*b.batch));
  }
  if (!parts.empty()) all.batch = TensorDict::cat(parts, 0);
  return all;
}

void MultiaSyncDataCollector::update_policy_weights_(const nn::Module& policy) {
  weights_ = snapshot(policy);
  ++version_;
  Value w(pairs_of(weights_));
  for (auto& wk : workers_) {
    if (!wk || !wk->ref.valid()) continue;
    try {
      wk->ref.send("weights", version_, w);
    } catch (const ActorError&) {
      // a worker that is gone: its pending batch fails, and next() spawns it again with these weights
    }
  }
}

std::vector<ActorRef> MultiaSyncDataCollector::workers() const {
  std::vector<ActorRef> out;
  for (const auto& w : workers_) out.push_back(w->ref);
  return out;
}

void MultiaSyncDataCollector::shutdown() {
  for (auto& w : workers_) {
    if (!w || !w->ref.valid()) continue;
    try {
      if (actors::running()) w->ref.stop();
    } catch (const std::exception&) {
    }
    w->ref = ActorRef();
    w->pending = {};
  }
}

}  // namespace troupe::rl
