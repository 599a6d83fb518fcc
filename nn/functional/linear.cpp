// nn::functional::linear: the tensor library's fused x @ w^T + b.
#include <troupe/nn/functional/linear.h>

#include <troupe/tensor/ops.h>

namespace troupe::nn::functional {

// (*, in) @ (out, in)^T + (out) -> (*, out)
Tensor linear(const Tensor& input, const Tensor& weight, const Tensor& bias) {
  return troupe::linear(input, weight, bias);
}

}  // namespace troupe::nn::functional
