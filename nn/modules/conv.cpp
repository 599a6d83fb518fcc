// Conv2d: options checks, PyTorch's default initialisation, forward through F::conv2d (and F::pad for
// the non-zero padding modes).
#include <troupe/nn/modules/conv.h>

#include <cmath>
#include <stdexcept>

#include <troupe/nn/init.h>
#include <troupe/util/python_format.h>
#include <troupe/tensor/autograd.h>
#include <troupe/tensor/ops.h>

namespace troupe::nn {

Conv2dImpl::Conv2dImpl(const Conv2dOptions& options_) : options(options_) { reset(); }

Conv2dImpl::Conv2dImpl(int64_t in_channels, int64_t out_channels, ExpandingArray<2> kernel_size, ExpandingArray<2> stride,
               Conv2dPadding padding, ExpandingArray<2> dilation, int64_t groups, bool bias, std::string padding_mode)
    : Conv2dImpl(Conv2dOptions(in_channels, out_channels, kernel_size)
                 .stride(stride)
                 .padding(std::move(padding))
                 .dilation(dilation)
                 .groups(groups)
                 .bias(bias)
                 .padding_mode(std::move(padding_mode))) {}

void Conv2dImpl::reset() {
  const auto& o = options;
  if (o.groups() <= 0) throw std::invalid_argument("groups must be a positive integer");
  if (o.in_channels() % o.groups() != 0) throw std::invalid_argument("in_channels must be divisible by groups");
  if (o.out_channels() % o.groups() != 0) throw std::invalid_argument("out_channels must be divisible by groups");
  const Conv2dPadding& padding = o.padding();
  if (padding.is_string()) {
    if (padding.mode() != "same" && padding.mode() != "valid")
      throw std::invalid_argument("Invalid padding string '" + padding.mode() +
                                  "', should be one of {'valid', 'same'}");
    if (padding.mode() == "same" && (o.stride()[0] != 1 || o.stride()[1] != 1))
      throw std::invalid_argument("padding='same' is not supported for strided convolutions");
  }
  const std::string& pm = o.padding_mode();
  if (pm != "zeros" && pm != "reflect" && pm != "replicate" && pm != "circular")
    throw std::invalid_argument(
        "padding_mode must be one of {'zeros', 'reflect', 'replicate', 'circular'}, but got padding_mode='" + pm +
        "'");
  // F.pad order: last dim first, (left, right) pairs
  if (padding.is_string()) {
    reversed_padding_repeated_twice_ = {0, 0, 0, 0};
    if (padding.mode() == "same") {
      for (int i = 0; i < 2; ++i) {
        const int64_t total = o.dilation()[i] * (o.kernel_size()[i] - 1);
        const int64_t left = total / 2;
        reversed_padding_repeated_twice_[2 * (1 - i)] = left;
        reversed_padding_repeated_twice_[2 * (1 - i) + 1] = total - left;
      }
    }
  } else {
    const auto& p = padding.ints();
    reversed_padding_repeated_twice_ = {p[1], p[1], p[0], p[0]};
  }

  TensorOptions topts = TensorOptions().device(o.device());
  if (o.dtype()) topts = topts.dtype(*o.dtype());
  weight = register_parameter(
      "weight", empty({o.out_channels(), o.in_channels() / o.groups(), o.kernel_size()[0], o.kernel_size()[1]}, topts));
  bias = register_parameter("bias", o.bias() ? empty({o.out_channels()}, topts) : Tensor());
  reset_parameters();
}

void Conv2dImpl::reset_parameters() {
  if (initialization_skipped()) return;
  // a = sqrt(5) makes the weight U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = C_in/groups * kH * kW
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    const int64_t fan_in = init::calculate_fan_in_and_fan_out(weight).first;
    if (fan_in != 0) {
      const double bound = 1 / std::sqrt(static_cast<double>(fan_in));
      init::uniform_(bias, -bound, bound);
    }
  }
}

Tensor Conv2dImpl::forward(const Tensor& input) {
  const auto& o = options;
  auto conv = functional::Conv2dFuncOptions().bias(bias).stride(o.stride()).dilation(o.dilation()).groups(o.groups());
  if (o.padding_mode() != "zeros") {
    const std::vector<int64_t> pad(reversed_padding_repeated_twice_.begin(), reversed_padding_repeated_twice_.end());
    return functional::conv2d(functional::pad(input, functional::PadFuncOptions(pad).mode(o.padding_mode())), weight,
                              conv.padding(0));
  }
  return functional::conv2d(input, weight, conv.padding(o.padding()));
}

std::string Conv2dImpl::extra_repr() const {
  const auto& o = options;
  std::string s = std::to_string(o.in_channels()) + ", " + std::to_string(o.out_channels()) +
                  ", kernel_size=" + o.kernel_size().tuple_str() + ", stride=" + o.stride().tuple_str();
  const Conv2dPadding& p = o.padding();
  if (p.is_string() || p.ints()[0] != 0 || p.ints()[1] != 0) s += ", padding=" + p.str();
  if (o.dilation()[0] != 1 || o.dilation()[1] != 1) s += ", dilation=" + o.dilation().tuple_str();
  if (o.groups() != 1) s += ", groups=" + std::to_string(o.groups());
  if (!bias.defined()) s += ", bias=False";
  if (o.padding_mode() != "zeros") s += ", padding_mode=" + o.padding_mode();
  return s;
}

}  // namespace troupe::nn
