// Direct stride-1 float32 conv2d kernels (conv_direct.h): no im2col matrix and no packing of the image.
//
// A chunk of images is copied once into a zero-bordered buffer, channel-major: channel c of image j starts at
// c*CS + j*P (P = Hp*Wp, Hp = H + 2ph, Wp = W + 2pw). Outputs are computed on that padded grid: position
// q = j*P + y*Wp + x reads input q + ki*dh*Wp + kj*dw for kernel tap (ki, kj), so 16 consecutive positions read
// 16 consecutive floats even across rows and images; positions with x >= oW or y >= oH are junk, computed and
// dropped (or, for the weight gradient, multiplied by a zero output gradient).
// - forward: out[o][q] = sum_k w[o][k] * xpad[c][q + off(ki, kj)], k = (c, ki, kj): tiles of TM output
//   channels x 16*QV positions in TM*QV zmm accumulators; per k, QV unaligned loads of the image and TM FMAs with
//   a broadcast weight each (the BLIS micro-kernel with the B panel read straight from the padded image).
//   The input gradient of a stride-1 conv is this kernel on gy with the flipped, transposed weight (conv.cpp).
// - weight gradient: gw[o][k] = sum_q gyq[o][q] * xpad[c][q + off(k)], gyq = gy on the padded grid (zeros at junk
//   positions): tiles of 4 output channels x 6 taps in 24 accumulators over 16 positions at a time, summed
//   across lanes at the end of each chunk.
// Threads split the tiles (parallel_for); chunks keep the padded images near 1 MB so they stay in L2.
#include "conv_direct.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "../parallel.h"

namespace troupe::cpu {

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(TROUPE_NO_TARGET_CLONES)
#define TROUPE_CONV_DIRECT 1
#endif

bool conv_direct_available() {
#ifdef TROUPE_CONV_DIRECT
  static const bool yes = [] {
    if (const char* e = std::getenv("TROUPE_CONV_DIRECT"); e && std::string(e) == "0") return false;
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq");
  }();
  return yes;
#else
  return false;
#endif
}

#ifdef TROUPE_CONV_DIRECT

namespace {

typedef float v16f __attribute__((vector_size(64)));

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"  // vector locals only; no vector is passed to a call

constexpr int64_t kChunkFloats = int64_t{256} << 10;  // padded images per chunk: about 1 MB

int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

/// A chunk of nb padded images of C channels: channel c at c*CS, image j at + j*P; QS >= nb*P positions computed,
/// a multiple of the tile width qt.
struct Padded {
  int64_t Hp, Wp, P, nb, QS, CS, maxoff;
  Padded(const DirectConv& g, int64_t qt) {
    Hp = g.H + 2 * g.ph, Wp = g.W + 2 * g.pw, P = Hp * Wp;
    maxoff = (g.kh - 1) * g.dh * Wp + (g.kw - 1) * g.dw;
    nb = std::clamp<int64_t>(kChunkFloats / std::max<int64_t>(1, g.C * P), 1, std::max<int64_t>(1, g.N));
    QS = round_up(nb * P, qt);
    CS = round_up(QS + maxoff + 16, 16);  // a read at q < QS plus a tap offset <= maxoff stays in its channel
  }
};

/// Tap offsets off[k] = c*CS + ki*dh*Wp + kj*dw for k = (c, ki, kj) in the order of w's last three dimensions.
std::vector<int64_t> tap_offsets(const DirectConv& g, const Padded& s) {
  std::vector<int64_t> off(static_cast<size_t>(g.C * g.kh * g.kw));
  size_t k = 0;
  for (int64_t c = 0; c < g.C; ++c)
    for (int64_t ki = 0; ki < g.kh; ++ki)
      for (int64_t kj = 0; kj < g.kw; ++kj) off[k++] = c * s.CS + ki * g.dh * s.Wp + kj * g.dw;
  return off;
}

/// Copies images [n0, n0 + cnt) of x into the interior of the padded buffer (its borders stay zero).
void pad_chunk(const DirectConv& g, const Padded& s, const float* x, int64_t n0, int64_t cnt, float* buf) {
  parallel_for(0, g.C, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(1, cnt * g.H * g.W)),
               [&](int64_t cb, int64_t ce) {
                 for (int64_t c = cb; c < ce; ++c)
                   for (int64_t j = 0; j < cnt; ++j) {
                     const float* src = x + ((n0 + j) * g.C + c) * g.H * g.W;
                     float* dst = buf + c * s.CS + j * s.P + g.ph * s.Wp + g.pw;
                     for (int64_t y = 0; y < g.H; ++y)
                       std::memcpy(dst + y * s.Wp, src + y * g.W, static_cast<size_t>(g.W) * sizeof(float));
                   }
               });
}

/// One forward tile: TM output channels x 16*QV positions from x (the padded buffer at the tile's first
/// position), weights wk[k][TM], into o (row stride ldo), rows [0, rows).
template <int TM, int QV>
__attribute__((target("arch=x86-64-v4"))) void fwd_tile(const float* x, const int64_t* off, int64_t K,
                                                        const float* wk, float* o, int64_t ldo, int64_t rows) {
  v16f acc[TM][QV];
  for (int i = 0; i < TM; ++i)
    for (int v = 0; v < QV; ++v) acc[i][v] = v16f{};
  for (int64_t k = 0; k < K; ++k) {
    const float* xs = x + off[k];
    v16f xv[QV];
    for (int v = 0; v < QV; ++v) std::memcpy(&xv[v], xs + 16 * v, sizeof(v16f));
    for (int i = 0; i < TM; ++i) {
      const v16f wi = wk[i] - v16f{};  // a broadcast: x - 0.0f folds to x
      for (int v = 0; v < QV; ++v) acc[i][v] += wi * xv[v];
    }
    wk += TM;
  }
  for (int i = 0; i < TM; ++i) {
    if (i == rows) break;
    for (int v = 0; v < QV; ++v) std::memcpy(o + i * ldo + 16 * v, &acc[i][v], sizeof(v16f));
  }
}

template <int TM, int QV>
void forward_with(const DirectConv& g, const float* x, const float* w, const float* bias, float* out) {
  constexpr int64_t QT = 16 * QV;
  const Padded s(g, QT);
  const int64_t K = g.C * g.kh * g.kw, nblk = (g.O + TM - 1) / TM, L = g.oH * g.oW;
  const std::vector<int64_t> off = tap_offsets(g, s);
  std::vector<float> wk(static_cast<size_t>(nblk * K * TM), 0.0f);  // [block][k][TM], zero past the last row
  for (int64_t o = 0; o < g.O; ++o)
    for (int64_t k = 0; k < K; ++k) wk[static_cast<size_t>(((o / TM) * K + k) * TM + o % TM)] = w[o * K + k];
  std::vector<float> buf(static_cast<size_t>(g.C * s.CS), 0.0f);
  std::vector<float> obuf(static_cast<size_t>(nblk * TM * s.QS));
  for (int64_t n0 = 0; n0 < g.N; n0 += s.nb) {
    const int64_t cnt = std::min(s.nb, g.N - n0), nq = (cnt * s.P + QT - 1) / QT;
    pad_chunk(g, s, x, n0, cnt, buf.data());
    // tiles position-major: a thread's consecutive tiles share the image data
    const int64_t tiles = nq * nblk;
    parallel_for(0, tiles, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(1, TM * QT * K / 8)),
                 [&](int64_t tb, int64_t te) {
                   for (int64_t t = tb; t < te; ++t) {
                     const int64_t qt = t / nblk, b = t % nblk;
                     fwd_tile<TM, QV>(buf.data() + qt * QT, off.data(), K, wk.data() + b * K * TM,
                                      obuf.data() + b * TM * s.QS + qt * QT, s.QS, std::min<int64_t>(TM, g.O - b * TM));
                   }
                 });
    // the valid positions into out (N, O, oH, oW), plus the bias
    parallel_for(0, cnt * g.O, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(1, L)), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const int64_t j = r / g.O, o = r % g.O;
        const float* src = obuf.data() + o * s.QS + j * s.P;
        float* dst = out + ((n0 + j) * g.O + o) * L;
        const float bv = bias ? bias[o] : 0.0f;
        for (int64_t y = 0; y < g.oH; ++y)
          for (int64_t xx = 0; xx < g.oW; ++xx) dst[y * g.oW + xx] = src[y * s.Wp + xx] + bv;
      }
    });
  }
}

constexpr int TC = 4, TK = 6;  // weight-gradient tile: output channels x taps

/// One weight-gradient tile over positions [0, Q): g[i] rows of gyq, xs[j] = the padded buffer at tap j's offset.
/// Sums into r[i][j].
__attribute__((target("arch=x86-64-v4"))) void gw_tile(const float* const* gr, const float* const* xs, int64_t Q,
                                                       float (*r)[TK]) {
  v16f acc[TC][TK];
  for (int i = 0; i < TC; ++i)
    for (int j = 0; j < TK; ++j) acc[i][j] = v16f{};
  for (int64_t q = 0; q < Q; q += 16) {
    v16f gv[TC], xv[TK];
    for (int i = 0; i < TC; ++i) std::memcpy(&gv[i], gr[i] + q, sizeof(v16f));
    for (int j = 0; j < TK; ++j) std::memcpy(&xv[j], xs[j] + q, sizeof(v16f));
    for (int i = 0; i < TC; ++i)
      for (int j = 0; j < TK; ++j) acc[i][j] += gv[i] * xv[j];
  }
  for (int i = 0; i < TC; ++i)
    for (int j = 0; j < TK; ++j) {
      float t[16];
      std::memcpy(t, &acc[i][j], sizeof(t));
      float sum = 0.0f;
      for (int l = 0; l < 16; ++l) sum += t[l];
      r[i][j] = sum;
    }
}

#pragma GCC diagnostic pop

}  // namespace

void conv_direct_forward(const DirectConv& g, const float* x, const float* w, const float* bias, float* out) {
  if (g.O == 1) return forward_with<1, 8>(g, x, w, bias, out);
  if (g.O <= 4) return forward_with<4, 6>(g, x, w, bias, out);
  if (g.O % 8 == 0) return forward_with<8, 3>(g, x, w, bias, out);
  forward_with<12, 2>(g, x, w, bias, out);
}

void conv_direct_grad_weight(const DirectConv& g, const float* gy, const float* x, float* gw) {
  const Padded s(g, 16);
  const int64_t K = g.C * g.kh * g.kw, L = g.oH * g.oW;
  const std::vector<int64_t> off = tap_offsets(g, s);
  std::vector<float> buf(static_cast<size_t>(g.C * s.CS), 0.0f);
  std::vector<float> gyq(static_cast<size_t>(g.O * s.QS), 0.0f);  // gy on the padded grid, zero at junk positions
  const int64_t nct = (g.O + TC - 1) / TC, nkt = (K + TK - 1) / TK;
  for (int64_t n0 = 0; n0 < g.N; n0 += s.nb) {
    const int64_t cnt = std::min(s.nb, g.N - n0), Q = round_up(cnt * s.P, 16);
    pad_chunk(g, s, x, n0, cnt, buf.data());
    parallel_for(0, g.O, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(1, cnt * L)), [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) {
        float* row = gyq.data() + o * s.QS;
        if (cnt < s.nb) std::memset(row + cnt * s.P, 0, static_cast<size_t>(s.QS - cnt * s.P) * sizeof(float));
        for (int64_t j = 0; j < cnt; ++j) {
          const float* src = gy + ((n0 + j) * g.O + o) * L;
          for (int64_t y = 0; y < g.oH; ++y)
            std::memcpy(row + j * s.P + y * s.Wp, src + y * g.oW, static_cast<size_t>(g.oW) * sizeof(float));
        }
      }
    });
    const bool first = n0 == 0;
    parallel_for(0, nct * nkt, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(1, TC * TK * Q / 8)),
                 [&](int64_t tb, int64_t te) {
                   for (int64_t t = tb; t < te; ++t) {
                     const int64_t o0 = (t / nkt) * TC, k0 = (t % nkt) * TK;
                     const float* gr[TC];
                     const float* xs[TK];
                     for (int i = 0; i < TC; ++i) gr[i] = gyq.data() + std::min(o0 + i, g.O - 1) * s.QS;
                     for (int j = 0; j < TK; ++j) xs[j] = buf.data() + off[static_cast<size_t>(std::min(k0 + j, K - 1))];
                     float r[TC][TK];
                     gw_tile(gr, xs, Q, r);
                     for (int i = 0; i < TC && o0 + i < g.O; ++i)
                       for (int j = 0; j < TK && k0 + j < K; ++j) {
                         float& d = gw[(o0 + i) * K + k0 + j];
                         d = first ? r[i][j] : d + r[i][j];
                       }
                   }
                 });
  }
}

#else  // no AVX-512 kernels in this build: conv_direct_available() is false and these are never called

void conv_direct_forward(const DirectConv&, const float*, const float*, const float*, float*) { std::abort(); }
void conv_direct_grad_weight(const DirectConv&, const float*, const float*, float*) { std::abort(); }

#endif

}  // namespace troupe::cpu
