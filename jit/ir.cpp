// The graph IR: building, naming, copying and printing graphs in TorchScript's text form.
#include <troupe/jit/ir.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <sstream>
#include <stdexcept>
#include <unordered_map>

namespace troupe::jit {

std::string scalar_type_name(ScalarType t) {
  std::string n = legacy_type_name(t);  // "FloatTensor": c10's name and "Tensor"
  return n.substr(0, n.size() - 6);
}

ScalarType scalar_type_of_code(int64_t code) {
  switch (code) {
    case 0: return kUInt8;
    case 3: return kInt32;
    case 4: return kInt64;
    case 5: return kFloat16;
    case 6: return kFloat32;
    case 7: return kFloat64;
    case 11: return kBool;
    case 15: return kBFloat16;
    default: throw std::invalid_argument("[jit] ScalarType code " + std::to_string(code) + " has no troupe dtype");
  }
}

std::string float_text(double d) {
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (std::isnan(d)) return "nan";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", d);
  std::string s = buf;
  if (s.find_first_of(".e") == std::string::npos) s += ".";
  return s;
}

namespace {
std::string join_ints(const std::vector<int64_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s;
}
}  // namespace

std::string Type::str() const {
  switch (kind) {
    case Tensor: {
      if (!meta) return "Tensor";
      std::string s = scalar_type_name(meta->dtype) + "(";
      if (!meta->sizes.empty())
        s += join_ints(meta->sizes) + ", strides=[" + join_ints(meta->strides) + "], ";
      s += std::string("requires_grad=") + (meta->requires_grad ? "1" : "0") + ", device=" + meta->device.str() + ")";
      return s;
    }
    case Int: return "int";
    case Float: return "float";
    case Bool: return "bool";
    case Str: return "str";
    case None: return "NoneType";
    case IntList: return "int[]";
    case Module: return cls;
  }
  return "Tensor";
}

std::string constant_text(const IValue& v) {
  if (v.isBool()) return v.toBool() ? "1" : "0";
  if (v.isInt()) return std::to_string(v.toInt());
  if (v.isDouble()) return float_text(v.toDouble());
  if (v.isString()) return "\"" + v.toStringRef() + "\"";
  if (v.isIntList()) return "[" + join_ints(v.toIntVector()) + "]";
  if (v.isTensor()) {
    const troupe::Tensor t = v.toTensor();
    if (t.numel() == 1 && t.dim() == 0) {
      const troupe::Tensor d = t.to(kFloat64);
      const double x = d.item<double>();
      if (!t.is_floating_point()) return "{" + std::to_string(static_cast<int64_t>(x)) + "}";
      return "{" + float_text(x) + "}";
    }
    return "<Tensor>";
  }
  return "";
}

Value* Graph::new_value(Type type) {
  value_store_.push_back(std::make_unique<Value>());
  Value* v = value_store_.back().get();
  v->id = next_id_++;
  v->type = std::move(type);
  return v;
}

Value* Graph::add_input(Type type, std::string name) {
  Value* v = new_value(std::move(type));
  inputs_.push_back(v);
  if (!name.empty()) set_name(v, name);
  return v;
}

Node* Graph::append(std::string kind, std::vector<Value*> inputs, size_t n_outputs) {
  return insert(nullptr, std::move(kind), std::move(inputs), n_outputs);
}

Node* Graph::insert(Node* before, std::string kind, std::vector<Value*> inputs, size_t n_outputs) {
  node_store_.push_back(std::make_unique<Node>());
  Node* n = node_store_.back().get();
  n->kind = std::move(kind);
  n->inputs = std::move(inputs);
  for (size_t i = 0; i < n_outputs; ++i) {
    Value* v = new_value(Type{});
    v->node = n;
    n->outputs.push_back(v);
  }
  if (!before) {
    order_.push_back(n);
  } else {
    auto it = std::find(order_.begin(), order_.end(), before);
    order_.insert(it, n);
  }
  return n;
}

void Graph::set_name(Value* v, const std::string& name) {
  if (v->name == name) return;
  if (!v->name.empty()) names_.erase(v->name);
  auto it = names_.find(name);
  if (it != names_.end()) {
    Value* old = it->second;
    for (int k = 1;; ++k) {
      std::string cand = name + "." + std::to_string(k);
      if (!names_.count(cand)) {
        old->name = cand;
        names_[cand] = old;
        break;
      }
    }
  }
  v->name = name;
  names_[name] = v;
}

void Graph::remove_dead_pure_nodes() {
  bool changed = true;
  while (changed) {
    changed = false;
    std::set<const Value*> used(outputs_.begin(), outputs_.end());
    for (const Node* n : order_)
      for (const Value* in : n->inputs) used.insert(in);
    std::vector<Node*> kept;
    for (Node* n : order_) {
      const bool pure = n->kind == "prim::Constant" || n->kind == "prim::GetAttr" || n->kind == "prim::ListConstruct";
      bool any_used = false;
      for (const Value* o : n->outputs) any_used = any_used || used.count(o);
      if (pure && !any_used) {
        for (const Value* o : n->outputs)
          if (!o->name.empty()) names_.erase(o->name);
        changed = true;
        continue;
      }
      kept.push_back(n);
    }
    order_ = std::move(kept);
  }
}

void Graph::erase(Node* n) {
  auto it = std::find(order_.begin(), order_.end(), n);
  if (it == order_.end()) return;
  for (const Value* o : n->outputs)
    if (!o->name.empty() && names_.count(o->name) && names_[o->name] == o) names_.erase(o->name);
  order_.erase(it);
}

void Graph::replace_uses(const Value* from, Value* to) {
  for (Node* n : order_)
    for (Value*& in : n->inputs)
      if (in == from) in = to;
  for (Value*& o : outputs_)
    if (o == from) o = to;
}

std::string Graph::str() const {
  std::ostringstream os;
  os << "graph(";
  for (size_t i = 0; i < inputs_.size(); ++i)
    os << (i ? ",\n      " : "") << inputs_[i]->ref() << " : " << inputs_[i]->type.str();
  os << "):\n";
  for (const Node* n : order_) {
    os << "  ";
    for (size_t i = 0; i < n->outputs.size(); ++i)
      os << (i ? ", " : "") << n->outputs[i]->ref() << " : " << n->outputs[i]->type.str();
    os << " = " << n->kind;
    if (n->kind == "prim::GetAttr" || n->kind == "prim::CallMethod") {
      os << "[name=\"" << n->attr << "\"]";
    } else if (n->kind == "prim::FusedChain" || n->kind == "prim::FusedLinearStack") {
      os << "[ops=\"" << n->attr << "\"]";
    } else if (n->kind == "prim::Constant" && !n->constant.isNone()) {
      os << "[value=" << constant_text(n->constant) << "]";
    }
    os << "(";
    for (size_t i = 0; i < n->inputs.size(); ++i) os << (i ? ", " : "") << n->inputs[i]->ref();
    os << ")\n";
  }
  os << "  return (";
  for (size_t i = 0; i < outputs_.size(); ++i) os << (i ? ", " : "") << outputs_[i]->ref();
  os << ")\n";
  return os.str();
}

std::shared_ptr<Graph> Graph::copy() const {
  auto g = std::make_shared<Graph>();
  std::unordered_map<const Value*, Value*> map;
  for (const Value* in : inputs_) {
    Value* v = g->add_input(in->type);
    v->id = in->id;
    if (!in->name.empty()) g->set_name(v, in->name);
    map[in] = v;
  }
  for (const Node* n : order_) {
    std::vector<Value*> ins;
    for (const Value* in : n->inputs) ins.push_back(map.at(in));
    Node* c = g->append(n->kind, ins, n->outputs.size());
    c->attr = n->attr;
    c->constant = n->constant;
    c->fused = n->fused;
    c->stack = n->stack;
    for (size_t i = 0; i < n->outputs.size(); ++i) {
      Value* o = c->outputs[i];
      o->type = n->outputs[i]->type;
      o->id = n->outputs[i]->id;
      if (!n->outputs[i]->name.empty()) g->set_name(o, n->outputs[i]->name);
      map[n->outputs[i]] = o;
    }
  }
  std::vector<Value*> outs;
  for (const Value* o : outputs_) outs.push_back(map.at(o));
  g->set_outputs(outs);
  g->next_id_ = next_id_;
  return g;
}

}  // namespace troupe::jit
