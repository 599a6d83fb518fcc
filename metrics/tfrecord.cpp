// TFRecord framing with masked CRC-32C, and the hand-written protobuf encoding of TensorBoard's scalar
// Events (the wire format: a key varint (field << 3 | wire type), then a varint, 8 or 4 little-endian
// bytes, or a length-prefixed byte string).
#include <troupe/metrics/tfrecord.h>

#include <troupe/metrics/record.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace troupe::metrics {

namespace {

constexpr std::array<uint32_t, 256> make_crc_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr auto kCrcTable = make_crc_table();

template <typename T>
void put_le(std::string& out, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) out += static_cast<char>((static_cast<uint64_t>(v) >> (8 * i)) & 0xFF);
}
template <typename T>
T get_le(std::string_view s, size_t at) {
  uint64_t v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(s[at + i])) << (8 * i);
  return static_cast<T>(v);
}

// ---- protobuf wire format
enum Wire : uint32_t { kVarint = 0, kFixed64 = 1, kBytes = 2, kFixed32 = 5 };

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7F) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
}
void put_key(std::string& out, uint32_t field, Wire w) { put_varint(out, (field << 3) | w); }
void put_bytes(std::string& out, uint32_t field, std::string_view b) {
  put_key(out, field, kBytes);
  put_varint(out, b.size());
  out += b;
}
void put_double(std::string& out, uint32_t field, double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, 8);
  put_key(out, field, kFixed64);
  put_le(out, bits);
}

struct Reader {
  std::string_view s;
  size_t i = 0;
  [[noreturn]] void fail(const std::string& what) const {
    throw MetricsError("[decode_event] " + what + " at byte " + std::to_string(i));
  }
  bool done() const { return i >= s.size(); }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (i >= s.size()) fail("truncated varint");
      auto b = static_cast<unsigned char>(s[i++]);
      v |= static_cast<uint64_t>(b & 0x7F) << shift;
      if (!(b & 0x80)) return v;
    }
    fail("varint longer than 10 bytes");
  }
  std::string_view bytes() {
    uint64_t n = varint();
    if (n > s.size() - i) fail("length " + std::to_string(n) + " past the end");
    auto b = s.substr(i, n);
    i += n;
    return b;
  }
  template <typename T>
  T fixed() {
    if (s.size() - i < sizeof(T)) fail("truncated fixed field");
    T v = get_le<T>(s, i);
    i += sizeof(T);
    return v;
  }
  void skip(uint32_t wire) {
    switch (wire) {
      case kVarint: varint(); break;
      case kFixed64: fixed<uint64_t>(); break;
      case kBytes: bytes(); break;
      case kFixed32: fixed<uint32_t>(); break;
      default: fail("unknown wire type " + std::to_string(wire));
    }
  }
};

}  // namespace

uint32_t crc32c(std::string_view data) {
  uint32_t c = 0xFFFFFFFFu;
  for (unsigned char b : data) c = kCrcTable[(c ^ b) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(std::string_view data) {
  uint32_t c = crc32c(data);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::string tfrecord_frame(std::string_view data) {
  std::string len;
  put_le<uint64_t>(len, data.size());
  std::string out = len;
  put_le<uint32_t>(out, masked_crc32c(len));
  out += data;
  put_le<uint32_t>(out, masked_crc32c(data));
  return out;
}

std::vector<std::string> tfrecord_split(std::string_view bytes, const std::string& what) {
  std::vector<std::string> out;
  size_t at = 0;
  auto fail = [&](const std::string& why) {
    throw MetricsError("[tfrecord] " + what + ": record " + std::to_string(out.size()) + " at byte " +
                       std::to_string(at) + ": " + why);
  };
  while (at < bytes.size()) {
    if (bytes.size() - at < 12) fail("truncated header (" + std::to_string(bytes.size() - at) + " bytes left)");
    const auto len = get_le<uint64_t>(bytes, at);
    const auto len_crc = get_le<uint32_t>(bytes, at + 8);
    if (len_crc != masked_crc32c(bytes.substr(at, 8))) fail("length CRC does not match");
    if (len > bytes.size() - at - 12 || bytes.size() - at - 12 - len < 4)
      fail("length " + std::to_string(len) + " runs past the end (" + std::to_string(bytes.size() - at) + " bytes left)");
    std::string_view data = bytes.substr(at + 12, len);
    const auto data_crc = get_le<uint32_t>(bytes, at + 12 + len);
    if (data_crc != masked_crc32c(data)) fail("data CRC does not match");
    out.emplace_back(data);
    at += 16 + len;
  }
  return out;
}

std::vector<std::string> read_tfrecord_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw MetricsError("[tfrecord] cannot open '" + path + "': " + std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  return tfrecord_split(ss.str(), path);
}

std::string encode_file_version_event(double wall_time, const std::string& file_version) {
  std::string ev;
  put_double(ev, 1, wall_time);
  put_bytes(ev, 3, file_version);
  return ev;
}

std::string encode_scalar_event(double wall_time, int64_t step, const std::string& tag, float simple_value) {
  std::string value;
  put_bytes(value, 1, tag);
  uint32_t bits;
  std::memcpy(&bits, &simple_value, 4);
  put_key(value, 2, kFixed32);
  put_le(value, bits);
  std::string summary;
  put_bytes(summary, 1, value);
  std::string ev;
  put_double(ev, 1, wall_time);
  put_key(ev, 2, kVarint);
  put_varint(ev, static_cast<uint64_t>(step));  // int64: negative steps take 10 bytes, as protobuf does
  put_bytes(ev, 5, summary);
  return ev;
}

Event decode_event(std::string_view bytes) {
  Event ev;
  Reader r{bytes};
  while (!r.done()) {
    const uint64_t key = r.varint();
    const auto field = static_cast<uint32_t>(key >> 3), wire = static_cast<uint32_t>(key & 7);
    if (field == 1 && wire == kFixed64) {
      const auto bits = r.fixed<uint64_t>();
      std::memcpy(&ev.wall_time, &bits, 8);
    } else if (field == 2 && wire == kVarint) {
      ev.step = static_cast<int64_t>(r.varint());
    } else if (field == 3 && wire == kBytes) {
      ev.file_version = std::string(r.bytes());
    } else if (field == 5 && wire == kBytes) {
      Reader sr{r.bytes()};
      while (!sr.done()) {
        const uint64_t sk = sr.varint();
        if ((sk >> 3) != 1 || (sk & 7) != kBytes) {
          sr.skip(static_cast<uint32_t>(sk & 7));
          continue;
        }
        Reader vr{sr.bytes()};
        std::pair<std::string, float> v{"", 0.f};
        while (!vr.done()) {
          const uint64_t vk = vr.varint();
          if ((vk >> 3) == 1 && (vk & 7) == kBytes) {
            v.first = std::string(vr.bytes());
          } else if ((vk >> 3) == 2 && (vk & 7) == kFixed32) {
            const auto bits = vr.fixed<uint32_t>();
            std::memcpy(&v.second, &bits, 4);
          } else {
            vr.skip(static_cast<uint32_t>(vk & 7));
          }
        }
        ev.values.push_back(std::move(v));
      }
    } else {
      r.skip(wire);
    }
  }
  return ev;
}

}  // namespace troupe::metrics
