// conv2d, max_pool2d, avg_pool2d, dropout: PyTorch fixtures (forward and gradients), closed forms, double
// backward, unbatched input, dtypes and error messages.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <utility>
#include <string>
#include <vector>

#include "common/fixtures.h"
#include "tensor/autograd.h"
#include "tensor/gradcheck.h"
#include "tensor/ops.h"
#include "tensor/pool_detail.h"

using namespace troupe;
using troupe::testing::Fixtures;
using troupe::testing::tensors_close;

namespace {

template <typename F>
void expect_error(F&& f, const std::string& sub) {
  try {
    f();
    ADD_FAILURE() << "expected an exception containing: " << sub;
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find(sub), std::string::npos) << "message: " << e.what() << "\nwanted: " << sub;
  }
}

std::string grad_fn_name(const Tensor& t) {
  auto fn = t.grad_fn();
  return fn ? fn->name() : "";
}

// Direct-loop convolution in double (reference for the cases without fixtures).
Tensor ref_conv(const Tensor& x, const Tensor& w, const Tensor& b, int64_t sh, int64_t sw, int64_t ph, int64_t pw,
                int64_t dh, int64_t dw, int64_t groups) {
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t O = w.size(0), Cg = w.size(1), kh = w.size(2), kw = w.size(3);
  const int64_t oH = (H + 2 * ph - dh * (kh - 1) - 1) / sh + 1, oW = (W + 2 * pw - dw * (kw - 1) - 1) / sw + 1;
  auto xv = x.to_vector<double>(), wv = w.to_vector<double>();
  std::vector<double> bv = b.defined() ? b.to_vector<double>() : std::vector<double>(O, 0.0);
  std::vector<double> out(static_cast<size_t>(N * O * oH * oW));
  const int64_t Og = O / groups;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o) {
      const int64_t g = o / Og;
      for (int64_t oh = 0; oh < oH; ++oh)
        for (int64_t ow = 0; ow < oW; ++ow) {
          double s = bv[o];
          for (int64_t c = 0; c < Cg; ++c)
            for (int64_t i = 0; i < kh; ++i)
              for (int64_t j = 0; j < kw; ++j) {
                const int64_t ih = oh * sh - ph + i * dh, iw = ow * sw - pw + j * dw;
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                s += xv[((n * C + g * Cg + c) * H + ih) * W + iw] * wv[((o * Cg + c) * kh + i) * kw + j];
              }
          out[((n * O + o) * oH + oh) * oW + ow] = s;
        }
    }
  return tensor(out, dtype(kFloat64)).view({N, O, oH, oW});
}

// Gradients of (conv(x, w) * g).sum() with respect to x and w, by direct loops in double.
std::pair<Tensor, Tensor> ref_conv_grads(const Tensor& x, const Tensor& w, const Tensor& g, int64_t sh, int64_t sw,
                                         int64_t ph, int64_t pw, int64_t dh, int64_t dw, int64_t groups) {
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t O = w.size(0), Cg = w.size(1), kh = w.size(2), kw = w.size(3), oH = g.size(2), oW = g.size(3);
  auto xv = x.to_vector<double>(), wv = w.to_vector<double>(), gv = g.to_vector<double>();
  std::vector<double> gx(xv.size(), 0.0), gw(wv.size(), 0.0);
  const int64_t Og = O / groups;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t oh = 0; oh < oH; ++oh)
        for (int64_t ow = 0; ow < oW; ++ow) {
          const double gg = gv[((n * O + o) * oH + oh) * oW + ow];
          for (int64_t c = 0; c < Cg; ++c)
            for (int64_t i = 0; i < kh; ++i)
              for (int64_t j = 0; j < kw; ++j) {
                const int64_t ih = oh * sh - ph + i * dh, iw = ow * sw - pw + j * dw;
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                const int64_t xi = ((n * C + (o / Og) * Cg + c) * H + ih) * W + iw;
                const int64_t wi = ((o * Cg + c) * kh + i) * kw + j;
                gx[xi] += gg * wv[wi];
                gw[wi] += gg * xv[xi];
              }
        }
  return {tensor(gx, dtype(kFloat64)).view(x.sizes()), tensor(gw, dtype(kFloat64)).view(w.sizes())};
}

}  // namespace

// ---------------------------------------------------------------- conv2d vs PyTorch

TEST(Conv2d, FixturesForwardAndGradients) {
  auto fx = Fixtures::load("conv2d.txt");
  for (int i = 0; i <= 5; ++i) {
    const std::string c = "conv" + std::to_string(i);
    SCOPED_TRACE(c);
    auto p = fx.ints(c + "_params");  // stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, groups, has_bias
    Tensor x = fx.get(c + "_input").requires_grad_();
    Tensor w = fx.get(c + "_weight").requires_grad_();
    Tensor b = p[7] ? fx.get(c + "_bias").requires_grad_() : Tensor();
    Tensor out = conv2d(x, w, b, {p[0], p[1]}, {p[2], p[3]}, {p[4], p[5]}, p[6]);
    EXPECT_EQ(grad_fn_name(out), "ConvolutionBackward0");
    EXPECT_TRUE(tensors_close(out, fx.get(c + "_out"), 1e-10, 1e-10, true));
    (out * fx.get(c + "_w")).sum().backward();
    EXPECT_TRUE(tensors_close(x.grad(), fx.get(c + "_ginput"), 1e-10, 1e-10, true));
    EXPECT_TRUE(tensors_close(w.grad(), fx.get(c + "_gweight"), 1e-10, 1e-10, true));
    if (p[7]) {
      EXPECT_TRUE(tensors_close(b.grad(), fx.get(c + "_gbias"), 1e-10, 1e-10, true));
    }
  }
}

TEST(Conv2d, Float32MatchesFixtures) {
  auto fx = Fixtures::load("conv2d.txt");
  for (int i = 0; i <= 5; ++i) {
    const std::string c = "conv" + std::to_string(i);
    SCOPED_TRACE(c);
    auto p = fx.ints(c + "_params");
    Tensor x = fx.get(c + "_input").to(kFloat32), w = fx.get(c + "_weight").to(kFloat32);
    Tensor b = p[7] ? fx.get(c + "_bias").to(kFloat32) : Tensor();
    Tensor out = conv2d(x, w, b, {p[0], p[1]}, {p[2], p[3]}, {p[4], p[5]}, p[6]);
    EXPECT_EQ(out.dtype(), kFloat32);
    EXPECT_TRUE(tensors_close(out, fx.get(c + "_out"), 1e-4, 1e-4));
  }
}

TEST(Conv2d, OneByOneFastPathMatchesReference) {
  manual_seed(81);
  for (int64_t groups : {1, 2}) {
    Tensor x = randn({2, 4, 5, 3}, dtype(kFloat64)).requires_grad_();
    Tensor w = randn({6, 4 / groups, 1, 1}, dtype(kFloat64)).requires_grad_();
    Tensor b = randn({6}, dtype(kFloat64)).requires_grad_();
    Tensor out = conv2d(x, w, b, 1, 0, 1, groups);
    EXPECT_TRUE(tensors_close(out, ref_conv(x.detach(), w.detach(), b.detach(), 1, 1, 0, 0, 1, 1, groups), 1e-12, 1e-12));
    // gradients: compare against the generic path (stride-1 3x3 kernel whose only non-zero tap is the centre)
    Tensor g = randn(out.sizes(), dtype(kFloat64));
    (out * g).sum().backward();
    Tensor x2 = x.detach().clone().requires_grad_();
    Tensor w3 = zeros({6, 4 / groups, 3, 3}, dtype(kFloat64));
    w3.slice(2, 1, 2).slice(3, 1, 2).copy_(w.detach());
    w3.requires_grad_();
    Tensor out3 = conv2d(x2, w3, b.detach(), 1, 1, 1, groups);
    EXPECT_TRUE(tensors_close(out3, out.detach(), 1e-12, 1e-12));
    (out3 * g).sum().backward();
    EXPECT_TRUE(tensors_close(x.grad(), x2.grad(), 1e-12, 1e-12));
    EXPECT_TRUE(tensors_close(w.grad(), w3.grad().slice(2, 1, 2).slice(3, 1, 2), 1e-12, 1e-12));
  }
}

TEST(Conv2d, MoreConfigsAgainstReferenceLoop) {
  manual_seed(82);
  struct Cfg { int64_t sh, sw, ph, pw, dh, dw, groups, C, O, kh, kw; };
  for (Cfg c : {Cfg{2, 3, 1, 2, 1, 2, 1, 3, 2, 3, 2}, Cfg{1, 1, 0, 0, 3, 1, 3, 6, 3, 2, 2},
                Cfg{3, 1, 2, 0, 1, 1, 2, 4, 4, 5, 1}, Cfg{1, 2, 1, 1, 1, 1, 1, 2, 3, 1, 1}}) {
    Tensor x = randn({2, c.C, 9, 8}, dtype(kFloat64));
    Tensor w = randn({c.O, c.C / c.groups, c.kh, c.kw}, dtype(kFloat64));
    Tensor b = randn({c.O}, dtype(kFloat64));
    Tensor out = conv2d(x, w, b, {c.sh, c.sw}, {c.ph, c.pw}, {c.dh, c.dw}, c.groups);
    EXPECT_TRUE(tensors_close(out, ref_conv(x, w, b, c.sh, c.sw, c.ph, c.pw, c.dh, c.dw, c.groups), 1e-12, 1e-12));
  }
}

TEST(Conv2d, LargeImagesProcessedInChunks) {
  // 21 MB of columns per image: the images go through im2col/col2im one chunk at a time
  manual_seed(86);
  Tensor x = randn({3, 32, 96, 96}, dtype(kFloat64)).requires_grad_();
  Tensor w = randn({4, 32, 3, 3}, dtype(kFloat64)).requires_grad_();
  Tensor out = conv2d(x, w, Tensor(), 1, 1);
  Tensor g = randn(out.sizes(), dtype(kFloat64));
  (out * g).sum().backward();
  Tensor gw_sum = zeros({4, 32, 3, 3}, dtype(kFloat64));
  for (int64_t n = 0; n < 3; ++n) {
    Tensor xn = x.detach().slice(0, n, n + 1).clone().requires_grad_();
    Tensor wn = w.detach().clone().requires_grad_();
    Tensor on = conv2d(xn, wn, Tensor(), 1, 1);
    EXPECT_TRUE(tensors_close(out.detach().slice(0, n, n + 1), on.detach(), 1e-12, 1e-12));
    (on * g.slice(0, n, n + 1)).sum().backward();
    EXPECT_TRUE(tensors_close(x.grad().slice(0, n, n + 1), xn.grad(), 1e-12, 1e-12));
    gw_sum = gw_sum + wn.grad();
  }
  EXPECT_TRUE(tensors_close(w.grad(), gw_sum, 1e-10, 1e-10));
  Tensor xs = x.detach().slice(2, 0, 5).slice(3, 0, 6).slice(1, 0, 3);
  EXPECT_TRUE(tensors_close(conv2d(xs, w.detach().slice(1, 0, 3)),
                            ref_conv(xs.contiguous(), w.detach().slice(1, 0, 3).contiguous(), Tensor(), 1, 1, 0, 0, 1, 1, 1),
                            1e-12, 1e-12));
}

TEST(Conv2d, ManySmallImagesOneGemmPerChunk) {
  // On the CPU the images of a chunk share one GEMM, their columns side by side; 30 images of 16 channels of
  // 5x4 make three chunks (11, 11, 8 images in float64) and a chunk of one image per call here and there.
  manual_seed(87);
  struct Cfg { int64_t sh, sw, ph, pw, dh, dw, groups, C, O, kh, kw; };
  for (Cfg c : {Cfg{1, 1, 1, 1, 1, 1, 1, 16, 6, 3, 3}, Cfg{2, 1, 0, 2, 1, 2, 2, 16, 4, 3, 2},
                Cfg{1, 1, 0, 0, 1, 1, 4, 16, 8, 2, 2}, Cfg{1, 2, 2, 1, 2, 1, 1, 16, 3, 3, 3}}) {
    SCOPED_TRACE(::testing::Message() << "stride " << c.sh << "," << c.sw << " padding " << c.ph << "," << c.pw
                                    << " dilation " << c.dh << "," << c.dw << " groups " << c.groups);
    Tensor x = randn({30, c.C, 5, 4}, dtype(kFloat64)).requires_grad_();
    Tensor w = randn({c.O, c.C / c.groups, c.kh, c.kw}, dtype(kFloat64)).requires_grad_();
    Tensor b = randn({c.O}, dtype(kFloat64)).requires_grad_();
    Tensor out = conv2d(x, w, b, {c.sh, c.sw}, {c.ph, c.pw}, {c.dh, c.dw}, c.groups);
    EXPECT_TRUE(tensors_close(out, ref_conv(x.detach(), w.detach(), b.detach(), c.sh, c.sw, c.ph, c.pw, c.dh, c.dw,
                                            c.groups),
                              1e-12, 1e-12));
    Tensor g = randn(out.sizes(), dtype(kFloat64));
    (out * g).sum().backward();
    auto [gx, gw] = ref_conv_grads(x.detach(), w.detach(), g, c.sh, c.sw, c.ph, c.pw, c.dh, c.dw, c.groups);
    EXPECT_TRUE(tensors_close(x.grad(), gx, 1e-11, 1e-11));
    EXPECT_TRUE(tensors_close(w.grad(), gw, 1e-10, 1e-10));
    EXPECT_TRUE(tensors_close(b.grad(), g.sum({0, 2, 3}), 1e-10, 1e-10));
    // float32 (sums in place) and float16 (sums in float scratch) through the same kernels
    for (ScalarType dt : {kFloat32, kFloat16}) {
      const double tol = dt == kFloat32 ? 1e-4 : 5e-2;
      Tensor xd = x.detach().to(dt).requires_grad_(), wd = w.detach().to(dt).requires_grad_();
      Tensor od = conv2d(xd, wd, Tensor(), {c.sh, c.sw}, {c.ph, c.pw}, {c.dh, c.dw}, c.groups);
      (od * g.to(dt)).sum().backward();
      EXPECT_TRUE(tensors_close(od.to(kFloat64) + b.detach().view({1, -1, 1, 1}), out.detach(), tol, tol));
      EXPECT_TRUE(tensors_close(xd.grad().to(kFloat64), gx, tol, tol));
      EXPECT_TRUE(tensors_close(wd.grad().to(kFloat64), gw, tol * 10, tol * 10));
    }
  }
}

TEST(Conv2d, Float32ImplicitGemmMatchesFloat64Loops) {
  // float32 on the CPU where troupe's own sgemm runs (cpu/conv_gemm.h) and an image's columns pass 2 MB: the
  // GEMMs pack their panels from the images; the input gradient of a stride-1 conv with padding <= dilation*(k-1)
  // and at least 12 channels per group is a conv of gy with the flipped weight, other convs take GEMM + col2im.
  // Geometries: both input-gradient routes, K past the 256-deep block, groups, dilation, strides, a 1x3 kernel,
  // padding larger than the kernel, a padded 1x1. Reference: the float64 loops above. (Elsewhere, e.g. with
  // OpenBLAS's own kernels, the same cases check the im2col path.)
  manual_seed(88);
  struct Cfg { int64_t N, C, H, W, O, kh, kw, sh, sw, ph, pw, dh, dw, groups; };
  for (Cfg c : {Cfg{2, 16, 64, 64, 6, 3, 3, 1, 1, 1, 1, 1, 1, 1}, Cfg{2, 16, 128, 128, 5, 3, 3, 2, 2, 1, 1, 1, 1, 1},
                Cfg{1, 32, 64, 64, 8, 3, 3, 1, 1, 2, 2, 2, 2, 2}, Cfg{1, 48, 64, 64, 5, 1, 3, 1, 1, 0, 1, 1, 1, 1},
                Cfg{1, 16, 64, 64, 3, 3, 3, 1, 1, 3, 3, 1, 1, 1}, Cfg{1, 128, 64, 64, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},
                Cfg{1, 4, 128, 128, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1}, Cfg{1, 32, 96, 64, 8, 5, 5, 2, 1, 2, 0, 1, 2, 4},
                Cfg{1, 32, 64, 64, 40, 3, 3, 1, 1, 1, 1, 1, 1, 1}}) {
    SCOPED_TRACE(::testing::Message() << "N" << c.N << " C" << c.C << " " << c.H << "x" << c.W << " O" << c.O << " k"
                                      << c.kh << "x" << c.kw << " stride " << c.sh << "," << c.sw << " padding "
                                      << c.ph << "," << c.pw << " dilation " << c.dh << "," << c.dw << " groups "
                                      << c.groups);
    Tensor x = randn({c.N, c.C, c.H, c.W}, dtype(kFloat64));
    Tensor w = randn({c.O, c.C / c.groups, c.kh, c.kw}, dtype(kFloat64));
    Tensor b = randn({c.O}, dtype(kFloat64));
    Tensor ref = ref_conv(x, w, b, c.sh, c.sw, c.ph, c.pw, c.dh, c.dw, c.groups);
    Tensor g = randn(ref.sizes(), dtype(kFloat64));
    auto [gx, gw] = ref_conv_grads(x, w, g, c.sh, c.sw, c.ph, c.pw, c.dh, c.dw, c.groups);
    Tensor xf = x.to(kFloat32).requires_grad_(), wf = w.to(kFloat32).requires_grad_(), bf = b.to(kFloat32);
    Tensor out = conv2d(xf, wf, bf, {c.sh, c.sw}, {c.ph, c.pw}, {c.dh, c.dw}, c.groups);
    (out * g.to(kFloat32)).sum().backward();
    // float32 sums of up to C*k*k (forward, input gradient) or N*L (weight gradient) products of O(1) terms
    EXPECT_TRUE(tensors_close(out.to(kFloat64), ref, 1e-4, 1e-4));
    EXPECT_TRUE(tensors_close(xf.grad().to(kFloat64), gx, 1e-4, 1e-4));
    EXPECT_TRUE(tensors_close(wf.grad().to(kFloat64), gw, 1e-4, 1e-3));
  }
}

TEST(Conv2d, Float32DirectMatchesFloat64Loops) {
  // float32, stride 1, one group on an AVX-512 CPU: the direct kernels (cpu/conv_direct.h) on zero-padded images
  // whose rows and images share their padding. Geometries: padding 0/1/2 and padding past the kernel's reach
  // (the input gradient then takes GEMM + col2im), dilation, a padded 1x1, 5x5, 1x3 and 3x1, odd and non-square
  // images, channel counts off multiples of 16, each output-channel tile (1, 3, 8, 12, 20, 32, 40), batch 1, tiny
  // 4x4 and 1x1 images, and several chunks of images with a partial last one; at 1 and 2 threads. Reference: the
  // float64 loops above. (Without AVX-512 the same cases check the GEMM paths.)
  manual_seed(89);
  struct Cfg { int64_t N, C, H, W, O, kh, kw, ph, pw, dh, dw; };
  const int threads = get_num_threads();
  for (int t : {1, 2}) {
    set_num_threads(t);
    for (Cfg c : {Cfg{2, 3, 7, 5, 8, 3, 3, 1, 1, 1, 1}, Cfg{1, 16, 9, 11, 32, 3, 3, 0, 0, 1, 1},
                  Cfg{3, 5, 8, 8, 20, 3, 3, 2, 2, 1, 1}, Cfg{2, 4, 10, 9, 3, 3, 3, 2, 1, 2, 2},
                  Cfg{2, 6, 6, 7, 1, 1, 1, 1, 1, 1, 1}, Cfg{1, 7, 12, 10, 40, 5, 5, 2, 2, 1, 1},
                  Cfg{2, 9, 6, 13, 12, 1, 3, 0, 1, 1, 1}, Cfg{2, 5, 11, 6, 8, 3, 1, 1, 0, 1, 1},
                  Cfg{32, 16, 4, 4, 32, 3, 3, 1, 1, 1, 1}, Cfg{5, 2, 1, 1, 4, 3, 3, 1, 1, 1, 1},
                  Cfg{2, 3, 5, 5, 8, 3, 3, 3, 3, 1, 1}, Cfg{5, 16, 64, 64, 8, 3, 3, 1, 1, 1, 1},
                  Cfg{3, 33, 13, 17, 17, 3, 3, 1, 2, 1, 1}}) {
      SCOPED_TRACE(::testing::Message() << t << " threads, N" << c.N << " C" << c.C << " " << c.H << "x" << c.W
                                        << " O" << c.O << " k" << c.kh << "x" << c.kw << " padding " << c.ph << ","
                                        << c.pw << " dilation " << c.dh << "," << c.dw);
      Tensor x = randn({c.N, c.C, c.H, c.W}, dtype(kFloat64));
      Tensor w = randn({c.O, c.C, c.kh, c.kw}, dtype(kFloat64));
      Tensor b = randn({c.O}, dtype(kFloat64));
      Tensor ref = ref_conv(x, w, b, 1, 1, c.ph, c.pw, c.dh, c.dw, 1);
      Tensor g = randn(ref.sizes(), dtype(kFloat64));
      auto [gx, gw] = ref_conv_grads(x, w, g, 1, 1, c.ph, c.pw, c.dh, c.dw, 1);
      Tensor xf = x.to(kFloat32).requires_grad_(), wf = w.to(kFloat32).requires_grad_(), bf = b.to(kFloat32);
      Tensor out = conv2d(xf, wf, bf, 1, {c.ph, c.pw}, {c.dh, c.dw}, 1);
      ASSERT_EQ(out.sizes().vec(), ref.sizes().vec());
      (out * g.to(kFloat32)).sum().backward();
      // float32 sums of up to C*k*k (forward, input gradient) or N*L (weight gradient) products of O(1) terms
      EXPECT_TRUE(tensors_close(out.to(kFloat64), ref, 1e-4, 1e-4));
      EXPECT_TRUE(tensors_close(xf.grad().to(kFloat64), gx, 1e-4, 1e-4));
      EXPECT_TRUE(tensors_close(wf.grad().to(kFloat64), gw, 1e-4, 1e-3));
    }
  }
  set_num_threads(threads);
}

TEST(Conv2d, GradcheckAndDoubleBackward) {
  manual_seed(83);
  Tensor x = randn({2, 4, 5, 4}, dtype(kFloat64)).requires_grad_();
  Tensor w = randn({4, 2, 3, 2}, dtype(kFloat64)).requires_grad_();
  Tensor b = randn({4}, dtype(kFloat64)).requires_grad_();
  auto fn = [](const autograd::variable_list& in) {
    return autograd::variable_list{conv2d(in[0], in[1], in[2], {2, 1}, {1, 1}, {1, 2}, 2)};
  };
  EXPECT_TRUE(autograd::gradcheck(fn, {x, w, b}));
  EXPECT_TRUE(autograd::gradgradcheck(fn, {x, w, b}));
  auto fn1 = [](const autograd::variable_list& in) {
    return autograd::variable_list{conv2d(in[0], in[1], Tensor(), 1, 0, 1, 1)};
  };
  Tensor w1 = randn({3, 4, 1, 1}, dtype(kFloat64)).requires_grad_();
  EXPECT_TRUE(autograd::gradgradcheck(fn1, {x, w1}));
  // the node of a gradient computed with create_graph
  Tensor out = conv2d(x, w, b, 1, 1, 1, 2);
  auto g = autograd::grad({out.sum()}, {x}, {}, std::nullopt, true);
  EXPECT_EQ(grad_fn_name(g[0]), "ConvolutionBackwardBackward0");
}

TEST(Conv2d, UnbatchedInput) {
  manual_seed(84);
  Tensor x = randn({3, 7, 6}, dtype(kFloat64)).requires_grad_();
  Tensor w = randn({4, 3, 3, 3}, dtype(kFloat64));
  Tensor out = conv2d(x, w, Tensor(), 1, 1);
  EXPECT_EQ(out.sizes().vec(), (std::vector<int64_t>{4, 7, 6}));
  EXPECT_TRUE(tensors_close(out, conv2d(x.detach().unsqueeze(0), w, Tensor(), 1, 1)[0], 1e-12, 1e-12));
  out.sum().backward();
  EXPECT_EQ(x.grad().sizes().vec(), (std::vector<int64_t>{3, 7, 6}));
}

TEST(Conv2d, DtypesAndEmptyBatch) {
  manual_seed(85);
  Tensor x = randn({1, 2, 6, 5}), w = randn({3, 2, 3, 3}), b = randn({3});
  Tensor ref = conv2d(x, w, b, 1, 1);
  for (ScalarType dt : {kFloat16, kBFloat16}) {
    Tensor o = conv2d(x.to(dt), w.to(dt), b.to(dt), 1, 1);
    EXPECT_EQ(o.dtype(), dt);
    EXPECT_TRUE(tensors_close(o, ref, dt == kFloat16 ? 2e-2 : 1e-1, dt == kFloat16 ? 2e-2 : 1e-1));
  }
  Tensor xi = arange(2 * 4 * 4, dtype(kInt64)).view({1, 2, 4, 4});
  Tensor wi = ones({1, 2, 2, 2}, dtype(kInt64));
  Tensor oi = conv2d(xi, wi);
  EXPECT_EQ(oi.dtype(), kInt64);
  EXPECT_TRUE(tensors_close(oi, ref_conv(xi, wi, Tensor(), 1, 1, 0, 0, 1, 1, 1), 0, 0));
  Tensor e = conv2d(randn({0, 2, 6, 5}), w);
  EXPECT_EQ(e.sizes().vec(), (std::vector<int64_t>{0, 3, 4, 3}));
  // non-contiguous input
  Tensor xt = x.transpose(2, 3).contiguous().transpose(2, 3);
  EXPECT_TRUE(tensors_close(conv2d(xt, w, b, 1, 1), ref, 1e-6, 1e-6));
}

TEST(Conv2d, Errors) {
  Tensor w = randn({4, 3, 3, 3});
  expect_error([&] { conv2d(randn({3, 4}), w); },
               "[conv2d] expected input to have 4 dimensions (N, C, H, W), got input of shape (3, 4)");
  expect_error([&] { conv2d(randn({2, 5, 7, 6}), w); },
               "Given groups=1, weight of size [4, 3, 3, 3], expected input[2, 5, 7, 6] to have 3 channels, but got 5 "
               "channels instead");
  expect_error([&] { conv2d(randn({2, 3, 2, 2}), w); },
               "[conv2d] Calculated padded input size per channel: (2 x 2). Kernel size: (3 x 3). Kernel size can't be "
               "greater than actual input size");
  expect_error([&] { conv2d(randn({2, 6, 7, 6}), randn({3, 3, 3, 3}), Tensor(), 1, 0, 1, 2); },
               "Given groups=2, expected weight to be divisible by 2 at dimension 0");
  expect_error([&] { conv2d(randn({2, 3, 7, 6}), w, randn({5})); },
               "Given weight of size [4, 3, 3, 3], expected bias to be 1-dimensional with 4 elements, but got bias of "
               "size [5] instead");
  expect_error([&] { conv2d(randn({2, 3, 7, 6}), w, Tensor(), 0); }, "[conv2d] non-positive stride is not supported");
  expect_error([&] { conv2d(randn({2, 3, 7, 6}), w, Tensor(), 1, -1); }, "[conv2d] negative padding is not supported");
  expect_error([&] { conv2d(randn({2, 3, 7, 6}), w, Tensor(), 1, 0, 0); },
               "[conv2d] non-positive dilation is not supported");
  expect_error([&] { conv2d(randn({2, 3, 7, 6}), w, Tensor(), 1, 0, 1, 0); },
               "[conv2d] non-positive groups is not supported");
  expect_error([&] { conv2d(randn({2, 3, 7, 6}), w, Tensor(), {1, 2, 3}); },
               "expected stride to be a single integer value or a list of 2 values");
  expect_error([&] { conv2d(randn({2, 3, 7, 6}, dtype(kFloat64)), w); },
               "Input type (float64) and weight type (float32) should be the same");
  expect_error([&] { conv2d(randn({2, 3, 7, 6}), randn({4, 3, 3})); }, "[conv2d] expected weight to have 4 dimensions");
}

// ---------------------------------------------------------------- pooling vs PyTorch

namespace {

// The pooling fixtures, checked on the CPU loops and on the index-op path of devices without pooling
// kernels (tensor/pool_detail.h's switch sends CPU tensors there).
struct IndexPath {
  IndexPath() { detail::pool_index_path_on_cpu() = true; }
  ~IndexPath() { detail::pool_index_path_on_cpu() = false; }
};

void check_max_pool_fixtures() {
  auto fx = Fixtures::load("conv2d.txt");
  for (int i = 0; i <= 3; ++i) {
    const std::string c = "maxpool" + std::to_string(i);
    SCOPED_TRACE(c);
    auto p = fx.ints(c + "_params");  // kh, kw, sh, sw, ph, pw, ceil_mode
    Tensor x = fx.get(c + "_input").requires_grad_();
    auto [out, idx] = max_pool2d_with_indices(x, {p[0], p[1]}, {p[2], p[3]}, {p[4], p[5]}, 1, p[6] != 0);
    EXPECT_EQ(grad_fn_name(out), "MaxPool2DWithIndicesBackward0");
    EXPECT_TRUE(tensors_close(out, fx.get(c + "_out"), 0, 0, true));
    EXPECT_TRUE(tensors_close(idx, fx.get(c + "_indices"), 0, 0, true));
    (out * fx.get(c + "_w")).sum().backward();
    EXPECT_TRUE(tensors_close(x.grad(), fx.get(c + "_ginput"), 1e-12, 1e-12, true));
    EXPECT_TRUE(equal(max_pool2d(x.detach(), {p[0], p[1]}, {p[2], p[3]}, {p[4], p[5]}, 1, p[6] != 0), out.detach()));
  }
}

void check_avg_pool_fixtures() {
  auto fx = Fixtures::load("conv2d.txt");
  for (int i = 0; i <= 5; ++i) {
    const std::string c = "avgpool" + std::to_string(i);
    SCOPED_TRACE(c);
    auto p = fx.ints(c + "_params");  // kh, kw, sh, sw, ph, pw, ceil_mode, count_include_pad
    Tensor x = fx.get(c + "_input").requires_grad_();
    Tensor out = avg_pool2d(x, {p[0], p[1]}, {p[2], p[3]}, {p[4], p[5]}, p[6] != 0, p[7] != 0);
    EXPECT_EQ(grad_fn_name(out), "AvgPool2DBackward0");
    EXPECT_TRUE(tensors_close(out, fx.get(c + "_out"), 1e-12, 1e-12, true));
    (out * fx.get(c + "_w")).sum().backward();
    EXPECT_TRUE(tensors_close(x.grad(), fx.get(c + "_ginput"), 1e-12, 1e-12, true));
  }
}

using PoolFn = std::function<autograd::variable_list(const autograd::variable_list&)>;

// First and second derivatives of max and avg pooling by finite differences.
void check_pool_gradients(const Tensor& x, const PoolFn& mp, const PoolFn& ap) {
  EXPECT_TRUE(autograd::gradcheck(mp, {x}));
  EXPECT_TRUE(autograd::gradgradcheck(mp, {x}));
  EXPECT_TRUE(autograd::gradcheck(ap, {x}));
  EXPECT_TRUE(autograd::gradgradcheck(ap, {x}));
}

}  // namespace

TEST(Pool2d, MaxPoolFixtures) { check_max_pool_fixtures(); }
TEST(Pool2d, AvgPoolFixtures) { check_avg_pool_fixtures(); }

TEST(PoolIndexPath, PyTorchFixtures) {
  IndexPath on;
  check_max_pool_fixtures();
  check_avg_pool_fixtures();
}

TEST(Pool2d, CeilModeRuleDivisorOverrideAndInts) {
  // the last window must start inside the input or the left padding: 5 with k2 s2 p1 ceil -> 3, not 4
  Tensor x = arange(25, dtype(kFloat32)).view({1, 1, 5, 5});
  Tensor m = max_pool2d(x, 2, 2, 1, 1, true);
  EXPECT_EQ(m.sizes().vec(), (std::vector<int64_t>{1, 1, 3, 3}));
  Tensor a = avg_pool2d(x, 2, 2, 1, true);
  EXPECT_TRUE(tensors_close(a.flatten(), tensor({0.0, 0.75, 1.75, 3.75, 9.0, 11.0, 8.75, 19.0, 21.0}), 0, 1e-6));
  Tensor d = avg_pool2d(x, 3, 2, 1, true, false, 2);
  EXPECT_TRUE(tensors_close(d.flatten(), tensor({6.0, 13.5, 12.0, 31.5, 54.0, 40.5, 36.0, 58.5, 42.0}), 0, 1e-5));
  // int64 average pooling divides with truncation as PyTorch
  Tensor xi = arange(16, dtype(kInt64)).view({1, 1, 4, 4});
  Tensor ai = avg_pool2d(xi, 2, 2, 1);
  EXPECT_EQ(ai.dtype(), kInt64);
  EXPECT_EQ(ai.to_vector<int64_t>(), (std::vector<int64_t>{0, 0, 0, 3, 7, 4, 3, 6, 3}));
}

TEST(Pool2d, MaxPoolNaNUnbatchedDilationAndHalf) {
  const double nan = std::nan("");
  auto [o1, i1] = max_pool2d_with_indices(tensor({1.0, nan, 3.0, 2.0}).view({1, 1, 2, 2}), 2);
  EXPECT_TRUE(std::isnan(o1.item<double>()));
  EXPECT_EQ(i1.item<int64_t>(), 1);
  auto [o2, i2] = max_pool2d_with_indices(tensor({nan, 5.0, 3.0, nan}).view({1, 1, 2, 2}), 2);
  EXPECT_EQ(i2.item<int64_t>(), 3);
  // unbatched (C, H, W)
  manual_seed(91);
  Tensor x = randn({2, 6, 7}, dtype(kFloat64));
  Tensor u = max_pool2d(x, 3, 2, 1, 2);
  EXPECT_TRUE(equal(u, max_pool2d(x.unsqueeze(0), 3, 2, 1, 2)[0]));
  EXPECT_TRUE(equal(avg_pool2d(x, 2), avg_pool2d(x.unsqueeze(0), 2)[0]));
  // dilation 2, kernel 2: max over x[0,0], x[0,2], x[2,0], x[2,2]
  Tensor y = arange(16, dtype(kFloat64)).view({1, 1, 4, 4});
  EXPECT_EQ(max_pool2d(y, 2, 1, 0, 2).to_vector<double>(), (std::vector<double>{10, 11, 14, 15}));
  // half computes in float
  Tensor h = randn({1, 2, 6, 6}).to(kFloat16);
  EXPECT_TRUE(equal(max_pool2d(h, 2), max_pool2d(h.to(kFloat32), 2).to(kFloat16)));
  EXPECT_TRUE(equal(avg_pool2d(h, 2), avg_pool2d(h.to(kFloat32), 2).to(kFloat16)));
}

TEST(Pool2d, MaxPoolTwoByTwoAgainstReferenceLoop) {
  // kernel 2 stride 2 without padding has its own loop: compare with PyTorch's rule written out (a value wins if
  // greater than the running maximum or NaN; first maximum on ties, last NaN), on ties, -inf and NaNs
  manual_seed(93);
  const double nan = std::nan(""), inf = std::numeric_limits<double>::infinity();
  Tensor x = randint(-3, 4, {3, 4, 7, 9}, dtype(kFloat64));  // many ties
  auto xv = x.to_vector<double>();
  for (size_t i = 0; i < xv.size(); i += 7) xv[i] = nan;
  for (size_t i = 3; i < xv.size(); i += 11) xv[i] = -inf;
  for (int64_t i = 0; i < 4; ++i) xv[i] = -inf;  // a window of -inf only
  x = tensor(xv, dtype(kFloat64)).view({3, 4, 7, 9});
  std::vector<double> want;
  std::vector<int64_t> want_idx;
  for (int64_t pl = 0; pl < 12; ++pl)
    for (int64_t oh = 0; oh < 3; ++oh)
      for (int64_t ow = 0; ow < 4; ++ow) {
        double m = -inf;
        int64_t k = 2 * oh * 9 + 2 * ow;
        for (int64_t ih = 2 * oh; ih < 2 * oh + 2; ++ih)
          for (int64_t iw = 2 * ow; iw < 2 * ow + 2; ++iw) {
            const double v = xv[pl * 63 + ih * 9 + iw];
            if (v > m || std::isnan(v)) m = v, k = ih * 9 + iw;
          }
        want.push_back(m);
        want_idx.push_back(k);
      }
  for (ScalarType dt : {kFloat64, kFloat32}) {
    Tensor xd = x.to(dt).clone().requires_grad_();
    auto [out, idx] = max_pool2d_with_indices(xd, 2);
    EXPECT_EQ(out.sizes().vec(), (std::vector<int64_t>{3, 4, 3, 4}));
    EXPECT_EQ(idx.to_vector<int64_t>(), want_idx);
    auto got = out.to(kFloat64).to_vector<double>();
    for (size_t i = 0; i < want.size(); ++i) {
      if (std::isnan(want[i])) {
        EXPECT_TRUE(std::isnan(got[i])) << i;
      } else {
        EXPECT_EQ(got[i], want[i]) << i;
      }
    }
    // the gradient lands on the chosen positions only
    Tensor g = randn(out.sizes(), dtype(dt));
    (out * g).sum().backward();
    Tensor gx = zeros({12, 63}, dtype(dt));
    gx.scatter_(1, idx.view({12, 12}), g.view({12, 12}));
    ASSERT_TRUE(xd.grad().defined());
    EXPECT_TRUE(equal(xd.grad(), gx.view({3, 4, 7, 9})));
  }
}

TEST(Pool2d, GradcheckAndDoubleBackward) {
  manual_seed(92);
  Tensor x = randn({1, 2, 6, 5}, dtype(kFloat64)).requires_grad_();
  auto mp = [](const autograd::variable_list& in) {
    return autograd::variable_list{max_pool2d(in[0], {3, 2}, {2, 1}, {1, 1}, 1, true)};
  };
  auto ap = [](const autograd::variable_list& in) {
    return autograd::variable_list{avg_pool2d(in[0], {3, 2}, {2, 1}, {1, 0}, true, false)};
  };
  check_pool_gradients(x, mp, ap);
}

TEST(PoolIndexPath, GradcheckAndDoubleBackward) {
  IndexPath on;
  manual_seed(21);
  // distinct values, so that the maximum is not at a tie under the finite differences
  Tensor x = add(randperm(2 * 3 * 7 * 6).to(kFloat64).view({2, 3, 7, 6}), 0.0).mul(0.37).requires_grad_();
  check_pool_gradients(
      x,
      [](const autograd::variable_list& in) {
        return autograd::variable_list{max_pool2d(in[0], {3, 2}, {2, 1}, {1, 1}, {1, 2}, true)};
      },
      [](const autograd::variable_list& in) {
        return autograd::variable_list{avg_pool2d(in[0], {3, 3}, {2, 2}, {1, 1}, true, false)};
      });
}

TEST(Pool2d, Errors) {
  Tensor x = randn({1, 2, 7, 6});
  expect_error([&] { max_pool2d(x, 2, {}, 2); }, "[max_pool2d] pad should be at most half of kernel size, but got pad=2 and kernel_size=2");
  expect_error([&] { avg_pool2d(x, 2, {}, 2); }, "[avg_pool2d] pad should be at most half of kernel size, but got pad=2 and kernel_size=2");
  expect_error([&] { max_pool2d(randn({1, 2, 2, 2}), 3); },
               "[max_pool2d] Given input size: (2x2x2). Calculated output size: (2x0x0). Output size is too small");
  expect_error([&] { max_pool2d(x, 0); }, "[max_pool2d] kernel size should be greater than zero");
  expect_error([&] { max_pool2d(x, 2, 0); }, "[max_pool2d] stride should be greater than zero");
  expect_error([&] { max_pool2d(x, 2, {}, 0, 0); }, "[max_pool2d] dilation should be greater than zero");
  expect_error([&] { max_pool2d(x, 2, {}, -1); }, "[max_pool2d] pad must be non-negative, but got pad: -1");
  expect_error([&] { max_pool2d(randn({7, 6}), 2); }, "[max_pool2d] non-empty 3D or 4D (batch mode) tensor expected");
  expect_error([&] { max_pool2d(x, {2, 2, 2}); }, "[max_pool2d] kernel_size must either be a single int, or a tuple of two ints");
  expect_error([&] { avg_pool2d(x, 2, {}, 0, false, true, 0); }, "[avg_pool2d] divisor must be not zero");
}

// ---------------------------------------------------------------- dropout

TEST(Dropout, ModesMaskScaleAndGradient) {
  manual_seed(101);
  Tensor x = ones({100, 100}).requires_grad_();
  EXPECT_TRUE(dropout(x, 0.0).is_same(x));
  EXPECT_TRUE(dropout(x, 0.5, false).is_same(x));
  Tensor z = dropout(x, 1.0);
  EXPECT_TRUE(equal(z.detach(), zeros({100, 100})));
  Tensor y = dropout(x, 0.25);
  EXPECT_EQ(grad_fn_name(y), "MulBackward0");
  auto v = y.detach().to_vector<float>();
  int64_t kept = 0;
  for (float f : v) {
    ASSERT_TRUE(f == 0.0f || std::fabs(f - 1.0f / 0.75f) < 1e-6f) << f;
    kept += f != 0.0f;
  }
  EXPECT_NEAR(static_cast<double>(kept) / 10000.0, 0.75, 0.03);
  y.sum().backward();
  EXPECT_TRUE(equal(x.grad(), y.detach()));  // d/dx (x * mask) = mask, and x is ones
  expect_error([&] { dropout(x, 1.5); }, "dropout probability has to be between 0 and 1, but got 1.5");
  expect_error([&] { dropout(x, -0.1, false); }, "dropout probability has to be between 0 and 1, but got -0.1");
}
