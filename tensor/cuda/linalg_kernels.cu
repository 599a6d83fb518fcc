// CUDA linear algebra: gemm through cuBLAS (a row-major C is the column-major C^T = B^T A^T; strided operands
// without a BLAS layout are copied contiguous first) and the convolution helpers im2col/col2im.
#include "cuda_common.cuh"

namespace troupe::cuda {

namespace {

struct ConvGeom {
  int64_t N, C, H, W, kh, kw, sh, sw, ph, pw, dh, dw, oH, oW;
  int64_t col_sn, col_sr;  // strides of the columns' image and row dims (the position dim has stride 1)
};

/// ConvGeom's fields in the index type I of a kernel.
template <typename I>
struct ConvGeomAs {
  I N, C, H, W, kh, kw, sh, sw, ph, pw, dh, dw, oH, oW, col_sn, col_sr;
  __device__ explicit ConvGeomAs(const ConvGeom& g)
      : N(I(g.N)), C(I(g.C)), H(I(g.H)), W(I(g.W)), kh(I(g.kh)), kw(I(g.kw)), sh(I(g.sh)), sw(I(g.sw)),
        ph(I(g.ph)), pw(I(g.pw)), dh(I(g.dh)), dw(I(g.dw)), oH(I(g.oH)), oW(I(g.oW)), col_sn(I(g.col_sn)),
        col_sr(I(g.col_sr)) {}
};

/// (n, c, h, w) of flat index i over an (N, C, H, W) layout.
template <typename I>
__device__ __forceinline__ void unflatten_nchw(I i, I C, I H, I W, I& n, I& c, I& h, I& w) {
  w = i % W;
  I t = i / W;
  h = t % H;
  t /= H;
  c = t % C;
  n = t / C;
}

/// One thread per output position and channel (n, c, oh, ow), writing the column elements of its kh x kw
/// window: the image pixel each sees, or 0 in the padding. The columns are (N, rows, L) with strides (col_sn,
/// col_sr, 1): contiguous, or a chunk's (rows, N*L) matrix. Index arithmetic in I: int when every offset fits
/// (divisions in 64 bits cost several times more), else int64_t; the divisions are paid once a window.
template <typename U, typename I>
__global__ void __launch_bounds__(kThreads) im2col_kernel(ConvGeom geo, const U* im, U* col) {
  const ConvGeomAs<I> g(geo);
  const I total = g.N * g.C * g.oH * g.oW;
  const I step = I(blockDim.x) * I(gridDim.x);
  for (I i = I(blockIdx.x) * I(blockDim.x) + I(threadIdx.x); i < total; i += step) {
    I n, c, oh, ow;
    unflatten_nchw(i, g.C, g.oH, g.oW, n, c, oh, ow);
    const U* img = im + (n * g.C + c) * g.H * g.W;
    U* out = col + n * g.col_sn + c * g.kh * g.kw * g.col_sr + oh * g.oW + ow;
    const I ih0 = oh * g.sh - g.ph, iw0 = ow * g.sw - g.pw;
    for (I ki = 0; ki < g.kh; ++ki) {
      const I ih = ih0 + ki * g.dh;
      const bool row_in = ih >= 0 && ih < g.H;
      for (I kj = 0; kj < g.kw; ++kj) {
        const I iw = iw0 + kj * g.dw;
        *out = (row_in && iw >= 0 && iw < g.W) ? img[ih * g.W + iw] : U(0);
        out += g.col_sr;
      }
    }
  }
}

/// One thread per image pixel (n, c, ih, iw): the sum of the column elements that saw it, in the CPU's
/// (ki, kj) order. Index arithmetic in I, as im2col_kernel.
template <typename T, typename I>
__global__ void __launch_bounds__(kThreads) col2im_kernel(ConvGeom geo, const T* col, T* im) {
  using A = math_t<T>;
  const ConvGeomAs<I> g(geo);
  const I total = g.N * g.C * g.H * g.W;
  const I step = I(blockDim.x) * I(gridDim.x);
  for (I i = I(blockIdx.x) * I(blockDim.x) + I(threadIdx.x); i < total; i += step) {
    I n, c, ih, iw;
    unflatten_nchw(i, g.C, g.H, g.W, n, c, ih, iw);
    const T* cn = col + n * g.col_sn + c * g.kh * g.kw * g.col_sr;
    A acc = A(0);
    for (I ki = 0; ki < g.kh; ++ki) {
      const I th = ih + g.ph - ki * g.dh;  // = oh * sh
      if (th < 0 || th % g.sh != 0) continue;
      const I oh = th / g.sh;
      if (oh >= g.oH) continue;
      for (I kj = 0; kj < g.kw; ++kj) {
        const I tw = iw + g.pw - kj * g.dw;
        if (tw < 0 || tw % g.sw != 0) continue;
        const I ow = tw / g.sw;
        if (ow >= g.oW) continue;
        acc += load_as<A>(cn[(ki * g.kw + kj) * g.col_sr + oh * g.oW + ow]);
      }
    }
    im[i] = store_as<T>(acc);
  }
}

/// Whether every index of im2col/col2im over `g` (the image's elements, the columns' offsets, and the
/// intermediate products) fits in an int.
bool fits_int(const ConvGeom& g) {
  const int64_t lim = int64_t(INT32_MAX) / 2;
  const int64_t rows = g.C * g.kh * g.kw, L = g.oH * g.oW;
  const int64_t col_end = (g.N - 1) * g.col_sn + (rows - 1) * g.col_sr + L + rows * g.col_sr;
  return g.N * g.C * g.H * g.W < lim && g.N * g.C * L < lim && col_end < lim &&
         (g.H + 2 * g.ph + g.kh * g.dh) * (g.W + 2 * g.pw + g.kw * g.dw) < lim;
}

/// How a 2-D strided matrix maps onto BLAS storage (see cpu/linalg_kernels.cpp): trans == false:
/// (i, j) at p[i*ld + j] (row-major); trans == true: (i, j) at p[j*ld + i] (column-major).
struct Layout {
  bool ok = false;
  bool trans = false;
  int64_t ld = 0;
};

Layout layout_of(int64_t rows, int64_t cols, int64_t rs, int64_t cs) {
  Layout l;
  if ((cols <= 1 || cs == 1) && (rows <= 1 || rs >= std::max<int64_t>(1, cols))) {
    l.ok = true;
    l.trans = false;
    l.ld = rows <= 1 ? std::max<int64_t>(1, cols) : rs;
    return l;
  }
  if ((rows <= 1 || rs == 1) && (cols <= 1 || cs >= std::max<int64_t>(1, rows))) {
    l.ok = true;
    l.trans = true;
    l.ld = cols <= 1 ? std::max<int64_t>(1, rows) : cs;
    return l;
  }
  return l;
}

Layout layout_of(const Tensor& t) { return layout_of(t.size(0), t.size(1), t.stride(0), t.stride(1)); }

int to_int(int64_t v, const char* what) {
  if (v > static_cast<int64_t>(INT_MAX))
    throw std::invalid_argument(std::string("[gemm] ") + what + " " + std::to_string(v) +
                                " is too large for cuBLAS (more than 2^31-1)");
  return static_cast<int>(v);
}


ConvGeom conv_geometry(const char* op, const Tensor& im, const Tensor& col, int64_t kh, int64_t kw,
                              int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh, int64_t dw) {
  if (im.dim() != 3 && im.dim() != 4)
    throw std::invalid_argument(std::string("[") + op + "] expected a (C, H, W) or (N, C, H, W) image, got shape " +
                                shape_str(im.sizes()));
  if (!im.is_contiguous() || col.dim() < 1 || (col.numel() > 0 && col.stride(col.dim() - 1) != 1))
    throw std::invalid_argument(std::string("[") + op + "] expected a contiguous image and columns whose last dim has stride 1");
  if (im.dtype() != col.dtype())
    throw std::invalid_argument(std::string("[") + op + "] image and columns must share one dtype, got " +
                                dtype_name(im.dtype()) + " and " + dtype_name(col.dtype()));
  if (sh <= 0 || sw <= 0 || dh <= 0 || dw <= 0)
    throw std::invalid_argument(std::string("[") + op + "] stride and dilation must be positive");
  ConvGeom g{};
  const int64_t d = im.dim();
  g.N = d == 4 ? im.size(0) : 1;
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
  g.col_sn = d == 4 ? col.stride(0) : 0;
  g.col_sr = col.stride(d == 4 ? 1 : 0);
  return g;
}

/// A new contiguous copy of t on its device (kernel level: no autograd).
Tensor contiguous_copy(CudaBackend& be, const Tensor& t) {
  Tensor out = empty(t.sizes(), TensorOptions().dtype(t.dtype()).device(t.device()));
  be.copy(out, t);
  return out;
}

/// C = beta * C (a gemm with an empty inner dimension).
void scale_output(CudaBackend& be, const Tensor& c, double beta) {
  if (beta == 0) {
    be.fill(c, Scalar(0));
    return;
  }
  if (beta == 1) return;
  Tensor s = empty({}, TensorOptions().dtype(c.dtype()).device(c.device()));
  be.fill(s, Scalar(beta));
  Tensor tmp = contiguous_copy(be, c);
  be.binary(BinaryOp::Mul, c, tmp, s.expand(c.sizes()), 1.0);
}

/// C (M x N) = alpha * A (M x K) @ B (K x N) + beta * C through cuBLAS (column-major): a row-major C
/// is the column-major C^T = B^T A^T, so the operands swap; strided operands without a BLAS layout
/// are copied contiguous first.
void gemm_cublas(CudaBackend& be, int dev, const Tensor& c, const Tensor& a, const Tensor& b, double alpha, double beta) {
  const int64_t M = c.size(0), N = c.size(1), K = a.size(1);
  const Layout lc = layout_of(c);
  if (!lc.ok) {
    Tensor tmp = beta == 0 ? empty({M, N}, TensorOptions().dtype(c.dtype()).device(c.device())) : contiguous_copy(be, c);
    gemm_cublas(be, dev, tmp, a, b, alpha, beta);
    be.copy(c, tmp);
    return;
  }
  Tensor A = a, B = b;
  Layout la = layout_of(A), lb = layout_of(B);
  if (!la.ok) {
    A = contiguous_copy(be, a);
    la = layout_of(A);
  }
  if (!lb.ok) {
    B = contiguous_copy(be, b);
    lb = layout_of(B);
  }
  // column-major problem: C' (m x n) = op(X) (m x k) @ op(Y) (k x n)
  const void *X, *Y;
  cublasOperation_t opx, opy;
  int64_t m, n, ldx, ldy;
  if (!lc.trans) {  // C row-major: C^T = B^T A^T
    m = N, n = M;
    X = B.data_ptr(), ldx = lb.ld, opx = lb.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
    Y = A.data_ptr(), ldy = la.ld, opy = la.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  } else {  // C column-major: C = A B
    m = M, n = N;
    X = A.data_ptr(), ldx = la.ld, opx = la.trans ? CUBLAS_OP_N : CUBLAS_OP_T;
    Y = B.data_ptr(), ldy = lb.ld, opy = lb.trans ? CUBLAS_OP_N : CUBLAS_OP_T;
  }
  const int im = to_int(m, "dimension"), in = to_int(n, "dimension"), ik = to_int(K, "dimension");
  const int ix = to_int(ldx, "leading dimension"), iy = to_int(ldy, "leading dimension"),
            ic = to_int(lc.ld, "leading dimension");
  cublasHandle_t h = cublas_handle(dev);
  void* C = c.data_ptr();
  switch (c.dtype()) {
    case kFloat32: {
      const float al = static_cast<float>(alpha), be = static_cast<float>(beta);
      TROUPE_CUBLAS_CHECK(cublasSgemm(h, opx, opy, im, in, ik, &al, static_cast<const float*>(X), ix,
                                      static_cast<const float*>(Y), iy, &be, static_cast<float*>(C), ic));
      return;
    }
    case kFloat64: {
      TROUPE_CUBLAS_CHECK(cublasDgemm(h, opx, opy, im, in, ik, &alpha, static_cast<const double*>(X), ix,
                                      static_cast<const double*>(Y), iy, &beta, static_cast<double*>(C), ic));
      return;
    }
    case kFloat16:
    case kBFloat16: {
      const cudaDataType_t dt = c.dtype() == kFloat16 ? CUDA_R_16F : CUDA_R_16BF;
      const float al = static_cast<float>(alpha), be = static_cast<float>(beta);
      TROUPE_CUBLAS_CHECK(cublasGemmEx(h, opx, opy, im, in, ik, &al, X, dt, ix, Y, dt, iy, &be, C, dt, ic,
                                       CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      return;
    }
    default: bad_dtype("gemm", c.dtype());
  }
}

}  // namespace

void CudaBackend::gemm(const Tensor& c, const Tensor& a, const Tensor& b, double alpha, double beta) {
  if (c.dim() != 2 || a.dim() != 2 || b.dim() != 2)
    throw std::invalid_argument("[gemm] expected 2-D operands, got C " + shape_str(c.sizes()) + ", A " +
                                shape_str(a.sizes()) + ", B " + shape_str(b.sizes()));
  const int64_t M = c.size(0), N = c.size(1), K = a.size(1);
  if (a.size(0) != M || b.size(0) != K || b.size(1) != N)
    throw std::invalid_argument("[gemm] shapes do not match: C " + shape_str(c.sizes()) + " = A " +
                                shape_str(a.sizes()) + " @ B " + shape_str(b.sizes()));
  if (a.dtype() != c.dtype() || b.dtype() != c.dtype())
    throw std::invalid_argument(std::string("[gemm] operands must share one dtype, got C ") +
                                dtype_name(c.dtype()) + ", A " + dtype_name(a.dtype()) + ", B " +
                                dtype_name(b.dtype()));
  if (!is_floating_point(c.dtype()))
    throw std::invalid_argument(std::string("[gemm] not implemented for dtype ") + dtype_name(c.dtype()) +
                                " on device cuda (cuBLAS multiplies floating-point matrices only)");
  const int dev = common_device("gemm", {&c, &a, &b});
  if (M == 0 || N == 0) return;
  DeviceGuard g(dev);
  if (K == 0) {
    scale_output(*this, c, beta);
    return;
  }
  gemm_cublas(*this, dev, c, a, b, alpha, beta);
}

void CudaBackend::im2col(const Tensor& col, const Tensor& im, int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t ph,
            int64_t pw, int64_t dh, int64_t dw) {
  const int dev = common_device("im2col", {&col, &im});
  ConvGeom g = conv_geometry("im2col", im, col, kh, kw, sh, sw, ph, pw, dh, dw);
  const int64_t total = col.numel();
  if (total == 0) return;
  DeviceGuard guard(dev);
  const int64_t threads = g.N * g.C * g.oH * g.oW;
  const bool small = fits_int(g);
  dispatch_size(im.element_size(), [&](auto u) {
    using U = decltype(u);
    if (small) im2col_kernel<U, int><<<grid_for(threads), kThreads>>>(g, ptr<U>(im), ptr<U>(col));
    else im2col_kernel<U, int64_t><<<grid_for(threads), kThreads>>>(g, ptr<U>(im), ptr<U>(col));
    TROUPE_CUDA_CHECK(cudaGetLastError());
  });
}

void CudaBackend::col2im(const Tensor& im, const Tensor& col, int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t ph,
            int64_t pw, int64_t dh, int64_t dw) {
  const int dev = common_device("col2im", {&im, &col});
  ConvGeom g = conv_geometry("col2im", im, col, kh, kw, sh, sw, ph, pw, dh, dw);
  if (im.numel() == 0) return;
  if (im.dtype() == kBool) throw std::invalid_argument("[col2im] not implemented for dtype bool");
  DeviceGuard guard(dev);
  dispatch_all(im.dtype(), [&](auto tag) {
    using T = dev_t<decltype(tag)>;
    if constexpr (!std::is_same_v<T, bool>) {
      if (fits_int(g)) col2im_kernel<T, int><<<grid_for(im.numel()), kThreads>>>(g, ptr<T>(col), ptr<T>(im));
      else col2im_kernel<T, int64_t><<<grid_for(im.numel()), kThreads>>>(g, ptr<T>(col), ptr<T>(im));
      TROUPE_CUDA_CHECK(cudaGetLastError());
    }
  });
}

}  // namespace troupe::cuda
