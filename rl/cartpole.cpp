// CartPole-v1 and Pendulum-v1 (rl/cartpole.h): Gymnasium's equations in float64, one loop over copies.
#include <troupe/rl/cartpole.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include <troupe/tensor/ops.h>

namespace troupe::rl {

namespace {

constexpr double kPi = 3.14159265358979323846;

// Keys used every step, parsed once.
const Key kObservation("observation"), kAction("action"), kReward("reward"), kDone("done"), kTerminated("terminated"),
    kTruncated("truncated"), kNext("next"), kResetKey("_reset");

// A uniform double in [lo, hi) from 53 random bits.
double uniform(Generator& g, double lo, double hi) {
  const double u = static_cast<double>(g.random64() >> 11) * 0x1.0p-53;
  return lo + (hi - lo) * u;
}

// Which copies to reset: all, or those marked by td["_reset"].
std::vector<bool> reset_rows(const std::optional<TensorDict>& td, int64_t n, const char* env) {
  std::vector<bool> rows(static_cast<size_t>(n), true);
  if (!td || !td->contains(kResetKey)) return rows;
  Tensor mask = td->get(kResetKey).to(kBool).contiguous();
  if (mask.numel() != n)
    throw std::invalid_argument(std::string("[") + env + ".reset] _reset has " + std::to_string(mask.numel()) +
                                " entries for " + std::to_string(n) + " copies");
  const bool* m = mask.data_ptr<bool>();
  for (int64_t i = 0; i < n; ++i) rows[static_cast<size_t>(i)] = m[i];
  return rows;
}

// done / terminated / truncated for a reset: false for the reset copies, what td holds for the others.
void set_reset_flags(TensorDict& out, const std::optional<TensorDict>& td, const std::vector<bool>& rows, int64_t n) {
  for (const Key* key : {&kDone, &kTerminated, &kTruncated}) {
    Tensor flag = empty({n, 1}, TensorOptions().dtype(kBool));
    bool* f = flag.data_ptr<bool>();
    if (td && td->contains(*key)) {
      Tensor old = td->get(*key);
      if (old.dtype() != kBool || !old.is_contiguous() || old.numel() != n) old = old.to(kBool).reshape({n, 1}).contiguous();
      const bool* o = old.data_ptr<bool>();
      for (int64_t i = 0; i < n; ++i) f[i] = rows[static_cast<size_t>(i)] ? false : o[i];
    } else {
      std::fill(f, f + n, false);
    }
    out.set(*key, flag);
  }
}

}  // namespace

// --------------------------------------------------------------------------------------------- CartPole

double CartPoleEnv::theta_threshold() { return 12 * 2 * kPi / 360; }

CartPoleEnv::CartPoleEnv(int64_t num_envs, int64_t max_episode_steps)
    : EnvBase({num_envs}), n_(num_envs), max_steps_(max_episode_steps) {
  if (num_envs <= 0) throw std::invalid_argument("[CartPoleEnv] num_envs must be positive, got " + std::to_string(num_envs));
  state_.assign(static_cast<size_t>(4 * n_), 0.0);
  elapsed_.assign(static_cast<size_t>(n_), 0);
  gens_.resize(static_cast<size_t>(n_));
  set_seed(0);
}

uint64_t CartPoleEnv::set_seed(uint64_t seed) {
  for (int64_t i = 0; i < n_; ++i) gens_[static_cast<size_t>(i)].manual_seed(seed + static_cast<uint64_t>(i));
  action_gen_.manual_seed(seed + static_cast<uint64_t>(n_));
  return seed + static_cast<uint64_t>(n_) + 1;
}

void CartPoleEnv::set_state(const std::vector<double>& state) {
  if (state.size() != state_.size())
    throw std::invalid_argument("[CartPoleEnv.set_state] expected " + std::to_string(state_.size()) + " values, got " +
                                std::to_string(state.size()));
  state_ = state;
}

Tensor CartPoleEnv::rand_action() {
  Tensor a = empty({n_}, TensorOptions().dtype(kInt64));
  int64_t* p = a.data_ptr<int64_t>();
  for (int64_t i = 0; i < n_; ++i) p[i] = static_cast<int64_t>(action_gen_.random() & 1u);
  return a;
}

TensorDict CartPoleEnv::reset(const std::optional<TensorDict>& td) {
  const auto rows = reset_rows(td, n_, "CartPoleEnv");
  Tensor obs = empty({n_, 4}, TensorOptions().dtype(kFloat32));
  float* o = obs.data_ptr<float>();
  for (int64_t i = 0; i < n_; ++i) {
    double* s = &state_[static_cast<size_t>(4 * i)];
    if (rows[static_cast<size_t>(i)]) {
      for (int j = 0; j < 4; ++j) s[j] = uniform(gens_[static_cast<size_t>(i)], -0.05, 0.05);
      elapsed_[static_cast<size_t>(i)] = 0;
    }
    for (int j = 0; j < 4; ++j) o[4 * i + j] = static_cast<float>(s[j]);
  }
  TensorDict out({n_});
  out.set(kObservation, obs);
  set_reset_flags(out, td, rows, n_);
  return out;
}

TensorDict CartPoleEnv::step(const TensorDict& td) {
  if (!td.contains(kAction)) throw std::invalid_argument("[CartPoleEnv.step] the TensorDict has no 'action'");
  Tensor action = td.get(kAction);
  if (action.dim() == 2 && action.size(1) == 2) action = action.argmax(1);  // one-hot
  action = action.to(kInt64).reshape({-1}).contiguous();
  if (action.numel() != n_)
    throw std::invalid_argument("[CartPoleEnv.step] action has " + std::to_string(action.numel()) + " entries for " +
                                std::to_string(n_) + " copies");
  const int64_t* a = action.data_ptr<int64_t>();
  Tensor obs = empty({n_, 4}, TensorOptions().dtype(kFloat32));
  Tensor reward = empty({n_, 1}, TensorOptions().dtype(kFloat32));
  Tensor terminated = empty({n_, 1}, TensorOptions().dtype(kBool));
  Tensor truncated = empty({n_, 1}, TensorOptions().dtype(kBool));
  Tensor done = empty({n_, 1}, TensorOptions().dtype(kBool));
  float* o = obs.data_ptr<float>();
  float* r = reward.data_ptr<float>();
  bool* te = terminated.data_ptr<bool>();
  bool* tr = truncated.data_ptr<bool>();
  bool* dn = done.data_ptr<bool>();
  constexpr double total_mass = kMassPole + kMassCart;
  constexpr double polemass_length = kMassPole * kLength;
  const double theta_max = theta_threshold();
  for (int64_t i = 0; i < n_; ++i) {
    if (a[i] != 0 && a[i] != 1)
      throw std::invalid_argument("[CartPoleEnv.step] action " + std::to_string(a[i]) + " of copy " + std::to_string(i) +
                                  " is not 0 or 1");
    double* s = &state_[static_cast<size_t>(4 * i)];
    const double x = s[0], x_dot = s[1], theta = s[2], theta_dot = s[3];
    const double force = a[i] == 1 ? kForceMag : -kForceMag;
    const double costheta = std::cos(theta), sintheta = std::sin(theta);
    const double temp = (force + polemass_length * theta_dot * theta_dot * sintheta) / total_mass;
    const double thetaacc = (kGravity * sintheta - costheta * temp) /
                            (kLength * (4.0 / 3.0 - kMassPole * costheta * costheta / total_mass));
    const double xacc = temp - polemass_length * thetaacc * costheta / total_mass;
    // Euler
    s[0] = x + kTau * x_dot;
    s[1] = x_dot + kTau * xacc;
    s[2] = theta + kTau * theta_dot;
    s[3] = theta_dot + kTau * thetaacc;
    const bool term = s[0] < -kXThreshold || s[0] > kXThreshold || s[2] < -theta_max || s[2] > theta_max;
    const int64_t steps = ++elapsed_[static_cast<size_t>(i)];
    const bool trunc = steps >= max_steps_;
    for (int j = 0; j < 4; ++j) o[4 * i + j] = static_cast<float>(s[j]);
    r[i] = 1.0f;
    te[i] = term;
    tr[i] = trunc;
    dn[i] = term || trunc;
  }
  TensorDict out = td;
  TensorDict next({n_});
  next.set(kObservation, obs);
  next.set(kReward, reward);
  next.set(kDone, done);
  next.set(kTerminated, terminated);
  next.set(kTruncated, truncated);
  out.set(kNext, std::move(next));
  return out;
}

std::pair<TensorDict, TensorDict> CartPoleEnv::step_and_maybe_reset(const TensorDict& td) {
  TensorDict full = step(td);
  TensorDict root = step_mdp(full);
  const TensorDict& next = full.get_sub(kNext);
  Tensor done = next.get(kDone);
  const bool* dn = done.data_ptr<bool>();  // step() wrote it: bool, contiguous, [N, 1]
  int64_t first = 0;
  while (first < n_ && !dn[first]) ++first;
  if (first == n_) return {std::move(full), std::move(root)};
  // Some copies are done: the root's observation is next's with those rows reset (drawn as reset()
  // draws them), and its done / terminated / truncated are all false (a copy that is not done is
  // neither terminated nor truncated).
  Tensor obs = next.get(kObservation).clone();
  float* o = obs.data_ptr<float>();
  for (int64_t i = first; i < n_; ++i) {
    if (!dn[i]) continue;
    double* s = &state_[static_cast<size_t>(4 * i)];
    for (int j = 0; j < 4; ++j) s[j] = uniform(gens_[static_cast<size_t>(i)], -0.05, 0.05);
    elapsed_[static_cast<size_t>(i)] = 0;
    for (int j = 0; j < 4; ++j) o[4 * i + j] = static_cast<float>(s[j]);
  }
  root.set(kObservation, obs);
  for (const Key* key : {&kDone, &kTerminated, &kTruncated}) root.set(*key, zeros({n_, 1}, TensorOptions().dtype(kBool)));
  return {std::move(full), std::move(root)};
}

// --------------------------------------------------------------------------------------------- Pendulum

PendulumEnv::PendulumEnv(int64_t num_envs, int64_t max_episode_steps)
    : EnvBase({num_envs}), n_(num_envs), max_steps_(max_episode_steps) {
  if (num_envs <= 0) throw std::invalid_argument("[PendulumEnv] num_envs must be positive, got " + std::to_string(num_envs));
  state_.assign(static_cast<size_t>(2 * n_), 0.0);
  elapsed_.assign(static_cast<size_t>(n_), 0);
  gens_.resize(static_cast<size_t>(n_));
  set_seed(0);
}

uint64_t PendulumEnv::set_seed(uint64_t seed) {
  for (int64_t i = 0; i < n_; ++i) gens_[static_cast<size_t>(i)].manual_seed(seed + static_cast<uint64_t>(i));
  action_gen_.manual_seed(seed + static_cast<uint64_t>(n_));
  return seed + static_cast<uint64_t>(n_) + 1;
}

void PendulumEnv::set_state(const std::vector<double>& state) {
  if (state.size() != state_.size())
    throw std::invalid_argument("[PendulumEnv.set_state] expected " + std::to_string(state_.size()) + " values, got " +
                                std::to_string(state.size()));
  state_ = state;
}

Tensor PendulumEnv::rand_action() {
  Tensor a = empty({n_, 1}, TensorOptions().dtype(kFloat32));
  float* p = a.data_ptr<float>();
  for (int64_t i = 0; i < n_; ++i) p[i] = static_cast<float>(uniform(action_gen_, -kMaxTorque, kMaxTorque));
  return a;
}

namespace {
void pendulum_obs(const double* s, float* o) {
  o[0] = static_cast<float>(std::cos(s[0]));
  o[1] = static_cast<float>(std::sin(s[0]));
  o[2] = static_cast<float>(s[1]);
}
}  // namespace

TensorDict PendulumEnv::reset(const std::optional<TensorDict>& td) {
  const auto rows = reset_rows(td, n_, "PendulumEnv");
  Tensor obs = empty({n_, 3}, TensorOptions().dtype(kFloat32));
  float* o = obs.data_ptr<float>();
  for (int64_t i = 0; i < n_; ++i) {
    double* s = &state_[static_cast<size_t>(2 * i)];
    if (rows[static_cast<size_t>(i)]) {
      s[0] = uniform(gens_[static_cast<size_t>(i)], -kPi, kPi);
      s[1] = uniform(gens_[static_cast<size_t>(i)], -1.0, 1.0);
      elapsed_[static_cast<size_t>(i)] = 0;
    }
    pendulum_obs(s, o + 3 * i);
  }
  TensorDict out({n_});
  out.set(kObservation, obs);
  set_reset_flags(out, td, rows, n_);
  return out;
}

TensorDict PendulumEnv::step(const TensorDict& td) {
  if (!td.contains(kAction)) throw std::invalid_argument("[PendulumEnv.step] the TensorDict has no 'action'");
  Tensor action = td.get(kAction).to(kFloat64).reshape({-1}).contiguous();
  if (action.numel() != n_)
    throw std::invalid_argument("[PendulumEnv.step] action has " + std::to_string(action.numel()) + " entries for " +
                                std::to_string(n_) + " copies");
  const double* a = action.data_ptr<double>();
  Tensor obs = empty({n_, 3}, TensorOptions().dtype(kFloat32));
  Tensor reward = empty({n_, 1}, TensorOptions().dtype(kFloat32));
  Tensor terminated = zeros({n_, 1}, TensorOptions().dtype(kBool));
  Tensor truncated = empty({n_, 1}, TensorOptions().dtype(kBool));
  float* o = obs.data_ptr<float>();
  float* r = reward.data_ptr<float>();
  bool* tr = truncated.data_ptr<bool>();
  for (int64_t i = 0; i < n_; ++i) {
    double* s = &state_[static_cast<size_t>(2 * i)];
    const double th = s[0], thdot = s[1];
    const double u = std::clamp(a[i], -kMaxTorque, kMaxTorque);
    // angle_normalize(x) = ((x + pi) % (2 pi)) - pi with Python's floored modulo
    double wrapped = std::fmod(th + kPi, 2 * kPi);
    if (wrapped < 0) wrapped += 2 * kPi;
    const double ang = wrapped - kPi;
    const double costs = ang * ang + 0.1 * thdot * thdot + 0.001 * u * u;
    double newthdot = thdot + (3 * kG / (2 * kLength) * std::sin(th) + 3.0 / (kMass * kLength * kLength) * u) * kDt;
    newthdot = std::clamp(newthdot, -kMaxSpeed, kMaxSpeed);
    s[0] = th + newthdot * kDt;
    s[1] = newthdot;
    pendulum_obs(s, o + 3 * i);
    r[i] = static_cast<float>(-costs);
    tr[i] = ++elapsed_[static_cast<size_t>(i)] >= max_steps_;
  }
  TensorDict out = td;
  TensorDict next({n_});
  next.set(kObservation, obs);
  next.set(kReward, reward);
  next.set(kDone, truncated.clone());
  next.set(kTerminated, terminated);
  next.set(kTruncated, truncated);
  out.set(kNext, std::move(next));
  return out;
}

}  // namespace troupe::rl
