// nn::functional convolution and padding (torch.nn.functional.conv1d / conv2d / conv_transpose1d /
// conv_transpose2d / pad) with libtorch's signatures: Conv1d/2dFuncOptions, ConvTranspose1d/2dFuncOptions and
// PadFuncOptions (nn/options/conv.h); the convs' padding is ints or "valid" / "same".
#pragma once

#include <troupe/nn/options/conv.h>
#include <troupe/tensor/tensor.h>

namespace troupe::nn::functional {

/// 2-D convolution of input (N, C_in, H, W) or (C_in, H, W) with weight (C_out, C_in/groups, kH, kW)
/// and options.bias() (C_out) or undefined. padding "same" (stride 1 only) pads so that the output has
/// the input's size (the extra pixel of an odd total padding goes right / bottom); "valid" is 0.
Tensor conv2d(const Tensor& input, const Tensor& weight, const Conv2dFuncOptions& options = {});

/// 1-D convolution of input (N, C_in, L) or (C_in, L) with weight (C_out, C_in/groups, kL); padding as
/// conv2d's.
Tensor conv1d(const Tensor& input, const Tensor& weight, const Conv1dFuncOptions& options = {});

/// 2-D transposed convolution ("deconvolution", the gradient of conv2d with respect to its input) of input
/// (N, C_in, H, W) or (C_in, H, W) with weight (C_in, C_out/groups, kH, kW): output size
/// (H - 1) * stride - 2 * padding + dilation * (kH - 1) + output_padding + 1 per spatial dim.
Tensor conv_transpose2d(const Tensor& input, const Tensor& weight, const ConvTranspose2dFuncOptions& options = {});
/// 1-D transposed convolution of input (N, C_in, L) or (C_in, L) with weight (C_in, C_out/groups, kL).
Tensor conv_transpose1d(const Tensor& input, const Tensor& weight, const ConvTranspose1dFuncOptions& options = {});

/// torch.nn.functional.pad: pads the last len(pad)/2 dims by (left, right) pairs given from the last
/// dim backwards. mode "constant" (fill `value`; negative pads crop) for any dims; "reflect",
/// "replicate" and "circular" (non-negative pads) for 1-D, 2-D or 3-D padding of a batched or
/// unbatched input, with PyTorch's errors.
Tensor pad(const Tensor& input, const PadFuncOptions& options);

}  // namespace troupe::nn::functional
