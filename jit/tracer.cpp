// jit::trace: builds the ScriptModule tree beside the module tree, runs the module once with a tracer set
// (tensor/tracing.h), writes each reported op into the graph of the module whose forward is running, and
// checks the result (check_trace).
#include <troupe/jit/script_module.h>

#include <cmath>
#include <cstring>
#include <set>
#include <sstream>
#include <stdexcept>
#include <unordered_map>

#include <troupe/tensor/autograd.h>
#include <troupe/tensor/ops.h>
#include <troupe/tensor/random.h>
#include <troupe/tensor/tracing.h>

namespace troupe::jit {

namespace {

struct Attr {
  const nn::Module* owner;
  std::string name;
};

TensorMeta meta_of(const Tensor& t) {
  TensorMeta m;
  m.dtype = t.dtype();
  m.sizes = t.sizes().vec();
  m.strides = t.strides().vec();
  m.requires_grad = t.requires_grad();
  m.device = t.device();
  return m;
}

class Tracer final : public tracing::TracingState {
 public:
  struct Scope {
    const nn::Module* module;
    ScriptModule* script;
    Graph* graph;
    std::shared_ptr<Graph> owned;  // the graph being built (kept when the module had none yet)
    Value* self;
    std::unordered_map<const TensorImpl*, std::pair<Value*, uint32_t>> values;  // value, version seen
    std::unordered_map<const nn::Module*, Value*> module_values;
    // the caller's side, for the CallMethod made when the scope ends
    Value* call_module = nullptr;
    std::vector<Value*> call_args;
  };

  Tracer(const std::shared_ptr<nn::Module>& root, std::unordered_map<const nn::Module*, ScriptModule*> scripts,
         std::unordered_map<const nn::Module*, std::pair<const nn::Module*, std::string>> parents,
         std::unordered_map<const TensorImpl*, Attr> attrs)
      : root_(root.get()), scripts_(std::move(scripts)), parents_(std::move(parents)), attrs_(std::move(attrs)) {}

  void start(const std::vector<Tensor>& inputs) {
    ScriptModule* s = scripts_.at(root_);
    Scope sc{root_, s, nullptr, std::make_shared<Graph>(), nullptr, {}, {}, nullptr, {}};
    sc.graph = sc.owned.get();
    sc.self = sc.graph->add_input(module_type(s), "self.1");
    for (size_t i = 0; i < inputs.size(); ++i) {
      Type t{Type::Tensor, "", meta_of(inputs[i])};
      std::string name = inputs.size() == 1 ? "x" : "x" + std::to_string(i);
      Value* v = sc.graph->add_input(t, name);
      if (sc.values.count(inputs[i].impl()))
        throw std::invalid_argument("[jit::trace] example input " + std::to_string(i) +
                                    " is the same tensor as an earlier one; pass distinct tensors");
      sc.values[inputs[i].impl()] = {v, inputs[i]._version()};
    }
    pending_root_ = std::move(sc);
  }

  std::shared_ptr<Graph> root_graph() const { return root_graph_; }

  void record_op(const char* name, const std::vector<IValue>& args, const std::vector<Tensor>& outputs) override {
    Scope& sc = current(name);
    std::vector<Value*> ins;
    std::vector<std::pair<IValue, Value*>> consts;  // one constant per distinct value within this op
    std::vector<Node*> lists;
    for (const IValue& a : args) {
      if (a.isTensor()) {
        ins.push_back(a.toTensor().defined() ? value_of(sc, a.toTensor(), name) : constant(sc, IValue(), consts));
      } else if (a.isIntList()) {
        std::vector<Value*> items;
        for (int64_t x : a.toIntVector()) items.push_back(constant(sc, IValue(x), consts));
        Node* l = sc.graph->append("prim::ListConstruct", items);
        l->outputs[0]->type = Type{Type::IntList, "", std::nullopt};
        lists.push_back(l);
        ins.push_back(l->outputs[0]);
      } else {
        ins.push_back(constant(sc, a, consts));
      }
    }
    // constants first, then the lists, then the op (TorchScript's layout)
    Node* n = sc.graph->append(name, ins, outputs.size());
    for (size_t i = 0; i < outputs.size(); ++i) {
      Value* v = n->outputs[i];
      for (const IValue& a : args)  // an op that returned its input (dropout in eval mode) made an alias
        if (a.isTensor() && a.toTensor().impl() == outputs[i].impl() && name[std::strlen(name) - 1] != '_')
          aliases_.insert(v);
      v->type = Type{Type::Tensor, "", meta_of(outputs[i])};
      // PyTorch records aten::_convolution below autograd, where its output does not yet require grad
      if (std::strcmp(name, "aten::_convolution") == 0) v->type.meta->requires_grad = false;
      sc.values[outputs[i].impl()] = {v, outputs[i]._version()};
      keep_.push_back(outputs[i]);
    }
  }

  void enter_module(const void* module, const std::vector<Tensor>& inputs) override {
    const auto* m = static_cast<const nn::Module*>(module);
    if (stack_.empty() && pending_root_ && m == root_) {
      stack_.push_back(std::move(*pending_root_));
      pending_root_.reset();
      transparent_.push_back(false);
      return;
    }
    auto it = scripts_.find(m);
    if (stack_.empty() || it == scripts_.end()) {  // a module outside the traced tree: its ops go to the caller
      transparent_.push_back(true);
      return;
    }
    transparent_.push_back(false);
    Scope& parent = stack_.back();
    Value* mv = module_value(parent, m);
    if (!mv)
      throw std::runtime_error("[jit::trace] " + parent.script->name() + " called " + m->name() +
                               ", which is not one of its submodules; a module may call only its own subtree");
    std::vector<Value*> args;
    for (const Tensor& t : inputs) {
      Value* v = value_of(parent, t, "a submodule call");
      // a value handed to a layer's forward takes the layer's parameter name, as PyTorch's tracer does
      // (PyTorch's tracer leaves an alias of an input unnamed)
      if (v->name.empty() && v->node && v->node->kind.rfind("aten::", 0) == 0 && !aliases_.count(v))
        parent.graph->set_name(v, "input");
      // the result of an earlier submodule call: its graph's result takes the name
      auto r = call_results_.find(v);
      if (r != call_results_.end() && r->second.second->name.empty() && r->second.second->node &&
          r->second.second->node->kind.rfind("aten::", 0) == 0 && !aliases_.count(r->second.second))
        r->second.first->set_name(r->second.second, "input");
      args.push_back(v);
    }
    ScriptModule* s = it->second;
    Scope sc{m, s, nullptr, std::make_shared<Graph>(), nullptr, {}, {}, nullptr, {}};
    sc.graph = sc.owned.get();
    sc.self = sc.graph->add_input(module_type(s), "self.1");
    for (size_t i = 0; i < inputs.size(); ++i) {
      const std::string base = args[i]->name.empty() ? "argument_" + std::to_string(i + 1) : args[i]->name;
      Value* v = sc.graph->add_input(Type{Type::Tensor, "", meta_of(inputs[i])}, base.substr(0, base.find('.')));
      sc.values[inputs[i].impl()] = {v, inputs[i]._version()};
    }
    sc.call_module = mv;
    sc.call_args = args;
    stack_.push_back(std::move(sc));
  }

  void exit_module(const void*, const std::vector<Tensor>& outputs) override {
    const bool transparent = transparent_.back();
    transparent_.pop_back();
    if (transparent) return;
    Scope sc = std::move(stack_.back());
    stack_.pop_back();
    if (outputs.size() != 1)
      throw std::runtime_error("[jit::trace] " + sc.script->name() + ".forward returned " +
                               std::to_string(outputs.size()) + " tensors; traced modules return one tensor");
    std::vector<Value*> outs;
    for (const Tensor& t : outputs) outs.push_back(value_of(sc, t, "return"));
    sc.graph->set_outputs(outs);
    if (stack_.empty()) {  // the root's own call ended
      root_graph_ = sc.owned;
      return;
    }
    if (!sc.script->forward_graph()) sc.script->set_forward_graph(sc.owned);
    Scope& parent = stack_.back();
    std::vector<Value*> ins{sc.call_module};
    ins.insert(ins.end(), sc.call_args.begin(), sc.call_args.end());
    Node* call = parent.graph->append("prim::CallMethod", ins, outputs.size());
    call->attr = "forward";
    for (size_t i = 0; i < outputs.size(); ++i) {
      parent.values[outputs[i].impl()] = {call->outputs[i], outputs[i]._version()};
      if (sc.script->forward_graph() == sc.owned) call_results_[call->outputs[i]] = {sc.owned.get(), outs[i]};
      keep_.push_back(outputs[i]);
    }
  }

 private:
  Scope& current(const char* op) {
    if (stack_.empty())
      throw std::logic_error(std::string("[jit::trace] ") + op + " ran outside the traced module's forward");
    return stack_.back();
  }

  Type module_type(const ScriptModule* s) const { return Type{Type::Module, s->qualified_name(), std::nullopt}; }

  Value* constant(Scope& sc, const IValue& v, std::vector<std::pair<IValue, Value*>>& consts) {
    auto same = [](const IValue& a, const IValue& b) {
      if (a.tagKind() != b.tagKind()) return false;
      if (a.isNone()) return true;
      if (a.isInt()) return a.toInt() == b.toInt();
      if (a.isBool()) return a.toBool() == b.toBool();
      if (a.isDouble()) return a.toDouble() == b.toDouble() && std::signbit(a.toDouble()) == std::signbit(b.toDouble());
      if (a.isString()) return a.toStringRef() == b.toStringRef();
      return false;
    };
    for (auto& [c, val] : consts)
      if (same(c, v)) return val;
    Node* n = sc.graph->append("prim::Constant", {});
    n->constant = v;
    Type t;
    if (v.isNone()) t.kind = Type::None;
    else if (v.isInt()) t.kind = Type::Int;
    else if (v.isDouble()) t.kind = Type::Float;
    else if (v.isBool()) t.kind = Type::Bool;
    else if (v.isString()) t.kind = Type::Str;
    n->outputs[0]->type = t;
    consts.emplace_back(v, n->outputs[0]);
    return n->outputs[0];
  }

  // The value of a submodule `m` inside scope `sc`: GetAttr from self down the tree (null when `m` is not
  // in sc's subtree).
  Value* module_value(Scope& sc, const nn::Module* m) {
    if (m == sc.module) return sc.self;
    auto cached = sc.module_values.find(m);
    if (cached != sc.module_values.end()) return cached->second;
    auto p = parents_.find(m);
    if (p == parents_.end()) return nullptr;
    Value* owner = module_value(sc, p->second.first);
    if (!owner) return nullptr;
    Node* before = owner == sc.self ? first_node(sc) : nullptr;  // reads of self's attributes go first
    Node* n = sc.graph->insert(before, "prim::GetAttr", {owner});
    n->attr = p->second.second;
    n->outputs[0]->type = module_type(scripts_.at(m));
    sc.graph->set_name(n->outputs[0], p->second.second);
    sc.module_values[m] = n->outputs[0];
    return n->outputs[0];
  }

  static Node* first_node(Scope& sc) { return sc.graph->nodes().empty() ? nullptr : sc.graph->nodes().front(); }

  Value* value_of(Scope& sc, const Tensor& t, const char* op) {
    auto it = sc.values.find(t.impl());
    if (it != sc.values.end()) {
      if (t._version() != it->second.second)
        throw std::runtime_error(std::string("[jit::trace] a tensor reaching ") + op +
                                 " was changed in place by an op the tracer does not record; use the out-of-place op");
      return it->second.first;
    }
    auto a = attrs_.find(t.impl());
    if (a != attrs_.end()) {
      Value* owner = module_value(sc, a->second.owner);
      if (owner) {
        Node* before = owner == sc.self ? first_node(sc) : nullptr;
        Node* n = sc.graph->insert(before, "prim::GetAttr", {owner});
        n->attr = a->second.name;
        sc.graph->set_name(n->outputs[0], a->second.name);
        sc.values[t.impl()] = {n->outputs[0], t._version()};
        return n->outputs[0];
      }
    }
    if (t.requires_grad()) {
      std::string origin = t.grad_fn() ? " (made by " + t.grad_fn()->name() + ")" : "";
      throw std::runtime_error(std::string("[jit::trace] a tensor that requires grad reached ") + op + origin +
                               " from an op the tracer does not record, or from outside the module; troupe's tracer "
                               "records the ops listed by jit::known_ops()");
    }
    Node* n = sc.graph->append("prim::Constant", {});
    n->constant = IValue(t.detach().clone());
    n->outputs[0]->type = Type{Type::Tensor, "", meta_of(t)};
    sc.values[t.impl()] = {n->outputs[0], t._version()};
    keep_.push_back(t);
    return n->outputs[0];
  }

  const nn::Module* root_;
  std::unordered_map<const nn::Module*, ScriptModule*> scripts_;
  std::unordered_map<const nn::Module*, std::pair<const nn::Module*, std::string>> parents_;
  std::unordered_map<const TensorImpl*, Attr> attrs_;
  std::optional<Scope> pending_root_;
  std::vector<Scope> stack_;
  std::vector<bool> transparent_;
  std::vector<Tensor> keep_;  // every tensor seen stays alive, so no address is reused during the trace
  std::shared_ptr<Graph> root_graph_;
  std::unordered_map<const Value*, std::pair<Graph*, Value*>> call_results_;
  std::set<const Value*> aliases_;  // CallMethod result -> callee's
};

// The ScriptModule tree beside `root`'s: own copies of parameters and buffers, TorchScript class names.
ScriptModulePtr build_tree(const std::shared_ptr<nn::Module>& root,
                           std::unordered_map<const nn::Module*, ScriptModule*>& scripts,
                           std::unordered_map<const nn::Module*, std::pair<const nn::Module*, std::string>>& parents,
                           std::unordered_map<const TensorImpl*, Attr>& attrs) {
  std::set<std::string> used_names;
  int mangle = 0;
  std::unordered_map<const nn::Module*, ScriptModulePtr> made;
  auto make = [&](const nn::Module& m, bool is_root) {
    std::string cls = m.name();
    std::string path = is_root ? cls : torch_class_path(cls);
    std::string q = "__torch__." + path;
    if (used_names.count(q)) {
      const size_t dot = path.rfind('.');
      const std::string mangled = "___torch_mangle_" + std::to_string(mangle++);
      q = "__torch__." + (dot == std::string::npos ? mangled + "." + path
                                                    : path.substr(0, dot + 1) + mangled + path.substr(dot));
    }
    used_names.insert(q);
    auto s = std::make_shared<ScriptModule>(cls, q);
    for (const auto& [name, p] : m.named_parameters("", false)) {
      attrs[p.impl()] = {&m, name};
      Tensor copy = p.defined() ? p.detach().clone() : Tensor();
      if (p.defined()) copy.requires_grad_(p.requires_grad());
      s->register_parameter(name, copy, p.defined() ? p.requires_grad() : false);
    }
    for (const auto& [name, b] : m.named_buffers("", false)) {
      attrs[b.impl()] = {&m, name};
      s->register_buffer(name, b.defined() ? b.detach().clone() : Tensor(), m.is_persistent_buffer(name));
    }
    s->train(m.is_training());
    return s;
  };
  // breadth-first over the tree, children in registration order (shared children made once)
  std::vector<const nn::Module*> queue{root.get()};
  ScriptModulePtr top = make(*root, true);
  made[root.get()] = top;
  scripts[root.get()] = top.get();
  for (size_t qi = 0; qi < queue.size(); ++qi) {
    const nn::Module* m = queue[qi];
    for (const auto& [name, c] : m->named_children()) {
      if (!c) continue;
      auto found = made.find(c.get());
      ScriptModulePtr cs;
      if (found == made.end()) {
        cs = make(*c, false);
        made[c.get()] = cs;
        scripts[c.get()] = cs.get();
        parents[c.get()] = {m, name};
        queue.push_back(c.get());
      } else {
        cs = found->second;
      }
      made.at(m)->register_module(name, std::shared_ptr<nn::Module>(cs));
    }
  }
  return top;
}

// Buffers and the default generator as they are now, to put back after the check.
struct Snapshot {
  std::vector<std::pair<Tensor, Tensor>> buffers;  // (live, copy)
  std::vector<uint8_t> rng;
  void add(nn::Module& m) {
    for (const auto& [k, b] : m.named_buffers())
      if (b.defined()) buffers.emplace_back(b, b.detach().clone());
  }
  void restore() {
    NoGradGuard g;
    for (auto& [live, copy] : buffers) Tensor(live).copy_(copy);
    default_generator().set_state(rng);
  }
};

std::string max_diff_text(const Tensor& a, const Tensor& b) {
  if (!a.sizes().equals(b.sizes())) return "shapes " + a.str() + " vs " + b.str();
  const double d = (a.to(kFloat64) - b.to(kFloat64)).abs().max().item<double>();
  std::ostringstream os;
  os << "max abs difference " << d;
  return os.str();
}

void check(nn::Module& module, ScriptModule& traced, const std::vector<Tensor>& examples) {
  Snapshot snap;
  snap.add(module);
  snap.add(traced);
  snap.rng = default_generator().get_state();
  std::vector<std::vector<Tensor>> trials{examples};
  {
    // other inputs of the same shapes: floating inputs negated, scaled and shifted
    std::vector<Tensor> other;
    for (const Tensor& x : examples) {
      NoGradGuard g;
      other.push_back(x.is_floating_point() ? x * -1.5 + 0.25 : x.clone());
    }
    trials.push_back(other);
  }
  try {
    NoGradGuard g;
    for (size_t trial = 0; trial < trials.size(); ++trial) {
      nn::Args args;
      for (const Tensor& x : trials[trial]) args.emplace_back(x);
      snap.restore();
      std::vector<Tensor> want = module.call(args).tensors();
      snap.restore();
      std::vector<Tensor> got = traced.call(args).tensors();
      if (want.size() != got.size())
        throw std::runtime_error("[jit::trace] check_trace: the module returned " + std::to_string(want.size()) +
                                 " tensor(s), the traced graph " + std::to_string(got.size()));
      for (size_t i = 0; i < want.size(); ++i) {
        const bool same = want[i].sizes().equals(got[i].sizes()) && want[i].dtype() == got[i].dtype() &&
                          (want[i].numel() == 0 || troupe::allclose(got[i].to(kFloat64), want[i].to(kFloat64), 1e-5, 1e-6));
        if (!same)
          throw std::runtime_error(
              "[jit::trace] check_trace: the traced graph of " + module.name() + " disagrees with its forward on " +
              (trial == 0 ? std::string("the example inputs") : std::string("other inputs of the same shapes")) +
              " (output " + std::to_string(i) + ", " + max_diff_text(got[i], want[i]) +
              "). The forward's path depends on tensor values (data-dependent control flow) or on state the "
              "trace does not see, and a trace records only the path the example inputs took. Pass "
              "check_trace=false to keep this graph anyway.");
      }
    }
  } catch (...) {
    snap.restore();
    throw;
  }
  snap.restore();
}

}  // namespace

ScriptModulePtr trace(const std::shared_ptr<nn::Module>& module, const std::vector<Tensor>& example_inputs,
                      bool check_trace) {
  if (!module) throw std::invalid_argument("[jit::trace] got a null module");
  if (tracing::state()) throw std::runtime_error("[jit::trace] already tracing on this thread");
  for (size_t i = 0; i < example_inputs.size(); ++i)
    if (!example_inputs[i].defined())
      throw std::invalid_argument("[jit::trace] example input " + std::to_string(i) + " is an undefined tensor");
  std::unordered_map<const nn::Module*, ScriptModule*> scripts;
  std::unordered_map<const nn::Module*, std::pair<const nn::Module*, std::string>> parents;
  std::unordered_map<const TensorImpl*, Attr> attrs;
  ScriptModulePtr top = build_tree(module, scripts, parents, attrs);
  Tracer tracer(module, scripts, parents, attrs);
  tracer.start(example_inputs);
  nn::Args args;
  for (const Tensor& x : example_inputs) args.emplace_back(x);
  {
    tracing::StateGuard guard(&tracer);
    module->call(args);
  }
  if (!tracer.root_graph()) throw std::runtime_error("[jit::trace] the module's forward was not reached");
  top->set_forward_graph(tracer.root_graph());
  // the traced run changed buffers (BatchNorm's running statistics): the copies take the values after it
  {
    NoGradGuard g;
    for (const auto& [m, s] : scripts)
      for (const auto& [name, b] : m->named_buffers("", false))
        if (b.defined()) s->tensor_attr(name).copy_(b);
  }
  if (check_trace) check(*module, *top, example_inputs);
  return top;
}

ScriptModulePtr trace(const std::shared_ptr<nn::Module>& module, const Tensor& example_input, bool check_trace) {
  return trace(module, std::vector<Tensor>{example_input}, check_trace);
}

}  // namespace troupe::jit
