// conv2d's GEMMs on float32 images with the im2col matrix never stored: troupe's own sgemm packs its B panels
// straight from the images (conv_gemm.cpp).
#pragma once

#include <cstdint>

namespace troupe::cpu {

/// One group's view of contiguous NCHW images: C channels of H x W starting at x, image n at x + n * img_stride;
/// a kh x kw kernel with stride, padding and dilation giving oH x oW outputs. Column q = (n, oh, ow) and row
/// r = (c, ki, kj) of its im2col matrix hold x[n, c, oh*sh - ph + ki*dh, ow*sw - pw + kj*dw] (0 outside).
struct ConvCols {
  const float* x;
  int64_t img_stride, C, H, W, kh, kw, sh, sw, ph, pw, dh, dw, oH, oW;
};

/// c (M x cnt*oH*oW, row stride ldc) = A (M x C*kh*kw, row stride lda) @ cols(images [0, cnt)) + beta * c:
/// conv2d's forward for one group, the columns packed from the images inside the GEMM.
void conv_cols_gemm(const ConvCols& s, int64_t cnt, int64_t M, const float* a, int64_t lda, float beta, float* c,
                    int64_t ldc);

/// c (M x C*kh*kw, row stride ldc) = A (M x cnt*oH*oW, row stride lda) @ cols(images [0, cnt))^T + beta * c:
/// conv2d's weight gradient for one group (A = the output gradient), the columns packed inside the GEMM.
void conv_cols_t_gemm(const ConvCols& s, int64_t cnt, int64_t M, const float* a, int64_t lda, float beta, float* c,
                      int64_t ldc);

}  // namespace troupe::cpu
