// nn::functional conv1d / conv2d / conv_transpose1d / conv_transpose2d (over the tensor library's ops) and pad.
#include <troupe/nn/functional/conv.h>

#include <stdexcept>
#include <string>
#include <vector>

#include <troupe/tensor/ops.h>

namespace troupe::nn::functional {

namespace {

/// Index vector of length left + n + right mapping each padded position to its source in [0, n).
Tensor pad_index(int64_t n, int64_t left, int64_t right, const std::string& mode, Device device) {
  std::vector<int64_t> idx;
  idx.reserve(static_cast<size_t>(left + n + right));
  for (int64_t i = -left; i < n + right; ++i) {
    int64_t j = i;
    if (mode == "reflect") {
      // mirror about the edge elements (the edges themselves are not repeated)
      if (j < 0) j = -j;
      if (j >= n) j = 2 * (n - 1) - j;
    } else if (mode == "replicate") {
      j = j < 0 ? 0 : (j >= n ? n - 1 : j);
    } else {  // circular
      j = ((j % n) + n) % n;
    }
    idx.push_back(j);
  }
  return tensor(idx).to(device);
}

}  // namespace

Tensor pad(const Tensor& input, const PadFuncOptions& options) {
  const IntArrayRef pad = options.pad();
  const std::string& mode = options.mode();
  const double value = options.value();
  if (!input.defined()) throw std::invalid_argument("[pad] got an undefined tensor");
  if (pad.size() % 2 != 0) throw std::invalid_argument("Padding length must be divisible by 2");
  const int64_t npairs = static_cast<int64_t>(pad.size() / 2);
  const int64_t nd = input.dim();
  if (npairs > nd) throw std::invalid_argument("Padding length too large");
  if (mode != "constant" && mode != "reflect" && mode != "replicate" && mode != "circular")
    throw std::invalid_argument("Unrecognised padding mode " + mode);

  if (mode == "constant") {
    Tensor out = input;
    for (int64_t k = 0; k < npairs; ++k) {
      const int64_t d = nd - 1 - k;
      const int64_t left = pad[2 * k], right = pad[2 * k + 1];
      // negative padding crops
      if (left < 0) out = out.narrow(d, -left, out.size(d) + left);
      if (right < 0) out = out.narrow(d, 0, out.size(d) + right);
      if (left > 0 || right > 0) {
        std::vector<Tensor> parts;
        std::vector<int64_t> s = out.sizes().vec();
        if (left > 0) {
          s[d] = left;
          parts.push_back(full(s, value, out.options()));
        }
        parts.push_back(out);
        if (right > 0) {
          s[d] = right;
          parts.push_back(full(s, value, out.options()));
        }
        out = cat(parts, d);
      }
    }
    return out;
  }

  if (value != 0)
    throw std::invalid_argument("Padding mode \"" + mode + "\" doesn't take in value argument");
  // reflect / replicate / circular: 1-D padding of (N, C, W) or (C, W), 2-D of (N, C, H, W) or
  // (C, H, W), 3-D of (N, C, D, H, W) or (C, D, H, W)
  if (!(npairs >= 1 && npairs <= 3 && (nd == npairs + 1 || nd == npairs + 2)))
    throw std::invalid_argument("Only 2D, 3D, 4D, 5D padding with non-constant padding are supported for now");
  for (int64_t v : pad)
    if (v < 0)
      throw std::invalid_argument("[pad] negative padding is supported only in mode \"constant\", got pad=" +
                                  list_str(pad) + " with mode \"" + mode + "\"");
  for (int64_t k = 0; k < npairs; ++k) {
    const int64_t d = nd - 1 - k;
    const int64_t left = pad[2 * k], right = pad[2 * k + 1], n = input.size(d);
    if (mode == "reflect" && (left >= n || right >= n)) {
      // PyTorch 1.13 prints the input's sizes for 1-D and 3-D padding and its dim count for 2-D
      const std::string what = npairs == 2 ? std::to_string(nd) : list_str(input.sizes());
      throw std::invalid_argument("Argument #" + std::to_string(4 + 2 * k) +
                                  ": Padding size should be less than the corresponding input dimension, but got: "
                                  "padding (" + std::to_string(left) + ", " + std::to_string(right) +
                                  ") at dimension " + std::to_string(d) + " of input " + what);
    }
    if (mode == "circular" && (left > n || right > n))
      throw std::invalid_argument("Padding value causes wrapping around more than once.");
    if (n == 0)
      throw std::invalid_argument("[pad] mode \"" + mode + "\" needs non-empty padded dims, got input of shape " +
                                  shape_str(input.sizes()));
  }
  Tensor out = input;
  for (int64_t k = 0; k < npairs; ++k) {
    const int64_t d = nd - 1 - k;
    const int64_t left = pad[2 * k], right = pad[2 * k + 1];
    if (left == 0 && right == 0) continue;
    out = index_select(out, d, pad_index(out.size(d), left, right, mode, input.device()));
  }
  return out;
}

Tensor conv2d(const Tensor& input, const Tensor& weight, const Conv2dFuncOptions& options) {
  const Tensor& bias = options.bias();
  const IntArrayRef stride = options.stride(), dilation = options.dilation();
  const Conv2dPadding& padding = options.padding();
  const int64_t groups = options.groups();
  if (!padding.is_string())
    return troupe::conv2d(input, weight, bias, stride, padding.ints().ref(), dilation, groups);
  if (padding.mode() == "valid") return troupe::conv2d(input, weight, bias, stride, 0, dilation, groups);
  if (padding.mode() != "same") throw std::invalid_argument("Invalid padding string: '" + padding.mode() + "'");
  for (int64_t s : stride)
    if (s != 1) throw std::invalid_argument("padding='same' is not supported for strided convolutions");
  if (!input.defined() || !weight.defined()) throw std::invalid_argument("[conv2d] got an undefined tensor");
  if (weight.dim() != 4 || (input.dim() != 3 && input.dim() != 4))
    return troupe::conv2d(input, weight, bias, stride, 0, dilation, groups);  // its shape errors
  if (dilation.size() != 1 && dilation.size() != 2)
    return troupe::conv2d(input, weight, bias, stride, 0, dilation, groups);  // its error for dilation
  // Total padding d*(k-1) per dim: half on each side, the odd one extra on the right / bottom.
  std::array<int64_t, 2> left{}, right{};
  bool symmetric = true;
  for (int i = 0; i < 2; ++i) {
    const int64_t d = dilation.size() == 2 ? dilation[i] : dilation[0];
    const int64_t total = d * (weight.size(2 + i) - 1);
    left[i] = total / 2;
    right[i] = total - left[i];
    symmetric = symmetric && left[i] == right[i];
  }
  if (symmetric) return troupe::conv2d(input, weight, bias, stride, {left[0], left[1]}, dilation, groups);
  Tensor padded = pad(input, PadFuncOptions({0, right[1] - left[1], 0, right[0] - left[0]}));
  return troupe::conv2d(padded, weight, bias, stride, {left[0], left[1]}, dilation, groups);
}

Tensor conv1d(const Tensor& input, const Tensor& weight, const Conv1dFuncOptions& options) {
  const Conv1dPadding& padding = options.padding();
  const int64_t s = options.stride()[0], d = options.dilation()[0];
  if (!padding.is_string())
    return troupe::conv1d(input, weight, options.bias(), s, padding.ints()[0], d, options.groups());
  if (padding.mode() == "valid") return troupe::conv1d(input, weight, options.bias(), s, 0, d, options.groups());
  if (padding.mode() != "same") throw std::invalid_argument("Invalid padding string: '" + padding.mode() + "'");
  if (s != 1) throw std::invalid_argument("padding='same' is not supported for strided convolutions");
  if (!input.defined() || !weight.defined() || (input.dim() != 2 && input.dim() != 3) || weight.dim() != 3)
    return troupe::conv1d(input, weight, options.bias(), s, 0, d, options.groups());  // its errors
  // (N, C, L) as (N, C, 1, L) through conv2d's "same"
  return conv2d(input.unsqueeze(-2), weight.unsqueeze(-2),
                Conv2dFuncOptions().bias(options.bias()).stride(1).padding("same").dilation({1, d}).groups(
                    options.groups()))
      .squeeze(-2);
}

Tensor conv_transpose2d(const Tensor& input, const Tensor& weight, const ConvTranspose2dFuncOptions& o) {
  return troupe::conv_transpose2d(input, weight, o.bias(), o.stride(), o.padding(), o.output_padding(), o.groups(),
                                  o.dilation());
}

Tensor conv_transpose1d(const Tensor& input, const Tensor& weight, const ConvTranspose1dFuncOptions& o) {
  return troupe::conv_transpose1d(input, weight, o.bias(), o.stride(), o.padding(), o.output_padding(), o.groups(),
                                  o.dilation());
}

}  // namespace troupe::nn::functional
