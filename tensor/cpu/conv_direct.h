// conv2d on float32 without im2col: stride-1 "direct" AVX-512 kernels on zero-padded copies of the images
// (conv_direct.cpp).
#pragma once

#include <cstdint>

namespace troupe::cpu {

/// A stride-1, one-group conv2d of contiguous NCHW float32 tensors: N images of C channels H x W, O output
/// channels, a kh x kw kernel with padding (ph, pw) and dilation (dh, dw), giving oH x oW outputs.
struct DirectConv {
  int64_t N, C, H, W, O, kh, kw, ph, pw, dh, dw, oH, oW;
};

/// True where the direct kernels run: an x86-64 CPU with AVX-512 (F, VL, BW, DQ) and a GCC build.
bool conv_direct_available();

/// out (N, O, oH, oW) = conv2d(x (N, C, H, W), w (O, C, kh, kw)) + bias (O floats, or null).
void conv_direct_forward(const DirectConv& g, const float* x, const float* w, const float* bias, float* out);

/// gw (O, C, kh, kw) = the weight gradient of conv2d(x, w) for the output gradient gy (N, O, oH, oW).
void conv_direct_grad_weight(const DirectConv& g, const float* gy, const float* x, float* gw);

}  // namespace troupe::cpu
