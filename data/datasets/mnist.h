// datasets::MNIST (libtorch's): the MNIST files in IDX format under a root folder, libtorch's file names
// (train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte).
// troupe ships no MNIST files. Unlike libtorch, the image count is taken from the file header (libtorch
// requires exactly 60000 / 10000), so small files in the same format load too.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include <troupe/data/datasets/base.h>
#include <troupe/data/example.h>
#include <troupe/tensor/tensor.h>

namespace troupe::data::datasets {

/// The MNIST digits: images float32 (N, 1, 28, 28) in [0, 1], targets int64 (N,).
class MNIST : public Dataset<MNIST> {
 public:
  /// Which pair of files: train-* or t10k-*.
  enum class Mode { kTrain, kTest };

  /// Reads both files; errors name the file and the problem (missing, bad magic, sizes, truncation).
  explicit MNIST(const std::string& root, Mode mode = Mode::kTrain);

  /// {images[index], targets[index]}.
  Example<> get(size_t index) override;
  /// The number of images.
  std::optional<size_t> size() const override;
  /// Whether the training files were read (libtorch: whether there are 60000 images; the same for the real files).
  bool is_train() const noexcept;
  /// All images, (N, 1, 28, 28) float32.
  const Tensor& images() const;
  /// All labels, (N,) int64.
  const Tensor& targets() const;

 private:
  Tensor images_, targets_;
  bool train_ = true;
};

}  // namespace troupe::data::datasets
