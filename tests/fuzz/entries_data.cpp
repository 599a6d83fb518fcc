// Fuzz entry points over the files a user names: troupe checkpoints, safetensors, the digits file, MNIST.
#include "fuzz_common.h"

#include <cstring>
#include <sstream>

#include <troupe/data/datasets/mnist.h>
#include <troupe/data/digits.h>
#include <troupe/nn/safetensors.h>
#include <troupe/nn/serialize.h>
#include <troupe/tensor/ops.h>

namespace troupe::fuzz {
namespace {

nn::StateDict sample_state() {
  nn::StateDict sd;
  sd.insert("fc.weight", arange(6, TensorOptions().dtype(kFloat32)).reshape({2, 3}));
  sd.insert("fc.bias", full({2}, 0.5));
  sd.insert("steps", arange(3, TensorOptions().dtype(kInt64)));
  sd.insert("mask", ones({2}, TensorOptions().dtype(kBool)));
  return sd;
}


// ---- troupe checkpoints (nn/serialize.h)
bool run_checkpoint(const uint8_t* data, size_t size) {
  return guarded([&] {
    std::istringstream in(bytes_of(data, size));
    (void)nn::load_state_dict_file(in);
  });
}
Seeds seeds_checkpoint() {
  std::ostringstream out;
  nn::save(sample_state(), out);
  const std::string ok = out.str();
  std::string wrong_magic = ok;
  wrong_magic[0] = 'X';
  return {{"ok-four-tensors", ok},
          {"bad-truncated", ok.substr(0, ok.size() - 5)},
          {"bad-magic", wrong_magic},
          {"bad-empty", ""}};
}

// ---- safetensors (nn/safetensors.h)
bool run_safetensors(const uint8_t* data, size_t size) {
  return guarded([&] { (void)nn::deserialize_safetensors(std::string_view(reinterpret_cast<const char*>(data), size)); });
}
Seeds seeds_safetensors() {
  const std::string ok = nn::serialize_safetensors(sample_state(), {{"format", "pt"}});
  std::string long_header = ok;
  long_header[7] = '\x7f';  // header length 2^63-ish
  return {{"ok-four-tensors", ok}, {"bad-header-length", long_header}, {"bad-truncated", ok.substr(0, ok.size() / 2)}};
}

// ---- the digits file (data/digits.h). Byte 0 picks the mode: odd = the fuzzer's bytes with their CRC-32
// recomputed into the last 4 bytes (so that mutations reach the checks behind the checksum), even = as is.
bool run_digits(const uint8_t* data, size_t size) {
  if (size == 0) return false;
  std::string file = bytes_of(data + 1, size - 1);
  if ((data[0] & 1) && file.size() >= 4) {
    const uint32_t crc = data::crc32(reinterpret_cast<const uint8_t*>(file.data()), file.size() - 4);
    file.resize(file.size() - 4);
    put_u32le(file, crc);
  }
  const std::string path = write_file("digits.bin", file);
  return guarded([&] { (void)data::Digits::load(path); });
}
std::string digits_file(uint32_t count, uint32_t rows, uint32_t cols, uint8_t pixel, uint8_t label) {
  std::string f(data::kDigitsMagic, 8);
  put_u32le(f, data::kDigitsVersion);
  put_u32le(f, count);
  put_u32le(f, rows);
  put_u32le(f, cols);
  f.append(static_cast<size_t>(count) * rows * cols, static_cast<char>(pixel));
  f.append(count, static_cast<char>(label));
  put_u32le(f, data::crc32(reinterpret_cast<const uint8_t*>(f.data()), f.size()));
  return f;
}
Seeds seeds_digits() {
  return {{"ok-two-images", std::string(1, '\0') + digits_file(2, 2, 3, 16, 9)},
          {"ok-fixed-crc", std::string(1, '\1') + digits_file(1, 8, 8, 3, 0)},
          {"bad-pixel-17", std::string(1, '\1') + digits_file(1, 2, 2, 17, 1)},
          {"bad-label-10", std::string(1, '\1') + digits_file(1, 2, 2, 1, 10)},
          {"bad-crc", std::string(1, '\0') + digits_file(1, 2, 2, 1, 1).substr(0, 29) + "abcd"}};
}

// ---- MNIST's IDX files (data/datasets/mnist.h): u32 little-endian n, then n bytes of the images file,
// then the labels file.
bool run_mnist(const uint8_t* data, size_t size) {
  if (size < 4) return false;
  uint32_t n = 0;
  std::memcpy(&n, data, 4);
  const std::string rest = bytes_of(data + 4, size - 4);
  const size_t split = std::min<size_t>(n, rest.size());
  write_file("train-images-idx3-ubyte", std::string_view(rest).substr(0, split));
  write_file("train-labels-idx1-ubyte", std::string_view(rest).substr(split));
  return guarded([&] { (void)data::datasets::MNIST(scratch().string(), data::datasets::MNIST::Mode::kTrain); });
}
std::string mnist_input(uint32_t images, uint32_t labels) {
  std::string img;
  put_u32be(img, 2051);
  put_u32be(img, images);
  put_u32be(img, 28);
  put_u32be(img, 28);
  img.append(static_cast<size_t>(images) * 28 * 28, '\x80');
  std::string lab;
  put_u32be(lab, 2049);
  put_u32be(lab, labels);
  lab.append(labels, '\x07');
  std::string in;
  put_u32le(in, static_cast<uint32_t>(img.size()));
  return in + img + lab;
}
Seeds seeds_mnist() {
  std::string bad_magic = mnist_input(1, 1);
  bad_magic[7] = '\x04';  // image magic 2052
  return {{"ok-one-image", mnist_input(1, 1)}, {"bad-count-mismatch", mnist_input(1, 2)}, {"bad-magic", bad_magic}};
}

}  // namespace

std::vector<Entry> data_entries() {
  return {
      {"checkpoint", "troupe checkpoints (nn::load_state_dict_file)", run_checkpoint, seeds_checkpoint},
      {"safetensors", "safetensors files (nn::deserialize_safetensors)", run_safetensors, seeds_safetensors},
      {"digits", "the digits file (data::Digits::load)", run_digits, seeds_digits},
      {"mnist", "MNIST's IDX files (data::datasets::MNIST)", run_mnist, seeds_mnist},
  };
}

}  // namespace troupe::fuzz
