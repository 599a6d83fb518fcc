// safetensors reader and writer, with a small strict JSON writer/parser for the header.
#include <troupe/nn/safetensors.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <stdexcept>
#include <system_error>
#include <vector>

#include <troupe/nn/serialize.h>
#include <troupe/tensor/ops.h>

namespace troupe::nn {
namespace {

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // the reference reader's limit
constexpr size_t kMaxDims = 64;

// ---- dtypes

struct DtypeInfo {
  ScalarType type;
  const char* name;
  int rank;  // position in the reference crate's Dtype enum: the writer sorts by it, descending
};

// The crate's order: BOOL U8 I8 F8_E5M2 F8_E4M3 I16 U16 F16 BF16 I32 U32 F32 F64 I64 U64 (newer
// versions insert more types, keeping these in the same relative order).
constexpr DtypeInfo kDtypes[] = {
    {kBool, "BOOL", 0},   {kUInt8, "U8", 1},    {kFloat16, "F16", 7}, {kBFloat16, "BF16", 8},
    {kInt32, "I32", 9},   {kFloat32, "F32", 11}, {kFloat64, "F64", 12}, {kInt64, "I64", 13},
};
// Valid safetensors dtypes that troupe has no tensor type for.
constexpr const char* kUnsupportedDtypes[] = {"I8",  "I16",     "U16",     "U32",     "U64",     "F8_E5M2",
                                              "F8_E4M3", "F8_E8M0", "F4", "F6_E2M3", "F6_E3M2", "C64"};
constexpr const char* kSupportedList = "F64 F32 F16 BF16 I64 I32 U8 BOOL";

const DtypeInfo& dtype_info(ScalarType t) {
  for (const auto& d : kDtypes)
    if (d.type == t) return d;
  throw std::invalid_argument("[nn::save_safetensors] unknown dtype");
}

const DtypeInfo* dtype_info(std::string_view name) {
  for (const auto& d : kDtypes)
    if (name == d.name) return &d;
  return nullptr;
}

bool is_unsupported_dtype(std::string_view name) {
  for (const char* d : kUnsupportedDtypes)
    if (name == d) return true;
  return false;
}

void swap_elements(uint8_t* p, size_t nbytes, size_t elem) {
  if (elem <= 1) return;
  for (size_t i = 0; i + elem <= nbytes; i += elem) std::reverse(p + i, p + i + elem);
}

// ---- UTF-8 and JSON strings

/// Whether `s` is well-formed UTF-8 (no overlongs, surrogates or code points past U+10FFFF).
bool valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<uint8_t>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t n;
    uint32_t cp;
    if ((c & 0xe0) == 0xc0) n = 2, cp = c & 0x1f;
    else if ((c & 0xf0) == 0xe0) n = 3, cp = c & 0x0f;
    else if ((c & 0xf8) == 0xf0) n = 4, cp = c & 0x07;
    else return false;
    if (i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      const auto cc = static_cast<uint8_t>(s[i + k]);
      if ((cc & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3f);
    }
    if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000)) return false;  // overlong
    if (cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += n;
  }
  return true;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xc0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xe0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

/// A JSON string literal escaped as serde_json (and Python's json with ensure_ascii=False) escape it.
void append_json_string(std::string& out, std::string_view s) {
  static const char* hex = "0123456789abcdef";
  out += '"';
  for (char ch : s) {
    const auto c = static_cast<uint8_t>(ch);
    switch (ch) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          out += "\\u00";
          out += hex[c >> 4];
          out += hex[c & 15];
        } else {
          out += ch;
        }
    }
  }
  out += '"';
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// ---- the header

struct Entry {
  std::string name;
  ScalarType dtype = kFloat32;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;
};

struct Header {
  std::vector<Entry> entries;  // in data-offset order
  SafetensorsMetadata metadata;
  uint64_t data_start = 0;     // 8 + N
};

/// Strict parser of the header's JSON, directed by the schema (so nesting depth is fixed).
class HeaderParser {
 public:
  HeaderParser(std::string_view text, std::function<void(const std::string&)> fail)
      : s_(text), fail_(std::move(fail)) {}

  std::vector<Entry> parse(SafetensorsMetadata& metadata) {
    std::vector<Entry> entries;
    if (s_.empty() || s_[0] != '{') error("the header does not start with '{'");
    std::vector<std::string> seen;  // keys, for the duplicate check
    bool have_metadata = false;
    object([&](std::string key) {
      if (key == "__metadata__") {
        if (have_metadata) error("duplicate key \"__metadata__\"");
        have_metadata = true;
        if (literal("null")) return;
        object([&](std::string k) {
          if (metadata.count(k)) error("duplicate key \"" + k + "\" in \"__metadata__\"");
          if (peek() != '"') error("the value of \"__metadata__\" key \"" + k + "\" is not a string");
          metadata.emplace(std::move(k), string());
        });
        return;
      }
      seen.push_back(key);
      entries.push_back(tensor_info(std::move(key)));
    });
    skip_ws();
    if (i_ != s_.size()) error("unexpected data after the JSON object");
    std::sort(seen.begin(), seen.end());
    for (size_t k = 1; k < seen.size(); ++k)
      if (seen[k] == seen[k - 1]) fail_("duplicate tensor name \"" + seen[k] + "\"");
    return entries;
  }

 private:
  [[noreturn]] void error(const std::string& what) const {
    fail_("malformed header JSON at byte " + std::to_string(i_) + " of the header: " + what);
    throw std::logic_error("unreachable");
  }

  char peek() {
    skip_ws();
    return i_ < s_.size() ? s_[i_] : '\0';
  }
  void skip_ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }
  void expect(char c) {
    skip_ws();
    if (i_ >= s_.size()) error(std::string("the header ends where '") + c + "' was expected");
    if (s_[i_] != c) error(std::string("expected '") + c + "', found '" + s_[i_] + "'");
    ++i_;
  }
  bool literal(std::string_view word) {
    skip_ws();
    if (s_.substr(i_, word.size()) != word) return false;
    i_ += word.size();
    return true;
  }

  /// '{' (string ':' value (',' string ':' value)*)? '}', calling on_key to parse each value.
  template <class F>
  void object(F&& on_key) {
    expect('{');
    if (peek() == '}') {
      ++i_;
      return;
    }
    for (;;) {
      if (peek() != '"') error("expected a string key");
      std::string key = string();
      expect(':');
      on_key(std::move(key));
      const char c = peek();
      if (c == ',') {
        ++i_;
        continue;
      }
      if (c == '}') {
        ++i_;
        return;
      }
      error("expected ',' or '}' in an object");
    }
  }

  std::string string() {
    expect('"');
    std::string out;
    const size_t start = i_;
    for (;;) {
      if (i_ >= s_.size()) error("unterminated string");
      const char c = s_[i_++];
      if (c == '"') break;
      if (static_cast<uint8_t>(c) < 0x20) error("control character in a string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (i_ >= s_.size()) error("unterminated escape");
      const char e = s_[i_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          uint32_t cp = hex4();
          if (cp >= 0xdc00 && cp <= 0xdfff) error("lone low surrogate in a \\u escape");
          if (cp >= 0xd800 && cp <= 0xdbff) {
            if (s_.substr(i_, 2) != "\\u") error("lone high surrogate in a \\u escape");
            i_ += 2;
            const uint32_t lo = hex4();
            if (lo < 0xdc00 || lo > 0xdfff) error("invalid low surrogate in a \\u escape");
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
          }
          append_utf8(out, cp);
          break;
        }
        default: error(std::string("invalid escape '\\") + e + "'");
      }
    }
    if (!valid_utf8(out)) {
      i_ = start;
      error("a string is not valid UTF-8");
    }
    return out;
  }

  uint32_t hex4() {
    if (i_ + 4 > s_.size()) error("truncated \\u escape");
    uint32_t v = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = s_[i_++];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= static_cast<uint32_t>(c - '0');
      else if (c >= 'a' && c <= 'f') v |= static_cast<uint32_t>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') v |= static_cast<uint32_t>(c - 'A' + 10);
      else error("invalid hex digit in a \\u escape");
    }
    return v;
  }

  /// A non-negative integer written without sign, fraction or exponent.
  uint64_t uint(const std::string& what) {
    skip_ws();
    if (i_ < s_.size() && s_[i_] == '-') error(what + " is negative");
    if (i_ >= s_.size() || s_[i_] < '0' || s_[i_] > '9') error(what + " is not a number");
    const size_t start = i_;
    uint64_t v = 0;
    while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') {
      if (__builtin_mul_overflow(v, uint64_t{10}, &v) ||
          __builtin_add_overflow(v, static_cast<uint64_t>(s_[i_] - '0'), &v))
        error(what + " does not fit in 64 bits");
      ++i_;
    }
    if (i_ - start > 1 && s_[start] == '0') error(what + " has a leading zero");
    if (i_ < s_.size() && (s_[i_] == '.' || s_[i_] == 'e' || s_[i_] == 'E')) error(what + " is not an integer");
    return v;
  }

  /// '[' uint (',' uint)* ']' (or '[]').
  std::vector<uint64_t> uint_array(const std::string& what) {
    std::vector<uint64_t> out;
    expect('[');
    if (peek() == ']') {
      ++i_;
      return out;
    }
    for (;;) {
      out.push_back(uint(what));
      if (out.size() > kMaxDims) error(what + " has more than " + std::to_string(kMaxDims) + " values");
      const char c = peek();
      if (c == ',') {
        ++i_;
        continue;
      }
      if (c == ']') {
        ++i_;
        return out;
      }
      error("expected ',' or ']' in " + what);
    }
  }

  Entry tensor_info(std::string name) {
    Entry e;
    e.name = std::move(name);
    const std::string tn = "tensor \"" + e.name + "\"";
    bool have_dtype = false, have_shape = false, have_offsets = false;
    if (peek() != '{') error("the value of " + tn + " is not an object");
    object([&](std::string key) {
      if (key == "dtype") {
        if (have_dtype) error("duplicate key \"dtype\" in " + tn);
        have_dtype = true;
        if (peek() != '"') error("the dtype of " + tn + " is not a string");
        const std::string d = string();
        const DtypeInfo* info = dtype_info(d);
        if (!info) {
          if (is_unsupported_dtype(d))
            fail_("dtype \"" + d + "\" of " + tn + " is not supported by troupe (supported: " + kSupportedList + ")");
          fail_("unknown dtype \"" + d + "\" of " + tn);
        }
        e.dtype = info->type;
      } else if (key == "shape") {
        if (have_shape) error("duplicate key \"shape\" in " + tn);
        have_shape = true;
        const auto dims = uint_array("a size in the shape of " + tn);  // at most kMaxDims
        for (uint64_t d : dims) {
          if (d > static_cast<uint64_t>(INT64_MAX)) fail_("a size in the shape of " + tn + " is too large");
          e.shape.push_back(static_cast<int64_t>(d));
        }
      } else if (key == "data_offsets") {
        if (have_offsets) error("duplicate key \"data_offsets\" in " + tn);
        have_offsets = true;
        const auto off = uint_array("an offset in the data_offsets of " + tn);
        if (off.size() != 2)
          fail_("the data_offsets of " + tn + " have " + std::to_string(off.size()) + " values (expected 2)");
        e.begin = off[0];
        e.end = off[1];
      } else {
        error("unknown key \"" + key + "\" in " + tn + " (expected dtype, shape, data_offsets)");
      }
    });
    if (!have_dtype) fail_(tn + " has no \"dtype\"");
    if (!have_shape) fail_(tn + " has no \"shape\"");
    if (!have_offsets) fail_(tn + " has no \"data_offsets\"");
    return e;
  }

  std::string_view s_;
  std::function<void(const std::string&)> fail_;
  size_t i_ = 0;
};

/// Where the file's bytes come from: a file on disk or a buffer in memory.
class Source {
 public:
  virtual ~Source() = default;
  virtual uint64_t size() const = 0;
  /// Reads n bytes at `offset` (within size()).
  virtual void read(uint64_t offset, void* dst, size_t n) = 0;
};

class FileSource : public Source {
 public:
  FileSource(const std::string& path, const std::string& fn) : path_(path) {
    std::error_code ec;
    const auto st = std::filesystem::status(path, ec);
    if (ec || !std::filesystem::exists(st))
      throw std::runtime_error("[" + fn + "] cannot open '" + path + "': " +
                               std::error_code(ec ? ec.value() : ENOENT, std::generic_category()).message());
    if (std::filesystem::is_directory(st))
      throw std::runtime_error("[" + fn + "] cannot open '" + path + "': " +
                               std::error_code(EISDIR, std::generic_category()).message());
    errno = 0;
    f_.open(path, std::ios::binary);
    if (!f_)
      throw std::runtime_error("[" + fn + "] cannot open '" + path + "': " +
                               std::error_code(errno ? errno : EIO, std::generic_category()).message());
    f_.seekg(0, std::ios::end);
    const auto end = f_.tellg();
    if (!f_ || end < 0) throw std::runtime_error("[" + fn + "] cannot read '" + path + "': it is not seekable");
    size_ = static_cast<uint64_t>(end);
    fn_ = fn;
  }
  uint64_t size() const override { return size_; }
  void read(uint64_t offset, void* dst, size_t n) override {
    if (n == 0) return;
    f_.clear();
    f_.seekg(static_cast<std::streamoff>(offset));
    f_.read(static_cast<char*>(dst), static_cast<std::streamsize>(n));
    if (static_cast<size_t>(f_.gcount()) != n)
      throw std::runtime_error("[" + fn_ + "] '" + path_ + "': reading " + std::to_string(n) + " bytes at offset " +
                               std::to_string(offset) + " failed (the file changed while it was read?)");
  }

 private:
  std::string path_, fn_;
  std::ifstream f_;
  uint64_t size_ = 0;
};

class MemorySource : public Source {
 public:
  explicit MemorySource(std::string_view bytes) : bytes_(bytes) {}
  uint64_t size() const override { return bytes_.size(); }
  void read(uint64_t offset, void* dst, size_t n) override {
    if (n) std::memcpy(dst, bytes_.data() + offset, n);
  }

 private:
  std::string_view bytes_;
};

/// Reads and validates the header; every error goes through `fail` (which throws).
Header read_header(Source& src, const std::function<void(const std::string&)>& fail) {
  const uint64_t size = src.size();
  if (size == 0) fail("empty file: not a safetensors file");
  if (size < 8)
    fail("truncated: the file is " + std::to_string(size) + " bytes, shorter than the 8-byte header length");
  uint8_t len_bytes[8];
  src.read(0, len_bytes, 8);
  uint64_t n = 0;
  for (int k = 7; k >= 0; --k) n = (n << 8) | len_bytes[k];
  if (n > kMaxHeaderBytes)
    fail("header length " + std::to_string(n) + " exceeds the limit of " + std::to_string(kMaxHeaderBytes) +
         " bytes (not a safetensors file?)");
  if (n > size - 8)
    fail("truncated: the header length is " + std::to_string(n) + " bytes but only " + std::to_string(size - 8) +
         " bytes follow it");
  std::string text(static_cast<size_t>(n), '\0');
  src.read(8, text.data(), text.size());

  Header h;
  h.data_start = 8 + n;
  const uint64_t buffer = size - h.data_start;
  h.entries = HeaderParser(text, fail).parse(h.metadata);

  for (const Entry& e : h.entries) {
    const std::string tn = "tensor \"" + e.name + "\"";
    const std::string offs = "data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) + "]";
    if (e.end < e.begin) fail(tn + " has " + offs + " that end before they begin");
    if (e.end > buffer)
      fail(tn + " has " + offs + " past the end of the " + std::to_string(buffer) + "-byte data buffer (truncated file?)");
    uint64_t numel = 1, nbytes = 0;
    bool overflow = false;
    for (int64_t d : e.shape) overflow = overflow || __builtin_mul_overflow(numel, static_cast<uint64_t>(d), &numel);
    if (overflow || __builtin_mul_overflow(numel, element_size(e.dtype), &nbytes))
      fail(tn + " has shape " + shape_text(e.shape) + " whose size overflows 64 bits");
    if (nbytes != e.end - e.begin)
      fail(tn + " has shape " + shape_text(e.shape) + " of " + dtype_info(e.dtype).name + " (" +
           std::to_string(nbytes) + " bytes) but " + offs + " hold " + std::to_string(e.end - e.begin) + " bytes");
  }
  std::stable_sort(h.entries.begin(), h.entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t at = 0;
  const Entry* prev = nullptr;
  for (const Entry& e : h.entries) {
    if (e.begin < at)
      fail("tensor \"" + e.name + "\" data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
           "] overlap tensor \"" + prev->name + "\" [" + std::to_string(prev->begin) + ", " +
           std::to_string(prev->end) + "]");
    if (e.begin > at)
      fail("bytes [" + std::to_string(at) + ", " + std::to_string(e.begin) +
           ") of the data buffer belong to no tensor");
    at = e.end;
    prev = &e;
  }
  if (at != buffer)
    fail("the data buffer has " + std::to_string(buffer) + " bytes but the tensors cover " + std::to_string(at) +
         (at < buffer ? " (trailing bytes, or a truncated header length?)" : ""));
  return h;
}

StateDict read_tensors(Source& src, const std::function<void(const std::string&)>& fail) {
  Header h = read_header(src, fail);
  StateDict out;
  for (const Entry& e : h.entries) {
    Tensor t = empty(e.shape, TensorOptions().dtype(e.dtype));
    const uint64_t nbytes = e.end - e.begin;  // validated: shape * element size, within the file
    auto* p = static_cast<uint8_t*>(t.data_ptr());
    src.read(h.data_start + e.begin, p, static_cast<size_t>(nbytes));
    if constexpr (std::endian::native == std::endian::big) swap_elements(p, nbytes, element_size(e.dtype));
    if (e.dtype == kBool)
      for (uint64_t i = 0; i < nbytes; ++i)
        if (p[i] > 1)
          fail("bool tensor \"" + e.name + "\" holds byte " + std::to_string(p[i]) + " at element " +
               std::to_string(i) + " (expected 0 or 1)");
    out.insert(e.name, std::move(t));
  }
  return out;
}

std::function<void(const std::string&)> failer(const std::string& fn, const std::string& source) {
  return [fn, source](const std::string& what) -> void {
    throw std::runtime_error("[" + fn + "] " + source + ": " + what);
  };
}

// ---- writing

struct Prepared {
  std::string header;  // the 8 length bytes, the JSON and its padding
  std::vector<std::pair<const std::string*, Tensor>> tensors;  // host, contiguous, in file order
};

Prepared prepare(const StateDict& tensors, const SafetensorsMetadata& metadata, const std::string& fn) {
  Prepared p;
  for (const auto& [name, t] : tensors) {
    if (!t.defined()) throw std::invalid_argument("[" + fn + "] tensor '" + name + "' is undefined");
    if (name == "__metadata__") throw std::invalid_argument("[" + fn + "] a tensor cannot be named '__metadata__'");
    if (!valid_utf8(name)) throw std::invalid_argument("[" + fn + "] tensor name '" + name + "' is not valid UTF-8");
    Tensor c = t.detach();
    if (!c.is_cpu()) c = c.cpu();
    p.tensors.emplace_back(&name, c.contiguous());
  }
  for (const auto& [k, v] : metadata)
    if (!valid_utf8(k) || !valid_utf8(v))
      throw std::invalid_argument("[" + fn + "] metadata entry '" + k + "' is not valid UTF-8");
  // The reference writer's order: dtype rank descending, then name (bytewise).
  std::stable_sort(p.tensors.begin(), p.tensors.end(), [](const auto& a, const auto& b) {
    const int ra = dtype_info(a.second.dtype()).rank, rb = dtype_info(b.second.dtype()).rank;
    return ra != rb ? ra > rb : *a.first < *b.first;
  });

  std::string json = "{";
  bool first = true;
  if (!metadata.empty()) {
    json += "\"__metadata__\":{";
    for (const auto& [k, v] : metadata) {
      if (!first) json += ',';
      first = false;
      append_json_string(json, k);
      json += ':';
      append_json_string(json, v);
    }
    json += '}';
    first = false;
  }
  uint64_t offset = 0;
  for (const auto& [name, t] : p.tensors) {
    if (!first) json += ',';
    first = false;
    append_json_string(json, *name);
    json += ":{\"dtype\":\"";
    json += dtype_info(t.dtype()).name;
    json += "\",\"shape\":[";
    for (int64_t d = 0; d < t.dim(); ++d) json += (d ? "," : "") + std::to_string(t.size(d));
    const uint64_t end = offset + t.nbytes();
    json += "],\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(end) + "]}";
    offset = end;
  }
  json += '}';
  json.append((8 - json.size() % 8) % 8, ' ');
  if (json.size() > kMaxHeaderBytes)
    throw std::invalid_argument("[" + fn + "] the header would be " + std::to_string(json.size()) +
                                " bytes, over the format's limit of " + std::to_string(kMaxHeaderBytes));
  p.header.reserve(8 + json.size());
  uint64_t n = json.size();
  for (int k = 0; k < 8; ++k, n >>= 8) p.header += static_cast<char>(n & 0xff);
  p.header += json;
  return p;
}

/// Calls sink(data, n) for the header and then each tensor's bytes (one blob each).
void emit(const Prepared& p, const std::function<void(const char*, size_t)>& sink) {
  sink(p.header.data(), p.header.size());
  for (const auto& [name, t] : p.tensors) {
    if (t.nbytes() == 0) continue;
    const auto* data = static_cast<const char*>(t.data_ptr());
    if constexpr (std::endian::native == std::endian::big) {
      std::vector<char> le(data, data + t.nbytes());
      swap_elements(reinterpret_cast<uint8_t*>(le.data()), le.size(), t.element_size());
      sink(le.data(), le.size());
    } else {
      sink(data, t.nbytes());
    }
  }
}

}  // namespace

void save_safetensors(const StateDict& tensors, const std::string& path, const SafetensorsMetadata& metadata) {
  const Prepared p = prepare(tensors, metadata, "nn::save_safetensors");
  write_file_atomically(
      path,
      [&](std::ostream& os) {
        emit(p, [&](const char* d, size_t n) { os.write(d, static_cast<std::streamsize>(n)); });
        if (!os) throw std::runtime_error("writing the file failed");
      },
      "nn::save_safetensors");
}

std::string serialize_safetensors(const StateDict& tensors, const SafetensorsMetadata& metadata) {
  const Prepared p = prepare(tensors, metadata, "nn::serialize_safetensors");
  std::string out;
  emit(p, [&](const char* d, size_t n) { out.append(d, n); });
  return out;
}

StateDict load_safetensors(const std::string& path) {
  FileSource src(path, "nn::load_safetensors");
  return read_tensors(src, failer("nn::load_safetensors", "'" + path + "'"));
}

StateDict deserialize_safetensors(std::string_view bytes) {
  MemorySource src(bytes);
  return read_tensors(src, failer("nn::deserialize_safetensors", "<bytes>"));
}

SafetensorsMetadata load_safetensors_metadata(const std::string& path) {
  FileSource src(path, "nn::load_safetensors_metadata");
  return read_header(src, failer("nn::load_safetensors_metadata", "'" + path + "'")).metadata;
}

}  // namespace troupe::nn
