// troupe's float32 GEMM (sgemm.h): used in place of OpenBLAS where OpenBLAS does not know the CPU and runs
// its SSE3 fallback kernels, which on an AVX-512 Xeon are 3-4x slower than the machine allows.
//
// BLIS-style loops: for each block of KC rows of B (and KC columns of A), B is packed into panels of NR
// columns (by a strided copy, or by the caller's packer: sgemm_pack_b) and A into panels of MR rows
// (zero-padded at the edges, any input strides), then a micro-kernel (broadcast A, two vector loads of B per k:
// 12x32 tiles in 24 accumulators with AVX-512, 6x16 in 12 with AVX2) computes each tile of C; the tiles of one
// block are spread over the threads. The first K block applies beta, the later ones accumulate.
#include "sgemm.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "../parallel.h"
#include "softmax_kernels.h"  // TROUPE_SIMD_CLONES, the vector types

extern "C" {
char* openblas_get_corename(void) __attribute__((weak));
}

namespace troupe::cpu {

namespace {

using simd::v8f;

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"  // vector locals only; no vector is passed to a call

constexpr int64_t MR = 6;     // rows of the AVX2 tile (12 of 16 ymm registers accumulate)
// rows of the AVX-512 tile (24 of 32 zmm registers accumulate) for GEMMs with M >= 48 and K >= 128; 6 rows
// otherwise. CPU time at 1 thread against 6 rows: 1024^3 +12%, 64x576 @ 576x3136 +9%, but 576x64 @ 64x3136 -12%
// and convs with 16-32 output channels slower.
constexpr int64_t MR512 = 12;
constexpr int64_t KC = 256;   // k per packed block: an A panel (MR x 256) and a B panel (256 x NR) stay in L1/L2
constexpr int64_t MC = 1020;  // rows of A packed at once (a multiple of both MRs; 1 MiB)
constexpr int64_t NC = 2048;  // columns of B packed at once (a multiple of NR; 2 MiB)

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(TROUPE_NO_TARGET_CLONES)
#define TROUPE_SGEMM_AVX512 1
typedef float v16f __attribute__((vector_size(64)));
#endif

/// The micro-kernel for vectors V of W floats, tiles MR x (2W): c[0..mr) x [0..nr) (row stride ldc) =
/// (first ? beta * c : c) + alpha * (a panel @ b panel) over kc. Always inlined into one function per ISA.
template <typename V, int W, int TM>
__attribute__((always_inline)) inline void micro_kernel_body(int64_t kc, const float* a, const float* b, float* c,
                                                             int64_t ldc, int64_t mr, int64_t nr, float alpha,
                                                             float beta, bool first) {
  constexpr int NRV = 2 * W;
  V acc[TM][2];
  for (int i = 0; i < TM; ++i) acc[i][0] = acc[i][1] = V{};
  for (int64_t k = 0; k < kc; ++k) {
    V b0, b1;
    std::memcpy(&b0, b, sizeof(V));
    std::memcpy(&b1, b + W, sizeof(V));
    for (int i = 0; i < TM; ++i) {
      const V ai = a[i] - V{};  // a broadcast: x - 0.0f folds to x (V{} + x would not: -0.0f + 0.0f is +0.0f)
      acc[i][0] += ai * b0;
      acc[i][1] += ai * b1;
    }
    a += TM;
    b += NRV;
  }
  if (nr == NRV) {  // full-width rows (all of them, or the first mr of an edge tile): vector stores
    for (int i = 0; i < TM; ++i) {
      if (i == mr) break;
      float* row = c + i * ldc;
      V r0 = acc[i][0] * alpha, r1 = acc[i][1] * alpha;
      if (!first || beta != 0.0f) {
        V c0, c1;
        std::memcpy(&c0, row, sizeof(V));
        std::memcpy(&c1, row + W, sizeof(V));
        if (first) {
          c0 *= beta;
          c1 *= beta;
        }
        r0 += c0;
        r1 += c1;
      }
      std::memcpy(row, &r0, sizeof(V));
      std::memcpy(row + W, &r1, sizeof(V));
    }
    return;
  }
  float t[TM][NRV];
  for (int i = 0; i < TM; ++i) {
    std::memcpy(t[i], &acc[i][0], sizeof(V));
    std::memcpy(t[i] + W, &acc[i][1], sizeof(V));
  }
  for (int64_t i = 0; i < mr; ++i)
    for (int64_t j = 0; j < nr; ++j) {
      float& x = c[i * ldc + j];
      const float v = alpha * t[i][j];
      x = !first ? x + v : (beta != 0.0f ? beta * x + v : v);
    }
}

/// 6 x 16 tiles in 8-float vectors (AVX2+FMA clone, baseline otherwise).
TROUPE_SIMD_CLONES void micro_kernel_16(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, int64_t mr,
                                        int64_t nr, float alpha, float beta, bool first) {
  micro_kernel_body<v8f, 8, 6>(kc, a, b, c, ldc, mr, nr, alpha, beta, first);
}

#ifdef TROUPE_SGEMM_AVX512
/// 12 x 32 tiles in 16-float vectors; only called where the CPU has AVX-512 (have_avx512()).
__attribute__((target("arch=x86-64-v4"))) void micro_kernel_32(int64_t kc, const float* a, const float* b, float* c,
                                                               int64_t ldc, int64_t mr, int64_t nr, float alpha,
                                                               float beta, bool first) {
  micro_kernel_body<v16f, 16, MR512>(kc, a, b, c, ldc, mr, nr, alpha, beta, first);
}

/// 6 x 32 tiles in 16-float vectors: GEMMs with few rows or a short K, where 12-row tiles waste rows or spend
/// their time loading and storing C.
__attribute__((target("arch=x86-64-v4"))) void micro_kernel_32x6(int64_t kc, const float* a, const float* b, float* c,
                                                                 int64_t ldc, int64_t mr, int64_t nr, float alpha,
                                                                 float beta, bool first) {
  micro_kernel_body<v16f, 16, MR>(kc, a, b, c, ldc, mr, nr, alpha, beta, first);
}
#endif

bool have_avx512() {
#ifdef TROUPE_SGEMM_AVX512
  static const bool yes = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
                          __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq");
  return yes;
#else
  return false;
#endif
}

/// Packs rows [i0, i0 + mc) x cols [p0, p0 + kc) of A into MR-row panels: panel q holds, for each k, its tm
/// rows' elements (zero past the last row).
void pack_a(const float* a, int64_t rsa, int64_t csa, int64_t i0, int64_t mc, int64_t p0, int64_t kc, int64_t tm,
            float* dst) {
  const int64_t panels = (mc + tm - 1) / tm;
  parallel_for(0, panels, std::max<int64_t>(1, kGrainSize / (tm * kc)), [&](int64_t pb, int64_t pe) {
    for (int64_t q = pb; q < pe; ++q) {
      float* d = dst + q * tm * kc;
      const int64_t r0 = q * tm, rows = std::min(tm, mc - r0);
      for (int64_t k = 0; k < kc; ++k) {
        const float* src = a + (i0 + r0) * rsa + (p0 + k) * csa;
        int64_t i = 0;
        for (; i < rows; ++i) d[k * tm + i] = src[i * rsa];
        for (; i < tm; ++i) d[k * tm + i] = 0.0f;
      }
    }
  });
}

/// Packs rows [p0, p0 + kc) x cols [j0, j0 + cols) of a strided B into one NR-column panel (zero past cols).
void pack_b_panel(const float* b, int64_t rsb, int64_t csb, int64_t p0, int64_t kc, int64_t j0, int64_t cols,
                  int64_t NR, float* d) {
  const float* base = b + p0 * rsb + j0 * csb;
  if (csb == 1 && cols == NR) {  // rows of B are contiguous: fixed-size copies the compiler inlines
    for (int64_t k = 0; k < kc; ++k) {
      if (NR == 32) std::memcpy(d + k * NR, base + k * rsb, 32 * sizeof(float));
      else std::memcpy(d + k * NR, base + k * rsb, 16 * sizeof(float));
    }
    return;
  }
  if (rsb == 1) {  // a transposed B: read each column of the panel contiguously
    for (int64_t j = 0; j < cols; ++j) {
      const float* src = base + j * csb;
      for (int64_t k = 0; k < kc; ++k) d[k * NR + j] = src[k];
    }
  } else {
    for (int64_t k = 0; k < kc; ++k)
      for (int64_t j = 0; j < cols; ++j) d[k * NR + j] = base[k * rsb + j * csb];
  }
  for (int64_t k = 0; k < kc; ++k)
    for (int64_t j = cols; j < NR; ++j) d[k * NR + j] = 0.0f;
}

#pragma GCC diagnostic pop

/// The blocked loops of sgemm_packed and sgemm_pack_b, with B's panels from pack(p0, kc, j0, cols, NR, dst).
template <typename PackPanel>
void sgemm_blocked(int64_t M, int64_t N, int64_t K, float alpha, const float* a, int64_t rsa, int64_t csa,
                   const PackPanel& pack, float beta, float* c, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {  // C = beta * C
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
    return;
  }
  const bool wide = have_avx512(), tall = wide && M >= 48 && K >= 128;  // 12-row tiles (see MR512)
  const int64_t NR = wide ? 32 : 16, TM = tall ? MR512 : MR;
  thread_local std::vector<float> abuf, bbuf;
  for (int64_t j0 = 0; j0 < N; j0 += NC) {
    const int64_t nc = std::min(NC, N - j0), npan = (nc + NR - 1) / NR;
    for (int64_t p0 = 0; p0 < K; p0 += KC) {
      const int64_t kc = std::min(KC, K - p0);
      bbuf.resize(static_cast<size_t>(npan * NR * kc));
      float* bdst = bbuf.data();
      parallel_for(0, npan, std::max<int64_t>(1, kGrainSize / (NR * kc)), [&](int64_t pb, int64_t pe) {
        for (int64_t q = pb; q < pe; ++q) pack(p0, kc, j0 + q * NR, std::min(NR, nc - q * NR), NR, bdst + q * NR * kc);
      });
      for (int64_t i0 = 0; i0 < M; i0 += MC) {
        const int64_t mc = std::min(MC, M - i0), mpan = (mc + TM - 1) / TM;
        abuf.resize(static_cast<size_t>(mpan * TM * kc));
        pack_a(a, rsa, csa, i0, mc, p0, kc, TM, abuf.data());
        const float* ap = abuf.data();
        const float* bp = bbuf.data();
        const bool first = p0 == 0;
        // tiles in column-panel-major order: a thread's contiguous range reuses its B panels
        const int64_t tiles = mpan * npan;
        parallel_for(0, tiles, std::max<int64_t>(1, kGrainSize / (TM * NR * kc / 8)), [&](int64_t tb, int64_t te) {
          for (int64_t t = tb; t < te; ++t) {
            const int64_t jp = t / mpan, ip = t % mpan;
            const int64_t mr = std::min(TM, mc - ip * TM), nr = std::min(NR, nc - jp * NR);
            const float* at = ap + ip * TM * kc;
            const float* bt = bp + jp * NR * kc;
            float* ct = c + (i0 + ip * TM) * ldc + j0 + jp * NR;
#ifdef TROUPE_SGEMM_AVX512
            if (wide) {
              if (tall) micro_kernel_32(kc, at, bt, ct, ldc, mr, nr, alpha, beta, first);
              else micro_kernel_32x6(kc, at, bt, ct, ldc, mr, nr, alpha, beta, first);
              continue;
            }
#endif
            micro_kernel_16(kc, at, bt, ct, ldc, mr, nr, alpha, beta, first);
          }
        });
      }
    }
  }
}

}  // namespace

void sgemm_packed(int64_t M, int64_t N, int64_t K, float alpha, const float* a, int64_t rsa, int64_t csa,
                  const float* b, int64_t rsb, int64_t csb, float beta, float* c, int64_t ldc) {
  sgemm_blocked(
      M, N, K, alpha, a, rsa, csa,
      [&](int64_t p0, int64_t kc, int64_t j0, int64_t cols, int64_t nr, float* dst) {
        pack_b_panel(b, rsb, csb, p0, kc, j0, cols, nr, dst);
      },
      beta, c, ldc);
}

void sgemm_pack_b(int64_t M, int64_t N, int64_t K, float alpha, const float* a, int64_t rsa, int64_t csa,
                  const BPanelPacker& pack_b, float beta, float* c, int64_t ldc) {
  sgemm_blocked(M, N, K, alpha, a, rsa, csa, pack_b, beta, c, ldc);
}

bool use_own_sgemm() {
  static const bool own = [] {
    if (const char* e = std::getenv("TROUPE_SGEMM")) {
      const std::string v(e);
      if (v == "own") return true;
      if (v == "blas") return false;
    }
#if defined(__x86_64__) && defined(__GNUC__)
    if (!openblas_get_corename) return false;
    const std::string core = openblas_get_corename();
    return core == "Prescott" && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    return false;
#endif
  }();
  return own;
}

}  // namespace troupe::cpu
