// Supervision of module hosts (supervisor.h): the caller's HostSupervisor (restart, back-off, checkpoint
// kept, error texts), the host's checkpoint of its subtree, the supervised host()/place(), and
// DistributedOptimizer's consistent cuts (checkpoint / restore / the optimizers' state by name).
#include <troupe/actors/supervisor.h>
#include <troupe/actors/placement.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <thread>
#include <unordered_set>

#include <troupe/optim/optimizer.h>
#include <troupe/tensor/autograd.h>
#include <troupe/tensor/ops.h>

namespace troupe::actors {

namespace {

// A request failed because its host did: stopped, its process gone, or no answer in time (the texts of
// system.cpp and value.cpp); a handler's exception is not a failure of the host.
bool host_failure(const std::string& error) {
  return error.find("failed: the actor is gone (") != std::string::npos || error.find(" timed out after ") != std::string::npos;
}

std::string step_text(int64_t step) { return "its checkpoint at step " + std::to_string(step); }

}  // namespace

namespace detail {

bool idempotent_call(const std::string& method) {
  static const std::set<std::string> kinds = {"members", "modules", "children", "submod", "getp",  "sd",   "sdcheck",
                                              "repr",    "train",   "rgrad",    "zgrad",  "to",    "type", "load",
                                              "opt_zero", "opt_sd"};
  return kinds.count(method) != 0;
}

// ------------------------------------------------------------------------------------------------
// RestartBudget

int RestartBudget::admit(const std::string& who, const std::string& failure) {
  if (restarts_ >= policy_.max_restarts) {
    const int n = restarts_ + 1;
    throw ActorError(who + " failed " + (n == 1 ? std::string("once") : std::to_string(n) + " times") +
                     ", more than max_restarts = " + std::to_string(policy_.max_restarts) + "; its last failure: " + failure);
  }
  ++restarts_;
  if (policy_.backoff.count() > 0) {
    double ms = static_cast<double>(policy_.backoff.count()) * std::pow(policy_.backoff_multiplier, restarts_ - 1);
    ms = std::min(ms, static_cast<double>(policy_.max_backoff.count()));
    std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<int64_t>(ms)));
  }
  return restarts_;
}

std::vector<int> RestartBudget::ranks(int rank) const { return policy_.ranks.empty() ? std::vector<int>{rank} : policy_.ranks; }

// ------------------------------------------------------------------------------------------------
// HostSupervisor

HostSupervisor::HostSupervisor(Runtime& rt, ActorRef ref, List rebuild, nn::ModulePtr model_template,
                               RestartPolicy policy, std::string module)
    : rt_(&rt),
      ref_(std::move(ref)),
      rebuild_(std::move(rebuild)),
      model_template_(std::move(model_template)),
      budget_(policy),
      module_(std::move(module)),
      name_(ref_.name()) {
  if (policy.max_restarts < 0)
    throw ActorError("[actors] RestartPolicy: max_restarts must be >= 0, got " + std::to_string(policy.max_restarts));
  for (int r : policy.ranks)
    if (r < 0 || r >= rt.size())
      throw ActorError("[actors] RestartPolicy: restart rank " + std::to_string(r) + ", but there are " +
                       std::to_string(rt.size()) + " ranks");
}

std::pair<ActorRef, uint64_t> HostSupervisor::current() const {
  std::lock_guard<std::mutex> g(mu_);
  if (!final_error_.empty()) throw ActorError(final_error_);
  return {ref_, gen_};
}

uint64_t HostSupervisor::generation() const {
  std::lock_guard<std::mutex> g(mu_);
  return gen_;
}

int HostSupervisor::restarts() const {
  std::lock_guard<std::mutex> g(mu_);
  return budget_.restarts();
}

int64_t HostSupervisor::checkpoint_step() const {
  std::lock_guard<std::mutex> g(mu_);
  return ckpt_step_;
}

void HostSupervisor::keep(Value ckpt, int64_t step) {
  std::lock_guard<std::mutex> g(mu_);
  ckpt_ = std::move(ckpt);
  ckpt_step_ = step;
}

void HostSupervisor::note_train(const std::string& path, bool mode) {
  std::lock_guard<std::mutex> g(mu_);
  if (ckpt_.is_none()) return;
  List c = ckpt_.as<List>();        // [module checkpoint, optimizers]
  List m = c.at(0).as<List>();      // [state_dict, flags, frozen]
  List flags = m.at(1).as<List>();  // [[path, training], ...]
  for (auto& e : flags) {
    const std::string& p = e.as<List>().at(0).as<std::string>();
    if (path.empty() || p == path || p.compare(0, path.size() + 1, path + ".") == 0) e = Value(List{Value(p), Value(mode)});
  }
  m[1] = Value(std::move(flags));
  c[0] = Value(std::move(m));
  ckpt_ = Value(std::move(c));
}

std::string HostSupervisor::label(const std::string& path) const {
  return "`" + (path.empty() ? module_ : module_ + "." + path) + "`";
}

bool HostSupervisor::recover(uint64_t gen, const std::string& error) {
  if (!host_failure(error)) return false;
  std::lock_guard<std::mutex> g(mu_);
  if (!final_error_.empty()) throw ActorError(final_error_);
  if (gen != gen_) return true;  // another caller saw it first and restarted it
  last_failure_ = error;
  last_failed_name_ = ref_.name();
  last_failed_rank_ = ref_.rank();
  const std::string who = "[actors] module host '" + ref_.name() + "' (rank " + std::to_string(ref_.rank()) +
                          ") holding " + label("");
  try {
    budget_.admit(who, error);  // past max_restarts: the limit error; else the back-off
  } catch (const ActorError& e) {
    final_error_ = e.what();
    throw;
  }
  try {
    ref_.stop();  // a host that timed out may still run
  } catch (const std::exception&) {
  }
  const std::vector<int> ranks = budget_.ranks(last_failed_rank_);
  std::string errors;
  for (size_t i = 0; i < ranks.size(); ++i) {
    const int r = ranks[i];
    List spec = model_template_ ? module_spec(*rt_, model_template_->clone(), r, "", {}) : rebuild_;
    ActorRef next;
    try {
      next = rt_->spawn_on_list(r, name_ + ".r" + std::to_string(budget_.restarts()) + (i ? "." + std::to_string(i) : ""),
                                "troupe.ModuleHost", spec);
      if (!ckpt_.is_none()) next.request<void>("restore", ckpt_).get();
    } catch (const std::exception& e) {
      drop_handoff(spec);
      if (next.valid()) {
        try {
          next.stop();
        } catch (const std::exception&) {
        }
      }
      errors += std::string(errors.empty() ? "" : "; ") + "on rank " + std::to_string(r) + ": " + e.what();
      continue;
    }
    ref_ = next;
    ++gen_;
    std::fprintf(stderr, "%s failed (%s); spawned again on rank %d from %s (restart %d of %d)\n", who.c_str(),
                 error.c_str(), r, step_text(ckpt_step_).c_str(), budget_.restarts(), budget_.policy().max_restarts);
    return true;
  }
  final_error_ = who + " failed and could not be spawned again (" + errors + "); its last failure: " + error;
  throw ActorError(final_error_);
}

void HostSupervisor::throw_restarted(const std::string& call, const std::string& path) const {
  std::lock_guard<std::mutex> g(mu_);
  const std::string text = "[actors] '" + call + "' to " + label(path) + " on module host '" + last_failed_name_ +
                           "' (rank " + std::to_string(last_failed_rank_) + ") failed: the host failed (" +
                           last_failure_ + ") and was spawned again as '" + ref_.name() + "' on rank " +
                           std::to_string(ref_.rank()) + " from " + step_text(ckpt_step_) + " (restart " +
                           std::to_string(budget_.restarts()) + " of " + std::to_string(budget_.policy().max_restarts) +
                           "); this call changes training state and was not retried: rewind to step " +
                           std::to_string(ckpt_step_) +
                           " (DistributedOptimizer::restore, or actors::load_checkpoint) and go on from there";
  throw HostRestartedError(text, last_failed_name_, last_failed_rank_, path.empty() ? module_ : module_ + "." + path,
                           ckpt_step_);
}

void HostSupervisor::check_graph(uint64_t gen, const std::string& what) const {
  std::unique_lock<std::mutex> g(mu_);
  if (gen == gen_) return;
  const std::string text = "[actors] backward through " + what + ": its host '" + last_failed_name_ + "' (rank " +
                           std::to_string(last_failed_rank_) + ") failed after this forward (" + last_failure_ +
                           ") and was spawned again from " + step_text(ckpt_step_) +
                           "; the autograd graph the forward recorded there is lost: rewind to step " +
                           std::to_string(ckpt_step_) + " (DistributedOptimizer::restore) and run the forward again";
  throw HostRestartedError(text, last_failed_name_, last_failed_rank_, module_, ckpt_step_);
}

// ------------------------------------------------------------------------------------------------
// the host's checkpoint of its subtree

Value module_checkpoint(nn::Module& root) {
  nn::PlacedBypass bypass;
  NoGradGuard no_grad;
  List sd;
  for (const auto& [k, t] : root.state_dict()) sd.emplace_back(List{Value(k), t.defined() ? Value(t.detach().clone()) : Value()});
  List flags;
  for (const auto& [path, m] : root.named_modules()) flags.emplace_back(List{Value(path), Value(m->is_training())});
  List frozen;
  for (const auto& [name, p] : root.named_parameters())
    if (!p.requires_grad()) frozen.emplace_back(name);
  return Value(List{Value(std::move(sd)), Value(std::move(flags)), Value(std::move(frozen))});
}

void module_restore(nn::Module& root, const Value& ckpt) {
  nn::PlacedBypass bypass;
  const List& c = ckpt.as<List>();
  root.load_state_dict(state_dict_from(c.at(0)), /*strict=*/true);
  for (const auto& e : c.at(1).as<List>()) {  // parents before children: each ends with its own flag
    const List& f = e.as<List>();
    const std::string& path = f.at(0).as<std::string>();
    (path.empty() ? root : *root.get_submodule(path)).train(f.at(1).as<bool>());
  }
  std::unordered_set<std::string> frozen;
  for (const auto& n : c.at(2).as<List>()) frozen.insert(n.as<std::string>());
  for (auto& [name, p] : root.named_parameters()) p.requires_grad_(frozen.count(name) == 0);
}

// ------------------------------------------------------------------------------------------------
// the tree's local part and hosted subtrees

TreeSplit split_tree(nn::Module& root) {
  TreeSplit out;
  std::unordered_set<const nn::Module*> memo;
  std::unordered_set<const TensorImpl*> seen;
  std::vector<std::pair<nn::Module*, std::string>> stack{{&root, ""}};
  auto join = [](const std::string& a, const std::string& b) { return a.empty() ? b : a + "." + b; };
  while (!stack.empty()) {
    auto [m, prefix] = stack.back();
    stack.pop_back();
    if (!memo.insert(m).second) continue;
    if (auto* r = dynamic_cast<RemoteModule*>(m)) {
      out.hosts.emplace_back(prefix, r);
      continue;
    }
    for (const auto& [k, p] : m->parameters_dict())
      if (p.defined() && seen.insert(p.impl()).second) out.local_params.emplace_back(join(prefix, k), p);
    for (const auto& [k, b] : m->buffers_dict())
      if (b.defined() && m->is_persistent_buffer(k) && seen.insert(b.impl()).second)
        out.local_buffers.emplace_back(join(prefix, k), b);
    const auto& kids = m->children_dict().items();
    for (auto it = kids.rbegin(); it != kids.rend(); ++it)
      if (it->second) stack.emplace_back(it->second.get(), join(prefix, it->first));
  }
  return out;
}

}  // namespace detail

// ------------------------------------------------------------------------------------------------
// supervised host() and place()

namespace {

// What a restart builds the module from: a factory spec, or (one process, no factory) a clone kept now.
std::pair<List, nn::ModulePtr> rebuild_of(Runtime& rt, const nn::ModulePtr& module, const std::string& factory,
                                          const List& args) {
  const std::string f = factory.empty() ? module->name() : factory;
  if (has_module_factory(f)) return {List{Value("factory"), Value(f), Value(args)}, nullptr};
  if (rt.networked())
    throw ActorError("[actors] supervising a hosted " + module->name() + " needs a module factory to build it again; none is "
                     "registered as '" + f + "' (register it on every rank with actors::register_module<M, Args...>(\"" + f + "\"))");
  try {
    return {List{}, module->clone()};
  } catch (const std::exception& e) {
    throw ActorError("[actors] supervising a hosted " + module->name() + " needs a module factory (actors::register_module) or "
                     "a clonable module to build it again: " + e.what());
  }
}

void supervise(Runtime& rt, const RemoteModulePtr& proxy, List rebuild, nn::ModulePtr model_template,
               const RestartPolicy& policy, const std::string& module) {
  auto sup = std::make_shared<detail::HostSupervisor>(rt, proxy->host_actor(), std::move(rebuild), std::move(model_template),
                                                      policy, module);
  sup->keep(proxy->host_actor().request<List>("ckpt").get(), 0);  // the state a restart resumes from until a cut
  proxy->set_supervisor(std::move(sup));
}

}  // namespace

RemoteModulePtr host(Runtime& rt, int rank, const std::string& factory, List args, std::string name,
                     const RestartPolicy& policy) {
  List rebuild{Value("factory"), Value(factory), Value(args)};
  auto p = host(rt, rank, factory, std::move(args), std::move(name));
  supervise(rt, p, std::move(rebuild), nullptr, policy, p->name());
  return p;
}

RemoteModulePtr host(Runtime& rt, const nn::ModulePtr& module, int rank, const std::string& factory, List args,
                     std::string name, const RestartPolicy& policy) {
  if (!module) throw ActorError("[actors] host(): the module is null");
  auto [rebuild, model_template] = rebuild_of(rt, module, factory, args);
  auto p = host(rt, module, rank, factory, std::move(args), std::move(name));
  supervise(rt, p, std::move(rebuild), std::move(model_template), policy, p->name());
  return p;
}

std::map<std::string, RemoteModulePtr> place(Runtime& rt, const nn::ModulePtr& model,
                                             const std::map<std::string, Placement>& placement, const RestartPolicy& policy) {
  if (!model) throw ActorError("[actors] place(): the model is null");
  for (const auto& [path, where] : placement)
    if (where.kind != Placement::Kind::kRank)
      throw ActorError("[actors] place(): `" + path + "` is placed on a group (replicated / sharded), which a RestartPolicy "
                       "does not supervise yet; place it without a policy");
  std::map<std::string, std::pair<List, nn::ModulePtr>> rebuild;
  for (const auto& [path, where] : placement) {
    nn::ModulePtr child = model->get_submodule(path);
    if (!child->is_remote()) rebuild[path] = rebuild_of(rt, child, "", {});
  }
  auto proxies = place(rt, model, placement);
  for (auto& [path, p] : proxies) supervise(rt, p, rebuild[path].first, rebuild[path].second, policy, path);
  return proxies;
}

int restarts(const RemoteModule& proxy) { return proxy.supervisor() ? proxy.supervisor()->restarts() : 0; }

// ------------------------------------------------------------------------------------------------
// DistributedOptimizer's cuts

void DistributedOptimizer::check_restarts() {
  for (auto& r : remote_) {
    if (!r.sup) continue;
    r.sup->current();  // past its restarts: the limit error
    if (r.sup->generation() != r.gen) r.sup->throw_restarted("opt_step", r.path);
  }
}

void DistributedOptimizer::checkpoint() {
  std::vector<std::pair<Future<List>, uint64_t>> fs;
  for (auto& r : remote_) {
    auto [h, gen] = r.sup ? r.sup->current() : std::pair<ActorRef, uint64_t>(r.host, 0);
    fs.emplace_back(h.request<List>("ckpt"), gen);
  }
  if (auto model = model_.lock()) {
    NoGradGuard g;
    detail::TreeSplit split = detail::split_tree(*model);
    local_ckpt_.clear();
    for (auto& [k, t] : split.local_params) local_ckpt_.insert_or_assign(k, t.detach().clone());
    for (auto& [k, t] : split.local_buffers) local_ckpt_.insert_or_assign(k, t.detach().clone());
  }
  if (local_) local_opt_ckpt_ = local_->state_dict();
  std::vector<Value> cut(remote_.size());
  for (size_t i = 0; i < fs.size(); ++i) {
    Remote& r = remote_[i];
    try {
      cut[i] = Value(fs[i].first.get());
    } catch (const ActorError& e) {
      if (!r.sup || !r.sup->recover(fs[i].second, e.what())) throw;
      r.sup->throw_restarted("ckpt", r.path);  // it resumes from the previous cut, still the one kept
    }
  }
  for (size_t i = 0; i < remote_.size(); ++i) {
    remote_[i].ckpt = cut[i];
    if (remote_[i].sup) remote_[i].sup->keep(cut[i], steps_);
  }
  ckpt_step_ = steps_;
}

int64_t DistributedOptimizer::restore() {
  if (ckpt_step_ < 0)
    throw ActorError("[actors] DistributedOptimizer::restore: no checkpoint() was taken (one is taken when it is built "
                     "over a supervised host, and every RestartPolicy::checkpoint_every steps)");
  std::vector<std::pair<Future<void>, uint64_t>> fs;
  for (auto& r : remote_) {
    if (r.ckpt.is_none())
      throw ActorError("[actors] DistributedOptimizer::restore: no checkpoint() was taken of the host of `" + r.prefix + "`");
    auto [h, gen] = r.sup ? r.sup->current() : std::pair<ActorRef, uint64_t>(r.host, 0);
    fs.emplace_back(h.request<void>("restore", r.ckpt), gen);
  }
  if (auto model = model_.lock()) {
    NoGradGuard g;
    detail::TreeSplit split = detail::split_tree(*model);
    for (auto* part : {&split.local_params, &split.local_buffers})
      for (auto& [k, t] : *part) {
        const Tensor* saved = local_ckpt_.find(k);
        if (!saved) throw ActorError("[actors] DistributedOptimizer::restore: `" + k + "` is not in the last checkpoint");
        t.copy_(*saved);
      }
  }
  if (local_) local_->load_state_dict(local_opt_ckpt_);
  for (size_t i = 0; i < fs.size(); ++i) {
    Remote& r = remote_[i];
    try {
      fs[i].first.get();
    } catch (const ActorError& e) {
      if (!r.sup || !r.sup->recover(fs[i].second, e.what())) throw;
      r.target().request<void>("restore", r.ckpt).get();  // on the host spawned again meanwhile
    }
    if (r.sup) r.gen = r.sup->generation();
  }
  steps_ = ckpt_step_;
  return ckpt_step_;
}

namespace {
// "state.<i>.<key>" of one optimizer under its parameters' names, and param_groups.0's options.
void add_named(nn::StateDict& out, const nn::StateDict& sd, const std::vector<std::string>& names, bool groups) {
  for (const auto& [k, t] : sd) {
    if (k.compare(0, 6, "state.") == 0) {
      const size_t dot = k.find('.', 6);
      const size_t i = std::stoul(k.substr(6, dot - 6));
      if (i >= names.size()) throw ActorError("[actors] optimizer state for parameter " + std::to_string(i) + " of " + std::to_string(names.size()));
      out.insert_or_assign("state." + names[i] + k.substr(dot), t);
    } else if (groups && k.compare(0, 15, "param_groups.0.") == 0 && k != "param_groups.0.params") {
      out.insert_or_assign(k, t);
    }
  }
}

nn::StateDict indexed(const nn::StateDict& named, const std::vector<std::string>& names) {
  nn::StateDict sd;
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string prefix = "state." + names[i] + ".";
    for (const auto& [k, t] : named)
      if (k.compare(0, prefix.size(), prefix) == 0) sd.insert_or_assign("state." + std::to_string(i) + "." + k.substr(prefix.size()), t);
  }
  for (const auto& [k, t] : named)
    if (k.compare(0, 15, "param_groups.0.") == 0) sd.insert_or_assign(k, t);
  std::vector<int64_t> idx(names.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<int64_t>(i);
  sd.insert_or_assign("param_groups.0.params", tensor(idx, kInt64));
  return sd;
}

std::vector<std::string> host_param_names(const ActorRef& h, const std::string& path, const std::string& prefix) {
  return detail::state_dict_from(h.request<Value>("members", path, prefix, true, true, false).get()).keys();
}

// Whole-model checkpoints name optimizer state by parameter; a group placement (replicated / sharded)
// has one optimizer per host under one path, over copies or shards: not named yet, so refused.
void refuse_groups(const std::vector<std::string>& prefixes, const char* api) {
  std::unordered_set<std::string> seen;
  for (const auto& p : prefixes)
    if (!seen.insert(p).second)
      throw ActorError(std::string("[actors] ") + api + ": `" + p +
                       "` is placed on a group (replicated / sharded); whole-model checkpoints of its optimizer "
                       "state are not supported yet (save the model's state_dict alone)");
}
}  // namespace

nn::StateDict DistributedOptimizer::named_state_dict() {
  std::vector<std::string> prefixes;
  for (const auto& r : remote_) prefixes.push_back(r.prefix);
  refuse_groups(prefixes, "save_checkpoint");
  nn::StateDict out;
  bool groups = true;
  if (local_) {
    add_named(out, local_->state_dict(), local_names_, groups);
    groups = false;
  }
  for (auto& r : remote_) {
    ActorRef h = r.target();
    add_named(out, detail::state_dict_from(h.request<Value>("opt_sd", r.id).get()), host_param_names(h, r.path, r.prefix), groups);
    groups = false;
  }
  return out;
}

void DistributedOptimizer::load_named_state_dict(const nn::StateDict& state, int64_t steps) {
  std::vector<std::string> prefixes;
  for (const auto& r : remote_) prefixes.push_back(r.prefix);
  refuse_groups(prefixes, "load_checkpoint");
  if (local_) local_->load_state_dict(indexed(state, local_names_));
  for (auto& r : remote_) {
    ActorRef h = r.target();
    h.request<void>("opt_load", r.id, Value(detail::state_pairs(indexed(state, host_param_names(h, r.path, r.prefix))))).get();
  }
  steps_ = steps;
  checkpoint();  // restarts and restore() resume from the loaded state
}

}  // namespace troupe::actors
