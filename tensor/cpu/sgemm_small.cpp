// sgemm_small (sgemm_small.h): 6 x 32 tiles of C in AVX-512 registers, A broadcast from wherever it lies, B rows
// loaded in place (or, for a transposed B or a ragged last column panel, from a small k-major copy). The tile
// body is sgemm.cpp's micro-kernel (acc += a_ik * b_k, then alpha * acc [+ beta * c]), so every element sees
// the same operations in the same order as there.
#include "sgemm_small.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace troupe::cpu {

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(TROUPE_NO_TARGET_CLONES)

namespace {

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"  // vector locals only; no vector is passed to a call

typedef float v16f __attribute__((vector_size(64)));
constexpr int64_t MR = 6, NR = 32, W = 16;
constexpr int64_t kMaxK = 256;                  // sgemm_packed's K block: one block, so the same sums
constexpr int64_t kMaxWork = int64_t(1) << 18;  // M * N * K up to this

bool have_avx512() {
  static const bool yes = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
                          __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq");
  return yes;
}

// One tile: rows r[0..MR) of A (pointers to element (i, 0); rows past mr repeat the last real row, their
// results are dropped), B rows at b + k * ldb (NR floats each), C rows c + i * ldc, mr x nr of it stored.
__attribute__((target("arch=x86-64-v4"))) void tile(int64_t kc, const float* const* r, int64_t csa, const float* b,
                                                    int64_t ldb, float* c, int64_t ldc, int64_t mr, int64_t nr,
                                                    float alpha, float beta) {
  v16f acc[MR][2];
  for (int i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = v16f{};
  for (int64_t k = 0; k < kc; ++k) {
    v16f b0, b1;
    std::memcpy(&b0, b + k * ldb, sizeof(v16f));
    std::memcpy(&b1, b + k * ldb + W, sizeof(v16f));
    for (int i = 0; i < MR; ++i) {
      const v16f ai = r[i][k * csa] - v16f{};  // as sgemm.cpp: x - 0.0f keeps -0.0f
      acc[i][0] += ai * b0;
      acc[i][1] += ai * b1;
    }
  }
  if (mr == MR && nr == NR) {
    for (int i = 0; i < MR; ++i) {
      float* row = c + i * ldc;
      v16f r0 = acc[i][0] * alpha, r1 = acc[i][1] * alpha;
      if (beta != 0.0f) {
        v16f c0, c1;
        std::memcpy(&c0, row, sizeof(v16f));
        std::memcpy(&c1, row + W, sizeof(v16f));
        c0 *= beta;
        c1 *= beta;
        r0 += c0;
        r1 += c1;
      }
      std::memcpy(row, &r0, sizeof(v16f));
      std::memcpy(row + W, &r1, sizeof(v16f));
    }
    return;
  }
  float t[MR][NR];
  for (int i = 0; i < MR; ++i) {
    std::memcpy(t[i], &acc[i][0], sizeof(v16f));
    std::memcpy(t[i] + W, &acc[i][1], sizeof(v16f));
  }
  for (int64_t i = 0; i < mr; ++i)
    for (int64_t j = 0; j < nr; ++j) {
      float& x = c[i * ldc + j];
      const float v = alpha * t[i][j];
      x = beta != 0.0f ? beta * x + v : v;
    }
}

#pragma GCC diagnostic pop

}  // namespace

bool sgemm_small(int64_t M, int64_t N, int64_t K, float alpha, const float* a, int64_t rsa, int64_t csa, const float* b,
                 int64_t rsb, int64_t csb, float beta, float* c, int64_t ldc) {
  if (M <= 0 || N <= 0 || K <= 0 || K > kMaxK || M * N * K > kMaxWork || !have_avx512()) return false;
  thread_local std::vector<float> bbuf;
  for (int64_t j0 = 0; j0 < N; j0 += NR) {
    const int64_t nr = std::min(NR, N - j0);
    const float* bp = b + j0 * csb;
    int64_t ldb = rsb;
    if (csb != 1 || nr < NR) {  // a k-major copy of this column panel, zero past its last column
      bbuf.assign(static_cast<size_t>(K * NR), 0.0f);
      float* d = bbuf.data();
      if (csb == 1) {
        for (int64_t k = 0; k < K; ++k) std::memcpy(d + k * NR, bp + k * rsb, static_cast<size_t>(nr) * sizeof(float));
      } else {
        for (int64_t j = 0; j < nr; ++j)
          for (int64_t k = 0; k < K; ++k) d[k * NR + j] = bp[j * csb + k * rsb];
      }
      bp = d;
      ldb = NR;
    }
    for (int64_t i0 = 0; i0 < M; i0 += MR) {
      const int64_t mr = std::min(MR, M - i0);
      const float* rows[MR];
      for (int64_t i = 0; i < MR; ++i) rows[i] = a + (i0 + std::min(i, mr - 1)) * rsa;
      tile(K, rows, csa, bp, ldb, c + i0 * ldc + j0, ldc, mr, nr, alpha, beta);
    }
  }
  return true;
}

#else

bool sgemm_small(int64_t, int64_t, int64_t, float, const float*, int64_t, int64_t, const float*, int64_t, int64_t, float,
                 float*, int64_t) {
  return false;
}

#endif

}  // namespace troupe::cpu
