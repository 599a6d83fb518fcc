// Tensor member functions that forward to the free functions of ops.h, and the operators.
#include "autograd.h"
#include "indexing.h"
#include "ops.h"

namespace troupe {

Tensor Tensor::to(ScalarType d, bool copy) const { return troupe::to(*this, device(), d, copy); }
Tensor Tensor::to(Device dev, bool copy) const { return troupe::to(*this, dev, dtype(), copy); }
Tensor Tensor::to(Device dev, ScalarType d, bool copy) const { return troupe::to(*this, dev, d, copy); }
Tensor Tensor::to(const TensorOptions& o, bool copy) const {
  return troupe::to(*this, o.device(), o.has_dtype() ? o.dtype() : dtype(), copy);
}
Tensor Tensor::contiguous() const { return troupe::contiguous(*this); }
Tensor Tensor::clone() const { return troupe::clone(*this); }
Tensor& Tensor::normal_(double mean, double std) { return troupe::normal_(*this, mean, std); }
Tensor& Tensor::uniform_(double from, double to) { return troupe::uniform_(*this, from, to); }

Tensor Tensor::view(IntArrayRef s) const { return troupe::view(*this, s); }
Tensor Tensor::reshape(IntArrayRef s) const { return troupe::reshape(*this, s); }
Tensor Tensor::transpose(int64_t a, int64_t b) const { return troupe::transpose(*this, a, b); }
Tensor Tensor::permute(IntArrayRef d) const { return troupe::permute(*this, d); }
Tensor Tensor::t() const { return troupe::t(*this); }
Tensor Tensor::squeeze() const { return troupe::squeeze(*this); }
Tensor Tensor::squeeze(int64_t d) const { return troupe::squeeze(*this, d); }
Tensor Tensor::unsqueeze(int64_t d) const { return troupe::unsqueeze(*this, d); }
Tensor Tensor::expand(IntArrayRef s) const { return troupe::expand(*this, s); }
Tensor Tensor::narrow(int64_t d, int64_t s, int64_t l) const { return troupe::narrow(*this, d, s, l); }
Tensor Tensor::select(int64_t d, int64_t i) const { return troupe::select(*this, d, i); }
Tensor Tensor::slice(int64_t d, std::optional<int64_t> s, std::optional<int64_t> e, int64_t st) const {
  return troupe::slice(*this, d, s, e, st);
}
Tensor Tensor::flatten(int64_t s, int64_t e) const { return troupe::flatten(*this, s, e); }
Tensor Tensor::unflatten(int64_t d, IntArrayRef s) const { return troupe::unflatten(*this, d, s); }
Tensor Tensor::as_strided(IntArrayRef s, IntArrayRef st, std::optional<int64_t> o) const {
  return troupe::as_strided(*this, s, st, o);
}
Tensor Tensor::movedim(int64_t s, int64_t d) const { return troupe::movedim(*this, s, d); }
Tensor Tensor::index(std::initializer_list<indexing::TensorIndex> idx) const {
  return troupe::index(*this, ArrayRef<indexing::TensorIndex>(idx.begin(), idx.size()));
}
Tensor Tensor::index(ArrayRef<indexing::TensorIndex> idx) const { return troupe::index(*this, idx); }
Tensor& Tensor::index_put_(std::initializer_list<indexing::TensorIndex> idx, const Tensor& v) {
  troupe::index_put_(*this, ArrayRef<indexing::TensorIndex>(idx.begin(), idx.size()), v);
  return *this;
}
Tensor& Tensor::index_put_(std::initializer_list<indexing::TensorIndex> idx, Scalar v) {
  troupe::index_put_(*this, ArrayRef<indexing::TensorIndex>(idx.begin(), idx.size()), v);
  return *this;
}

Tensor Tensor::add(const Tensor& o, Scalar a) const { return troupe::add(*this, o, a); }
Tensor Tensor::add(Scalar o, Scalar a) const { return troupe::add(*this, o, a); }
Tensor Tensor::sub(const Tensor& o, Scalar a) const { return troupe::sub(*this, o, a); }
Tensor Tensor::sub(Scalar o, Scalar a) const { return troupe::sub(*this, o, a); }
Tensor Tensor::mul(const Tensor& o) const { return troupe::mul(*this, o); }
Tensor Tensor::mul(Scalar o) const { return troupe::mul(*this, o); }
Tensor Tensor::div(const Tensor& o) const { return troupe::div(*this, o); }
Tensor Tensor::div(Scalar o) const { return troupe::div(*this, o); }
Tensor Tensor::pow(const Tensor& e) const { return troupe::pow(*this, e); }
Tensor Tensor::pow(Scalar e) const { return troupe::pow(*this, e); }
Tensor Tensor::neg() const { return troupe::neg(*this); }
Tensor Tensor::abs() const { return troupe::abs(*this); }
Tensor Tensor::exp() const { return troupe::exp(*this); }
Tensor Tensor::log() const { return troupe::log(*this); }
Tensor Tensor::log1p() const { return troupe::log1p(*this); }
Tensor Tensor::sqrt() const { return troupe::sqrt(*this); }
Tensor Tensor::rsqrt() const { return troupe::rsqrt(*this); }
Tensor Tensor::sin() const { return troupe::sin(*this); }
Tensor Tensor::cos() const { return troupe::cos(*this); }
Tensor Tensor::tanh() const { return troupe::tanh(*this); }
Tensor Tensor::sigmoid() const { return troupe::sigmoid(*this); }
Tensor Tensor::relu() const { return troupe::relu(*this); }
Tensor Tensor::sign() const { return troupe::sign(*this); }
Tensor Tensor::reciprocal() const { return troupe::reciprocal(*this); }
Tensor Tensor::square() const { return troupe::square(*this); }
Tensor Tensor::maximum(const Tensor& o) const { return troupe::maximum(*this, o); }
Tensor Tensor::minimum(const Tensor& o) const { return troupe::minimum(*this, o); }
Tensor Tensor::clamp(std::optional<Scalar> lo, std::optional<Scalar> hi) const { return troupe::clamp(*this, lo, hi); }
Tensor Tensor::clamp_min(Scalar lo) const { return troupe::clamp_min(*this, lo); }
Tensor Tensor::clamp_max(Scalar hi) const { return troupe::clamp_max(*this, hi); }
Tensor Tensor::eq(const Tensor& o) const { return troupe::eq(*this, o); }
Tensor Tensor::eq(Scalar o) const { return troupe::eq(*this, o); }
Tensor Tensor::ne(const Tensor& o) const { return troupe::ne(*this, o); }
Tensor Tensor::ne(Scalar o) const { return troupe::ne(*this, o); }
Tensor Tensor::lt(const Tensor& o) const { return troupe::lt(*this, o); }
Tensor Tensor::lt(Scalar o) const { return troupe::lt(*this, o); }
Tensor Tensor::le(const Tensor& o) const { return troupe::le(*this, o); }
Tensor Tensor::le(Scalar o) const { return troupe::le(*this, o); }
Tensor Tensor::gt(const Tensor& o) const { return troupe::gt(*this, o); }
Tensor Tensor::gt(Scalar o) const { return troupe::gt(*this, o); }
Tensor Tensor::ge(const Tensor& o) const { return troupe::ge(*this, o); }
Tensor Tensor::ge(Scalar o) const { return troupe::ge(*this, o); }
Tensor Tensor::logical_not() const { return troupe::logical_not(*this); }
Tensor Tensor::isnan() const { return troupe::isnan(*this); }
Tensor Tensor::masked_fill(const Tensor& m, Scalar v) const { return troupe::masked_fill(*this, m, v); }
Tensor Tensor::where(const Tensor& c, const Tensor& o) const { return troupe::where(c, *this, o); }
bool Tensor::equal(const Tensor& o) const { return troupe::equal(*this, o); }
bool Tensor::allclose(const Tensor& o, double r, double a, bool n) const { return troupe::allclose(*this, o, r, a, n); }

Tensor Tensor::sum(std::optional<ScalarType> d) const { return troupe::sum(*this, d); }
Tensor Tensor::sum(IntArrayRef dims, bool k, std::optional<ScalarType> d) const { return troupe::sum(*this, dims, k, d); }
Tensor Tensor::mean() const { return troupe::mean(*this); }
Tensor Tensor::mean(IntArrayRef dims, bool k) const { return troupe::mean(*this, dims, k); }
Tensor Tensor::var(bool u) const { return troupe::var(*this, IntArrayRef{}, u, false); }
Tensor Tensor::var(int d) const { return troupe::var(*this, d); }
Tensor Tensor::var(int64_t d) const { return troupe::var(*this, d); }
Tensor Tensor::var(IntArrayRef dims, bool u, bool k) const { return troupe::var(*this, dims, u, k); }
Tensor Tensor::var(IntArrayRef dims, std::optional<int64_t> c, bool k) const { return troupe::var(*this, dims, c, k); }
Tensor Tensor::std(bool u) const { return troupe::std(*this, IntArrayRef{}, u, false); }
Tensor Tensor::std(int d) const { return troupe::std(*this, d); }
Tensor Tensor::std(int64_t d) const { return troupe::std(*this, d); }
Tensor Tensor::std(IntArrayRef dims, bool u, bool k) const { return troupe::std(*this, dims, u, k); }
Tensor Tensor::std(IntArrayRef dims, std::optional<int64_t> c, bool k) const { return troupe::std(*this, dims, c, k); }
Tensor Tensor::prod() const { return troupe::prod(*this); }
Tensor Tensor::prod(int64_t d, bool k) const { return troupe::prod(*this, d, k); }
Tensor Tensor::max() const { return troupe::max(*this); }
std::tuple<Tensor, Tensor> Tensor::max(int64_t d, bool k) const { return troupe::max(*this, d, k); }
Tensor Tensor::min() const { return troupe::min(*this); }
std::tuple<Tensor, Tensor> Tensor::min(int64_t d, bool k) const { return troupe::min(*this, d, k); }
Tensor Tensor::amax(IntArrayRef dims, bool k) const { return troupe::amax(*this, dims, k); }
Tensor Tensor::amin(IntArrayRef dims, bool k) const { return troupe::amin(*this, dims, k); }
Tensor Tensor::argmax(std::optional<int64_t> d, bool k) const { return troupe::argmax(*this, d, k); }
Tensor Tensor::argmin(std::optional<int64_t> d, bool k) const { return troupe::argmin(*this, d, k); }
Tensor Tensor::logsumexp(IntArrayRef dims, bool k) const { return troupe::logsumexp(*this, dims, k); }
Tensor Tensor::softmax(int64_t d) const { return troupe::softmax(*this, d); }
Tensor Tensor::log_softmax(int64_t d) const { return troupe::log_softmax(*this, d); }
Tensor Tensor::cumsum(int64_t d) const { return troupe::cumsum(*this, d); }
Tensor Tensor::all() const { return troupe::all(*this); }
Tensor Tensor::all(int64_t d, bool k) const { return troupe::all(*this, d, k); }
Tensor Tensor::any() const { return troupe::any(*this); }
Tensor Tensor::any(int64_t d, bool k) const { return troupe::any(*this, d, k); }
Tensor Tensor::norm(double p) const { return troupe::norm(*this, p); }
Tensor Tensor::norm(double p, IntArrayRef dims, bool k) const { return troupe::norm(*this, p, dims, k); }

Tensor Tensor::matmul(const Tensor& o) const { return troupe::matmul(*this, o); }
Tensor Tensor::mm(const Tensor& o) const { return troupe::mm(*this, o); }
Tensor Tensor::bmm(const Tensor& o) const { return troupe::bmm(*this, o); }
Tensor Tensor::dot(const Tensor& o) const { return troupe::dot(*this, o); }

std::vector<Tensor> Tensor::split(int64_t s, int64_t d) const { return troupe::split(*this, s, d); }
std::vector<Tensor> Tensor::split_with_sizes(IntArrayRef s, int64_t d) const { return troupe::split_with_sizes(*this, s, d); }
std::vector<Tensor> Tensor::chunk(int64_t c, int64_t d) const { return troupe::chunk(*this, c, d); }
std::vector<Tensor> Tensor::unbind(int64_t d) const { return troupe::unbind(*this, d); }
Tensor Tensor::gather(int64_t d, const Tensor& i) const { return troupe::gather(*this, d, i); }
Tensor Tensor::scatter(int64_t d, const Tensor& i, const Tensor& s) const { return troupe::scatter(*this, d, i, s); }
Tensor Tensor::scatter(int64_t d, const Tensor& i, Scalar v) const { return troupe::scatter(*this, d, i, v); }
Tensor Tensor::scatter_add(int64_t d, const Tensor& i, const Tensor& s) const { return troupe::scatter_add(*this, d, i, s); }
Tensor Tensor::index_select(int64_t d, const Tensor& i) const { return troupe::index_select(*this, d, i); }
Tensor Tensor::index_add(int64_t d, const Tensor& i, const Tensor& s, Scalar a) const {
  return troupe::index_add(*this, d, i, s, a);
}
Tensor Tensor::repeat(IntArrayRef r) const { return troupe::repeat(*this, r); }
Tensor Tensor::flip(IntArrayRef d) const { return troupe::flip(*this, d); }

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator+(const Tensor& a, Scalar b) { return add(a, b); }
Tensor operator+(Scalar a, const Tensor& b) { return add(b, a); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator-(const Tensor& a, Scalar b) { return sub(a, b); }
Tensor operator-(Scalar a, const Tensor& b) { return rsub(b, a); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator*(const Tensor& a, Scalar b) { return mul(a, b); }
Tensor operator*(Scalar a, const Tensor& b) { return mul(b, a); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator/(const Tensor& a, Scalar b) { return div(a, b); }
Tensor operator/(Scalar a, const Tensor& b) { return div(a, b); }
Tensor operator-(const Tensor& a) { return neg(a); }
Tensor& operator+=(Tensor& a, const Tensor& b) { return a.add_(b); }
Tensor& operator+=(Tensor& a, Scalar b) { return a.add_(b); }
Tensor& operator-=(Tensor& a, const Tensor& b) { return a.sub_(b); }
Tensor& operator-=(Tensor& a, Scalar b) { return a.sub_(b); }
Tensor& operator*=(Tensor& a, const Tensor& b) { return a.mul_(b); }
Tensor& operator*=(Tensor& a, Scalar b) { return a.mul_(b); }
Tensor& operator/=(Tensor& a, const Tensor& b) { return a.div_(b); }
Tensor& operator/=(Tensor& a, Scalar b) { return a.div_(b); }
Tensor operator==(const Tensor& a, const Tensor& b) { return eq(a, b); }
Tensor operator==(const Tensor& a, Scalar b) { return eq(a, b); }
Tensor operator!=(const Tensor& a, const Tensor& b) { return ne(a, b); }
Tensor operator!=(const Tensor& a, Scalar b) { return ne(a, b); }
Tensor operator<(const Tensor& a, const Tensor& b) { return lt(a, b); }
Tensor operator<(const Tensor& a, Scalar b) { return lt(a, b); }
Tensor operator<=(const Tensor& a, const Tensor& b) { return le(a, b); }
Tensor operator<=(const Tensor& a, Scalar b) { return le(a, b); }
Tensor operator>(const Tensor& a, const Tensor& b) { return gt(a, b); }
Tensor operator>(const Tensor& a, Scalar b) { return gt(a, b); }
Tensor operator>=(const Tensor& a, const Tensor& b) { return ge(a, b); }
Tensor operator>=(const Tensor& a, Scalar b) { return ge(a, b); }

}  // namespace troupe
