// nn::functional pooling (torch.nn.functional.max_pool1d/2d, avg_pool1d/2d, adaptive_avg_pool1d/2d,
// adaptive_max_pool1d/2d) over the tensor library's kernels, with libtorch's signatures: MaxPool2dFuncOptions,
// ... (nn/options/pooling.h).
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

/// 1-D max pooling of (N, C, L) or (C, L) (max_pool2d on a height-1 image).
Tensor max_pool1d(const Tensor& input, const MaxPool1dFuncOptions& options);
/// max_pool1d(..., return_indices=True): (output, indices into L, int64).
std::tuple<Tensor, Tensor> max_pool1d_with_indices(const Tensor& input, const MaxPool1dFuncOptions& options);
/// 1-D average pooling of (N, C, L) or (C, L).
Tensor avg_pool1d(const Tensor& input, const AvgPool1dFuncOptions& options);

/// Average over the windows [floor(i * L / out), ceil((i + 1) * L / out)) of (N, C, L) or (C, L).
Tensor adaptive_avg_pool1d(const Tensor& input, const AdaptiveAvgPool1dFuncOptions& options);
/// The same over H and W of (N, C, H, W) or (C, H, W); a None output size keeps that dim.
Tensor adaptive_avg_pool2d(const Tensor& input, const AdaptiveAvgPool2dFuncOptions& options);
/// Maximum over the adaptive windows of (N, C, L) or (C, L).
Tensor adaptive_max_pool1d(const Tensor& input, const AdaptiveMaxPool1dFuncOptions& options);
/// (output, indices into L, int64); the first maximum of a window wins a tie.
std::tuple<Tensor, Tensor> adaptive_max_pool1d_with_indices(const Tensor& input,
                                                            const AdaptiveMaxPool1dFuncOptions& options);
/// Maximum over the adaptive windows of (N, C, H, W) or (C, H, W).
Tensor adaptive_max_pool2d(const Tensor& input, const AdaptiveMaxPool2dFuncOptions& options);
/// (output, indices into each flattened H*W plane, int64); the first maximum in row-major order wins a tie.
std::tuple<Tensor, Tensor> adaptive_max_pool2d_with_indices(const Tensor& input,
                                                            const AdaptiveMaxPool2dFuncOptions& options);

}  // namespace troupe::nn::functional
