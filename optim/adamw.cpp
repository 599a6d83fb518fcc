#include <troupe/optim/adamw.h>

#include <troupe/optim/fused.h>
#include <troupe/tensor/autograd.h>

namespace troupe::optim {

void AdamWOptions::write(StateDict& out, const std::string& prefix) const {
  write_scalar(out, prefix + "lr", lr_);
  write_scalar(out, prefix + "betas.0", std::get<0>(betas_));
  write_scalar(out, prefix + "betas.1", std::get<1>(betas_));
  write_scalar(out, prefix + "eps", eps_);
  write_scalar(out, prefix + "weight_decay", weight_decay_);
  write_scalar(out, prefix + "amsgrad", amsgrad_ ? 1 : 0);
  write_scalar(out, prefix + "maximize", maximize_ ? 1 : 0);
}

void AdamWOptions::read(const StateDict& in, const std::string& prefix) {
  lr_ = read_scalar(in, prefix + "lr");
  betas_ = std::make_tuple(read_scalar(in, prefix + "betas.0"), read_scalar(in, prefix + "betas.1"));
  eps_ = read_scalar(in, prefix + "eps");
  weight_decay_ = read_scalar(in, prefix + "weight_decay");
  amsgrad_ = read_scalar(in, prefix + "amsgrad") != 0;
  maximize_ = read_scalar(in, prefix + "maximize") != 0;
}

namespace {
std::unique_ptr<OptimizerOptions> checked(const AdamWOptions& o) {
  detail::check_adam_options(o.lr(), o.eps(), std::get<0>(o.betas()), std::get<1>(o.betas()), o.weight_decay());
  return std::make_unique<AdamWOptions>(o);
}
}  // namespace

AdamW::AdamW(std::vector<OptimizerParamGroup> param_groups, AdamWOptions defaults)
    : Optimizer(std::move(param_groups), checked(defaults)) {}

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions defaults) : Optimizer(std::move(params), checked(defaults)) {}

std::unique_ptr<OptimizerParamState> AdamW::make_param_state() const { return std::make_unique<AdamWParamState>(); }

Tensor AdamW::step(LossClosure closure) {
  Tensor loss = run_closure(closure);
  NoGradGuard no_grad;
  for (auto& group : param_groups_) {
    const auto& o = static_cast<const AdamWOptions&>(group.options());
    const detail::AdamHyper h{o.lr(),           std::get<0>(o.betas()), std::get<1>(o.betas()), o.eps(),
                              o.weight_decay(), o.amsgrad(),            o.maximize(),           true,
                              "AdamW"};
    for (const Tensor& p : group.params()) {
      if (!p.grad().defined()) continue;
      detail::adam_update(p, p.grad(), state_of<AdamWParamState>(p), h);
    }
  }
  return loss;
}

}  // namespace troupe::optim
