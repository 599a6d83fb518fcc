// SyncDataCollector, QValuePolicy, EGreedy (rl/collector.h).
#include <troupe/rl/collector.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include <troupe/tensor/autograd.h>
#include <troupe/tensor/ops.h>
#include <troupe/tensor/random.h>

namespace troupe::rl {

namespace {
// Keys used every step, parsed once.
const Key& key_observation() { static const Key k("observation"); return k; }
const Key& key_action() { static const Key k("action"); return k; }
const Key& key_action_value() { static const Key k("action_value"); return k; }
const Key& key_traj_ids() { static const Key k("collector.traj_ids"); return k; }
const Key& key_next_reward() { static const Key k("next.reward"); return k; }
const Key& key_next_done() { static const Key k("next.done"); return k; }
const Key& key_next_truncated() { static const Key k("next.truncated"); return k; }
const Key& key_reset() { static const Key k("_reset"); return k; }

// q.argmax(-1); for a contiguous float32 [N, A] on the CPU (the usual Q-network output) one pass
// without the reduction machinery, with argmax's rules: the first maximum, a NaN counts as the maximum.
Tensor greedy_actions(const Tensor& q) {
  if (q.dim() != 2 || q.dtype() != kFloat32 || !q.is_contiguous() || !q.is_cpu() || q.size(1) == 0) return q.argmax(-1);
  const int64_t n = q.size(0), a = q.size(1);
  Tensor out = empty({n}, TensorOptions().dtype(kInt64));
  const float* v = q.data_ptr<float>();
  int64_t* o = out.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i, v += a) {
    int64_t best = 0;
    if (!std::isnan(v[0]))
      for (int64_t j = 1; j < a; ++j) {
        if (std::isnan(v[j])) {
          best = j;
          break;
        }
        if (v[j] > v[best]) best = j;
      }
    o[i] = best;
  }
  return out;
}

}  // namespace

Policy QValuePolicy(nn::ModulePtr net) {
  if (!net) throw std::invalid_argument("[QValuePolicy] no network");
  return [net](TensorDict td) {
    NoGradGuard no_grad;
    Tensor q = (*net)(td.get(key_observation()));
    td.set(key_action_value(), q);
    td.set(key_action(), greedy_actions(q));
    return td;
  };
}

struct EGreedy::State {
  Policy policy;
  std::shared_ptr<EnvBase> env;
  double eps_init, eps_end;
  int64_t annealing, steps = 0;
  Generator gen;
};

EGreedy::EGreedy(Policy policy, std::shared_ptr<EnvBase> env, double eps_init, double eps_end,
                 int64_t annealing_num_steps, uint64_t seed)
    : state_(std::make_shared<State>(State{std::move(policy), std::move(env), eps_init, eps_end,
                                           annealing_num_steps, 0, Generator(seed)})) {
  if (!state_->policy || !state_->env) throw std::invalid_argument("[EGreedy] a policy and an environment are needed");
  if (eps_init < 0 || eps_init > 1 || eps_end < 0 || eps_end > 1)
    throw std::invalid_argument("[EGreedy] eps_init and eps_end must be in [0, 1], got " + std::to_string(eps_init) +
                                " and " + std::to_string(eps_end));
  if (annealing_num_steps <= 0)
    throw std::invalid_argument("[EGreedy] annealing_num_steps must be positive, got " + std::to_string(annealing_num_steps));
}

double EGreedy::eps() const {
  const double f = std::min(1.0, static_cast<double>(state_->steps) / static_cast<double>(state_->annealing));
  return state_->eps_init + (state_->eps_end - state_->eps_init) * f;
}

void EGreedy::step(int64_t frames) { state_->steps += frames; }

TensorDict EGreedy::operator()(TensorDict td) {
  td = state_->policy(std::move(td));
  Tensor greedy = td.get(key_action());
  Tensor random = state_->env->rand_action().to(greedy.dtype()).reshape(greedy.sizes().vec());
  const int64_t n = greedy.size(0);
  Tensor explore = empty({n}, TensorOptions().dtype(kBool));
  bool* e = explore.data_ptr<bool>();
  const double p = eps();
  for (int64_t i = 0; i < n; ++i) e[i] = static_cast<double>(state_->gen.random64() >> 11) * 0x1.0p-53 < p;
  std::vector<int64_t> shape(static_cast<size_t>(greedy.dim()), 1);
  shape[0] = n;
  td.set(key_action(), where(explore.reshape(shape), random, greedy));
  return td;
}

// ------------------------------------------------------------------------------- SyncDataCollector

SyncDataCollector::SyncDataCollector(std::shared_ptr<EnvBase> env, Policy policy, SyncDataCollectorOptions options,
                                     std::function<TensorDict(TensorDict)> postproc)
    : env_(std::move(env)), policy_(std::move(policy)), options_(options), postproc_(std::move(postproc)) {
  if (!env_) throw std::invalid_argument("[SyncDataCollector] no environment");
  if (!policy_) throw std::invalid_argument("[SyncDataCollector] no policy");
  if (env_->batch_size().size() != 1)
    throw std::invalid_argument("[SyncDataCollector] the environment must have one batch dim (its copies)");
  if (options_.frames_per_batch() <= 0)
    throw std::invalid_argument("[SyncDataCollector] frames_per_batch must be positive, got " +
                                std::to_string(options_.frames_per_batch()));
  num_envs_ = env_->batch_size()[0];
  T_ = (options_.frames_per_batch() + num_envs_ - 1) / num_envs_;
  max_batches_ = options_.total_frames() < 0
                     ? -1
                     : (options_.total_frames() + options_.frames_per_batch() - 1) / options_.frames_per_batch();
  running_return_.assign(static_cast<size_t>(num_envs_), 0.0);
}

void SyncDataCollector::update_policy_weights_(Policy policy) {
  if (!policy) throw std::invalid_argument("[SyncDataCollector.update_policy_weights_] no policy");
  policy_ = std::move(policy);
  ++version_;
}
void SyncDataCollector::update_policy_weights_() { ++version_; }

std::vector<double> SyncDataCollector::take_episode_returns() {
  std::vector<double> out;
  out.swap(finished_returns_);
  return out;
}

std::optional<TensorDict> SyncDataCollector::next() {
  if (max_batches_ >= 0 && batches_ >= max_batches_) return std::nullopt;
  const int64_t N = num_envs_;
  if (!root_ || options_.reset_at_each_iter()) {
    root_ = env_->reset();
    traj_ids_ = arange(N, kInt64) + next_traj_;
    next_traj_ += N;
    traj_steps_ = zeros({N}, kInt64);
    std::fill(running_return_.begin(), running_return_.end(), 0.0);
  }
  std::vector<TensorDict> frames;
  frames.reserve(static_cast<size_t>(T_));
  for (int64_t t = 0; t < T_; ++t) {
    TensorDict td = *root_;
    td.set(key_traj_ids(), traj_ids_.clone());
    if (frames_ < options_.init_random_frames()) {
      // the policy still runs, so that every frame has its keys (action_value, ...), then the action
      // is replaced by a random one
      if (random_frames_keep_keys_) td = policy_(std::move(td));
      td.set(key_action(), env_->rand_action());
    } else {
      td = policy_(std::move(td));
    }
    TensorDict full = env_->step(td);
    traj_steps_.add_(1);
    if (options_.max_frames_per_traj() > 0) {
      Tensor hit = traj_steps_.ge(options_.max_frames_per_traj()).reshape(full.get(key_next_done()).sizes().vec());
      full.set(key_next_truncated(), logical_or(full.get(key_next_truncated()), hit));
      full.set(key_next_done(), logical_or(full.get(key_next_done()), hit));
    }
    frames_ += N;
    // episode returns, for progress reports (read in place when float32 / bool and contiguous)
    Tensor rew = full.get(key_next_reward());
    const bool rew_f32 = rew.dtype() == kFloat32 && rew.is_contiguous();
    if (!rew_f32) rew = rew.to(kFloat64).contiguous();
    Tensor done_entry = full.get(key_next_done());
    Tensor done = done_entry.dtype() == kBool && done_entry.is_contiguous() ? done_entry : done_entry.to(kBool).contiguous();
    if (rew.numel() != N || done.numel() != N)
      throw std::invalid_argument("[SyncDataCollector] next.reward and next.done must have one entry per copy, got " +
                                  std::to_string(rew.numel()) + " and " + std::to_string(done.numel()) + " for " +
                                  std::to_string(N) + " copies");
    const float* rf = rew_f32 ? rew.data_ptr<float>() : nullptr;
    const double* rd = rew_f32 ? nullptr : rew.data_ptr<double>();
    const bool* d = done.data_ptr<bool>();
    bool any_done = false;
    for (int64_t i = 0; i < N; ++i) {
      running_return_[static_cast<size_t>(i)] += rf ? static_cast<double>(rf[i]) : rd[i];
      if (d[i]) {
        finished_returns_.push_back(running_return_[static_cast<size_t>(i)]);
        running_return_[static_cast<size_t>(i)] = 0;
        any_done = true;
      }
    }
    TensorDict root = step_mdp(full);
    frames.push_back(std::move(full));
    if (any_done) {
      TensorDict request = root;
      request.set(key_reset(), done.reshape(done_entry.sizes().vec()));
      root.update(env_->reset(request));
      int64_t* ids = traj_ids_.data_ptr<int64_t>();
      int64_t* steps = traj_steps_.data_ptr<int64_t>();
      for (int64_t i = 0; i < N; ++i)
        if (d[i]) {
          ids[i] = next_traj_++;
          steps[i] = 0;
        }
    }
    root_ = std::move(root);
  }
  TensorDict batch = TensorDict::stack(frames, 1);
  batch.set("collector.policy_version", full({N, T_}, version_, TensorOptions().dtype(kInt64)));
  ++batches_;
  if (options_.split_trajs()) batch = split_trajectories(batch);
  if (postproc_) batch = postproc_(batch);
  return batch;
}

// -------------------------------------------------------------------------------- split_trajectories

TensorDict split_trajectories(const TensorDict& batch) {
  if (batch.batch_dims() != 1 && batch.batch_dims() != 2)
    throw std::invalid_argument("[split_trajectories] expected a batch [N, T] or [T], got " + std::to_string(batch.batch_dims()) +
                                " batch dims");
  if (!batch.contains(key_traj_ids()))
    throw std::invalid_argument("[split_trajectories] the batch has no collector.traj_ids");
  TensorDict flat = batch.reshape({-1});
  const int64_t n = flat.numel();
  const int64_t T = batch.batch_size().back();
  Tensor ids = flat.get(key_traj_ids()).to(kInt64).contiguous().reshape({-1});
  if (ids.numel() != n)
    throw std::invalid_argument("[split_trajectories] collector.traj_ids has " + std::to_string(ids.numel()) +
                                " entries for " + std::to_string(n) + " frames");
  // runs of equal ids, in order (torch.unique_consecutive over the flattened ids)
  const int64_t* id = ids.data_ptr<int64_t>();
  std::vector<int64_t> lengths;
  for (int64_t i = 0; i < n; ++i) {
    if (i == 0 || id[i] != id[i - 1]) lengths.push_back(0);
    ++lengths.back();
  }
  const int64_t k = static_cast<int64_t>(lengths.size());
  const int64_t max_len = n == 0 ? 0 : *std::max_element(lengths.begin(), lengths.end());
  const std::vector<int64_t> rows = batch.batch_dims() == 2 ? batch.batch_size() : std::vector<int64_t>{1, T};
  TensorDict out;
  if (max_len == T && k == rows[0]) {  // every row one trajectory: nothing to move
    out = flat.reshape(rows);
  } else {
    Tensor dest = empty({n}, TensorOptions().dtype(kInt64));
    int64_t* d = dest.data_ptr<int64_t>();
    for (int64_t j = 0, i = 0; j < k; ++j)
      for (int64_t t = 0; t < lengths[static_cast<size_t>(j)]; ++t) d[i++] = j * max_len + t;
    out = flat.index(zeros({k * max_len}, TensorOptions().dtype(kInt64)));  // the keys, shapes and dtypes
    out.zero_();
    out.set_at_(dest, flat);
    out = out.reshape({k, max_len});
  }
  Tensor mask = zeros({k, max_len}, TensorOptions().dtype(kBool));  // out is [k, max_len] either way
  bool* m = mask.data_ptr<bool>();
  for (int64_t j = 0; j < k; ++j)
    for (int64_t t = 0; t < lengths[static_cast<size_t>(j)]; ++t) m[j * max_len + t] = true;
  out.set("collector.mask", mask);
  return out;
}

}  // namespace troupe::rl
