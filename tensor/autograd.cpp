// The autograd engine: recording nodes, saved-variable checks, hooks, and the backward pass.
#include "autograd.h"

#include <algorithm>
#include <atomic>
#include <functional>
#include <mutex>
#include <queue>
#include <sstream>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

#include "ops.h"

namespace troupe {

namespace {
thread_local bool t_grad_enabled = true;
thread_local bool t_inference_mode = false;
// The FunctionNode whose backward is running on this thread: a SavedVariable of an output that was saved
// before record() attached the node (the usual order) re-attaches it on unpack.
thread_local autograd::Node* t_current_node = nullptr;
std::atomic<uint64_t> g_sequence_nr{0};
std::atomic<int64_t> g_hook_id{1};
}  // namespace

NoGradGuard::NoGradGuard() : prev_(t_grad_enabled) { t_grad_enabled = false; }
NoGradGuard::~NoGradGuard() { t_grad_enabled = prev_; }
EnableGradGuard::EnableGradGuard() : prev_(t_grad_enabled) { t_grad_enabled = true; }
EnableGradGuard::~EnableGradGuard() { t_grad_enabled = prev_; }

InferenceMode::InferenceMode(bool enabled) : prev_inference_(t_inference_mode), prev_grad_(t_grad_enabled) {
  t_inference_mode = enabled;
  t_grad_enabled = !enabled;
}
InferenceMode::~InferenceMode() {
  t_inference_mode = prev_inference_;
  t_grad_enabled = prev_grad_;
}
bool InferenceMode::is_enabled() { return t_inference_mode; }

namespace autograd {

bool GradMode::is_enabled() { return t_grad_enabled; }

void throw_backward_twice() {
  throw std::runtime_error(
      "Trying to backward through the graph a second time (or directly access saved tensors after they have "
      "already been freed). Saved intermediate values of the graph are freed when you call .backward() or "
      "autograd.grad(). Specify retain_graph=True if you need to backward through the graph a second time or if "
      "you need to access saved tensors after calling backward.");
}

void throw_inference_inplace(const char* op) {
  throw std::runtime_error(std::string("[") + op +
                           "] Inplace update to inference tensor outside InferenceMode is not allowed.You can make "
                           "a clone to get a normal tensor before doing inplace update.See "
                           "https://github.com/pytorch/rfcs/pull/17 for more details.");
}
void GradMode::set_enabled(bool e) { t_grad_enabled = e; }

AutogradMeta& meta(const Tensor& t) {
  auto* impl = t.impl();
  if (!impl) throw std::invalid_argument("[autograd] undefined tensor");
  if (!impl->autograd) impl->autograd = std::make_unique<AutogradMeta>();
  return *impl->autograd;
}

AutogradMeta* meta_or_null(const Tensor& t) {
  auto* impl = t.impl();
  return impl ? impl->autograd.get() : nullptr;
}

// ---------------------------------------------------------------- Node

Node::Node() : sequence_nr_(g_sequence_nr++) {}
Node::~Node() = default;

void Node::teardown() {
  // Children whose last owner we hold are emptied before they die, so no destructor recurses.
  std::vector<std::shared_ptr<Node>> stack;
  auto harvest = [&stack](Node* n) {
    for (auto& e : n->next_edges)
      if (e.fn) stack.push_back(std::move(e.fn));
    n->next_edges.clear();
    n->clear_captures();
  };
  harvest(this);
  while (!stack.empty()) {
    std::shared_ptr<Node> n = std::move(stack.back());
    stack.pop_back();
    if (n.use_count() == 1) harvest(n.get());
  }
}

int64_t Node::add_tensor_pre_hook(uint32_t input_nr, std::function<Tensor(const Tensor&)> fn) {
  int64_t id = g_hook_id++;
  tensor_pre_hooks.push_back({id, input_nr, std::move(fn)});
  return id;
}
int64_t Node::add_pre_hook(std::function<variable_list(const variable_list&)> fn) {
  int64_t id = g_hook_id++;
  pre_hooks.push_back({id, std::move(fn)});
  return id;
}
int64_t Node::add_post_hook(std::function<variable_list(const variable_list&, const variable_list&)> fn) {
  int64_t id = g_hook_id++;
  post_hooks.push_back({id, std::move(fn)});
  return id;
}
void Node::remove_hook(int64_t id) {
  std::erase_if(tensor_pre_hooks, [id](auto& h) { return h.id == id; });
  std::erase_if(pre_hooks, [id](auto& h) { return h.id == id; });
  std::erase_if(post_hooks, [id](auto& h) { return h.id == id; });
}

// ---------------------------------------------------------------- AccumulateGrad

AccumulateGrad::AccumulateGrad(const Tensor& t) : leaf(t.impl_ptr()) {
  sequence_nr_ = UINT64_MAX;  // run as soon as ready, like PyTorch
  input_meta.push_back({t.sizes().vec(), t.dtype(), t.device()});
}

namespace {
// True when nobody else can see g's memory, so .grad may take it without a copy: g is the only
// handle, it spans its whole storage, and that storage is held by g alone, or by g and its view base
// when nothing else holds the base (linear's weight gradient comes through w.t() as such a view).
bool stealable(const Tensor& g) {
  auto* impl = g.impl();
  if (!impl->contiguous || impl->offset != 0 || g.impl_ptr().use_count() != 1 ||
      static_cast<size_t>(impl->numel) * element_size(impl->dtype) != impl->storage->nbytes)
    return false;
  if (impl->view_base) return impl->view_base.use_count() == 1 && impl->storage.use_count() == 2;
  return impl->storage.use_count() == 1;
}
}  // namespace

variable_list AccumulateGrad::apply(variable_list&& grads) {
  auto impl = leaf.lock();
  if (!impl) return {};
  Tensor var(impl);
  Tensor g = std::move(grads[0]);
  auto& m = meta(var);
  for (auto& [id, h] : m.leaf_hooks) {
    Tensor r = h(g);
    if (r.defined()) g = r;
  }
  if (!g.defined()) return {};
  if (!m.grad.defined()) {
    if (GradMode::is_enabled()) {
      m.grad = g;  // create_graph: keep the graph of the gradient
    } else {
      const bool steal = stealable(g);  // before detach(), whose handle shares the storage
      Tensor d = g.detach();
      m.grad = steal ? d : d.clone();
    }
  } else if (GradMode::is_enabled()) {
    m.grad = m.grad + g;
  } else {
    m.grad.add_(g);
  }
  for (auto& [id, h] : m.post_acc_hooks) h(var);
  return {};
}

// ---------------------------------------------------------------- SavedVariable

SavedVariable::SavedVariable(const Tensor& t, bool is_output) {
  if (!t.defined()) return;
  if (t.is_inference() && GradMode::is_enabled() && !InferenceMode::is_enabled())
    throw std::runtime_error(
        "Inference tensors cannot be saved for backward. To work around you can make a clone to get a normal tensor "
        "and use it in autograd.");
  was_defined_ = true;
  is_output_ = is_output;
  version_ = t._version();
  requires_grad_ = t.requires_grad();
  auto fn = t.grad_fn();
  producer_ = fn ? fn->name() : "";
  if (is_output) {
    // Keep the data only; the grad_fn (the node saving this) is re-attached weakly on unpack.
    data_ = t.detach();
    grad_fn_ = fn;
    output_nr_ = t.output_nr();
  } else {
    data_ = t;
  }
}

Tensor SavedVariable::unpack(const std::shared_ptr<Node>& owner) const {
  if (!was_defined_) return Tensor();
  if (released_)
    throw_backward_twice();
  std::string producer = producer_;
  if (producer.empty() && is_output_ && t_current_node) producer = t_current_node->name();
  if (data_._version() != version_) {
    std::ostringstream os;
    os << "one of the variables needed for gradient computation has been modified by an inplace operation: [torch."
       << legacy_type_name(data_.dtype()) << " " << list_str(data_.sizes()) << "]";
    if (!producer.empty()) os << ", which is output " << output_nr_ << " of " << producer << ",";
    os << " is at version " << data_._version() << "; expected version " << version_
       << " instead. Hint: the backtrace further above shows the operation that failed to compute its gradient. "
          "The variable in question was changed in there or anywhere later. Good luck!";
    throw std::runtime_error(os.str());
  }
  if (!is_output_) return data_;
  // An output saved before record() attached its node (the usual order in an op) had no grad_fn and did
  // not require grad yet: it belongs to the node now running its backward.
  bool saved_before_record = producer_.empty() && is_floating_point(data_.dtype()) && t_current_node;
  if (!requires_grad_ && !saved_before_record) return data_;
  // Re-attach the producing node so that double backward through a saved output works.
  auto fn = grad_fn_.lock();
  if (!fn) fn = owner;
  if (!fn && t_current_node) fn = t_current_node->shared_from_this();
  Tensor t = data_.detach();
  if (fn) {
    auto& m = meta(t);
    m.grad_fn = fn;
    m.output_nr = output_nr_;
  }
  return t;
}

void SavedVariable::reset() {
  data_ = Tensor();
  released_ = true;
}

// ---------------------------------------------------------------- FunctionNode

variable_list FunctionNode::apply(variable_list&& grads) {
  if (released_)
    throw_backward_twice();
  struct Current {
    autograd::Node* prev;
    ~Current() { t_current_node = prev; }
  } current{t_current_node};
  t_current_node = this;
  return fn_(grads);
}

void FunctionNode::release_variables() {
  if (saves_) {
    fn_ = nullptr;
    released_ = true;
  }
}

// ---------------------------------------------------------------- recording

bool any_requires_grad(std::initializer_list<const Tensor*> ts) {
  if (!GradMode::is_enabled()) return false;
  for (auto* t : ts)
    if (t->defined() && t->requires_grad()) return true;
  return false;
}

bool any_requires_grad(const variable_list& ts) {
  if (!GradMode::is_enabled()) return false;
  for (auto& t : ts)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

Edge gradient_edge(const Tensor& t) {
  if (!t.defined()) return {};
  auto* m = meta_or_null(t);
  if (!m) return {};
  if (m->grad_fn) return {m->grad_fn, m->output_nr};
  if (!m->requires_grad) return {};
  // A leaf's accumulator is made on first use; threads that record ops on the same leaf at once (the
  // forwards of two RemoteModule stages attaching to one input: TSan saw it) must get the same one.
  // As PyTorch's grad_accumulator(), under a lock.
  static std::mutex accumulator_mutex;
  std::lock_guard<std::mutex> lock(accumulator_mutex);
  auto acc = m->grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(t);
    m->grad_accumulator = acc;
  }
  return {acc, 0};
}

void set_next_edges(Node& node, const variable_list& inputs) {
  node.next_edges.reserve(node.next_edges.size() + inputs.size());
  for (auto& t : inputs) node.next_edges.push_back(t.defined() && t.requires_grad() ? gradient_edge(t) : Edge{});
}

void set_history(const std::shared_ptr<Node>& node, const variable_list& outputs) {
  uint32_t nr = 0;
  for (auto& o : outputs) {
    node->input_meta.push_back({o.sizes().vec(), o.dtype(), o.device()});
    if (o.defined() && is_floating_point(o.dtype())) {
      auto& m = meta(o);
      m.grad_fn = node;
      m.output_nr = nr;
    }
    ++nr;
  }
}

std::shared_ptr<Node> record(const char* name, const variable_list& inputs, const variable_list& outputs,
                             FunctionNode::Fn fn, bool saves) {
  if (!any_requires_grad(inputs)) return nullptr;
  auto node = std::make_shared<FunctionNode>(name, std::move(fn), saves);
  set_next_edges(*node, inputs);
  set_history(node, outputs);
  return node;
}

std::shared_ptr<Node> record(const char* name, const variable_list& inputs, const Tensor& output, FunctionNode::Fn fn,
                             bool saves) {
  return record(name, inputs, variable_list{output}, std::move(fn), saves);
}

void check_inplace(const Tensor& self, const char* op) {
  if (self.is_inference() && !InferenceMode::is_enabled()) throw_inference_inplace(op);
  if (!GradMode::is_enabled()) return;
  if (self.is_leaf() && self.requires_grad())
    throw std::runtime_error(std::string("[") + op +
                             "] a leaf Variable that requires grad is being used in an in-place operation.");
  if (self.is_view()) {
    Tensor base(self.impl()->view_base);
    if (base.is_leaf() && base.requires_grad())
      throw std::runtime_error(std::string("[") + op +
                               "] a view of a leaf Variable that requires grad is being used in an in-place "
                               "operation.");
  }
}

void record_inplace(const char* name, const Tensor& self, const variable_list& others, FunctionNode::Fn fn,
                    bool saves) {
  if (!GradMode::is_enabled()) return;
  bool others_need = any_requires_grad(others);
  Tensor base = self.is_view() ? Tensor(self.impl()->view_base) : Tensor();
  bool self_needs = self.requires_grad() || (base.defined() && base.requires_grad());
  if (!others_need && !self_needs) return;

  if (!base.defined()) {
    // Plain tensor: the new node takes (old self, others...) and becomes self's grad_fn.
    variable_list inputs;
    inputs.reserve(others.size() + 1);
    inputs.push_back(self);  // still carries the old grad_fn here
    for (auto& o : others) inputs.push_back(o);
    auto node = std::make_shared<FunctionNode>(name, std::move(fn), saves);
    set_next_edges(*node, inputs);
    node->input_meta.push_back({self.sizes().vec(), self.dtype(), self.device()});
    auto& m = meta(self);
    m.grad_fn = node;
    m.output_nr = 0;
    return;
  }

  // A view: rebase the base's history (PyTorch's CopySlices). The base's gradient is split into the
  // part the view covers, which goes through fn, and the rest, which passes through unchanged.
  std::vector<int64_t> vsizes = self.sizes().vec(), vstrides = self.strides().vec();
  int64_t voffset = self.storage_offset();
  int64_t boffset = base.storage_offset();
  variable_list inputs;
  inputs.push_back(base);
  for (auto& o : others) inputs.push_back(o);
  size_t n_others = others.size();
  auto inner = std::move(fn);
  auto copy_slices = [inner, vsizes, vstrides, voffset, boffset, n_others](const variable_list& grads) {
    const Tensor& gb = grads[0];
    Tensor result = gb.clone();
    Tensor gview = result.as_strided(vsizes, vstrides, voffset - boffset + result.storage_offset());
    variable_list g = inner({gview.clone()});
    variable_list out(1 + n_others);
    if (g.size() > 0 && g[0].defined()) {
      gview.copy_(g[0]);
    } else {
      gview.zero_();
    }
    out[0] = result;
    for (size_t i = 0; i < n_others && i + 1 < g.size(); ++i) out[1 + i] = g[1 + i];
    return out;
  };
  auto node = std::make_shared<FunctionNode>(std::string("CopySlices"), copy_slices, saves);
  set_next_edges(*node, inputs);
  node->input_meta.push_back({base.sizes().vec(), base.dtype(), base.device()});
  auto& bm = meta(base);
  bm.grad_fn = node;
  bm.output_nr = 0;
  // The view's own history: a strided view of the new base.
  auto bsizes = base.sizes().vec();
  auto view_node = std::make_shared<FunctionNode>(
      std::string("AsStridedBackward0"),
      [bsizes, vsizes, vstrides, voffset, boffset](const variable_list& grads) {
        Tensor gb = zeros(bsizes, grads[0].options());
        gb.as_strided(vsizes, vstrides, voffset - boffset + gb.storage_offset()).add_(grads[0]);
        return variable_list{gb};
      },
      false);
  view_node->next_edges.push_back({node, 0});
  view_node->input_meta.push_back({vsizes, self.dtype(), self.device()});
  auto& sm = meta(self);
  sm.grad_fn = view_node;
  sm.output_nr = 0;
}

// ---------------------------------------------------------------- engine

namespace {

struct NodeTask {
  Node* node;
  int deferred = -1;  // >= 0: the held-back part of a split node (GraphTask::deferred)
  bool operator<(const NodeTask& o) const { return node->sequence_nr() < o.node->sequence_nr(); }
};

// The outputs the engine wants of the node it applies now (null: all): see output_wanted.
thread_local const std::vector<bool>* t_output_mask = nullptr;
struct MaskScope {
  const std::vector<bool>* prev;
  explicit MaskScope(const std::vector<bool>* m) : prev(t_output_mask) { t_output_mask = m; }
  ~MaskScope() { t_output_mask = prev; }
};

Tensor materialize(const InputMeta& m) { return zeros(m.sizes, TensorOptions().dtype(m.dtype).device(m.device)); }

// Checks a gradient returned for edge `e` against the metadata of what it feeds, fixing shape (by
// summing broadcast dims) and dtype as PyTorch's validate_outputs does.
Tensor validate(const Node& fn, size_t i, Tensor g, const Edge& e) {
  if (!g.defined() || !e.fn) return g;
  const InputMeta& m = e.fn->input_meta[e.input_nr];
  if (!g.sizes().equals(m.sizes)) {
    bool expandable;
    try {
      auto b = broadcast_shapes(g.sizes(), m.sizes);
      expandable = IntArrayRef(b).equals(g.sizes());
    } catch (...) {
      expandable = false;
    }
    if (!expandable) {
      std::ostringstream os;
      os << "Function " << fn.name() << " returned an invalid gradient at index " << i << " - got "
         << list_str(g.sizes()) << " but expected shape compatible with " << list_str(m.sizes);
      throw std::runtime_error(os.str());
    }
    g = sum_to(g, m.sizes);
  }
  if (g.dtype() != m.dtype) g = g.to(m.dtype);
  if (g.device() != m.device) {
    // a 0-dim CPU tensor used beside a CUDA tensor gets its gradient computed there
    if (g.dim() != 0)
      throw std::runtime_error("Function " + fn.name() + " returned an invalid gradient at index " +
                               std::to_string(i) + " - expected device " + m.device.str() + " but got " +
                               g.device().str());
    g = g.to(m.device);
  }
  return g;
}

// The part of a split node that waits until the targets' gradients are final: the node applied again
// for the outputs `mask` names (over the same incoming gradients), or those outputs computed already.
struct Deferred {
  Node* node = nullptr;
  std::vector<bool> mask;
  variable_list inputs;
  variable_list outputs;
  bool computed = false;
};

struct GraphTask {
  bool keep_graph;
  bool create_graph;
  std::unordered_map<Node*, int> deps;
  std::unordered_map<Node*, variable_list> buffers;
  // grad() mode
  bool capture_mode = false;
  std::unordered_set<Node*> needed;
  std::unordered_map<Node*, std::vector<std::pair<uint32_t, size_t>>> captures;  // node -> (input_nr, slot)
  variable_list captured;
  // backward_targets_first: the targets' nodes, the nodes that reach them (found by execute), the call
  std::vector<Node*> targets;
  std::unordered_set<Node*> toward;
  std::function<void()> on_ready;
  std::vector<Deferred> deferred;
  // queue_callback
  std::vector<std::function<void()>> callbacks;
};

// The graph tasks running on this thread, innermost last (queue_callback adds to the innermost).
thread_local std::vector<GraphTask*> t_tasks;

void add_to_buffer(variable_list& buf, size_t idx, Tensor g) {
  if (!g.defined()) return;
  if (!buf[idx].defined()) {
    buf[idx] = std::move(g);
  } else {
    buf[idx] = buf[idx] + g;
  }
}

void execute(GraphTask& task, const std::vector<Edge>& roots, variable_list root_grads) {
  // Count dependencies over the reachable graph.
  std::vector<Node*> stack;
  std::unordered_set<Node*> seen;
  for (auto& e : roots) {
    if (e.fn && seen.insert(e.fn.get()).second) stack.push_back(e.fn.get());
  }
  const bool first_targets = static_cast<bool>(task.on_ready);
  std::unordered_map<Node*, std::vector<Node*>> parents;  // reverse edges, for reachability
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (auto& e : n->next_edges) {
      if (!e.fn) continue;
      task.deps[e.fn.get()]++;
      if (task.capture_mode || first_targets) parents[e.fn.get()].push_back(n);
      if (seen.insert(e.fn.get()).second) stack.push_back(e.fn.get());
    }
  }
  // Walks reverse edges from `from`: every node from which one of them can be reached, into `out`.
  auto reaching = [&](const std::vector<Node*>& from, std::unordered_set<Node*>& out) {
    std::vector<Node*> work;
    for (Node* n : from)
      if (seen.count(n) && out.insert(n).second) work.push_back(n);
    while (!work.empty()) {
      Node* n = work.back();
      work.pop_back();
      for (Node* p : parents[n])
        if (out.insert(p).second) work.push_back(p);
    }
  };
  if (task.capture_mode) {
    // A node is needed when a capture point is reachable from it.
    std::vector<Node*> from;
    for (auto& [n, c] : task.captures) from.push_back(n);
    reaching(from, task.needed);
  }
  if (first_targets) reaching(task.targets, task.toward);

  // `ready` runs first; while the targets' gradients are not final, the nodes that cannot reach a target
  // and the held-back parts of split nodes wait in `later`.
  std::priority_queue<NodeTask> ready, later;
  bool targets_done = !first_targets;
  auto enqueue = [&](NodeTask t) {
    if (targets_done || (t.deferred < 0 && task.toward.count(t.node))) ready.push(t);
    else later.push(t);
  };
  for (size_t i = 0; i < roots.size(); ++i) {
    Node* n = roots[i].fn.get();
    if (!n) continue;
    auto& buf = task.buffers[n];
    if (buf.empty()) buf.resize(n->num_inputs());
    add_to_buffer(buf, roots[i].input_nr, root_grads[i]);
  }
  for (auto& e : roots) {
    Node* n = e.fn.get();
    if (n && task.deps[n] == 0) {
      task.deps[n] = -1;  // queued
      enqueue({n});
    }
  }
  // Sends n's outputs along its edges (those `only` names, when given) and queues the nodes they complete.
  auto send = [&](Node* n, bool run, variable_list& outputs, const std::vector<bool>* only) {
    if (outputs.size() < n->num_outputs()) outputs.resize(n->num_outputs());
    for (size_t i = 0; i < n->next_edges.size(); ++i) {
      if (only && !(*only)[i]) continue;
      const Edge& e = n->next_edges[i];
      if (!e.fn) continue;
      Node* next = e.fn.get();
      if (run && outputs[i].defined()) {
        Tensor g = validate(*n, i, std::move(outputs[i]), e);
        auto& buf = task.buffers[next];
        if (buf.empty()) buf.resize(next->num_inputs());
        add_to_buffer(buf, e.input_nr, std::move(g));
      }
      if (--task.deps[next] == 0) {
        task.deps[next] = -1;
        enqueue({next});
      }
    }
  };

  for (;;) {
    if (ready.empty()) {
      if (targets_done) break;
      // Every node that reaches a target has run: their gradients are final.
      targets_done = true;
      task.on_ready();
      while (!later.empty()) {
        ready.push(later.top());
        later.pop();
      }
      continue;
    }
    const NodeTask t = ready.top();
    ready.pop();
    Node* n = t.node;
    if (t.deferred >= 0) {
      Deferred d = std::move(task.deferred[t.deferred]);
      variable_list outputs;
      if (d.computed) {
        outputs = std::move(d.outputs);
      } else {
        MaskScope scope(&d.mask);
        outputs = n->apply(std::move(d.inputs));
        if (!task.keep_graph) n->release_variables();
      }
      send(n, true, outputs, &d.mask);
      continue;
    }
    variable_list inputs = std::move(task.buffers[n]);
    task.buffers.erase(n);
    inputs.resize(n->num_inputs());

    // tensor pre-hooks, retain_grad, captures
    for (auto& h : n->tensor_pre_hooks) {
      Tensor& g = inputs[h.input_nr];
      if (!g.defined()) continue;
      Tensor r = h.fn(g);
      if (r.defined()) g = r;
    }
    for (auto& [nr, weak] : n->retained) {
      auto impl = weak.lock();
      if (!impl || !inputs[nr].defined()) continue;
      Tensor t(impl);
      auto& m = meta(t);
      if (!m.grad.defined()) {
        m.grad = inputs[nr].detach().clone();
      } else {
        m.grad = m.grad + inputs[nr].detach();
      }
    }
    auto cap = task.captures.find(n);
    if (cap != task.captures.end()) {
      for (auto& [nr, slot] : cap->second) {
        if (inputs[nr].defined()) {
          if (!task.captured[slot].defined()) task.captured[slot] = inputs[nr];
          else task.captured[slot] = task.captured[slot] + inputs[nr];
        }
      }
    }
    bool run = !task.capture_mode || (task.needed.count(n) && !dynamic_cast<AccumulateGrad*>(n));
    if (task.capture_mode && cap != task.captures.end() && dynamic_cast<AccumulateGrad*>(n)) run = false;

    // Before the targets are done, a node (one that reaches a target) whose other edges lead elsewhere is
    // split: `first` names the edges sent now, the rest wait in a Deferred.
    std::vector<bool> first;
    bool split = false;
    if (!targets_done && run) {
      first.resize(n->next_edges.size());
      for (size_t i = 0; i < first.size(); ++i) {
        const Edge& e = n->next_edges[i];
        first[i] = !e.fn || task.toward.count(e.fn.get()) != 0;
        split = split || !first[i];
      }
    }
    Deferred rest;
    if (split) {
      rest.node = n;
      rest.mask.resize(first.size());
      for (size_t i = 0; i < first.size(); ++i) rest.mask[i] = !first[i];
    }
    bool keep_saved = false;  // the node runs again for its held-back part

    variable_list outputs;
    if (run) {
      bool any_defined = false;
      for (auto& g : inputs) any_defined |= g.defined();
      if (!any_defined && !dynamic_cast<AccumulateGrad*>(n)) {
        outputs.resize(n->num_outputs());  // nothing flows: every input gradient is "none"
      } else {
        for (size_t i = 0; i < inputs.size(); ++i)
          if (!inputs[i].defined() && !dynamic_cast<AccumulateGrad*>(n) && n->materializes_grads())
            inputs[i] = materialize(n->input_meta[i]);
        for (auto& h : n->pre_hooks) {
          variable_list r = h.fn(inputs);
          if (!r.empty()) {
            if (r.size() != inputs.size())
              throw std::runtime_error("[backward pre-hook] hook returned " + std::to_string(r.size()) +
                                       " gradients, expected " + std::to_string(inputs.size()));
            inputs = std::move(r);
          }
        }
        if (split && n->computes_wanted_outputs && n->post_hooks.empty()) {
          rest.inputs = inputs;  // the same incoming gradients for the second application
          keep_saved = true;
          MaskScope scope(&first);
          outputs = n->apply(std::move(inputs));
        } else {
          variable_list grad_outputs_copy;
          if (!n->post_hooks.empty()) grad_outputs_copy = inputs;
          outputs = n->apply(std::move(inputs));
          for (auto& h : n->post_hooks) {
            variable_list r = h.fn(outputs, grad_outputs_copy);
            if (!r.empty()) {
              if (r.size() != outputs.size())
                throw std::runtime_error("[backward hook] hook returned " + std::to_string(r.size()) +
                                         " gradients, expected " + std::to_string(outputs.size()));
              outputs = std::move(r);
            }
          }
        }
      }
      if (!task.keep_graph && !keep_saved) n->release_variables();
    }
    if (outputs.size() < n->num_outputs()) outputs.resize(n->num_outputs());
    if (split) {
      if (!keep_saved) {  // computed whole: hold the other part back
        rest.computed = true;
        rest.outputs.resize(outputs.size());
        for (size_t i = 0; i < outputs.size(); ++i)
          if (rest.mask[i]) rest.outputs[i] = std::move(outputs[i]);
      }
      task.deferred.push_back(std::move(rest));
      later.push({n, static_cast<int>(task.deferred.size() - 1)});
    }
    send(n, run, outputs, split ? &first : nullptr);
  }
}

// Grad mode set to `on` for a scope (a backward pass records only under create_graph).
struct GradModeAs {
  bool prev;
  explicit GradModeAs(bool on) : prev(GradMode::is_enabled()) { GradMode::set_enabled(on); }
  ~GradModeAs() { GradMode::set_enabled(prev); }
};

// Runs `task` over the graph behind `roots`, then its queued callbacks (queue_callback), on this thread.
void run_task(GraphTask& task, const std::vector<Edge>& roots, variable_list root_grads) {
  t_tasks.push_back(&task);
  struct Pop {
    ~Pop() { t_tasks.pop_back(); }
  } pop;
  execute(task, roots, std::move(root_grads));
  for (size_t i = 0; i < task.callbacks.size(); ++i) {
    auto cb = std::move(task.callbacks[i]);  // a callback may queue more (the vector may grow)
    cb();
  }
}

std::vector<Edge> root_edges(const variable_list& roots) {
  std::vector<Edge> edges;
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& r = roots[i];
    if (!r.defined()) throw std::invalid_argument("[backward] tensor " + std::to_string(i) + " is undefined");
    if (!r.requires_grad())
      throw std::runtime_error("element " + std::to_string(i) +
                               " of tensors does not require grad and does not have a grad_fn");
    edges.push_back(gradient_edge(r));
  }
  return edges;
}

variable_list root_gradients(const variable_list& roots, const variable_list& grads) {
  variable_list out(roots.size());
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor g = i < grads.size() ? grads[i] : Tensor();
    if (g.defined()) {
      if (!g.sizes().equals(roots[i].sizes()))
        throw std::invalid_argument("Mismatch in shape: grad_output[" + std::to_string(i) + "] has a shape of " +
                                    list_str(g.sizes()) + " and output[" + std::to_string(i) +
                                    "] has a shape of " + list_str(roots[i].sizes()) + ".");
      out[i] = g;
    } else {
      if (roots[i].numel() != 1)
        throw std::runtime_error("grad can be implicitly created only for scalar outputs (got a tensor of shape " +
                                 list_str(roots[i].sizes()) + ")");
      out[i] = ones_like(roots[i]);
    }
  }
  return out;
}

}  // namespace

void backward(const variable_list& roots, const variable_list& grad_roots, std::optional<bool> retain_graph,
              bool create_graph, const variable_list& inputs) {
  auto edges = root_edges(roots);
  variable_list grads = root_gradients(roots, grad_roots);
  GraphTask task;
  task.keep_graph = retain_graph.value_or(create_graph);
  task.create_graph = create_graph;
  if (!inputs.empty()) {
    // backward(inputs=...): accumulate only into these leaves.
    task.capture_mode = true;
    task.captured.resize(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
      Edge e = gradient_edge(inputs[i]);
      if (e.fn) task.captures[e.fn.get()].push_back({e.input_nr, i});
    }
  }
  GradModeAs mode(create_graph);
  run_task(task, edges, std::move(grads));
  if (!inputs.empty()) {
    // accumulate the captured gradients into .grad of the given inputs
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (!task.captured[i].defined()) continue;
      auto& m = meta(inputs[i]);
      Tensor c = create_graph ? task.captured[i] : task.captured[i].detach();
      m.grad = m.grad.defined() ? m.grad + c : (create_graph ? c : c.clone());
    }
  }
}

void backward_targets_first(const variable_list& roots, const variable_list& grad_roots, bool retain_graph,
                            const variable_list& targets, const std::function<void()>& on_ready) {
  if (!on_ready) throw std::invalid_argument("[backward_targets_first] on_ready is empty");
  auto edges = root_edges(roots);
  variable_list grads = root_gradients(roots, grad_roots);
  GraphTask task;
  task.keep_graph = retain_graph;
  task.create_graph = false;
  task.on_ready = on_ready;
  std::vector<Edge> target_edges;
  for (size_t i = 0; i < targets.size(); ++i) {
    if (!targets[i].defined() || !targets[i].requires_grad())
      throw std::invalid_argument("[backward_targets_first] target " + std::to_string(i) + " does not require grad");
    Edge e = gradient_edge(targets[i]);
    if (e.fn) task.targets.push_back(e.fn.get());
    target_edges.push_back(std::move(e));  // a leaf's accumulator made here lives through the pass
  }
  GradModeAs mode(false);
  run_task(task, edges, std::move(grads));
}

bool output_wanted(size_t i) { return !t_output_mask || (i < t_output_mask->size() && (*t_output_mask)[i]); }

void queue_callback(std::function<void()> cb) {
  if (t_tasks.empty()) throw std::runtime_error("Final callbacks can only be installed during backward pass.");
  t_tasks.back()->callbacks.push_back(std::move(cb));
}

variable_list grad(const variable_list& outputs, const variable_list& inputs, const variable_list& grad_outputs,
                   std::optional<bool> retain_graph, bool create_graph, bool allow_unused) {
  auto edges = root_edges(outputs);
  variable_list grads = root_gradients(outputs, grad_outputs);
  GraphTask task;
  task.keep_graph = retain_graph.value_or(create_graph);
  task.create_graph = create_graph;
  task.capture_mode = true;
  task.captured.resize(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined() || !inputs[i].requires_grad())
      throw std::runtime_error("One of the differentiated Tensors (input " + std::to_string(i) +
                               ") does not require grad");
    Edge e = gradient_edge(inputs[i]);
    task.captures[e.fn.get()].push_back({e.input_nr, i});
  }
  {
    GradModeAs mode(create_graph);
    run_task(task, edges, std::move(grads));
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!task.captured[i].defined() && !allow_unused)
      throw std::runtime_error("One of the differentiated Tensors (input " + std::to_string(i) +
                               ") appears to not have been used in the graph. Set allow_unused=True if this is the "
                               "desired behavior.");
    if (task.captured[i].defined() && !create_graph) task.captured[i] = task.captured[i].detach();
  }
  return task.captured;
}

}  // namespace autograd
}  // namespace troupe
