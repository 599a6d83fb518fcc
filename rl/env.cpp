// EnvBase helpers (step_and_maybe_reset, rollout, step_mdp), StepCounter, RewardSum, TransformedEnv.
#include <troupe/rl/env.h>

#include <stdexcept>

#include <troupe/tensor/ops.h>

namespace troupe::rl {

// step_mdp is in tensordict.cpp (it reads the entries directly).

Tensor done_mask(const TensorDict& root) {
  static const Key kDone("done");
  return root.get(kDone).to(kBool);
}

bool any_done(const Tensor& mask) {
  if (mask.dtype() == kBool && mask.is_cpu() && mask.is_contiguous()) {  // the usual case: a scan, no reduction
    const bool* m = mask.data_ptr<bool>();
    for (int64_t i = 0, n = mask.numel(); i < n; ++i)
      if (m[i]) return true;
    return false;
  }
  return mask.any().item<bool>();
}

std::pair<TensorDict, TensorDict> EnvBase::step_and_maybe_reset(const TensorDict& td) {
  static const Key kReset("_reset");
  TensorDict full = step(td);
  TensorDict root = step_mdp(full);
  Tensor mask = done_mask(root);
  if (any_done(mask)) {
    TensorDict request = root;
    request.set(kReset, mask);
    root.update(reset(request));
  }
  return {full, root};
}

TensorDict EnvBase::rollout(int64_t max_steps, const std::function<TensorDict(TensorDict)>& policy,
                            bool break_when_any_done) {
  if (max_steps <= 0) throw std::invalid_argument("[rollout] max_steps must be positive, got " + std::to_string(max_steps));
  TensorDict td = reset();
  std::vector<TensorDict> frames;
  for (int64_t i = 0; i < max_steps; ++i) {
    if (policy) td = policy(td);
    else td.set("action", rand_action());
    TensorDict full = step(td);
    frames.push_back(full);
    TensorDict root = step_mdp(full);
    Tensor mask = done_mask(root);
    if (any_done(mask)) {
      if (break_when_any_done) break;
      TensorDict request = root;
      request.set("_reset", mask);
      root.update(reset(request));
    }
    td = root;
  }
  return TensorDict::stack(frames, static_cast<int64_t>(batch_size_.size()));
}

// ---------------------------------------------------------------------------------------- transforms

namespace {
std::vector<int64_t> with_one(std::vector<int64_t> b) {
  b.push_back(1);
  return b;
}
}  // namespace

void StepCounter::on_reset(TensorDict& td, const Tensor& reset_mask) {
  const auto shape = with_one(td.batch_size());
  if (!count_.defined() || !reset_mask.defined()) count_ = zeros(shape, TensorOptions().dtype(kInt64));
  else count_.masked_fill_(reset_mask.reshape(shape), 0);
  td.set("step_count", count_.clone());
}

void StepCounter::on_step(TensorDict& td) {
  if (!count_.defined()) throw std::logic_error("[StepCounter] step() before reset()");
  count_.add_(1);
  td.set("next.step_count", count_.clone());
  if (max_steps_) {
    Tensor hit = count_.ge(*max_steps_);
    Tensor trunc = logical_or(td.get("next.truncated"), hit);
    td.set("next.truncated", trunc);
    td.set("next.done", logical_or(td.get("next.done"), hit));
  }
}

void RewardSum::on_reset(TensorDict& td, const Tensor& reset_mask) {
  const auto shape = with_one(td.batch_size());
  if (!sum_.defined() || !reset_mask.defined()) sum_ = zeros(shape, TensorOptions().dtype(kFloat32));
  else sum_.masked_fill_(reset_mask.reshape(shape), 0.0);
  td.set("episode_reward", sum_.clone());
}

void RewardSum::on_step(TensorDict& td) {
  if (!sum_.defined()) throw std::logic_error("[RewardSum] step() before reset()");
  sum_.add_(td.get("next.reward").to(sum_.dtype()).reshape(sum_.sizes().vec()));
  td.set("next.episode_reward", sum_.clone());
}

TransformedEnv::TransformedEnv(std::shared_ptr<EnvBase> base, std::vector<std::shared_ptr<Transform>> transforms)
    : EnvBase(base ? base->batch_size() : std::vector<int64_t>{}), base_(std::move(base)), transforms_(std::move(transforms)) {
  if (!base_) throw std::invalid_argument("[TransformedEnv] no base environment");
}

TensorDict TransformedEnv::reset(const std::optional<TensorDict>& td) {
  TensorDict out = base_->reset(td);
  Tensor mask = td && td->contains("_reset") ? td->get("_reset").to(kBool) : Tensor();
  for (auto& t : transforms_) t->on_reset(out, mask);
  return out;
}

TensorDict TransformedEnv::step(const TensorDict& td) {
  TensorDict out = base_->step(td);
  for (auto& t : transforms_) t->on_step(out);
  return out;
}

}  // namespace troupe::rl
