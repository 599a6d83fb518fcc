// TensorImpl, and the Tensor methods that are not ops: geometry, item, autograd accessors, hooks.
#include "tensor.h"

#include <sstream>
#include <stdexcept>

#include "autograd.h"
#include "backend.h"
#include "op_helpers.h"
#include "ops.h"

namespace troupe {

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> st(sizes.size());
  int64_t s = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    st[i] = s;
    s *= sizes[i] > 0 ? sizes[i] : 1;
  }
  return st;
}

std::ostream& operator<<(std::ostream& os, Layout) { return os << "Strided"; }

std::ostream& operator<<(std::ostream& os, const TensorOptions& o) {
  // The element type as libtorch's TypeMeta names it.
  auto type_name = [](ScalarType t) {
    switch (t) {
      case kBool: return "bool";
      case kUInt8: return "unsigned char";
      case kInt32: return "int";
      case kInt64: return "long int";
      case kFloat16: return "c10::Half";
      case kBFloat16: return "c10::BFloat16";
      case kFloat32: return "float";
      case kFloat64: return "double";
    }
    return "?";
  };
  return os << "TensorOptions(dtype=" << type_name(o.dtype()) << (o.has_dtype() ? "" : " (default)")
            << ", device=" << o.device() << ", layout=" << o.layout()
            << ", requires_grad=" << (o.requires_grad() ? "true" : "false (default)") << ", pinned_memory=false (default), memory_format=(nullopt))";
}

TensorImpl::TensorImpl(std::shared_ptr<StorageImpl> s, std::vector<int64_t> sz, std::vector<int64_t> st, int64_t off,
                       ScalarType dt)
    : storage(std::move(s)), sizes(std::move(sz)), strides(std::move(st)), offset(off), dtype(dt) {
  refresh();
}

TensorImpl::~TensorImpl() = default;

void TensorImpl::refresh() {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  numel = n;
  bool c = true;
  int64_t expected = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    if (sizes[i] == 1) continue;
    if (strides[i] != expected) {
      c = false;
      break;
    }
    expected *= sizes[i];
  }
  contiguous = c || n == 0;
}

void Tensor::throw_undefined(const char* what) {
  throw std::runtime_error(std::string(what) +
                           "() called on an undefined Tensor (a default-constructed Tensor, or a grad() that is not set)");
}

void check_dtype_for_data_ptr(ScalarType have, ScalarType want) {
  if (have != want)
    throw std::invalid_argument(std::string("[data_ptr] expected scalar type ") + dtype_name(want) +
                                " but found " + dtype_name(have));
}

int64_t Tensor::size(int64_t d) const {
  if (dim() == 0) op_detail::wrap_dim(d, 0, "size");
  return impl_->sizes[op_detail::wrap_dim(d, dim(), "size")];
}

int64_t Tensor::stride(int64_t d) const {
  if (dim() == 0) op_detail::wrap_dim(d, 0, "stride");
  return impl_->strides[op_detail::wrap_dim(d, dim(), "stride")];
}

Scalar Tensor::item() const {
  if (!defined()) throw std::invalid_argument("[item] called on an undefined tensor");
  if (numel() != 1)
    throw std::invalid_argument("[item] a Tensor with " + std::to_string(numel()) +
                                " elements cannot be converted to Scalar");
  Tensor c = is_cpu() ? *this : to(Device(kCPU));
  return dispatch_all(dtype(), [&](auto tag) -> Scalar {
    using T = decltype(tag);
    return Scalar(*static_cast<const T*>(c.impl()->data()));
  });
}

// ---------------------------------------------------------------- autograd accessors

bool Tensor::requires_grad() const {
  auto* m = autograd::meta_or_null(*this);
  return m && (m->requires_grad || m->grad_fn);
}

Tensor& Tensor::requires_grad_(bool r) {
  auto* m = autograd::meta_or_null(*this);
  if (m && m->grad_fn) {
    if (!r)
      throw std::runtime_error(
          "[requires_grad_] you can only change requires_grad flags of leaf variables. If you want to use a "
          "computed variable in a subgraph that doesn't require differentiation use var_no_grad = var.detach().");
    return *this;
  }
  if (r && is_inference() && !autograd::InferenceMode::is_enabled())
    throw std::runtime_error(
        "[requires_grad_] Setting requires_grad=True on inference tensor outside InferenceMode is not allowed.");
  if (r && !is_floating_point())
    throw std::runtime_error(std::string("[requires_grad_] only Tensors of floating point dtype can require "
                                         "gradients, got ") + dtype_name(dtype()));
  if (!m && !r) return *this;
  autograd::meta(*this).requires_grad = r;
  return *this;
}

const Tensor& Tensor::grad() const {
  static const Tensor undefined;
  auto* m = autograd::meta_or_null(*this);
  return m ? m->grad : undefined;
}

Tensor& Tensor::mutable_grad() const { return autograd::meta(*this).grad; }

void Tensor::set_grad(const Tensor& g) const {
  if (g.defined() && !g.sizes().equals(sizes()))
    throw std::invalid_argument("[set_grad] assigned grad has shape " + shape_str(g.sizes()) +
                                " but the tensor has shape " + shape_str(sizes()));
  autograd::meta(*this).grad = g;
}

std::shared_ptr<autograd::Node> Tensor::grad_fn() const {
  auto* m = autograd::meta_or_null(*this);
  return m ? m->grad_fn : nullptr;
}

bool Tensor::is_leaf() const { return grad_fn() == nullptr; }

uint32_t Tensor::output_nr() const {
  auto* m = autograd::meta_or_null(*this);
  return m ? m->output_nr : 0;
}

void Tensor::backward(const Tensor& gradient, std::optional<bool> retain_graph, bool create_graph,
                      const std::vector<Tensor>& inputs) const {
  autograd::backward({*this}, {gradient}, retain_graph, create_graph, inputs);
}

Tensor Tensor::detach() const {
  checked("detach");
  auto impl = std::make_shared<TensorImpl>(impl_->storage, impl_->sizes, impl_->strides, impl_->offset, impl_->dtype);
  return Tensor(impl);
}

void Tensor::set_data(const Tensor& src) const {
  if (!defined() || !src.defined()) throw std::invalid_argument("[set_data] both tensors must be defined");
  if (is_same(src)) return;
  const TensorImpl& s = *src.impl_;
  impl_->storage = s.storage;
  impl_->sizes = s.sizes;
  impl_->strides = s.strides;
  impl_->offset = s.offset;
  impl_->dtype = s.dtype;
  impl_->view_base = nullptr;  // an alias of src's data, not a view in the autograd sense (as .data =)
  impl_->refresh();
}

Tensor& Tensor::resize_(IntArrayRef new_sizes) {
  for (int64_t s : new_sizes)
    if (s < 0)
      throw std::invalid_argument("[resize_] Trying to create tensor with negative dimension " + std::to_string(s) +
                                  ": " + list_str(new_sizes));
  if (requires_grad()) throw std::runtime_error("[resize_] cannot resize variables that require grad");
  if (is_inference() && !autograd::InferenceMode::is_enabled()) autograd::throw_inference_inplace("resize_");
  if (sizes().equals(new_sizes)) return *this;  // strides are kept, as PyTorch's resize_
  int64_t n = 1;
  for (int64_t s : new_sizes) n *= s;
  const size_t needed = n == 0 ? 0 : static_cast<size_t>(impl_->offset + n) * element_size();
  StorageImpl& st = *impl_->storage;
  if (needed > st.nbytes) {
    // Grow the storage itself, keeping its bytes, so every view of it sees the new memory.
    if (st.deleter)
      throw std::runtime_error("[resize_] Trying to resize storage that is not resizable (it wraps memory given to "
                               "from_blob), from " + std::to_string(st.nbytes) + " to " + std::to_string(needed) +
                               " bytes");
    auto fresh = std::make_shared<StorageImpl>(needed, st.device);
    fresh->inference = st.inference;
    if (st.nbytes > 0) {
      auto bytes = [](const std::shared_ptr<StorageImpl>& s, size_t nb) {
        return Tensor(std::make_shared<TensorImpl>(s, std::vector<int64_t>{static_cast<int64_t>(nb)},
                                                   std::vector<int64_t>{1}, 0, kUInt8));
      };
      backend(st.device.type).copy(bytes(fresh, st.nbytes), bytes(impl_->storage, st.nbytes));
    }
    std::swap(st.data, fresh->data);
    std::swap(st.nbytes, fresh->nbytes);  // `fresh` now owns the old block and frees it
  }
  impl_->sizes = new_sizes.vec();
  impl_->strides = contiguous_strides(impl_->sizes);
  impl_->refresh();
  return *this;
}

bool Tensor::is_inference() const { return checked("is_inference")->storage->inference; }

void Tensor::check_inference_inplace() const {
  if (!autograd::InferenceMode::is_enabled()) autograd::throw_inference_inplace("inplace");
}

Tensor& Tensor::detach_() {
  auto* m = autograd::meta_or_null(*this);
  if (m) {
    m->grad_fn.reset();
    m->output_nr = 0;
    m->requires_grad = false;
  }
  return *this;
}

void Tensor::retain_grad() const {
  if (!requires_grad())
    throw std::runtime_error("[retain_grad] can't retain_grad on Tensor that has requires_grad=False");
  if (is_leaf()) return;  // leaves always keep .grad
  auto& m = autograd::meta(*this);
  if (m.retains_grad) return;
  m.retains_grad = true;
  m.grad_fn->retained.emplace_back(m.output_nr, impl_);
}

bool Tensor::retains_grad() const {
  auto* m = autograd::meta_or_null(*this);
  return m && m->retains_grad;
}

namespace {
int64_t next_tensor_hook_id() {
  static std::atomic<int64_t> id{1 << 30};
  return id++;
}
}  // namespace

int64_t Tensor::register_hook(std::function<Tensor(const Tensor&)> hook) const {
  if (!requires_grad())
    throw std::runtime_error("[register_hook] cannot register a hook on a tensor that doesn't require gradient");
  auto& m = autograd::meta(*this);
  if (m.grad_fn) return m.grad_fn->add_tensor_pre_hook(m.output_nr, std::move(hook));
  int64_t id = next_tensor_hook_id();
  m.leaf_hooks.emplace_back(id, std::move(hook));
  return id;
}

void Tensor::remove_hook(int64_t id) const {
  auto* m = autograd::meta_or_null(*this);
  if (!m) return;
  if (m->grad_fn) m->grad_fn->remove_hook(id);
  std::erase_if(m->leaf_hooks, [id](auto& h) { return h.first == id; });
}

int64_t Tensor::register_post_accumulate_grad_hook(std::function<void(const Tensor&)> hook) const {
  if (!requires_grad())
    throw std::runtime_error(
        "[register_post_accumulate_grad_hook] cannot register a hook on a tensor that doesn't require gradient");
  if (!is_leaf())
    throw std::runtime_error("[register_post_accumulate_grad_hook] post accumulate grad hooks cannot be registered "
                             "on non-leaf tensors");
  int64_t id = next_tensor_hook_id();
  autograd::meta(*this).post_acc_hooks.emplace_back(id, std::move(hook));
  return id;
}

void Tensor::remove_post_accumulate_grad_hook(int64_t id) const {
  auto* m = autograd::meta_or_null(*this);
  if (m) std::erase_if(m->post_acc_hooks, [id](auto& h) { return h.first == id; });
}

}  // namespace troupe
