#include <troupe/optim/adamw.h>

#include <troupe/optim/fused.h>
#include <troupe/tensor/autograd.h>

namespace troupe::optim {

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
