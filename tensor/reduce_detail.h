// Internal to the reduction ops (reduce.cpp, reduce_stats.cpp, softmax.cpp, cumsum.cpp): the dim-mask
// helpers, the reduction driver run_reduction() and the backward helpers they share. Not a public header.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend.h"
#include "op_helpers.h"
#include "tensor.h"

namespace troupe::reduce_detail {

/// The reduced dims of a tensor, one flag per dim.
using Mask = std::vector<bool>;

using op_detail::wrap_dim;
/// The reduced dims as a mask over x's dims; an empty list reduces every dim (as PyTorch's dim=[]).
Mask dims_mask(const char* op, const Tensor& x, IntArrayRef dims);
Mask all_mask(const Tensor& x);
Mask one_dim_mask(const Tensor& x, int64_t d);
/// x's sizes with the masked dims dropped (or kept as 1 when keepdim).
std::vector<int64_t> reduced_shape(IntArrayRef sizes, const Mask& m, bool keepdim);
/// The number of elements reduced into each output element.
int64_t reduced_count(IntArrayRef sizes, const Mask& m);
std::vector<int64_t> mask_dims(const Mask& m);

inline bool is_16bit_float(ScalarType t) { return t == kFloat16 || t == kBFloat16; }
/// The dtype the reduce kernel accumulates a dtype in.
inline ScalarType acc_dtype(ScalarType t) {
  if (is_16bit_float(t)) return kFloat32;
  if (is_floating_point(t)) return t;
  return kInt64;
}
/// Sum and prod of integers (and bool) give int64, as in PyTorch.
inline ScalarType sum_dtype(ScalarType t) { return is_integral(t, true) ? kInt64 : t; }
[[noreturn]] void not_for_dtype(const char* op, ScalarType t);

/// Reduces x over the dims in `mask` with `op` into `out` (and `idx`, int64, for the index-producing ops;
/// either may be undefined where the op allows it). out/idx are contiguous, hold the kept dims of x in x's
/// order (any shape with that many elements), and out may have any dtype the accumulator converts to.
/// Index-producing ops must reduce a single dim, or every dim of a contiguous x (flat indices).
void run_reduction(ReduceKind op, const Tensor& x_in, const Mask& mask, const Tensor& out, const Tensor& idx);
/// A new tensor: op over the dims of mask, in dtype `od`.
Tensor reduce_to(ReduceKind op, const Tensor& x, const Mask& mask, bool keepdim, ScalarType od);
/// Sum over mask in dtype od, without autograd.
Tensor sum_impl(const Tensor& x, const Mask& mask, bool keepdim, ScalarType od);
/// Mean in the accumulator dtype (float for 16-bit floats), not yet converted back.
Tensor mean_acc(const Tensor& x, const Mask& mask, bool keepdim);

/// g (shape of a reduction's output) reshaped so that it broadcasts against the input (keepdim shape).
Tensor keep(const Tensor& g, IntArrayRef sizes, const Mask& mask, bool keepdim);
Tensor expand_back(const Tensor& g, const std::vector<int64_t>& sizes, const Mask& mask, bool keepdim);
/// (outer, r, inner) of a contiguous tensor around dim d.
void split_at(const Tensor& x, int64_t d, int64_t& outer, int64_t& r, int64_t& inner);
/// When the reduced dims are the trailing dims of x (size-1 kept dims aside) or all of them: x viewed as
/// (outer, r) rows once contiguous.
bool trailing_rows(const Tensor& x, const Mask& mask, int64_t& outer, int64_t& r);

}  // namespace troupe::reduce_detail
