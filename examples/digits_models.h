// The two digits classifiers of examples/train_digits and examples/swa (and of bench/digits_bench,
// which trains them beside libtorch): input (N, 1, 8, 8), output (N, 10) logits.
#pragma once

#include <memory>

#include <troupe/troupe.h>

namespace digits {

/// Flatten, Linear(64, 512), ReLU, Linear(512, 10).
inline troupe::nn::Sequential make_mlp() {
  namespace nn = troupe::nn;
  // A braced list is evaluated left to right, so the layers draw their initial weights from the
  // generator in this order, as PyTorch's would.
  return nn::Sequential{nn::Flatten(), nn::Linear(64, 512), nn::ReLU(), nn::Linear(512, 10)};
}

/// Conv2d(1, 16, 3, padding 1), BatchNorm2d, ReLU, MaxPool2d(2), Conv2d(16, 32, 3, padding 1),
/// BatchNorm2d, ReLU, MaxPool2d(2), Flatten, Linear(128, 10).
inline troupe::nn::Sequential make_conv_net() {
  namespace nn = troupe::nn;
  return nn::Sequential{nn::Conv2d(nn::Conv2dOptions(1, 16, 3).padding(1)),
                        nn::BatchNorm2d(16),
                        nn::ReLU(),
                        nn::MaxPool2d(2),
                        nn::Conv2d(nn::Conv2dOptions(16, 32, 3).padding(1)),
                        nn::BatchNorm2d(32),
                        nn::ReLU(),
                        nn::MaxPool2d(2),
                        nn::Flatten(),
                        nn::Linear(32 * 2 * 2, 10)};
}

}  // namespace digits
