// Conv1d / Conv2d / ConvTranspose1d / ConvTranspose2d: options checks, PyTorch's default initialisation,
// forward through F::conv1d / conv2d / conv_transpose1d / conv_transpose2d (and F::pad for the non-zero
// padding modes).
#include <troupe/nn/modules/conv.h>

#include <cmath>
#include <stdexcept>

#include <troupe/nn/init.h>
#include <troupe/util/python_format.h>
#include <troupe/tensor/autograd.h>
#include <troupe/tensor/ops.h>

namespace troupe::nn {

namespace {

void check_channels(int64_t in_channels, int64_t out_channels, int64_t groups) {
  if (groups <= 0) throw std::invalid_argument("groups must be a positive integer");
  if (in_channels % groups != 0) throw std::invalid_argument("in_channels must be divisible by groups");
  if (out_channels % groups != 0) throw std::invalid_argument("out_channels must be divisible by groups");
}

TensorOptions tensor_options(Device device, const std::optional<ScalarType>& dtype) {
  TensorOptions topts = TensorOptions().device(device);
  if (dtype) topts = topts.dtype(*dtype);
  return topts;
}

// PyTorch's _ConvNd.reset_parameters: a = sqrt(5) makes the weight U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in =
// weight.size(1) * prod(kernel_size) (C_in/groups for a conv, C_out/groups for a transposed one).
void init_conv(Tensor& weight, Tensor& bias) {
  if (initialization_skipped()) return;
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    const int64_t fan_in = init::calculate_fan_in_and_fan_out(weight).first;
    if (fan_in != 0) {
      const double bound = 1 / std::sqrt(static_cast<double>(fan_in));
      init::uniform_(bias, -bound, bound);
    }
  }
}

template <size_t D>
bool all_equal(const ExpandingArray<D>& a, int64_t v) {
  for (int64_t x : a)
    if (x != v) return false;
  return true;
}

template <size_t D>
Tensor conv_nd(const Tensor& x, const Tensor& w, const functional::ConvFuncOptions<D>& o) {
  if constexpr (D == 1) return functional::conv1d(x, w, o);
  else return functional::conv2d(x, w, o);
}

template <size_t D>
Tensor conv_transpose_nd(const Tensor& x, const Tensor& w, const functional::ConvTransposeFuncOptions<D>& o) {
  if constexpr (D == 1) return functional::conv_transpose1d(x, w, o);
  else return functional::conv_transpose2d(x, w, o);
}

}  // namespace

// ---------------------------------------------------------------- ConvNdImpl

template <size_t D, class Derived>
void ConvNdImpl<D, Derived>::reset() {
  const auto& o = options;
  check_channels(o.in_channels(), o.out_channels(), o.groups());
  const ConvPadding<D>& padding = o.padding();
  if (padding.is_string()) {
    if (padding.mode() != "same" && padding.mode() != "valid")
      throw std::invalid_argument("Invalid padding string '" + padding.mode() +
                                  "', should be one of {'valid', 'same'}");
    if (padding.mode() == "same" && !all_equal(o.stride(), 1))
      throw std::invalid_argument("padding='same' is not supported for strided convolutions");
  }
  const std::string& pm = o.padding_mode();
  if (pm != "zeros" && pm != "reflect" && pm != "replicate" && pm != "circular")
    throw std::invalid_argument(
        "padding_mode must be one of {'zeros', 'reflect', 'replicate', 'circular'}, but got padding_mode='" + pm +
        "'");
  // F.pad order: last dim first, (left, right) pairs
  reversed_padding_repeated_twice_.assign(2 * D, 0);
  for (size_t i = 0; i < D; ++i) {
    int64_t left = 0, right = 0;
    if (!padding.is_string()) {
      left = right = padding.ints()[i];
    } else if (padding.mode() == "same") {
      const int64_t total = o.dilation()[i] * (o.kernel_size()[i] - 1);
      left = total / 2;
      right = total - left;
    }
    reversed_padding_repeated_twice_[2 * (D - 1 - i)] = left;
    reversed_padding_repeated_twice_[2 * (D - 1 - i) + 1] = right;
  }

  const TensorOptions topts = tensor_options(o.device(), o.dtype());
  std::vector<int64_t> wshape{o.out_channels(), o.in_channels() / o.groups()};
  for (int64_t k : o.kernel_size()) wshape.push_back(k);
  weight = this->register_parameter("weight", empty(wshape, topts));
  bias = this->register_parameter("bias", o.bias() ? empty({o.out_channels()}, topts) : Tensor());
  reset_parameters();
}

template <size_t D, class Derived>
void ConvNdImpl<D, Derived>::reset_parameters() {
  init_conv(weight, bias);
}

template <size_t D, class Derived>
Tensor ConvNdImpl<D, Derived>::forward(const Tensor& input) {
  const auto& o = options;
  auto conv = functional::ConvFuncOptions<D>().bias(bias).stride(o.stride()).dilation(o.dilation()).groups(o.groups());
  if (o.padding_mode() != "zeros") {
    return conv_nd<D>(
        functional::pad(input, functional::PadFuncOptions(reversed_padding_repeated_twice_).mode(o.padding_mode())),
        weight, conv.padding(0));
  }
  return conv_nd<D>(input, weight, conv.padding(o.padding()));
}

template <size_t D, class Derived>
std::string ConvNdImpl<D, Derived>::extra_repr() const {
  const auto& o = options;
  std::string s = std::to_string(o.in_channels()) + ", " + std::to_string(o.out_channels()) +
                  ", kernel_size=" + o.kernel_size().tuple_str() + ", stride=" + o.stride().tuple_str();
  const ConvPadding<D>& p = o.padding();
  if (p.is_string() || !all_equal(p.ints(), 0)) s += ", padding=" + p.str();
  if (!all_equal(o.dilation(), 1)) s += ", dilation=" + o.dilation().tuple_str();
  if (o.groups() != 1) s += ", groups=" + std::to_string(o.groups());
  if (!bias.defined()) s += ", bias=False";
  if (o.padding_mode() != "zeros") s += ", padding_mode=" + o.padding_mode();
  return s;
}

template class ConvNdImpl<1, Conv1dImpl>;
template class ConvNdImpl<2, Conv2dImpl>;

Conv1dImpl::Conv1dImpl(const Conv1dOptions& options_) : ConvNdImpl(options_) { reset(); }

Conv1dImpl::Conv1dImpl(int64_t in_channels, int64_t out_channels, ExpandingArray<1> kernel_size,
                       ExpandingArray<1> stride, Conv1dPadding padding, ExpandingArray<1> dilation, int64_t groups,
                       bool bias, std::string padding_mode)
    : Conv1dImpl(Conv1dOptions(in_channels, out_channels, kernel_size)
                     .stride(stride)
                     .padding(std::move(padding))
                     .dilation(dilation)
                     .groups(groups)
                     .bias(bias)
                     .padding_mode(std::move(padding_mode))) {}

Conv2dImpl::Conv2dImpl(const Conv2dOptions& options_) : ConvNdImpl(options_) { reset(); }

Conv2dImpl::Conv2dImpl(int64_t in_channels, int64_t out_channels, ExpandingArray<2> kernel_size,
                       ExpandingArray<2> stride, Conv2dPadding padding, ExpandingArray<2> dilation, int64_t groups,
                       bool bias, std::string padding_mode)
    : Conv2dImpl(Conv2dOptions(in_channels, out_channels, kernel_size)
                     .stride(stride)
                     .padding(std::move(padding))
                     .dilation(dilation)
                     .groups(groups)
                     .bias(bias)
                     .padding_mode(std::move(padding_mode))) {}

// ---------------------------------------------------------------- ConvTransposeNdImpl

template <size_t D, class Derived>
void ConvTransposeNdImpl<D, Derived>::reset() {
  const auto& o = options;
  check_channels(o.in_channels(), o.out_channels(), o.groups());
  if (o.padding_mode() != "zeros")
    throw std::invalid_argument("Only \"zeros\" padding mode is supported for " + this->name() + ", got padding_mode='" +
                                o.padding_mode() + "'");
  const TensorOptions topts = tensor_options(o.device(), o.dtype());
  std::vector<int64_t> wshape{o.in_channels(), o.out_channels() / o.groups()};
  for (int64_t k : o.kernel_size()) wshape.push_back(k);
  weight = this->register_parameter("weight", empty(wshape, topts));
  bias = this->register_parameter("bias", o.bias() ? empty({o.out_channels()}, topts) : Tensor());
  reset_parameters();
}

template <size_t D, class Derived>
void ConvTransposeNdImpl<D, Derived>::reset_parameters() {
  init_conv(weight, bias);
}

template <size_t D, class Derived>
Tensor ConvTransposeNdImpl<D, Derived>::forward(const Tensor& input) {
  return forward(input, IntArrayRef{});
}

template <size_t D, class Derived>
Tensor ConvTransposeNdImpl<D, Derived>::forward(const Tensor& input, IntArrayRef output_size) {
  const auto& o = options;
  ExpandingArray<D> output_padding = o.output_padding();
  if (!output_size.empty() && input.defined()) {
    // PyTorch's _ConvTransposeNd._output_padding
    const int64_t non_spatial = input.dim() == static_cast<int64_t>(D) + 2 ? 2 : 1;
    IntArrayRef size = output_size;
    if (static_cast<int64_t>(size.size()) == non_spatial + static_cast<int64_t>(D))
      size = IntArrayRef(size.data() + non_spatial, D);
    if (size.size() != D)
      throw std::invalid_argument(this->name().substr(0, this->name().size() - 1) + "D: for " +
                                  std::to_string(input.dim()) + "D input, output_size must have " + std::to_string(D) +
                                  " or " + std::to_string(non_spatial + static_cast<int64_t>(D)) + " elements (got " +
                                  std::to_string(output_size.size()) + ")");
    if (input.dim() < static_cast<int64_t>(D) + 1)
      throw std::invalid_argument("[" + this->name() + "] expected an input with " + std::to_string(D + 1) + " or " +
                                  std::to_string(D + 2) + " dims, got shape " + shape_str(input.sizes()));
    std::vector<int64_t> min_sizes, max_sizes, pads;
    for (size_t d = 0; d < D; ++d) {
      const int64_t in = input.size(input.dim() - static_cast<int64_t>(D) + static_cast<int64_t>(d));
      min_sizes.push_back((in - 1) * o.stride()[d] - 2 * o.padding()[d] + o.dilation()[d] * (o.kernel_size()[d] - 1) +
                          1);
      max_sizes.push_back(min_sizes[d] + o.stride()[d] - 1);
    }
    for (size_t d = 0; d < D; ++d)
      if (size[d] < min_sizes[d] || size[d] > max_sizes[d]) {
        IntArrayRef spatial(input.sizes().data() + (input.dim() - static_cast<int64_t>(D)), D);
        throw std::invalid_argument("requested an output size of " + list_str(size) + ", but valid sizes range from " +
                                    list_str(min_sizes) + " to " + list_str(max_sizes) + " (for an input of " +
                                    "torch.Size(" + list_str(spatial) + "))");
      }
    for (size_t d = 0; d < D; ++d) pads.push_back(size[d] - min_sizes[d]);
    output_padding = ExpandingArray<D>(pads);
  }
  return conv_transpose_nd<D>(input, weight,
                              functional::ConvTransposeFuncOptions<D>()
                                  .bias(bias)
                                  .stride(o.stride())
                                  .padding(o.padding())
                                  .output_padding(output_padding)
                                  .groups(o.groups())
                                  .dilation(o.dilation()));
}

template <size_t D, class Derived>
Value ConvTransposeNdImpl<D, Derived>::forward_args(const Args& args, const Kwargs& kwargs) {
  if (args.size() != 1 || !args[0].is_tensor() || !kwargs.empty())
    throw std::invalid_argument("[" + this->name() + "] forward takes one tensor argument, got " +
                                std::to_string(args.size()) + " positional argument(s)" +
                                (args.size() == 1 ? " of kind " + args[0].kind() : "") + " and " +
                                std::to_string(kwargs.size()) + " keyword argument(s) (call forward(input, "
                                "output_size) for an output size)");
  return forward(args[0].tensor());
}

template <size_t D, class Derived>
std::string ConvTransposeNdImpl<D, Derived>::extra_repr() const {
  const auto& o = options;
  std::string s = std::to_string(o.in_channels()) + ", " + std::to_string(o.out_channels()) +
                  ", kernel_size=" + o.kernel_size().tuple_str() + ", stride=" + o.stride().tuple_str();
  if (!all_equal(o.padding(), 0)) s += ", padding=" + o.padding().tuple_str();
  if (!all_equal(o.dilation(), 1)) s += ", dilation=" + o.dilation().tuple_str();
  if (!all_equal(o.output_padding(), 0)) s += ", output_padding=" + o.output_padding().tuple_str();
  if (o.groups() != 1) s += ", groups=" + std::to_string(o.groups());
  if (!bias.defined()) s += ", bias=False";
  return s;
}

template class ConvTransposeNdImpl<1, ConvTranspose1dImpl>;
template class ConvTransposeNdImpl<2, ConvTranspose2dImpl>;

ConvTranspose1dImpl::ConvTranspose1dImpl(const ConvTranspose1dOptions& options_) : ConvTransposeNdImpl(options_) {
  reset();
}

ConvTranspose1dImpl::ConvTranspose1dImpl(int64_t in_channels, int64_t out_channels, ExpandingArray<1> kernel_size,
                                         ExpandingArray<1> stride, ExpandingArray<1> padding,
                                         ExpandingArray<1> output_padding, int64_t groups, bool bias,
                                         ExpandingArray<1> dilation)
    : ConvTranspose1dImpl(ConvTranspose1dOptions(in_channels, out_channels, kernel_size)
                              .stride(stride)
                              .padding(padding)
                              .output_padding(output_padding)
                              .groups(groups)
                              .bias(bias)
                              .dilation(dilation)) {}

ConvTranspose2dImpl::ConvTranspose2dImpl(const ConvTranspose2dOptions& options_) : ConvTransposeNdImpl(options_) {
  reset();
}

ConvTranspose2dImpl::ConvTranspose2dImpl(int64_t in_channels, int64_t out_channels, ExpandingArray<2> kernel_size,
                                         ExpandingArray<2> stride, ExpandingArray<2> padding,
                                         ExpandingArray<2> output_padding, int64_t groups, bool bias,
                                         ExpandingArray<2> dilation)
    : ConvTranspose2dImpl(ConvTranspose2dOptions(in_channels, out_channels, kernel_size)
                              .stride(stride)
                              .padding(padding)
                              .output_padding(output_padding)
                              .groups(groups)
                              .bias(bias)
                              .dilation(dilation)) {}

}  // namespace troupe::nn
