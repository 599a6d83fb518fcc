// Reading TorchScript code back into a graph: the subset traced modules hold (`name = self.attr`,
// `name = torch.op(args)`, `(module).forward(args, )`, literals, lists, `CONSTANTS.cN`, `return expr`).
// Anything else fails naming the first construct or op troupe lacks.
#include <troupe/jit/parser.h>

#include <cctype>
#include <map>
#include <stdexcept>

#include <troupe/jit/ops.h>

namespace troupe::jit {

namespace {

struct Tok {
  enum Kind { Name, Int, Float, Str, Punct, End } kind;
  std::string text;
};

std::vector<Tok> tokenize(const std::string& s, const std::string& where) {
  std::vector<Tok> out;
  size_t i = 0;
  while (i < s.size()) {
    const char c = s[i];
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
    } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t j = i;
      while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
      out.push_back({Tok::Name, s.substr(i, j - i)});
      i = j;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t j = i;
      bool fl = false;
      while (j < s.size() && (std::isdigit(static_cast<unsigned char>(s[j])) || s[j] == '.' || s[j] == 'e' ||
                              ((s[j] == '-' || s[j] == '+') && (s[j - 1] == 'e')))) {
        fl = fl || s[j] == '.' || s[j] == 'e';
        ++j;
      }
      out.push_back({fl ? Tok::Float : Tok::Int, s.substr(i, j - i)});
      i = j;
    } else if (c == '"' || c == '\'') {
      const size_t j = s.find(c, i + 1);
      if (j == std::string::npos) throw std::runtime_error("[jit::load] " + where + ": an unterminated string");
      out.push_back({Tok::Str, s.substr(i + 1, j - i - 1)});
      i = j + 1;
    } else {
      out.push_back({Tok::Punct, std::string(1, c)});
      ++i;
    }
  }
  out.push_back({Tok::End, ""});
  return out;
}

class Parser {
 public:
  Parser(Graph& g, const ScriptModule& self, const std::vector<Tensor>& constants, std::string where)
      : g_(g), constants_(constants), where_(std::move(where)) {
    modules_[g.inputs()[0]] = &self;
  }

  void bind(const std::string& name, Value* v) { vars_[name] = v; }

  // One statement: `name = expr` or `return expr`.
  void statement(const std::string& line) {
    toks_ = tokenize(line, where_);
    p_ = 0;
    if (is_name("return")) {
      ++p_;
      Value* v = expr();
      expect_end();
      g_.set_outputs({v});
      returned_ = true;
      return;
    }
    if (peek().kind != Tok::Name || toks_[p_ + 1].text != "=") fail("a statement troupe cannot read: " + line);
    const std::string name = next().text;
    ++p_;  // '='
    Value* v = expr();
    expect_end();
    vars_[name] = v;
    if (v->name.empty() && name[0] != '_') g_.set_name(v, name);
  }

  bool returned() const { return returned_; }

 private:
  [[noreturn]] void fail(const std::string& m) const { throw std::runtime_error("[jit::load] " + where_ + ": " + m); }
  const Tok& peek() const { return toks_[p_]; }
  const Tok& next() { return toks_[p_++]; }
  bool is_name(const char* n) const { return peek().kind == Tok::Name && peek().text == n; }
  bool is_punct(const char* c) const { return peek().kind == Tok::Punct && peek().text == c; }
  void expect(const char* c) {
    if (!is_punct(c)) fail(std::string("expected '") + c + "' but found '" + peek().text + "'");
    ++p_;
  }
  void expect_end() {
    if (peek().kind != Tok::End) fail("unexpected '" + peek().text + "' at the end of a statement");
  }

  Value* constant(const IValue& v) {
    Node* n = g_.append("prim::Constant", {});
    n->constant = v;
    Type t;
    if (v.isNone()) t.kind = Type::None;
    else if (v.isInt()) t.kind = Type::Int;
    else if (v.isDouble()) t.kind = Type::Float;
    else if (v.isBool()) t.kind = Type::Bool;
    else if (v.isString()) t.kind = Type::Str;
    n->outputs[0]->type = t;
    return n->outputs[0];
  }

  Value* get_attr(Value* owner, const std::string& attr) {
    auto m = modules_.find(owner);
    if (m == modules_.end()) fail("." + attr + " of a value that is not a module");
    Node* n = g_.append("prim::GetAttr", {owner});
    n->attr = attr;
    if (const ScriptModule* c = m->second->child(attr)) {
      n->outputs[0]->type = Type{Type::Module, c->qualified_name(), std::nullopt};
      modules_[n->outputs[0]] = c;
    } else {
      m->second->tensor_attr(attr);  // throws naming the module when absent
    }
    return n->outputs[0];
  }

  std::vector<Value*> args() {
    std::vector<Value*> out;
    expect("(");
    while (!is_punct(")")) {
      if (peek().kind == Tok::Name && toks_[p_ + 1].text == "=" )
        fail("keyword argument '" + peek().text + "=' (troupe reads positional arguments only)");
      out.push_back(expr());
      if (is_punct(",")) ++p_;
      else if (!is_punct(")")) fail("expected ',' or ')' in an argument list, found '" + peek().text + "'");
    }
    ++p_;
    return out;
  }

  Value* literal_of(const std::string& text) {
    auto toks = tokenize(text, where_);
    std::swap(toks, toks_);
    const size_t saved = p_;
    p_ = 0;
    Value* v = expr();
    std::swap(toks, toks_);
    p_ = saved;
    return v;
  }

  Value* expr() {
    const Tok t = peek();
    if (t.kind == Tok::Int) {
      ++p_;
      return constant(IValue(static_cast<int64_t>(std::stoll(t.text))));
    }
    if (t.kind == Tok::Float) {
      ++p_;
      return constant(IValue(std::stod(t.text)));
    }
    if (t.kind == Tok::Str) {
      ++p_;
      return constant(IValue(t.text));
    }
    if (is_punct("-")) {
      ++p_;
      const Tok n = next();
      if (n.kind == Tok::Int) return constant(IValue(-static_cast<int64_t>(std::stoll(n.text))));
      if (n.kind == Tok::Float) return constant(IValue(-std::stod(n.text)));
      fail("unary minus of something that is not a number");
    }
    if (is_punct("[")) {
      ++p_;
      std::vector<Value*> items;
      while (!is_punct("]")) {
        items.push_back(expr());
        if (is_punct(",")) ++p_;
      }
      ++p_;
      Node* l = g_.append("prim::ListConstruct", items);
      l->outputs[0]->type = Type{Type::IntList, "", std::nullopt};
      return l->outputs[0];
    }
    if (is_punct("(")) {
      ++p_;
      Value* inner = expr();
      expect(")");
      if (is_punct(".")) {  // (module).forward(args, )
        ++p_;
        const std::string method = next().text;
        if (method != "forward") fail("a call of method " + method + " (troupe's modules have forward only)");
        if (!modules_.count(inner)) fail(".forward of a value that is not a module");
        std::vector<Value*> ins{inner};
        for (Value* a : args()) ins.push_back(a);
        Node* n = g_.append("prim::CallMethod", ins);
        n->attr = "forward";
        return n->outputs[0];
      }
      return inner;
    }
    if (t.kind != Tok::Name) fail("unexpected '" + t.text + "'");
    ++p_;
    if (t.text == "True" || t.text == "False") return constant(IValue(t.text == "True"));
    if (t.text == "None") return constant(IValue());
    if (t.text == "getattr") {  // getattr(owner, "0"): an attribute whose name is not an identifier
      expect("(");
      Value* owner = expr();
      expect(",");
      const Tok a = next();
      if (a.kind != Tok::Str) fail("getattr with a name that is not a string literal");
      expect(")");
      return get_attr(owner, a.text);
    }
    if (t.text == "CONSTANTS") {
      expect(".");
      const std::string c = next().text;
      const size_t k = std::stoul(c.substr(1));
      if (c[0] != 'c' || k >= constants_.size()) fail("CONSTANTS." + c + " is not in constants.pkl");
      Node* n = g_.append("prim::Constant", {});
      n->constant = IValue(constants_[k]);
      return n->outputs[0];
    }
    if (t.text == "torch") {
      expect(".");
      const std::string op = next().text;
      const std::string kind = "aten::" + op;
      if (!find_op(kind)) fail("forward uses " + kind + ", an op troupe does not have");
      std::vector<Value*> a = args();
      const auto& defaults = op_defaults(kind);
      for (size_t i = a.size(); i < defaults.size(); ++i) {
        if (defaults[i].empty()) fail(kind + " is missing its argument " + std::to_string(i));
        a.push_back(literal_of(defaults[i]));
      }
      Node* n = g_.append(kind, a);
      return n->outputs[0];
    }
    auto v = vars_.find(t.text);
    if (v == vars_.end()) {
      if (is_punct(".") || is_punct("(")) fail("forward uses " + t.text + "." + toks_[p_ + 1].text + ", which troupe does not have");
      fail("the name " + t.text + " is used before it is assigned");
    }
    Value* val = v->second;
    while (is_punct(".")) {
      ++p_;
      val = get_attr(val, next().text);
    }
    return val;
  }

  Graph& g_;
  const std::vector<Tensor>& constants_;
  std::string where_;
  std::map<std::string, Value*> vars_;
  std::map<const Value*, const ScriptModule*> modules_;
  std::vector<Tok> toks_;
  size_t p_ = 0;
  bool returned_ = false;
};

}  // namespace

std::shared_ptr<Graph> parse_forward(const std::string& header, const std::vector<std::string>& body,
                                     const ScriptModule& self, const std::vector<Tensor>& constants,
                                     const std::string& where) {
  // header: "def forward(self: Q,\n    x: Tensor) -> Tensor:" (one string)
  const size_t open = header.find('('), close = header.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close < open)
    throw std::runtime_error("[jit::load] " + where + ": cannot read the signature of forward");
  const std::string params = header.substr(open + 1, close - open - 1);
  auto g = std::make_shared<Graph>();
  std::vector<std::string> names;
  size_t start = 0;
  int depth = 0;
  for (size_t i = 0; i <= params.size(); ++i) {
    if (i < params.size() && (params[i] == '[' || params[i] == '(')) ++depth;
    if (i < params.size() && (params[i] == ']' || params[i] == ')')) --depth;
    if (i == params.size() || (params[i] == ',' && depth == 0)) {
      std::string p = params.substr(start, i - start);
      const size_t colon = p.find(':');
      std::string name = p.substr(0, colon);
      name.erase(0, name.find_first_not_of(" \n\t"));
      name.erase(name.find_last_not_of(" \n\t") + 1);
      if (!name.empty()) names.push_back(name);
      if (colon != std::string::npos && names.size() > 1) {
        std::string type = p.substr(colon + 1);
        type.erase(0, type.find_first_not_of(" \n\t"));
        type.erase(type.find_last_not_of(" \n\t") + 1);
        if (type != "Tensor")
          throw std::runtime_error("[jit::load] " + where + ": forward takes " + name + ": " + type +
                                   " (troupe reads forwards of tensors only)");
      }
      start = i + 1;
    }
  }
  if (names.empty() || names[0] != "self") throw std::runtime_error("[jit::load] " + where + ": forward has no self");
  Value* self_value = g->add_input(Type{Type::Module, self.qualified_name(), std::nullopt}, "self.1");
  Parser p(*g, self, constants, where);
  p.bind("self", self_value);
  for (size_t i = 1; i < names.size(); ++i) p.bind(names[i], g->add_input(Type{}, names[i]));
  for (const std::string& line : body) {
    if (line.find_first_not_of(' ') == std::string::npos) continue;
    p.statement(line);
  }
  if (!p.returned()) throw std::runtime_error("[jit::load] " + where + ": forward has no return");
  return g;
}

}  // namespace troupe::jit
