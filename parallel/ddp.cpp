// DistributedDataParallel: buckets, gradient hooks, the reduction and buffer sync (see ddp.h).
#include <troupe/parallel/ddp.h>

#include <troupe/parallel/grad_buckets.h>
#include <troupe/parallel/wrap_checks.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <type_traits>
#include <unordered_set>
#include <utility>

#include <troupe/tensor/autograd.h>
#include <troupe/tensor/ops.h>
#include <troupe/tensor/parallel.h>

namespace troupe::parallel {

using comm::ProcessGroupPtr;
using comm::ReduceOp;
using comm::WorkPtr;

namespace {

constexpr const char* kWho = "[DistributedDataParallel]";

// dst = src * s in one pass over memory, as PyTorch's reducer does (mul_out into the bucket view):
// a copy and then a mul_ would scan the gradients twice. Contiguous CPU float32 / float64 of one dtype
// take a raw loop (the product in the tensor's dtype, s rounded to it once, as mul_ does); the rest
// copy_ and mul_.
void scaled_copy(Tensor dst, const Tensor& src, double s) {
  const int64_t n = dst.numel();
  const bool raw = dst.is_cpu() && src.is_cpu() && dst.is_contiguous() && src.is_contiguous() &&
                   dst.dtype() == src.dtype() && (dst.dtype() == kFloat32 || dst.dtype() == kFloat64) &&
                   src.numel() == n;
  if (!raw) {
    dst.copy_(src);
    if (s != 1.0) dst.mul_(s);
    return;
  }
  auto run = [&](auto* d, const auto* x) {
    using T = std::remove_cv_t<std::remove_pointer_t<decltype(d)>>;
    const T f = static_cast<T>(s);
    parallel_for(0, n, kGrainSize, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) d[i] = x[i] * f;
    });
  };
  if (dst.dtype() == kFloat32) run(static_cast<float*>(dst.data_ptr()), static_cast<const float*>(src.data_ptr()));
  else run(static_cast<double*>(dst.data_ptr()), static_cast<const double*>(src.data_ptr()));
}

// Broadcasts `tensors` from rank 0 of `group`, one flat message per dtype and device (PyTorch's
// _broadcast_coalesced), and copies the result back in place.
void broadcast_coalesced(const ProcessGroupPtr& group, const std::vector<Tensor>& tensors) {
  if (group->size() == 1 || tensors.empty()) return;
  NoGradGuard no_grad;
  std::vector<std::pair<std::pair<int, std::string>, std::vector<Tensor>>> groups;
  for (const auto& t : tensors) {
    if (!t.defined()) continue;
    std::pair<int, std::string> key{static_cast<int>(t.dtype()), t.device().str()};
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == key; });
    if (it == groups.end()) {
      groups.push_back({key, {}});
      it = std::prev(groups.end());
    }
    it->second.push_back(t);
  }
  for (auto& [key, ts] : groups) {
    int64_t n = 0;
    for (const auto& t : ts) n += t.numel();
    Tensor flat = empty({n}, TensorOptions(ts[0].dtype()).device(ts[0].device()));
    int64_t off = 0;
    for (const auto& t : ts) {
      flat.narrow(0, off, t.numel()).copy_(t.reshape({t.numel()}));
      off += t.numel();
    }
    group->broadcast(flat, 0);
    off = 0;
    for (auto t : ts) {
      t.copy_(flat.narrow(0, off, t.numel()).view(t.sizes()));
      off += t.numel();
    }
  }
}

}  // namespace

namespace detail {
namespace {
std::atomic<int64_t> g_in_place_bytes{int64_t{256} << 10};
}  // namespace
void set_ddp_in_place_bytes(int64_t bytes) { g_in_place_bytes.store(bytes); }
int64_t ddp_in_place_bytes() { return g_in_place_bytes.load(); }
}  // namespace detail

// ------------------------------------------------------------------------------------------- Reducer

struct DistributedDataParallel::Reducer {
  struct Bucket {
    std::vector<size_t> vars;      // parameter indices, in bucket order
    std::vector<int64_t> offsets;  // element offset of each in `flat`
    Tensor flat;                   // 1-d, contiguous
    std::vector<Tensor> views;     // flat's slice for each, shaped as the parameter
    ScalarType dtype = kFloat32;
    Device device;
    int64_t numel = 0;
    // Members reduced in place (at least in_place_bytes, not gradient_as_bucket_view): each its own
    // all-reduce (AVG: the backend divides, mpi within its last reduce step, nccl with ncclAvg), on its
    // .grad when that can be (no copy into the bucket and back, no pass to scale), else on its view.
    // They lie after the others in `flat`; the others' all-reduce covers flat[0, small_numel).
    std::vector<char> in_place;
    int64_t small_numel = 0;
    // per iteration
    std::vector<Tensor> targets;  // in-place members: the tensor reduced (the .grad or the view)
    size_t pending = 0;           // parameters not yet ready in this iteration
    std::vector<WorkPtr> works;
  };

  ProcessGroupPtr group;
  std::vector<Tensor> params;  // every parameter of the module, registration order
  std::vector<std::string> names;
  bool find_unused = false;
  bool grad_as_view = false;
  int64_t in_place_bytes = 0;  // members this large are reduced in place (see Bucket::in_place)
  double scale = 1.0;  // 1 / size
  std::vector<Bucket> buckets;
  std::vector<std::pair<int, int>> loc;  // parameter -> (bucket, index in bucket); (-1, -1): not reduced
  detail::GradReadyHooks hooks;          // on every reduced parameter

  // per-iteration state
  std::recursive_mutex mu;
  bool expect_hooks = false;      // a forward with sync ran; its backward reduces
  bool require_finalize = false;  // a hook fired; the reduction must finish before the next one
  bool has_marked_unused = false;
  std::vector<char> ready;
  std::vector<size_t> unused;  // parameters the output graph does not reach (find_unused)
  std::vector<int32_t> local_used;
  size_t next_bucket = 0;

  // ---- construction

  // PyTorch's compute_bucket_assignment_by_size over the reduced parameters in `order`: per (dtype,
  // device), a bucket closes once it holds at least its limit (the first limit, then the second).
  void assign_buckets(const std::vector<size_t>& order, int64_t first_bytes, int64_t cap_bytes) {
    std::vector<std::string> keys(params.size());
    for (size_t i : order) keys[i] = detail::bucket_key(params[i]);
    auto done = detail::bucket_assignment_by_size(params, order, keys, first_bytes, cap_bytes);
    // Sort by the position of the first parameter in `order` (the order their gradients come).
    std::vector<size_t> pos(params.size(), 0);
    for (size_t k = 0; k < order.size(); ++k) pos[order[k]] = k;
    std::stable_sort(done.begin(), done.end(),
                     [&](const auto& a, const auto& b) { return pos[a.front()] < pos[b.front()]; });

    loc.assign(params.size(), {-1, -1});
    for (auto& vars : done) {
      Bucket b;
      b.vars = vars;
      b.dtype = params[vars[0]].dtype();
      b.device = params[vars[0]].device();
      for (size_t v : vars) {
        const int64_t bytes = params[v].numel() * static_cast<int64_t>(params[v].element_size());
        b.in_place.push_back(!grad_as_view && bytes > 0 && bytes >= in_place_bytes);
        b.offsets.push_back(0);
      }
      // The members reduced through the bucket first, then the in-place ones.
      for (int pass = 0; pass < 2; ++pass) {
        for (size_t k = 0; k < vars.size(); ++k) {
          if (b.in_place[k] != pass) continue;
          b.offsets[k] = b.numel;
          b.numel += params[vars[k]].numel();
        }
        if (pass == 0) b.small_numel = b.numel;
      }
      b.targets.resize(vars.size());
      b.flat = zeros({b.numel}, TensorOptions(b.dtype).device(b.device));
      for (size_t k = 0; k < vars.size(); ++k) {
        b.views.push_back(b.flat.narrow(0, b.offsets[k], params[vars[k]].numel()).view(params[vars[k]].sizes()));
        loc[vars[k]] = {static_cast<int>(buckets.size()), static_cast<int>(k)};
      }
      buckets.push_back(std::move(b));
    }
  }

  // Same parameters and bucket layout on every rank (PyTorch's _verify_param_shape_across_processes).
  void verify_across_ranks() const {
    detail::WrapSignature sig;
    sig.names = names;
    sig.params = params;
    for (const auto& b : buckets) sig.buckets.push_back({b.vars, b.numel, b.dtype, -1});
    detail::verify_across_ranks(group, kWho, sig);
  }

  // ---- per iteration

  std::string param_label(size_t i) const { return std::to_string(i) + " (" + names[i] + ")"; }

  // PyTorch's ensure_prior_reduction_finished.
  void ensure_prior_reduction_finished() {
    std::lock_guard<std::recursive_mutex> lock(mu);
    if (!require_finalize) return;
    std::ostringstream idx, nm;
    bool any = false;
    for (size_t i = 0; i < params.size(); ++i) {
      if (loc[i].first < 0 || ready[i]) continue;
      idx << (any ? " " : "") << i;
      nm << (any ? ", " : "") << names[i];
      any = true;
    }
    std::ostringstream os;
    os << kWho << " Expected to have finished reduction in the prior iteration before starting a new one. "
       << "This error indicates that your module has parameters that were not used in producing loss. You can "
       << "enable unused parameter detection by passing DDPOptions().find_unused_parameters(true) to "
       << "DistributedDataParallel, and by making sure all `forward` function outputs participate in "
       << "calculating loss.\nParameter indices which did not receive grad for rank " << group->rank() << ": "
       << idx.str() << "\nParameters which did not receive grad for rank " << group->rank() << ": " << nm.str();
    throw std::runtime_error(os.str());
  }

  // PyTorch's prepare_for_backward: arms the hooks; with find_unused, finds the parameters that the
  // outputs' graph does not reach.
  void prepare_for_backward(const std::vector<Tensor>& outputs) {
    std::lock_guard<std::recursive_mutex> lock(mu);
    expect_hooks = true;
    has_marked_unused = false;
    next_bucket = 0;
    ready.assign(params.size(), 0);
    local_used.assign(params.size(), 0);
    for (auto& b : buckets) {
      b.pending = b.vars.size();
      b.works.clear();
      for (auto& t : b.targets) t = Tensor();
    }
    unused.clear();
    if (!find_unused) return;
    std::unordered_set<const TensorImpl*> reached;
    std::unordered_set<const autograd::Node*> seen;
    std::vector<std::shared_ptr<autograd::Node>> stack;
    for (const auto& t : outputs) {
      if (!t.defined() || !t.requires_grad()) continue;
      autograd::Edge e = autograd::gradient_edge(t);
      if (e.fn && seen.insert(e.fn.get()).second) stack.push_back(e.fn);
    }
    while (!stack.empty()) {
      auto node = std::move(stack.back());
      stack.pop_back();
      if (auto* acc = dynamic_cast<autograd::AccumulateGrad*>(node.get())) {
        if (auto leaf = acc->leaf.lock()) reached.insert(leaf.get());
      }
      for (const auto& e : node->next_edges)
        if (e.fn && seen.insert(e.fn.get()).second) stack.push_back(e.fn);
    }
    for (size_t i = 0; i < params.size(); ++i)
      if (loc[i].first >= 0 && !reached.count(params[i].impl())) unused.push_back(i);
  }

  // The post-accumulate-grad hook of parameter i.
  void on_grad_ready(size_t i) {
    std::lock_guard<std::recursive_mutex> lock(mu);
    if (!expect_hooks) return;  // no_sync, or no forward with sync since the last reduction
    if (find_unused) {
      local_used[i] = 1;
      if (!has_marked_unused) {
        has_marked_unused = true;
        for (size_t u : unused)
          if (u != i && !ready[u]) mark_ready(u, false);
      }
    }
    mark_ready(i, true);
  }

  // A gradient the all-reduce may average in place: this iteration's (`own`: its hook fired; with
  // find_unused an unused parameter's .grad must stay as it is when no rank used it), the parameter's
  // layout and device, no graph (create_graph), not a view into a bucket.
  bool reducible_in_place(size_t i, const Tensor& grad, const Tensor& view, bool own) const {
    return own && grad.defined() && !grad.requires_grad() && grad.sizes() == view.sizes() &&
           grad.dtype() == view.dtype() && grad.device() == view.device() && grad.is_contiguous() &&
           grad.data_ptr() != view.data_ptr() && params[i].device() == grad.device();
  }

  void mark_ready(size_t i, bool own) {
    if (ready[i]) {
      throw std::runtime_error(
          std::string(kWho) + " Expected to mark a variable ready only once: parameter " + param_label(i) +
          " got a second gradient in one reduction. Either it is used outside the `forward` function, or "
          "backward ran twice (retain_graph, reentrant backward) after one forward.");
    }
    ready[i] = 1;
    require_finalize = true;
    auto [bi, k] = loc[i];
    Bucket& b = buckets[static_cast<size_t>(bi)];
    Tensor& view = b.views[static_cast<size_t>(k)];
    {
      NoGradGuard no_grad;
      const Tensor& grad = params[i].grad();
      if (grad.defined()) {
        if (grad.sizes() != view.sizes() || grad.dtype() != view.dtype()) {
          throw std::runtime_error(std::string(kWho) + " the gradient of parameter " + param_label(i) +
                                   " has shape " + detail::shape_str(grad.sizes()) + " dtype " + dtype_name(grad.dtype()) +
                                   "; the parameter has shape " + detail::shape_str(view.sizes()) + " dtype " +
                                   dtype_name(view.dtype()));
        }
        if (b.in_place[static_cast<size_t>(k)]) {
          // averaged (AVG) in place on the .grad, else on its view holding the .grad as it is
          if (reducible_in_place(i, grad, view, own)) b.targets[static_cast<size_t>(k)] = grad;
          else scaled_copy(view, grad, 1.0);
        } else if (grad.data_ptr() == view.data_ptr() && grad.numel() > 0) {
          view.mul_(scale);  // already a view into the bucket (gradient_as_bucket_view)
        } else {
          scaled_copy(view, grad, scale);
          if (grad_as_view) params[i].set_grad(view);
        }
      } else {
        view.zero_();
      }
      if (b.in_place[static_cast<size_t>(k)] && !b.targets[static_cast<size_t>(k)].defined())
        b.targets[static_cast<size_t>(k)] = view;  // reduced on its view, copied out in finalize
    }
    if (--b.pending == 0) launch_ready_buckets();
  }

  // Starts, in index order, every bucket whose parameters are all ready; finalizes after the last.
  void launch_ready_buckets() {
    while (next_bucket < buckets.size() && buckets[next_bucket].pending == 0) {
      Bucket& b = buckets[next_bucket];
      if (group->size() > 1) {
        // The last bucket is waited for at once (finalize, below): issued as a synchronous call, the
        // waiting thread runs it rather than waking the backend's worker.
        std::optional<comm::detail::SyncCall> sync;
        if (next_bucket + 1 == buckets.size()) sync.emplace();
        // The same ops, in the same order, on every rank: the bucket's part, then each in-place member.
        if (b.small_numel > 0) {
          Tensor part = b.small_numel == b.numel ? b.flat : b.flat.narrow(0, 0, b.small_numel);
          b.works.push_back(group->all_reduce_async(part, ReduceOp::SUM));
        }
        for (size_t k = 0; k < b.vars.size(); ++k)
          if (b.in_place[k]) b.works.push_back(group->all_reduce_async(b.targets[k], ReduceOp::AVG));
      }
      ++next_bucket;
    }
    if (next_bucket == buckets.size()) finalize();
  }

  // Waits for every bucket's all-reduce and writes the averages into .grad.
  void finalize() {
    expect_hooks = false;
    require_finalize = false;
    std::vector<int32_t> global_used;
    if (find_unused) {
      Tensor used = tensor(local_used, kInt32);
      if (group->size() > 1) group->all_reduce(used, ReduceOp::SUM);
      global_used = used.to_vector<int32_t>();
    }
    for (auto& b : buckets) {
      std::vector<WorkPtr> works = std::move(b.works);
      b.works.clear();
      for (auto& w : works) w->wait();
    }
    NoGradGuard no_grad;
    for (auto& b : buckets) {
      for (size_t k = 0; k < b.vars.size(); ++k) {
        const size_t i = b.vars[k];
        if (find_unused && global_used[i] == 0) continue;  // no rank used it: .grad stays as it is
        const Tensor& view = b.views[k];
        const Tensor& grad = params[i].grad();
        if (b.in_place[k] && b.targets[k].defined() && b.targets[k].data_ptr() != view.data_ptr()) {
          b.targets[k] = Tensor();  // averaged in place: it is the .grad
          continue;
        }
        b.targets[k] = Tensor();
        if (!grad.defined()) {
          params[i].set_grad(grad_as_view ? view : view.clone());
        } else if (grad.data_ptr() != view.data_ptr() || grad.numel() == 0) {
          params[i].mutable_grad().copy_(view);
        }
      }
    }
  }

  // Waits (bounded by the group's timeout) for reductions still in flight; swallows their errors.
  void drain() noexcept {
    for (auto& b : buckets) {
      for (auto& w : b.works) detail::wait_quietly(w);
      b.works.clear();
    }
  }
};

// ------------------------------------------------------------------------------ DistributedDataParallel

DistributedDataParallel::DistributedDataParallel(nn::ModulePtr module, ProcessGroupPtr group, DDPOptions options)
    : module_(std::move(module)), group_(std::move(group)), options_(std::move(options)) {
  detail::check_module_and_group(kWho, module_, group_);
  const auto [first_bytes, cap_bytes] =
      detail::bucket_limits_bytes(kWho, options_.first_bucket_mb(), options_.bucket_cap_mb());
  register_module("module", module_);

  auto r = std::make_shared<Reducer>();
  r->group = group_;
  r->find_unused = options_.find_unused_parameters();
  r->grad_as_view = options_.gradient_as_bucket_view();
  r->in_place_bytes = detail::ddp_in_place_bytes();
  r->scale = 1.0 / static_cast<double>(group_->size());
  for (const auto& [n, p] : module_->named_parameters()) {
    if (!p.defined()) continue;
    if (!p.is_contiguous())
      throw std::invalid_argument(std::string(kWho) + " parameter " + n + " is not contiguous");
    r->names.push_back(n);
    r->params.push_back(p);
  }
  std::vector<size_t> order;  // reverse registration order, parameters that require grad
  for (size_t i = r->params.size(); i-- > 0;)
    if (r->params[i].requires_grad()) order.push_back(i);
  r->assign_buckets(order, first_bytes, cap_bytes);
  r->ready.assign(r->params.size(), 0);
  r->local_used.assign(r->params.size(), 0);

  // Same model and layout everywhere, then rank 0's values (PyTorch's _verify_param_shape_across_processes
  // and _sync_module_states).
  r->verify_across_ranks();
  std::vector<Tensor> states = r->params;
  for (const auto& [n, b] : module_->named_buffers())
    if (b.defined()) states.push_back(b);
  broadcast_coalesced(group_, states);

  std::weak_ptr<Reducer> weak = r;
  r->hooks.install(
      r->params, [&](size_t i) { return r->loc[i].first >= 0; },
      [weak](size_t i) {
        if (auto self = weak.lock()) self->on_grad_ready(i);
      });
  reducer_ = std::move(r);
}

DistributedDataParallel::~DistributedDataParallel() {
  if (!reducer_) return;
  reducer_->hooks.remove();
  reducer_->drain();
}

void DistributedDataParallel::sync_buffers() {
  std::vector<Tensor> bufs;
  for (const auto& [n, b] : module_->named_buffers())
    if (b.defined()) bufs.push_back(b);
  broadcast_coalesced(group_, bufs);
}

Tensor DistributedDataParallel::forward(const Tensor& input) { return forward_args({nn::Value(input)}, {}).tensor(); }

nn::Value DistributedDataParallel::forward_args(const nn::Args& args, const nn::Kwargs& kwargs) {
  const bool sync = autograd::GradMode::is_enabled() && require_backward_grad_sync_;
  if (sync) reducer_->ensure_prior_reduction_finished();
  if (require_forward_param_sync_ && options_.broadcast_buffers()) sync_buffers();
  nn::Value out = module_->call(args, kwargs);
  if (sync) {
    require_forward_param_sync_ = true;
    reducer_->prepare_for_backward(options_.find_unused_parameters() ? out.tensors() : std::vector<Tensor>{});
  } else {
    require_forward_param_sync_ = false;
  }
  return out;
}

DistributedDataParallel::NoSyncGuard::NoSyncGuard(DistributedDataParallel& ddp)
    : ddp_(ddp), previous_(ddp.require_backward_grad_sync_) {
  ddp_.require_backward_grad_sync_ = false;
}

DistributedDataParallel::NoSyncGuard::~NoSyncGuard() { ddp_.require_backward_grad_sync_ = previous_; }

std::vector<std::vector<size_t>> DistributedDataParallel::bucket_indices() const {
  std::vector<std::vector<size_t>> out;
  for (const auto& b : reducer_->buckets) out.push_back(b.vars);
  return out;
}

std::vector<int64_t> DistributedDataParallel::bucket_bytes() const {
  std::vector<int64_t> out;
  for (const auto& b : reducer_->buckets) out.push_back(b.numel * static_cast<int64_t>(element_size(b.dtype)));
  return out;
}

}  // namespace troupe::parallel
