// CPU pointwise kernels of the recurrent layers (one time step, rows of a batch), internal to nn/modules:
// the activations of the gates and their derivatives, written so that the compiler vectorises them
// (a polynomial exp for float; std::exp for double).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace troupe::nn::rnn_detail {

/// exp(x) for float: 2^n * p(r) with x = n ln2 + r, |r| <= ln2/2, a degree-6 polynomial (relative error
/// about 2e-7); branch-free so that loops over it vectorise.
inline float vexp(float x) {
  x = std::min(std::max(x, -87.3f), 88.3f);
  const float magic = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer in the low mantissa bits
  float t = x * 1.44269504088896341f + magic;
  int32_t ti, mi;
  std::memcpy(&ti, &t, 4);
  std::memcpy(&mi, &magic, 4);
  const int32_t n = ti - mi;
  const float fn = t - magic;
  float r = x - fn * 0.693359375f;
  r = r - fn * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t bits = (n + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, 4);
  return p * scale;
}
inline double vexp(double x) { return std::exp(x); }

template <class T>
inline T sigmoid(T x) {
  return T(1) / (T(1) + vexp(-x));
}
template <class T>
inline T tanh_(T x) {
  return T(2) / (T(1) + vexp(T(-2) * x)) - T(1);
}
inline double tanh_(double x) { return std::tanh(x); }

// ---- LSTM, one step over b rows. gates (b, 4H): pre-activations in, activations (i, f, g, o) out;
// c (b, H): c_{t-1} in, c_t out (cprev gets a copy of c_{t-1}); hpre (b, H) = o * tanh(c_t).
template <class T>
void lstm_forward_rows(int64_t b, int64_t H, T* gates, T* c, T* cprev, T* call, T* hpre) {
  for (int64_t r = 0; r < b; ++r) {
    T* g = gates + r * 4 * H;
    T* cr = c + r * H;
    T* cp = cprev + r * H;
    T* ca = call + r * H;
    T* hr = hpre + r * H;
    for (int64_t j = 0; j < H; ++j) {
      const T i = sigmoid(g[j]), f = sigmoid(g[H + j]), gg = tanh_(g[2 * H + j]), o = sigmoid(g[3 * H + j]);
      g[j] = i;
      g[H + j] = f;
      g[2 * H + j] = gg;
      g[3 * H + j] = o;
      const T cn = f * cr[j] + i * gg;
      cp[j] = cr[j];
      cr[j] = cn;
      ca[j] = cn;
      hr[j] = o * tanh_(cn);
    }
  }
}

// Backward of one LSTM step: dh (b, H) the gradient of hpre; dc (b, H): gradient of c_t in, of c_{t-1}
// out; act (b, 4H) the activations; cprev, call as saved; dgates (b, 4H) out (pre-activation).
template <class T>
void lstm_backward_rows(int64_t b, int64_t H, const T* dh, T* dc, const T* act, const T* cprev, const T* call,
                        T* dgates) {
  for (int64_t r = 0; r < b; ++r) {
    const T* a = act + r * 4 * H;
    const T* dhr = dh + r * H;
    T* dcr = dc + r * H;
    const T* cp = cprev + r * H;
    const T* cn = call + r * H;
    T* dg = dgates + r * 4 * H;
    for (int64_t j = 0; j < H; ++j) {
      const T i = a[j], f = a[H + j], g = a[2 * H + j], o = a[3 * H + j];
      const T tc = tanh_(cn[j]);
      const T d = dcr[j] + dhr[j] * o * (T(1) - tc * tc);
      dg[j] = d * g * i * (T(1) - i);
      dg[H + j] = d * cp[j] * f * (T(1) - f);
      dg[2 * H + j] = d * i * (T(1) - g * g);
      dg[3 * H + j] = dhr[j] * tc * o * (T(1) - o);
      dcr[j] = d * f;
    }
  }
}

// ---- GRU, one step: gx (b, 3H) = x W_ih^T + b_ih, pre-activations in, activations (r, z, n) out;
// gh (b, 3H) = h W_hh^T + b_hh; h (b, H) = h_{t-1}; out (b, H) = (1 - z) n + z h.
template <class T>
void gru_forward_rows(int64_t b, int64_t H, T* gx, const T* gh, const T* h, T* out) {
  for (int64_t r = 0; r < b; ++r) {
    T* x = gx + r * 3 * H;
    const T* hh = gh + r * 3 * H;
    const T* hr = h + r * H;
    T* o = out + r * H;
    for (int64_t j = 0; j < H; ++j) {
      const T rg = sigmoid(x[j] + hh[j]);
      const T z = sigmoid(x[H + j] + hh[H + j]);
      const T n = tanh_(x[2 * H + j] + rg * hh[2 * H + j]);
      x[j] = rg;
      x[H + j] = z;
      x[2 * H + j] = n;
      o[j] = n + z * (hr[j] - n);
    }
  }
}

// Backward of one GRU step: dh (b, H) the gradient of the output in, the direct part of the gradient of
// h_{t-1} out (z * dh); dgx, dgh (b, 3H) the gradients of the two pre-activation sums.
template <class T>
void gru_backward_rows(int64_t b, int64_t H, T* dh, const T* act, const T* gh, const T* h, T* dgx, T* dgh) {
  for (int64_t r = 0; r < b; ++r) {
    const T* a = act + r * 3 * H;
    const T* hh = gh + r * 3 * H;
    const T* hr = h + r * H;
    T* d = dh + r * H;
    T* dx = dgx + r * 3 * H;
    T* dhh = dgh + r * 3 * H;
    for (int64_t j = 0; j < H; ++j) {
      const T rg = a[j], z = a[H + j], n = a[2 * H + j];
      const T g = d[j];
      const T dn = g * (T(1) - z) * (T(1) - n * n);
      const T dz = g * (hr[j] - n) * z * (T(1) - z);
      const T dr = dn * hh[2 * H + j] * rg * (T(1) - rg);
      dx[j] = dr;
      dx[H + j] = dz;
      dx[2 * H + j] = dn;
      dhh[j] = dr;
      dhh[H + j] = dz;
      dhh[2 * H + j] = dn * rg;
      d[j] = g * z;
    }
  }
}

// ---- Elman RNN: g (b, H) pre-activations in, h_t out (also to out).
template <class T>
void rnn_forward_rows(int64_t n, bool relu, T* g, T* out) {
  if (relu) {
    for (int64_t j = 0; j < n; ++j) out[j] = g[j] = g[j] > T(0) ? g[j] : T(0);
  } else {
    for (int64_t j = 0; j < n; ++j) out[j] = g[j] = tanh_(g[j]);
  }
}

// dg = dh * f'(pre) from the output h.
template <class T>
void rnn_backward_rows(int64_t n, bool relu, const T* dh, const T* h, T* dg) {
  if (relu) {
    for (int64_t j = 0; j < n; ++j) dg[j] = h[j] > T(0) ? dh[j] : T(0);
  } else {
    for (int64_t j = 0; j < n; ++j) dg[j] = dh[j] * (T(1) - h[j] * h[j]);
  }
}

}  // namespace troupe::nn::rnn_detail
