// Options of the linear layers (Linear, Flatten, Unflatten), as libtorch's torch/nn/options/linear.h.
// F::linear takes (input, weight, bias) and no options, as in libtorch.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include <troupe/tensor/tensor.h>
#include <troupe/util/options.h>

namespace troupe::nn {

/// Options of Linear (in_features, out_features, bias, device, dtype).
struct LinearOptions {
  LinearOptions(int64_t in_features, int64_t out_features) : in_features_(in_features), out_features_(out_features) {}
  TROUPE_ARG(int64_t, in_features);
  TROUPE_ARG(int64_t, out_features);
  TROUPE_ARG(bool, bias) = true;
  TROUPE_ARG(Device, device) = Device(kCPU);
  /// nullopt: the default float dtype.
  TROUPE_ARG(std::optional<ScalarType>, dtype);
};

/// Options of Flatten (start_dim = 1, end_dim = -1).
struct FlattenOptions {
  TROUPE_ARG(int64_t, start_dim) = 1;
  TROUPE_ARG(int64_t, end_dim) = -1;
};

/// Options of Unflatten (dim, unflattened_size).
struct UnflattenOptions {
  UnflattenOptions(int64_t dim, std::vector<int64_t> unflattened_size)
      : dim_(dim), unflattened_size_(std::move(unflattened_size)) {}
  TROUPE_ARG(int64_t, dim);
  TROUPE_ARG(std::vector<int64_t>, unflattened_size);
};

}  // namespace troupe::nn
