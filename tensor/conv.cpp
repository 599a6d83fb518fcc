// conv2d and its backward: im2col + gemm, one gemm per chunk of images on the CPU (float32 stride-1 convs on an
// AVX-512 CPU take the direct kernels of cpu/conv_direct.h; elsewhere, on troupe's own float32 sgemm, the GEMM
// packs its columns from large images), with a 1x1 fast path. The
// backward functions are themselves differentiable ops, so double backward works. conv_transpose2d is conv2d's
// input gradient (gemm + col2im); conv1d and conv_transpose1d are the 2-D ops on a height-1 image.
#include <algorithm>
#include "tracing.h"
#include <array>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "autograd.h"
#include "backend.h"
#include "cpu/conv_direct.h"
#include "cpu/conv_gemm.h"
#include "cpu/sgemm.h"
#include "op_helpers.h"
#include "ops.h"
#include "parallel.h"

namespace troupe {

using autograd::SavedVariable;
using autograd::variable_list;
using op_detail::contiguous_raw;
using op_detail::err;

namespace {

// A view of t's storage for a kernel call: no autograd, no view bookkeeping.
Tensor raw_view(const Tensor& t, std::vector<int64_t> sizes, std::vector<int64_t> strides, int64_t extra_offset = 0) {
  return Tensor(std::make_shared<TensorImpl>(t.impl()->storage, std::move(sizes), std::move(strides),
                                             t.storage_offset() + extra_offset, t.dtype()));
}

// ============================================================ conv2d

struct ConvParams {
  int64_t sh, sw, ph, pw, dh, dw, groups;
};

struct ConvGeom {
  int64_t N, C, H, W, O, Cg, kh, kw, oH, oW, L, G, Og, CKK;
  bool direct;  // 1x1, stride 1, no padding: the image itself is the column matrix
};

ConvGeom conv_geom(IntArrayRef in, IntArrayRef w, const ConvParams& p) {
  ConvGeom g{};
  g.N = in[0], g.C = in[1], g.H = in[2], g.W = in[3];
  g.O = w[0], g.Cg = w[1], g.kh = w[2], g.kw = w[3];
  g.oH = (g.H + 2 * p.ph - p.dh * (g.kh - 1) - 1) / p.sh + 1;
  g.oW = (g.W + 2 * p.pw - p.dw * (g.kw - 1) - 1) / p.sw + 1;
  g.L = g.oH * g.oW;
  g.G = p.groups;
  g.Og = g.O / g.G;
  g.CKK = g.Cg * g.kh * g.kw;
  g.direct = g.kh == 1 && g.kw == 1 && p.sh == 1 && p.sw == 1 && p.ph == 0 && p.pw == 0;
  return g;
}

// Images per im2col/col2im call: the column buffer of a chunk stays under kColBytes. Fewer, larger kernel
// calls also mean fewer switches between the OpenMP threads of the kernels and the BLAS threads of gemm.
constexpr int64_t kColBytes = int64_t{32} << 20;

// On the CPU, where one GEMM covers a whole chunk (see conv_forward_chunked), a chunk's columns stay under
// kCpuColBytes instead: the columns and the GEMM's output then stay in the L2 cache between im2col, the GEMM and
// the copy out (measured: 28x28 and 14x14 images run about 1.5x faster than with 1 MB chunks).
constexpr int64_t kCpuColBytes = int64_t{256} << 10;

// On a GPU one GEMM covers as many images as kGpuColBytes of columns hold: per-image GEMMs (a 64 x 576 x 3136
// product for N32 C64 56x56 3x3) leave most of an H200 idle (forward and backward of that conv: 3.8 ms, cuDNN
// 0.79 ms).
constexpr int64_t kGpuColBytes = int64_t{256} << 20;

int64_t chunk_budget(const Tensor& t) { return t.is_cpu() ? kCpuColBytes : kGpuColBytes; }

int64_t chunk_images(const ConvGeom& g, size_t elem, int64_t budget = kColBytes) {
  if (g.direct) return std::max<int64_t>(g.N, 1);
  const int64_t per_image = std::max<int64_t>(1, g.G * g.CKK * g.L * static_cast<int64_t>(elem));
  return std::clamp<int64_t>(budget / per_image, 1, std::max<int64_t>(g.N, 1));
}

// Column matrix (rows, L) of image n of a chunk buffer (nb, rows, L), or the image itself for 1x1 convs.
Tensor image_columns(const ConvGeom& g, const Tensor& x, const Tensor& col, int64_t n, int64_t n0) {
  if (g.direct) return raw_view(x, {g.C, g.L}, {g.L, 1}, n * g.C * g.H * g.W);
  return raw_view(col, {g.G * g.CKK, g.L}, {g.L, 1}, (n - n0) * g.G * g.CKK * g.L);
}

// im2col of images [n0, n0 + cnt) into the chunk buffer.
void chunk_im2col(Backend& be, const ConvGeom& g, const ConvParams& p, const Tensor& x, const Tensor& col, int64_t n0,
                  int64_t cnt) {
  if (g.direct) return;
  const int64_t rows = g.G * g.CKK;
  be.im2col(raw_view(col, {cnt, rows, g.L}, {rows * g.L, g.L, 1}),
            raw_view(x, {cnt, g.C, g.H, g.W}, {g.C * g.H * g.W, g.H * g.W, g.W, 1}, n0 * g.C * g.H * g.W), g.kh, g.kw,
            p.sh, p.sw, p.ph, p.pw, p.dh, p.dw);
}

// ---- CPU: one GEMM per chunk of images
// The columns of a chunk of cnt images are laid out (rows, cnt, L), so that each group's weight multiplies the
// whole chunk at once: (Og, CKK) x (CKK, cnt*L). For small images this replaces cnt small GEMMs by one large one;
// the output and the incoming gradient go between (cnt, O, L) and (O, cnt, L) by a copy.

bool chunked_gemm(const ConvGeom& g, const Tensor& x) { return !g.direct && (x.is_cpu() || x.is_cuda()); }

// The chunk's columns (rows, cnt*L) seen as the (cnt, rows, L) tensor im2col and col2im take.
Tensor chunk_columns(const ConvGeom& g, const Tensor& col, int64_t cnt) {
  const int64_t rows = g.G * g.CKK;
  return raw_view(col, {cnt, rows, g.L}, {g.L, cnt * g.L, 1});
}

// Images [n0, n0 + cnt) of a contiguous (N, C, H, W) tensor.
Tensor image_chunk(const Tensor& t, int64_t C, int64_t H, int64_t W, int64_t n0, int64_t cnt) {
  return raw_view(t, {cnt, C, H, W}, {C * H * W, H * W, W, 1}, n0 * C * H * W);
}

// Copies the runs of L elements of cnt images between (cnt, O, L) and (O, cnt, L) layouts (both contiguous, with
// the same element size): to_images true reads src as (O, cnt, L) and writes dst as (cnt, O, L).
void swap_image_rows(const Tensor& dst, const Tensor& src, int64_t cnt, int64_t O, int64_t L, bool to_images) {
  if (!dst.is_cpu()) {  // another device: one strided copy of the backend's
    const Tensor& images = to_images ? dst : src;
    const Tensor& mat = to_images ? src : dst;
    Tensor as_mat = raw_view(images, {O, cnt, L}, {L, O * L, 1});
    Tensor m = raw_view(mat, {O, cnt, L}, {cnt * L, L, 1});
    if (to_images) backend(dst).copy(as_mat, m);
    else backend(dst).copy(m, as_mat);
    return;
  }
  const size_t es = dst.element_size(), run = static_cast<size_t>(L) * es;
  char* d = static_cast<char*>(dst.data_ptr());
  const char* s = static_cast<const char*>(src.data_ptr());
  parallel_for(0, cnt, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(1, O * L)), [&](int64_t b, int64_t e) {
    for (int64_t n = b; n < e; ++n)
      for (int64_t o = 0; o < O; ++o) {
        const size_t img = static_cast<size_t>((n * O + o) * L) * es, mat = static_cast<size_t>((o * cnt + n) * L) * es;
        if (to_images) std::memcpy(d + img, s + mat, run);
        else std::memcpy(d + mat, s + img, run);
      }
  });
}

// The (O, cnt*L) matrix of gy's images [n0, n0 + cnt): gy's own storage for one image, else a copy into buf.
Tensor gy_matrix(const ConvGeom& g, const Tensor& gy, const Tensor& buf, int64_t n0, int64_t cnt) {
  const int64_t NL = cnt * g.L;
  if (cnt == 1) return raw_view(gy, {g.O, g.L}, {g.L, 1}, n0 * g.O * g.L);
  Tensor m = raw_view(buf, {g.O, NL}, {NL, 1});
  swap_image_rows(m, raw_view(gy, {cnt, g.O, g.L}, {g.O * g.L, g.L, 1}, n0 * g.O * g.L), cnt, g.O, g.L, false);
  return m;
}

Tensor conv_forward_chunked(const Tensor& x, const Tensor& w, const Tensor& bias, const ConvGeom& g,
                            const ConvParams& p, const Tensor& out) {
  Backend& be = backend(x);
  const bool has_bias = bias.defined();
  const int64_t nb = chunk_images(g, x.element_size(), chunk_budget(x)), rows = g.G * g.CKK;
  Tensor col = empty({rows * nb * g.L}, x.options());
  Tensor tmp = nb > 1 ? empty({g.O * nb * g.L}, x.options()) : Tensor();
  for (int64_t n0 = 0; n0 < g.N; n0 += nb) {
    const int64_t cnt = std::min(nb, g.N - n0), NL = cnt * g.L;
    be.im2col(chunk_columns(g, col, cnt), image_chunk(x, g.C, g.H, g.W, n0, cnt), g.kh, g.kw, p.sh, p.sw, p.ph, p.pw,
              p.dh, p.dw);
    // (O, cnt*L): out's image itself for a chunk of one
    Tensor c = cnt == 1 ? raw_view(out, {g.O, g.L}, {g.L, 1}, n0 * g.O * g.L) : raw_view(tmp, {g.O, NL}, {NL, 1});
    if (has_bias) be.copy(c, raw_view(bias, {g.O, NL}, {bias.stride(0), 0}));
    for (int64_t gi = 0; gi < g.G; ++gi) {
      be.gemm(raw_view(c, {g.Og, NL}, {NL, 1}, gi * g.Og * NL),
              raw_view(w, {g.Og, g.CKK}, {g.CKK, 1}, gi * g.Og * g.CKK),
              raw_view(col, {g.CKK, NL}, {NL, 1}, gi * g.CKK * NL), 1.0, has_bias ? 1.0 : 0.0);
    }
    if (cnt > 1)
      swap_image_rows(raw_view(out, {cnt, g.O, g.L}, {g.O * g.L, g.L, 1}, n0 * g.O * g.L), c, cnt, g.O, g.L, true);
  }
  return out;
}

Tensor conv_grad_input_chunked(const Tensor& gy, const Tensor& w, const ConvGeom& g, const ConvParams& p,
                               const Tensor& gx) {
  Backend& be = backend(gy);
  const int64_t nb = chunk_images(g, gy.element_size(), chunk_budget(gy)), rows = g.G * g.CKK;
  Tensor col = empty({rows * nb * g.L}, gy.options());
  Tensor buf = nb > 1 ? empty({g.O * nb * g.L}, gy.options()) : Tensor();
  for (int64_t n0 = 0; n0 < g.N; n0 += nb) {
    const int64_t cnt = std::min(nb, g.N - n0), NL = cnt * g.L;
    Tensor b = gy_matrix(g, gy, buf, n0, cnt);
    for (int64_t gi = 0; gi < g.G; ++gi) {
      be.gemm(raw_view(col, {g.CKK, NL}, {NL, 1}, gi * g.CKK * NL),
              raw_view(w, {g.CKK, g.Og}, {1, g.CKK}, gi * g.Og * g.CKK),  // w_g^T as a transposed view
              raw_view(b, {g.Og, NL}, {NL, 1}, gi * g.Og * NL), 1.0, 0.0);
    }
    be.col2im(image_chunk(gx, g.C, g.H, g.W, n0, cnt), chunk_columns(g, col, cnt), g.kh, g.kw, p.sh, p.sw, p.ph, p.pw,
              p.dh, p.dw);
  }
  return gx;
}

Tensor conv_grad_weight_chunked(const Tensor& gy, const Tensor& x, const ConvGeom& g, const ConvParams& p,
                                const Tensor& gw) {
  Backend& be = backend(gy);
  const int64_t nb = chunk_images(g, x.element_size(), chunk_budget(x)), rows = g.G * g.CKK;
  Tensor col = empty({rows * nb * g.L}, x.options());
  Tensor buf = nb > 1 ? empty({g.O * nb * g.L}, gy.options()) : Tensor();
  for (int64_t n0 = 0; n0 < g.N; n0 += nb) {
    const int64_t cnt = std::min(nb, g.N - n0), NL = cnt * g.L;
    be.im2col(chunk_columns(g, col, cnt), image_chunk(x, g.C, g.H, g.W, n0, cnt), g.kh, g.kw, p.sh, p.sw, p.ph, p.pw,
              p.dh, p.dw);
    Tensor b = gy_matrix(g, gy, buf, n0, cnt);
    for (int64_t gi = 0; gi < g.G; ++gi) {
      be.gemm(raw_view(gw, {g.Og, g.CKK}, {g.CKK, 1}, gi * g.Og * g.CKK),
              raw_view(b, {g.Og, NL}, {NL, 1}, gi * g.Og * NL),
              raw_view(col, {NL, g.CKK}, {1, NL}, gi * g.CKK * NL),  // col_g^T as a transposed view
              1.0, n0 == 0 ? 0.0 : 1.0);
    }
  }
  return gw;
}

// ---- CPU float32 on troupe's own sgemm, large images: no column matrix at all
// The GEMMs pack their B panels from the images (cpu/conv_gemm.h). The forward and the weight gradient work for
// any geometry; the input gradient of a stride-1 conv is itself a stride-1 conv of gy with the flipped,
// transposed weight, so it needs no col2im either.

// An image's column matrix above this size does not stay in L2 between im2col and the GEMM: there packing from
// the image wins (N32 C64 56x56, 7.2 MB: 1.5x for forward + backward); below it im2col's row copies into a
// cached buffer and the strided packing are cheaper than packing from the image (N8 C16 32x32, 0.6 MB: 0.6x).
constexpr int64_t kImplicitColBytes = int64_t{2} << 20;

bool implicit_gemm(const ConvGeom& g, const Tensor& t) {
  return !g.direct && t.is_cpu() && t.dtype() == kFloat32 && g.G * g.CKK * g.L * 4 > kImplicitColBytes &&
         cpu::use_own_sgemm();
}

// An image chunk's (O, cnt*L) output (or gy) buffer stays under this many bytes (in L2 between the GEMM and the copy
// to or from the images); an image larger than that goes straight into out.
constexpr int64_t kImplicitChunkBytes = int64_t{1} << 20;

int64_t implicit_chunk(const ConvGeom& g) {
  return std::clamp<int64_t>(kImplicitChunkBytes / std::max<int64_t>(1, g.O * g.L * 4), 1, std::max<int64_t>(g.N, 1));
}

// Group gi's columns of images [n0, ...) of the contiguous float32 x.
cpu::ConvCols group_cols(const ConvGeom& g, const ConvParams& p, const Tensor& x, int64_t n0, int64_t gi) {
  return {x.data_ptr<float>() + (n0 * g.C + gi * g.Cg) * g.H * g.W, g.C * g.H * g.W, g.Cg, g.H, g.W, g.kh, g.kw,
          p.sh, p.sw, p.ph, p.pw, p.dh, p.dw, g.oH, g.oW};
}

Tensor conv_forward_implicit(const Tensor& x, const Tensor& w, const Tensor& bias, const ConvGeom& g,
                             const ConvParams& p, const Tensor& out) {
  Backend& be = backend(x);
  const bool has_bias = bias.defined();
  const int64_t nb = implicit_chunk(g);
  Tensor tmp = nb > 1 ? empty({g.O * nb * g.L}, x.options()) : Tensor();
  const float* wp = w.data_ptr<float>();
  for (int64_t n0 = 0; n0 < g.N; n0 += nb) {
    const int64_t cnt = std::min(nb, g.N - n0), NL = cnt * g.L;
    // (O, cnt*L): out's image itself for a chunk of one
    Tensor c = cnt == 1 ? raw_view(out, {g.O, g.L}, {g.L, 1}, n0 * g.O * g.L) : raw_view(tmp, {g.O, NL}, {NL, 1});
    if (has_bias) be.copy(c, raw_view(bias, {g.O, NL}, {bias.stride(0), 0}));
    float* cp = c.data_ptr<float>();
    for (int64_t gi = 0; gi < g.G; ++gi)  // (Og, CKK) @ cols (CKK, cnt*L)
      cpu::conv_cols_gemm(group_cols(g, p, x, n0, gi), cnt, g.Og, wp + gi * g.Og * g.CKK, g.CKK,
                          has_bias ? 1.0f : 0.0f, cp + gi * g.Og * NL, NL);
    if (cnt > 1)
      swap_image_rows(raw_view(out, {cnt, g.O, g.L}, {g.O * g.L, g.L, 1}, n0 * g.O * g.L), c, cnt, g.O, g.L, true);
  }
  return out;
}

Tensor conv_grad_weight_implicit(const Tensor& gy, const Tensor& x, const ConvGeom& g, const ConvParams& p,
                                 const Tensor& gw) {
  const int64_t nb = implicit_chunk(g);
  Tensor buf = nb > 1 ? empty({g.O * nb * g.L}, gy.options()) : Tensor();
  float* gwp = gw.data_ptr<float>();
  for (int64_t n0 = 0; n0 < g.N; n0 += nb) {
    const int64_t cnt = std::min(nb, g.N - n0), NL = cnt * g.L;
    const float* bp = gy_matrix(g, gy, buf, n0, cnt).data_ptr<float>();
    for (int64_t gi = 0; gi < g.G; ++gi)  // (Og, cnt*L) @ cols^T (cnt*L, CKK)
      cpu::conv_cols_t_gemm(group_cols(g, p, x, n0, gi), cnt, g.Og, bp + gi * g.Og * NL, NL, n0 == 0 ? 0.0f : 1.0f,
                            gwp + gi * g.Og * g.CKK, g.CKK);
  }
  return gw;
}

constexpr int64_t kImplicitMinChannels = 12;

// w'[c, o, a, b] = w[o, c, kh-1-a, kw-1-b] per group, (C, Og, kh, kw): the weight of the conv of gy that gives a
// stride-1 conv's input gradient (the implicit-GEMM and the direct paths).
Tensor flipped_transposed_weight(const Tensor& w, const ConvGeom& g) {
  const int64_t Cg = g.Cg, Og = g.Og, kk = g.kh * g.kw;
  Tensor wt = empty({g.C, Og, g.kh, g.kw}, w.options());
  const float* ws = w.data_ptr<float>();
  float* wd = wt.data_ptr<float>();
  for (int64_t gi = 0; gi < g.G; ++gi)
    for (int64_t o = 0; o < Og; ++o)
      for (int64_t c = 0; c < Cg; ++c) {
        const float* src = ws + ((gi * Og + o) * Cg + c) * kk;
        float* dst = wd + ((gi * Cg + c) * Og + o) * kk;
        for (int64_t t = 0; t < kk; ++t) dst[t] = src[kk - 1 - t];  // (a, b) <- (kh-1-a, kw-1-b)
      }
  return wt;
}

// The input gradient of a stride-1 conv whose padding is at most dilation * (kernel - 1) as a conv of gy:
// gx[n, c, ih, iw] = sum gy[n, o, ih + ph - ki*dh, iw + pw - kj*dw] w[o, c, ki, kj], i.e. gy convolved with
// w'[c, o, a, b] = w[o, c, kh-1-a, kw-1-b] (per group) under padding d*(k-1) - p. False where that does not hold.
bool conv_grad_input_implicit(const Tensor& gy, const Tensor& w, const ConvGeom& g, const ConvParams& p,
                              const Tensor& gx) {
  const int64_t ph = p.dh * (g.kh - 1) - p.ph, pw = p.dw * (g.kw - 1) - p.pw;
  // with fewer input channels than a micro-kernel tile has rows, GEMM + col2im wastes less (M = C*kh*kw there)
  if (p.sh != 1 || p.sw != 1 || ph < 0 || pw < 0 || g.Cg < kImplicitMinChannels) return false;
  const Tensor wt = flipped_transposed_weight(w, g);
  const ConvParams pt{1, 1, ph, pw, p.dh, p.dw, p.groups};
  const ConvGeom gt = conv_geom(gy.sizes(), wt.sizes(), pt);
  if (gt.oH != g.H || gt.oW != g.W) return false;
  conv_forward_implicit(gy, wt, Tensor(), gt, pt, gx);
  return true;
}

// ---- CPU float32, stride 1, one group, AVX-512: direct kernels on padded images (cpu/conv_direct.h)
// No column matrix and no panel packing: the forward and the input gradient (a stride-1 conv of gy with the
// flipped, transposed weight under padding d*(k-1) - p) run one register-tiled kernel that reads the padded image
// in place; the weight gradient sums products of gy and the padded image over positions. The unpadded 1x1 conv
// (a plain GEMM of the image) keeps the GEMM path.

bool direct_conv(const ConvGeom& g, const ConvParams& p, const Tensor& t) {
  return !g.direct && g.G == 1 && p.sh == 1 && p.sw == 1 && t.is_cpu() && t.dtype() == kFloat32 &&
         cpu::conv_direct_available();
}

cpu::DirectConv direct_geom(const ConvGeom& g, const ConvParams& p) {
  return {g.N, g.C, g.H, g.W, g.O, g.kh, g.kw, p.ph, p.pw, p.dh, p.dw, g.oH, g.oW};
}

// gx = conv(gy, w') with w'[c, o, a, b] = w[o, c, kh-1-a, kw-1-b] under padding d*(k-1) - p; false (nothing done)
// where that padding would be negative (padding larger than the kernel's reach).
bool conv_grad_input_direct(const Tensor& gy, const Tensor& w, const ConvGeom& g, const ConvParams& p,
                            const Tensor& gx) {
  const int64_t ph = p.dh * (g.kh - 1) - p.ph, pw = p.dw * (g.kw - 1) - p.pw;
  if (ph < 0 || pw < 0) return false;
  const Tensor wt = flipped_transposed_weight(w, g);  // one group: (C, O, kh, kw)
  const cpu::DirectConv d{g.N, g.O, g.oH, g.oW, g.C, g.kh, g.kw, ph, pw, p.dh, p.dw, g.H, g.W};
  cpu::conv_direct_forward(d, gy.data_ptr<float>(), wt.data_ptr<float>(), nullptr, gx.data_ptr<float>());
  return true;
}

// out = conv(x, w) + bias, x (N, C, H, W). No autograd.
Tensor conv_forward_raw(const Tensor& x_in, const Tensor& w_in, const Tensor& bias, const ConvParams& p) {
  Tensor x = contiguous_raw(x_in), w = contiguous_raw(w_in);
  ConvGeom g = conv_geom(x.sizes(), w.sizes(), p);
  Tensor out = empty({g.N, g.O, g.oH, g.oW}, x.options());
  if (out.numel() == 0) return out;
  if (direct_conv(g, p, x)) {
    cpu::conv_direct_forward(direct_geom(g, p), x.data_ptr<float>(), w.data_ptr<float>(),
                             bias.defined() ? contiguous_raw(bias).data_ptr<float>() : nullptr, out.data_ptr<float>());
    return out;
  }
  if (implicit_gemm(g, x)) return conv_forward_implicit(x, w, bias, g, p, out);
  if (chunked_gemm(g, x)) return conv_forward_chunked(x, w, bias, g, p, out);
  Backend& be = backend(x);
  const bool has_bias = bias.defined();
  if (has_bias) be.copy(out, raw_view(bias, {g.N, g.O, g.oH, g.oW}, {0, bias.stride(0), 0, 0}));
  const int64_t nb = chunk_images(g, x.element_size());
  Tensor col = g.direct ? Tensor() : empty({nb, g.G * g.CKK, g.L}, x.options());
  for (int64_t n0 = 0; n0 < g.N; n0 += nb) {
    const int64_t cnt = std::min(nb, g.N - n0);
    chunk_im2col(be, g, p, x, col, n0, cnt);
    for (int64_t n = n0; n < n0 + cnt; ++n) {
      Tensor src = image_columns(g, x, col, n, n0);
      for (int64_t gi = 0; gi < g.G; ++gi) {
        be.gemm(raw_view(out, {g.Og, g.L}, {g.L, 1}, (n * g.O + gi * g.Og) * g.L),
                raw_view(w, {g.Og, g.CKK}, {g.CKK, 1}, gi * g.Og * g.CKK),
                raw_view(src, {g.CKK, g.L}, {g.L, 1}, gi * g.CKK * g.L), 1.0, has_bias ? 1.0 : 0.0);
      }
    }
  }
  return out;
}

// d(conv)/d(input) applied to gy: (N, O, oH, oW) -> in_sizes. No autograd.
Tensor conv_grad_input_raw(const Tensor& gy_in, const Tensor& w_in, IntArrayRef in_sizes, const ConvParams& p) {
  Tensor gy = contiguous_raw(gy_in), w = contiguous_raw(w_in);
  ConvGeom g = conv_geom(in_sizes, w.sizes(), p);
  Tensor gx = empty(in_sizes, gy.options());
  if (gx.numel() == 0) return gx;
  Backend& be = backend(gy);
  if (g.L == 0) {
    be.fill(gx, Scalar(0));
    return gx;
  }
  if (direct_conv(g, p, gy) && conv_grad_input_direct(gy, w, g, p, gx)) return gx;
  if (implicit_gemm(g, gy) && conv_grad_input_implicit(gy, w, g, p, gx)) return gx;
  if (chunked_gemm(g, gy)) return conv_grad_input_chunked(gy, w, g, p, gx);
  const int64_t nb = chunk_images(g, gy.element_size());
  Tensor col = g.direct ? Tensor() : empty({nb, g.G * g.CKK, g.L}, gy.options());
  const int64_t img = g.C * g.H * g.W;
  for (int64_t n0 = 0; n0 < g.N; n0 += nb) {
    const int64_t cnt = std::min(nb, g.N - n0);
    for (int64_t n = n0; n < n0 + cnt; ++n) {
      Tensor dst = image_columns(g, gx, col, n, n0);  // the image itself (1x1) or its columns
      for (int64_t gi = 0; gi < g.G; ++gi) {
        be.gemm(raw_view(dst, {g.CKK, g.L}, {g.L, 1}, gi * g.CKK * g.L),
                raw_view(w, {g.CKK, g.Og}, {1, g.CKK}, gi * g.Og * g.CKK),  // w_g^T as a transposed view
                raw_view(gy, {g.Og, g.L}, {g.L, 1}, (n * g.O + gi * g.Og) * g.L), 1.0, 0.0);
      }
    }
    if (!g.direct) {
      const int64_t rows = g.G * g.CKK;
      be.col2im(raw_view(gx, {cnt, g.C, g.H, g.W}, {img, g.H * g.W, g.W, 1}, n0 * img),
                raw_view(col, {cnt, rows, g.L}, {rows * g.L, g.L, 1}), g.kh, g.kw, p.sh, p.sw, p.ph, p.pw, p.dh, p.dw);
    }
  }
  return gx;
}

// d(conv)/d(weight) applied to gy: (N, O, oH, oW) -> w_sizes. No autograd.
Tensor conv_grad_weight_raw(const Tensor& gy_in, const Tensor& x_in, IntArrayRef w_sizes, const ConvParams& p) {
  Tensor gy = contiguous_raw(gy_in), x = contiguous_raw(x_in);
  ConvGeom g = conv_geom(x.sizes(), w_sizes, p);
  Tensor gw = empty(w_sizes, gy.options());
  if (gw.numel() == 0) return gw;
  Backend& be = backend(gy);
  if (g.N == 0 || g.L == 0) {
    be.fill(gw, Scalar(0));
    return gw;
  }
  if (direct_conv(g, p, x)) {
    cpu::conv_direct_grad_weight(direct_geom(g, p), gy.data_ptr<float>(), x.data_ptr<float>(), gw.data_ptr<float>());
    return gw;
  }
  if (implicit_gemm(g, x)) return conv_grad_weight_implicit(gy, x, g, p, gw);
  if (chunked_gemm(g, x)) return conv_grad_weight_chunked(gy, x, g, p, gw);
  const int64_t nb = chunk_images(g, x.element_size());
  Tensor col = g.direct ? Tensor() : empty({nb, g.G * g.CKK, g.L}, x.options());
  for (int64_t n0 = 0; n0 < g.N; n0 += nb) {
    const int64_t cnt = std::min(nb, g.N - n0);
    chunk_im2col(be, g, p, x, col, n0, cnt);
    for (int64_t n = n0; n < n0 + cnt; ++n) {
      Tensor src = image_columns(g, x, col, n, n0);
      for (int64_t gi = 0; gi < g.G; ++gi) {
        be.gemm(raw_view(gw, {g.Og, g.CKK}, {g.CKK, 1}, gi * g.Og * g.CKK),
                raw_view(gy, {g.Og, g.L}, {g.L, 1}, (n * g.O + gi * g.Og) * g.L),
                raw_view(src, {g.L, g.CKK}, {1, g.L}, gi * g.CKK * g.L),  // col_g^T as a transposed view
                1.0, n == 0 ? 0.0 : 1.0);
      }
    }
  }
  return gw;
}

Tensor conv4(const Tensor& x, const Tensor& w, const Tensor& b, const ConvParams& p);
Tensor conv_grad_input(const Tensor& gy, const Tensor& w, IntArrayRef in_sizes, const ConvParams& p);
Tensor conv_grad_weight(const Tensor& gy, const Tensor& x, IntArrayRef w_sizes, const ConvParams& p);

// The gradient of conv with respect to its input, as a differentiable op of (gy, w): its own backward is
// conv (for gy) and the weight gradient (for w).
Tensor conv_grad_input(const Tensor& gy, const Tensor& w, IntArrayRef in_sizes, const ConvParams& p) {
  Tensor gx = conv_grad_input_raw(gy, w, in_sizes, p);
  if (autograd::any_requires_grad({&gy, &w})) {
    const bool need_gy = gy.requires_grad(), need_w = w.requires_grad();
    autograd::record("ConvolutionBackwardBackward0", {gy, w}, gx,
                     [sgy = SavedVariable(need_w ? gy : Tensor(), false),
                      sw = SavedVariable(need_gy ? w : Tensor(), false), p, need_gy, need_w,
                      w_sizes = w.sizes().vec()](const variable_list& gg) {
                       Tensor d_gy, d_w;
                       if (need_gy) d_gy = conv4(gg[0], sw.unpack(), Tensor(), p);
                       if (need_w) d_w = conv_grad_weight(sgy.unpack(), gg[0], w_sizes, p);
                       return variable_list{d_gy, d_w};
                     });
  }
  return gx;
}

// The gradient of conv with respect to its weight, as a differentiable op of (gy, x).
Tensor conv_grad_weight(const Tensor& gy, const Tensor& x, IntArrayRef w_sizes, const ConvParams& p) {
  Tensor gw = conv_grad_weight_raw(gy, x, w_sizes, p);
  if (autograd::any_requires_grad({&gy, &x})) {
    const bool need_gy = gy.requires_grad(), need_x = x.requires_grad();
    autograd::record("ConvolutionBackwardBackward0", {gy, x}, gw,
                     [sgy = SavedVariable(need_x ? gy : Tensor(), false),
                      sx = SavedVariable(need_gy ? x : Tensor(), false), p, need_gy, need_x,
                      x_sizes = x.sizes().vec()](const variable_list& gg) {
                       Tensor d_gy, d_x;
                       if (need_gy) d_gy = conv4(sx.unpack(), gg[0], Tensor(), p);
                       if (need_x) d_x = conv_grad_input(sgy.unpack(), gg[0], x_sizes, p);
                       return variable_list{d_gy, d_x};
                     });
  }
  return gw;
}

// conv2d on a 4-D input with validated arguments, recording ConvolutionBackward0.
Tensor conv4(const Tensor& x, const Tensor& w, const Tensor& b, const ConvParams& p) {
  Tensor out = conv_forward_raw(x, w, b, p);
  if (autograd::any_requires_grad({&x, &w, &b})) {
    const bool need_x = x.requires_grad(), need_w = w.requires_grad(), need_b = b.defined() && b.requires_grad();
    auto node = autograd::record("ConvolutionBackward0", {x, w, b}, out,
                     [sx = SavedVariable(need_w ? x : Tensor(), false), sw = SavedVariable(need_x ? w : Tensor(), false),
                      p, need_x, need_w, need_b, x_sizes = x.sizes().vec(),
                      w_sizes = w.sizes().vec()](const variable_list& g) {
                       Tensor gx, gw, gb;
                       if (need_x && autograd::output_wanted(0)) gx = conv_grad_input(g[0], sw.unpack(), x_sizes, p);
                       if (need_w && autograd::output_wanted(1)) gw = conv_grad_weight(g[0], sx.unpack(), w_sizes, p);
                       if (need_b && autograd::output_wanted(2)) gb = sum(g[0], {0, 2, 3});
                       return variable_list{gx, gw, gb};
                     });
    if (node) node->computes_wanted_outputs = true;
  }
  return out;
}

// conv_transpose2d on a 4-D input: the input gradient of the conv (weight w, params p) that maps out_sizes to
// x's sizes, plus bias; recording ConvolutionBackward0 (x's gradient is that conv, w's the conv's weight gradient
// with the roles of input and output gradient swapped). out_sizes must make the conv's output exactly x's size.
Tensor conv_transpose4(const Tensor& x, const Tensor& w, const Tensor& b, const ConvParams& p, IntArrayRef out_sizes) {
  Tensor out = conv_grad_input_raw(x, w, out_sizes, p);
  if (b.defined() && out.numel() > 0) {
    NoGradGuard no_grad;
    out.add_(b.detach().reshape({1, b.size(0), 1, 1}));
  }
  if (autograd::any_requires_grad({&x, &w, &b})) {
    const bool need_x = x.requires_grad(), need_w = w.requires_grad(), need_b = b.defined() && b.requires_grad();
    auto node = autograd::record("ConvolutionBackward0", {x, w, b}, out,
                     [sx = SavedVariable(need_w ? x : Tensor(), false), sw = SavedVariable(need_x ? w : Tensor(), false),
                      p, need_x, need_w, need_b, w_sizes = w.sizes().vec()](const variable_list& g) {
                       Tensor gx, gw, gb;
                       if (need_x && autograd::output_wanted(0)) gx = conv4(g[0], sw.unpack(), Tensor(), p);
                       if (need_w && autograd::output_wanted(1)) gw = conv_grad_weight(sx.unpack(), g[0], w_sizes, p);
                       if (need_b && autograd::output_wanted(2)) gb = sum(g[0], {0, 2, 3});
                       return variable_list{gx, gw, gb};
                     });
    if (node) node->computes_wanted_outputs = true;
  }
  return out;
}

}  // namespace

namespace {

std::array<int64_t, 2> conv_pair(const char* what, IntArrayRef v, const char* op = "conv2d") {
  if (v.size() == 1) return {v[0], v[0]};
  if (v.size() == 2) return {v[0], v[1]};
  throw std::invalid_argument(err(op, std::string("expected ") + what +
                                          " to be a single integer value or a list of 2 values to match the "
                                          "convolution dimensions, but got " +
                                          what + "=" + list_str(v)));
}

int64_t conv_single(const char* what, IntArrayRef v, const char* op) {
  if (v.size() == 1) return v[0];
  throw std::invalid_argument(err(op, std::string("expected ") + what +
                                          " to be a single integer value or a list of 1 values to match the "
                                          "convolution dimensions, but got " +
                                          what + "=" + list_str(v)));
}

void check_float_or_int(const char* op, const Tensor& t) {
  if (t.dtype() == kBool) throw std::invalid_argument(err(op, "not implemented for dtype bool"));
}

}  // namespace

Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias, IntArrayRef stride, IntArrayRef padding,
              IntArrayRef dilation, int64_t groups) {
  TROUPE_TRACE_OP("aten::_convolution", conv2d(input, weight, bias, stride, padding, dilation, groups), input, weight,
                  bias, tracing::pair(stride), tracing::pair(padding), tracing::pair(dilation), false,
                  std::vector<int64_t>{0, 0}, groups, false, false, true, true);
  if (!input.defined() || !weight.defined()) throw std::invalid_argument(err("conv2d", "got an undefined tensor"));
  if (input.dim() != 3 && input.dim() != 4)
    throw std::invalid_argument(err("conv2d", "expected input to have 4 dimensions (N, C, H, W), got input of shape " +
                                                  shape_str(input.sizes()) +
                                                  " (a 3-D (C, H, W) input is taken as one unbatched image)"));
  if (weight.dim() != 4)
    throw std::invalid_argument(err("conv2d",
                                    "expected weight to have 4 dimensions (C_out, C_in/groups, kH, kW), got weight of "
                                    "shape " + shape_str(weight.sizes())));
  auto s = conv_pair("stride", stride);
  auto pd = conv_pair("padding", padding);
  auto dl = conv_pair("dilation", dilation);
  if (s[0] <= 0 || s[1] <= 0) throw std::invalid_argument(err("conv2d", "non-positive stride is not supported"));
  if (pd[0] < 0 || pd[1] < 0) throw std::invalid_argument(err("conv2d", "negative padding is not supported"));
  if (dl[0] <= 0 || dl[1] <= 0) throw std::invalid_argument(err("conv2d", "non-positive dilation is not supported"));
  if (groups <= 0) throw std::invalid_argument(err("conv2d", "non-positive groups is not supported"));
  if (input.device() != weight.device() || (bias.defined() && bias.device() != input.device()))
    throw std::invalid_argument(err("conv2d", "Expected all tensors to be on the same device, but found input on " +
                                                  input.device().str() + " and weight on " + weight.device().str()));
  if (input.dtype() != weight.dtype())
    throw std::invalid_argument(err("conv2d", std::string("Input type (") + dtype_name(input.dtype()) +
                                                  ") and weight type (" + dtype_name(weight.dtype()) +
                                                  ") should be the same"));
  if (bias.defined() && bias.dtype() != input.dtype())
    throw std::invalid_argument(err("conv2d", std::string("Input type (") + dtype_name(input.dtype()) +
                                                  ") and bias type (" + dtype_name(bias.dtype()) +
                                                  ") should be the same"));
  check_float_or_int("conv2d", input);
  const bool batched = input.dim() == 4;
  std::vector<int64_t> in4 = input.sizes().vec();
  if (!batched) in4.insert(in4.begin(), 1);
  if (weight.size(0) % groups != 0)
    throw std::invalid_argument(err("conv2d", "Given groups=" + std::to_string(groups) +
                                                  ", expected weight to be divisible by " + std::to_string(groups) +
                                                  " at dimension 0, but got weight of size " +
                                                  list_str(weight.sizes()) + " instead"));
  if (in4[1] != weight.size(1) * groups)
    throw std::invalid_argument(err("conv2d", "Given groups=" + std::to_string(groups) + ", weight of size " +
                                                  list_str(weight.sizes()) + ", expected input" + list_str(in4) +
                                                  " to have " + std::to_string(weight.size(1) * groups) +
                                                  " channels, but got " + std::to_string(in4[1]) +
                                                  " channels instead"));
  if (bias.defined() && (bias.dim() != 1 || bias.size(0) != weight.size(0)))
    throw std::invalid_argument(err("conv2d", "Given weight of size " + list_str(weight.sizes()) +
                                                  ", expected bias to be 1-dimensional with " +
                                                  std::to_string(weight.size(0)) + " elements, but got bias of size " +
                                                  list_str(bias.sizes()) + " instead"));
  const int64_t padded_h = in4[2] + 2 * pd[0], padded_w = in4[3] + 2 * pd[1];
  const int64_t ekh = dl[0] * (weight.size(2) - 1) + 1, ekw = dl[1] * (weight.size(3) - 1) + 1;
  if (padded_h < ekh || padded_w < ekw)
    throw std::invalid_argument(err("conv2d", "Calculated padded input size per channel: (" +
                                                  std::to_string(padded_h) + " x " + std::to_string(padded_w) +
                                                  "). Kernel size: (" + std::to_string(ekh) + " x " +
                                                  std::to_string(ekw) +
                                                  "). Kernel size can't be greater than actual input size"));
  ConvParams p{s[0], s[1], pd[0], pd[1], dl[0], dl[1], groups};
  if (batched) return conv4(input, weight, bias, p);
  return conv4(input.unsqueeze(0), weight, bias, p).squeeze(0);
}

Tensor conv_transpose2d(const Tensor& input, const Tensor& weight, const Tensor& bias, IntArrayRef stride,
                        IntArrayRef padding, IntArrayRef output_padding, int64_t groups, IntArrayRef dilation) {
  const char* op = "conv_transpose2d";
  if (!input.defined() || !weight.defined()) throw std::invalid_argument(err(op, "got an undefined tensor"));
  if (input.dim() != 3 && input.dim() != 4)
    throw std::invalid_argument(err(op, "Expected 3D (unbatched) or 4D (batched) input to conv_transpose2d, but got "
                                        "input of size: " + list_str(input.sizes())));
  if (weight.dim() != 4)
    throw std::invalid_argument(err(op, "expected weight to have 4 dimensions (C_in, C_out/groups, kH, kW), got weight "
                                        "of shape " + shape_str(weight.sizes())));
  auto s = conv_pair("stride", stride, op);
  auto pd = conv_pair("padding", padding, op);
  auto op_ = conv_pair("output_padding", output_padding, op);
  auto dl = conv_pair("dilation", dilation, op);
  if (s[0] <= 0 || s[1] <= 0) throw std::invalid_argument(err(op, "non-positive stride is not supported"));
  if (pd[0] < 0 || pd[1] < 0) throw std::invalid_argument(err(op, "negative padding is not supported"));
  if (op_[0] < 0 || op_[1] < 0) throw std::invalid_argument(err(op, "negative output_padding is not supported"));
  if (dl[0] <= 0 || dl[1] <= 0) throw std::invalid_argument(err(op, "non-positive dilation is not supported"));
  if (groups <= 0) throw std::invalid_argument(err(op, "non-positive groups is not supported"));
  if (op_[0] >= std::max(s[0], dl[0]) || op_[1] >= std::max(s[1], dl[1]))
    throw std::invalid_argument(err(
        op, "output padding must be smaller than either stride or dilation, but got output_padding_height: " +
                std::to_string(op_[0]) + " output_padding_width: " + std::to_string(op_[1]) + " stride_height: " +
                std::to_string(s[0]) + " stride_width: " + std::to_string(s[1]) + " dilation_height: " +
                std::to_string(dl[0]) + " dilation_width: " + std::to_string(dl[1])));
  if (input.device() != weight.device() || (bias.defined() && bias.device() != input.device()))
    throw std::invalid_argument(err(op, "Expected all tensors to be on the same device, but found input on " +
                                            input.device().str() + " and weight on " + weight.device().str()));
  if (input.dtype() != weight.dtype() || (bias.defined() && bias.dtype() != input.dtype()))
    throw std::invalid_argument(err(op, std::string("Input type (") + dtype_name(input.dtype()) + ") and " +
                                            (input.dtype() != weight.dtype() ? "weight" : "bias") + " type (" +
                                            dtype_name(input.dtype() != weight.dtype() ? weight.dtype() : bias.dtype()) +
                                            ") should be the same"));
  check_float_or_int(op, input);
  const bool batched = input.dim() == 4;
  std::vector<int64_t> in4 = input.sizes().vec();
  if (!batched) in4.insert(in4.begin(), 1);
  if (weight.size(0) % groups != 0)
    throw std::invalid_argument(err(op, "Given groups=" + std::to_string(groups) +
                                            ", expected weight to be divisible by " + std::to_string(groups) +
                                            " at dimension 0, but got weight of size " + list_str(weight.sizes()) +
                                            " instead"));
  if (in4[1] != weight.size(0))
    throw std::invalid_argument(err(op, "Given transposed=1, weight of size " + list_str(weight.sizes()) +
                                            ", expected input" + list_str(in4) + " to have " +
                                            std::to_string(weight.size(0)) + " channels, but got " +
                                            std::to_string(in4[1]) + " channels instead"));
  const int64_t c_out = weight.size(1) * groups;
  if (bias.defined() && (bias.dim() != 1 || bias.size(0) != c_out))
    throw std::invalid_argument(err(op, "Given transposed=1, weight of size " + list_str(weight.sizes()) +
                                            ", expected bias to be 1-dimensional with " + std::to_string(c_out) +
                                            " elements, but got bias of size " + list_str(bias.sizes()) + " instead"));
  // (in - 1) * stride - 2 * padding + dilation * (k - 1) + output_padding + 1
  const int64_t oh = (in4[2] - 1) * s[0] - 2 * pd[0] + dl[0] * (weight.size(2) - 1) + op_[0] + 1;
  const int64_t ow = (in4[3] - 1) * s[1] - 2 * pd[1] + dl[1] * (weight.size(3) - 1) + op_[1] + 1;
  if (oh <= 0 || ow <= 0)
    throw std::invalid_argument(err(op, "Given input size per channel: (" + std::to_string(in4[2]) + " x " +
                                            std::to_string(in4[3]) + "). Calculated output size per channel: (" +
                                            std::to_string(oh) + " x " + std::to_string(ow) +
                                            "). Output size is too small"));
  ConvParams p{s[0], s[1], pd[0], pd[1], dl[0], dl[1], groups};
  Tensor x = batched ? input : input.unsqueeze(0);
  // With output_padding >= stride (allowed when dilation is larger) the conv of the output size has
  // output_padding / stride more rows than the input: zero rows appended to the input contribute nothing.
  const int64_t extra_h = op_[0] / s[0], extra_w = op_[1] / s[1];
  if (extra_h > 0 || extra_w > 0) {
    std::vector<int64_t> zs = x.sizes().vec();
    if (extra_h > 0) {
      zs[2] = extra_h;
      x = cat({x, zeros(zs, x.options())}, 2);
      zs[2] = x.size(2);
    }
    if (extra_w > 0) {
      zs[3] = extra_w;
      x = cat({x, zeros(zs, x.options())}, 3);
    }
  }
  Tensor out = conv_transpose4(x, weight, bias, p, {in4[0], c_out, oh, ow});
  return batched ? out : out.squeeze(0);
}

Tensor conv1d(const Tensor& input, const Tensor& weight, const Tensor& bias, IntArrayRef stride, IntArrayRef padding,
              IntArrayRef dilation, int64_t groups) {
  const char* op = "conv1d";
  if (!input.defined() || !weight.defined()) throw std::invalid_argument(err(op, "got an undefined tensor"));
  if (input.dim() != 2 && input.dim() != 3)
    throw std::invalid_argument(err(op, "Expected 2D (unbatched) or 3D (batched) input to conv1d, but got input of "
                                        "size: " + list_str(input.sizes())));
  if (weight.dim() != 3)
    throw std::invalid_argument(err(op, "expected weight to have 3 dimensions (C_out, C_in/groups, kL), got weight of "
                                        "shape " + shape_str(weight.sizes())));
  const int64_t s = conv_single("stride", stride, op), p = conv_single("padding", padding, op),
                d = conv_single("dilation", dilation, op);
  if (groups > 0 && weight.size(0) % groups == 0 && input.size(-2) != weight.size(1) * groups) {
    std::vector<int64_t> in3 = input.sizes().vec();
    if (input.dim() == 2) in3.insert(in3.begin(), 1);
    throw std::invalid_argument(err(op, "Given groups=" + std::to_string(groups) + ", weight of size " +
                                            list_str(weight.sizes()) + ", expected input" + list_str(in3) +
                                            " to have " + std::to_string(weight.size(1) * groups) +
                                            " channels, but got " + std::to_string(in3[1]) + " channels instead"));
  }
  if (p >= 0 && s > 0 && d > 0 && input.size(-1) + 2 * p < d * (weight.size(2) - 1) + 1)
    throw std::invalid_argument(err(op, "Calculated padded input size per channel: (" +
                                            std::to_string(input.size(-1) + 2 * p) + "). Kernel size: (" +
                                            std::to_string(d * (weight.size(2) - 1) + 1) +
                                            "). Kernel size can't be greater than actual input size"));
  // (N, C, L) as (N, C, 1, L)
  return conv2d(input.unsqueeze(-2), weight.unsqueeze(-2), bias, {1, s}, {0, p}, {1, d}, groups).squeeze(-2);
}

Tensor conv_transpose1d(const Tensor& input, const Tensor& weight, const Tensor& bias, IntArrayRef stride,
                        IntArrayRef padding, IntArrayRef output_padding, int64_t groups, IntArrayRef dilation) {
  const char* op = "conv_transpose1d";
  if (!input.defined() || !weight.defined()) throw std::invalid_argument(err(op, "got an undefined tensor"));
  if (input.dim() != 2 && input.dim() != 3)
    throw std::invalid_argument(err(op, "Expected 2D (unbatched) or 3D (batched) input to conv_transpose1d, but got "
                                        "input of size: " + list_str(input.sizes())));
  if (weight.dim() != 3)
    throw std::invalid_argument(err(op, "expected weight to have 3 dimensions (C_in, C_out/groups, kL), got weight of "
                                        "shape " + shape_str(weight.sizes())));
  const int64_t s = conv_single("stride", stride, op), p = conv_single("padding", padding, op),
                o = conv_single("output_padding", output_padding, op), d = conv_single("dilation", dilation, op);
  // (N, C, L) as (N, C, 1, L)
  return conv_transpose2d(input.unsqueeze(-2), weight.unsqueeze(-2), bias, {1, s}, {0, p}, {0, o}, groups, {1, d})
      .squeeze(-2);
}

}  // namespace troupe
