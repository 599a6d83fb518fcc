// Whole-model checkpoints of actor-hosted models (checkpoint.h): one state dict of prefixed parts.
#include <troupe/actors/checkpoint.h>

#include <stdexcept>

#include <troupe/nn/serialize.h>
#include <troupe/tensor/ops.h>

namespace troupe::actors {

namespace {

nn::StateDict part(const nn::StateDict& all, const std::string& prefix) {
  nn::StateDict out;
  for (const auto& [k, t] : all)
    if (k.compare(0, prefix.size(), prefix) == 0) out.insert_or_assign(k.substr(prefix.size()), t);
  return out;
}

std::vector<int64_t> int64s(const Tensor& t) {
  Tensor c = t.to(kInt64).contiguous();
  const int64_t* p = c.data_ptr<int64_t>();
  return std::vector<int64_t>(p, p + c.numel());
}

}  // namespace

nn::StateDict checkpoint_state_dict(const nn::ModulePtr& model, DistributedOptimizer* optimizer, Averager* averager) {
  if (!model) throw ActorError("[actors] save_checkpoint: the model is null");
  nn::StateDict out;
  for (const auto& [k, t] : model->state_dict()) out.insert_or_assign("model." + k, t);
  if (optimizer) {
    for (const auto& [k, t] : optimizer->named_state_dict()) out.insert_or_assign("optimizer." + k, t);
    out.insert_or_assign("optimizer.steps", tensor(std::vector<int64_t>{optimizer->steps()}, kInt64));
  }
  if (averager) {
    averager->checkpoint();  // waits for the updates in flight
    for (const auto& [k, t] : averager->state_dict()) out.insert_or_assign("averager." + k, t);
    out.insert_or_assign("averager.applied", tensor(averager->applied_versions(), kInt64));
  }
  return out;
}

void save_checkpoint(const std::string& path, const nn::ModulePtr& model, DistributedOptimizer* optimizer,
                     Averager* averager) {
  nn::save(checkpoint_state_dict(model, optimizer, averager), path);
}

int64_t load_checkpoint_state_dict(const nn::StateDict& state, const nn::ModulePtr& model, DistributedOptimizer* optimizer,
                                   Averager* averager) {
  if (!model) throw ActorError("[actors] load_checkpoint: the model is null");
  model->load_state_dict(part(state, "model."), /*strict=*/true);
  int64_t steps = 0;
  if (optimizer) {
    const Tensor* s = state.find("optimizer.steps");
    if (!s) throw ActorError("[actors] load_checkpoint: the checkpoint has no optimizer state (optimizer.steps)");
    steps = int64s(*s).at(0);
    nn::StateDict o = part(state, "optimizer.");
    o.erase("steps");
    optimizer->load_named_state_dict(o, steps);
  }
  if (averager) {
    const Tensor* applied = state.find("averager.applied");
    if (!applied) throw ActorError("[actors] load_checkpoint: the checkpoint has no averager state (averager.applied)");
    nn::StateDict a = part(state, "averager.");
    a.erase("applied");
    averager->load_state_dict(a, int64s(*applied));
  }
  return steps;
}

int64_t load_checkpoint(const std::string& path, const nn::ModulePtr& model, DistributedOptimizer* optimizer,
                        Averager* averager) {
  return load_checkpoint_state_dict(nn::load_state_dict_file(path), model, optimizer, averager);
}

}  // namespace troupe::actors
