// CPU kernels for linear algebra and convolution: gemm (OpenBLAS for float/double, or sgemm.h's own float32
// kernel where OpenBLAS falls back to its SSE3 kernels; float16/bfloat16 through float32, a plain loop for
// integers), im2col and col2im.
#include <cblas.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "../ops.h"
#include "../parallel.h"
#include "cpu_backend.h"
#include "sgemm.h"
#include "sgemm_small.h"

namespace troupe::cpu {

namespace {

/// How a 2-D (rows x cols) strided matrix can be handed to a row-major BLAS without copying:
/// `trans == false`: element (i, j) at p[i*ld + j]; `trans == true`: element (i, j) at p[j*ld + i]
/// (a row-major (cols x rows) matrix, i.e. column-major storage). A dim of size 1 may have any stride.
struct Layout {
  bool ok = false;
  bool trans = false;
  int64_t ld = 0;
};

Layout layout_of(int64_t rows, int64_t cols, int64_t rs, int64_t cs) {
  Layout l;
  // row-major: unit column stride, row stride at least cols
  if ((cols <= 1 || cs == 1) && (rows <= 1 || rs >= std::max<int64_t>(1, cols))) {
    l.ok = true;
    l.trans = false;
    l.ld = rows <= 1 ? std::max<int64_t>(1, cols) : rs;
    return l;
  }
  // column-major: unit row stride, column stride at least rows
  if ((rows <= 1 || rs == 1) && (cols <= 1 || cs >= std::max<int64_t>(1, rows))) {
    l.ok = true;
    l.trans = true;
    l.ld = cols <= 1 ? std::max<int64_t>(1, rows) : cs;
    return l;
  }
  return l;
}

Layout layout_of(const Tensor& t) { return layout_of(t.size(0), t.size(1), t.stride(0), t.stride(1)); }

/// A new contiguous tensor holding t's values converted to `dtype` (a kernel-level copy: no autograd).
Tensor to_contiguous(CpuBackend& be, const Tensor& t, ScalarType dtype) {
  Tensor out = empty(t.sizes(), TensorOptions().dtype(dtype));
  be.copy(out, t);
  return out;
}

void check_blas_int(int64_t v) {
  if (v > static_cast<int64_t>(INT_MAX))
    throw std::invalid_argument("[gemm] dimension " + std::to_string(v) + " is too large for BLAS (more than 2^31-1)");
}

template <typename T>
void blas_call(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda, const T* B,
               int64_t ldb, T beta, T* C, int64_t ldc) {
  for (int64_t v : {M, N, K, lda, ldb, ldc}) check_blas_int(v);
  const CBLAS_TRANSPOSE TA = ta ? CblasTrans : CblasNoTrans, TB = tb ? CblasTrans : CblasNoTrans;
  if constexpr (std::is_same_v<T, float>) {
    if (use_own_sgemm()) {  // OpenBLAS runs its SSE3 fallback on this CPU (sgemm.h)
      // small products (an MLP's layers): the same arithmetic without the packing (sgemm_small.h)
      if (sgemm_small(M, N, K, alpha, A, ta ? 1 : lda, ta ? lda : 1, B, tb ? 1 : ldb, tb ? ldb : 1, beta, C, ldc)) return;
      sgemm_packed(M, N, K, alpha, A, ta ? 1 : lda, ta ? lda : 1, B, tb ? 1 : ldb, tb ? ldb : 1, beta, C, ldc);
      return;
    }
    cblas_sgemm(CblasRowMajor, TA, TB, (int)M, (int)N, (int)K, alpha, A, (int)lda, B, (int)ldb, beta, C, (int)ldc);
  } else {
    cblas_dgemm(CblasRowMajor, TA, TB, (int)M, (int)N, (int)K, alpha, A, (int)lda, B, (int)ldb, beta, C, (int)ldc);
  }
}

/// C (M x N) = alpha * A (M x K) @ B (K x N) + beta * C, float or double, any strides.
template <typename T>
void gemm_blas(CpuBackend& be, const Tensor& c, const Tensor& a, const Tensor& b, double alpha, double beta) {
  const int64_t M = c.size(0), N = c.size(1), K = a.size(1);
  Layout lc = layout_of(c);
  if (!lc.ok) {
    // C has no BLAS layout (e.g. a strided slice): compute into a contiguous buffer and copy back.
    Tensor tmp = beta == 0 ? empty({M, N}, TensorOptions().dtype(c.dtype())) : to_contiguous(be, c, c.dtype());
    gemm_blas<T>(be, tmp, a, b, alpha, beta);
    be.copy(c, tmp);
    return;
  }
  Tensor A = a, B = b;
  Layout la = layout_of(A), lb = layout_of(B);
  if (!la.ok) {
    A = to_contiguous(be, a, a.dtype());
    la = layout_of(A);
  }
  if (!lb.ok) {
    B = to_contiguous(be, b, b.dtype());
    lb = layout_of(B);
  }
  const T* pa = static_cast<const T*>(A.data_ptr());
  const T* pb = static_cast<const T*>(B.data_ptr());
  T* pc = static_cast<T*>(c.data_ptr());
  if (!lc.trans) {
    blas_call<T>(la.trans, lb.trans, M, N, K, static_cast<T>(alpha), pa, la.ld, pb, lb.ld, static_cast<T>(beta), pc,
                 lc.ld);
  } else {
    // C is column-major: compute C^T (N x M, row-major) = B^T @ A^T; transposing a layout flips its flag.
    blas_call<T>(!lb.trans, !la.trans, N, M, K, static_cast<T>(alpha), pb, lb.ld, pa, la.ld, static_cast<T>(beta), pc,
                 lc.ld);
  }
}

/// Integer gemm: a plain loop, accumulating in int64 (wrapping to T exactly as T arithmetic would).
template <typename T>
void gemm_int(const Tensor& c, const Tensor& a, const Tensor& b, double alpha_d, double beta_d) {
  const int64_t M = c.size(0), N = c.size(1), K = a.size(1);
  const int64_t as0 = a.stride(0), as1 = a.stride(1), bs0 = b.stride(0), bs1 = b.stride(1);
  const int64_t cs0 = c.stride(0), cs1 = c.stride(1);
  const T* pa = static_cast<const T*>(a.data_ptr());
  const T* pb = static_cast<const T*>(b.data_ptr());
  T* pc = static_cast<T*>(c.data_ptr());
  const int64_t alpha = static_cast<int64_t>(alpha_d), beta = static_cast<int64_t>(beta_d);
  const int64_t grain = std::max<int64_t>(1, kGrainSize / std::max<int64_t>(1, N * std::max<int64_t>(K, 1)));
  parallel_for(0, M, grain, [&](int64_t i0, int64_t i1) {
    std::vector<int64_t> acc(static_cast<size_t>(N));
    for (int64_t i = i0; i < i1; ++i) {
      std::fill(acc.begin(), acc.end(), 0);
      for (int64_t k = 0; k < K; ++k) {
        const int64_t av = static_cast<int64_t>(pa[i * as0 + k * as1]);
        if (av == 0) continue;
        const T* brow = pb + k * bs0;
        for (int64_t j = 0; j < N; ++j) acc[j] += av * static_cast<int64_t>(brow[j * bs1]);
      }
      T* crow = pc + i * cs0;
      for (int64_t j = 0; j < N; ++j) {
        // unsigned arithmetic: wraps like T instead of overflowing
        uint64_t v = static_cast<uint64_t>(alpha) * static_cast<uint64_t>(acc[j]);
        if (beta != 0) v += static_cast<uint64_t>(beta) * static_cast<uint64_t>(static_cast<int64_t>(crow[j * cs1]));
        crow[j * cs1] = static_cast<T>(v);
      }
    }
  });
}

/// C = beta * C for an empty inner dimension (BLAS is not asked about K == 0).
void scale_output(CpuBackend& be, const Tensor& c, double beta) {
  if (beta == 0) {
    be.fill(c, Scalar(0));
    return;
  }
  if (beta == 1) return;
  Tensor s = empty({}, TensorOptions().dtype(c.dtype()));
  be.fill(s, is_floating_point(c.dtype()) ? Scalar(beta) : Scalar(static_cast<int64_t>(beta)));
  Tensor tmp = to_contiguous(be, c, c.dtype());
  be.binary(BinaryOp::Mul, c, tmp, s.expand(c.sizes()), 1.0);
}

}  // namespace

void CpuBackend::gemm(const Tensor& c, const Tensor& a, const Tensor& b, double alpha, double beta) {
  if (c.dim() != 2 || a.dim() != 2 || b.dim() != 2)
    throw std::invalid_argument("[gemm] expected 2-D operands, got C " + shape_str(c.sizes()) + ", A " +
                                shape_str(a.sizes()) + ", B " + shape_str(b.sizes()));
  const int64_t M = c.size(0), N = c.size(1), K = a.size(1);
  if (a.size(0) != M || b.size(0) != K || b.size(1) != N)
    throw std::invalid_argument("[gemm] shapes do not match: C " + shape_str(c.sizes()) + " = A " +
                                shape_str(a.sizes()) + " @ B " + shape_str(b.sizes()));
  if (a.dtype() != c.dtype() || b.dtype() != c.dtype())
    throw std::invalid_argument(std::string("[gemm] operands must share one dtype, got C ") + dtype_name(c.dtype()) +
                                ", A " + dtype_name(a.dtype()) + ", B " + dtype_name(b.dtype()));
  if (M == 0 || N == 0) return;
  if (K == 0) {
    scale_output(*this, c, beta);
    return;
  }
  switch (c.dtype()) {
    case kFloat32: gemm_blas<float>(*this, c, a, b, alpha, beta); return;
    case kFloat64: gemm_blas<double>(*this, c, a, b, alpha, beta); return;
    case kFloat16:
    case kBFloat16: {
      // convert to float32, multiply, convert back (float32 accumulation)
      Tensor fa = to_contiguous(*this, a, kFloat32), fb = to_contiguous(*this, b, kFloat32);
      Tensor fc = beta == 0 ? empty({M, N}, TensorOptions().dtype(kFloat32)) : to_contiguous(*this, c, kFloat32);
      gemm_blas<float>(*this, fc, fa, fb, alpha, beta);
      copy(c, fc);
      return;
    }
    case kInt64: gemm_int<int64_t>(c, a, b, alpha, beta); return;
    case kInt32: gemm_int<int32_t>(c, a, b, alpha, beta); return;
    case kUInt8: gemm_int<uint8_t>(c, a, b, alpha, beta); return;
    case kBool: break;
  }
  throw std::invalid_argument(std::string("[gemm] not implemented for dtype ") + dtype_name(c.dtype()));
}

// ---------------------------------------------------------------- im2col / col2im

namespace {

struct ConvGeom {
  int64_t C, H, W, kh, kw, sh, sw, ph, pw, dh, dw, oH, oW;
  int64_t col_n, col_r;  // strides of the columns' image and row dims (their last dim is unit-stride)
  int64_t L() const { return oH * oW; }
};

ConvGeom geometry(const char* op, const Tensor& im, const Tensor& col, int64_t kh, int64_t kw, int64_t sh, int64_t sw,
                  int64_t ph, int64_t pw, int64_t dh, int64_t dw) {
  if (im.dim() != 3 && im.dim() != 4)
    throw std::invalid_argument(std::string("[") + op + "] expected a (C, H, W) or (N, C, H, W) image, got shape " +
                                shape_str(im.sizes()));
  if (im.dtype() != col.dtype())
    throw std::invalid_argument(std::string("[") + op + "] image and columns must share one dtype, got " +
                                dtype_name(im.dtype()) + " and " + dtype_name(col.dtype()));
  ConvGeom g{};
  const int64_t d = im.dim();
  g.C = im.size(d - 3);
  g.H = im.size(d - 2);
  g.W = im.size(d - 1);
  g.kh = kh, g.kw = kw, g.sh = sh, g.sw = sw, g.ph = ph, g.pw = pw, g.dh = dh, g.dw = dw;
  g.oH = (g.H + 2 * ph - dh * (kh - 1) - 1) / sh + 1;
  g.oW = (g.W + 2 * pw - dw * (kw - 1) - 1) / sw + 1;
  std::vector<int64_t> want;
  if (d == 4) want.push_back(im.size(0));
  want.push_back(g.C * kh * kw);
  want.push_back(g.oH * g.oW);
  if (!col.sizes().equals(want))
    throw std::invalid_argument(std::string("[") + op + "] columns have shape " + shape_str(col.sizes()) +
                                ", expected " + shape_str(want) + " for image " + shape_str(im.sizes()));
  // The image is contiguous; the columns may be any (N, rows, L) view whose rows are unit-stride runs of L that
  // start at least L apart, e.g. the (rows, N, L) layout one GEMM over a chunk of images uses.
  const int64_t L = g.oH * g.oW, rows = g.C * kh * kw, N = d == 4 ? im.size(0) : 1;
  const int64_t cd = col.dim();
  g.col_r = col.stride(cd - 2);
  g.col_n = d == 4 ? col.stride(0) : rows * L;
  const bool unit = L <= 1 || col.stride(cd - 1) == 1;
  const bool apart = (rows <= 1 || g.col_r >= L) && (N <= 1 || g.col_n >= L);
  if (!im.is_contiguous() || !unit || !apart)
    throw std::invalid_argument(std::string("[") + op +
                                "] expected a contiguous image and columns with unit-stride rows");
  return g;
}

/// The ow range [lo, hi) whose input column ow*sw + off stays inside [0, W); no division when sw == 1.
inline void inside_range(int64_t off, int64_t W, int64_t sw, int64_t oW, int64_t& lo, int64_t& hi) {
  if (sw == 1) {
    lo = off >= 0 ? 0 : -off;
    hi = W - off;
  } else {
    lo = off >= 0 ? 0 : (-off + sw - 1) / sw;
    hi = W - off <= 0 ? 0 : (W - off + sw - 1) / sw;  // first ow with column >= W
  }
  lo = std::clamp<int64_t>(lo, 0, oW);
  hi = std::clamp(hi, lo, oW);
}

/// n elements from src to dst: a plain loop for the short runs of small images (a memcpy call costs more).
template <typename T>
inline void copy_run(T* dst, const T* src, int64_t n) {
  if (n >= 32) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(T));
    return;
  }
  for (int64_t i = 0; i < n; ++i) dst[i] = src[i];
}

template <typename T>
inline void zero_run(T* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = T(0);
}

/// Row (ki, kj) of one plane's columns (oH*oW elements at out), for any stride, padding and dilation.
template <typename T>
void im2col_row(const ConvGeom& g, const T* plane, T* out, int64_t ki, int64_t kj) {
  // the oh range whose input row oh*sh + off_h stays inside [0, H), and the same for ow
  const int64_t off_h = ki * g.dh - g.ph, off_w = kj * g.dw - g.pw;
  int64_t oh_lo, oh_hi, ow_lo, ow_hi;
  inside_range(off_h, g.H, g.sh, g.oH, oh_lo, oh_hi);
  inside_range(off_w, g.W, g.sw, g.oW, ow_lo, ow_hi);
  zero_run(out, oh_lo * g.oW);
  for (int64_t oh = oh_lo; oh < oh_hi; ++oh) {
    T* o = out + oh * g.oW;
    const T* row = plane + (oh * g.sh + off_h) * g.W + off_w;
    zero_run(o, ow_lo);
    if (g.sw == 1) {
      copy_run(o + ow_lo, row + ow_lo, ow_hi - ow_lo);
    } else {
      for (int64_t ow = ow_lo; ow < ow_hi; ++ow) o[ow] = row[ow * g.sw];
    }
    zero_run(o + ow_hi, g.oW - ow_hi);
  }
  zero_run(out + oh_hi * g.oW, (g.oH - oh_hi) * g.oW);
}

/// A zero-padded copy (H + 2ph, W + 2pw) of one plane.
template <typename T>
void pad_plane(const ConvGeom& g, const T* plane, T* pad) {
  const int64_t Wp = g.W + 2 * g.pw;
  zero_run(pad, g.ph * Wp);
  for (int64_t ih = 0; ih < g.H; ++ih) {
    T* r = pad + (ih + g.ph) * Wp;
    zero_run(r, g.pw);
    copy_run(r + g.pw, plane + ih * g.W, g.W);
    zero_run(r + g.pw + g.W, g.pw);
  }
  zero_run(pad + (g.ph + g.H) * Wp, g.ph * Wp);
}

/// im2col_row for stride 1 and dilation 1 from a zero-padded plane src of width Wp (the plane itself when there
/// is no padding): every output row is one run of oW elements, with no bounds tests.
template <typename T>
void im2col_row_s1(const ConvGeom& g, const T* src, int64_t Wp, T* out, int64_t ki, int64_t kj) {
  const T* in = src + ki * Wp + kj;
  if (g.oW == Wp) {
    copy_run(out, in, g.L());
    return;
  }
  // runs of a fixed length compile to a few moves (small images: most of the work is these runs)
  auto rows = [&](auto width) {
    constexpr int64_t K = decltype(width)::value;
    for (int64_t oh = 0; oh < g.oH; ++oh) std::memcpy(out + oh * K, in + oh * Wp, K * sizeof(T));
  };
  switch (g.oW) {
    case 4: rows(std::integral_constant<int64_t, 4>()); return;
    case 7: rows(std::integral_constant<int64_t, 7>()); return;
    case 8: rows(std::integral_constant<int64_t, 8>()); return;
    case 14: rows(std::integral_constant<int64_t, 14>()); return;
    case 16: rows(std::integral_constant<int64_t, 16>()); return;
    case 28: rows(std::integral_constant<int64_t, 28>()); return;
    default:
      for (int64_t oh = 0; oh < g.oH; ++oh) copy_run(out + oh * g.oW, in + oh * Wp, g.oW);
  }
}

/// col2im_row for stride 1 and dilation 1 into a padded sum accp (H + 2ph, W + 2pw): no bounds tests; the sums
/// that fall into the padding are dropped when the plane is cropped out of it.
template <typename T, typename Acc>
void col2im_row_s1(const ConvGeom& g, const T* src, Acc* accp, int64_t Wp, int64_t ki, int64_t kj) {
  Acc* dst = accp + ki * Wp + kj;
  for (int64_t oh = 0; oh < g.oH; ++oh) {
    Acc* d = dst + oh * Wp;
    const T* s = src + oh * g.oW;
    for (int64_t ow = 0; ow < g.oW; ++ow) d[ow] += static_cast<Acc>(s[ow]);
  }
}

/// Adds row (ki, kj) of one plane's columns (src, oH*oW elements) into the plane's sums acc (H*W).
template <typename T, typename Acc>
void col2im_row(const ConvGeom& g, const T* src, Acc* acc, int64_t ki, int64_t kj) {
  const int64_t off_h = ki * g.dh - g.ph, off_w = kj * g.dw - g.pw;
  int64_t oh_lo, oh_hi, ow_lo, ow_hi;
  inside_range(off_h, g.H, g.sh, g.oH, oh_lo, oh_hi);
  inside_range(off_w, g.W, g.sw, g.oW, ow_lo, ow_hi);
  for (int64_t oh = oh_lo; oh < oh_hi; ++oh) {
    Acc* dst = acc + (oh * g.sh + off_h) * g.W + off_w;
    const T* s = src + oh * g.oW;
    if (g.sw == 1) {
      for (int64_t ow = ow_lo; ow < ow_hi; ++ow) dst[ow] += static_cast<Acc>(s[ow]);
    } else {
      for (int64_t ow = ow_lo; ow < ow_hi; ++ow) dst[ow * g.sw] += static_cast<Acc>(s[ow]);
    }
  }
}

}  // namespace

// Two loop orders. Contiguous columns (N, rows, L): one task per (image, channel), writing that plane's kh*kw
// rows. Columns whose images lie side by side within each row ((rows, N, L), one GEMM per chunk of images): one
// task per channel, each row written for all the images in turn, so the writes run sequentially through memory
// (the image-by-image order strides across rows and thrashes the cache).
void CpuBackend::im2col(const Tensor& col, const Tensor& im, int64_t kh, int64_t kw, int64_t sh, int64_t sw,
                        int64_t ph, int64_t pw, int64_t dh, int64_t dw) {
  ConvGeom g = geometry("im2col", im, col, kh, kw, sh, sw, ph, pw, dh, dw);
  const int64_t N = im.dim() == 4 ? im.size(0) : 1;
  const int64_t kk = kh * kw, L = g.oH * g.oW, HW = g.H * g.W;
  if (g.C * kk == 0 || L == 0 || N == 0) return;
  const bool s1 = sh == 1 && sw == 1 && dh == 1 && dw == 1, padded = s1 && (ph != 0 || pw != 0);
  const int64_t Wp = g.W + 2 * pw, PP = padded ? (g.H + 2 * ph) * Wp : 0;
  const bool interleaved = N > 1 && g.col_n < g.col_r;
  dispatch_all(im.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* pim = static_cast<const T*>(im.data_ptr());
    T* pcol = static_cast<T*>(col.data_ptr());
    // the source of plane (n, c) for the rows: itself, or its padded copy in pad
    auto source = [&](int64_t n, int64_t c, T* pad) -> const T* {
      const T* plane = pim + (n * g.C + c) * HW;
      if (!padded) return plane;
      pad_plane(g, plane, pad);
      return pad;
    };
    auto row = [&](const T* src, T* out, int64_t ki, int64_t kj) {
      if (s1) im2col_row_s1<T>(g, src, Wp, out, ki, kj);
      else im2col_row<T>(g, src, out, ki, kj);
    };
    if (interleaved) {
      parallel_for(0, g.C, std::max<int64_t>(1, kGrainSize / (N * kk * L)), [&](int64_t b, int64_t e) {
        std::unique_ptr<T[]> pad(padded ? new T[static_cast<size_t>(N * PP)] : nullptr);
        std::vector<const T*> src(static_cast<size_t>(N));
        for (int64_t c = b; c < e; ++c) {
          for (int64_t n = 0; n < N; ++n) src[n] = source(n, c, pad.get() + n * PP);
          for (int64_t ki = 0; ki < kh; ++ki)
            for (int64_t kj = 0; kj < kw; ++kj) {
              T* out = pcol + (c * kk + ki * kw + kj) * g.col_r;
              for (int64_t n = 0; n < N; ++n) row(src[n], out + n * g.col_n, ki, kj);
            }
        }
      });
      return;
    }
    parallel_for(0, N * g.C, std::max<int64_t>(1, kGrainSize / (kk * L)), [&](int64_t b, int64_t e) {
      std::unique_ptr<T[]> pad(padded ? new T[static_cast<size_t>(PP)] : nullptr);
      int64_t n = b / g.C, c = b % g.C;
      for (int64_t i = b; i < e; ++i) {
        const T* src = source(n, c, pad.get());
        T* out = pcol + n * g.col_n + c * kk * g.col_r;
        for (int64_t ki = 0; ki < kh; ++ki)
          for (int64_t kj = 0; kj < kw; ++kj) row(src, out + (ki * kw + kj) * g.col_r, ki, kj);
        if (++c == g.C) c = 0, ++n;
      }
    });
  });
}

// The same two loop orders as im2col; each plane sums its rows in the order (ki, kj), so both give the same bits.
void CpuBackend::col2im(const Tensor& im, const Tensor& col, int64_t kh, int64_t kw, int64_t sh, int64_t sw,
                        int64_t ph, int64_t pw, int64_t dh, int64_t dw) {
  ConvGeom g = geometry("col2im", im, col, kh, kw, sh, sw, ph, pw, dh, dw);
  const int64_t N = im.dim() == 4 ? im.size(0) : 1;
  const int64_t kk = kh * kw, L = g.oH * g.oW, HW = g.H * g.W;
  if (im.numel() == 0) return;
  if (im.dtype() == kBool) throw std::invalid_argument("[col2im] not implemented for dtype bool");
  const bool interleaved = N > 1 && g.col_n < g.col_r;
  dispatch_all(im.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, bool>) {
      using Acc = opmath_t<T>;
      constexpr bool in_place = std::is_same_v<T, Acc>;  // sum in the image itself
      const T* pcol = static_cast<const T*>(col.data_ptr());
      T* pim = static_cast<T*>(im.data_ptr());
      const int64_t per_plane = std::max<int64_t>(1, kk * L + HW);
      // stride 1, dilation 1 with padding: sums in a padded scratch plane, then cropped
      const bool s1 = sh == 1 && sw == 1 && dh == 1 && dw == 1 && (ph != 0 || pw != 0);
      const int64_t Wp = g.W + 2 * pw, PP = (g.H + 2 * ph) * Wp;
      // planes [n0, n0 + cnt) of channel c (stride C*HW between images), each summed over its kh*kw rows
      auto planes = [&](int64_t n0, int64_t cnt, int64_t c, Acc* scratch) {
        if (s1) {
          for (int64_t j = 0; j < cnt; ++j) std::fill(scratch + j * PP, scratch + (j + 1) * PP, Acc(0));
          for (int64_t ki = 0; ki < kh; ++ki)
            for (int64_t kj = 0; kj < kw; ++kj) {
              const T* src = pcol + n0 * g.col_n + (c * kk + ki * kw + kj) * g.col_r;
              for (int64_t j = 0; j < cnt; ++j)
                col2im_row_s1<T, Acc>(g, src + j * g.col_n, scratch + j * PP, Wp, ki, kj);
            }
          for (int64_t j = 0; j < cnt; ++j) {
            T* plane = pim + ((n0 + j) * g.C + c) * HW;
            const Acc* a = scratch + j * PP + ph * Wp + pw;
            for (int64_t ih = 0; ih < g.H; ++ih)
              for (int64_t iw = 0; iw < g.W; ++iw) plane[ih * g.W + iw] = static_cast<T>(a[ih * Wp + iw]);
          }
          return;
        }
        auto acc_of = [&](int64_t j) -> Acc* {
          if constexpr (in_place) return pim + ((n0 + j) * g.C + c) * HW;
          else return scratch + j * HW;
        };
        for (int64_t j = 0; j < cnt; ++j) std::fill(acc_of(j), acc_of(j) + HW, Acc(0));
        for (int64_t ki = 0; ki < kh; ++ki)
          for (int64_t kj = 0; kj < kw; ++kj) {
            const T* src = pcol + n0 * g.col_n + (c * kk + ki * kw + kj) * g.col_r;
            for (int64_t j = 0; j < cnt; ++j) col2im_row<T, Acc>(g, src + j * g.col_n, acc_of(j), ki, kj);
          }
        if constexpr (!in_place) {
          for (int64_t j = 0; j < cnt; ++j) {
            T* plane = pim + ((n0 + j) * g.C + c) * HW;
            const Acc* a = acc_of(j);
            for (int64_t i = 0; i < HW; ++i) plane[i] = static_cast<T>(a[i]);
          }
        }
      };
      if (interleaved) {
        parallel_for(0, g.C, std::max<int64_t>(1, kGrainSize / (N * per_plane)), [&](int64_t b, int64_t e) {
          std::vector<Acc> scratch(static_cast<size_t>(N * (s1 ? PP : in_place ? 0 : HW)));
          for (int64_t c = b; c < e; ++c) planes(0, N, c, scratch.data());
        });
        return;
      }
      parallel_for(0, N * g.C, std::max<int64_t>(1, kGrainSize / per_plane), [&](int64_t b, int64_t e) {
        std::vector<Acc> scratch(static_cast<size_t>(s1 ? PP : in_place ? 0 : HW));
        int64_t n = b / g.C, c = b % g.C;
        for (int64_t i = b; i < e; ++i) {
          planes(n, 1, c, scratch.data());
          if (++c == g.C) c = 0, ++n;
        }
      });
    }
  });
}

}  // namespace troupe::cpu
