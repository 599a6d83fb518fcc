// The passes of ScriptModule::compile() and the kernel of prim::FusedChain (see passes.h).
#include <troupe/jit/passes.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <stdexcept>
#include <unordered_map>

#include <troupe/jit/ops.h>
#include <troupe/tensor/autograd.h>
#include <troupe/tensor/backend.h>
#include <troupe/tensor/ops.h>

namespace troupe::jit {

namespace {

bool is_const(const Value* v) { return v->node && v->node->kind == "prim::Constant"; }
bool is_number_const(const Value* v) {
  return is_const(v) && (v->node->constant.isInt() || v->node->constant.isDouble());
}
double number_of(const Value* v) {
  const IValue& c = v->node->constant;
  return c.isInt() ? static_cast<double>(c.toInt()) : c.toDouble();
}

// Ops whose result depends on more than their arguments (random) or that change state beside their result.
bool has_effect(const Node* n) {
  const std::string& k = n->kind;
  if (k == "prim::Constant" || k == "prim::GetAttr" || k == "prim::ListConstruct" || k == "prim::TupleConstruct" ||
      k == "prim::FusedChain" || k == "prim::FusedLinearStack")
    return false;
  if (k.rfind("aten::", 0) != 0) return true;  // prim::CallMethod (hooks) and anything unknown
  if (k.back() == '_') return true;             // in place
  static const std::set<std::string> random = {"aten::dropout",   "aten::feature_dropout", "aten::alpha_dropout",
                                               "aten::bernoulli", "aten::rand",            "aten::randn",
                                               "aten::rand_like", "aten::randn_like",      "aten::normal",
                                               "aten::uniform",   "aten::multinomial"};
  if (random.count(k)) return true;
  if (k == "aten::batch_norm" || k == "aten::instance_norm") {
    // running statistics are updated in training mode (argument `training` / `use_input_stats`)
    const Value* training = n->inputs.size() > 5 ? n->inputs[5] : nullptr;
    return !(training && is_const(training) && training->node->constant.isBool() && !training->node->constant.toBool());
  }
  return false;
}

std::map<const Value*, int> use_counts(const Graph& g) {
  std::map<const Value*, int> uses;
  for (const Node* n : g.nodes())
    for (const Value* in : n->inputs) ++uses[in];
  for (const Value* o : g.outputs()) ++uses[o];
  return uses;
}

// Each value that exactly one node reads and the graph does not return, with that node: a run of ops
// (fuse_elementwise, fuse_linear_stacks) grows only along such values, which nothing else sees.
std::map<const Value*, Node*> sole_users(const Graph& g) {
  std::map<const Value*, int> uses = use_counts(g);  // the graph's outputs count as uses
  std::map<const Value*, Node*> user;
  for (Node* n : g.nodes())
    for (const Value* in : n->inputs)
      if (uses[in] == 1) user[in] = n;
  return user;
}

}  // namespace

size_t eliminate_dead_code(Graph& g) {
  size_t removed = 0;
  for (bool changed = true; changed;) {
    changed = false;
    std::map<const Value*, int> uses = use_counts(g);
    std::vector<Node*> nodes = g.nodes();
    for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
      Node* n = *it;
      bool used = false;
      for (const Value* o : n->outputs) used = used || uses[o] > 0;
      if (used || has_effect(n)) continue;
      for (const Value* in : n->inputs) --uses[in];
      g.erase(n);
      ++removed;
      changed = true;
    }
  }
  return removed;
}

size_t fold_constants(Graph& g) {
  size_t folded = 0;
  std::vector<Node*> nodes = g.nodes();
  std::map<const Value*, int> uses = use_counts(g);
  // values an in-place op changes: folding them would let the op change the constant itself
  std::set<const Value*> mutated;
  for (const Node* n : nodes)
    if (n->kind.back() == '_' && !n->inputs.empty()) mutated.insert(n->inputs[0]);
  for (Node* n : nodes) {
    const bool list = n->kind == "prim::ListConstruct";
    if (!list && (n->kind.rfind("aten::", 0) != 0 || has_effect(n))) continue;
    if (n->outputs.size() != 1 || n->inputs.empty() || mutated.count(n->outputs[0])) continue;
    bool all_const = true;
    for (const Value* in : n->inputs) all_const = all_const && is_const(in);
    if (!all_const) continue;
    IValue result;
    if (list) {
      std::vector<int64_t> l;
      bool ints = true;
      for (const Value* in : n->inputs) {
        ints = ints && in->node->constant.isInt();
        if (ints) l.push_back(in->node->constant.toInt());
      }
      if (!ints) continue;
      result = IValue(std::move(l));
    } else {
      OpFn fn = find_op(n->kind);
      if (!fn) continue;
      std::vector<IValue> args;
      for (const Value* in : n->inputs) args.push_back(in->node->constant);
      NoGradGuard no_grad;
      result = fn(args);
    }
    Node* c = g.insert(n, "prim::Constant", {}, 1);
    c->constant = result;
    c->outputs[0]->type = n->outputs[0]->type;
    g.replace_uses(n->outputs[0], c->outputs[0]);
    g.erase(n);
    ++folded;
  }
  (void)uses;
  return folded;
}

namespace {

// The step an elementwise node makes, when it can join a chain (its first input is the chained value).
bool as_step(const Node* n, FusedChain::Step& s) {
  const std::string& k = n->kind;
  const size_t ni = n->inputs.size();
  if ((k == "aten::relu" || k == "aten::relu_") && ni == 1) return s = {FusedChain::Step::Relu}, true;
  if (k == "aten::sigmoid" && ni == 1) return s = {FusedChain::Step::Sigmoid}, true;
  if (k == "aten::tanh" && ni == 1) return s = {FusedChain::Step::Tanh}, true;
  if ((k == "aten::leaky_relu" || k == "aten::leaky_relu_") && ni == 2 && is_number_const(n->inputs[1]))
    return s = {FusedChain::Step::LeakyRelu, number_of(n->inputs[1])}, true;
  if ((k == "aten::add" || k == "aten::sub") && ni == 3 && is_number_const(n->inputs[1]) && is_number_const(n->inputs[2]))
    return s = {k == "aten::add" ? FusedChain::Step::AddScalar : FusedChain::Step::SubScalar, number_of(n->inputs[1]),
                number_of(n->inputs[2])},
           true;
  if ((k == "aten::mul" || k == "aten::div") && ni == 2 && is_number_const(n->inputs[1]))
    return s = {k == "aten::mul" ? FusedChain::Step::MulScalar : FusedChain::Step::DivScalar, number_of(n->inputs[1])}, true;
  return false;
}

// Puts one node of `kind` (its inputs `inputs`, its attr `attr`) in place of `members`, a run whose last
// node's output is the run's only value used outside it; the new output keeps that value's type and name.
Node* replace_run(Graph& g, const std::vector<Node*>& members, const std::string& kind,
                  const std::vector<Value*>& inputs, const std::string& attr, std::set<const Node*>& taken) {
  Node* last = members.back();
  Node* f = g.insert(last, kind, inputs, 1);
  f->attr = attr;
  f->outputs[0]->type = last->outputs[0]->type;
  const std::string name = last->outputs[0]->name;
  g.replace_uses(last->outputs[0], f->outputs[0]);
  for (auto it = members.rbegin(); it != members.rend(); ++it) {
    g.erase(*it);
    taken.insert(*it);
  }
  if (!name.empty()) g.set_name(f->outputs[0], name);
  return f;
}

}  // namespace

static std::vector<bool> needed_values(const FusedChain& c);

size_t fuse_elementwise(Graph& g) {
  size_t made = 0;
  std::map<const Value*, Node*> user = sole_users(g);
  std::set<const Node*> taken;
  std::vector<Node*> nodes = g.nodes();
  for (Node* head : nodes) {
    if (taken.count(head)) continue;
    auto chain = std::make_shared<FusedChain>();
    std::vector<Node*> members{head};
    std::vector<Value*> inputs;
    FusedChain::Step s{};
    if (head->kind == "aten::linear" && head->inputs.size() == 3) {
      chain->linear_head = true;
      inputs = {head->inputs[0], head->inputs[1], head->inputs[2]};
      chain->ops = "aten::linear";
    } else if (head->kind.back() != '_' && as_step(head, s)) {  // relu_ on a value from outside stays in place
      chain->steps.push_back(s);
      inputs = {head->inputs[0]};
      chain->ops = head->kind;
    } else {
      continue;
    }
    Value* cur = head->outputs[0];
    while (user.count(cur)) {
      Node* next = user[cur];
      if (taken.count(next) || next->inputs.empty() || next->inputs[0] != cur || !as_step(next, s)) break;
      // the chained value must be the op's tensor operand only (add(x, x) is not a scalar op anyway)
      chain->steps.push_back(s);
      chain->ops += ", " + next->kind;
      members.push_back(next);
      cur = next->outputs[0];
    }
    if (!chain->linear_head && chain->steps.size() < 2) continue;  // one op alone: nothing to gain
    chain->needed = needed_values(*chain);
    replace_run(g, members, "prim::FusedChain", inputs, chain->ops, taken)->fused = chain;
    ++made;
  }
  return made;
}

std::vector<std::vector<size_t>> last_uses(const Graph& g) {
  const std::vector<Node*>& nodes = g.nodes();
  std::unordered_map<const Value*, size_t> last;
  for (size_t i = 0; i < nodes.size(); ++i)
    for (const Value* in : nodes[i]->inputs) last[in] = i;
  std::set<const Value*> keep(g.outputs().begin(), g.outputs().end());
  for (const Value* in : g.inputs()) keep.insert(in);
  std::vector<std::vector<size_t>> frees(nodes.size());
  for (const auto& [v, i] : last)
    if (!keep.count(v) && !is_const(v)) frees[i].push_back(v->id);
  for (auto& f : frees) std::sort(f.begin(), f.end());
  return frees;
}

// ---------------------------------------------------------------------------------------------------
// The fused chain's kernel

namespace {

using Step = FusedChain::Step;

// Whether step k's derivative needs its input value (v_k) or its output value (v_{k+1}).
bool needs_in(const Step& s) { return s.kind == Step::LeakyRelu; }
bool needs_out(const Step& s) { return s.kind == Step::Relu || s.kind == Step::Sigmoid || s.kind == Step::Tanh; }

// out = step(in) on one block, through the backend kernels the eager ops use (so results are the same bits).
void forward_step(Backend& be, const Step& s, const Tensor& out, const Tensor& in, const Tensor& scalar) {
  switch (s.kind) {
    case Step::Relu: be.unary(UnaryOp::Relu, out, in, 0, 0); break;
    case Step::Sigmoid: be.unary(UnaryOp::Sigmoid, out, in, 0, 0); break;
    case Step::Tanh: be.unary(UnaryOp::Tanh, out, in, 0, 0); break;
    case Step::LeakyRelu: be.unary(UnaryOp::LeakyRelu, out, in, s.p, 0); break;
    case Step::AddScalar: be.binary(BinaryOp::Add, out, in, scalar.expand(out.sizes()), s.alpha); break;
    case Step::SubScalar: be.binary(BinaryOp::Sub, out, in, scalar.expand(out.sizes()), s.alpha); break;
    case Step::MulScalar: be.binary(BinaryOp::Mul, out, in, scalar.expand(out.sizes()), 1); break;
    case Step::DivScalar: be.binary(BinaryOp::Div, out, in, scalar.expand(out.sizes()), 1); break;
  }
}

// g_in = g_out * step'(...) on one block; `v_in` / `v_out` are the step's saved input / output values.
void backward_step(Backend& be, const Step& s, const Tensor& gin, const Tensor& gout, const Tensor& v_in,
                   const Tensor& v_out, const Tensor& scalar) {
  switch (s.kind) {
    case Step::Relu: be.binary(BinaryOp::ReluGrad, gin, gout, v_out, 1); break;
    case Step::Sigmoid: be.binary(BinaryOp::SigmoidGrad, gin, gout, v_out, 1); break;
    case Step::Tanh: be.binary(BinaryOp::TanhGrad, gin, gout, v_out, 1); break;
    case Step::LeakyRelu: be.binary(BinaryOp::LeakyReluGrad, gin, gout, v_in, s.p); break;
    case Step::AddScalar:
    case Step::SubScalar:
      if (!gin.is_same(gout)) be.copy(gin, gout);
      break;
    case Step::MulScalar: be.binary(BinaryOp::Mul, gin, gout, scalar.expand(gin.sizes()), 1); break;
    case Step::DivScalar: be.binary(BinaryOp::Div, gin, gout, scalar.expand(gin.sizes()), 1); break;
  }
}

constexpr int64_t kBlock = 16384;  // elements per block: a block of float32 and its saved copies stay in L2

// The ops one by one through troupe's own functions: inputs the kernel does not take (other dtypes, devices,
// shapes, strides) and the reference the kernel must equal.
Tensor run_unfused(const FusedChain& c, const Tensor& x, const Tensor& w, const Tensor& b) {
  Tensor v = c.linear_head ? troupe::linear(x, w, b) : x;
  for (const Step& s : c.steps) {
    switch (s.kind) {
      case Step::Relu: v = troupe::relu(v); break;
      case Step::Sigmoid: v = troupe::sigmoid(v); break;
      case Step::Tanh: v = troupe::tanh(v); break;
      case Step::LeakyRelu: v = troupe::leaky_relu(v, s.p); break;
      case Step::AddScalar: v = troupe::add(v, Scalar(s.p), Scalar(s.alpha)); break;
      case Step::SubScalar: v = troupe::sub(v, Scalar(s.p), Scalar(s.alpha)); break;
      case Step::MulScalar: v = troupe::mul(v, Scalar(s.p)); break;
      case Step::DivScalar: v = troupe::div(v, Scalar(s.p)); break;
    }
  }
  return v;
}

}  // namespace

static std::vector<bool> needed_values(const FusedChain& c) {
  if (c.needed.size() == c.steps.size() + 1) return c.needed;
  std::vector<bool> needed(c.steps.size() + 1, false);
  for (size_t k = 0; k < c.steps.size(); ++k) {
    if (needs_in(c.steps[k])) needed[k] = true;
    if (needs_out(c.steps[k])) needed[k + 1] = true;
  }
  return needed;
}

namespace {

// Whether the kernel takes these operands (CPU float32/float64, contiguous, 2-D x for a linear head with
// matching weight and bias); anything else runs the ops one by one (run_unfused).
bool weight_takes(ScalarType dtype, int64_t in_features, const Tensor& w, const Tensor& b) {
  return w.defined() && w.dim() == 2 && w.is_cpu() && w.dtype() == dtype && w.is_contiguous() && w.size(1) == in_features &&
         (!b.defined() || (b.dim() == 1 && b.size(0) == w.size(0) && b.dtype() == dtype && b.is_cpu() && b.is_contiguous()));
}

bool chain_takes(const FusedChain& c, const Tensor& x, const Tensor& w, const Tensor& b) {
  const bool floating = x.dtype() == kFloat32 || x.dtype() == kFloat64;
  bool fast = x.defined() && floating && x.is_cpu() && x.is_contiguous() && x.numel() > 0;
  if (fast && c.linear_head) fast = x.dim() == 2 && weight_takes(x.dtype(), x.size(1), w, b);
  return fast;
}

// v[k], or an undefined tensor past v's end (chain_forward leaves `saved` and `scalars` empty when it keeps
// nothing, so a chain of relus allocates no vectors).
const Tensor kNone;
const Tensor& at(const std::vector<Tensor>& v, size_t k) { return k < v.size() ? v[k] : kNone; }

// A (cols, rows) transposed view of a 2-D matrix for a gemm operand, without autograd or view bookkeeping (as
// tensor/linalg.cpp's raw_view; the backend's gemm takes any strides).
Tensor raw_t(const Tensor& m) {
  return Tensor(std::make_shared<TensorImpl>(m.impl()->storage, std::vector<int64_t>{m.size(1), m.size(0)},
                                             std::vector<int64_t>{m.stride(1), m.stride(0)}, m.storage_offset(),
                                             m.dtype()));
}

// a @ b into a new (a.rows, b.cols) tensor: mm's own gemm call (mm_forward) without its checks and autograd
// record, so the same bits.
Tensor gemm_new(Backend& be, const Tensor& a, const Tensor& b) {
  Tensor out = empty({a.size(0), b.size(1)}, a.options());
  be.gemm(out, a, b, 1.0, 0.0);
  return out;
}

// x @ w^T + b for operands weight_takes() accepts, computed as addmm(b, x, w.t()) (or mm(x, w.t())) computes
// it: the bias copied into each row, then the backend's gemm with beta 1. The same calls, so the same bits,
// without addmm's checks, autograd test and transposed view.
Tensor linear_gemm(Backend& be, const Tensor& x, const Tensor& w, const Tensor& b) {
  const int64_t rows = x.size(0), m = w.size(0);
  Tensor out = empty({rows, m}, x.options());
  if (b.defined() && out.numel() > 0) {
    const size_t row_bytes = static_cast<size_t>(m) * b.element_size();
    const char* src = static_cast<const char*>(b.data_ptr());
    char* dst = static_cast<char*>(out.data_ptr());
    for (int64_t i = 0; i < rows; ++i) std::memcpy(dst + static_cast<size_t>(i) * row_bytes, src, row_bytes);
  }
  be.gemm(out, x, raw_t(w), 1.0, b.defined() ? 1.0 : 0.0);
  return out;
}

// The chain's forward on operands chain_takes() accepts, without recording anything: the gemm (linear head)
// and every step, block by block, in one buffer. With `grad`, `saved[k]` gets a copy of each needed
// intermediate v_k the steps overwrite (k < n); `scalars[k]` the scalar operand of each arithmetic step
// (either vector stays empty when it would hold nothing; read them through at()).
Tensor chain_forward(const FusedChain& c, const std::vector<bool>& needed, const Tensor& x, const Tensor& w,
                     const Tensor& b, bool grad, std::vector<Tensor>& saved, std::vector<Tensor>& scalars) {
  NoGradGuard no_grad;
  const size_t n = c.steps.size();
  Backend& be = backend(x);
  saved.clear();
  scalars.clear();
  for (size_t k = 0; k < n; ++k)
    if (c.steps[k].kind >= Step::AddScalar) {
      if (scalars.empty()) scalars.resize(n);
      scalars[k] = troupe::scalar_tensor(Scalar(c.steps[k].p), x.options());
    }
  // the gemm writes the buffer the chain reuses
  Tensor out = c.linear_head ? linear_gemm(be, x, w, b) : empty(x.sizes(), x.options());
  const int64_t numel = out.numel();
  if (grad)
    for (size_t k = 0; k < n; ++k)
      if (needed[k] && (k > 0 || c.linear_head)) {
        if (saved.empty()) saved.resize(n + 1);
        saved[k] = empty(out.sizes(), x.options());
      }
  if (numel <= kBlock) {  // the common case: no flat views at all
    Tensor src = c.linear_head ? out : x;
    for (size_t k = 0; k < n; ++k) {
      if (at(saved, k).defined()) be.copy(saved[k], src);
      forward_step(be, c.steps[k], out, src, at(scalars, k));
      src = out;
    }
    return out;
  }
  const Tensor flat_out = out.view({numel});
  const Tensor flat_in = c.linear_head ? flat_out : x.view({numel});
  std::vector<Tensor> flat_saved(n + 1);
  for (size_t k = 0; k < n; ++k)
    if (at(saved, k).defined()) flat_saved[k] = saved[k].view({numel});
  for (int64_t s0 = 0; s0 < numel; s0 += kBlock) {  // one loop over the data: each block through every op
    const int64_t len = std::min(kBlock, numel - s0);
    const Tensor ob = flat_out.narrow(0, s0, len);
    Tensor src = flat_in.narrow(0, s0, len);
    for (size_t k = 0; k < n; ++k) {
      if (flat_saved[k].defined()) be.copy(flat_saved[k].narrow(0, s0, len), src);
      forward_step(be, c.steps[k], ob, src, at(scalars, k));
      src = ob;
    }
  }
  return out;
}

// The gradient of the chain's output `gz` (contiguous) taken back through its steps: the gradient of v_0 (the
// gemm's output for a linear head). `vals[k]` holds v_k wherever needed[k].
Tensor chain_steps_backward(const FusedChain& c, const std::vector<bool>& needed, const Tensor& gz,
                            std::vector<Tensor> vals, const std::vector<Tensor>& scalars) {
  const size_t n = c.steps.size();
  if (n == 0) return gz;
  Backend& be = backend(gz);
  const int64_t numel = gz.numel();
  Tensor gbuf = empty(gz.sizes(), gz.options());
  if (numel <= kBlock) {
    Tensor gsrc = gz;
    for (size_t k = n; k-- > 0;) {
      backward_step(be, c.steps[k], gbuf, gsrc, vals[k], vals[k + 1], at(scalars, k));
      gsrc = gbuf;
    }
    return gbuf;
  }
  const Tensor flat_g = gz.view({numel}), flat_gbuf = gbuf.view({numel});
  for (auto& v : vals)
    if (v.defined()) v = v.reshape({numel});
  for (int64_t s0 = 0; s0 < numel; s0 += kBlock) {
    const int64_t len = std::min(kBlock, numel - s0);
    const Tensor gb = flat_gbuf.narrow(0, s0, len);
    Tensor gsrc = flat_g.narrow(0, s0, len);
    for (size_t k = n; k-- > 0;) {
      const Tensor vin = needed[k] ? vals[k].narrow(0, s0, len) : Tensor();
      const Tensor vout = needed[k + 1] ? vals[k + 1].narrow(0, s0, len) : Tensor();
      backward_step(be, c.steps[k], gb, gsrc, vin, vout, at(scalars, k));
      gsrc = gb;
    }
  }
  return gbuf;
}

// sum_to(gz, {n}) for a contiguous (rows, n) gz: the same backend reduction over (1, rows, n) that sum_to's
// run_reduction issues (so the same bits), without its shape analysis and temporary vectors.
Tensor column_sums(const Tensor& gz) {
  Tensor out = empty({gz.size(1)}, gz.options());
  backend(gz).reduce(ReduceKind::Sum, out, Tensor(), gz, 1, gz.size(0), gz.size(1));
  return out;
}

[[noreturn]] void refuse_double_backward(const std::string& ops) {
  throw std::runtime_error("[jit] the backward of a compiled module's fused chain (" + ops +
                           ") cannot be differentiated again (create_graph=True); run the module without "
                           "compile() for double backward");
}

}  // namespace

IValue run_fused_chain(const FusedChain& c, const std::vector<IValue>& args) {
  const Tensor x = args.at(0).toTensor();
  const Tensor w = c.linear_head ? args.at(1).toTensor() : Tensor();
  const Tensor b = c.linear_head && !args.at(2).isNone() ? args.at(2).toTensor() : Tensor();
  if (!chain_takes(c, x, w, b)) return run_unfused(c, x, w, b);

  const size_t n = c.steps.size();
  const std::vector<bool> needed = needed_values(c);
  autograd::variable_list inputs{x};
  if (c.linear_head) {
    inputs.push_back(w);
    if (b.defined()) inputs.push_back(b);
  }
  const bool grad = autograd::any_requires_grad(inputs);
  std::vector<Tensor> saved, scalars;  // copies of needed intermediates (v_0 .. v_{n-1}) when they are overwritten
  Tensor out = chain_forward(c, needed, x, w, b, grad, saved, scalars);
  if (!grad) return out;

  const bool need_x = x.requires_grad(), need_w = c.linear_head && w.requires_grad(),
             need_b = c.linear_head && b.defined() && b.requires_grad();
  std::shared_ptr<const FusedChain> chain = c.weak_from_this().lock();
  if (!chain) chain = std::make_shared<FusedChain>(c);
  autograd::record(
      "FusedChainBackward", inputs, out,
      [chain = std::move(chain), saved = std::move(saved), scalars = std::move(scalars),
       sx = autograd::SavedVariable((need_w || (!c.linear_head && needed[0])) ? x : Tensor(), false),
       sw = autograd::SavedVariable(need_x && c.linear_head ? w : Tensor(), false),
       sout = autograd::SavedVariable(needed[n] ? out : Tensor(), true), need_x, need_w, need_b,
       has_b = b.defined()](const autograd::variable_list& g) {
        if (autograd::GradMode::is_enabled()) refuse_double_backward(chain->ops);
        const size_t n = chain->steps.size();
        Tensor gz = g[0].contiguous();
        if (n > 0) {
          const std::vector<bool> needed = needed_values(*chain);
          std::vector<Tensor> vals(n + 1);  // v_k where needed
          for (size_t k = 0; k <= n; ++k) {
            if (!needed[k]) continue;
            if (k == n) vals[k] = sout.unpack();
            else if (at(saved, k).defined()) vals[k] = saved[k];
            else vals[k] = sx.unpack();  // v_0 is the input itself (elementwise head)
          }
          gz = chain_steps_backward(*chain, needed, gz, std::move(vals), scalars);
        }
        if (!chain->linear_head) return autograd::variable_list{gz};
        Tensor gx, gw, gbias;
        if (need_x) gx = troupe::mm(gz, sw.unpack());
        if (need_w) gw = troupe::mm(gz.t(), sx.unpack());
        if (need_b) gbias = column_sums(gz);
        autograd::variable_list r{gx, gw};
        if (has_b) r.push_back(gbias);
        return r;
      });
  return out;
}

// ---------------------------------------------------------------------------------------------------
// A stack of Linear-headed chains in one node

size_t fuse_linear_stacks(Graph& g) {
  size_t made = 0;
  std::map<const Value*, Node*> user = sole_users(g);
  auto linear_chain = [](const Node* n) { return n->fused && n->fused->linear_head && n->inputs.size() == 3; };
  std::set<const Node*> taken;
  std::vector<Node*> nodes = g.nodes();
  for (Node* head : nodes) {
    if (taken.count(head) || !linear_chain(head)) continue;
    std::vector<Node*> members{head};
    Value* cur = head->outputs[0];
    while (user.count(cur)) {
      Node* next = user[cur];
      // the chained value must be the next layer's input, not its weight or bias
      if (taken.count(next) || !linear_chain(next) || next->inputs[0] != cur) break;
      members.push_back(next);
      cur = next->outputs[0];
    }
    if (members.size() < 2) continue;
    auto stack = std::make_shared<LinearStack>();
    std::vector<Value*> inputs{head->inputs[0]};
    for (const Node* m : members) {
      stack->layers.push_back(m->fused);
      inputs.push_back(m->inputs[1]);
      inputs.push_back(m->inputs[2]);
      stack->ops += (stack->ops.empty() ? "" : " | ") + m->fused->ops;
    }
    replace_run(g, members, "prim::FusedLinearStack", inputs, stack->ops, taken)->stack = stack;
    ++made;
  }
  return made;
}

IValue run_linear_stack(const LinearStack& s, const std::vector<IValue>& args) {
  const size_t L = s.layers.size();
  if (args.size() != 1 + 2 * L)
    throw std::invalid_argument("[jit] prim::FusedLinearStack of " + std::to_string(L) + " layers takes " +
                                std::to_string(1 + 2 * L) + " arguments, got " + std::to_string(args.size()));
  // autograd inputs: x, then each layer's weight and (when there is one) bias
  autograd::variable_list inputs;
  inputs.reserve(1 + 2 * L);
  inputs.push_back(args[0].toTensor());
  const Tensor& x = inputs[0];
  bool fast = x.defined() && x.dim() == 2 && (x.dtype() == kFloat32 || x.dtype() == kFloat64) && x.is_cpu() &&
              x.is_contiguous() && x.numel() > 0;
  // per layer: where its weight and bias sit in `inputs` (bias: SIZE_MAX for none)
  struct Layer {
    size_t wi = 0, bi = SIZE_MAX;
    std::vector<bool> scratch;  // needed values of a chain built without them (needed_values)
    const std::vector<bool>* needed = nullptr;
  };
  std::vector<Layer> ly(L);
  for (size_t l = 0; l < L && fast; ++l) {
    ly[l].wi = inputs.size();
    inputs.push_back(args[1 + 2 * l].toTensor());
    Tensor b;
    if (!args[2 + 2 * l].isNone()) {
      ly[l].bi = inputs.size();
      inputs.push_back(args[2 + 2 * l].toTensor());
      b = inputs.back();
    }
    fast = weight_takes(x.dtype(), l == 0 ? x.size(1) : inputs[ly[l - 1].wi].size(0), inputs[ly[l].wi], b);
  }
  if (!fast) {  // layer by layer (each chain takes what it can, and the eager ops report bad operands)
    IValue v = args[0];
    for (size_t l = 0; l < L; ++l) v = run_fused_chain(*s.layers[l], {v, args[1 + 2 * l], args[2 + 2 * l]});
    return v;
  }
  auto weight = [&](size_t l) -> const Tensor& { return inputs[ly[l].wi]; };
  auto bias = [&](size_t l) -> const Tensor& { return ly[l].bi == SIZE_MAX ? kNone : inputs[ly[l].bi]; };

  const bool grad = autograd::any_requires_grad(inputs);
  // what the backward keeps per layer: chain_forward's copies and scalars, the layer's input (h), its weight
  // (checked for in-place changes as eager's saves are) and which gradients it makes
  struct Keep {
    std::vector<Tensor> saved, scalars;
    Tensor h;
    autograd::SavedVariable w;
    bool need_w = false, need_b = false, need_in = false;
    size_t wi = 0, bi = SIZE_MAX;
  };
  std::vector<Keep> keep(L);
  Tensor h = x;
  for (size_t l = 0; l < L; ++l) {
    const FusedChain& c = *s.layers[l];
    if (c.needed.size() == c.steps.size() + 1) {
      ly[l].needed = &c.needed;
    } else {
      ly[l].scratch = needed_values(c);
      ly[l].needed = &ly[l].scratch;
    }
    Tensor next = chain_forward(c, *ly[l].needed, h, weight(l), bias(l), grad, keep[l].saved, keep[l].scalars);
    if (grad) keep[l].h = std::move(h);
    h = std::move(next);
  }
  if (!grad) return h;
  const Tensor out = h;

  // which gradients the backward makes: a weight's or bias's own, and the gradient of each layer's input
  // only while something below it (an earlier layer's parameter, or x) needs it
  bool below = x.requires_grad();
  for (size_t l = 0; l < L; ++l) {
    Keep& k = keep[l];
    k.wi = ly[l].wi;
    k.bi = ly[l].bi;
    k.need_w = weight(l).requires_grad();
    k.need_b = k.bi != SIZE_MAX && inputs[k.bi].requires_grad();
    k.need_in = below;
    below = below || k.need_w || k.need_b;
    if (k.need_in) k.w = autograd::SavedVariable(weight(l), false);
    // layer l's input: x (l = 0) is saved apart, as a SavedVariable; h[1..L-1] are the stack's own (nobody
    // else can change them), kept only where a weight gradient or a step derivative reads them
    if (l == 0 || !(k.need_w || ly[l - 1].needed->back())) k.h = Tensor();
  }
  const bool need_out = ly[L - 1].needed->back(), need_x = keep[0].need_w;
  std::shared_ptr<const LinearStack> stack = s.weak_from_this().lock();
  if (!stack) stack = std::make_shared<LinearStack>(s);
  autograd::record(
      "FusedLinearStackBackward", inputs, out,
      [stack = std::move(stack), keep = std::move(keep),
       sx = autograd::SavedVariable(need_x ? x : Tensor(), false),
       sout = autograd::SavedVariable(need_out ? out : Tensor(), true),
       n_inputs = inputs.size()](const autograd::variable_list& g) {
        if (autograd::GradMode::is_enabled()) refuse_double_backward(stack->ops);
        const size_t L = stack->layers.size();
        autograd::variable_list r(n_inputs);
        Tensor gz = g[0].contiguous();
        Backend& be = backend(gz);
        std::vector<bool> scratch;
        for (size_t l = L; l-- > 0;) {
          const FusedChain& c = *stack->layers[l];
          const Keep& k = keep[l];
          const size_t n = c.steps.size();
          if (n > 0) {
            if (c.needed.size() != n + 1) scratch = needed_values(c);
            const std::vector<bool>& needed = c.needed.size() == n + 1 ? c.needed : scratch;
            std::vector<Tensor> vals(n + 1);
            for (size_t j = 0; j < n; ++j)
              if (needed[j]) vals[j] = at(k.saved, j);
            if (needed[n]) vals[n] = l + 1 == L ? sout.unpack() : keep[l + 1].h;
            gz = chain_steps_backward(c, needed, gz, std::move(vals), k.scalars);
          }
          // as AddmmBackward and TBackward: the same gemms (mm's) on the same operands, so the same bits
          if (k.need_w) r[k.wi] = gemm_new(be, raw_t(gz), l == 0 ? sx.unpack() : k.h);
          if (k.need_b) r[k.bi] = column_sums(gz);
          if (!k.need_in) break;
          gz = gemm_new(be, gz, k.w.unpack());
          if (l == 0) r[0] = gz;
        }
        return r;
      });
  return out;
}

}  // namespace troupe::jit
