// The two digits classifiers of examples/train_digits and examples/swa (and of bench/digits_bench,
// which trains them beside libtorch): input (N, 1, 8, 8), output (N, 10) logits.
#pragma once

#include <memory>

#include <troupe/troupe.h>

namespace digits {

/// Flatten, Linear(64, 512), ReLU, Linear(512, 10).
inline std::shared_ptr<troupe::nn::SequentialImpl> make_mlp() {
  namespace nn = troupe::nn;
  // Built one by one: the initialisation draws from the generator in this order, as PyTorch's would.
  auto flatten = std::make_shared<nn::FlattenImpl>();
  auto fc1 = std::make_shared<nn::LinearImpl>(64, 512);
  auto relu = std::make_shared<nn::ReLUImpl>();
  auto fc2 = std::make_shared<nn::LinearImpl>(512, 10);
  return std::make_shared<nn::SequentialImpl>(flatten, fc1, relu, fc2);
}

/// Conv2d(1, 16, 3, padding 1), BatchNorm2d, ReLU, MaxPool2d(2), Conv2d(16, 32, 3, padding 1),
/// BatchNorm2d, ReLU, MaxPool2d(2), Flatten, Linear(128, 10).
inline std::shared_ptr<troupe::nn::SequentialImpl> make_conv_net() {
  namespace nn = troupe::nn;
  auto c1 = std::make_shared<nn::Conv2dImpl>(1, 16, 3, 1, 1);
  auto bn1 = std::make_shared<nn::BatchNorm2dImpl>(16);
  auto r1 = std::make_shared<nn::ReLUImpl>();
  auto p1 = std::make_shared<nn::MaxPool2dImpl>(2);
  auto c2 = std::make_shared<nn::Conv2dImpl>(16, 32, 3, 1, 1);
  auto bn2 = std::make_shared<nn::BatchNorm2dImpl>(32);
  auto r2 = std::make_shared<nn::ReLUImpl>();
  auto p2 = std::make_shared<nn::MaxPool2dImpl>(2);
  auto flat = std::make_shared<nn::FlattenImpl>();
  auto fc = std::make_shared<nn::LinearImpl>(32 * 2 * 2, 10);
  return std::make_shared<nn::SequentialImpl>(c1, bn1, r1, p1, c2, bn2, r2, p2, flat, fc);
}

}  // namespace digits
