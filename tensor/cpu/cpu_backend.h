// The CPU backend: every kernel of backend.h. Its methods are spread over the cpu/*.cpp files by kind.
#pragma once

#include "../backend.h"

namespace troupe::cpu {

struct CpuBackend final : Backend {
  DeviceType type() const override { return kCPU; }
  std::string name() const override { return "cpu"; }
  void* allocate(size_t nbytes, Device d) override;
  void deallocate(void* p, size_t nbytes, Device d) override;
  void copy(const Tensor& dst, const Tensor& src) override;
  void fill(const Tensor& dst, Scalar v) override;
  void unary(UnaryOp op, const Tensor& out, const Tensor& in, double p0, double p1) override;
  void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b, double alpha) override;
  void where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) override;
  // reduce_kernels.cpp
  void reduce(ReduceKind op, const Tensor& out, const Tensor& idx, const Tensor& in, int64_t outer, int64_t r,
              int64_t inner) override;
  void cumsum(const Tensor& out, const Tensor& in, int64_t outer, int64_t r, int64_t inner) override;
  // softmax_kernels.cpp (the loops are in softmax_kernels.h)
  bool fuses(FusedKernel k) const override { return k != FusedKernel::AdamStep; }  // (optim fuses Adam on the CPU)
  void softmax(const Tensor& out, const Tensor& in, int64_t outer, int64_t r, int64_t inner, bool log) override;
  void softmax_backward(const Tensor& grad_in, const Tensor& grad_out, const Tensor& out, int64_t rows, int64_t r,
                        bool log) override;
  void logsumexp(const Tensor& out, const Tensor& in, int64_t outer, int64_t r, int64_t inner) override;
  void reverse_cumsum(const Tensor& out, const Tensor& in, int64_t outer, int64_t r, int64_t inner) override;
  void var_mean_rows(const Tensor& var, const Tensor& mean, const Tensor& in, int64_t rows, int64_t r,
                     int64_t correction) override;
  void norm2_rows(const Tensor& out, const Tensor& in, int64_t rows, int64_t r) override;
  // linalg_kernels.cpp
  void gemm(const Tensor& c, const Tensor& a, const Tensor& b, double alpha, double beta) override;
  void im2col(const Tensor& col, const Tensor& im, int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t ph,
              int64_t pw, int64_t dh, int64_t dw) override;
  void col2im(const Tensor& im, const Tensor& col, int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t ph,
              int64_t pw, int64_t dh, int64_t dw) override;
  // index_kernels.cpp
  void gather(const Tensor& out, const Tensor& in, int64_t dim, const Tensor& index) override;
  void scatter(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src, bool accumulate) override;
  void index_select(const Tensor& out, const Tensor& in, int64_t dim, const Tensor& index) override;
  void index_add(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src, double alpha) override;
  // random_kernels.cpp
  void uniform(const Tensor& out, double from, double to) override;
  void normal(const Tensor& out, double mean, double std) override;
};

}  // namespace troupe::cpu
