// nn::functional pooling: the tensor library's pooling ops under torch.nn.functional's names.
#include <troupe/nn/functional/pooling.h>

#include <troupe/tensor/ops.h>

namespace troupe::nn::functional {

Tensor max_pool2d(const Tensor& input, const MaxPool2dFuncOptions& o) {
  return troupe::max_pool2d(input, o.kernel_size(), o.stride(), o.padding(), o.dilation(), o.ceil_mode());
}

std::tuple<Tensor, Tensor> max_pool2d_with_indices(const Tensor& input, const MaxPool2dFuncOptions& o) {
  return troupe::max_pool2d_with_indices(input, o.kernel_size(), o.stride(), o.padding(), o.dilation(), o.ceil_mode());
}

Tensor avg_pool2d(const Tensor& input, const AvgPool2dFuncOptions& o) {
  return troupe::avg_pool2d(input, o.kernel_size(), o.stride(), o.padding(), o.ceil_mode(), o.count_include_pad(),
                            o.divisor_override());
}

}  // namespace troupe::nn::functional
