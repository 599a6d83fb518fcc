// Module state: state_dict (with its pre-hooks) and load_state_dict (strict / assign, PyTorch's error texts,
// all-or-nothing: a failed strict load restores the module's tensors), plus set_extra_state's default.
#include <troupe/nn/module.h>

#include <stdexcept>
#include <string>
#include <unordered_set>
#include <vector>

#include <troupe/tensor/autograd.h>

namespace troupe::nn {

namespace {
std::string torch_size_str(IntArrayRef s) {
  std::string r = "torch.Size([";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "])";
}
}  // namespace

// -------------------------------------------------------------------------------------------------
// state_dict

void Module::save_to_state_dict(StateDict& out, const std::string& prefix, bool keep_vars) const {
  for (const auto& [k, p] : parameters_)
    if (p.defined()) out.insert_or_assign(prefix + k, keep_vars ? p : p.detach());
  for (const auto& [k, b] : buffers_)
    if (b.defined() && is_persistent_buffer(k)) out.insert_or_assign(prefix + k, keep_vars ? b : b.detach());
  if (auto extra = get_extra_state()) out.insert_or_assign(prefix + "_extra_state", *extra);
}

StateDict Module::state_dict(const std::string& prefix, bool keep_vars) {
  StateDict out;
  // recursive per module, iteratively: (module, prefix) in pre-order
  std::vector<std::pair<Module*, std::string>> stack{{this, prefix}};
  while (!stack.empty()) {
    auto [m, pfx] = stack.back();
    stack.pop_back();
    if (!m->state_dict_pre_hooks_.empty()) {
      auto hooks = m->state_dict_pre_hooks_;
      for (auto& h : hooks) h.fn(*m, pfx, keep_vars);
    }
    m->save_to_state_dict(out, pfx, keep_vars);
    const auto& kids = m->children_.items();
    for (auto it = kids.rbegin(); it != kids.rend(); ++it)
      if (it->second) stack.emplace_back(it->second.get(), pfx + it->first + ".");
  }
  return out;
}

void Module::set_extra_state(const Tensor&) {
  throw std::runtime_error(
      "Reached a code path in Module.set_extra_state() that should never be called. Please file an issue at "
      "https://github.com/pytorch/pytorch/issues/new?template=bug-report.yml to report this bug.");
}

namespace {
struct PendingCopy {
  Module* module;
  Tensor target;  // the module's tensor
  Tensor source;  // from the state dict
  bool is_param;
};
struct PendingExtra {
  Module* module;
  Tensor state;
};
}  // namespace

/// load_state_dict's first pass: checks every entry against the tree and collects what to copy, changing
/// nothing. A hosted subtree (is_remote()) checks its part on its host and loads it in the second pass.
struct LoadPlanner {
  IncompatibleKeys keys;
  std::vector<std::string> errors;
  std::vector<PendingCopy> copies;
  std::vector<PendingExtra> extras;
  std::vector<Module*> post_order;  // modules in the order their post-hooks run (children first)
  bool any_post_hooks = false;
  std::vector<std::pair<Module*, StateDict>> remotes;  // hosted subtrees and their entries (prefix removed)

  void plan(Module& root, const StateDict& sd, const std::string& root_prefix = "") {
    struct Frame {
      Module* m;
      std::string prefix;
      bool expanded;
    };
    std::vector<Frame> stack{{&root, root_prefix, false}};
    while (!stack.empty()) {
      Frame f = stack.back();
      stack.pop_back();
      Module* m = f.m;
      if (f.expanded) {
        post_order.push_back(m);
        any_post_hooks = any_post_hooks || !m->load_post_hooks_.empty();
        continue;
      }
      const std::string& prefix = f.prefix;
      if (m != &root && m->is_remote()) {
        StateDict mine, sub;  // its entries with their full keys, and without the prefix (to load)
        for (const auto& [key, t] : sd)
          if (key.compare(0, prefix.size(), prefix) == 0) {
            mine.insert_or_assign(key, t);
            sub.insert_or_assign(key.substr(prefix.size()), t);
          }
        StateDictCheck c = m->check_state_dict(mine, prefix);
        for (auto& k : c.keys.missing_keys) keys.missing_keys.push_back(std::move(k));
        for (auto& k : c.keys.unexpected_keys) keys.unexpected_keys.push_back(std::move(k));
        for (auto& e : c.errors) errors.push_back(std::move(e));
        remotes.emplace_back(m, std::move(sub));
        continue;
      }
      // local state: non-null parameters and persistent buffers
      std::vector<std::pair<std::string, std::pair<Tensor, bool>>> local;
      for (const auto& [k, p] : m->parameters_)
        if (p.defined()) local.push_back({k, {p, true}});
      for (const auto& [k, b] : m->buffers_)
        if (b.defined() && m->is_persistent_buffer(k)) local.push_back({k, {b, false}});
      std::unordered_set<std::string> local_names;
      for (const auto& [k, v] : local) {
        local_names.insert(k);
        std::string key = prefix + k;
        const Tensor* in = sd.find(key);
        if (!in) {
          keys.missing_keys.push_back(key);
          continue;
        }
        Tensor input = *in;
        const Tensor& param = v.first;
        if (!input.defined()) {
          errors.push_back("While copying the parameter named \"" + key + "\", the checkpoint holds None.");
          continue;
        }
        if (param.dim() == 0 && input.dim() == 1 && input.numel() >= 1) input = input.select(0, 0);
        if (std::vector<int64_t>(input.sizes().begin(), input.sizes().end()) !=
            std::vector<int64_t>(param.sizes().begin(), param.sizes().end())) {
          errors.push_back("size mismatch for " + key + ": copying a param with shape " + torch_size_str(input.sizes()) +
                           " from checkpoint, the shape in current model is " + torch_size_str(param.sizes()) + ".");
          continue;
        }
        copies.push_back({m, param, input, v.second});
      }
      std::string extra_key = prefix + "_extra_state";
      bool has_extra = m->get_extra_state().has_value();
      if (has_extra) {
        if (const Tensor* e = sd.find(extra_key)) extras.push_back({m, *e});
        else keys.missing_keys.push_back(extra_key);
      } else if (sd.contains(extra_key)) {
        keys.unexpected_keys.push_back(extra_key);
      }
      for (const auto& [key, t] : sd) {
        if (key.compare(0, prefix.size(), prefix) != 0 || key == extra_key) continue;
        std::string rest = key.substr(prefix.size());
        std::string input_name = rest.substr(0, rest.find('.'));
        if (!m->children_.contains(input_name) && !local_names.count(input_name)) keys.unexpected_keys.push_back(key);
      }
      // post-hooks after the children: push a marker, then the children (reversed for pre-order)
      stack.push_back({m, prefix, true});
      const auto& kids = m->children_.items();
      for (auto it = kids.rbegin(); it != kids.rend(); ++it)
        if (it->second) stack.push_back({it->second.get(), prefix + it->first + ".", false});
    }
  }

  static void run_post_hooks(Module* m, IncompatibleKeys& k) {
    auto hooks = m->load_post_hooks_;
    for (auto& h : hooks) h.fn(*m, k);
  }
};

StateDictCheck Module::check_state_dict(const StateDict& sd, const std::string& prefix) {
  LoadPlanner p;
  p.plan(*this, sd, prefix);
  return {std::move(p.keys), std::move(p.errors)};
}

IncompatibleKeys Module::load_state_dict(const StateDict& sd, bool strict, bool assign) {
  // pass 1: validate everything, collect the copies (nothing is modified)
  LoadPlanner plan;
  plan.plan(*this, sd);
  IncompatibleKeys& keys = plan.keys;
  bool any_post_hooks = plan.any_post_hooks;

  auto fail = [&](std::vector<std::string> msgs, const IncompatibleKeys& k) {
    if (strict) {
      if (!k.unexpected_keys.empty()) {
        std::string s = "Unexpected key(s) in state_dict: ";
        for (size_t i = 0; i < k.unexpected_keys.size(); ++i)
          s += (i ? ", " : "") + ("\"" + k.unexpected_keys[i] + "\"");
        msgs.insert(msgs.begin(), s + ". ");
      }
      if (!k.missing_keys.empty()) {
        std::string s = "Missing key(s) in state_dict: ";
        for (size_t i = 0; i < k.missing_keys.size(); ++i) s += (i ? ", " : "") + ("\"" + k.missing_keys[i] + "\"");
        msgs.insert(msgs.begin(), s + ". ");
      }
    }
    if (msgs.empty()) return;
    std::string text = "Error(s) in loading state_dict for " + name() + ":\n\t";
    for (size_t i = 0; i < msgs.size(); ++i) text += (i ? "\n\t" : "") + msgs[i];
    throw std::runtime_error(text);
  };

  // errors that no hook can clear: fail before touching anything
  if (!plan.errors.empty()) fail(plan.errors, strict && !any_post_hooks ? keys : IncompatibleKeys{});
  bool key_errors = strict && (!keys.missing_keys.empty() || !keys.unexpected_keys.empty());
  if (key_errors && !any_post_hooks) fail({}, keys);

  // when post-hooks may clear key errors, keep a backup to restore if they do not
  std::vector<std::pair<Tensor, Tensor>> backup;  // (target, old data)
  if (key_errors) {
    for (auto& c : plan.copies) backup.emplace_back(c.target, c.target.detach().clone());
  }

  // pass 2: copy (or adopt) the values; hosted subtrees load their part (checked in pass 1)
  {
    NoGradGuard no_grad;
    for (auto& c : plan.copies) {
      if (assign) {
        bool rg = c.target.requires_grad();
        c.target.set_data(c.source.detach());
        if (c.is_param) c.target.requires_grad_(rg);
      } else {
        try {
          c.target.copy_(c.source);
        } catch (const std::exception& ex) {
          throw std::runtime_error("Error(s) in loading state_dict for " + name() +
                                   ":\n\tWhile copying a parameter, an exception occurred : " + ex.what() + ".");
        }
      }
    }
  }
  for (auto& [m, sub] : plan.remotes) m->load_state_dict(sub, false, assign);
  for (auto& e : plan.extras) e.module->set_extra_state(e.state);

  // post-hooks, children first; they may edit the key lists
  for (Module* m : plan.post_order) LoadPlanner::run_post_hooks(m, keys);
  if (strict && (!keys.missing_keys.empty() || !keys.unexpected_keys.empty())) {
    if (!assign) {
      NoGradGuard no_grad;
      for (auto& [target, old] : backup) target.copy_(old);
    } else {
      for (auto& [target, old] : backup) target.set_data(old);
    }
    fail({}, keys);
  }
  return keys;
}

}  // namespace troupe::nn
