// Tensor: a reference-counted handle to a strided view of typed storage, with libtorch's method names.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "array_ref.h"
#include "device.h"
#include "dtype.h"
#include "scalar.h"
#include "tensor_impl.h"

namespace troupe {

/// libtorch's `torch::optional` / `torch::nullopt` (c10::optional, std::optional since PyTorch 2.x), so that
/// libtorch code such as `torch::optional<size_t> size() const override` compiles with `namespace torch
/// = troupe`.
template <class T>
using optional = std::optional<T>;
using std::nullopt;
using std::nullopt_t;

/// How elements are laid out: troupe has only dense strided tensors (libtorch's kStrided).
enum class Layout : int8_t { Strided };
constexpr Layout kStrided = Layout::Strided;
/// "Strided", as libtorch prints it.
std::ostream& operator<<(std::ostream& os, Layout l);

/// Options for a factory: dtype, device, requires_grad (`TensorOptions().dtype(kFloat64)`).
class TensorOptions {
 public:
  TensorOptions() = default;
  TensorOptions(ScalarType d) : dtype_(d) {}
  TensorOptions(Device d) : device_(d) {}
  TensorOptions(DeviceType d) : device_(Device(d)) {}
  TensorOptions(Layout) {}

  TensorOptions dtype(ScalarType d) const { auto o = *this; o.dtype_ = d; return o; }
  /// libtorch's `dtype<float>()`.
  template <typename T>
  TensorOptions dtype() const { return dtype(dtype_of<T>::value); }
  TensorOptions device(Device d) const { auto o = *this; o.device_ = d; return o; }
  TensorOptions device(DeviceType t, int index) const { return device(Device(t, index)); }
  /// A CUDA device of this index (libtorch's device_index).
  TensorOptions device_index(int index) const { return device(Device(kCUDA, index)); }
  TensorOptions requires_grad(bool r) const { auto o = *this; o.requires_grad_ = r; return o; }
  /// Only kStrided exists.
  TensorOptions layout(Layout) const { return *this; }

  /// The dtype, or the default float dtype when none was set.
  ScalarType dtype() const { return dtype_ ? *dtype_ : get_default_dtype(); }
  bool has_dtype() const { return dtype_.has_value(); }
  Device device() const { return device_; }
  bool requires_grad() const { return requires_grad_; }
  Layout layout() const { return kStrided; }

 private:
  std::optional<ScalarType> dtype_;
  Device device_{kCPU};
  bool requires_grad_ = false;
};

/// libtorch's text: `TensorOptions(dtype=float, device=cpu, layout=Strided, requires_grad=false (default), ...)`.
std::ostream& operator<<(std::ostream& os, const TensorOptions& o);

inline TensorOptions dtype(ScalarType d) { return TensorOptions().dtype(d); }
template <typename T>
inline TensorOptions dtype() { return TensorOptions().dtype<T>(); }
inline TensorOptions device(Device d) { return TensorOptions().device(d); }
inline TensorOptions device_index(int index) { return TensorOptions().device_index(index); }
inline TensorOptions layout(Layout l) { return TensorOptions().layout(l); }
inline TensorOptions requires_grad(bool r = true) { return TensorOptions().requires_grad(r); }

namespace indexing {
struct TensorIndex;
}

/// Throws unless `have == want` (data_ptr<T> of the wrong T).
void check_dtype_for_data_ptr(ScalarType have, ScalarType want);

/// A handle to a TensorImpl; copying a Tensor shares the data (as in PyTorch). A default-constructed
/// Tensor is undefined.
class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // ---- identity and geometry
  bool defined() const { return impl_ != nullptr; }
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  /// True when both handles refer to the same TensorImpl.
  bool is_same(const Tensor& o) const { return impl_ == o.impl_; }
  IntArrayRef sizes() const { return checked("sizes")->sizes; }
  IntArrayRef strides() const { return checked("strides")->strides; }
  /// Size of dim `d` (negative counts from the end).
  int64_t size(int64_t d) const;
  int64_t stride(int64_t d) const;
  int64_t dim() const { return static_cast<int64_t>(checked("dim")->sizes.size()); }
  int64_t ndimension() const { return dim(); }
  int64_t numel() const { return checked("numel")->numel; }
  int64_t storage_offset() const { return checked("storage_offset")->offset; }
  ScalarType dtype() const { return checked("dtype")->dtype; }
  ScalarType scalar_type() const { return checked("scalar_type")->dtype; }
  Device device() const { return checked("device")->device(); }
  bool is_cuda() const { return device().is_cuda(); }
  bool is_cpu() const { return device().is_cpu(); }
  /// dtype, device and layout (requires_grad is not part of it, as in libtorch).
  TensorOptions options() const { return TensorOptions().dtype(dtype()).device(device()); }
  Layout layout() const { return kStrided; }
  size_t element_size() const { return troupe::element_size(dtype()); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * element_size(); }
  bool is_contiguous() const { return checked("is_contiguous")->contiguous; }
  bool is_floating_point() const { return troupe::is_floating_point(dtype()); }
  bool is_view() const { return checked("is_view")->view_base != nullptr; }
  /// The version counter shared with every view of the same storage.
  uint32_t _version() const { return checked("_version")->storage->version; }
  void bump_version() const {
    if (checked("bump_version")->storage->inference) check_inference_inplace();
    ++impl_->storage->version;
  }

  // ---- data access
  template <typename T>
  T* data_ptr() const;
  void* data_ptr() const { return checked("data_ptr")->data(); }
  /// The value of a one-element tensor, converted to T.
  template <typename T>
  T item() const;
  Scalar item() const;
  /// Copies the elements in row-major order into a vector of T (converting).
  template <typename T>
  std::vector<T> to_vector() const;

  // ---- autograd
  bool requires_grad() const;
  Tensor& requires_grad_(bool r = true);
  Tensor& set_requires_grad(bool r) { return requires_grad_(r); }
  /// The accumulated gradient (undefined until a backward reaches this tensor).
  const Tensor& grad() const;
  Tensor& mutable_grad() const;
  void set_grad(const Tensor& g) const;
  /// The node that produced this tensor, or null for a leaf.
  std::shared_ptr<autograd::Node> grad_fn() const;
  bool is_leaf() const;
  uint32_t output_nr() const;
  /// backward(gradient, retain_graph, create_graph, inputs).
  void backward(const Tensor& gradient = Tensor(), std::optional<bool> retain_graph = std::nullopt,
                bool create_graph = false, const std::vector<Tensor>& inputs = {}) const;
  /// Made inside an InferenceMode scope (or a view of such a tensor): no autograd outside the mode.
  bool is_inference() const;
  /// A tensor sharing this one's data, outside the graph.
  Tensor detach() const;
  /// Makes this tensor use `src`'s storage, geometry and dtype, keeping its identity and autograd
  /// state (PyTorch's `t.data = src`; how Module::to keeps parameters the same objects).
  void set_data(const Tensor& src) const;
  Tensor& detach_();
  /// Makes a non-leaf keep its .grad after backward.
  void retain_grad() const;
  bool retains_grad() const;
  /// Registers a hook called with this tensor's gradient; a defined return value replaces it.
  /// Returns an id for remove_hook.
  int64_t register_hook(std::function<Tensor(const Tensor&)> hook) const;
  void remove_hook(int64_t id) const;
  /// On a leaf: a hook called with the tensor after its .grad was accumulated.
  int64_t register_post_accumulate_grad_hook(std::function<void(const Tensor&)> hook) const;
  void remove_post_accumulate_grad_hook(int64_t id) const;

  // ---- conversion and copies
  Tensor to(ScalarType dtype, bool copy = false) const;
  Tensor to(Device device, bool copy = false) const;
  Tensor to(Device device, ScalarType dtype, bool copy = false) const;
  Tensor to(const TensorOptions& options, bool copy = false) const;
  Tensor cpu() const { return to(Device(kCPU)); }
  Tensor cuda(int index = 0) const { return to(Device(kCUDA, index)); }
  Tensor contiguous() const;
  Tensor clone() const;
  Tensor& copy_(const Tensor& src, bool non_blocking = false);
  Tensor& fill_(Scalar v);
  Tensor& fill_(const Tensor& v);
  Tensor& zero_();
  /// Makes this tensor contiguous of `sizes`, keeping the elements that fit and growing the storage (the
  /// new elements are uninitialised); same sizes keep the strides. Refused on a tensor that requires grad.
  Tensor& resize_(IntArrayRef sizes);
  Tensor& resize_as_(const Tensor& other) { return resize_(other.sizes()); }
  Tensor& normal_(double mean = 0, double std = 1);
  Tensor& uniform_(double from = 0, double to = 1);
  Tensor& bernoulli_(double p);
  /// Integers uniform on [from, to), on [0, to), or on [0, 2^mantissa digits] / [0, max] for the dtype.
  Tensor& random_(int64_t from, int64_t to);
  Tensor& random_(int64_t to);
  Tensor& random_();
  Tensor type_as(const Tensor& other) const { return to(other.dtype()); }
  Tensor float_() const { return to(kFloat32); }
  Tensor double_() const { return to(kFloat64); }
  Tensor half() const { return to(kFloat16); }
  Tensor bfloat16() const { return to(kBFloat16); }
  Tensor long_() const { return to(kInt64); }
  Tensor int_() const { return to(kInt32); }
  Tensor bool_() const { return to(kBool); }

  // ---- views (share storage)
  Tensor view(IntArrayRef sizes) const;
  Tensor view_as(const Tensor& other) const { return view(other.sizes()); }
  Tensor reshape(IntArrayRef sizes) const;
  Tensor reshape_as(const Tensor& other) const { return reshape(other.sizes()); }
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor permute(IntArrayRef dims) const;
  Tensor t() const;
  Tensor squeeze() const;
  Tensor squeeze(int64_t d) const;
  Tensor unsqueeze(int64_t d) const;
  Tensor expand(IntArrayRef sizes) const;
  Tensor expand_as(const Tensor& other) const { return expand(other.sizes()); }
  Tensor narrow(int64_t d, int64_t start, int64_t length) const;
  Tensor select(int64_t d, int64_t index) const;
  Tensor slice(int64_t d = 0, std::optional<int64_t> start = std::nullopt,
               std::optional<int64_t> end = std::nullopt, int64_t step = 1) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor unflatten(int64_t d, IntArrayRef sizes) const;
  Tensor as_strided(IntArrayRef sizes, IntArrayRef strides, std::optional<int64_t> offset = std::nullopt) const;
  Tensor movedim(int64_t src, int64_t dst) const;
  /// PyTorch-style indexing: `x.index({Slice(0, 2), 1, None, Ellipsis, mask})`.
  Tensor index(ArrayRef<indexing::TensorIndex> idx) const;
  Tensor index(std::initializer_list<indexing::TensorIndex> idx) const;
  Tensor& index_put_(std::initializer_list<indexing::TensorIndex> idx, const Tensor& v);
  Tensor& index_put_(std::initializer_list<indexing::TensorIndex> idx, Scalar v);
  Tensor operator[](int64_t i) const { return select(0, i); }

  // ---- elementwise
  Tensor add(const Tensor& o, Scalar alpha = 1) const;
  Tensor add(Scalar o, Scalar alpha = 1) const;
  Tensor sub(const Tensor& o, Scalar alpha = 1) const;
  Tensor sub(Scalar o, Scalar alpha = 1) const;
  Tensor mul(const Tensor& o) const;
  Tensor mul(Scalar o) const;
  Tensor div(const Tensor& o) const;
  Tensor div(Scalar o) const;
  Tensor pow(const Tensor& e) const;
  Tensor pow(Scalar e) const;
  Tensor& add_(const Tensor& o, Scalar alpha = 1);
  Tensor& add_(Scalar o, Scalar alpha = 1);
  Tensor& sub_(const Tensor& o, Scalar alpha = 1);
  Tensor& sub_(Scalar o, Scalar alpha = 1);
  Tensor& mul_(const Tensor& o);
  Tensor& mul_(Scalar o);
  Tensor& div_(const Tensor& o);
  Tensor& div_(Scalar o);
  Tensor& pow_(Scalar e);
  Tensor neg() const;
  Tensor& neg_();
  Tensor abs() const;
  Tensor exp() const;
  Tensor& exp_();
  Tensor log() const;
  Tensor log1p() const;
  Tensor sqrt() const;
  Tensor& sqrt_();
  Tensor rsqrt() const;
  Tensor sin() const;
  Tensor cos() const;
  Tensor tanh() const;
  Tensor sigmoid() const;
  Tensor relu() const;
  Tensor& relu_();
  Tensor sign() const;
  Tensor reciprocal() const;
  Tensor square() const;
  Tensor maximum(const Tensor& o) const;
  Tensor minimum(const Tensor& o) const;
  Tensor clamp(std::optional<Scalar> min, std::optional<Scalar> max = std::nullopt) const;
  Tensor& clamp_(std::optional<Scalar> min, std::optional<Scalar> max = std::nullopt);
  Tensor clamp_min(Scalar min) const;
  Tensor clamp_max(Scalar max) const;
  Tensor eq(const Tensor& o) const;
  Tensor eq(Scalar o) const;
  Tensor ne(const Tensor& o) const;
  Tensor ne(Scalar o) const;
  Tensor lt(const Tensor& o) const;
  Tensor lt(Scalar o) const;
  Tensor le(const Tensor& o) const;
  Tensor le(Scalar o) const;
  Tensor gt(const Tensor& o) const;
  Tensor gt(Scalar o) const;
  Tensor ge(const Tensor& o) const;
  Tensor ge(Scalar o) const;
  Tensor logical_not() const;
  Tensor isnan() const;
  Tensor masked_fill(const Tensor& mask, Scalar v) const;
  Tensor& masked_fill_(const Tensor& mask, Scalar v);
  Tensor where(const Tensor& cond, const Tensor& other) const;
  /// True when shapes match and every element is equal.
  bool equal(const Tensor& o) const;
  bool allclose(const Tensor& o, double rtol = 1e-5, double atol = 1e-8, bool equal_nan = false) const;

  // ---- reductions
  Tensor sum(std::optional<ScalarType> dtype = std::nullopt) const;
  Tensor sum(IntArrayRef dims, bool keepdim = false, std::optional<ScalarType> dtype = std::nullopt) const;
  Tensor mean() const;
  Tensor mean(IntArrayRef dims, bool keepdim = false) const;
  // var / std overloads resolve as libtorch's: x.var(1) and x.var({1}) reduce dim 1 (the int overload,
  // libtorch's gh-40287 fix; int64_t too), x.var(true) / x.var(false) reduce everything.
  Tensor var(bool unbiased = true) const;
  Tensor var(int dim) const;
  Tensor var(int64_t dim) const;
  Tensor var(IntArrayRef dims, bool unbiased = true, bool keepdim = false) const;
  /// Divides by count - correction (nullopt: 1); a plain number as the second argument is `unbiased`.
  Tensor var(IntArrayRef dims, std::optional<int64_t> correction, bool keepdim = false) const;
  Tensor std(bool unbiased = true) const;
  Tensor std(int dim) const;
  Tensor std(int64_t dim) const;
  Tensor std(IntArrayRef dims, bool unbiased = true, bool keepdim = false) const;
  Tensor std(IntArrayRef dims, std::optional<int64_t> correction, bool keepdim = false) const;
  Tensor prod() const;
  Tensor prod(int64_t d, bool keepdim = false) const;
  Tensor max() const;
  std::tuple<Tensor, Tensor> max(int64_t d, bool keepdim = false) const;
  Tensor min() const;
  std::tuple<Tensor, Tensor> min(int64_t d, bool keepdim = false) const;
  Tensor amax(IntArrayRef dims = {}, bool keepdim = false) const;
  Tensor amin(IntArrayRef dims = {}, bool keepdim = false) const;
  Tensor argmax(std::optional<int64_t> d = std::nullopt, bool keepdim = false) const;
  Tensor argmin(std::optional<int64_t> d = std::nullopt, bool keepdim = false) const;
  Tensor logsumexp(IntArrayRef dims, bool keepdim = false) const;
  Tensor softmax(int64_t d) const;
  Tensor log_softmax(int64_t d) const;
  Tensor cumsum(int64_t d) const;
  Tensor all() const;
  Tensor all(int64_t d, bool keepdim = false) const;
  Tensor any() const;
  Tensor any(int64_t d, bool keepdim = false) const;
  Tensor norm(double p = 2) const;
  Tensor norm(double p, IntArrayRef dims, bool keepdim = false) const;

  // ---- linear algebra
  Tensor matmul(const Tensor& o) const;
  Tensor mm(const Tensor& o) const;
  Tensor bmm(const Tensor& o) const;
  Tensor dot(const Tensor& o) const;

  // ---- joining and indexing
  std::vector<Tensor> split(int64_t size, int64_t d = 0) const;
  std::vector<Tensor> split_with_sizes(IntArrayRef sizes, int64_t d = 0) const;
  std::vector<Tensor> chunk(int64_t chunks, int64_t d = 0) const;
  std::vector<Tensor> unbind(int64_t d = 0) const;
  Tensor gather(int64_t d, const Tensor& index) const;
  Tensor scatter(int64_t d, const Tensor& index, const Tensor& src) const;
  Tensor scatter(int64_t d, const Tensor& index, Scalar v) const;
  Tensor& scatter_(int64_t d, const Tensor& index, const Tensor& src);
  Tensor& scatter_(int64_t d, const Tensor& index, Scalar v);
  Tensor scatter_add(int64_t d, const Tensor& index, const Tensor& src) const;
  Tensor& scatter_add_(int64_t d, const Tensor& index, const Tensor& src);
  Tensor index_select(int64_t d, const Tensor& index) const;
  Tensor index_add(int64_t d, const Tensor& index, const Tensor& src, Scalar alpha = 1) const;
  Tensor& index_add_(int64_t d, const Tensor& index, const Tensor& src, Scalar alpha = 1);
  Tensor repeat(IntArrayRef repeats) const;
  Tensor flip(IntArrayRef dims) const;

  /// `str(tensor)` in PyTorch's format.
  std::string str() const;

 private:
  /// Throws for an in-place change of an inference tensor outside InferenceMode.
  void check_inference_inplace() const;
  std::shared_ptr<TensorImpl> impl_;
  /// impl_, or an error naming the accessor when the tensor is undefined (as libtorch's undefined
  /// tensor, whose accessors throw instead of crashing).
  TensorImpl* checked(const char* what) const {
    if (!impl_) [[unlikely]] throw_undefined(what);
    return impl_.get();
  }
  [[noreturn]] static void throw_undefined(const char* what);
};

using TensorList = ArrayRef<Tensor>;

// ---- operators (libtorch's)
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, Scalar b);
Tensor operator+(Scalar a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, Scalar b);
Tensor operator-(Scalar a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, Scalar b);
Tensor operator*(Scalar a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, Scalar b);
Tensor operator/(Scalar a, const Tensor& b);
Tensor operator-(const Tensor& a);
Tensor& operator+=(Tensor& a, const Tensor& b);
Tensor& operator+=(Tensor& a, Scalar b);
Tensor& operator-=(Tensor& a, const Tensor& b);
Tensor& operator-=(Tensor& a, Scalar b);
Tensor& operator*=(Tensor& a, const Tensor& b);
Tensor& operator*=(Tensor& a, Scalar b);
Tensor& operator/=(Tensor& a, const Tensor& b);
Tensor& operator/=(Tensor& a, Scalar b);
Tensor operator==(const Tensor& a, const Tensor& b);
Tensor operator==(const Tensor& a, Scalar b);
Tensor operator!=(const Tensor& a, const Tensor& b);
Tensor operator!=(const Tensor& a, Scalar b);
Tensor operator<(const Tensor& a, const Tensor& b);
Tensor operator<(const Tensor& a, Scalar b);
Tensor operator<=(const Tensor& a, const Tensor& b);
Tensor operator<=(const Tensor& a, Scalar b);
Tensor operator>(const Tensor& a, const Tensor& b);
Tensor operator>(const Tensor& a, Scalar b);
Tensor operator>=(const Tensor& a, const Tensor& b);
Tensor operator>=(const Tensor& a, Scalar b);

/// Prints in PyTorch's format: `tensor([[1., 2.],\n        [3., 4.]], requires_grad=True)`.
std::ostream& operator<<(std::ostream& os, const Tensor& t);

// ---- template definitions
template <typename T>
T* Tensor::data_ptr() const {
  check_dtype_for_data_ptr(dtype(), dtype_of<T>::value);
  return static_cast<T*>(impl_->data());
}

template <typename T>
T Tensor::item() const {
  return item().to<T>();
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  Tensor c = to(dtype_of<T>::value).contiguous();
  const T* p = static_cast<const T*>(c.impl()->data());
  return std::vector<T>(p, p + c.numel());
}

}  // namespace troupe
