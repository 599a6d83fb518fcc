// nn::functional interpolate composed of index_select and elementwise ops along one spatial dim at a time
// (autograd gives the backward); the source indices and weights are computed as PyTorch's CPU kernels do, in
// the input's precision (float for float32).
#include <troupe/nn/functional/upsampling.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include <troupe/nn/functional/pooling.h>
#include <troupe/tensor/ops.h>

namespace troupe::nn::functional {

namespace {

std::string vec_str(const std::vector<double>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    std::string d = std::to_string(v[i]);
    s += (i ? ", " : "") + d;
  }
  return s + "]";
}

// compute_scales_value: 1 / scale_factor when one is used, else in / out (in the kernel's type T).
template <typename T>
T scales_value(const std::optional<double>& scale, int64_t in, int64_t out) {
  return (scale && *scale > 0) ? static_cast<T>(1.0 / *scale) : static_cast<T>(in) / static_cast<T>(out);
}

// Source indices of the `out` outputs along one dim for nearest / nearest-exact.
std::vector<int64_t> nearest_indices(int64_t in, int64_t out, const std::optional<double>& scale, bool exact) {
  std::vector<int64_t> idx(static_cast<size_t>(out));
  const float s = scales_value<float>(scale, in, out);
  for (int64_t o = 0; o < out; ++o) {
    int64_t i;
    if (exact) {
      i = static_cast<int64_t>(std::floor(static_cast<float>((static_cast<double>(o) + 0.5) * s)));
    } else if (out == in) {
      i = o;
    } else if (out == 2 * in) {
      i = o >> 1;
    } else {
      i = static_cast<int64_t>(std::floor(static_cast<float>(o) * s));
    }
    idx[static_cast<size_t>(o)] = std::min(i, in - 1);
  }
  return idx;
}

// Linear interpolation along dim d: x[i0] * l0 + x[i1] * l1 with PyTorch's indices and weights, in T.
template <typename T>
Tensor linear_along(const Tensor& x, int64_t d, int64_t out, bool align_corners, const std::optional<double>& scale) {
  const int64_t in = x.size(d);
  T ratio;
  if (align_corners) ratio = out > 1 ? static_cast<T>(in - 1) / static_cast<T>(out - 1) : static_cast<T>(0);
  else ratio = scales_value<T>(scale, in, out);
  std::vector<int64_t> i0(static_cast<size_t>(out)), i1(static_cast<size_t>(out));
  std::vector<double> l0(static_cast<size_t>(out)), l1(static_cast<size_t>(out));
  for (int64_t o = 0; o < out; ++o) {
    T src;
    if (align_corners) {
      src = ratio * static_cast<T>(o);
    } else {
      src = ratio * (static_cast<T>(o) + static_cast<T>(0.5)) - static_cast<T>(0.5);
      if (src < 0) src = 0;
    }
    const int64_t a = static_cast<int64_t>(src);
    const T lambda1 = std::min(std::max(src - static_cast<T>(a), static_cast<T>(0)), static_cast<T>(1));
    i0[static_cast<size_t>(o)] = a;
    i1[static_cast<size_t>(o)] = a + (a < in - 1 ? 1 : 0);
    l1[static_cast<size_t>(o)] = static_cast<double>(lambda1);
    l0[static_cast<size_t>(o)] = static_cast<double>(static_cast<T>(1) - lambda1);
  }
  // the weights as (out) at dim d, 1 elsewhere
  std::vector<int64_t> wshape(static_cast<size_t>(x.dim()), 1);
  wshape[static_cast<size_t>(d)] = out;
  auto weights = [&](const std::vector<double>& l) {
    return tensor(l, TensorOptions().dtype(kFloat64)).to(x.device(), x.dtype()).reshape(wshape);
  };
  Tensor a = index_select(x, d, tensor(i0).to(x.device()));
  Tensor b = index_select(x, d, tensor(i1).to(x.device()));
  return a * weights(l0) + b * weights(l1);
}

}  // namespace

Tensor interpolate(const Tensor& input, const InterpolateFuncOptions& options) {
  if (!input.defined()) throw std::invalid_argument("[interpolate] got an undefined tensor");
  const std::string& mode = options.mode();
  const bool linear_mode = mode == "linear" || mode == "bilinear" || mode == "bicubic" || mode == "trilinear";
  if (!linear_mode && mode != "nearest" && mode != "nearest-exact" && mode != "area")
    throw std::invalid_argument("[interpolate] unknown mode '" + mode +
                                "', expected one of nearest | linear | bilinear | bicubic | trilinear | area | "
                                "nearest-exact");
  std::optional<bool> align_corners = options.align_corners();
  if (!linear_mode && align_corners)
    throw std::invalid_argument(
        "align_corners option can only be set with the interpolating modes: linear | bilinear | bicubic | trilinear");
  const bool corners = align_corners.value_or(false);
  const int64_t dim = input.dim() - 2;  // spatial dims
  std::vector<int64_t> spatial;
  for (int64_t d = 2; d < input.dim(); ++d) spatial.push_back(input.size(d));

  const auto& size = options.size();
  const auto& scale_factor = options.scale_factor();
  std::vector<int64_t> out_size;
  std::vector<std::optional<double>> scales(static_cast<size_t>(std::max<int64_t>(dim, 0)));
  if (size && scale_factor) throw std::invalid_argument("only one of size or scale_factor should be defined");
  if (size) {
    if (size->size() == 1 && dim >= 1) {
      out_size.assign(static_cast<size_t>(dim), (*size)[0]);
    } else if (static_cast<int64_t>(size->size()) == dim) {
      out_size = *size;
    } else {
      throw std::invalid_argument("Input and output must have the same number of spatial dimensions, but got input "
                                  "with spatial dimensions of " + list_str(spatial) + " and output size of " +
                                  list_str(*size) + ". Please provide input tensor in (N, C, d1, d2, ...,dK) format "
                                  "and output size in (o1, o2, ...,oK) format.");
    }
    if (options.recompute_scale_factor().value_or(false))
      throw std::invalid_argument("recompute_scale_factor is not meaningful with an explicit size.");
  } else if (scale_factor) {
    std::vector<double> sf;
    if (scale_factor->size() == 1 && dim >= 1) sf.assign(static_cast<size_t>(dim), (*scale_factor)[0]);
    else if (static_cast<int64_t>(scale_factor->size()) == dim) sf = *scale_factor;
    else
      throw std::invalid_argument("Input and scale_factor must have the same number of spatial dimensions, but got "
                                  "input with spatial dimensions of " + list_str(spatial) + " and scale_factor of "
                                  "shape " + vec_str(*scale_factor) + ". Please provide input tensor in (N, C, d1, "
                                  "d2, ...,dK) format and scale_factor in (s1, s2, ...,sK) format.");
    // "area" always works from a size (PyTorch recomputes the scale for it)
    const bool recompute = options.recompute_scale_factor().value_or(false) || mode == "area";
    for (int64_t i = 0; i < dim; ++i) {
      out_size.push_back(static_cast<int64_t>(std::floor(static_cast<double>(spatial[i]) * sf[i])));
      if (!recompute) scales[static_cast<size_t>(i)] = sf[i];
    }
  } else {
    throw std::invalid_argument("either size or scale_factor should be defined");
  }
  if (options.antialias())
    throw std::invalid_argument("[interpolate] antialias is not implemented in troupe");

  const std::string nd = std::to_string(input.dim()) + "D";
  auto needs = [&](const char* what) {
    return std::invalid_argument("Got " + nd + " input, but " + mode + " mode needs " + what + " input");
  };
  if (input.dim() < 3 || input.dim() > 5)
    throw std::invalid_argument("Input Error: Only 3D, 4D and 5D input Tensors supported (got " + nd +
                                ") for the modes: nearest | linear | bilinear | bicubic | trilinear | area | "
                                "nearest-exact (got " + mode + ")");
  if (mode == "linear" && input.dim() != 3) throw needs("3D");
  if (mode == "bilinear" && input.dim() != 4) throw needs("4D");
  if (mode == "trilinear" && input.dim() != 5) throw needs("5D");
  if (mode == "bicubic" && input.dim() != 4) throw needs("4D");
  if (mode == "bicubic" || mode == "trilinear" || input.dim() == 5)
    throw std::invalid_argument("[interpolate] mode '" + mode + "' on " + nd + " input is not implemented in troupe");
  for (int64_t o : out_size)
    if (o <= 0)
      throw std::invalid_argument("[interpolate] output sizes should be greater than 0, but got output size " +
                                  list_str(out_size));
  if (mode == "area") {
    if (dim == 1) return adaptive_avg_pool1d(input, AdaptiveAvgPool1dFuncOptions(out_size[0]));
    return adaptive_avg_pool2d(input, AdaptiveAvgPool2dFuncOptions({out_size[0], out_size[1]}));
  }
  if (linear_mode && !input.is_floating_point())
    throw std::invalid_argument(std::string("[interpolate] mode '") + mode + "' expects a floating-point input, got " +
                                dtype_name(input.dtype()));

  // the innermost dim first, as PyTorch's separable kernel weighs it first
  Tensor y = input;
  bool changed = false;
  for (int64_t i = dim - 1; i >= 0; --i) {
    const int64_t d = 2 + i, in = input.size(d), out = out_size[static_cast<size_t>(i)];
    const std::optional<double>& s = scales[static_cast<size_t>(i)];
    if (mode == "nearest" || mode == "nearest-exact") {
      std::vector<int64_t> idx = nearest_indices(in, out, s, mode == "nearest-exact");
      bool identity = out == in;
      for (int64_t o = 0; identity && o < out; ++o) identity = idx[static_cast<size_t>(o)] == o;
      if (identity) continue;
      y = index_select(y, d, tensor(idx).to(input.device()));
    } else {
      if (out == in) continue;  // PyTorch copies
      y = input.dtype() == kFloat64 ? linear_along<double>(y, d, out, corners, s)
                                    : linear_along<float>(y, d, out, corners, s);
    }
    changed = true;
  }
  return changed ? y : input.clone();
}

}  // namespace troupe::nn::functional
