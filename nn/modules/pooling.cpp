// MaxPool2d and AvgPool2d over F::max_pool2d / F::avg_pool2d.
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

Value MaxPool2dImpl::forward_args(const Args& args, const Kwargs& kwargs) {
  if (!options.return_indices()) return Module::forward_args(args, kwargs);
  if (args.size() != 1 || !args[0].is_tensor() || !kwargs.empty())
    throw std::invalid_argument("[MaxPool2d] forward takes one tensor argument, got " + std::to_string(args.size()) +
                                " positional argument(s)" + (args.size() == 1 ? " of kind " + args[0].kind() : "") +
                                " and " + std::to_string(kwargs.size()) + " keyword argument(s)");
  auto [out, idx] = forward_with_indices(args[0].tensor());
  return Value(Value::TensorTuple{out, idx});
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

}  // namespace troupe::nn
