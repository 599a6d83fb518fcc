// The pooling modules over their nn::functional forms (F::max_pool2d, F::adaptive_avg_pool2d, ...).
#include <troupe/nn/modules/pooling.h>

#include <stdexcept>

#include <troupe/nn/functional/pooling.h>
#include <troupe/util/python_format.h>

namespace troupe::nn {

namespace F = functional;

MaxPool2dImpl::MaxPool2dImpl(const MaxPool2dOptions& options_) : options(options_) {}

MaxPool2dImpl::MaxPool2dImpl(ExpandingArray<2> kernel_size, std::optional<ExpandingArray<2>> stride, ExpandingArray<2> padding,
                     ExpandingArray<2> dilation, bool return_indices, bool ceil_mode)
    : options(MaxPool2dOptions(kernel_size)
                  .stride(stride ? *stride : kernel_size)
                  .padding(padding)
                  .dilation(dilation)
                  .return_indices(return_indices)
                  .ceil_mode(ceil_mode)) {}

Tensor MaxPool2dImpl::forward(const Tensor& input) { return F::max_pool2d(input, options); }

std::tuple<Tensor, Tensor> MaxPool2dImpl::forward_with_indices(const Tensor& input) {
  return F::max_pool2d_with_indices(input, options);
}

namespace {

// forward_args of a max pool with return_indices: one tensor in, the (output, indices) tuple out.
template <class M>
Value pool_with_indices(M& m, const Args& args, const Kwargs& kwargs) {
  if (args.size() != 1 || !args[0].is_tensor() || !kwargs.empty())
    throw std::invalid_argument("[" + m.name() + "] forward takes one tensor argument, got " +
                                std::to_string(args.size()) + " positional argument(s)" +
                                (args.size() == 1 ? " of kind " + args[0].kind() : "") + " and " +
                                std::to_string(kwargs.size()) + " keyword argument(s)");
  auto [out, idx] = m.forward_with_indices(args[0].tensor());
  return Value(Value::TensorTuple{out, idx});
}

}  // namespace

Value MaxPool2dImpl::forward_args(const Args& args, const Kwargs& kwargs) {
  if (!options.return_indices()) return Module::forward_args(args, kwargs);
  return pool_with_indices(*this, args, kwargs);
}

std::string MaxPool2dImpl::extra_repr() const {
  const auto& o = options;
  return "kernel_size=" + o.kernel_size().str() + ", stride=" + o.stride().str() + ", padding=" + o.padding().str() +
         ", dilation=" + o.dilation().str() + ", ceil_mode=" + util::py_bool(o.ceil_mode());
}

AvgPool2dImpl::AvgPool2dImpl(const AvgPool2dOptions& options_) : options(options_) {}

AvgPool2dImpl::AvgPool2dImpl(ExpandingArray<2> kernel_size, std::optional<ExpandingArray<2>> stride, ExpandingArray<2> padding,
                     bool ceil_mode, bool count_include_pad, std::optional<int64_t> divisor_override)
    : options(AvgPool2dOptions(kernel_size)
                  .stride(stride ? *stride : kernel_size)
                  .padding(padding)
                  .ceil_mode(ceil_mode)
                  .count_include_pad(count_include_pad)
                  .divisor_override(divisor_override)) {}

Tensor AvgPool2dImpl::forward(const Tensor& input) { return F::avg_pool2d(input, options); }

std::string AvgPool2dImpl::extra_repr() const {
  const auto& o = options;
  return "kernel_size=" + o.kernel_size().str() + ", stride=" + o.stride().str() + ", padding=" + o.padding().str();
}

// ---------------------------------------------------------------- 1-D pooling

MaxPool1dImpl::MaxPool1dImpl(ExpandingArray<1> kernel_size, std::optional<ExpandingArray<1>> stride,
                             ExpandingArray<1> padding, ExpandingArray<1> dilation, bool return_indices, bool ceil_mode)
    : options(MaxPool1dOptions(kernel_size)
                  .stride(stride ? *stride : kernel_size)
                  .padding(padding)
                  .dilation(dilation)
                  .return_indices(return_indices)
                  .ceil_mode(ceil_mode)) {}

Tensor MaxPool1dImpl::forward(const Tensor& input) { return F::max_pool1d(input, options); }

std::tuple<Tensor, Tensor> MaxPool1dImpl::forward_with_indices(const Tensor& input) {
  return F::max_pool1d_with_indices(input, options);
}

Value MaxPool1dImpl::forward_args(const Args& args, const Kwargs& kwargs) {
  if (!options.return_indices()) return Module::forward_args(args, kwargs);
  return pool_with_indices(*this, args, kwargs);
}

std::string MaxPool1dImpl::extra_repr() const {
  const auto& o = options;
  return "kernel_size=" + o.kernel_size().str() + ", stride=" + o.stride().str() + ", padding=" + o.padding().str() +
         ", dilation=" + o.dilation().str() + ", ceil_mode=" + util::py_bool(o.ceil_mode());
}

AvgPool1dImpl::AvgPool1dImpl(ExpandingArray<1> kernel_size, std::optional<ExpandingArray<1>> stride,
                             ExpandingArray<1> padding, bool ceil_mode, bool count_include_pad)
    : options(AvgPool1dOptions(kernel_size)
                  .stride(stride ? *stride : kernel_size)
                  .padding(padding)
                  .ceil_mode(ceil_mode)
                  .count_include_pad(count_include_pad)) {}

Tensor AvgPool1dImpl::forward(const Tensor& input) { return F::avg_pool1d(input, options); }

std::string AvgPool1dImpl::extra_repr() const {
  // PyTorch's AvgPool1d keeps _single(...) of its arguments: always tuples
  const auto& o = options;
  return "kernel_size=" + o.kernel_size().tuple_str() + ", stride=" + o.stride().tuple_str() +
         ", padding=" + o.padding().tuple_str();
}

// ---------------------------------------------------------------- adaptive pooling

Tensor AdaptiveAvgPool1dImpl::forward(const Tensor& input) { return F::adaptive_avg_pool1d(input, options); }

std::string AdaptiveAvgPool1dImpl::extra_repr() const { return "output_size=" + options.output_size().str(); }

Tensor AdaptiveAvgPool2dImpl::forward(const Tensor& input) { return F::adaptive_avg_pool2d(input, options); }

std::string AdaptiveAvgPool2dImpl::extra_repr() const { return "output_size=" + options.output_size().str(); }

Tensor AdaptiveMaxPool1dImpl::forward(const Tensor& input) { return F::adaptive_max_pool1d(input, options); }

std::tuple<Tensor, Tensor> AdaptiveMaxPool1dImpl::forward_with_indices(const Tensor& input) {
  return F::adaptive_max_pool1d_with_indices(input, options);
}

Value AdaptiveMaxPool1dImpl::forward_args(const Args& args, const Kwargs& kwargs) {
  if (!options.return_indices()) return Module::forward_args(args, kwargs);
  return pool_with_indices(*this, args, kwargs);
}

std::string AdaptiveMaxPool1dImpl::extra_repr() const { return "output_size=" + options.output_size().str(); }

Tensor AdaptiveMaxPool2dImpl::forward(const Tensor& input) { return F::adaptive_max_pool2d(input, options); }

std::tuple<Tensor, Tensor> AdaptiveMaxPool2dImpl::forward_with_indices(const Tensor& input) {
  return F::adaptive_max_pool2d_with_indices(input, options);
}

Value AdaptiveMaxPool2dImpl::forward_args(const Args& args, const Kwargs& kwargs) {
  if (!options.return_indices()) return Module::forward_args(args, kwargs);
  return pool_with_indices(*this, args, kwargs);
}

std::string AdaptiveMaxPool2dImpl::extra_repr() const { return "output_size=" + options.output_size().str(); }

}  // namespace troupe::nn
