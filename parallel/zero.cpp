// ZeroOptimizer and FullyShardedDataParallel (see zero.h): the shard core's construction, zero_grad and
// step, which call the flat layout, the units, the gradient reduction and the checkpoint (shard_core.h).
#include <troupe/parallel/zero.h>

#include <algorithm>
#include <mutex>
#include <stdexcept>
#include <tuple>
#include <unordered_set>
#include <utility>

#include <troupe/parallel/shard_core.h>
#include <troupe/parallel/wrap_checks.h>
#include <troupe/tensor/autograd.h>
#include <troupe/tensor/ops.h>

namespace troupe::parallel {

using comm::ProcessGroupPtr;

namespace {

// The parameters some ZeroOptimizer or FullyShardedDataParallel wraps now (one wrapper at a time: both
// re-point the parameters' data and hook their gradients).
std::mutex& wrapped_mutex() {
  static std::mutex m;
  return m;
}
std::unordered_set<const TensorImpl*>& wrapped() {
  static std::unordered_set<const TensorImpl*> s;
  return s;
}

}  // namespace

AutoWrapPolicy children_wrap_policy() {
  return [](const std::string& name, const nn::Module&) { return name.find('.') == std::string::npos; };
}

AutoWrapPolicy modules_wrap_policy(std::vector<nn::ModulePtr> modules) {
  return [modules = std::move(modules)](const std::string&, const nn::Module& m) {
    return std::any_of(modules.begin(), modules.end(), [&](const nn::ModulePtr& x) { return x.get() == &m; });
  };
}

namespace detail {

ShardCore::~ShardCore() {
  grad_hooks.remove();
  for (auto& h : module_hooks) h.remove();
  for (auto& f : in_flight) wait_quietly(f->work);
  for (auto& u : ustate)
    for (auto& w : u.gathering) wait_quietly(w);
  if (registered) {
    std::lock_guard<std::mutex> lock(wrapped_mutex());
    for (const auto& p : params) wrapped().erase(p.impl());
  }
}

void ShardCore::build(const nn::ModulePtr& module, const OptimizerFactory& factory) {
  check_module_and_group(who, module, group);
  if (!factory) throw std::invalid_argument(who + " the optimizer factory is empty");
  std::tie(first_bucket_bytes, bucket_cap_bytes) = bucket_limits_bytes(who, first_bucket_mb, bucket_cap_mb);
  for (const auto& [n, p] : module->named_parameters()) {
    if (!p.defined() || !p.requires_grad()) continue;
    if (!is_floating_point(p.dtype()))
      throw std::invalid_argument(who + " parameter " + n + " has dtype " + dtype_name(p.dtype()) +
                                  "; only floating parameters can be averaged");
    names.push_back(n);
    params.push_back(p);
    shapes.push_back(to_shape(p.sizes()));
  }
  {
    std::lock_guard<std::mutex> lock(wrapped_mutex());
    for (size_t i = 0; i < params.size(); ++i)
      if (wrapped().count(params[i].impl()))
        throw std::invalid_argument(who + " parameter " + names[i] +
                                    " is already wrapped by another ZeroOptimizer or FullyShardedDataParallel "
                                    "(a parameter can be sharded by one at a time: destroy the other first)");
    for (const auto& p : params) wrapped().insert(p.impl());
    registered = true;
  }
  make_units(module);
  assign_buckets();
  WrapSignature sig;
  sig.names = names;
  sig.params = params;
  for (const auto& G : groups) sig.buckets.push_back({G.params, G.numel, G.dtype, static_cast<int64_t>(G.unit)});
  sig.bucket_noun = "flat buffer";
  sig.options = "units and bucket options";
  verify_across_ranks(group, who, sig);

  make_flat_buffers();
  NoGradGuard no_grad;
  if (stage < 3) {
    for (size_t i = 0; i < params.size(); ++i) params[i].set_data(views[i]);
  } else {
    for (const auto& p : params) empties.push_back(empty({0}, TensorOptions(p.dtype()).device(p.device())));
    for (size_t u = 0; u < units.size(); ++u) {
      ustate[u].gathered = true;  // the parameters hold their original storage: free() lets it go
      free_unit(u);
    }
  }
  opt = factory(shards);
  if (!opt) throw std::invalid_argument(who + " the optimizer factory returned null");
  auto ps = opt->parameters();
  for (const auto& s : shards) {
    if (std::none_of(ps.begin(), ps.end(), [&](const Tensor& t) { return t.is_same(s); }))
      throw std::invalid_argument(who + " the optimizer the factory made does not hold every shard tensor it "
                                        "was given (build it over the shard_params argument)");
  }
  buckets.resize(groups.size());
  ready.assign(params.size(), 0);
  install_grad_hooks();
  install_unit_hooks();
  peak = memory();
}

void ShardCore::zero_grad() {
  drop_reduction();
  for (auto& p : params) p.set_grad(Tensor());
  for (auto& s : shards) s.set_grad(Tensor());
}

void ShardCore::step() {
  note_peak(memory());
  if (stage == 1) {
    all_reduce_gradients();
    opt->step();
    for (auto& s : shards) s.set_grad(Tensor());  // the full .grad stays; the shard's copy goes
    all_gather_full();
  } else if (stage == 2) {
    finish_reduction();
    NoGradGuard no_grad;
    for (auto& s : shards)
      if (!s.grad().defined()) s.set_grad(zeros_like(s.detach()));  // no backward since the last step
    opt->step();
    all_gather_full();
  } else {
    finish_reduction();
    free_all();
    for (auto& p : params) p.set_grad(Tensor());
    opt->step();
  }
  note_peak(memory());
}

}  // namespace detail

// ------------------------------------------------------------------------------------------- ZeroOptimizer

ZeroOptimizer::ZeroOptimizer(nn::ModulePtr module, OptimizerFactory factory, int stage, ProcessGroupPtr group,
                             ZeroOptions options)
    : options_(std::move(options)), core_(std::make_shared<detail::ShardCore>()) {
  if (stage != 1 && stage != 2)
    throw std::invalid_argument("[ZeroOptimizer] stage must be 1 or 2, got " + std::to_string(stage) +
                                " (stage 3 is FullyShardedDataParallel)");
  core_->who = "[ZeroOptimizer]";
  core_->stage = stage;
  core_->group = std::move(group);
  core_->first_bucket_mb = options_.first_bucket_mb();
  core_->bucket_cap_mb = options_.bucket_cap_mb();
  core_->overlap = options_.overlap_comm();
  core_->build(module, factory);
}

ZeroOptimizer::~ZeroOptimizer() = default;

void ZeroOptimizer::zero_grad() { core_->zero_grad(); }
void ZeroOptimizer::step() { core_->step(); }
int ZeroOptimizer::stage() const { return core_->stage; }
const ProcessGroupPtr& ZeroOptimizer::process_group() const { return core_->group; }
const ZeroOptions& ZeroOptimizer::options() const { return options_; }
optim::Optimizer& ZeroOptimizer::inner() { return *core_->opt; }
std::vector<Tensor> ZeroOptimizer::shard_parameters() const { return core_->shards; }
const std::vector<FlatShardInfo>& ZeroOptimizer::flat_shards() const { return core_->groups; }
ShardMemory ZeroOptimizer::memory_per_rank() const { return core_->memory(); }
ShardMemory ZeroOptimizer::max_memory_per_rank() const { return core_->peak; }
void ZeroOptimizer::reset_peak_memory_stats() { core_->peak = core_->memory(); }

std::vector<ShardedTensor> ZeroOptimizer::sharded_state_dict() const {
  std::vector<ShardedTensor> out;
  for (auto& e : core_->entries()) out.push_back(std::move(e.t));
  return out;
}
void ZeroOptimizer::save_sharded(const std::string& dir) const { core_->save(dir); }
void ZeroOptimizer::load_sharded(const std::string& dir) { core_->load(dir); }

// ------------------------------------------------------------------------------ FullyShardedDataParallel

FullyShardedDataParallel::FullyShardedDataParallel(nn::ModulePtr module, OptimizerFactory factory,
                                                   ProcessGroupPtr group, FSDPOptions options)
    : module_(std::move(module)), options_(std::move(options)), core_(std::make_shared<detail::ShardCore>()) {
  core_->who = "[FullyShardedDataParallel]";
  core_->stage = 3;
  core_->group = std::move(group);
  core_->first_bucket_mb = options_.first_bucket_mb();
  core_->bucket_cap_mb = options_.bucket_cap_mb();
  core_->overlap = options_.overlap_comm();
  core_->reshard_after_forward = options_.reshard_after_forward();
  core_->prefetch = options_.backward_prefetch();
  core_->policy = options_.auto_wrap_policy();
  core_->build(module_, factory);
  register_module("module", module_);
}

FullyShardedDataParallel::~FullyShardedDataParallel() = default;

Tensor FullyShardedDataParallel::forward(const Tensor& input) {
  return forward_args({nn::Value(input)}, {}).tensor();
}

nn::Value FullyShardedDataParallel::forward_args(const nn::Args& args, const nn::Kwargs& kwargs) {
  core_->root_pre_forward();
  nn::Value out = module_->call(args, kwargs);
  core_->root_post_forward(out);
  return out;
}

void FullyShardedDataParallel::zero_grad() { core_->zero_grad(); }
void FullyShardedDataParallel::step() { core_->step(); }
void FullyShardedDataParallel::gather_parameters() { core_->gather_all(); }
void FullyShardedDataParallel::free_parameters() { core_->free_all(); }
bool FullyShardedDataParallel::parameters_gathered() const { return core_->all_gathered(); }
bool FullyShardedDataParallel::unit_gathered(size_t unit) const {
  if (unit >= core_->units.size())
    throw std::out_of_range("[FullyShardedDataParallel] unit_gathered(" + std::to_string(unit) + "): there are " +
                            std::to_string(core_->units.size()) + " units");
  return core_->ustate[unit].gathered;
}
const ProcessGroupPtr& FullyShardedDataParallel::process_group() const { return core_->group; }
const std::vector<ShardUnit>& FullyShardedDataParallel::units() const { return core_->units; }
optim::Optimizer& FullyShardedDataParallel::inner() { return *core_->opt; }
std::vector<Tensor> FullyShardedDataParallel::shard_parameters() const { return core_->shards; }
const std::vector<FlatShardInfo>& FullyShardedDataParallel::flat_shards() const { return core_->groups; }
ShardMemory FullyShardedDataParallel::memory_per_rank() const { return core_->memory(); }
ShardMemory FullyShardedDataParallel::max_memory_per_rank() const { return core_->peak; }
void FullyShardedDataParallel::reset_peak_memory_stats() { core_->peak = core_->memory(); }

std::vector<ShardedTensor> FullyShardedDataParallel::sharded_state_dict() const {
  std::vector<ShardedTensor> out;
  for (auto& e : core_->entries()) out.push_back(std::move(e.t));
  return out;
}
void FullyShardedDataParallel::save_sharded(const std::string& dir) const { core_->save(dir); }
void FullyShardedDataParallel::load_sharded(const std::string& dir) { core_->load(dir); }

}  // namespace troupe::parallel

