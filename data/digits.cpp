// Reading datasets/digits/digits.bin (layout in digits.h) with every length checked before it sizes
// anything, and the CRC-32 that guards it.
#include <troupe/data/digits.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <system_error>
#include <vector>

#include <troupe/tensor/ops.h>

namespace troupe::data {
namespace {

constexpr size_t kMagicSize = 8;
constexpr size_t kHeaderSize = kMagicSize + 4 * 4;  // magic, version, count, rows, cols
constexpr size_t kChecksumSize = 4;
constexpr uint64_t kMaxPixelsPerImage = 1 << 16;
constexpr uint8_t kMaxPixel = 16;
constexpr uint8_t kNumClasses = 10;

std::array<uint32_t, 256> make_crc_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    t[i] = c;
  }
  return t;
}

uint32_t read_u32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 | static_cast<uint32_t>(p[2]) << 16 |
         static_cast<uint32_t>(p[3]) << 24;
}

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

std::string hex_bytes(const uint8_t* p, size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    if (i) s += ' ';
    s += digits[p[i] >> 4];
    s += digits[p[i] & 15];
  }
  return s;
}

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw std::runtime_error("[Digits::load] '" + path + "': " + what);
}

}  // namespace

uint32_t crc32(const uint8_t* bytes, size_t n, uint32_t crc) {
  static const std::array<uint32_t, 256> table = make_crc_table();
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) crc = table[(crc ^ bytes[i]) & 0xFFu] ^ (crc >> 8);
  return ~crc;
}

std::string default_digits_path() {
  if (const char* dir = std::getenv("TROUPE_DATA_DIR"); dir && *dir) return std::string(dir) + "/digits/digits.bin";
#ifdef TROUPE_SOURCE_DIR
  const std::string in_tree = std::string(TROUPE_SOURCE_DIR) + "/datasets/digits/digits.bin";
  std::error_code ec;
  if (std::filesystem::is_regular_file(in_tree, ec)) return in_tree;
#endif
  return "datasets/digits/digits.bin";
}

Digits::Digits(Tensor data, Tensor targets, std::string path, uint32_t checksum)
    : TensorDataset(std::move(data), std::move(targets)), path_(std::move(path)), checksum_(checksum) {}

std::shared_ptr<Digits> Digits::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int e = errno;
    fail(path, "cannot open the file: " + std::error_code(e, std::generic_category()).message() +
                   " (the digits ship in datasets/digits/digits.bin; TROUPE_DATA_DIR names the datasets folder)");
  }
  std::error_code ec;
  const auto fsize = std::filesystem::file_size(path, ec);
  if (ec) fail(path, "cannot read its size: " + ec.message());
  const uint64_t size = fsize;

  // ---- header: magic, then version, count, rows, cols
  uint8_t header[kHeaderSize] = {};
  in.read(reinterpret_cast<char*>(header), static_cast<std::streamsize>(std::min<uint64_t>(size, kHeaderSize)));
  const auto got = static_cast<size_t>(in.gcount());
  if (size == 0) fail(path, "empty file: not a digits file");
  const size_t magic_got = std::min(got, kMagicSize);
  if (std::memcmp(header, kDigitsMagic, magic_got) != 0)
    fail(path, "not a digits file: it starts with bytes [" + hex_bytes(header, magic_got) + "], expected the magic '" +
                   std::string(kDigitsMagic) + "'");
  if (got < kHeaderSize)
    fail(path, "truncated: the file ends inside the " + std::string(got < kMagicSize ? "magic" : "header") + " (" +
                   std::to_string(got) + " of " + std::to_string(kHeaderSize) + " header bytes)");
  const uint32_t version = read_u32(header + 8), count = read_u32(header + 12), rows = read_u32(header + 16),
                 cols = read_u32(header + 20);
  if (version != kDigitsVersion)
    fail(path, "format version " + std::to_string(version) + " is not supported (this build reads version " +
                   std::to_string(kDigitsVersion) + ")");
  const uint64_t per_image = static_cast<uint64_t>(rows) * cols;
  if (rows == 0 || cols == 0 || per_image > kMaxPixelsPerImage)
    fail(path, "bad image size " + std::to_string(rows) + "x" + std::to_string(cols) + " (at most " +
                   std::to_string(kMaxPixelsPerImage) + " pixels per image)");

  // ---- the size the header implies, checked before anything is allocated
  const uint64_t expected = kHeaderSize + static_cast<uint64_t>(count) * (per_image + 1) + kChecksumSize;
  const std::string layout = std::to_string(count) + " images of " + std::to_string(rows) + "x" + std::to_string(cols);
  if (size < expected)
    fail(path, "truncated: " + std::to_string(size) + " bytes, but the header announces " + layout + " (" +
                   std::to_string(expected) + " bytes)");
  if (size > expected)
    fail(path, std::to_string(size) + " bytes, but the header announces " + layout + " (" + std::to_string(expected) +
                   " bytes): " + std::to_string(size - expected) + " unexpected bytes after the checksum");

  std::vector<uint8_t> bytes(static_cast<size_t>(expected));
  std::memcpy(bytes.data(), header, kHeaderSize);
  in.read(reinterpret_cast<char*>(bytes.data() + kHeaderSize), static_cast<std::streamsize>(expected - kHeaderSize));
  if (static_cast<uint64_t>(in.gcount()) != expected - kHeaderSize)
    fail(path, "read error: got " + std::to_string(kHeaderSize + static_cast<uint64_t>(in.gcount())) + " of " +
                   std::to_string(expected) + " bytes (did the file change while it was read?)");

  const size_t body = static_cast<size_t>(expected - kChecksumSize);
  const uint32_t stored = read_u32(bytes.data() + body), computed = crc32(bytes.data(), body);
  if (stored != computed)
    fail(path, "checksum mismatch: the file stores CRC-32 " + hex32(stored) + ", its contents give " + hex32(computed) +
                   " (the file is corrupt)");

  // ---- values: pixels 0..16, labels 0..9
  const uint8_t* pixels = bytes.data() + kHeaderSize;
  const uint8_t* labels = pixels + count * per_image;
  Tensor data = empty({static_cast<int64_t>(count), 1, static_cast<int64_t>(rows), static_cast<int64_t>(cols)},
                      TensorOptions().dtype(kFloat32));
  Tensor targets = empty({static_cast<int64_t>(count)}, TensorOptions().dtype(kInt64));
  float* d = data.data_ptr<float>();
  int64_t* t = targets.data_ptr<int64_t>();
  for (uint64_t i = 0; i < count * per_image; ++i) {
    if (pixels[i] > kMaxPixel)
      fail(path, "image " + std::to_string(i / per_image) + " has pixel value " + std::to_string(pixels[i]) +
                     " at position " + std::to_string(i % per_image) + " (pixels are 0..16)");
    d[i] = static_cast<float>(pixels[i]) / 16.0f;  // exact: k / 16 is a float32
  }
  for (uint32_t i = 0; i < count; ++i) {
    if (labels[i] >= kNumClasses)
      fail(path, "image " + std::to_string(i) + " has label " + std::to_string(labels[i]) + " (labels are 0..9)");
    t[i] = labels[i];
  }
  return std::shared_ptr<Digits>(new Digits(std::move(data), std::move(targets), path, stored));
}

}  // namespace troupe::data
