// nn::functional pooling: the tensor library's pooling ops under torch.nn.functional's names.
#include <troupe/nn/functional/pooling.h>

#include <troupe/tensor/ops.h>

namespace troupe::nn::functional {

Tensor max_pool2d(const Tensor& input, IntArrayRef kernel_size, IntArrayRef stride, IntArrayRef padding,
                  IntArrayRef dilation, bool ceil_mode) {
  return troupe::max_pool2d(input, kernel_size, stride, padding, dilation, ceil_mode);
}

std::tuple<Tensor, Tensor> max_pool2d_with_indices(const Tensor& input, IntArrayRef kernel_size, IntArrayRef stride,
                                                   IntArrayRef padding, IntArrayRef dilation, bool ceil_mode) {
  return troupe::max_pool2d_with_indices(input, kernel_size, stride, padding, dilation, ceil_mode);
}

Tensor avg_pool2d(const Tensor& input, IntArrayRef kernel_size, IntArrayRef stride, IntArrayRef padding,
                  bool ceil_mode, bool count_include_pad, std::optional<int64_t> divisor_override) {
  return troupe::avg_pool2d(input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override);
}

}  // namespace troupe::nn::functional
