// The CUDA backend class: the kernels of backend.h it implements, defined in tensor/cuda/*.cu by family as
// tensor/cpu/ does (CUDA builds only). The fused reductions it leaves out (reverse cumsum, row moments and
// norms) the ops compose.
#pragma once

#include "../backend.h"

namespace troupe::cuda {

struct CudaBackend final : Backend {
  DeviceType type() const override { return kCUDA; }
  std::string name() const override { return "cuda"; }
  // cuda_backend.cu: memory, copies, fill
  void* allocate(size_t nbytes, Device d) override;
  void deallocate(void* p, size_t nbytes, Device d) override;
  void copy_between(const Tensor& dst, const Tensor& src) override;
  void copy(const Tensor& dst, const Tensor& src) override;
  void fill(const Tensor& dst, Scalar v) override;
  // elementwise_kernels.cu
  void unary(UnaryOp op, const Tensor& out, const Tensor& in, double p0, double p1) override;
  void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b, double alpha) override;
  void where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) override;
  // reduce_kernels.cu
  void reduce(ReduceKind op, const Tensor& out, const Tensor& idx, const Tensor& in, int64_t outer, int64_t r,
              int64_t inner) override;
  void cumsum(const Tensor& out, const Tensor& in, int64_t outer, int64_t r, int64_t inner) override;
  // softmax_kernels.cu (the fused softmax family; the other fused reductions are composed by the ops)
  bool fuses(FusedKernel k) const override;
  void softmax(const Tensor& out, const Tensor& in, int64_t outer, int64_t r, int64_t inner, bool log) override;
  void softmax_backward(const Tensor& grad_in, const Tensor& grad_out, const Tensor& out, int64_t rows, int64_t r,
                        bool log) override;
  void logsumexp(const Tensor& out, const Tensor& in, int64_t outer, int64_t r, int64_t inner) override;
  // linalg_kernels.cu (cuBLAS gemm, im2col/col2im)
  void gemm(const Tensor& c, const Tensor& a, const Tensor& b, double alpha, double beta) override;
  void im2col(const Tensor& col, const Tensor& im, int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t ph,
              int64_t pw, int64_t dh, int64_t dw) override;
  void col2im(const Tensor& im, const Tensor& col, int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t ph,
              int64_t pw, int64_t dh, int64_t dw) override;
  // optim_kernels.cu (fused Adam/AdamW)
  void adam_step(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, const Tensor& vmax,
                 const AdamStepConsts& k) override;
  // index_kernels.cu (index: int64, contiguous)
  void gather(const Tensor& out, const Tensor& in, int64_t dim, const Tensor& index) override;
  void index_select(const Tensor& out, const Tensor& in, int64_t dim, const Tensor& index) override;
  void scatter(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src, bool accumulate) override;
  void index_add(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src, double alpha) override;
  // random_kernels.cu
  void uniform(const Tensor& out, double from, double to) override;
  void normal(const Tensor& out, double mean, double std) override;
};

}  // namespace troupe::cuda
