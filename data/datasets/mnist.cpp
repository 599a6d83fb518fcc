// datasets::MNIST: the IDX readers (big-endian header: magic, count, then rows and columns for images).
#include <troupe/data/datasets/mnist.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <vector>

#include <troupe/tensor/ops.h>

namespace troupe::data::datasets {
namespace {

constexpr uint32_t kImageMagic = 2051, kTargetMagic = 2049;
constexpr uint32_t kRows = 28, kCols = 28;

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw std::runtime_error("[datasets::MNIST] '" + path + "': " + what);
}

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail(path, "cannot open the file (MNIST expects libtorch's file names under the root folder)");
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

uint32_t big_endian(const std::vector<uint8_t>& bytes, size_t offset, const std::string& path, const char* what) {
  if (bytes.size() < offset + 4)
    fail(path, std::string("truncated: the file ends inside the header (") + what + ")");
  return (uint32_t{bytes[offset]} << 24) | (uint32_t{bytes[offset + 1]} << 16) | (uint32_t{bytes[offset + 2]} << 8) |
         uint32_t{bytes[offset + 3]};
}

void expect(uint32_t got, uint32_t want, const std::string& path, const char* what) {
  if (got != want)
    fail(path, std::string("expected ") + what + " " + std::to_string(want) + ", the file has " + std::to_string(got));
}

std::string join(const std::string& root, const char* name) {
  return root.empty() || root.back() == '/' ? root + name : root + "/" + name;
}

Tensor read_images(const std::string& path) {
  const auto bytes = read_file(path);
  expect(big_endian(bytes, 0, path, "magic"), kImageMagic, path, "the image magic number");
  const uint32_t count = big_endian(bytes, 4, path, "count");
  expect(big_endian(bytes, 8, path, "rows"), kRows, path, "rows");
  expect(big_endian(bytes, 12, path, "columns"), kCols, path, "columns");
  const uint64_t want = 16 + uint64_t{count} * kRows * kCols;
  if (bytes.size() != want)
    fail(path, "holds " + std::to_string(bytes.size()) + " bytes, the header's " + std::to_string(count) +
                   " images of 28x28 need " + std::to_string(want));
  Tensor t = empty({static_cast<int64_t>(count), 1, kRows, kCols}, TensorOptions().dtype(kUInt8));
  if (count) std::memcpy(t.data_ptr(), bytes.data() + 16, bytes.size() - 16);
  return t.to(kFloat32).div_(255);
}

Tensor read_targets(const std::string& path) {
  const auto bytes = read_file(path);
  expect(big_endian(bytes, 0, path, "magic"), kTargetMagic, path, "the label magic number");
  const uint32_t count = big_endian(bytes, 4, path, "count");
  if (bytes.size() != 8 + uint64_t{count})
    fail(path, "holds " + std::to_string(bytes.size()) + " bytes, the header's " + std::to_string(count) +
                   " labels need " + std::to_string(8 + uint64_t{count}));
  Tensor t = empty({static_cast<int64_t>(count)}, TensorOptions().dtype(kUInt8));
  if (count) std::memcpy(t.data_ptr(), bytes.data() + 8, count);
  return t.to(kInt64);
}

}  // namespace

MNIST::MNIST(const std::string& root, Mode mode) : train_(mode == Mode::kTrain) {
  const bool train = train_;
  const std::string images = join(root, train ? "train-images-idx3-ubyte" : "t10k-images-idx3-ubyte");
  const std::string labels = join(root, train ? "train-labels-idx1-ubyte" : "t10k-labels-idx1-ubyte");
  images_ = read_images(images);
  targets_ = read_targets(labels);
  if (images_.size(0) != targets_.size(0))
    fail(labels, std::to_string(targets_.size(0)) + " labels for " + std::to_string(images_.size(0)) + " images in '" +
                     images + "'");
}

Example<> MNIST::get(size_t index) {
  if (index >= static_cast<size_t>(images_.size(0)))
    throw std::out_of_range("[datasets::MNIST::get] index " + std::to_string(index) + " is out of range for " +
                            std::to_string(images_.size(0)) + " images");
  return {images_[static_cast<int64_t>(index)], targets_[static_cast<int64_t>(index)]};
}

std::optional<size_t> MNIST::size() const { return static_cast<size_t>(images_.size(0)); }

bool MNIST::is_train() const noexcept { return train_; }

const Tensor& MNIST::images() const { return images_; }

const Tensor& MNIST::targets() const { return targets_; }

}  // namespace troupe::data::datasets
