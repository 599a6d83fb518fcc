// PyTorch-style indexing (`x[0, 1:3, None, ..., mask]`), spelled as libtorch spells it:
// `x.index({0, Slice(1, 3), None, Ellipsis, mask})`.
#pragma once

#include <optional>
#include <type_traits>

#include "tensor.h"

namespace troupe {
namespace indexing {

struct EllipsisIndexType {};
struct NoneIndexType {};
constexpr EllipsisIndexType Ellipsis{};
constexpr NoneIndexType None{};

/// A bound of a Slice: an integer, or omitted (None / std::nullopt / an empty optional).
struct SliceBound {
  SliceBound() = default;
  template <typename T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>, int> = 0>
  SliceBound(T v) : value(static_cast<int64_t>(v)) {}
  SliceBound(NoneIndexType) {}
  SliceBound(std::nullopt_t) {}
  SliceBound(std::optional<int64_t> v) : value(v) {}
  std::optional<int64_t> value;
};

/// `start:stop:step` (as libtorch: `Slice(None, 2)`, `Slice(1)`, `Slice(None, None, 2)`); an omitted
/// bound is Python's omitted bound.
struct Slice {
  Slice(SliceBound start = {}, SliceBound stop = {}, int64_t step = 1)
      : start(start.value), stop(stop.value), step(step) {}
  std::optional<int64_t> start, stop;
  int64_t step;
};

/// One entry of an index list: an integer, a Slice, None, Ellipsis, a bool, or a tensor (int64 indices
/// or a bool mask).
struct TensorIndex {
  enum class Kind { Integer, Slice, None, Ellipsis, Boolean, Tensor };
  TensorIndex(int64_t i) : kind(Kind::Integer), integer(i) {}
  TensorIndex(int i) : kind(Kind::Integer), integer(i) {}
  TensorIndex(bool b) : kind(Kind::Boolean), boolean(b) {}
  TensorIndex(Slice s) : kind(Kind::Slice), slice(s) {}
  TensorIndex(NoneIndexType) : kind(Kind::None) {}
  TensorIndex(EllipsisIndexType) : kind(Kind::Ellipsis) {}
  TensorIndex(const char* s);  // "..." only
  TensorIndex(Tensor t) : kind(Kind::Tensor), tensor(std::move(t)) {}

  Kind kind;
  int64_t integer = 0;
  bool boolean = false;
  Slice slice;
  Tensor tensor;
};

}  // namespace indexing

/// x[idx...]: basic indexing gives a view; tensor indices (advanced indexing) give a copy.
Tensor index(const Tensor& x, ArrayRef<indexing::TensorIndex> idx);
/// x[idx...] = v (in place; v broadcast to the indexed shape).
void index_put_(Tensor& x, ArrayRef<indexing::TensorIndex> idx, const Tensor& v);
void index_put_(Tensor& x, ArrayRef<indexing::TensorIndex> idx, Scalar v);

}  // namespace troupe
