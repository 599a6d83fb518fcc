// ScriptModule: attribute access, the interpreter that runs a graph, inlining of submodule calls, and the
// printed forms (graph, inlined_graph, code, code_with_constants).
#include <troupe/jit/script_module.h>

#include <cctype>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <unordered_map>

#include <troupe/jit/ops.h>
#include <troupe/jit/parser.h>
#include <troupe/jit/passes.h>

namespace troupe::jit {

ScriptModule::ScriptModule(std::string original_name, std::string qualified_name)
    : original_name_(std::move(original_name)), qualified_name_(std::move(qualified_name)) {}

ScriptModule* ScriptModule::child(const std::string& name) const {
  const nn::ModulePtr* c = children_.find(name);
  return c && *c ? static_cast<ScriptModule*>(c->get()) : nullptr;
}

Tensor ScriptModule::tensor_attr(const std::string& name) const {
  if (const Tensor* p = parameters_.find(name)) return *p;
  if (const Tensor* b = buffers_.find(name)) return *b;
  throw std::runtime_error("[jit] module '" + original_name_ + "' has no attribute '" + name + "'");
}

Tensor ScriptModule::forward(const Tensor& input) {
  nn::Value out = forward_args({nn::Value(input)}, {});
  if (!out.is_tensor()) throw std::runtime_error("[jit] " + original_name_ + ".forward returned " + out.kind() + ", not a Tensor");
  return out.tensor();
}

nn::Value ScriptModule::forward_args(const nn::Args& args, const nn::Kwargs& kwargs) {
  if (!graph_)
    throw std::runtime_error("[jit] " + original_name_ + " (" + qualified_name_ +
                             ") has no forward: it was not called while the module was traced");
  if (!kwargs.empty()) throw std::invalid_argument("[jit] " + original_name_ + ".forward takes no keyword arguments");
  const size_t want = graph_->inputs().size() - 1;
  if (args.size() != want)
    throw std::invalid_argument("[jit] " + original_name_ + ".forward expected " + std::to_string(want) +
                                " argument(s), got " + std::to_string(args.size()));
  std::vector<IValue> in;
  for (const nn::Value& a : args) {
    if (!a.is_tensor()) throw std::invalid_argument("[jit] " + original_name_ + ".forward takes tensors, got " + a.kind());
    in.emplace_back(a.tensor());
  }
  std::vector<IValue> out = compiled_ && !children_have_hooks() ? run_compiled(*compiled_, frees_, *this, in)
                                                                : run_graph(*graph_, *this, in);
  if (out.size() == 1) return nn::Value(out[0].toTensor());
  nn::Value::TensorTuple ts;
  for (const IValue& v : out) ts.push_back(v.toTensor());
  return nn::Value(std::move(ts));
}

// ---------------------------------------------------------------------------------------------------
// The interpreter

namespace {

std::vector<IValue> run_graph_impl(const Graph& graph, ScriptModule& self, const std::vector<IValue>& inputs,
                                   const std::vector<std::vector<size_t>>* frees);

}  // namespace

std::vector<IValue> run_graph(const Graph& graph, ScriptModule& self, const std::vector<IValue>& inputs) {
  return run_graph_impl(graph, self, inputs, nullptr);
}

std::vector<IValue> ScriptModule::run_compiled(const Graph& graph, const std::vector<std::vector<size_t>>& frees,
                                               ScriptModule& self, const std::vector<IValue>& inputs) {
  return run_graph_impl(graph, self, inputs, &frees);
}

namespace {

// An attribute of `owner` through a GetAttr node's hint (compiled graphs): the item at the hinted index of the
// hinted dict when its key still is the name (names are unique across parameters, buffers and children, so
// that item is the attribute), else a search by name that renews the hint. The value is read from the module
// on every call, never kept: parameters replaced, re-registered, loaded or converted by to() are seen.
enum : uint32_t { kHintParam = 1, kHintBuffer = 2, kHintChild = 3 };

template <class V>
const V* hinted(const OrderedDict<std::string, V>& d, uint32_t where, const Node& n) {
  const uint32_t h = n.attr_hint.load(std::memory_order_relaxed);
  const auto& items = d.items();
  if (h >> 30 == where) {
    const size_t i = h & 0x3fffffffu;
    if (i < items.size() && items[i].key() == n.attr) return &items[i].second;
  }
  for (size_t i = 0; i < items.size() && i < 0x3fffffffu; ++i)
    if (items[i].key() == n.attr) {
      n.attr_hint.store(where << 30 | static_cast<uint32_t>(i), std::memory_order_relaxed);
      return &items[i].second;
    }
  return nullptr;
}

ScriptModule* hinted_child(const ScriptModule& owner, const Node& n) {
  const nn::ModulePtr* c = hinted(owner.children_dict(), kHintChild, n);
  return c && *c ? static_cast<ScriptModule*>(c->get()) : nullptr;
}

Tensor hinted_tensor(const ScriptModule& owner, const Node& n) {
  const uint32_t where = n.attr_hint.load(std::memory_order_relaxed) >> 30;
  // try the hinted dict first (the usual hit), then both in tensor_attr's order
  if (where == kHintBuffer)
    if (const Tensor* b = hinted(owner.buffers_dict(), kHintBuffer, n)) return *b;
  if (const Tensor* p = hinted(owner.parameters_dict(), kHintParam, n)) return *p;
  if (const Tensor* b = hinted(owner.buffers_dict(), kHintBuffer, n)) return *b;
  return owner.tensor_attr(n.attr);  // throws naming the module and the attribute
}

std::vector<IValue> run_graph_impl(const Graph& graph, ScriptModule& self, const std::vector<IValue>& inputs,
                                   const std::vector<std::vector<size_t>>* frees) {
  struct Slot {
    IValue v;
    ScriptModule* m = nullptr;
  };
  // The compiled path (which calls no submodule, so never re-enters here on this thread) reuses one
  // thread-local slot array: a graph's slots are one per value id ever made (inlining leaves gaps), and
  // allocating them per call went through malloc's slow path (over 1 KiB) every step. Every slot is
  // cleared when the call ends, normally or by an exception, so no tensor outlives it.
  thread_local std::vector<Slot> reused;
  thread_local std::vector<IValue> reused_args;  // a node's arguments, likewise
  thread_local bool reused_busy = false;
  std::vector<Slot> local;
  std::vector<IValue> local_args;
  const bool reuse = frees != nullptr && !reused_busy;
  std::vector<Slot>& slots = reuse ? reused : local;
  std::vector<IValue>& args = reuse ? reused_args : local_args;
  slots.resize(graph.value_slots());
  struct Release {
    std::vector<Slot>* s;
    std::vector<IValue>* a;
    ~Release() {
      if (!s) return;
      for (Slot& x : *s) x = Slot();
      a->clear();
      reused_busy = false;
    }
  } release{reuse ? &slots : nullptr, &args};
  if (reuse) reused_busy = true;
  slots[graph.inputs()[0]->id].m = &self;
  for (size_t i = 0; i < inputs.size(); ++i) slots[graph.inputs()[i + 1]->id].v = inputs[i];
  const std::vector<Node*>& nodes = graph.nodes();
  for (size_t ni = 0; ni < nodes.size(); ++ni) {
    const Node* n = nodes[ni];
    Slot& out = slots[n->outputs.empty() ? 0 : n->outputs[0]->id];
    const std::string& k = n->kind;
    if (k == "prim::Constant") {
      out.v = n->constant;
    } else if (k == "prim::GetAttr") {
      ScriptModule* owner = slots[n->inputs[0]->id].m;
      if (n->outputs[0]->type.kind == Type::Module) {
        out.m = frees ? hinted_child(*owner, *n) : owner->child(n->attr);
        if (!out.m) throw std::runtime_error("[jit] module '" + owner->name() + "' has no submodule '" + n->attr + "'");
      } else {
        out.v = frees ? hinted_tensor(*owner, *n) : owner->tensor_attr(n->attr);
      }
    } else if (k == "prim::ListConstruct") {
      std::vector<int64_t> l;
      for (const Value* in : n->inputs) l.push_back(slots[in->id].v.toInt());
      out.v = std::move(l);
    } else if (k == "prim::CallMethod") {
      ScriptModule* m = slots[n->inputs[0]->id].m;
      nn::Args cargs;
      for (size_t i = 1; i < n->inputs.size(); ++i) cargs.emplace_back(slots[n->inputs[i]->id].v.toTensor());
      nn::Value r = m->call(std::move(cargs));  // its hooks run, as a module call's do
      out.v = r.tensor();
    } else if (n->stack) {
      args.clear();
      for (const Value* in : n->inputs) args.push_back(slots[in->id].v);
      out.v = run_linear_stack(*n->stack, args);
    } else if (n->fused) {
      args.clear();
      for (const Value* in : n->inputs) args.push_back(slots[in->id].v);
      out.v = run_fused_chain(*n->fused, args);
    } else {
      if (!n->op) {
        n->op = find_op(k);
        if (!n->op) throw std::runtime_error("[jit] the graph holds " + k + ", an op troupe does not have");
      }
      args.clear();
      for (const Value* in : n->inputs) args.push_back(slots[in->id].v);
      out.v = n->op(args);
    }
    if (frees) {  // compiled: drop intermediates after their last use, so their buffers go back for reuse
      args.clear();
      for (size_t id : (*frees)[ni]) slots[id].v = IValue();
    }
  }
  std::vector<IValue> result;
  for (const Value* o : graph.outputs()) result.push_back(slots[o->id].v);
  return result;
}

}  // namespace

// ---------------------------------------------------------------------------------------------------
// compile()

void ScriptModule::compile() {
  std::shared_ptr<Graph> g = inline_graph();
  eliminate_dead_code(*g);
  fold_constants(*g);
  eliminate_dead_code(*g);
  fuse_elementwise(*g);
  fuse_linear_stacks(*g);
  eliminate_dead_code(*g);
  frees_ = last_uses(*g);
  compiled_ = std::move(g);
}

std::string ScriptModule::compiled_graph() const {
  if (!compiled_) throw std::runtime_error("[jit] " + original_name_ + " was not compiled: call compile() first");
  return compiled_->str();
}

bool ScriptModule::children_have_hooks() const {
  for (const auto& item : children_) {
    const nn::Module* c = item.value().get();
    if (!c) continue;
    if (c->num_forward_pre_hooks() || c->num_forward_hooks() || c->num_backward_hooks()) return true;
    const auto* sc = dynamic_cast<const ScriptModule*>(c);
    if (sc ? sc->children_have_hooks() : !c->named_children().empty()) return true;  // a foreign subtree: keep its calls
  }
  return false;
}

// ---------------------------------------------------------------------------------------------------
// Inlining: every prim::CallMethod replaced by the callee's graph, recursively.

namespace {

void inline_into(Graph& dst, const Graph& src, const ScriptModule& self, Value* self_value,
                 const std::vector<Value*>& args, std::vector<Value*>& outs) {
  std::unordered_map<const Value*, Value*> map;
  std::unordered_map<const Value*, const ScriptModule*> modules;
  map[src.inputs()[0]] = self_value;
  modules[src.inputs()[0]] = &self;
  for (size_t i = 1; i < src.inputs().size(); ++i) map[src.inputs()[i]] = args[i - 1];
  for (const Node* n : src.nodes()) {
    if (n->kind == "prim::CallMethod") {
      const ScriptModule* callee = modules.at(n->inputs[0]);
      std::vector<Value*> cargs;
      for (size_t i = 1; i < n->inputs.size(); ++i) cargs.push_back(map.at(n->inputs[i]));
      std::vector<Value*> couts;
      if (!callee->forward_graph()) throw std::runtime_error("[jit] " + callee->name() + " has no forward graph");
      inline_into(dst, *callee->forward_graph(), *callee, map.at(n->inputs[0]), cargs, couts);
      for (size_t i = 0; i < n->outputs.size(); ++i) map[n->outputs[i]] = couts.at(i);
      continue;
    }
    std::vector<Value*> ins;
    for (const Value* in : n->inputs) ins.push_back(map.at(in));
    Node* c = dst.append(n->kind, ins, n->outputs.size());
    c->attr = n->attr;
    c->constant = n->constant;
    for (size_t i = 0; i < n->outputs.size(); ++i) {
      c->outputs[i]->type = n->outputs[i]->type;
      if (!n->outputs[i]->name.empty()) dst.set_name(c->outputs[i], n->outputs[i]->name);
      map[n->outputs[i]] = c->outputs[i];
    }
    if (n->kind == "prim::GetAttr" && n->outputs[0]->type.kind == Type::Module) {
      const ScriptModule* owner = modules.at(n->inputs[0]);
      modules[n->outputs[0]] = owner->child(n->attr);
    }
  }
  for (const Value* o : src.outputs()) outs.push_back(map.at(o));
}

}  // namespace

std::shared_ptr<Graph> ScriptModule::inline_graph() const {
  if (!graph_) throw std::runtime_error("[jit] " + original_name_ + " has no forward graph");
  auto g = std::make_shared<Graph>();
  std::vector<Value*> args;
  Value* self = g->add_input(graph_->inputs()[0]->type, graph_->inputs()[0]->name);
  for (size_t i = 1; i < graph_->inputs().size(); ++i)
    args.push_back(g->add_input(graph_->inputs()[i]->type, graph_->inputs()[i]->name));
  std::vector<Value*> outs;
  inline_into(*g, *graph_, *this, self, args, outs);
  g->set_outputs(outs);
  return g;
}

std::string ScriptModule::graph() const {
  if (!graph_) throw std::runtime_error("[jit] " + original_name_ + " has no forward graph");
  return graph_->str();
}

std::string ScriptModule::inlined_graph() const { return inline_graph()->str(); }

// ---------------------------------------------------------------------------------------------------
// code(): TorchScript's Python. A value used once, with no debug name, is written into its use; others
// become `name = expr` statements (names without their `.N`, made unique as name, name0, name1, ...).

namespace {

std::string py_literal(const IValue& v) {
  if (v.isNone()) return "None";
  if (v.isBool()) return v.toBool() ? "True" : "False";
  if (v.isInt()) return std::to_string(v.toInt());
  if (v.isDouble()) return float_text(v.toDouble());
  if (v.isString()) return "\"" + v.toStringRef() + "\"";
  return "?";
}

class CodePrinter {
 public:
  CodePrinter(const Graph& g, std::map<std::string, Tensor>& constants, std::string self_type = "")
      : g_(g), constants_(constants), self_type_(std::move(self_type)) {}

  std::string print() {
    std::map<const Value*, int> uses;
    for (const Node* n : g_.nodes())
      for (const Value* in : n->inputs) ++uses[in];
    for (const Value* o : g_.outputs()) ++uses[o];

    std::ostringstream head;
    head << "def forward(self" << (self_type_.empty() ? "" : ": " + self_type_);
    for (size_t i = 1; i < g_.inputs().size(); ++i) {
      const Value* in = g_.inputs()[i];
      std::string base = in->name.empty() ? "argument_" + std::to_string(i) : in->name;
      expr_[in] = unique(strip(base));
      head << ",\n    " << expr_[in] << ": Tensor";
    }
    expr_[g_.inputs()[0]] = "self";
    head << ") -> Tensor:\n";

    for (const Node* n : g_.nodes()) {
      const std::string& k = n->kind;
      if (k == "prim::Constant") {
        const IValue& c = n->constant;
        if (c.isTensor()) {
          std::string key = "c" + std::to_string(constants_.size());
          constants_[key] = c.toTensor();
          expr_[n->outputs[0]] = "CONSTANTS." + key;
        } else {
          expr_[n->outputs[0]] = py_literal(c);
        }
        continue;
      }
      if (k == "prim::ListConstruct") {
        std::string s = "[";
        for (size_t i = 0; i < n->inputs.size(); ++i) s += (i ? ", " : "") + take(n->inputs[i]);
        expr_[n->outputs[0]] = s + "]";
        continue;
      }
      std::string e;
      if (k == "prim::GetAttr") {
        // a name Python cannot spell after a dot (Sequential's "0") is read as PyTorch writes it
        const bool ident = !n->attr.empty() && !std::isdigit(static_cast<unsigned char>(n->attr[0]));
        e = ident ? take(n->inputs[0]) + "." + n->attr : "getattr(" + take(n->inputs[0]) + ", \"" + n->attr + "\")";
        const std::string name = unique(ident ? n->attr : "_" + n->attr);
        body_ << "  " << name << " = " << e << "\n";
        expr_[n->outputs[0]] = name;
        continue;
      }
      if (k == "prim::CallMethod") {
        std::vector<std::string> a;
        for (size_t i = n->inputs.size(); i-- > 1;) a.insert(a.begin(), take(n->inputs[i]));
        e = "(" + take(n->inputs[0]) + ")." + n->attr + "(";
        for (const auto& s : a) e += s + ", ";
        e += ")";
      } else {
        std::vector<std::string> a;
        for (size_t i = n->inputs.size(); i-- > 0;) a.insert(a.begin(), take(n->inputs[i]));
        const auto& defaults = op_defaults(k);
        while (!a.empty() && a.size() <= defaults.size() && !defaults[a.size() - 1].empty() &&
               defaults[a.size() - 1] == a.back())
          a.pop_back();
        e = "torch." + k.substr(k.find("::") + 2) + "(";
        for (size_t i = 0; i < a.size(); ++i) e += (i ? ", " : "") + a[i];
        e += ")";
      }
      const Value* out = n->outputs[0];
      const bool effect = k.back() == '_' || k == "aten::dropout" || k == "aten::batch_norm";
      if (uses[out] == 1 && out->name.empty() && !(effect && pending_.size() > 0)) {
        flush_except(nullptr);
        expr_[out] = e;
        pending_.push_back(out);
      } else {
        flush_except(nullptr);
        const std::string name = out->name.empty() ? "_" + std::to_string(tmp_++) : unique(strip(out->name));
        body_ << "  " << name << " = " << e << "\n";
        expr_[out] = name;
      }
    }
    std::string ret;
    if (g_.outputs().size() == 1) {
      ret = take(g_.outputs()[0]);
    } else {
      ret = "(";
      for (size_t i = 0; i < g_.outputs().size(); ++i) ret += (i ? ", " : "") + take(g_.outputs()[i]);
      ret += ")";
    }
    flush_except(nullptr);
    return head.str() + body_.str() + "  return " + ret + "\n";
  }

 private:
  static std::string strip(const std::string& n) {
    size_t dot = n.find('.');
    return dot == std::string::npos ? n : n.substr(0, dot);
  }
  std::string unique(const std::string& base) {
    if (!used_.count(base)) {
      used_.insert(base);
      return base;
    }
    for (int k = 0;; ++k) {
      std::string c = base + std::to_string(k);
      if (!used_.count(c)) {
        used_.insert(c);
        return c;
      }
    }
  }
  // The text of a value at its use; a pending (inlined) expression is consumed.
  std::string take(const Value* v) {
    for (size_t i = 0; i < pending_.size(); ++i)
      if (pending_[i] == v) {
        pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));
        return expr_.at(v);
      }
    auto it = expr_.find(v);
    if (it == expr_.end()) throw std::logic_error("[jit] code(): a value is used before it is defined");
    return it->second;
  }
  // Pending expressions not yet used become statements, so evaluation order is kept.
  void flush_except(const Value*) {
    for (const Value* p : pending_) {
      const std::string name = "_" + std::to_string(tmp_++);
      body_ << "  " << name << " = " << expr_[p] << "\n";
      expr_[p] = name;
    }
    pending_.clear();
  }

  const Graph& g_;
  std::map<std::string, Tensor>& constants_;
  std::string self_type_;
  std::map<const Value*, std::string> expr_;
  std::vector<const Value*> pending_;
  std::set<std::string> used_{"self"};
  std::ostringstream body_;
  int tmp_ = 0;
};

}  // namespace

std::pair<std::string, std::map<std::string, Tensor>> ScriptModule::code_with_constants() const {
  if (!graph_) throw std::runtime_error("[jit] " + original_name_ + " has no forward graph");
  std::map<std::string, Tensor> constants;
  CodePrinter p(*graph_, constants);
  std::string code = p.print();
  return {code, constants};
}

std::string ScriptModule::code() const { return code_with_constants().first; }

std::string print_forward(const Graph& g, std::map<std::string, Tensor>& constants, const std::string& self_type) {
  CodePrinter p(g, constants, self_type);
  return p.print();
}

std::string torch_class_path(const std::string& c) {
  static const std::map<std::string, std::string> files = {
      {"Linear", "linear"},        {"Identity", "linear"},         {"Bilinear", "linear"},
      {"Conv1d", "conv"},          {"Conv2d", "conv"},             {"ConvTranspose1d", "conv"},
      {"ConvTranspose2d", "conv"}, {"BatchNorm1d", "batchnorm"},   {"BatchNorm2d", "batchnorm"},
      {"MaxPool1d", "pooling"},    {"MaxPool2d", "pooling"},       {"AvgPool1d", "pooling"},
      {"AvgPool2d", "pooling"},    {"AdaptiveAvgPool2d", "pooling"}, {"AdaptiveAvgPool1d", "pooling"},
      {"Dropout", "dropout"},      {"Dropout2d", "dropout"},       {"ReLU", "activation"},
      {"LeakyReLU", "activation"}, {"GELU", "activation"},         {"Sigmoid", "activation"},
      {"Tanh", "activation"},      {"Softmax", "activation"},      {"LogSoftmax", "activation"},
      {"SiLU", "activation"},      {"ELU", "activation"},          {"Sequential", "container"},
      {"ModuleList", "container"}, {"ModuleDict", "container"},    {"Embedding", "sparse"},
      {"LayerNorm", "normalization"}, {"GroupNorm", "normalization"}, {"Flatten", "flatten"},
      {"Unflatten", "flatten"},    {"MSELoss", "loss"},            {"L1Loss", "loss"},
      {"CrossEntropyLoss", "loss"}, {"NLLLoss", "loss"},           {"BCELoss", "loss"},
      {"BCEWithLogitsLoss", "loss"}, {"SmoothL1Loss", "loss"}};
  auto it = files.find(c);
  return it == files.end() ? c : "torch.nn.modules." + it->second + "." + c;
}

}  // namespace troupe::jit
