// nn::functional pooling (torch.nn.functional.max_pool2d / avg_pool2d) over the tensor library's kernels, with
// libtorch's signatures: MaxPool2dFuncOptions / AvgPool2dFuncOptions (nn/options/pooling.h).
#pragma once

#include <tuple>

#include <troupe/nn/options/pooling.h>
#include <troupe/tensor/tensor.h>

namespace troupe::nn::functional {

/// 2-D max pooling of (N, C, H, W) or (C, H, W). Windows that start in the right / bottom padding are
/// dropped in ceil_mode.
Tensor max_pool2d(const Tensor& input, const MaxPool2dFuncOptions& options);
/// max_pool2d(..., return_indices=True): (output, indices into each flattened H*W plane, int64).
std::tuple<Tensor, Tensor> max_pool2d_with_indices(const Tensor& input, const MaxPool2dFuncOptions& options);
/// 2-D average pooling; count_include_pad counts the zero padding in the divisor, divisor_override
/// replaces the divisor.
Tensor avg_pool2d(const Tensor& input, const AvgPool2dFuncOptions& options);

}  // namespace troupe::nn::functional
