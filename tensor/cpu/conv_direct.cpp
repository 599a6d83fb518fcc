// Direct stride-1 float32 conv2d kernels (conv_direct.h): no im2col matrix and no packing of the image.
//
// A chunk of images is copied once into a zero-bordered buffer, channel-major, rows Wq = max(W + pw, oW) apart and
// images Hq = max(H + ph, oH) rows apart: a row's right padding is the next row's left padding and an image's bottom
// padding the next image's top padding, so padded coordinate (r, s) of channel c of image j (r < H + 2ph,
// s < W + 2pw) is at c*CS + (j*Hq + r)*Wq + s. Outputs are computed on that grid: position q = (j*Hq + y)*Wq + x
// reads input q + ki*dh*Wq + kj*dw for kernel tap (ki, kj), so 16 consecutive positions read 16 consecutive floats
// even across rows and images; positions with x >= oW or y >= oH are junk, computed and dropped (4x4 images with
// padding 1: 16 of 25 positions valid, against 16 of 36 with separate borders).
// - forward: out[o][q] = sum_k w[o][k] * xpad[c][q + off(ki, kj)], k = (c, ki, kj): tiles of TM output
//   channels x 16*QV positions in TM*QV zmm accumulators; per k, QV unaligned loads of the image and TM FMAs with
//   a broadcast weight each (the BLIS micro-kernel with the B panel read straight from the padded image).
//   The input gradient of a stride-1 conv is this kernel on gy with the flipped, transposed weight (conv.cpp).
// - weight gradient: gw[o][k] = sum over valid positions q of gy[o][q] * xpad[c][q + off(k)], output channels in
//   the lanes: gy goes to channels-last, and tiles of TKK taps x 16*CV channels add a broadcast of the padded
//   image times gy's channel vectors, position by position along the valid output rows only (no junk, no lane
//   sums); the runs go in blocks of about 128 positions that each of a thread's tiles passes while the block is
//   in L1, the accumulators kept in a (taps, channels) buffer between blocks.
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

/// The calling thread's scratch buffers, kept between calls (no fresh pages, no allocation per call).
std::vector<float>* scratch_slots() {
  thread_local std::vector<float> bufs[4];
  return bufs;
}

/// n floats of scratch buffer slot (0-3); zeroed when zero is true.
float* scratch(int slot, int64_t n, bool zero) {
  std::vector<float>& v = scratch_slots()[slot];
  if (v.size() < static_cast<size_t>(n)) v.resize(static_cast<size_t>(n));
  if (zero) std::fill(v.begin(), v.begin() + n, 0.0f);
  return v.data();
}

/// Frees scratch buffers past 16 MB at the end of a call: one large conv does not pin its buffers for good.
void trim_scratch() {
  for (int i = 0; i < 4; ++i)
    if (scratch_slots()[i].size() > (size_t{4} << 20)) std::vector<float>().swap(scratch_slots()[i]);
}

/// A chunk of nb padded images of C channels: channel c at c*CS, image j at + j*P, its rows Wp apart (P = Hq*Wp,
/// see the top of the file); QS >= nb*P positions computed, a multiple of the tile width qt.
struct Padded {
  int64_t Hq, Wp, P, nb, QS, CS, maxoff;
  Padded(const DirectConv& g, int64_t qt) {
    Hq = std::max(g.H + g.ph, g.oH), Wp = std::max(g.W + g.pw, g.oW), P = Hq * Wp;
    maxoff = (g.kh - 1) * g.dh * Wp + (g.kw - 1) * g.dw;
    nb = std::clamp<int64_t>(kChunkFloats / std::max<int64_t>(1, g.C * P), 1, std::max<int64_t>(1, g.N));
    QS = round_up(nb * P, qt);
    // a read at q < QS plus a tap offset <= maxoff stays in its channel, as do the last image's bottom padding rows
    CS = round_up(std::max(QS + maxoff, (nb * Hq + g.ph) * Wp) + 16, 16);
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
                     float* dst = buf + c * s.CS + (j * s.Hq + g.ph) * s.Wp + g.pw;
                     for (int64_t y = 0; y < g.H; ++y) {
                       if (g.W >= 16) {
                         std::memcpy(dst + y * s.Wp, src + y * g.W, static_cast<size_t>(g.W) * sizeof(float));
                       } else {  // a few floats: a loop beats the call
                         for (int64_t xx = 0; xx < g.W; ++xx) dst[y * s.Wp + xx] = src[y * g.W + xx];
                       }
                     }
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
  float* wk = scratch(0, nblk * K * TM, true);  // [block][k][TM], zero past the last row
  for (int64_t o = 0; o < g.O; ++o)
    for (int64_t k = 0; k < K; ++k) wk[((o / TM) * K + k) * TM + o % TM] = w[o * K + k];
  float* buf = scratch(1, g.C * s.CS, true);
  float* obuf = scratch(2, nblk * TM * s.QS, false);
  for (int64_t n0 = 0; n0 < g.N; n0 += s.nb) {
    const int64_t cnt = std::min(s.nb, g.N - n0), nq = (cnt * s.P + QT - 1) / QT;
    pad_chunk(g, s, x, n0, cnt, buf);
    // tiles position-major: a thread's consecutive tiles share the image data
    const int64_t tiles = nq * nblk;
    parallel_for(0, tiles, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(1, TM * QT * K / 8)),
                 [&](int64_t tb, int64_t te) {
                   for (int64_t t = tb; t < te; ++t) {
                     const int64_t qt = t / nblk, b = t % nblk;
                     fwd_tile<TM, QV>(buf + qt * QT, off.data(), K, wk + b * K * TM,
                                      obuf + b * TM * s.QS + qt * QT, s.QS, std::min<int64_t>(TM, g.O - b * TM));
                   }
                 });
    // the valid positions into out (N, O, oH, oW), plus the bias
    parallel_for(0, cnt * g.O, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(1, L)), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const int64_t j = r / g.O, o = r % g.O;
        const float* src = obuf + o * s.QS + j * s.P;
        float* dst = out + ((n0 + j) * g.O + o) * L;
        const float bv = bias ? bias[o] : 0.0f;
        for (int64_t y = 0; y < g.oH; ++y)
          for (int64_t xx = 0; xx < g.oW; ++xx) dst[y * g.oW + xx] = src[y * s.Wp + xx] + bv;
      }
    });
  }
  trim_scratch();
}

/// One weight-gradient tile: gwt[k][co] for TKK taps x 16*CV output channels (rows of gwt ldw apart), plus the
/// products over the valid output positions of runs [r0, r1) (run r: image r / oH, output row r % oH): per position
/// a broadcast of the padded image at each tap and CV vectors of gy in channels-last order (gyt, rows ldg apart).
template <int TKK, int CV>
__attribute__((target("arch=x86-64-v4"))) void gw_tile(const DirectConv& g, int64_t P, int64_t Wp, const float* x,
                                                       const int64_t* off, const float* gyt, int64_t ldg, int64_t r0,
                                                       int64_t r1, float* gwt, int64_t ldw) {
  v16f acc[TKK][CV];
  for (int i = 0; i < TKK; ++i)
    for (int v = 0; v < CV; ++v) std::memcpy(&acc[i][v], gwt + i * ldw + 16 * v, sizeof(v16f));
  const float* p[TKK];
  for (int i = 0; i < TKK; ++i) p[i] = x + off[i];
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t q0 = (r / g.oH) * P + (r % g.oH) * Wp;  // the run's first position on the padded grid
    const float* gr = gyt + r * g.oW * ldg;
    for (int64_t t = 0; t < g.oW; ++t) {
      v16f gv[CV];
      for (int v = 0; v < CV; ++v) std::memcpy(&gv[v], gr + t * ldg + 16 * v, sizeof(v16f));
      for (int i = 0; i < TKK; ++i) {
        const v16f xi = p[i][q0 + t] - v16f{};
        for (int v = 0; v < CV; ++v) acc[i][v] += xi * gv[v];
      }
    }
  }
  for (int i = 0; i < TKK; ++i)
    for (int v = 0; v < CV; ++v) std::memcpy(gwt + i * ldw + 16 * v, &acc[i][v], sizeof(v16f));
}

/// The weight gradient with tiles of TKK taps x 16*CV output channels: gwt (Kpad, Opad) accumulates over chunks,
/// each thread owning its tiles; within a chunk the runs go in blocks of about kRunPositions positions, every tile
/// of the thread passing over a block while it is in L1.
template <int TKK, int CV>
void grad_weight_with(const DirectConv& g, const float* gy, const float* x, float* gw) {
  constexpr int64_t CT = 16 * CV, kRunPositions = 128;
  const Padded s(g, 16);
  const int64_t K = g.C * g.kh * g.kw, L = g.oH * g.oW, Opad = round_up(g.O, CT), nkt = (K + TKK - 1) / TKK,
                nct = Opad / CT;
  std::vector<int64_t> off = tap_offsets(g, s);
  off.resize(static_cast<size_t>(nkt * TKK), off.back());  // taps past K repeat the last one; their sums are dropped
  float* buf = scratch(1, g.C * s.CS, true);
  float* gyt = scratch(2, s.nb * L * Opad, Opad != g.O);  // gy channels-last, zero past O
  float* gwt = scratch(3, nkt * TKK * Opad, true);
  const int64_t rb = std::max<int64_t>(1, kRunPositions / std::max<int64_t>(1, g.oW));  // runs per block
  for (int64_t n0 = 0; n0 < g.N; n0 += s.nb) {
    const int64_t cnt = std::min(s.nb, g.N - n0), runs = cnt * g.oH;
    pad_chunk(g, s, x, n0, cnt, buf);
    // gy's images to channels-last, 16 positions at a time through a (16, O) block that stays in L1
    const int64_t lblocks = (L + 15) / 16;
    parallel_for(0, cnt * lblocks, std::max<int64_t>(1, kGrainSize / (16 * g.O)), [&](int64_t b, int64_t e) {
      std::vector<float> blk(static_cast<size_t>(16 * g.O));
      for (int64_t i = b; i < e; ++i) {
        const int64_t j = i / lblocks, l0 = (i % lblocks) * 16, len = std::min<int64_t>(16, L - l0);
        for (int64_t o = 0; o < g.O; ++o) {
          const float* src = gy + ((n0 + j) * g.O + o) * L + l0;
          for (int64_t l = 0; l < len; ++l) blk[static_cast<size_t>(l * g.O + o)] = src[l];
        }
        for (int64_t l = 0; l < len; ++l)
          for (int64_t o = 0; o < g.O; ++o) gyt[(j * L + l0 + l) * Opad + o] = blk[static_cast<size_t>(l * g.O + o)];
      }
    });
    parallel_for(0, nkt * nct, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(1, TKK * CT * runs * g.oW / 8)),
                 [&](int64_t tb, int64_t te) {
                   for (int64_t r0 = 0; r0 < runs; r0 += rb)
                     for (int64_t t = tb; t < te; ++t) {
                       const int64_t kt = t / nct, ct = t % nct;
                       gw_tile<TKK, CV>(g, s.P, s.Wp, buf, off.data() + kt * TKK, gyt + ct * CT, Opad, r0,
                                        std::min(runs, r0 + rb), gwt + kt * TKK * Opad + ct * CT, Opad);
                     }
                 });
  }
  for (int64_t o = 0; o < g.O; ++o)
    for (int64_t k = 0; k < K; ++k) gw[o * K + k] = gwt[k * Opad + o];
  trim_scratch();
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
  if (g.O > 32) return grad_weight_with<6, 4>(g, gy, x, gw);
  if (g.O > 16) return grad_weight_with<12, 2>(g, gy, x, gw);
  grad_weight_with<12, 1>(g, gy, x, gw);
}

#else  // no AVX-512 kernels in this build: conv_direct_available() is false and these are never called

void conv_direct_forward(const DirectConv&, const float*, const float*, const float*, float*) { std::abort(); }
void conv_direct_grad_weight(const DirectConv&, const float*, const float*, float*) { std::abort(); }

#endif

}  // namespace troupe::cpu
