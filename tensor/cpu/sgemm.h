// troupe's own float32 GEMM for CPUs whose OpenBLAS build falls back to generic kernels (see sgemm.cpp).
#pragma once

#include <cstdint>
#include <functional>

namespace troupe::cpu {

/// C (M x N, row stride ldc, unit column stride) = alpha * A @ B + beta * C, where element (i, k) of A is at
/// a[i*rsa + k*csa] and (k, j) of B at b[k*rsb + j*csb] (any strides: transposes are free). beta == 0 ignores
/// C's old values (NaN included), as BLAS does. Packed panels, 12x32 or 6x32 AVX-512 or 6x16 AVX2+FMA micro-kernels,
/// threads over tiles of C.
void sgemm_packed(int64_t M, int64_t N, int64_t K, float alpha, const float* a, int64_t rsa, int64_t csa,
                  const float* b, int64_t rsb, int64_t csb, float beta, float* c, int64_t ldc);

/// Writes rows [k0, k0 + kc) x columns [j0, j0 + cols) of a GEMM's B operand into one panel dst laid out
/// dst[k * nr + j] (k, j relative to k0, j0), with zeros in columns [cols, nr): B need not exist as a matrix
/// (conv2d packs its panels straight from the image). Called from several threads at once, on disjoint panels.
using BPanelPacker = std::function<void(int64_t k0, int64_t kc, int64_t j0, int64_t cols, int64_t nr, float* dst)>;

/// sgemm_packed with B given by its panel packer (K x N): C = alpha * A @ B + beta * C.
void sgemm_pack_b(int64_t M, int64_t N, int64_t K, float alpha, const float* a, int64_t rsa, int64_t csa,
                  const BPanelPacker& pack_b, float beta, float* c, int64_t ldc);

/// True when float32 GEMMs go to sgemm_packed rather than OpenBLAS: the CPU has AVX2 and FMA but OpenBLAS
/// runs its SSE3 "Prescott" kernels (the fallback of builds that do not know the CPU model), unless the
/// environment says otherwise (TROUPE_SGEMM=blas: always OpenBLAS; TROUPE_SGEMM=own: always this one).
bool use_own_sgemm();

}  // namespace troupe::cpu
