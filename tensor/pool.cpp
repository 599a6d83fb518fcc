// max_pool2d (with indices) and avg_pool2d with their backward functions (themselves differentiable ops, so
// double backward works): on the CPU through the loops below; on other devices (CUDA) through index ops on
// a table of the windows ("pooling through index ops" below).
#include <algorithm>
#include "tracing.h"
#include <bit>
#include <cmath>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "autograd.h"
#include "backend.h"
#include "op_helpers.h"
#include "ops.h"
#include "parallel.h"
#include "pool_detail.h"

namespace troupe {

using autograd::SavedVariable;
using autograd::variable_list;
using op_detail::contiguous_raw;
using op_detail::err;

// ============================================================ pooling

namespace {

struct PoolParams {
  int64_t kh, kw, sh, sw, ph, pw, dh, dw;
  bool ceil_mode;
};

struct PoolGeom {
  int64_t planes, H, W, oH, oW;
  std::vector<int64_t> out_sizes;
};

int64_t pool_out_size(int64_t in, int64_t k, int64_t pad, int64_t stride, int64_t dil, bool ceil_mode) {
  const int64_t num = in + 2 * pad - dil * (k - 1) - 1 + (ceil_mode ? stride - 1 : 0);
  // floor division rounding toward -inf (PyTorch's div_rtn)
  int64_t q = num / stride;
  if ((num % stride != 0) && ((num < 0) != (stride < 0))) --q;
  int64_t out = q + 1;
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;  // the last window must start inside the input or left pad
  return out;
}

PoolParams pool_params(const char* op, IntArrayRef kernel, IntArrayRef stride, IntArrayRef padding,
                       IntArrayRef dilation, bool ceil_mode, bool has_dilation) {
  if (kernel.size() != 1 && kernel.size() != 2)
    throw std::invalid_argument(err(op, "kernel_size must either be a single int, or a tuple of two ints, got " +
                                            list_str(kernel)));
  if (stride.size() > 2)
    throw std::invalid_argument(err(op, "stride must either be omitted, a single int, or a tuple of two ints, got " +
                                            list_str(stride)));
  if (padding.size() != 1 && padding.size() != 2)
    throw std::invalid_argument(err(op, "padding must either be a single int, or a tuple of two ints, got " +
                                            list_str(padding)));
  if (has_dilation && dilation.size() != 1 && dilation.size() != 2)
    throw std::invalid_argument(err(op, "dilation must be either a single int, or a tuple of two ints, got " +
                                            list_str(dilation)));
  PoolParams p{};
  p.kh = kernel[0];
  p.kw = kernel.size() == 2 ? kernel[1] : kernel[0];
  if (stride.empty()) {
    p.sh = p.kh, p.sw = p.kw;
  } else {
    p.sh = stride[0];
    p.sw = stride.size() == 2 ? stride[1] : stride[0];
  }
  p.ph = padding[0];
  p.pw = padding.size() == 2 ? padding[1] : padding[0];
  p.dh = has_dilation ? dilation[0] : 1;
  p.dw = has_dilation ? (dilation.size() == 2 ? dilation[1] : dilation[0]) : 1;
  p.ceil_mode = ceil_mode;
  if (p.kh <= 0 || p.kw <= 0)
    throw std::invalid_argument(err(op, "kernel size should be greater than zero, but got kH: " +
                                            std::to_string(p.kh) + " kW: " + std::to_string(p.kw)));
  if (p.sh <= 0 || p.sw <= 0)
    throw std::invalid_argument(err(op, "stride should be greater than zero, but got dH: " + std::to_string(p.sh) +
                                            " dW: " + std::to_string(p.sw)));
  if (p.dh <= 0 || p.dw <= 0)
    throw std::invalid_argument(err(op, "dilation should be greater than zero, but got dilationH: " +
                                            std::to_string(p.dh) + " dilationW: " + std::to_string(p.dw)));
  if (p.ph < 0 || p.pw < 0)
    throw std::invalid_argument(err(op, "pad must be non-negative, but got pad: " + std::to_string(std::min(p.ph, p.pw))));
  if (p.ph > p.kh / 2)
    throw std::invalid_argument(err(op, "pad should be at most half of kernel size, but got pad=" +
                                            std::to_string(p.ph) + " and kernel_size=" + std::to_string(p.kh)));
  if (p.pw > p.kw / 2)
    throw std::invalid_argument(err(op, "pad should be at most half of kernel size, but got pad=" +
                                            std::to_string(p.pw) + " and kernel_size=" + std::to_string(p.kw)));
  return p;
}

PoolGeom pool_geom(const char* op, const Tensor& x, const PoolParams& p) {
  if (x.dim() != 3 && x.dim() != 4)
    throw std::invalid_argument(err(op, "non-empty 3D or 4D (batch mode) tensor expected for input, got shape " +
                                            shape_str(x.sizes())));
  const int64_t d = x.dim();
  if (x.size(d - 3) == 0 || x.size(d - 2) == 0 || x.size(d - 1) == 0)
    throw std::invalid_argument(err(op, "Expected 3D or 4D (batch mode) tensor with optional 0 dim batch size for "
                                        "input, but got:" + list_str(x.sizes())));
  PoolGeom g;
  g.H = x.size(d - 2);
  g.W = x.size(d - 1);
  g.planes = x.numel() / (g.H * g.W);
  g.oH = pool_out_size(g.H, p.kh, p.ph, p.sh, p.dh, p.ceil_mode);
  g.oW = pool_out_size(g.W, p.kw, p.pw, p.sw, p.dw, p.ceil_mode);
  const int64_t C = x.size(d - 3);
  if (g.oH < 1 || g.oW < 1)
    throw std::invalid_argument(err(op, "Given input size: (" + std::to_string(C) + "x" + std::to_string(g.H) + "x" +
                                            std::to_string(g.W) + "). Calculated output size: (" + std::to_string(C) +
                                            "x" + std::to_string(g.oH) + "x" + std::to_string(g.oW) +
                                            "). Output size is too small"));
  g.out_sizes = x.sizes().vec();
  g.out_sizes[d - 2] = g.oH;
  g.out_sizes[d - 1] = g.oW;
  return g;
}

void check_pool_input(const char* op, const Tensor& x, bool allow_int) {
  if (!x.defined()) throw std::invalid_argument(err(op, "got an undefined tensor"));
  if (!x.is_floating_point() && !(allow_int && is_integral(x.dtype())))
    throw std::invalid_argument(err(op, std::string("not implemented for dtype ") + dtype_name(x.dtype())));
}

int64_t pool_grain(const PoolGeom& g, const PoolParams& p) {
  return std::max<int64_t>(1, kGrainSize / std::max<int64_t>(1, g.oH * g.oW * p.kh * p.kw));
}

template <typename T>
bool is_nan_value(T v) {
  if constexpr (std::is_floating_point_v<T>) return std::isnan(v);
  else return false;
}

// The avg window of output (oh, ow): f(ih0, ih1, iw0, iw1, divide) over the rows and columns inside the image.
template <typename F>
void avg_pool_windows(const PoolGeom& g, const PoolParams& p, bool count_include_pad,
                      std::optional<int64_t> divisor_override, int64_t oh, int64_t ow, F&& f) {
  int64_t ih0 = oh * p.sh - p.ph, iw0 = ow * p.sw - p.pw;
  int64_t ih1 = std::min(ih0 + p.kh, g.H + p.ph), iw1 = std::min(iw0 + p.kw, g.W + p.pw);
  const int64_t pool_size = (ih1 - ih0) * (iw1 - iw0);
  ih0 = std::max<int64_t>(ih0, 0);
  iw0 = std::max<int64_t>(iw0, 0);
  ih1 = std::min(ih1, g.H);
  iw1 = std::min(iw1, g.W);
  int64_t divide = 0;
  if (ih0 < ih1 && iw0 < iw1)
    divide = divisor_override ? *divisor_override : (count_include_pad ? pool_size : (ih1 - ih0) * (iw1 - iw0));
  f(ih0, ih1, iw0, iw1, divide);
}

// ---- pooling through index ops (devices without pooling kernels, and the CPU under the test switch)
//
// A table of the windows is built on the CPU: for output position l = oh * oW + ow, K = kh * kw input
// positions (ih * W + iw) in the CPU loops' order (rows, then columns). A position outside the image
// repeats the window's first position inside it, with mask 0, so every entry is a valid index: it leaves
// a maximum unchanged and adds nothing to a sum. The device then runs index_select, max / sum, gather,
// scatter_add and index_add, kernels every backend has. Where two NaNs share a window the index is the
// first NaN's (the CPU loops keep the last); values are the same.

bool use_index_path(const Tensor& t) { return !t.is_cpu() || detail::pool_index_path_on_cpu(); }

struct Windows {
  Tensor index;   // (L * K) int64 on the input's device
  Tensor mask;    // (L, K) 1 inside the image, 0 outside, in the compute dtype, on the device
  Tensor divide;  // (L) avg pooling's divisor (1 for a window that divides by 0: its mask row is 0)
  int64_t L = 0, K = 0;
};

/// The compute dtype of the index path: float32 for the 16-bit floats (as the CPU loops' opmath).
ScalarType index_compute_dtype(ScalarType t) { return t == kFloat64 ? kFloat64 : kFloat32; }

Windows pool_windows(const PoolGeom& g, const PoolParams& p, const Tensor& like, bool count_include_pad,
                     std::optional<int64_t> divisor_override, bool avg) {
  Windows w;
  w.L = g.oH * g.oW;
  w.K = p.kh * p.kw;
  Tensor index = empty({w.L * w.K}, TensorOptions().dtype(kInt64));
  Tensor mask = empty({w.L, w.K}, TensorOptions().dtype(kFloat64));
  Tensor divide = avg ? empty({w.L}, TensorOptions().dtype(kFloat64)) : Tensor();
  int64_t* ix = index.data_ptr<int64_t>();
  double* mk = mask.data_ptr<double>();
  double* dv = avg ? divide.data_ptr<double>() : nullptr;
  for (int64_t oh = 0; oh < g.oH; ++oh)
    for (int64_t ow = 0; ow < g.oW; ++ow) {
      const int64_t l = oh * g.oW + ow;
      int64_t first = -1;
      for (int64_t ki = 0; ki < p.kh && first < 0; ++ki)
        for (int64_t kj = 0; kj < p.kw && first < 0; ++kj) {
          const int64_t ih = oh * p.sh - p.ph + ki * p.dh, iw = ow * p.sw - p.pw + kj * p.dw;
          if (ih >= 0 && ih < g.H && iw >= 0 && iw < g.W) first = ih * g.W + iw;
        }
      for (int64_t ki = 0; ki < p.kh; ++ki)
        for (int64_t kj = 0; kj < p.kw; ++kj) {
          const int64_t ih = oh * p.sh - p.ph + ki * p.dh, iw = ow * p.sw - p.pw + kj * p.dw;
          const bool in = ih >= 0 && ih < g.H && iw >= 0 && iw < g.W;
          const int64_t k = l * w.K + ki * p.kw + kj;
          ix[k] = in ? ih * g.W + iw : std::max<int64_t>(first, 0);
          mk[k] = in ? 1.0 : 0.0;
        }
      if (avg)
        avg_pool_windows(g, p, count_include_pad, divisor_override, oh, ow,
                         [&](int64_t, int64_t, int64_t, int64_t, int64_t d) {
                           dv[l] = d == 0 ? 1.0 : static_cast<double>(d);
                           if (d == 0) std::fill(mk + l * w.K, mk + (l + 1) * w.K, 0.0);
                         });
    }
  const ScalarType ct = index_compute_dtype(like.dtype());
  w.index = index.to(like.device());
  w.mask = mask.to(TensorOptions().dtype(ct).device(like.device()));
  if (avg) w.divide = divide.to(TensorOptions().dtype(ct).device(like.device()));
  return w;
}

void max_pool_forward_index(const Tensor& x, const Tensor& out, const Tensor& idx, const PoolGeom& g,
                            const PoolParams& p) {
  NoGradGuard ng;
  const Windows w = pool_windows(g, p, x, false, std::nullopt, false);
  const int64_t P = g.planes;
  Tensor vals = index_select(x.detach().reshape({P, g.H * g.W}), 1, w.index).view({P, w.L, w.K});
  auto [m, k] = max(vals, 2);
  // the chosen entry's input position: index[l * K + k]
  Tensor at = add(k, mul(arange(Scalar(w.L), TensorOptions().dtype(kInt64).device(x.device())), w.K));
  backend(out).copy(out, m.view(g.out_sizes));
  backend(idx).copy(idx, index_select(w.index, 0, at.reshape({-1})).view(g.out_sizes));
}

Tensor max_pool_scatter_index(const Tensor& gy, const Tensor& idx, IntArrayRef in_sizes, int64_t H, int64_t W) {
  NoGradGuard ng;
  Tensor gx = zeros(in_sizes, gy.options());
  const int64_t planes = gx.numel() / (H * W), L = idx.numel() / std::max<int64_t>(planes, 1);
  if (gx.numel() == 0) return gx;
  return scatter_add(gx.view({planes, H * W}), 1, idx.reshape({planes, L}), gy.detach().reshape({planes, L}))
      .view(in_sizes);
}

Tensor max_pool_gather_index(const Tensor& gx, const Tensor& idx, int64_t H, int64_t W) {
  NoGradGuard ng;
  const int64_t planes = gx.numel() / (H * W), L = idx.numel() / std::max<int64_t>(planes, 1);
  if (idx.numel() == 0) return empty(idx.sizes(), gx.options());
  return gather(gx.detach().reshape({planes, H * W}), 1, idx.reshape({planes, L})).view(idx.sizes());
}

void check_index_path_dtype(const char* op, const Tensor& t) {
  if (!is_floating_point(t.dtype()))
    throw std::invalid_argument(err(op, std::string("not implemented for dtype ") + dtype_name(t.dtype()) +
                                            " on device " + t.device().str() + " (floating-point inputs only)"));
}

Tensor avg_pool_forward_index(const Tensor& x, const PoolGeom& g, const PoolParams& p, bool count_include_pad,
                              std::optional<int64_t> divisor_override) {
  check_index_path_dtype("avg_pool2d", x);
  NoGradGuard ng;
  const Windows w = pool_windows(g, p, x, count_include_pad, divisor_override, true);
  const int64_t P = g.planes;
  const ScalarType ct = index_compute_dtype(x.dtype());
  Tensor vals = index_select(x.detach().reshape({P, g.H * g.W}), 1, w.index).view({P, w.L, w.K}).to(ct);
  Tensor s = sum(mul(vals, w.mask.view({1, w.L, w.K})), {2});
  return div(s, w.divide.view({1, w.L})).to(x.dtype()).view(g.out_sizes);
}

Tensor avg_pool_backward_index(const Tensor& gy, IntArrayRef in_sizes, const PoolGeom& g, const PoolParams& p,
                               bool count_include_pad, std::optional<int64_t> divisor_override) {
  check_index_path_dtype("avg_pool2d_backward", gy);
  NoGradGuard ng;
  const Windows w = pool_windows(g, p, gy, count_include_pad, divisor_override, true);
  const int64_t P = g.planes;
  const ScalarType ct = index_compute_dtype(gy.dtype());
  Tensor d = div(gy.detach().reshape({P, w.L}).to(ct), w.divide.view({1, w.L}));
  Tensor contrib = mul(d.unsqueeze(2), w.mask.view({1, w.L, w.K})).reshape({P, w.L * w.K});
  Tensor gx = index_add(zeros({P, g.H * g.W}, TensorOptions().dtype(ct).device(gy.device())), 1, w.index, contrib);
  return gx.to(gy.dtype()).view(in_sizes);
}

// ---- max pool kernels (contiguous planes of H*W)

// (m, k) = (v, i) when t, by masks rather than a branch (whose outcome is random for pooling).
template <typename Acc>
inline void take_if(bool t, Acc v, Acc& m, int64_t i, int64_t& k) {
  if constexpr (std::is_same_v<Acc, float> || std::is_same_v<Acc, double>) {
    using Bits = std::conditional_t<sizeof(Acc) == 8, uint64_t, uint32_t>;
    const Bits mask = Bits(0) - static_cast<Bits>(t);
    m = std::bit_cast<Acc>(static_cast<Bits>((std::bit_cast<Bits>(v) & mask) | (std::bit_cast<Bits>(m) & ~mask)));
  } else {
    m = t ? v : m;
  }
  const int64_t kmask = -static_cast<int64_t>(t);
  k = (i & kmask) | (k & ~kmask);
}

// One plane of 2x2, stride-2 windows inside the image, without branches: the same comparisons, in the same
// order (rows, then columns), as the generic loop, so the same maxima and indices (NaN wins, the last NaN).
template <typename T, typename Acc>
void max_pool_2x2(const T* ip, T* op, int64_t* xp, int64_t W, int64_t oH, int64_t oW) {
  for (int64_t oh = 0; oh < oH; ++oh) {
    const T* r0 = ip + 2 * oh * W;
    const T* r1 = r0 + W;
    T* o = op + oh * oW;
    int64_t* x = xp + oh * oW;
    const int64_t base = 2 * oh * W;
    int64_t ow = 0;
#if defined(__SSE2__)
    if constexpr (std::is_same_v<T, float>) {
      // four windows at a time: the same steps on vectors (even/odd columns split by shuffles)
      if (W < (int64_t{1} << 30)) {
        const __m128i kv1 = _mm_set1_epi32(1), kvW = _mm_set1_epi32(static_cast<int>(W));
        const __m128i kvW1 = _mm_set1_epi32(static_cast<int>(W + 1)), lanes = _mm_setr_epi32(0, 2, 4, 6);
        const __m128i zero = _mm_setzero_si128();
        for (; ow + 4 <= oW; ow += 4) {
          const __m128 a0 = _mm_loadu_ps(r0 + 2 * ow), a1 = _mm_loadu_ps(r0 + 2 * ow + 4);
          const __m128 b0 = _mm_loadu_ps(r1 + 2 * ow), b1 = _mm_loadu_ps(r1 + 2 * ow + 4);
          __m128 m = _mm_shuffle_ps(a0, a1, _MM_SHUFFLE(2, 0, 2, 0));
          __m128i k = zero;
          auto step = [&](__m128 v, __m128i kv) {
            const __m128 t = _mm_or_ps(_mm_cmpgt_ps(v, m), _mm_cmpunord_ps(v, v));
            m = _mm_or_ps(_mm_and_ps(t, v), _mm_andnot_ps(t, m));
            const __m128i ti = _mm_castps_si128(t);
            k = _mm_or_si128(_mm_and_si128(ti, kv), _mm_andnot_si128(ti, k));
          };
          step(_mm_shuffle_ps(a0, a1, _MM_SHUFFLE(3, 1, 3, 1)), kv1);
          step(_mm_shuffle_ps(b0, b1, _MM_SHUFFLE(2, 0, 2, 0)), kvW);
          step(_mm_shuffle_ps(b0, b1, _MM_SHUFFLE(3, 1, 3, 1)), kvW1);
          _mm_storeu_ps(o + ow, m);
          const __m128i off = _mm_add_epi32(k, lanes);  // non-negative: widened with zeros
          const __m128i b64 = _mm_set1_epi64x(base + 2 * ow);
          _mm_storeu_si128(reinterpret_cast<__m128i*>(x + ow), _mm_add_epi64(_mm_unpacklo_epi32(off, zero), b64));
          _mm_storeu_si128(reinterpret_cast<__m128i*>(x + ow + 2), _mm_add_epi64(_mm_unpackhi_epi32(off, zero), b64));
        }
      }
    }
#endif
    for (; ow < oW; ++ow) {
      const Acc v0 = static_cast<Acc>(r0[2 * ow]), v1 = static_cast<Acc>(r0[2 * ow + 1]);
      const Acc v2 = static_cast<Acc>(r1[2 * ow]), v3 = static_cast<Acc>(r1[2 * ow + 1]);
      // the first value always replaces the initial -inf (or is kept as the initial index)
      Acc m = v0;
      int64_t k = 0;
      take_if((v1 > m) | is_nan_value(v1), v1, m, 1, k);
      take_if((v2 > m) | is_nan_value(v2), v2, m, W, k);
      take_if((v3 > m) | is_nan_value(v3), v3, m, W + 1, k);
      o[ow] = static_cast<T>(m);
      x[ow] = base + 2 * ow + k;
    }
  }
}

void max_pool_forward_kernel(const Tensor& x, const Tensor& out, const Tensor& idx, const PoolGeom& g,
                             const PoolParams& p) {
  if (use_index_path(x)) {
    max_pool_forward_index(x, out, idx, g, p);
    return;
  }
  dispatch_all(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bool>) {
      return;
    } else {
      using Acc = opmath_t<T>;
      const T* in = static_cast<const T*>(x.data_ptr());
      T* o = static_cast<T*>(out.data_ptr());
      int64_t* ix = static_cast<int64_t*>(idx.data_ptr());
      // 2x2 windows, stride 2, inside the image (no padding; ceil_mode adds no clipped window)
      const bool two_by_two = p.kh == 2 && p.kw == 2 && p.sh == 2 && p.sw == 2 && p.ph == 0 && p.pw == 0 &&
                              p.dh == 1 && p.dw == 1 && 2 * g.oH <= g.H && 2 * g.oW <= g.W;
      parallel_for(0, g.planes, pool_grain(g, p), [&](int64_t b, int64_t e) {
        for (int64_t pl = b; pl < e; ++pl) {
          const T* ip = in + pl * g.H * g.W;
          T* op = o + pl * g.oH * g.oW;
          int64_t* xp = ix + pl * g.oH * g.oW;
          if (two_by_two) {
            max_pool_2x2<T, Acc>(ip, op, xp, g.W, g.oH, g.oW);
            continue;
          }
          for (int64_t oh = 0; oh < g.oH; ++oh) {
            for (int64_t ow = 0; ow < g.oW; ++ow) {
              int64_t hstart = oh * p.sh - p.ph, wstart = ow * p.sw - p.pw;
              const int64_t hend = std::min(hstart + (p.kh - 1) * p.dh + 1, g.H);
              const int64_t wend = std::min(wstart + (p.kw - 1) * p.dw + 1, g.W);
              while (hstart < 0) hstart += p.dh;
              while (wstart < 0) wstart += p.dw;
              int64_t maxindex = hstart * g.W + wstart;
              Acc maxval = std::numeric_limits<Acc>::has_infinity ? -std::numeric_limits<Acc>::infinity()
                                                                   : std::numeric_limits<Acc>::lowest();
              for (int64_t ih = hstart; ih < hend; ih += p.dh) {
                for (int64_t iw = wstart; iw < wend; iw += p.dw) {
                  const int64_t index = ih * g.W + iw;
                  const Acc val = static_cast<Acc>(ip[index]);
                  if (val > maxval || is_nan_value(val)) {
                    maxval = val;
                    maxindex = index;
                  }
                }
              }
              op[oh * g.oW + ow] = static_cast<T>(maxval);
              xp[oh * g.oW + ow] = maxindex;
            }
          }
        }
      });
    }
  });
}

// gx (planes of H*W) = scatter-add of gy at idx. gy, idx contiguous with planes of oH*oW.
Tensor max_pool_scatter_raw(const Tensor& gy_in, const Tensor& idx, IntArrayRef in_sizes, int64_t H, int64_t W) {
  if (use_index_path(gy_in)) return max_pool_scatter_index(gy_in, idx, in_sizes, H, W);
  Tensor gy = contiguous_raw(gy_in);
  Tensor gx = empty(in_sizes, gy.options());
  if (gx.numel() == 0) return gx;
  const int64_t planes = gx.numel() / (H * W), L = idx.numel() / std::max<int64_t>(planes, 1);
  dispatch_all(gy.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, bool>) {
      using Acc = opmath_t<T>;
      const T* g = static_cast<const T*>(gy.data_ptr());
      const int64_t* ix = static_cast<const int64_t*>(idx.data_ptr());
      T* o = static_cast<T*>(gx.data_ptr());
      parallel_for(0, planes, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(1, H * W + L)),
                   [&](int64_t b, int64_t e) {
                     // accumulate in the output itself when it holds the accumulation type
                     std::vector<Acc> buf(std::is_same_v<T, Acc> ? 0 : static_cast<size_t>(H * W));
                     for (int64_t pl = b; pl < e; ++pl) {
                       T* op = o + pl * H * W;
                       Acc* acc;
                       if constexpr (std::is_same_v<T, Acc>) acc = op;
                       else acc = buf.data();
                       std::fill(acc, acc + H * W, Acc(0));
                       const int64_t* xi = ix + pl * L;
                       const T* gi = g + pl * L;
                       for (int64_t i = 0; i < L; ++i) acc[xi[i]] += static_cast<Acc>(gi[i]);
                       if constexpr (!std::is_same_v<T, Acc>)
                         for (int64_t i = 0; i < H * W; ++i) op[i] = static_cast<T>(acc[i]);
                     }
                   });
    }
  });
  return gx;
}

// out (planes of L) = gx gathered at idx.
Tensor max_pool_gather_raw(const Tensor& gx_in, const Tensor& idx, int64_t H, int64_t W) {
  if (use_index_path(gx_in)) return max_pool_gather_index(gx_in, idx, H, W);
  Tensor gx = contiguous_raw(gx_in);
  Tensor out = empty(idx.sizes(), gx.options());
  if (out.numel() == 0) return out;
  const int64_t planes = gx.numel() / (H * W), L = idx.numel() / std::max<int64_t>(planes, 1);
  dispatch_all(gx.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* src = static_cast<const T*>(gx.data_ptr());
    const int64_t* ix = static_cast<const int64_t*>(idx.data_ptr());
    T* o = static_cast<T*>(out.data_ptr());
    parallel_for(0, planes, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(1, L)), [&](int64_t b, int64_t e) {
      for (int64_t pl = b; pl < e; ++pl)
        for (int64_t i = 0; i < L; ++i) o[pl * L + i] = src[pl * H * W + ix[pl * L + i]];
    });
  });
  return out;
}

Tensor max_pool_gather(const Tensor& gx, const Tensor& idx, int64_t H, int64_t W);

// The max-pool gradient (scatter of gy into the argmax positions), differentiable in gy.
Tensor max_pool_scatter(const Tensor& gy, const Tensor& idx, IntArrayRef in_sizes, int64_t H, int64_t W) {
  Tensor gx = max_pool_scatter_raw(gy, idx, in_sizes, H, W);
  if (autograd::any_requires_grad({&gy}))
    autograd::record("MaxPool2DWithIndicesBackwardBackward0", {gy}, gx,
                     [idx, H, W](const variable_list& gg) { return variable_list{max_pool_gather(gg[0], idx, H, W)}; },
                     false);
  return gx;
}

// Gathers gx at the argmax positions (the linear part of max pooling), differentiable in gx.
Tensor max_pool_gather(const Tensor& gx, const Tensor& idx, int64_t H, int64_t W) {
  Tensor out = max_pool_gather_raw(gx, idx, H, W);
  if (autograd::any_requires_grad({&gx}))
    autograd::record("MaxPool2DWithIndicesBackward0", {gx}, out,
                     [idx, H, W, in_sizes = gx.sizes().vec()](const variable_list& g) {
                       return variable_list{max_pool_scatter(g[0], idx, in_sizes, H, W)};
                     },
                     false);
  return out;
}

// ---- avg pool kernels

Tensor avg_pool_forward_raw(const Tensor& x_in, const PoolGeom& g, const PoolParams& p, bool count_include_pad,
                            std::optional<int64_t> divisor_override) {
  if (use_index_path(x_in)) return avg_pool_forward_index(x_in, g, p, count_include_pad, divisor_override);
  Tensor x = contiguous_raw(x_in);
  Tensor out = empty(g.out_sizes, x.options());
  if (out.numel() == 0) return out;
  dispatch_all(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, bool>) {
      using Acc = std::conditional_t<std::is_floating_point_v<opmath_t<T>>, opmath_t<T>, int64_t>;
      const T* in = static_cast<const T*>(x.data_ptr());
      T* o = static_cast<T*>(out.data_ptr());
      parallel_for(0, g.planes, pool_grain(g, p), [&](int64_t b, int64_t e) {
        for (int64_t pl = b; pl < e; ++pl) {
          const T* ip = in + pl * g.H * g.W;
          T* op = o + pl * g.oH * g.oW;
          for (int64_t oh = 0; oh < g.oH; ++oh)
            for (int64_t ow = 0; ow < g.oW; ++ow)
              avg_pool_windows(g, p, count_include_pad, divisor_override, oh, ow,
                               [&](int64_t h0, int64_t h1, int64_t w0, int64_t w1, int64_t divide) {
                                 if (divide == 0) {
                                   op[oh * g.oW + ow] = T(0);
                                   return;
                                 }
                                 Acc s = 0;
                                 for (int64_t ih = h0; ih < h1; ++ih)
                                   for (int64_t iw = w0; iw < w1; ++iw) s += static_cast<Acc>(ip[ih * g.W + iw]);
                                 op[oh * g.oW + ow] = static_cast<T>(s / static_cast<Acc>(divide));
                               });
        }
      });
    }
  });
  return out;
}

Tensor avg_pool_backward_raw(const Tensor& gy_in, IntArrayRef in_sizes, const PoolGeom& g, const PoolParams& p,
                             bool count_include_pad, std::optional<int64_t> divisor_override) {
  if (use_index_path(gy_in))
    return avg_pool_backward_index(gy_in, in_sizes, g, p, count_include_pad, divisor_override);
  Tensor gy = contiguous_raw(gy_in);
  Tensor gx = empty(in_sizes, gy.options());
  if (gx.numel() == 0) return gx;
  dispatch_all(gy.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, bool>) {
      using Acc = std::conditional_t<std::is_floating_point_v<opmath_t<T>>, opmath_t<T>, int64_t>;
      const T* gp = static_cast<const T*>(gy.data_ptr());
      T* o = static_cast<T*>(gx.data_ptr());
      parallel_for(0, g.planes, pool_grain(g, p), [&](int64_t b, int64_t e) {
        std::vector<Acc> buf(static_cast<size_t>(g.H * g.W));
        for (int64_t pl = b; pl < e; ++pl) {
          std::fill(buf.begin(), buf.end(), Acc(0));
          const T* gpl = gp + pl * g.oH * g.oW;
          for (int64_t oh = 0; oh < g.oH; ++oh)
            for (int64_t ow = 0; ow < g.oW; ++ow)
              avg_pool_windows(g, p, count_include_pad, divisor_override, oh, ow,
                               [&](int64_t h0, int64_t h1, int64_t w0, int64_t w1, int64_t divide) {
                                 if (divide == 0) return;
                                 const Acc d = static_cast<Acc>(gpl[oh * g.oW + ow]) / static_cast<Acc>(divide);
                                 for (int64_t ih = h0; ih < h1; ++ih)
                                   for (int64_t iw = w0; iw < w1; ++iw) buf[ih * g.W + iw] += d;
                               });
          T* op = o + pl * g.H * g.W;
          for (int64_t i = 0; i < g.H * g.W; ++i) op[i] = static_cast<T>(buf[i]);
        }
      });
    }
  });
  return gx;
}

struct AvgArgs {
  PoolParams p;
  bool count_include_pad;
  std::optional<int64_t> divisor_override;
};

Tensor avg_pool_op(const Tensor& x, const AvgArgs& a);

// The avg-pool gradient, differentiable in gy (its adjoint is avg pooling itself).
Tensor avg_pool_backward(const Tensor& gy, IntArrayRef in_sizes, const PoolGeom& g, const AvgArgs& a) {
  Tensor gx = avg_pool_backward_raw(gy, in_sizes, g, a.p, a.count_include_pad, a.divisor_override);
  if (autograd::any_requires_grad({&gy}))
    autograd::record("AvgPool2DBackwardBackward0", {gy}, gx,
                     [a](const variable_list& gg) { return variable_list{avg_pool_op(gg[0], a)}; }, false);
  return gx;
}

// avg_pool2d on validated arguments, recording AvgPool2DBackward0.
Tensor avg_pool_op(const Tensor& x, const AvgArgs& a) {
  PoolGeom g = pool_geom("avg_pool2d", x, a.p);
  Tensor out = avg_pool_forward_raw(x, g, a.p, a.count_include_pad, a.divisor_override);
  if (autograd::any_requires_grad({&x}))
    autograd::record("AvgPool2DBackward0", {x}, out,
                     [a, g, in_sizes = x.sizes().vec()](const variable_list& gy) {
                       return variable_list{avg_pool_backward(gy[0], in_sizes, g, a)};
                     },
                     false);
  return out;
}

}  // namespace

std::tuple<Tensor, Tensor> max_pool2d_with_indices(const Tensor& input, IntArrayRef kernel_size, IntArrayRef stride,
                                                   IntArrayRef padding, IntArrayRef dilation, bool ceil_mode) {
  const char* op = "max_pool2d";
  check_pool_input(op, input, false);
  PoolParams p = pool_params(op, kernel_size, stride, padding, dilation, ceil_mode, true);
  PoolGeom g = pool_geom(op, input, p);
  Tensor x = contiguous_raw(input);
  Tensor out = empty(g.out_sizes, input.options());
  Tensor idx = empty(g.out_sizes, TensorOptions().dtype(kInt64).device(input.device()));
  if (out.numel() > 0) max_pool_forward_kernel(x, out, idx, g, p);
  if (autograd::any_requires_grad({&input})) {
    const int64_t H = g.H, W = g.W;
    autograd::record("MaxPool2DWithIndicesBackward0", {input}, out,
                     [sidx = SavedVariable(idx, false), H, W, in_sizes = input.sizes().vec()](const variable_list& gy) {
                       return variable_list{max_pool_scatter(gy[0], sidx.unpack(), in_sizes, H, W)};
                     });
  }
  return {out, idx};
}

Tensor max_pool2d(const Tensor& input, IntArrayRef kernel_size, IntArrayRef stride, IntArrayRef padding,
                  IntArrayRef dilation, bool ceil_mode) {
  TROUPE_TRACE_OP("aten::max_pool2d", max_pool2d(input, kernel_size, stride, padding, dilation, ceil_mode), input,
                  tracing::pair(kernel_size), tracing::pair(stride.empty() ? kernel_size : stride),
                  tracing::pair(padding), tracing::pair(dilation), ceil_mode);
  return std::get<0>(max_pool2d_with_indices(input, kernel_size, stride, padding, dilation, ceil_mode));
}

Tensor avg_pool2d(const Tensor& input, IntArrayRef kernel_size, IntArrayRef stride, IntArrayRef padding,
                  bool ceil_mode, bool count_include_pad, std::optional<int64_t> divisor_override) {
  TROUPE_TRACE_OP("aten::avg_pool2d",
                  avg_pool2d(input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override), input,
                  tracing::pair(kernel_size), tracing::pair(stride.empty() ? kernel_size : stride),
                  tracing::pair(padding), ceil_mode, count_include_pad,
                  divisor_override ? IValue(*divisor_override) : IValue());
  const char* op = "avg_pool2d";
  check_pool_input(op, input, true);
  AvgArgs a{pool_params(op, kernel_size, stride, padding, IntArrayRef(), ceil_mode, false), count_include_pad,
            divisor_override};
  if (divisor_override && *divisor_override == 0) throw std::invalid_argument(err(op, "divisor must be not zero"));
  return avg_pool_op(input, a);
}

namespace detail {
bool& pool_index_path_on_cpu() {
  static thread_local bool on = false;
  return on;
}
}  // namespace detail

}  // namespace troupe
