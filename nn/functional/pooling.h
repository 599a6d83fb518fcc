// nn::functional pooling (torch.nn.functional.max_pool2d / avg_pool2d) over the tensor library's kernels.
#pragma once

#include <cstdint>
#include <optional>
#include <tuple>

#include <troupe/tensor/tensor.h>

namespace troupe::nn::functional {

/// 2-D max pooling of (N, C, H, W) or (C, H, W); stride {} (None) means kernel_size. Windows that start
/// in the right / bottom padding are dropped in ceil_mode.
Tensor max_pool2d(const Tensor& input, IntArrayRef kernel_size, IntArrayRef stride = {}, IntArrayRef padding = 0,
                  IntArrayRef dilation = 1, bool ceil_mode = false);
/// max_pool2d(..., return_indices=True): (output, indices into each flattened H*W plane, int64).
std::tuple<Tensor, Tensor> max_pool2d_with_indices(const Tensor& input, IntArrayRef kernel_size,
                                                   IntArrayRef stride = {}, IntArrayRef padding = 0,
                                                   IntArrayRef dilation = 1, bool ceil_mode = false);
/// 2-D average pooling; count_include_pad counts the zero padding in the divisor, divisor_override
/// replaces the divisor.
Tensor avg_pool2d(const Tensor& input, IntArrayRef kernel_size, IntArrayRef stride = {}, IntArrayRef padding = 0,
                  bool ceil_mode = false, bool count_include_pad = true,
                  std::optional<int64_t> divisor_override = std::nullopt);

}  // namespace troupe::nn::functional
