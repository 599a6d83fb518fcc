// conv2d's implicit-im2col GEMMs (conv_gemm.h): the panels of sgemm_pack_b are filled from the images, so the
// im2col matrix (kh*kw times the input) is neither written nor read back; a panel stays in L1 while the
// micro-kernel uses it.
#include "conv_gemm.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "sgemm.h"

namespace troupe::cpu {

namespace {

/// Where a column q = (n, oh, ow) of the im2col matrix is; advance() moves along a run of one output row.
struct Pos {
  int64_t n, oh, ow;
  Pos(const ConvCols& s, int64_t q) {
    const int64_t L = s.oH * s.oW, r = q % L;
    n = q / L, oh = r / s.oW, ow = r % s.oW;
  }
  void advance(const ConvCols& s, int64_t run) {
    ow += run;
    if (ow == s.oW) {
      ow = 0;
      if (++oh == s.oH) oh = 0, ++n;
    }
  }
};

/// Row (c, ki, kj) of the im2col matrix at the columns from p on, len of them, into d[0], d[ds], d[2*ds], ...
/// Plain loops rather than memcpy/memset: the runs are an output row long (tens of floats).
void cols_row(const ConvCols& s, int64_t c, int64_t ki, int64_t kj, Pos p, int64_t len, float* d, int64_t ds) {
  const int64_t offh = ki * s.dh - s.ph, offw = kj * s.dw - s.pw;
  for (int64_t j = 0; j < len;) {
    const int64_t run = std::min(len - j, s.oW - p.ow), ih = p.oh * s.sh + offh;
    float* o = d + j * ds;
    if (ih < 0 || ih >= s.H) {
      for (int64_t t = 0; t < run; ++t) o[t * ds] = 0.0f;
    } else {
      const float* src = s.x + p.n * s.img_stride + (c * s.H + ih) * s.W;
      if (s.sw == 1) {  // iw = ow + offw: zeros, one contiguous run of the image row, zeros
        const int64_t lo = std::clamp(-offw, p.ow, p.ow + run) - p.ow;
        const int64_t hi = std::clamp(s.W - offw, p.ow + lo, p.ow + run) - p.ow;
        const float* in = src + (p.ow + offw + lo);  // in[t - lo]: x at iw = ow + t + offw
        if (ds == 1) {
          for (int64_t t = 0; t < lo; ++t) o[t] = 0.0f;
          for (int64_t t = 0; t < hi - lo; ++t) o[lo + t] = in[t];
          for (int64_t t = hi; t < run; ++t) o[t] = 0.0f;
        } else {
          for (int64_t t = 0; t < lo; ++t) o[t * ds] = 0.0f;
          for (int64_t t = lo; t < hi; ++t) o[t * ds] = in[t - lo];
          for (int64_t t = hi; t < run; ++t) o[t * ds] = 0.0f;
        }
      } else {
        for (int64_t t = 0; t < run; ++t) {
          const int64_t iw = (p.ow + t) * s.sw + offw;
          o[t * ds] = iw >= 0 && iw < s.W ? src[iw] : 0.0f;
        }
      }
    }
    j += run;
    p.advance(s, run);
  }
}

/// Steps (c, ki, kj) to the next row of the im2col matrix.
void next_row(const ConvCols& s, int64_t& c, int64_t& ki, int64_t& kj) {
  if (++kj == s.kw) {
    kj = 0;
    if (++ki == s.kh) ki = 0, ++c;
  }
}

/// For images with short output rows (a run per output row costs more than the copy): per kernel offset
/// (ki, kj) and column q, where in channel 0 of the images x[n, 0, ih, iw] is (n * img_stride + ih * W + iw),
/// or -1 outside the image. Rows of the im2col matrix are then gathers of one channel.
struct GatherTable {
  std::vector<int64_t> at;  // (kh*kw, cols)
  int64_t cols = 0;
  GatherTable(const ConvCols& s, int64_t cnt) : cols(cnt * s.oH * s.oW) {
    at.resize(static_cast<size_t>(s.kh * s.kw * cols));
    for (int64_t ki = 0; ki < s.kh; ++ki)
      for (int64_t kj = 0; kj < s.kw; ++kj) {
        int64_t* t = at.data() + (ki * s.kw + kj) * cols;
        for (int64_t n = 0; n < cnt; ++n)
          for (int64_t oh = 0; oh < s.oH; ++oh) {
            const int64_t ih = oh * s.sh - s.ph + ki * s.dh;
            const bool row_in = ih >= 0 && ih < s.H;
            for (int64_t ow = 0; ow < s.oW; ++ow) {
              const int64_t iw = ow * s.sw - s.pw + kj * s.dw;
              *t++ = row_in && iw >= 0 && iw < s.W ? n * s.img_stride + ih * s.W + iw : -1;
            }
          }
      }
  }
  /// Row r = (c, ki, kj) at columns [q, q + len) into d[0], d[ds], ...
  void row(const ConvCols& s, int64_t r, int64_t q, int64_t len, float* d, int64_t ds) const {
    const int64_t kk = s.kh * s.kw;
    const float* xc = s.x + (r / kk) * s.H * s.W;
    const int64_t* t = at.data() + (r % kk) * cols + q;
    for (int64_t j = 0; j < len; ++j) d[j * ds] = t[j] >= 0 ? xc[t[j]] : 0.0f;
  }
};

/// Gathers beat runs where output rows are shorter than this.
constexpr int64_t kShortRow = 16;

}  // namespace

void conv_cols_gemm(const ConvCols& s, int64_t cnt, int64_t M, const float* a, int64_t lda, float beta, float* c,
                    int64_t ldc) {
  const int64_t K = s.C * s.kh * s.kw, N = cnt * s.oH * s.oW;
  // panel: rows [k0, k0 + kc) of the columns, columns [j0, j0 + cols), row by row
  const bool gather = s.oW < kShortRow;
  const GatherTable table = gather ? GatherTable(s, cnt) : GatherTable(s, 0);
  sgemm_pack_b(
      M, N, K, 1.0f, a, lda, 1,
      [&](int64_t k0, int64_t kc, int64_t j0, int64_t cols, int64_t nr, float* dst) {
        const int64_t kk = s.kh * s.kw;
        int64_t c = k0 / kk, ki = (k0 % kk) / s.kw, kj = k0 % s.kw;
        const Pos start(s, j0);
        for (int64_t k = 0; k < kc; ++k) {
          float* d = dst + k * nr;
          if (gather) {
            table.row(s, k0 + k, j0, cols, d, 1);
          } else {
            cols_row(s, c, ki, kj, start, cols, d, 1);
            next_row(s, c, ki, kj);
          }
          if (cols < nr) std::memset(d + cols, 0, static_cast<size_t>(nr - cols) * sizeof(float));
        }
      },
      beta, c, ldc);
}

void conv_cols_t_gemm(const ConvCols& s, int64_t cnt, int64_t M, const float* a, int64_t lda, float beta, float* c,
                      int64_t ldc) {
  const int64_t K = cnt * s.oH * s.oW, N = s.C * s.kh * s.kw;
  // panel of the transposed columns: rows = positions [k0, k0 + kc), columns = im2col rows [j0, j0 + cols)
  const bool gather = s.oW < kShortRow;
  const GatherTable table = gather ? GatherTable(s, cnt) : GatherTable(s, 0);
  sgemm_pack_b(
      M, N, K, 1.0f, a, lda, 1,
      [&](int64_t k0, int64_t kc, int64_t j0, int64_t cols, int64_t nr, float* dst) {
        const int64_t kk = s.kh * s.kw;
        int64_t c = j0 / kk, ki = (j0 % kk) / s.kw, kj = j0 % s.kw;
        const Pos start(s, k0);
        for (int64_t j = 0; j < cols; ++j) {
          if (gather) {
            table.row(s, j0 + j, k0, kc, dst + j, nr);
          } else {
            cols_row(s, c, ki, kj, start, kc, dst + j, nr);
            next_row(s, c, ki, kj);
          }
        }
        for (int64_t k = 0; k < kc; ++k)
          for (int64_t j = cols; j < nr; ++j) dst[k * nr + j] = 0.0f;
      },
      beta, c, ldc);
}

}  // namespace troupe::cpu
