// Options of pooling, as libtorch's torch/nn/options/pooling.h: the modules' MaxPool1d/2dOptions,
// AvgPool1d/2dOptions, AdaptiveAvgPool1d/2dOptions and AdaptiveMaxPool1d/2dOptions, which the functionals take
// under the names MaxPool2dFuncOptions, ...
//
//   F::max_pool2d(x, F::MaxPool2dFuncOptions(2));  F::avg_pool2d(x, F::AvgPool2dFuncOptions(3).stride(2));
#pragma once

#include <cstdint>
#include <optional>

#include <troupe/util/expanding_array.h>
#include <troupe/util/options.h>

namespace troupe::nn {

/// Options of MaxPool1d / MaxPool2d; stride defaults to kernel_size (PyTorch's stride=None).
template <size_t D>
struct MaxPoolOptions {
  MaxPoolOptions(ExpandingArray<D> kernel_size) : kernel_size_(kernel_size), stride_(kernel_size) {}
  TROUPE_ARG(ExpandingArray<D>, kernel_size);
  TROUPE_ARG(ExpandingArray<D>, stride);
  TROUPE_ARG(ExpandingArray<D>, padding) = 0;
  TROUPE_ARG(ExpandingArray<D>, dilation) = 1;
  /// Calling the module returns (output, indices).
  TROUPE_ARG(bool, return_indices) = false;
  TROUPE_ARG(bool, ceil_mode) = false;
};
using MaxPool1dOptions = MaxPoolOptions<1>;
using MaxPool2dOptions = MaxPoolOptions<2>;

/// Options of AvgPool1d / AvgPool2d; stride defaults to kernel_size (PyTorch's stride=None).
template <size_t D>
struct AvgPoolOptions {
  AvgPoolOptions(ExpandingArray<D> kernel_size) : kernel_size_(kernel_size), stride_(kernel_size) {}
  TROUPE_ARG(ExpandingArray<D>, kernel_size);
  TROUPE_ARG(ExpandingArray<D>, stride);
  TROUPE_ARG(ExpandingArray<D>, padding) = 0;
  TROUPE_ARG(bool, ceil_mode) = false;
  /// Count the zero padding in the divisor.
  TROUPE_ARG(bool, count_include_pad) = true;
  /// Divide by this instead of the window size (AvgPool2d only in PyTorch).
  TROUPE_ARG(std::optional<int64_t>, divisor_override);
};
using AvgPool1dOptions = AvgPoolOptions<1>;
using AvgPool2dOptions = AvgPoolOptions<2>;

/// Options of AdaptiveAvgPool1d / 2d: the output size (a None dim keeps the input's size).
template <typename output_size_t>
struct AdaptiveAvgPoolOptions {
  AdaptiveAvgPoolOptions(output_size_t output_size) : output_size_(output_size) {}
  TROUPE_ARG(output_size_t, output_size);
};
using AdaptiveAvgPool1dOptions = AdaptiveAvgPoolOptions<ExpandingArray<1>>;
using AdaptiveAvgPool2dOptions = AdaptiveAvgPoolOptions<ExpandingArrayWithOptional<2>>;

/// Options of AdaptiveMaxPool1d / 2d: the output size (a None dim keeps the input's size) and whether
/// calling the module returns (output, indices).
template <typename output_size_t>
struct AdaptiveMaxPoolOptions {
  AdaptiveMaxPoolOptions(output_size_t output_size) : output_size_(output_size) {}
  TROUPE_ARG(output_size_t, output_size);
  TROUPE_ARG(bool, return_indices) = false;
};
using AdaptiveMaxPool1dOptions = AdaptiveMaxPoolOptions<ExpandingArray<1>>;
using AdaptiveMaxPool2dOptions = AdaptiveMaxPoolOptions<ExpandingArrayWithOptional<2>>;

namespace functional {
/// F::max_pool1d/2d and F::max_pool1d/2d_with_indices ignore return_indices.
using MaxPool1dFuncOptions = MaxPool1dOptions;
using MaxPool2dFuncOptions = MaxPool2dOptions;
using AvgPool1dFuncOptions = AvgPool1dOptions;
using AvgPool2dFuncOptions = AvgPool2dOptions;
using AdaptiveAvgPool1dFuncOptions = AdaptiveAvgPool1dOptions;
using AdaptiveAvgPool2dFuncOptions = AdaptiveAvgPool2dOptions;
/// F::adaptive_max_pool*d and F::adaptive_max_pool*d_with_indices ignore return_indices.
using AdaptiveMaxPool1dFuncOptions = AdaptiveMaxPool1dOptions;
using AdaptiveMaxPool2dFuncOptions = AdaptiveMaxPool2dOptions;
}  // namespace functional

}  // namespace troupe::nn
