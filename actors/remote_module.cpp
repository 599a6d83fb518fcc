// RemoteModule and its host actor (remote_module.h): the proxy turns each Module method into a message;
// the host runs it on the module at the message's path. Forward records a RemoteCallNode in the caller's
// graph; its backward asks the host to run backward from the outputs it kept (the host's own engine fills
// its parameters' .grad) and returns the gradients of the inputs. CAF-free: everything travels as Values.
#include <troupe/actors/remote_module.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

#include <troupe/actors/actor.h>
#include <troupe/actors/internal/services.h>
#include <troupe/actors/introspect.h>
#include <troupe/actors/supervisor.h>
#include <troupe/actors/wire.h>
#include <troupe/nn/registry.h>
#include <troupe/optim/adam.h>
#include <troupe/optim/adamw.h>
#include <troupe/optim/rmsprop.h>
#include <troupe/optim/sgd.h>
#include <troupe/tensor/autograd.h>
#include <troupe/util/env.h>

namespace troupe::actors {

// ------------------------------------------------------------------------------------------------
// nn::Value <-> Value

Value ValueTraits<nn::Value>::to(const nn::Value& v) {
  if (v.is_none()) return Value();
  if (v.is_tensor()) return Value(v.tensor());
  if (v.is_double()) return Value(v.to_double());
  if (v.is_int()) return Value(v.to_int());
  if (v.is_bool()) return Value(v.to_bool());
  if (v.is_string()) return Value(v.str());
  List l;
  l.reserve(v.tuple().size());
  for (const auto& t : v.tuple()) l.emplace_back(t);
  return Value(std::move(l));
}

nn::Value ValueTraits<nn::Value>::from(const Value& v) {
  const auto& var = v.get();
  if (std::holds_alternative<std::monostate>(var)) return nn::Value();
  if (auto* t = std::get_if<Tensor>(&var)) return nn::Value(*t);
  if (auto* d = std::get_if<double>(&var)) return nn::Value(*d);
  if (auto* i = std::get_if<int64_t>(&var)) return nn::Value(*i);
  if (auto* b = std::get_if<bool>(&var)) return nn::Value(*b);
  if (auto* s = std::get_if<std::string>(&var)) return nn::Value(*s);
  if (auto* l = std::get_if<List>(&var)) {
    nn::Value::TensorTuple ts;
    ts.reserve(l->size());
    for (size_t i = 0; i < l->size(); ++i) {
      if (!(*l)[i].is<Tensor>())
        throw ActorError(std::string("[actors] a module argument or result that is a list must hold tensors; element ") +
                         std::to_string(i) + " is " + (*l)[i].kind());
      ts.push_back((*l)[i].as<Tensor>());
    }
    return nn::Value(std::move(ts));
  }
  throw ActorError(std::string("[actors] a module argument or result cannot be ") + v.kind());
}

namespace {

// ------------------------------------------------------------------------------------------------
// registries: module factories by name, and modules handed to a host in the same process

std::mutex g_mu;
std::map<std::string, ModuleFactory>& factories() {
  static std::map<std::string, ModuleFactory> m;
  return m;
}
std::unordered_map<int64_t, nn::ModulePtr>& handoffs() {
  static std::unordered_map<int64_t, nn::ModulePtr> m;
  return m;
}
std::atomic<int64_t> g_next_handoff{1};
std::atomic<int64_t> g_next_call{1};
std::atomic<int64_t> g_next_host{1};

std::string join_path(const std::string& a, const std::string& b) {
  if (a.empty()) return b;
  if (b.empty()) return a;
  return a + "." + b;
}

// The tensors inside args then kwargs (by key), in the order both sides flatten them.
std::vector<Tensor> flat_tensors(const nn::Args& args, const nn::Kwargs& kwargs) {
  std::vector<Tensor> out;
  for (const auto& a : args)
    for (auto& t : a.tensors()) out.push_back(t);
  for (const auto& [k, v] : kwargs)
    for (auto& t : v.tensors()) out.push_back(t);
  return out;
}

// requires_grad of each tensor (the wire carries values only).
std::vector<bool> needs_of(const std::vector<Tensor>& ts) {
  std::vector<bool> out;
  out.reserve(ts.size());
  for (const auto& t : ts) out.push_back(t.defined() && t.requires_grad());
  return out;
}

List pairs_of(const OrderedDict<std::string, Tensor>& d) { return detail::state_pairs(d); }
OrderedDict<std::string, Tensor> dict_of(const Value& v) { return detail::state_dict_from(v); }
List strings(const std::vector<std::string>& xs) {
  List l;
  for (const auto& s : xs) l.emplace_back(s);
  return l;
}

const char* options_kind(const optim::OptimizerOptions& o) {
  if (dynamic_cast<const optim::SGDOptions*>(&o)) return "SGD";
  if (dynamic_cast<const optim::AdamWOptions*>(&o)) return "AdamW";
  if (dynamic_cast<const optim::AdamOptions*>(&o)) return "Adam";
  if (dynamic_cast<const optim::RMSpropOptions*>(&o)) return "RMSprop";
  throw ActorError("[actors] DistributedOptimizer: options of an unknown optimizer (known: SGD, Adam, AdamW, RMSprop)");
}


// ------------------------------------------------------------------------------------------------
// the host actor

/// What the host keeps of one recorded forward: the leaves it made of the inputs and the outputs.
struct Recorded {
  std::vector<Tensor> inputs;
  std::vector<Tensor> outputs;
};

class ModuleHost : public Actor {
 public:
  ModuleHost(nn::ModulePtr root) : root_(std::move(root)) {
    use_own_thread();  // its handlers wait on nested hosts (a hosted module that holds proxies)
    std::vector<std::string> paths;  // what actors::inspect shows of this host
    for (const auto& [path, m] : root_->named_modules()) paths.push_back((path.empty() ? "(root)" : path) + " (" + m->name() + ")");
    detail::note_hosted_modules(this, std::move(paths));
    allow_inline_requests();  // a caller in this process waiting on an idle host runs the call itself
    handle_list("fwd", [this](const List& a) { return forward(a); });
    handle("bwd", [this](int64_t key, List grads) { return backward(key, grads, false); });
    // bwd1 answers with the input gradients as soon as they are final and then computes the rest (the
    // weights' gradients, their hooks); bwdend, sent right after it, answers once that is done, with the
    // error of that part if it failed (the caller's backward waits for it before it returns).
    handle("bwd1", [this](int64_t key, List grads) { return backward(key, grads, true); });
    handle("bwdend", [this](int64_t key) {
      auto it = late_errors_.find(key);
      if (it == late_errors_.end()) return;
      std::string e = std::move(it->second);
      late_errors_.erase(it);
      throw ActorError(e);
    });
    handle("rel", [this](int64_t key) { recorded_.erase(key); });
    handle("members", [this](std::string path, std::string prefix, bool recurse, bool dedup, bool buffers) {
      return guard(path, [&](nn::Module& m) {
        return Value(pairs_of(buffers ? m.named_buffers(prefix, recurse, dedup) : m.named_parameters(prefix, recurse, dedup)));
      });
    });
    handle("modules", [this](std::string path, bool dedup) {
      return guard(path, [&](nn::Module& m) {
        List l;
        for (const auto& [k, sub] : m.named_modules("", dedup)) {
          if (k.empty()) continue;
          l.emplace_back(List{Value(k), Value(sub->name()), Value(sub->is_training())});
        }
        return Value(std::move(l));
      });
    });
    handle("children", [this](std::string path) {
      return guard(path, [&](nn::Module& m) {
        List l;
        for (const auto& [k, c] : m.named_children()) l.emplace_back(List{Value(k), Value(c->name()), Value(c->is_training())});
        return Value(std::move(l));
      });
    });
    handle("submod", [this](std::string path) {
      return guard("", [&](nn::Module& root) {
        auto m = root.get_submodule(path);
        return Value(List{Value(m->name()), Value(m->is_training())});
      });
    });
    handle("getp", [this](std::string path, std::string target, bool buffer) {
      return guard(path, [&](nn::Module& m) { return Value(buffer ? m.get_buffer(target) : m.get_parameter(target)); });
    });
    handle("sd", [this](std::string path, std::string prefix, bool keep_vars) {
      return guard(path, [&](nn::Module& m) { return Value(pairs_of(m.state_dict(prefix, keep_vars))); });
    });
    handle("sdcheck", [this](std::string path, Value sd, std::string prefix) {
      return guard(path, [&](nn::Module& m) {
        nn::StateDictCheck c = m.check_state_dict(dict_of(sd), prefix);
        return Value(List{strings(c.keys.missing_keys), strings(c.keys.unexpected_keys), strings(c.errors)});
      });
    });
    handle("load", [this](std::string path, Value sd, bool strict, bool assign) {
      return guard(path, [&](nn::Module& m) {
        nn::IncompatibleKeys k = m.load_state_dict(dict_of(sd), strict, assign);
        return Value(List{strings(k.missing_keys), strings(k.unexpected_keys)});
      });
    });
    handle("train", [this](std::string path, bool mode) { guard(path, [&](nn::Module& m) { m.train(mode); return Value(); }); });
    handle("rgrad", [this](std::string path, bool on) { guard(path, [&](nn::Module& m) { m.requires_grad_(on); return Value(); }); });
    handle("zgrad", [this](std::string path, bool none) { guard(path, [&](nn::Module& m) { m.zero_grad(none); return Value(); }); });
    // (A CUDA device is this host's arrival device, where the tensors sent to it land: to(kCUDA) on a proxy
    // puts each host's subtree on its own GPU.)
    handle("to", [this](std::string path, std::string device, int64_t dtype) {
      guard(path, [&](nn::Module& m) {
        std::optional<Device> d;
        if (!device.empty()) d = wire::arrival_device(Device(device));
        std::optional<ScalarType> t;
        if (dtype >= 0) t = static_cast<ScalarType>(dtype);
        m.to(d, t);
        return Value();
      });
    });
    handle("type", [this](std::string path, int64_t dtype) {
      guard(path, [&](nn::Module& m) { m.type(static_cast<ScalarType>(dtype)); return Value(); });
    });
    handle("toempty", [this](std::string path, std::string device, bool recurse) {
      guard(path, [&](nn::Module& m) { m.to_empty(wire::arrival_device(Device(device)), recurse); return Value(); });
    });
    handle("apply", [this](std::string path, std::string fn) { guard(path, [&](nn::Module& m) { m.apply(fn); return Value(); }); });
    handle("hook", [this](std::string path, std::string kind, std::string name, bool prepend, bool always_call) {
      return guard(path, [&](nn::Module& m) { return Value(add_hook(m, kind, name, prepend, always_call)); });
    });
    handle("unhook", [this](int64_t id) {
      auto it = hooks_.find(id);
      if (it == hooks_.end()) return;
      it->second.remove();
      hooks_.erase(it);
    });
    handle("repr", [this](std::string path) { return guard(path, [&](nn::Module& m) { return Value(m.repr()); }); });
    handle("opt_new", [this](std::string path, std::string kind, Value options) {
      int64_t id = next_id_++;
      new_optimizer(id, List{Value(path), Value(kind), options});
      return id;
    });
    handle("opt_step", [this](int64_t id) { optimizer(id).step(); });
    handle("opt_zero", [this](int64_t id, bool none) { optimizer(id).zero_grad(none); });
    handle("opt_drop", [this](int64_t id) {
      optimizers_.erase(id);
      opt_specs_.erase(id);
    });
    handle("opt_sd", [this](int64_t id) { return Value(pairs_of(optimizer(id).state_dict())); });
    handle("opt_load", [this](int64_t id, Value sd) { optimizer(id).load_state_dict(dict_of(sd)); });
    // supervision (supervisor.h): the subtree and its optimizers as one checkpoint, and its restore
    handle("ckpt", [this] {
      List opts;
      for (const auto& [id, spec] : opt_specs_)
        opts.emplace_back(List{Value(id), Value(spec), Value(pairs_of(optimizer(id).state_dict()))});
      return List{detail::module_checkpoint(*root_), Value(std::move(opts))};
    });
    handle("restore", [this](List c) {
      detail::module_restore(*root_, c.at(0));
      optimizers_.clear();
      opt_specs_.clear();
      for (const auto& e : c.at(1).as<List>()) {
        const List& o = e.as<List>();
        const int64_t id = o.at(0).as<int64_t>();
        new_optimizer(id, o.at(1).as<List>());
        optimizer(id).load_state_dict(dict_of(o.at(2)));
        next_id_ = std::max(next_id_, id + 1);
      }
    });
  }

 private:
  // Runs fn on the module at `path`; an exception gets the path and class in front of its text.
  template <class F>
  Value guard(const std::string& path, F fn) {
    nn::PlacedBypass bypass;
    nn::ModulePtr m;
    try {
      m = path.empty() ? root_ : root_->get_submodule(path);
    } catch (const std::exception& e) {
      throw ActorError("module `" + path + "` of the hosted " + root_->name() + ": " + e.what());
    }
    try {
      return fn(*m);
    } catch (const std::exception& e) {
      throw ActorError("module `" + (path.empty() ? std::string("<root>") : path) + "` (" + m->name() + "): " + e.what());
    }
  }

  // fwd(path, args, kwargs, flags, key): flags bit 0 = grad mode on at the caller, bit 1 = run call()
  // (hooks) rather than forward_args. Returns [recorded, output].
  Value forward(const List& a) {
    if (a.size() != 6) detail::throw_arity("fwd", 6, a.size());
    const std::string& path = a[0].as<std::string>();
    const int64_t flags = a[3].as<int64_t>();
    const int64_t key = a[4].as<int64_t>();
    const std::vector<bool> needs = from_value<std::vector<bool>>(a[5]);  // requires_grad of each input tensor
    const bool grad = flags & 1;
    return guard(path, [&](nn::Module& m) {
      std::optional<NoGradGuard> no_grad;
      std::optional<EnableGradGuard> enable_grad;
      if (grad) enable_grad.emplace();
      else no_grad.emplace();
      std::vector<Tensor> leaves;
      size_t n = 0;  // tensors seen, in the caller's flattening order (undefined ones included)
      auto leaf = [&](const Tensor& t) {
        const bool need = n < needs.size() && needs[n];
        ++n;
        // a fresh handle when the host's graph would otherwise reach into the caller's (a tensor that
        // needs no grad passes as it is: no graph starts at it)
        const bool fresh = t.defined() && ((grad && need) || t.requires_grad());
        Tensor l = fresh ? t.detach() : t;
        if (grad && need && fresh) l.requires_grad_(true);
        if (grad) leaves.push_back(l);  // kept only with a recorded graph
        return l;
      };
      auto arg = [&](const Value& v) {
        nn::Value x = from_value<nn::Value>(v);
        if (x.is_tensor()) return nn::Value(leaf(x.tensor()));
        if (x.is_tuple()) {
          nn::Value::TensorTuple ts;
          for (auto& t : x.tuple()) ts.push_back(leaf(t));
          return nn::Value(std::move(ts));
        }
        return x;
      };
      nn::Args args;
      for (const auto& v : a[1].as<List>()) args.push_back(arg(v));
      nn::Kwargs kwargs;
      for (const auto& e : a[2].as<List>()) {
        const List& p = e.as<List>();
        kwargs[p.at(0).as<std::string>()] = arg(p.at(1));
      }
      nn::Value out = (flags & 2) ? m.call(std::move(args), std::move(kwargs)) : m.forward_args(args, kwargs);
      std::vector<Tensor> outs = out.tensors();
      bool recorded = false;
      if (grad)
        for (const auto& o : outs) recorded = recorded || (o.defined() && o.requires_grad());
      if (recorded) recorded_[key] = Recorded{std::move(leaves), outs};
      // the caller gets fresh handles (its RemoteCallNode becomes their grad_fn); under no_grad a tensor
      // that needs no grad is nobody's graph and passes as it is
      auto cut = [grad](const Tensor& t) { return t.defined() && (grad || t.requires_grad()) ? t.detach() : t; };
      Value res;
      if (out.is_tensor()) {
        res = Value(cut(out.tensor()));
      } else if (out.is_tuple()) {
        List ts;
        ts.reserve(out.tuple().size());
        for (auto& t : out.tuple()) ts.emplace_back(cut(t));
        res = Value(std::move(ts));
      } else {
        res = to_value(out);
      }
      return Value(List{Value(recorded), std::move(res)});
    });
  }

  // bwd(key, grads): backward from the outputs of forward `key` with the caller's gradients; returns the
  // gradients of its inputs (none where an input needs none). `early` (bwd1): answers with them as soon
  // as they are final (reply_now), then finishes the graph; an error after that waits for bwdend.
  List backward(int64_t key, const List& grads, bool early) {
    nn::PlacedBypass bypass;
    auto it = recorded_.find(key);
    if (it == recorded_.end()) autograd::throw_backward_twice();
    Recorded& r = it->second;
    if (grads.size() != r.outputs.size())
      throw ActorError("backward got " + std::to_string(grads.size()) + " gradients for " +
                       std::to_string(r.outputs.size()) + " outputs");
    std::vector<Tensor> roots, root_grads;
    for (size_t i = 0; i < grads.size(); ++i) {
      if (grads[i].is_none() || !r.outputs[i].defined() || !r.outputs[i].requires_grad()) continue;
      roots.push_back(r.outputs[i]);
      root_grads.push_back(grads[i].as<Tensor>());
    }
    auto input_grads = [&r] {
      List out;
      out.reserve(r.inputs.size());
      for (auto& x : r.inputs) {
        if (x.requires_grad() && x.grad().defined()) {
          out.emplace_back(x.grad());
          x.set_grad(Tensor());
        } else {
          out.emplace_back();
        }
      }
      return out;
    };
    if (roots.empty()) return input_grads();
    if (!early) {
      autograd::backward(roots, root_grads, /*retain_graph=*/true);
      return input_grads();
    }
    std::vector<Tensor> targets;
    for (const auto& x : r.inputs)
      if (x.requires_grad()) targets.push_back(x);
    bool answered = false;
    try {
      autograd::backward_targets_first(roots, root_grads, /*retain_graph=*/true, targets, [&] {
        reply_now(Value(input_grads()));
        answered = true;
      });
    } catch (const std::exception& e) {
      if (!answered) throw;
      late_errors_.emplace(key, std::string("[actors] backward of ") + name() + " (rank " + std::to_string(rank()) +
                                    "), after its input gradients were sent: " + e.what());
    }
    return List{};  // dropped: answered above
  }

  int64_t add_hook(nn::Module& m, const std::string& kind, const std::string& name, bool prepend, bool always_call) {
    nn::RemovableHandle h;
    if (kind == "forward_pre") h = m.register_forward_pre_hook(name, prepend);
    else if (kind == "forward") h = m.register_forward_hook(name, nn::HookOptions{prepend, always_call});
    else if (kind == "backward_pre") h = m.register_full_backward_pre_hook(name, prepend);
    else if (kind == "backward") h = m.register_full_backward_hook(name, prepend);
    else if (kind == "legacy_backward") h = m.register_backward_hook(name);
    else if (kind == "state_dict_pre") h = m.register_state_dict_pre_hook(name);
    else if (kind == "load_post") h = m.register_load_state_dict_post_hook(name);
    else throw ActorError("unknown hook kind '" + kind + "'");
    int64_t id = next_id_++;
    hooks_[id] = h;
    return id;
  }

  // An optimizer over the parameters of the module at spec's path ([path, kind, options]), as `id`.
  void new_optimizer(int64_t id, const List& spec) {
    guard(spec.at(0).as<std::string>(), [&](nn::Module& m) {
      optimizers_[id] = make_optimizer(m.parameters(), *detail::options_of(spec.at(1).as<std::string>(), dict_of(spec.at(2))));
      opt_specs_[id] = spec;
      return Value();
    });
  }

  optim::Optimizer& optimizer(int64_t id) {
    auto it = optimizers_.find(id);
    if (it == optimizers_.end()) throw ActorError("no optimizer " + std::to_string(id) + " on this host");
    return *it->second;
  }

  nn::ModulePtr root_;
  std::unordered_map<int64_t, Recorded> recorded_;
  std::unordered_map<int64_t, std::string> late_errors_;  // bwd1's errors after it answered, for bwdend
  std::unordered_map<int64_t, nn::RemovableHandle> hooks_;
  std::unordered_map<int64_t, std::unique_ptr<optim::Optimizer>> optimizers_;
  std::map<int64_t, List> opt_specs_;  // what each optimizer was built from (a restore builds it again)
  int64_t next_id_ = 1;
};

// The built-in factory of ScriptModules: (archive bytes, compile).
nn::ModulePtr build_script_module(const List& args) {
  const std::string what = std::string("module factory '") + kScriptModuleFactory + "'";
  if (args.size() != 2) detail::throw_arity(what, 2, args.size());
  if (!args[0].is<std::string>() || !args[1].is<bool>())
    throw ActorError("[actors] " + what + " takes (archive bytes as a string, compile as a bool)");
  const std::string& bytes = args[0].as<std::string>();
  jit::ScriptModulePtr m;
  try {
    std::istringstream in(bytes);
    m = jit::load(in);
  } catch (const std::exception& e) {
    throw ActorError("[actors] " + what + ": the ScriptModule archive (" + std::to_string(bytes.size()) +
                     " bytes) cannot be loaded: " + e.what());
  }
  if (args[1].as<bool>()) m->compile();
  return m;
}

std::unique_ptr<Actor> make_host(const List& a) {
  if (a.size() != 3) detail::throw_arity("factory 'troupe.ModuleHost'", 3, a.size());
  return std::make_unique<ModuleHost>(detail::build_module(a));
}

const bool g_host_registered = [] {
  register_factory("troupe.ModuleHost", make_host);
  register_module_factory(kScriptModuleFactory, build_script_module);
  return true;
}();
}  // namespace

namespace detail {
// ("factory", name, args) builds the module here; ("handoff", id, []) takes the module handed over in
// this process.
nn::ModulePtr build_module(const List& a) {
  if (a.size() != 3) throw_arity("a module spec", 3, a.size());
  const std::string& how = a[0].as<std::string>();
  nn::ModulePtr m;
  if (how == "handoff") {
    std::lock_guard<std::mutex> g(g_mu);
    auto it = handoffs().find(a[1].as<int64_t>());
    if (it == handoffs().end()) throw ActorError("no module was handed over as " + std::to_string(a[1].as<int64_t>()));
    m = std::move(it->second);
    handoffs().erase(it);
  } else {
    const std::string& name = a[1].as<std::string>();
    ModuleFactory f;
    {
      std::lock_guard<std::mutex> g(g_mu);
      auto it = factories().find(name);
      if (it != factories().end()) f = it->second;
    }
    if (!f) {
      std::string known;
      for (const auto& k : module_factory_names()) known += (known.empty() ? "" : ", ") + k;
      throw ActorError("no module factory '" + name + "' (registered: " + (known.empty() ? "none" : known) +
                       "); register it on every rank with actors::register_module<M, Args...>(\"" + name + "\")");
    }
    m = f(a[2].as<List>());
    if (!m) throw ActorError("module factory '" + name + "' returned null");
  }
  return m;
}

List module_spec(Runtime& rt, const nn::ModulePtr& module, int rank, const std::string& factory, List args) {
  if (factory.empty()) {
    if (auto sm = std::dynamic_pointer_cast<jit::ScriptModule>(module)) {  // its archive travels, in every mode
      std::ostringstream out;
      sm->save(out);
      return List{Value("factory"), Value(kScriptModuleFactory), Value(List{Value(out.str()), Value(sm->is_compiled())})};
    }
  }
  if (!rt.networked()) {
    int64_t id = g_next_handoff++;
    std::lock_guard<std::mutex> g(g_mu);
    handoffs()[id] = module;
    return List{Value("handoff"), Value(id), Value(List{})};
  }
  const std::string f = factory.empty() ? module->name() : factory;
  if (!has_module_factory(f))
    throw ActorError("[actors] moving a " + module->name() + " to rank " + std::to_string(rank) +
                     " needs a module factory to build it there; none is registered as '" + f +
                     "' (register it on every rank with actors::register_module<M, Args...>(\"" + f + "\"))");
  return List{Value("factory"), Value(f), Value(std::move(args))};
}

void match_placement(nn::Module& copy, const nn::Module& source) {
  std::optional<Tensor> first;
  for (const auto& p : source.parameters())
    if (p.defined() && is_floating_point(p.dtype())) {
      first = p;
      break;
    }
  if (!first)
    for (const auto& b : source.buffers())
      if (b.defined() && is_floating_point(b.dtype())) {
        first = b;
        break;
      }
  if (!first || (first->is_cpu() && first->dtype() == kFloat32)) return;
  copy.to(first->device(), first->dtype(), false);
}

List state_pairs(const nn::StateDict& d) {
  List l;
  l.reserve(d.size());
  for (const auto& [k, t] : d) l.emplace_back(List{Value(k), Value(t)});
  return l;
}

nn::StateDict state_dict_from(const Value& v) {
  nn::StateDict d;
  for (const auto& e : v.as<List>()) {
    const List& p = e.as<List>();
    d.insert_or_assign(p.at(0).as<std::string>(), p.at(1).is_none() ? Tensor() : p.at(1).as<Tensor>());
  }
  return d;
}

void drop_handoff(const List& spec) {
  if (spec.empty() || spec[0].as<std::string>() != "handoff") return;
  std::lock_guard<std::mutex> g(g_mu);
  handoffs().erase(spec[1].as<int64_t>());
}
}  // namespace detail

namespace {

// ------------------------------------------------------------------------------------------------
// the caller's side of a recorded forward

/// A gradient as a message value: the tensor, or none when it is undefined. (Two emplace_back calls, not
/// one of a conditional expression: GCC 12 reports the latter's moved Value as maybe uninitialized.)
void push_grad(List& g, const Tensor& t) {
  if (t.defined()) g.emplace_back(t);
  else g.emplace_back();
}

/// One recorded forward on a host: its key; dropping the last reference tells the host to free it.
struct RemoteCall {
  ActorRef host;
  int64_t key;
  std::shared_ptr<detail::HostSupervisor> sup;  // a supervised host: its generation at the forward
  uint64_t gen;
  RemoteCall(ActorRef h, int64_t k, std::shared_ptr<detail::HostSupervisor> s, uint64_t g)
      : host(std::move(h)), key(k), sup(std::move(s)), gen(g) {}
  ~RemoteCall() {
    try {
      if (running()) host.send("rel", key);
    } catch (const std::exception&) {
    }
  }
};

/// The node a forward through a proxy records: backward asks the host to run its part.
struct RemoteCallNode : autograd::Node {
  std::shared_ptr<RemoteCall> call;
  std::shared_ptr<const std::string> what;  // the proxy's, made once (no text built per forward)
  RemoteCallNode(std::shared_ptr<RemoteCall> c, std::shared_ptr<const std::string> w) : call(std::move(c)), what(std::move(w)) {}
  ~RemoteCallNode() override { teardown(); }
  std::string name() const override { return "RemoteModuleBackward"; }
  bool materializes_grads() const override { return false; }
  void release_variables() override { call.reset(); }
  void clear_captures() override { call.reset(); }
  autograd::variable_list apply(autograd::variable_list&& grads) override {
    if (!call) autograd::throw_backward_twice();
    if (autograd::GradMode::is_enabled())
      throw ActorError("[actors] backward with create_graph=True through " + *what + " is not supported");
    List g;
    g.reserve(grads.size());
    for (auto& t : grads) push_grad(g, t);
    if (call->sup) call->sup->check_graph(call->gen, *what);  // a restarted host lost the graph
    // The host answers bwd1 with the input gradients before it computes its weights' (the caller's
    // backward goes on meanwhile); bwdend's answer, which this backward waits for before it returns (a
    // callback of the engine; outside a backward pass, here), says that the host has finished.
    const bool early = detail::early_input_grads();
    auto recover = [](const RemoteCall& c, const std::string& w, const ActorError& e) {
      if (c.sup && c.sup->recover(c.gen, e.what())) c.sup->check_graph(c.gen, w);
    };
    List r;
    try {
      if (!early) {
        r = detail::call_now<List>(call->host, "bwd", List{Value(call->key), Value(std::move(g))});
      } else {
        Future<void> end;
        r = detail::request_backward(call->host, call->key, std::move(g), end).get();
        detail::finish_backward_later({end}, [c = call, w = what, recover](const ActorError& e) { recover(*c, *w, e); });
      }
    } catch (const ActorError& e) {
      recover(*call, *what, e);
      throw;
    }
    autograd::variable_list out(num_outputs());
    for (size_t i = 0; i < r.size() && i < out.size(); ++i)
      if (!r[i].is_none()) out[i] = r[i].as<Tensor>();
    return out;
  }
};

nn::Value attach(nn::Value out, const std::vector<Tensor>& inputs, const ActorRef& host, int64_t key,
                 const std::shared_ptr<const std::string>& what, std::shared_ptr<detail::HostSupervisor> sup, uint64_t gen) {
  auto node = std::make_shared<RemoteCallNode>(std::make_shared<RemoteCall>(host, key, std::move(sup), gen), what);
  autograd::set_next_edges(*node, inputs);
  autograd::set_history(node, out.tensors());
  return out;
}

/// A forward's output from the host's [recorded, output], with its RemoteCallNode when it recorded one.
nn::Value forward_result(List r, const std::vector<Tensor>& inputs, const ActorRef& host, int64_t key,
                         const std::shared_ptr<const std::string>& what, std::shared_ptr<detail::HostSupervisor> sup, uint64_t gen) {
  nn::Value out = from_value<nn::Value>(r.at(1));
  if (!r.at(0).as<bool>()) return out;
  return attach(std::move(out), inputs, host, key, what, std::move(sup), gen);
}

}  // namespace

// ------------------------------------------------------------------------------------------------
// registry

void register_module_factory(const std::string& name, ModuleFactory factory) {
  std::lock_guard<std::mutex> g(g_mu);
  factories()[name] = std::move(factory);
}
bool has_module_factory(const std::string& name) {
  std::lock_guard<std::mutex> g(g_mu);
  return factories().count(name) != 0;
}
std::vector<std::string> module_factory_names() {
  std::lock_guard<std::mutex> g(g_mu);
  std::vector<std::string> out;
  for (const auto& [k, v] : factories()) out.push_back(k);
  return out;
}

// ------------------------------------------------------------------------------------------------
// host()

namespace {
RemoteModulePtr make_root_proxy(Runtime& rt, int rank, List spawn_args, std::string name) {
  (void)g_host_registered;
  if (name.empty()) name = "troupe.host" + std::to_string(g_next_host++);
  ActorRef ref = rt.spawn_on_list(rank, name, "troupe.ModuleHost", std::move(spawn_args));
  List info = ref.request<List>("submod", std::string()).get();
  auto p = std::make_shared<RemoteModule>(ref, "", info.at(0).as<std::string>(), rt.rank(), info.at(1).as<bool>());
  return p;
}
}  // namespace

RemoteModulePtr host(Runtime& rt, const jit::ScriptModulePtr& module, int rank, std::string name) {
  if (!module) throw ActorError("[actors] host(): the ScriptModule is null");
  return host(rt, nn::ModulePtr(module), rank, "", {}, std::move(name));
}

RemoteModulePtr host(Runtime& rt, int rank, const std::string& factory, List args, std::string name) {
  auto p = make_root_proxy(rt, rank, List{Value("factory"), Value(factory), Value(std::move(args))}, std::move(name));
  p->set_owner(true);
  return p;
}

RemoteModulePtr host(Runtime& rt, const nn::ModulePtr& module, int rank, const std::string& factory, List args,
                     std::string name) {
  if (!module) throw ActorError("[actors] host(): the module is null");
  if (module->is_remote()) throw ActorError("[actors] host(): the module is already hosted (a RemoteModule)");
  RemoteModulePtr p;
  List spec = detail::module_spec(rt, module, rank, factory, std::move(args));
  const bool from_archive = spec.at(0).as<std::string>() == "factory" && spec.at(1).as<std::string>() == kScriptModuleFactory;
  if (from_archive) {
    try {
      p = make_root_proxy(rt, rank, std::move(spec), std::move(name));
    } catch (const ActorError& e) {
      throw ActorError("[actors] host(): rank " + std::to_string(rank) + " could not host the ScriptModule " +
                       module->name() + ": " + e.what());
    }
    // the archive holds the state and the modes; requires_grad flags are not in it
    auto local = module->named_parameters();
    bool all = true, none = true;
    for (const auto& [k, t] : local) (t.requires_grad() ? none : all) = false;
    if (!local.empty() && none) p->requires_grad_(false);
    else if (!all && !none)
      throw ActorError("[actors] host(): a ScriptModule " + module->name() +
                       " whose parameters are partly frozen cannot be hosted from its archive yet; freeze them on the host");
  } else if (!rt.networked()) {
    try {
      p = make_root_proxy(rt, rank, spec, std::move(name));
    } catch (...) {
      detail::drop_handoff(spec);
      throw;
    }
  } else {
    p = make_root_proxy(rt, rank, std::move(spec), std::move(name));
    detail::match_placement(*p, *module);
    p->load_state_dict(module->state_dict(), true, false);
    p->train(module->is_training());
    // requires_grad flags that differ from a fresh build
    auto local = module->named_parameters();
    bool all = true, none = true;
    for (const auto& [k, t] : local) (t.requires_grad() ? none : all) = false;
    if (!local.empty() && none) p->requires_grad_(false);
    else if (!all && !none)
      throw ActorError("[actors] host(): a " + module->name() +
                       " whose parameters are partly frozen cannot be moved across processes yet; freeze them on the "
                       "host instead (apply with a registered function)");
  }
  p->set_owner(true);
  return p;
}

// ------------------------------------------------------------------------------------------------
// RemoteModule

RemoteModule::RemoteModule(ActorRef host, std::string path, std::string class_name, int64_t caller_rank, bool training)
    : host_(std::move(host)), path_(std::move(path)), class_name_(std::move(class_name)), caller_rank_(caller_rank) {
  training_ = training;
  what_ = std::make_shared<const std::string>(class_name_ + " `" + path_ + "` on rank " + std::to_string(host_.rank()));
}

ActorRef RemoteModule::host_actor() const { return sup_ ? sup_->current().first : host_; }

RemoteModule::~RemoteModule() {
  if (!owner_) return;
  try {
    if (running()) (sup_ ? sup_->current().first : host_).stop();
  } catch (const std::exception&) {
  }
}

template <class R, class... A>
R RemoteModule::ask(const std::string& method, A&&... args) const {
  if (!sup_) return detail::call_now<R>(host_, method, List{Value(path_), to_value(std::forward<A>(args))...});
  return detail::supervised_call(sup_.get(), method, path_, detail::idempotent_call(method), [&] {
    return detail::call_now<R>(sup_->current().first, method, List{Value(path_), to_value(args)...});
  });
}

RemoteModulePtr RemoteModule::sub(const std::string& rel, const std::string& class_name, bool training) const {
  auto p = std::make_shared<RemoteModule>(host_, join_path(path_, rel), class_name, caller_rank_, training);
  p->sup_ = sup_;
  return p;
}

std::string RemoteModule::repr() const {
  std::string r = ask<std::string>("repr");
  return "[rank " + std::to_string(host_rank()) + "] " + r;
}

nn::ModulePtr RemoteModule::clone(const std::optional<Device>&) const {
  throw ActorError("[actors] clone() of " + class_name_ + " hosted on rank " + std::to_string(host_rank()) +
                   ": a hosted module is not copied; host a second one (actors::host) and load its state_dict");
}

// ---- forward

// One forward request: `hooks` runs the host's call() (its hooks), else forward_args. With grad mode on
// the result gets its RemoteCallNode when it arrives. With `result` (the synchronous calls) it waits here
// and writes the output there, without a continuation (then() costs a second request state per call).
Future<nn::Value> RemoteModule::send_forward(const nn::Args& args, const nn::Kwargs& kwargs, bool hooks,
                                             nn::Value* result) {
  const bool grad = autograd::GradMode::is_enabled();
  std::vector<Tensor> inputs = grad ? flat_tensors(args, kwargs) : std::vector<Tensor>{};
  List a;
  a.reserve(args.size());
  for (const auto& v : args) a.push_back(to_value(v));
  List kw;
  for (const auto& [k, v] : kwargs) kw.emplace_back(List{Value(k), to_value(v)});
  const int64_t key = next_key();
  const int64_t flags = (grad ? 1 : 0) | (hooks ? 2 : 0);
  std::pair<ActorRef, uint64_t> cur;
  if (sup_) cur = sup_->current();
  const ActorRef& h = sup_ ? cur.first : host_;
  const uint64_t gen = cur.second;
  static const std::string kFwd = "fwd";
  List fargs{Value(path_), Value(std::move(a)), Value(std::move(kw)), Value(flags), Value(key), to_value(needs_of(inputs))};
  // a supervised host may have moved to another rank: its text is made per call; else once per proxy
  std::shared_ptr<const std::string> moved_what;
  if (sup_) moved_what = std::make_shared<const std::string>(class_name_ + " `" + path_ + "` on rank " + std::to_string(h.rank()));
  const std::shared_ptr<const std::string>& what = sup_ ? moved_what : what_;
  auto finish = [&inputs, &h, key, &what, this, gen](List r) { return forward_result(std::move(r), inputs, h, key, what, sup_, gen); };
  if (result) {
    // waited for here: an idle host in this process runs it on this thread, with no request state
    Value v;
    if (detail::call_inline(h, kFwd, fargs, v)) {
      if (!v.is<List>()) throw ActorError("[actors] request 'fwd' to actor " + h.str() + ": result: expected list, got " + v.kind());
      *result = finish(std::move(std::get<List>(v.get())));
    } else {
      *result = finish(h.request_list<List>(kFwd, std::move(fargs)).get());
    }
    return {};
  }
  return h.request_list<List>(kFwd, std::move(fargs))
      .then([inputs = std::move(inputs), h, key, what, sup = sup_, gen](List r) {
        return forward_result(std::move(r), inputs, h, key, what, sup, gen);
      });
}

// A forward waited for here: a supervised host's failure is retried when the call records nothing
// that training depends on (no_grad, or eval mode), else reported (supervisor.h).
nn::Value RemoteModule::forward_now(const nn::Args& args, const nn::Kwargs& kwargs, bool hooks) {
  auto once = [&] {
    nn::Value out;
    send_forward(args, kwargs, hooks, &out);  // waited for here: no continuation
    return out;
  };
  if (!sup_) return once();
  const bool idempotent = !autograd::GradMode::is_enabled() || !training_;
  return detail::supervised_call(sup_.get(), "fwd", path_, idempotent, once);
}

Future<nn::Value> RemoteModule::forward_async(nn::Args args, nn::Kwargs kwargs) { return send_forward(args, kwargs, true); }

nn::Value RemoteModule::call(nn::Args args, nn::Kwargs kwargs) { return forward_now(args, kwargs, true); }

nn::Value RemoteModule::forward_args(const nn::Args& args, const nn::Kwargs& kwargs) {
  return forward_now(args, kwargs, false);  // without the hooks, as Module::forward_args
}

Tensor RemoteModule::forward(const Tensor& input) {
  nn::Value out = forward_args(nn::Args{nn::Value(input)}, {});
  if (!out.is_tensor()) throw ActorError("[" + class_name_ + "] forward returned " + out.kind() + ", not a Tensor");
  return out.tensor();
}

// ---- traversal

OrderedDict<std::string, Tensor> RemoteModule::named_parameters(const std::string& prefix, bool recurse,
                                                                bool remove_duplicate) const {
  return dict_of(ask<Value>("members", prefix, recurse, remove_duplicate, false));
}

OrderedDict<std::string, Tensor> RemoteModule::named_buffers(const std::string& prefix, bool recurse,
                                                             bool remove_duplicate) const {
  return dict_of(ask<Value>("members", prefix, recurse, remove_duplicate, true));
}

OrderedDict<std::string, nn::ModulePtr> RemoteModule::named_children() const {
  OrderedDict<std::string, nn::ModulePtr> out;
  for (const auto& e : ask<List>("children")) {
    const List& t = e.as<List>();
    out.insert_or_assign(t.at(0).as<std::string>(), sub(t.at(0).as<std::string>(), t.at(1).as<std::string>(), t.at(2).as<bool>()));
  }
  return out;
}

OrderedDict<std::string, nn::ModulePtr> RemoteModule::named_modules(const std::string& prefix, bool remove_duplicate) {
  OrderedDict<std::string, nn::ModulePtr> out;
  out.insert_or_assign(prefix, shared_from_this());
  for (const auto& e : ask<List>("modules", remove_duplicate)) {
    const List& t = e.as<List>();
    const std::string& rel = t.at(0).as<std::string>();
    out.insert_or_assign(join_path(prefix, rel), sub(rel, t.at(1).as<std::string>(), t.at(2).as<bool>()));
  }
  return out;
}

nn::ModulePtr RemoteModule::get_submodule(const std::string& target) {
  if (target.empty()) return shared_from_this();
  const std::string full = join_path(path_, target);
  // an unknown path fails with the host's AttributeError text, after the request's context
  List info = detail::supervised_call(sup_.get(), "submod", path_, true,
                                      [&] { return host_actor().request<List>("submod", full).get(); });
  auto p = std::make_shared<RemoteModule>(host_, full, info.at(0).as<std::string>(), caller_rank_, info.at(1).as<bool>());
  p->sup_ = sup_;
  return p;
}

Tensor RemoteModule::get_parameter(const std::string& target) { return ask<Tensor>("getp", target, false); }
Tensor RemoteModule::get_buffer(const std::string& target) { return ask<Tensor>("getp", target, true); }

// ---- tree-wide operations

nn::Module& RemoteModule::apply(const nn::ApplyFn&) {
  throw std::invalid_argument("[apply] " + class_name_ + " `" + path_ + "` is hosted by an actor on rank " +
                              std::to_string(host_rank()) +
                              ", where a callable cannot travel: register the function (nn::registry::add_apply_fn(name, "
                              "fn), on every rank) and call apply(name)");
}

nn::Module& RemoteModule::apply(const std::string& registered_fn) {
  nn::registry_detail::apply_fn(registered_fn);  // an unknown name fails here, with the registry's text
  ask<void>("apply", registered_fn);
  return *this;
}

nn::Module& RemoteModule::train(bool mode) {
  ask<void>("train", mode);
  training_ = mode;
  if (sup_) sup_->note_train(path_, mode);  // a restart keeps it
  return *this;
}

nn::Module& RemoteModule::requires_grad_(bool requires_grad) {
  ask<void>("rgrad", requires_grad);
  return *this;
}

void RemoteModule::zero_grad(bool set_to_none) { ask<void>("zgrad", set_to_none); }

nn::Module& RemoteModule::to(std::optional<Device> device, std::optional<ScalarType> dtype, bool) {
  if (dtype && !is_floating_point(*dtype))
    throw std::invalid_argument(std::string("nn.Module.to only accepts floating point or complex dtypes, but got desired dtype=") +
                                "torch." + dtype_name(*dtype));
  ask<void>("to", device ? device->str() : std::string(), int64_t(dtype ? static_cast<int>(*dtype) : -1));
  return *this;
}

nn::Module& RemoteModule::type(ScalarType dtype) {
  ask<void>("type", int64_t(static_cast<int>(dtype)));
  return *this;
}

nn::Module& RemoteModule::to_empty(Device device, bool recurse) {
  ask<void>("toempty", device.str(), recurse);
  return *this;
}

nn::Module& RemoteModule::apply_to_tensors(const std::function<Tensor(const Tensor&)>&, bool) {
  throw std::invalid_argument("[apply_to_tensors] " + class_name_ + " `" + path_ + "` is hosted by an actor on rank " +
                              std::to_string(host_rank()) + ", where a callable cannot travel (use to(), type() or apply(name))");
}

// ---- state

nn::StateDict RemoteModule::state_dict(const std::string& prefix, bool keep_vars) {
  return dict_of(ask<Value>("sd", prefix, keep_vars));
}

void RemoteModule::save_to_state_dict(nn::StateDict& out, const std::string& prefix, bool keep_vars) const {
  for (auto& [k, t] : dict_of(ask<Value>("sd", prefix, keep_vars))) out.insert_or_assign(k, t);
}

nn::StateDictCheck RemoteModule::check_state_dict(const nn::StateDict& sd, const std::string& prefix) {
  List r = ask<List>("sdcheck", Value(pairs_of(sd)), prefix);
  nn::StateDictCheck c;
  c.keys.missing_keys = from_value<std::vector<std::string>>(r.at(0));
  c.keys.unexpected_keys = from_value<std::vector<std::string>>(r.at(1));
  c.errors = from_value<std::vector<std::string>>(r.at(2));
  return c;
}

nn::IncompatibleKeys detail::load_on_hosts(const std::function<List()>& load, const std::string& where) {
  List r;
  try {
    r = load();
  } catch (const ActorError& e) {
    // keep the host's "Error(s) in loading state_dict for <Class>:" text readable at the front
    std::string text = e.what();
    auto at = text.find("Error(s) in loading state_dict");
    if (at == std::string::npos) throw;
    throw std::runtime_error(text.substr(at) + "\n\t(on " + where + ")");
  }
  nn::IncompatibleKeys k;
  k.missing_keys = from_value<std::vector<std::string>>(r.at(0));
  k.unexpected_keys = from_value<std::vector<std::string>>(r.at(1));
  return k;
}

nn::IncompatibleKeys RemoteModule::load_state_dict(const nn::StateDict& sd, bool strict, bool assign) {
  return detail::load_on_hosts([&] { return ask<List>("load", Value(pairs_of(sd)), strict, assign); },
                               "rank " + std::to_string(host_rank()));
}

// ---- hooks

nn::RemovableHandle RemoteModule::add_hook(const char* kind, const std::string& registered_name, const char* api,
                                           bool prepend, bool always_call) {
  if (registered_name.empty())
    throw std::invalid_argument(std::string("[") + api + "] " + class_name_ + " `" + path_ + "` is hosted by an actor on rank " +
                                std::to_string(host_rank()) +
                                ", which runs its hooks: a callable cannot travel there; register the hook by name "
                                "(nn::registry, on every rank) and pass the name");
  int64_t id = ask<int64_t>("hook", std::string(kind), registered_name, prepend, always_call);
  ActorRef h = host_actor();
  return nn::RemovableHandle([h, id] {
    try {
      if (running()) h.send("unhook", id);
    } catch (const std::exception&) {
    }
  });
}

nn::RemovableHandle RemoteModule::register_state_dict_pre_hook(nn::StateDictPreHook, const std::string& name) {
  return add_hook("state_dict_pre", name, "register_state_dict_pre_hook", false, false);
}
nn::RemovableHandle RemoteModule::register_load_state_dict_post_hook(nn::LoadStateDictPostHook, const std::string& name) {
  return add_hook("load_post", name, "register_load_state_dict_post_hook", false, false);
}
nn::RemovableHandle RemoteModule::add_forward_pre_hook(nn::ForwardPreHookWithKwargs, bool prepend, bool,
                                                       const std::string& name) {
  return add_hook("forward_pre", name, "register_forward_pre_hook", prepend, false);
}
nn::RemovableHandle RemoteModule::add_forward_hook(nn::ForwardHookWithKwargs, nn::HookOptions options, bool,
                                                   const std::string& name) {
  return add_hook("forward", name, "register_forward_hook", options.prepend, options.always_call);
}
nn::RemovableHandle RemoteModule::add_backward_pre_hook(nn::BackwardPreHook, bool prepend, const std::string& name) {
  return add_hook("backward_pre", name, "register_full_backward_pre_hook", prepend, false);
}
nn::RemovableHandle RemoteModule::add_backward_hook(nn::BackwardHook, bool prepend, const std::string& name) {
  return add_hook("backward", name, "register_full_backward_hook", prepend, false);
}
nn::RemovableHandle RemoteModule::add_legacy_backward_hook(nn::BackwardHook, const std::string& name) {
  return add_hook("legacy_backward", name, "register_backward_hook", false, false);
}

// ---- keyed calls

int64_t RemoteModule::next_key() const { return (caller_rank_ << 44) | g_next_call++; }

Future<List> RemoteModule::forward_keyed(const nn::Args& args, int64_t key, const std::vector<bool>& needs) {
  List a;
  for (const auto& v : args) a.push_back(to_value(v));
  return host_actor().request<List>("fwd", path_, std::move(a), List{}, int64_t(3), key, needs);
}

Future<List> RemoteModule::backward_keyed(int64_t key, const std::vector<Tensor>& grads) {
  List g;
  for (const auto& t : grads) push_grad(g, t);
  return host_actor().request<List>("bwd", key, std::move(g));
}

Future<List> RemoteModule::backward_keyed(int64_t key, const std::vector<Tensor>& grads, Future<void>& finished) {
  List g;
  for (const auto& t : grads) push_grad(g, t);
  return detail::request_backward(host_actor(), key, std::move(g), finished);
}

void RemoteModule::release_key(int64_t key) {
  try {
    if (running()) host_actor().send("rel", key);
  } catch (const std::exception&) {
  }
}

// ---- optimizers

Future<int64_t> RemoteModule::make_optimizer(const optim::OptimizerOptions& options) {
  nn::StateDict sd;
  options.write(sd, "");
  return host_actor().request<int64_t>("opt_new", path_, std::string(options_kind(options)), Value(pairs_of(sd)));
}

std::unique_ptr<optim::Optimizer> make_optimizer(std::vector<Tensor> params, const optim::OptimizerOptions& options) {
  const std::string kind = options_kind(options);
  nn::StateDict sd;
  options.write(sd, "");
  auto o = detail::options_of(kind, sd);
  if (kind == "SGD") return std::make_unique<optim::SGD>(std::move(params), static_cast<optim::SGDOptions&>(*o));
  if (kind == "Adam") return std::make_unique<optim::Adam>(std::move(params), static_cast<optim::AdamOptions&>(*o));
  if (kind == "AdamW") return std::make_unique<optim::AdamW>(std::move(params), static_cast<optim::AdamWOptions&>(*o));
  return std::make_unique<optim::RMSprop>(std::move(params), static_cast<optim::RMSpropOptions&>(*o));
}

DistributedOptimizer::DistributedOptimizer(const nn::ModulePtr& model, const optim::OptimizerOptions& options)
    : model_(model) {
  if (!model) throw ActorError("[actors] DistributedOptimizer: the model is null");
  detail::TreeSplit split = detail::split_tree(*model);
  // a group placement (replicated / sharded) has one proxy per host: an optimizer on each
  std::vector<std::pair<std::string, RemoteModule*>> hosts;
  for (auto& [prefix, r] : split.hosts)
    for (RemoteModule* h : r->host_proxies()) hosts.emplace_back(prefix, h);
  std::vector<Future<int64_t>> pending;
  for (auto& [prefix, r] : hosts) pending.push_back(r->make_optimizer(options));
  bool supervised = false;
  for (size_t i = 0; i < pending.size(); ++i) {
    RemoteModule* r = hosts[i].second;
    Remote rm{r->host_actor(), pending[i].get(), r->supervisor(), 0, hosts[i].first, r->path(), Value()};
    if (rm.sup) {
      supervised = true;
      rm.gen = rm.sup->generation();
      const int64_t k = rm.sup->policy().checkpoint_every;
      if (k > 0) checkpoint_every_ = checkpoint_every_ == 0 ? k : std::min(checkpoint_every_, k);
    }
    remote_.push_back(std::move(rm));
  }
  std::vector<Tensor> local;
  for (auto& [name, p] : split.local_params) {
    local.push_back(p);
    local_names_.push_back(name);
  }
  if (!local.empty()) local_ = make_optimizer(std::move(local), options);
  if (supervised) checkpoint();  // a restart before the first checkpoint_every resumes from here
}

DistributedOptimizer::~DistributedOptimizer() {
  for (auto& r : remote_) {
    try {
      if (running()) r.target().send("opt_drop", r.id);
    } catch (const std::exception&) {
    }
  }
}

ActorRef DistributedOptimizer::Remote::target() const { return sup ? sup->current().first : host; }

void DistributedOptimizer::step() {
  check_restarts();  // a host restarted since the last step: nothing steps (supervisor.cpp)
  std::vector<std::pair<Future<void>, uint64_t>> fs;
  fs.reserve(remote_.size());
  for (auto& r : remote_) {
    auto [h, gen] = r.sup ? r.sup->current() : std::pair<ActorRef, uint64_t>(r.host, 0);
    fs.emplace_back(h.request<void>("opt_step", r.id), gen);
  }
  if (local_) local_->step();
  const Remote* restarted = nullptr;
  for (size_t i = 0; i < fs.size(); ++i) {
    try {
      fs[i].first.get();
    } catch (const ActorError& e) {
      if (!remote_[i].sup || !remote_[i].sup->recover(fs[i].second, e.what())) throw;
      if (!restarted) restarted = &remote_[i];
    }
  }
  if (restarted) restarted->sup->throw_restarted("opt_step", restarted->path);
  ++steps_;
  if (checkpoint_every_ > 0 && steps_ % checkpoint_every_ == 0) checkpoint();
}

void DistributedOptimizer::zero_grad(bool set_to_none) {
  std::vector<std::pair<Future<void>, uint64_t>> fs;
  for (auto& r : remote_) {
    auto [h, gen] = r.sup ? r.sup->current() : std::pair<ActorRef, uint64_t>(r.host, 0);
    fs.emplace_back(h.request<void>("opt_zero", r.id, set_to_none), gen);
  }
  if (local_) local_->zero_grad(set_to_none);
  for (size_t i = 0; i < fs.size(); ++i) {
    try {
      fs[i].first.get();
    } catch (const ActorError& e) {
      Remote& r = remote_[i];
      if (!r.sup || !r.sup->recover(fs[i].second, e.what())) throw;
      // retried on the restarted host
      detail::supervised_call(r.sup.get(), "opt_zero", r.path, true,
                              [&] { r.target().request<void>("opt_zero", r.id, set_to_none).get(); });
    }
  }
}

// place(): placement.cpp

namespace detail {
bool early_input_grads() {
  static const bool early = util::env_int("TROUPE_ACTOR_EARLY_INPUT_GRADS", 1, 0, 1) != 0;
  return early;
}

Future<List> request_backward(const ActorRef& host, int64_t key, List grads, Future<void>& end) {
  auto first = host.request_list<List>(early_input_grads() ? "bwd1" : "bwd", List{Value(key), Value(std::move(grads))});
  end = host.request_list<void>("bwdend", List{Value(key)});
  return first;
}

void finish_backward_later(std::vector<Future<void>> ends, std::function<void(const ActorError&)> on_error) {
  auto finish = [ends = std::move(ends), on_error = std::move(on_error)] {
    try {
      for (const auto& f : ends) f.wait();
    } catch (const ActorError& e) {
      if (on_error) on_error(e);
      throw;
    }
  };
  try {
    autograd::queue_callback(finish);
  } catch (const std::runtime_error&) {  // not inside a backward pass: wait here
    finish();
  }
}

std::unique_ptr<optim::OptimizerOptions> options_of(const std::string& kind, const nn::StateDict& sd) {
  std::unique_ptr<optim::OptimizerOptions> o;
  if (kind == "SGD") o = std::make_unique<optim::SGDOptions>(0.0);
  else if (kind == "Adam") o = std::make_unique<optim::AdamOptions>();
  else if (kind == "AdamW") o = std::make_unique<optim::AdamWOptions>();
  else if (kind == "RMSprop") o = std::make_unique<optim::RMSpropOptions>();
  else throw ActorError("[actors] unknown optimizer '" + kind + "' (known: SGD, Adam, AdamW, RMSprop)");
  o->read(sd, "");
  return o;
}
}  // namespace detail

}  // namespace troupe::actors
