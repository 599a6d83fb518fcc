// CPU kernels for linear algebra and convolution: gemm (OpenBLAS for float/double, float32 through
// conversion for float16/bfloat16, a plain loop for integers), im2col and col2im.
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
};

ConvGeom geometry(const char* op, const Tensor& im, const Tensor& col, int64_t kh, int64_t kw, int64_t sh, int64_t sw,
                  int64_t ph, int64_t pw, int64_t dh, int64_t dw) {
  if (im.dim() != 3 && im.dim() != 4)
    throw std::invalid_argument(std::string("[") + op + "] expected a (C, H, W) or (N, C, H, W) image, got shape " +
                                shape_str(im.sizes()));
  if (!im.is_contiguous() || !col.is_contiguous())
    throw std::invalid_argument(std::string("[") + op + "] expected contiguous image and columns");
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
  return g;
}

/// One image (C, H, W) -> columns (C*kh*kw, oH*oW); rows [r0, r1) only.
template <typename T>
void im2col_rows(const ConvGeom& g, const T* im, T* col, int64_t r0, int64_t r1) {
  const int64_t L = g.oH * g.oW;
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t kj = r % g.kw, ki = (r / g.kw) % g.kh, c = r / (g.kw * g.kh);
    const T* plane = im + c * g.H * g.W;
    T* out = col + r * L;
    // ow range whose input column is inside the image: 0 <= ow*sw - pw + kj*dw < W
    const int64_t off_w = kj * g.dw - g.pw;
    int64_t ow_lo = off_w >= 0 ? 0 : (-off_w + g.sw - 1) / g.sw;
    int64_t ow_hi = g.W - off_w <= 0 ? 0 : (g.W - off_w + g.sw - 1) / g.sw;  // first ow with iw >= W
    ow_lo = std::min(ow_lo, g.oW);
    ow_hi = std::clamp(ow_hi, ow_lo, g.oW);
    for (int64_t oh = 0; oh < g.oH; ++oh) {
      T* o = out + oh * g.oW;
      const int64_t ih = oh * g.sh - g.ph + ki * g.dh;
      if (ih < 0 || ih >= g.H) {
        std::fill(o, o + g.oW, T(0));
        continue;
      }
      const T* row = plane + ih * g.W;
      std::fill(o, o + ow_lo, T(0));
      if (g.sw == 1) {
        if (ow_hi > ow_lo) std::copy(row + ow_lo + off_w, row + ow_hi + off_w, o + ow_lo);
      } else {
        for (int64_t ow = ow_lo; ow < ow_hi; ++ow) o[ow] = row[ow * g.sw + off_w];
      }
      std::fill(o + ow_hi, o + g.oW, T(0));
    }
  }
}

/// Columns -> one image, channels [c0, c1): the image's channels are overwritten with the sums.
template <typename T>
void col2im_channels(const ConvGeom& g, const T* col, T* im, int64_t c0, int64_t c1) {
  using Acc = opmath_t<T>;
  const int64_t L = g.oH * g.oW, HW = g.H * g.W;
  std::vector<Acc> buf(static_cast<size_t>(HW));
  for (int64_t c = c0; c < c1; ++c) {
    std::fill(buf.begin(), buf.end(), Acc(0));
    for (int64_t ki = 0; ki < g.kh; ++ki) {
      for (int64_t kj = 0; kj < g.kw; ++kj) {
        const T* src = col + ((c * g.kh + ki) * g.kw + kj) * L;
        const int64_t off_w = kj * g.dw - g.pw;
        int64_t ow_lo = off_w >= 0 ? 0 : (-off_w + g.sw - 1) / g.sw;
        int64_t ow_hi = g.W - off_w <= 0 ? 0 : (g.W - off_w + g.sw - 1) / g.sw;
        ow_lo = std::min(ow_lo, g.oW);
        ow_hi = std::clamp(ow_hi, ow_lo, g.oW);
        for (int64_t oh = 0; oh < g.oH; ++oh) {
          const int64_t ih = oh * g.sh - g.ph + ki * g.dh;
          if (ih < 0 || ih >= g.H) continue;
          Acc* dst = buf.data() + ih * g.W;
          const T* s = src + oh * g.oW;
          for (int64_t ow = ow_lo; ow < ow_hi; ++ow) dst[ow * g.sw + off_w] += static_cast<Acc>(s[ow]);
        }
      }
    }
    T* out = im + c * HW;
    for (int64_t i = 0; i < HW; ++i) out[i] = static_cast<T>(buf[i]);
  }
}

}  // namespace

void CpuBackend::im2col(const Tensor& col, const Tensor& im, int64_t kh, int64_t kw, int64_t sh, int64_t sw,
                        int64_t ph, int64_t pw, int64_t dh, int64_t dw) {
  ConvGeom g = geometry("im2col", im, col, kh, kw, sh, sw, ph, pw, dh, dw);
  const int64_t N = im.dim() == 4 ? im.size(0) : 1;
  const int64_t rows = g.C * kh * kw, L = g.oH * g.oW;
  if (rows == 0 || L == 0 || N == 0) return;
  dispatch_all(im.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* pim = static_cast<const T*>(im.data_ptr());
    T* pcol = static_cast<T*>(col.data_ptr());
    const int64_t total = N * rows;
    parallel_for(0, total, std::max<int64_t>(1, kGrainSize / L), [&](int64_t b, int64_t e) {
      while (b < e) {
        const int64_t n = b / rows, r0 = b % rows, r1 = std::min(rows, r0 + (e - b));
        im2col_rows<T>(g, pim + n * g.C * g.H * g.W, pcol + n * rows * L, r0, r1);
        b += r1 - r0;
      }
    });
  });
}

void CpuBackend::col2im(const Tensor& im, const Tensor& col, int64_t kh, int64_t kw, int64_t sh, int64_t sw,
                        int64_t ph, int64_t pw, int64_t dh, int64_t dw) {
  ConvGeom g = geometry("col2im", im, col, kh, kw, sh, sw, ph, pw, dh, dw);
  const int64_t N = im.dim() == 4 ? im.size(0) : 1;
  const int64_t rows = g.C * kh * kw, L = g.oH * g.oW;
  if (im.numel() == 0) return;
  if (im.dtype() == kBool) throw std::invalid_argument("[col2im] not implemented for dtype bool");
  dispatch_all(im.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, bool>) {
      const T* pcol = static_cast<const T*>(col.data_ptr());
      T* pim = static_cast<T*>(im.data_ptr());
      const int64_t total = N * g.C;
      const int64_t per_channel = std::max<int64_t>(1, kh * kw * L);
      parallel_for(0, total, std::max<int64_t>(1, kGrainSize / per_channel), [&](int64_t b, int64_t e) {
        while (b < e) {
          const int64_t n = b / g.C, c0 = b % g.C, c1 = std::min(g.C, c0 + (e - b));
          col2im_channels<T>(g, pcol + n * rows * L, pim + n * g.C * g.H * g.W, c0, c1);
          b += c1 - c0;
        }
      });
    }
  });
}

}  // namespace troupe::cpu
