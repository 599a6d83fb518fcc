// The kernel interface each device implements. Ops (elementwise.cpp, reduce.cpp, ...) check arguments,
// allocate outputs and record autograd; the arithmetic happens behind `backend(device)`. The CPU backend
// implements everything; a CUDA backend registers itself when the toolkit is found and overrides what
// it supports; whatever a backend leaves out throws `[op] not implemented for device cuda`.
#pragma once

#include <cstdint>
#include <string>

#include "scalar.h"
#include "tensor.h"

namespace troupe {

/// Elementwise functions of one tensor; `p0`, `p1` carry parameters (slope, beta, threshold).
enum class UnaryOp : uint8_t {
  Neg, Abs, Exp, Log, Log1p, Sqrt, Rsqrt, Sin, Cos, Tanh, Sigmoid, Relu, Gelu, GeluTanh, Silu, Sign,
  Reciprocal, Square, Erf, LogicalNot, IsNan, IsInf, IsFinite, Softplus /*p0 beta, p1 threshold*/,
  LeakyRelu /*p0 slope*/, Elu /*p0 alpha*/, PowScalar /*p0 exponent*/, RPowScalar /*p0 base*/,
  Floor, Ceil, Round, Trunc,
  // derivatives used by backward functions: out = f'(x)
  GeluGrad, GeluTanhGrad, SiluGrad, SoftplusGrad /*p0 beta, p1 threshold*/, EluGrad /*p0 alpha*/,
};

/// Elementwise functions of two tensors of the same dtype; `alpha` scales b for Add/Sub.
enum class BinaryOp : uint8_t {
  Add, Sub, Mul, Div, Pow, Maximum, Minimum, Eq, Ne, Lt, Le, Gt, Ge, LogicalAnd, LogicalOr,
  // backward helpers
  ReluGrad /* a * (b > 0) */, LeakyReluGrad /* a * (b > 0 ? 1 : alpha) */,
  SigmoidGrad /* a * b * (1 - b), b = sigmoid output */, TanhGrad /* a * (1 - b*b) */,
};

/// Reduction kernels along one dim of a tensor viewed as (outer, reduced, inner); internal to the tensor layer
/// (torch.distributed's reduce operations are troupe::comm::ReduceOp).
enum class ReduceKind : uint8_t { Sum, Prod, Max, Min, ArgMax, ArgMin, All, Any };

/// Fused kernels a backend may offer on top of the primitives. An op asks `fuses(k)` first and, where the
/// backend has none, composes the result from the primitives instead. AdamStep: one pass of Adam/AdamW
/// over a parameter (optim/adam.cpp asks for it on CUDA; the CPU's fused Adam lives in optim).
enum class FusedKernel : uint8_t { Softmax, LogSumExp, ReverseCumsum, VarMeanRows, Norm2Rows, AdamStep };

/// The constants of one fused Adam/AdamW step (Backend::adam_step), as optim/adam.cpp computes them on the
/// host: d = sign * g (+ weight_decay * p for Adam's coupled decay); AdamW first scales p by `decay`;
/// m = b1 m + (1 - b1) d; v = b2 v + (1 - b2) d d; [amsgrad] vmax = max(vmax, v);
/// p += neg_step_size * m / (sqrt(v or vmax) / bias_correction2_sqrt + eps).
struct AdamStepConsts {
  double sign = 1, decay = 1, weight_decay = 0, beta1 = 0.9, one_minus_beta1 = 0.1, beta2 = 0.999,
         one_minus_beta2 = 0.001, bias_correction2_sqrt = 1, eps = 1e-8, neg_step_size = 0;
  bool grad_decay = false, amsgrad = false, decoupled = false;
};

struct Backend {
  virtual ~Backend() = default;
  virtual DeviceType type() const = 0;
  virtual std::string name() const = 0;

  // memory
  virtual void* allocate(size_t nbytes, Device d) = 0;
  virtual void deallocate(void* p, size_t nbytes, Device d) = 0;
  /// dst = src elementwise (same sizes; dtype conversion; any strides; both on this device).
  virtual void copy(const Tensor& dst, const Tensor& src);
  /// Copies between devices (either side may be the CPU); same dtype and sizes, both contiguous.
  virtual void copy_between(const Tensor& dst, const Tensor& src);
  virtual void fill(const Tensor& dst, Scalar v);

  // elementwise: operands have out's sizes (broadcast inputs arrive expanded, with stride 0)
  virtual void unary(UnaryOp op, const Tensor& out, const Tensor& in, double p0, double p1);
  /// a and b share one dtype; out has that dtype, or bool for comparisons.
  virtual void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b, double alpha);
  /// out = cond ? a : b; cond is bool.
  virtual void where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b);

  // reductions: `in` is contiguous, viewed as (outer, r, inner); out (and idx for arg/max/min) are
  // contiguous (outer, inner). Sum/Prod accumulate in double for float64, float for other floats.
  virtual void reduce(ReduceKind op, const Tensor& out, const Tensor& idx, const Tensor& in, int64_t outer, int64_t r,
                      int64_t inner);
  /// Cumulative sum along the middle dim of (outer, r, inner); contiguous in and out.
  virtual void cumsum(const Tensor& out, const Tensor& in, int64_t outer, int64_t r, int64_t inner);

  // fused reductions (see FusedKernel; each throws unless `fuses` says yes): floating tensors, contiguous in
  // and out, `in` viewed as (outer, r, inner) and reduced or scanned along r
  virtual bool fuses(FusedKernel k) const;
  /// out = softmax (log: log_softmax) of in along r; out has in's sizes.
  virtual void softmax(const Tensor& out, const Tensor& in, int64_t outer, int64_t r, int64_t inner, bool log);
  /// Backward along the last dim of `rows` rows of length r: grad_in from grad_out and the forward's out.
  virtual void softmax_backward(const Tensor& grad_in, const Tensor& grad_out, const Tensor& out, int64_t rows,
                                int64_t r, bool log);
  /// out (outer, inner) = log(sum(exp(in))) along r.
  virtual void logsumexp(const Tensor& out, const Tensor& in, int64_t outer, int64_t r, int64_t inner);
  /// One Adam/AdamW step in place on contiguous p, m, v (and vmax when amsgrad) from g, all of one floating
  /// dtype and size (FusedKernel::AdamStep).
  virtual void adam_step(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, const Tensor& vmax,
                         const AdamStepConsts& k);
  /// out[j] = sum_{k >= j} in[k] along r (cumsum's backward); any dtype but bool.
  virtual void reverse_cumsum(const Tensor& out, const Tensor& in, int64_t outer, int64_t r, int64_t inner);
  /// Per row of in (rows, r), computed in double: var = squared deviations / max(0, r - correction), and the
  /// mean, written to var and mean (rows elements each; a floating dtype, not necessarily in's).
  virtual void var_mean_rows(const Tensor& var, const Tensor& mean, const Tensor& in, int64_t rows, int64_t r,
                             int64_t correction);
  /// Per row of in (rows, r): the 2-norm, computed in double, written to out (rows elements, in's dtype).
  virtual void norm2_rows(const Tensor& out, const Tensor& in, int64_t rows, int64_t r);

  // linear algebra
  /// C = alpha * op(A) @ op(B) + beta * C for 2-D float tensors (any strides; C contiguous).
  virtual void gemm(const Tensor& c, const Tensor& a, const Tensor& b, double alpha, double beta);

  // indexing (index is int64, contiguous)
  virtual void gather(const Tensor& out, const Tensor& in, int64_t dim, const Tensor& index);
  /// accumulate: out[...index...] += src, else =.
  virtual void scatter(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src, bool accumulate);
  virtual void index_select(const Tensor& out, const Tensor& in, int64_t dim, const Tensor& index);
  virtual void index_add(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src, double alpha);

  // convolution helpers (contiguous NCHW)
  virtual void im2col(const Tensor& col, const Tensor& im, int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t ph,
                      int64_t pw, int64_t dh, int64_t dw);
  virtual void col2im(const Tensor& im, const Tensor& col, int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t ph,
                      int64_t pw, int64_t dh, int64_t dw);

  // random (from the device's generator state, advanced)
  virtual void uniform(const Tensor& out, double from, double to);
  virtual void normal(const Tensor& out, double mean, double std);

 protected:
  [[noreturn]] void not_implemented(const char* op) const;
};

/// The backend for a device type; throws if none is registered (e.g. cuda in a CPU-only build).
Backend& backend(DeviceType t);
inline Backend& backend(const Tensor& t) { return backend(t.device().type); }
/// Registers (or replaces) the backend for its device type.
void register_backend(Backend* b);
/// True when a backend for `t` is registered (CUDA: built with CUDA).
bool has_backend(DeviceType t);

namespace cuda {
/// True when built with CUDA and at least one device is present.
bool is_available();
int device_count();
#ifdef TROUPE_WITH_CUDA
/// Registers the CUDA backend once (defined in cuda/cuda_backend.cu); backend(kCUDA) calls it, so that the
/// backend exists even though a static library drops object files nothing references.
void ensure_backend();
#endif
}  // namespace cuda

}  // namespace troupe
