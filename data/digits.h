// The 8x8 handwritten digits shipped in datasets/digits/digits.bin (1,797 images, 10 classes; the UCI
// "Optical Recognition of Handwritten Digits" test set, as scikit-learn's load_digits gives it).
//
//   auto digits = data::Digits::load();         // data::default_digits_path()
//   digits->get(0).data;                        // float32 (1, 8, 8), pixels / 16 in [0, 1]
//   digits->get(0).target;                      // int64 0-dim, the digit
//
// File layout (datasets/digits/README.md), integers little-endian: "TRDIGITS", u32 version, u32 count,
// u32 rows, u32 cols, count*rows*cols uint8 pixels (0..16), count uint8 labels (0..9), u32 CRC-32 (zlib's)
// of every byte before it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <troupe/data/dataset.h>

namespace troupe::data {

/// The 8 bytes a digits file starts with.
inline constexpr char kDigitsMagic[9] = "TRDIGITS";
/// The format version Digits::load reads.
inline constexpr uint32_t kDigitsVersion = 1;

/// Where the digits file is: $TROUPE_DATA_DIR/digits/digits.bin when TROUPE_DATA_DIR is set and non-empty,
/// else the source tree's datasets/digits/digits.bin (compiled in) when that file exists, else
/// "datasets/digits/digits.bin" relative to the working directory. (An installed tree keeps it in
/// <prefix>/share/troupe/datasets/digits: set TROUPE_DATA_DIR=<prefix>/share/troupe/datasets.)
std::string default_digits_path();

/// The digits as a dataset: data float32 (N, 1, rows, cols) holding pixel / 16, targets int64 (N,).
class Digits : public TensorDataset {
 public:
  /// Reads and validates a digits file (size, magic, version, checksum, value ranges). Throws
  /// std::runtime_error "[Digits::load] '<path>': <what was wrong>" for a missing, foreign, truncated or
  /// corrupt file.
  static std::shared_ptr<Digits> load(const std::string& path = default_digits_path());

  /// The file the images were read from.
  const std::string& path() const { return path_; }
  /// The CRC-32 stored in (and verified against) the file.
  uint32_t checksum() const { return checksum_; }

 private:
  Digits(Tensor data, Tensor targets, std::string path, uint32_t checksum);
  std::string path_;
  uint32_t checksum_ = 0;
};

/// The CRC-32 of `n` bytes (IEEE 802.3 polynomial, reflected; Python's zlib.crc32), continuing from `crc`.
uint32_t crc32(const uint8_t* bytes, size_t n, uint32_t crc = 0);

}  // namespace troupe::data
