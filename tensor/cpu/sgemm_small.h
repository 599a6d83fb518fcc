// A direct float32 GEMM for small products (sgemm_small.cpp): sgemm_packed's arithmetic without its packing.
#pragma once

#include <cstdint>

namespace troupe::cpu {

/// C = alpha * A @ B + beta * C as sgemm_packed computes it (same strides convention), for small products:
/// reads A in place (any strides) and B in place when its rows are contiguous (csb == 1), so the per-call
/// packing and bookkeeping that dominate a 16 x 32 x 64 product are skipped. Each element's sum runs over k in
/// the same order with the same operations as sgemm_packed's one-K-block case, so results are the same bits.
/// Returns false (and does nothing) when it does not apply: no AVX-512, K > 256 (sgemm_packed's K block),
/// or M * N * K above 2^18; the caller then runs sgemm_packed. Single-threaded.
bool sgemm_small(int64_t M, int64_t N, int64_t K, float alpha, const float* a, int64_t rsa, int64_t csa, const float* b,
                 int64_t rsb, int64_t csb, float beta, float* c, int64_t ldc);

}  // namespace troupe::cpu
