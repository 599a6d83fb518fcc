// DQNLoss (rl/dqn.h).
#include <troupe/rl/dqn.h>

#include <stdexcept>

#include <troupe/nn/functional/loss.h>
#include <troupe/tensor/autograd.h>
#include <troupe/tensor/ops.h>

namespace troupe::rl {

namespace {
// [B] or [B, 1] -> [B]
Tensor per_frame(const Tensor& t, int64_t B, const std::string& key) {
  if (t.numel() != B)
    throw std::invalid_argument("[DQNLoss] '" + key + "' has " + std::to_string(t.numel()) + " values for " +
                                std::to_string(B) + " frames");
  return t.reshape({B});
}
}  // namespace

DQNLoss::DQNLoss(nn::ModulePtr value_network, nn::ModulePtr target_network, DQNLossOptions options)
    : value_(std::move(value_network)), target_(std::move(target_network)), options_(std::move(options)) {
  if (!value_ || !target_) throw std::invalid_argument("[DQNLoss] the value and target networks must be given");
  if (options_.loss_function() != "smooth_l1" && options_.loss_function() != "l2")
    throw std::invalid_argument("[DQNLoss] loss_function must be 'smooth_l1' or 'l2', got '" + options_.loss_function() + "'");
}

DQNLossOutput DQNLoss::operator()(const TensorDict& frames) const {
  if (frames.batch_dims() != 1) throw std::invalid_argument("[DQNLoss] expected frames with batch [B]");
  const int64_t B = frames.batch_size()[0];
  Tensor obs = frames.get("observation");
  Tensor action = frames.get("action");
  if (action.dim() == 2 && action.size(1) > 1) action = action.argmax(1);
  action = per_frame(action.to(kInt64), B, "action");
  Tensor q_all = (*value_)(obs);
  if (q_all.dim() != 2 || q_all.size(0) != B)
    throw std::invalid_argument("[DQNLoss] the value network must return [B, num_actions], got " +
                                std::to_string(q_all.dim()) + "-d output");
  Tensor q = q_all.gather(1, action.unsqueeze(1)).squeeze(1);

  Tensor target;
  {
    NoGradGuard no_grad;
    Tensor next_obs = frames.get("next.observation");
    Tensor q_next_target = (*target_)(next_obs);
    Tensor a_star = options_.double_dqn() ? (*value_)(next_obs).argmax(1) : q_next_target.argmax(1);
    Tensor q_next = q_next_target.gather(1, a_star.unsqueeze(1)).squeeze(1);
    Tensor reward = per_frame(frames.get("next.reward"), B, "next.reward").to(q.dtype());
    Tensor terminal = frames.contains("next.n_step_terminated") ? frames.get("next.n_step_terminated")
                      : frames.contains("next.terminated")      ? frames.get("next.terminated")
                                                                 : frames.get("next.done");
    terminal = per_frame(terminal.to(kBool), B, "terminal flag");
    Tensor discount = frames.contains("gamma") ? per_frame(frames.get("gamma"), B, "gamma").to(q.dtype())
                                               : full({B}, options_.gamma(), TensorOptions().dtype(q.dtype()));
    target = reward + discount * logical_not(terminal).to(q.dtype()) * q_next;
  }
  Tensor elementwise = options_.loss_function() == "l2"
                           ? nn::functional::mse_loss(q, target, nn::functional::MSELossFuncOptions().reduction(kNone))
                           : nn::functional::smooth_l1_loss(q, target, nn::functional::SmoothL1LossFuncOptions().reduction(kNone));
  Tensor loss = frames.contains("_weight")
                    ? (elementwise * per_frame(frames.get("_weight"), B, "_weight").to(q.dtype())).mean()
                    : elementwise.mean();
  Tensor td_error = (q.detach() - target).abs().to(kFloat32);
  return {loss, td_error};
}

// ------------------------------------------------------------------------- target-network updates

namespace {
// The online and target parameters, paired in order; shapes must match.
void pair_parameters(const std::string& who, const nn::ModulePtr& online, const nn::ModulePtr& target, std::vector<Tensor>& on,
                     std::vector<Tensor>& tg) {
  if (!online || !target) throw std::invalid_argument("[" + who + "] the online and target networks must be given");
  on = online->parameters();
  tg = target->parameters();
  if (on.size() != tg.size())
    throw std::invalid_argument("[" + who + "] the online network has " + std::to_string(on.size()) + " parameters, the target " +
                                std::to_string(tg.size()));
  for (size_t i = 0; i < on.size(); ++i)
    if (on[i].sizes().vec() != tg[i].sizes().vec())
      throw std::invalid_argument("[" + who + "] parameter " + std::to_string(i) + " has shape " + shape_str(on[i].sizes()) +
                                  " in the online network and " + shape_str(tg[i].sizes()) + " in the target");
}
}  // namespace

SoftUpdate::SoftUpdate(const DQNLoss& loss, double eps) : SoftUpdate(loss.value_network(), loss.target_network(), eps) {}
SoftUpdate::SoftUpdate(nn::ModulePtr online, nn::ModulePtr target, double eps) : eps_(eps) {
  if (!(eps >= 0 && eps <= 1)) throw std::invalid_argument("[SoftUpdate] eps must be in [0, 1], got " + std::to_string(eps));
  pair_parameters("SoftUpdate", online, target, online_, target_);
}
void SoftUpdate::step() {
  NoGradGuard g;
  for (size_t i = 0; i < target_.size(); ++i) target_[i].mul_(eps_).add_(online_[i].detach(), 1 - eps_);
}

HardUpdate::HardUpdate(const DQNLoss& loss, int64_t interval) : HardUpdate(loss.value_network(), loss.target_network(), interval) {}
HardUpdate::HardUpdate(nn::ModulePtr online, nn::ModulePtr target, int64_t interval) : interval_(interval) {
  if (interval < 1)
    throw std::invalid_argument("[HardUpdate] value_network_update_interval must be at least 1, got " + std::to_string(interval));
  pair_parameters("HardUpdate", online, target, online_, target_);
}
void HardUpdate::step() {
  if (++steps_ % interval_ != 0) return;
  NoGradGuard g;
  for (size_t i = 0; i < target_.size(); ++i) target_[i].copy_(online_[i].detach());
  ++updates_;
}

}  // namespace troupe::rl
