// The free functions of the tensor library (torch.* in PyTorch). Each op's forward and backward live
// together in the .cpp named in the section heading; every differentiable op records its backward.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "tensor.h"
#include "tensor_data.h"

namespace troupe {

// ============================================================ factories.cpp
/// Uninitialised memory of the given shape.
Tensor empty(IntArrayRef sizes, TensorOptions opts = {});
Tensor empty_strided(IntArrayRef sizes, IntArrayRef strides, TensorOptions opts = {});
Tensor zeros(IntArrayRef sizes, TensorOptions opts = {});
Tensor ones(IntArrayRef sizes, TensorOptions opts = {});
Tensor full(IntArrayRef sizes, Scalar v, TensorOptions opts = {});
Tensor empty_like(const Tensor& t, std::optional<TensorOptions> opts = std::nullopt);
Tensor zeros_like(const Tensor& t, std::optional<TensorOptions> opts = std::nullopt);
Tensor ones_like(const Tensor& t, std::optional<TensorOptions> opts = std::nullopt);
Tensor full_like(const Tensor& t, Scalar v, std::optional<TensorOptions> opts = std::nullopt);
Tensor rand_like(const Tensor& t, std::optional<TensorOptions> opts = std::nullopt);
Tensor randn_like(const Tensor& t, std::optional<TensorOptions> opts = std::nullopt);
/// [0, end) with step 1; int64 for integral arguments, the default float dtype otherwise.
Tensor arange(Scalar end, TensorOptions opts = {});
Tensor arange(Scalar start, Scalar end, Scalar step = 1, TensorOptions opts = {});
Tensor linspace(Scalar start, Scalar end, int64_t steps, TensorOptions opts = {});
Tensor eye(int64_t n, TensorOptions opts = {});
Tensor eye(int64_t n, int64_t m, TensorOptions opts = {});
/// Uniform on [0, 1).
Tensor rand(IntArrayRef sizes, TensorOptions opts = {});
/// Standard normal.
Tensor randn(IntArrayRef sizes, TensorOptions opts = {});
/// Integers uniform on [low, high); int64 unless opts say otherwise.
Tensor randint(int64_t low, int64_t high, IntArrayRef sizes, TensorOptions opts = {});
Tensor randint(int64_t high, IntArrayRef sizes, TensorOptions opts = {});
Tensor randperm(int64_t n, TensorOptions opts = {});
/// Draws 0/1 with probability p of 1, shaped like `p` (p is a tensor of probabilities).
Tensor bernoulli(const Tensor& p);
/// Wraps existing memory without copying; `deleter` (if any) is called when the storage dies.
Tensor from_blob(void* data, IntArrayRef sizes, TensorOptions opts = {},
                 std::function<void(void*)> deleter = nullptr);
Tensor from_blob(void* data, IntArrayRef sizes, IntArrayRef strides, TensorOptions opts = {},
                 std::function<void(void*)> deleter = nullptr);
/// A 1-D tensor copied from `values`. Without a dtype in opts, libtorch's rule for torch::tensor:
/// vector<double> and vector<float> give the default dtype, vector<int> and vector<int64_t> int64, the
/// others (uint8, bool, Half, BFloat16) their own; pass the dtype to keep float64 or int32.
template <typename T>
Tensor tensor(const std::vector<T>& values, TensorOptions opts = {});
/// torch::tensor: a number or a (nested) braced list (detail::TensorDataContainer). Without a dtype in
/// opts, integers give int64, floating values the default dtype, bools bool; ragged lists and mixed
/// element types are errors with libtorch's messages.
Tensor tensor(detail::TensorDataContainer data, TensorOptions opts = {});
/// A 0-dim tensor holding `v`.
Tensor scalar_tensor(Scalar v, TensorOptions opts = {});

/// Seeds the default generator (torch.manual_seed).
void manual_seed(uint64_t seed);
/// The default generator's seed.
uint64_t initial_seed();

// ============================================================ view_ops.cpp
Tensor view(const Tensor& t, IntArrayRef sizes);
Tensor reshape(const Tensor& t, IntArrayRef sizes);
Tensor transpose(const Tensor& t, int64_t d0, int64_t d1);
Tensor permute(const Tensor& t, IntArrayRef dims);
Tensor t(const Tensor& x);
Tensor squeeze(const Tensor& t);
Tensor squeeze(const Tensor& t, int64_t d);
Tensor unsqueeze(const Tensor& t, int64_t d);
Tensor expand(const Tensor& t, IntArrayRef sizes);
Tensor broadcast_to(const Tensor& t, IntArrayRef sizes);
Tensor narrow(const Tensor& t, int64_t d, int64_t start, int64_t length);
Tensor select(const Tensor& t, int64_t d, int64_t index);
Tensor slice(const Tensor& t, int64_t d, std::optional<int64_t> start, std::optional<int64_t> end, int64_t step);
Tensor flatten(const Tensor& t, int64_t start_dim = 0, int64_t end_dim = -1);
Tensor unflatten(const Tensor& t, int64_t d, IntArrayRef sizes);
Tensor as_strided(const Tensor& t, IntArrayRef sizes, IntArrayRef strides, std::optional<int64_t> offset = std::nullopt);
Tensor movedim(const Tensor& t, int64_t src, int64_t dst);
/// The shape two shapes broadcast to; throws `[op] shapes (a) and (b) are not broadcastable`.
std::vector<int64_t> broadcast_shapes(IntArrayRef a, IntArrayRef b, const char* op = "broadcast");
/// Sums `t` down to `sizes` (the reverse of broadcasting): used by backward of broadcasting ops.
Tensor sum_to(const Tensor& t, IntArrayRef sizes);

// ============================================================ copy.cpp
Tensor contiguous(const Tensor& t);
Tensor clone(const Tensor& t);
/// Converts dtype and/or device; returns `t` itself when nothing changes and copy is false.
Tensor to(const Tensor& t, Device device, ScalarType dtype, bool copy = false);

// ============================================================ elementwise.cpp
Tensor add(const Tensor& a, const Tensor& b, Scalar alpha = 1);
Tensor add(const Tensor& a, Scalar b, Scalar alpha = 1);
Tensor sub(const Tensor& a, const Tensor& b, Scalar alpha = 1);
Tensor sub(const Tensor& a, Scalar b, Scalar alpha = 1);
Tensor rsub(const Tensor& a, Scalar b);  // b - a
Tensor mul(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, Scalar b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, Scalar b);
Tensor div(Scalar a, const Tensor& b);
Tensor pow(const Tensor& a, const Tensor& e);
Tensor pow(const Tensor& a, Scalar e);
Tensor pow(Scalar a, const Tensor& e);
Tensor neg(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor log1p(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor sin(const Tensor& x);
Tensor cos(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor relu(const Tensor& x);
/// GELU; approximate is "none" (erf) or "tanh".
Tensor gelu(const Tensor& x, const std::string& approximate = "none");
Tensor silu(const Tensor& x);
/// log(1 + exp(beta*x))/beta, linear where beta*x > threshold.
Tensor softplus(const Tensor& x, double beta = 1, double threshold = 20);
Tensor leaky_relu(const Tensor& x, double negative_slope = 0.01);
Tensor elu(const Tensor& x, double alpha = 1.0);
Tensor sign(const Tensor& x);
Tensor reciprocal(const Tensor& x);
Tensor square(const Tensor& x);
Tensor erf(const Tensor& x);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor clamp(const Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max = std::nullopt);
Tensor clamp_min(const Tensor& x, Scalar min);
Tensor clamp_max(const Tensor& x, Scalar max);
Tensor eq(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, Scalar b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, Scalar b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, Scalar b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, Scalar b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, Scalar b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, Scalar b);
Tensor logical_not(const Tensor& x);
Tensor logical_and(const Tensor& a, const Tensor& b);
Tensor logical_or(const Tensor& a, const Tensor& b);
Tensor isnan(const Tensor& x);
Tensor isinf(const Tensor& x);
Tensor isfinite(const Tensor& x);
/// cond ? a : b, broadcasting all three.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor where(const Tensor& cond, const Tensor& a, Scalar b);
Tensor where(const Tensor& cond, Scalar a, const Tensor& b);
Tensor masked_fill(const Tensor& x, const Tensor& mask, Scalar v);
Tensor lerp(const Tensor& a, const Tensor& b, Scalar w);
bool equal(const Tensor& a, const Tensor& b);
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8, bool equal_nan = false);
Tensor isclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8, bool equal_nan = false);
/// torch.result_type for two tensors (0-dim tensors rank below dimensioned ones in the same category).
ScalarType result_type(const Tensor& a, const Tensor& b);
ScalarType result_type(const Tensor& a, Scalar b);

// ==================================== reduce.cpp, reduce_stats.cpp (var, std, norm), softmax.cpp, cumsum.cpp
Tensor sum(const Tensor& x, std::optional<ScalarType> dtype = std::nullopt);
Tensor sum(const Tensor& x, IntArrayRef dims, bool keepdim = false, std::optional<ScalarType> dtype = std::nullopt);
Tensor mean(const Tensor& x);
Tensor mean(const Tensor& x, IntArrayRef dims, bool keepdim = false);
/// Variance over `dims` ({}: all), dividing by count - correction (nullopt: 1). As in libtorch, the
/// correction must be spelled as an optional (`std::optional<int64_t>(2)`): a plain number there picks
/// the `unbiased` overload below, so var(x, {1}, 2) is var(x, {1}, true).
Tensor var(const Tensor& x, IntArrayRef dims, std::optional<int64_t> correction, bool keepdim = false);
Tensor std(const Tensor& x, IntArrayRef dims, std::optional<int64_t> correction, bool keepdim = false);
/// (var, mean) in one call.
std::tuple<Tensor, Tensor> var_mean(const Tensor& x, IntArrayRef dims, std::optional<int64_t> correction,
                                    bool keepdim = false);
/// unbiased: correction 1, else 0.
Tensor var(const Tensor& x, IntArrayRef dims = {}, bool unbiased = true, bool keepdim = false);
Tensor std(const Tensor& x, IntArrayRef dims = {}, bool unbiased = true, bool keepdim = false);
std::tuple<Tensor, Tensor> var_mean(const Tensor& x, IntArrayRef dims = {}, bool unbiased = true, bool keepdim = false);
// As in libtorch, a bool second argument is `unbiased` over all dims and an int one is a dim: var(x, true)
// reduces everything, var(x, 1) and var(x, {1}) reduce dim 1 (without these, true would convert to dims {1}).
inline Tensor var(const Tensor& x, bool unbiased) { return var(x, IntArrayRef{}, unbiased); }
inline Tensor var(const Tensor& x, int dim) { return var(x, IntArrayRef{static_cast<int64_t>(dim)}); }
inline Tensor var(const Tensor& x, int64_t dim) { return var(x, IntArrayRef{dim}); }
inline Tensor std(const Tensor& x, bool unbiased) { return std(x, IntArrayRef{}, unbiased); }
inline Tensor std(const Tensor& x, int dim) { return std(x, IntArrayRef{static_cast<int64_t>(dim)}); }
inline Tensor std(const Tensor& x, int64_t dim) { return std(x, IntArrayRef{dim}); }
inline std::tuple<Tensor, Tensor> var_mean(const Tensor& x, bool unbiased) {
  return var_mean(x, IntArrayRef{}, unbiased);
}
inline std::tuple<Tensor, Tensor> var_mean(const Tensor& x, int dim) {
  return var_mean(x, IntArrayRef{static_cast<int64_t>(dim)});
}
inline std::tuple<Tensor, Tensor> var_mean(const Tensor& x, int64_t dim) { return var_mean(x, IntArrayRef{dim}); }
Tensor prod(const Tensor& x);
Tensor prod(const Tensor& x, int64_t d, bool keepdim = false);
Tensor max(const Tensor& x);
std::tuple<Tensor, Tensor> max(const Tensor& x, int64_t d, bool keepdim = false);
Tensor min(const Tensor& x);
std::tuple<Tensor, Tensor> min(const Tensor& x, int64_t d, bool keepdim = false);
Tensor amax(const Tensor& x, IntArrayRef dims = {}, bool keepdim = false);
Tensor amin(const Tensor& x, IntArrayRef dims = {}, bool keepdim = false);
Tensor argmax(const Tensor& x, std::optional<int64_t> d = std::nullopt, bool keepdim = false);
Tensor argmin(const Tensor& x, std::optional<int64_t> d = std::nullopt, bool keepdim = false);
Tensor logsumexp(const Tensor& x, IntArrayRef dims, bool keepdim = false);
Tensor softmax(const Tensor& x, int64_t d, std::optional<ScalarType> dtype = std::nullopt);
Tensor log_softmax(const Tensor& x, int64_t d, std::optional<ScalarType> dtype = std::nullopt);
Tensor cumsum(const Tensor& x, int64_t d, std::optional<ScalarType> dtype = std::nullopt);
Tensor all(const Tensor& x);
Tensor all(const Tensor& x, int64_t d, bool keepdim = false);
Tensor any(const Tensor& x);
Tensor any(const Tensor& x, int64_t d, bool keepdim = false);
Tensor norm(const Tensor& x, double p = 2);
Tensor norm(const Tensor& x, double p, IntArrayRef dims, bool keepdim = false);
Tensor count_nonzero(const Tensor& x);

// ============================================================ linalg.cpp
/// torch.matmul: 1-D dot, 2-D mm, batched with broadcasting of the batch dims.
Tensor matmul(const Tensor& a, const Tensor& b);
/// (n, k) @ (k, m) -> (n, m)
Tensor mm(const Tensor& a, const Tensor& b);
/// (B, n, k) @ (B, k, m) -> (B, n, m)
Tensor bmm(const Tensor& a, const Tensor& b);
/// beta * bias + alpha * (a @ b), bias broadcast to (n, m).
Tensor addmm(const Tensor& bias, const Tensor& a, const Tensor& b, Scalar beta = 1, Scalar alpha = 1);
Tensor dot(const Tensor& a, const Tensor& b);
Tensor mv(const Tensor& a, const Tensor& v);
Tensor outer(const Tensor& a, const Tensor& b);
/// x @ w^T + b (torch.nn.functional.linear): x (*, in), w (out, in), b (out) or undefined.
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b = Tensor());

// ============================================================ join.cpp, index_ops.cpp
Tensor cat(TensorList tensors, int64_t d = 0);
Tensor stack(TensorList tensors, int64_t d = 0);
std::vector<Tensor> split(const Tensor& x, int64_t size, int64_t d = 0);
std::vector<Tensor> split_with_sizes(const Tensor& x, IntArrayRef sizes, int64_t d = 0);
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t d = 0);
std::vector<Tensor> unbind(const Tensor& x, int64_t d = 0);
Tensor gather(const Tensor& x, int64_t d, const Tensor& index);
Tensor scatter(const Tensor& x, int64_t d, const Tensor& index, const Tensor& src);
Tensor scatter(const Tensor& x, int64_t d, const Tensor& index, Scalar v);
Tensor scatter_add(const Tensor& x, int64_t d, const Tensor& index, const Tensor& src);
Tensor index_select(const Tensor& x, int64_t d, const Tensor& index);
Tensor index_add(const Tensor& x, int64_t d, const Tensor& index, const Tensor& src, Scalar alpha = 1);
/// (*) int64 class indices -> (*, num_classes) int64; num_classes = -1 infers max + 1.
Tensor one_hot(const Tensor& x, int64_t num_classes = -1);
Tensor repeat(const Tensor& x, IntArrayRef repeats);
Tensor flip(const Tensor& x, IntArrayRef dims);
Tensor masked_select(const Tensor& x, const Tensor& mask);
/// Indices of the non-zero elements, (n, dim) int64.
Tensor nonzero(const Tensor& x);
Tensor tril(const Tensor& x, int64_t diagonal = 0);
Tensor triu(const Tensor& x, int64_t diagonal = 0);

// ============================================================ conv.cpp, pool.cpp, dropout.cpp
/// input (N, C_in, H, W), weight (C_out, C_in/groups, kH, kW), bias (C_out) or undefined.
Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(), IntArrayRef stride = 1,
              IntArrayRef padding = 0, IntArrayRef dilation = 1, int64_t groups = 1);
/// The transposed convolution (the input gradient of conv2d with the same geometry), plus bias: input
/// (N, C_in, H, W), weight (C_in, C_out/groups, kH, kW), bias (C_out) or undefined; output size
/// (H - 1) * stride - 2 * padding + dilation * (kH - 1) + output_padding + 1 per spatial dim.
Tensor conv_transpose2d(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(), IntArrayRef stride = 1,
                        IntArrayRef padding = 0, IntArrayRef output_padding = 0, int64_t groups = 1,
                        IntArrayRef dilation = 1);
/// input (N, C_in, L) or (C_in, L), weight (C_out, C_in/groups, kL): conv2d on a height-1 image.
Tensor conv1d(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(), IntArrayRef stride = 1,
              IntArrayRef padding = 0, IntArrayRef dilation = 1, int64_t groups = 1);
/// input (N, C_in, L) or (C_in, L), weight (C_in, C_out/groups, kL): conv_transpose2d on a height-1 image.
Tensor conv_transpose1d(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(), IntArrayRef stride = 1,
                        IntArrayRef padding = 0, IntArrayRef output_padding = 0, int64_t groups = 1,
                        IntArrayRef dilation = 1);
Tensor max_pool2d(const Tensor& input, IntArrayRef kernel_size, IntArrayRef stride = {}, IntArrayRef padding = 0,
                  IntArrayRef dilation = 1, bool ceil_mode = false);
std::tuple<Tensor, Tensor> max_pool2d_with_indices(const Tensor& input, IntArrayRef kernel_size, IntArrayRef stride = {},
                                                   IntArrayRef padding = 0, IntArrayRef dilation = 1, bool ceil_mode = false);
Tensor avg_pool2d(const Tensor& input, IntArrayRef kernel_size, IntArrayRef stride = {}, IntArrayRef padding = 0,
                  bool ceil_mode = false, bool count_include_pad = true,
                  std::optional<int64_t> divisor_override = std::nullopt);
/// Zeroes each element with probability p and scales the rest by 1/(1-p) when train is true.
Tensor dropout(const Tensor& x, double p = 0.5, bool train = true);

// ============================================================ random.cpp (in-place fills)
Tensor& normal_(Tensor& t, double mean = 0, double std = 1);
Tensor& uniform_(Tensor& t, double from = 0, double to = 1);

// ============================================================ parallel.cpp
/// Threads used by large CPU ops (torch.set_num_threads); defaults to the number of cores.
void set_num_threads(int n);
int get_num_threads();

}  // namespace troupe

#include "ops_inl.h"
