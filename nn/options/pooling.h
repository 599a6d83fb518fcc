// Options of pooling, as libtorch's torch/nn/options/pooling.h: the modules' MaxPool2dOptions and
// AvgPool2dOptions, which the functionals take under the names MaxPool2dFuncOptions / AvgPool2dFuncOptions.
//
//   F::max_pool2d(x, F::MaxPool2dFuncOptions(2));  F::avg_pool2d(x, F::AvgPool2dFuncOptions(3).stride(2));
#pragma once

#include <cstdint>
#include <optional>

#include <troupe/util/expanding_array.h>
#include <troupe/util/options.h>

namespace troupe::nn {

/// Options of MaxPool2d; stride defaults to kernel_size (PyTorch's stride=None).
struct MaxPool2dOptions {
  MaxPool2dOptions(ExpandingArray<2> kernel_size) : kernel_size_(kernel_size), stride_(kernel_size) {}
  TROUPE_ARG(ExpandingArray<2>, kernel_size);
  TROUPE_ARG(ExpandingArray<2>, stride);
  TROUPE_ARG(ExpandingArray<2>, padding) = 0;
  TROUPE_ARG(ExpandingArray<2>, dilation) = 1;
  /// Calling the module returns (output, indices).
  TROUPE_ARG(bool, return_indices) = false;
  TROUPE_ARG(bool, ceil_mode) = false;
};

/// Options of AvgPool2d; stride defaults to kernel_size (PyTorch's stride=None).
struct AvgPool2dOptions {
  AvgPool2dOptions(ExpandingArray<2> kernel_size) : kernel_size_(kernel_size), stride_(kernel_size) {}
  TROUPE_ARG(ExpandingArray<2>, kernel_size);
  TROUPE_ARG(ExpandingArray<2>, stride);
  TROUPE_ARG(ExpandingArray<2>, padding) = 0;
  TROUPE_ARG(bool, ceil_mode) = false;
  /// Count the zero padding in the divisor.
  TROUPE_ARG(bool, count_include_pad) = true;
  /// Divide by this instead of the window size.
  TROUPE_ARG(std::optional<int64_t>, divisor_override);
};

namespace functional {
/// F::max_pool2d and F::max_pool2d_with_indices ignore return_indices.
using MaxPool2dFuncOptions = MaxPool2dOptions;
using AvgPool2dFuncOptions = AvgPool2dOptions;
}  // namespace functional

}  // namespace troupe::nn
