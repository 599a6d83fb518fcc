// Checkpoints in troupe's binary format (see serialize.h for the layout) and the atomic file write.
#include <troupe/nn/serialize.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <istream>
#include <optional>
#include <ostream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <system_error>
#include <vector>

#include <cereal/archives/portable_binary.hpp>
#include <cereal/cereal.hpp>

#include <troupe/tensor/ops.h>

namespace troupe::nn {
namespace {

constexpr size_t kMagicSize = 8;
constexpr uint64_t kMaxNameBytes = 1 << 20;      // a state_dict key longer than 1 MiB is corruption
constexpr uint32_t kMaxDims = 64;
constexpr uint64_t kChunkBytes = uint64_t{16} << 20;  // blob read size when the stream length is unknown

std::string errno_text(int e) { return std::error_code(e, std::generic_category()).message(); }

// ---- dtype codes (fixed by the format, independent of the order of troupe::ScalarType)

uint8_t dtype_code(ScalarType t) {
  switch (t) {
    case kBool: return 0;
    case kUInt8: return 1;
    case kInt32: return 2;
    case kInt64: return 3;
    case kFloat16: return 4;
    case kBFloat16: return 5;
    case kFloat32: return 6;
    case kFloat64: return 7;
  }
  throw std::invalid_argument("[nn::save] unknown dtype");
}

std::optional<ScalarType> dtype_from_code(uint8_t c) {
  static constexpr ScalarType table[] = {kBool, kUInt8, kInt32, kInt64, kFloat16, kBFloat16, kFloat32, kFloat64};
  if (c < 8) return table[c];
  return std::nullopt;
}

/// Reverses the bytes of each `elem`-byte element (used only on big-endian hosts).
void swap_elements(uint8_t* p, size_t nbytes, size_t elem) {
  if (elem <= 1) return;
  for (size_t i = 0; i + elem <= nbytes; i += elem) std::reverse(p + i, p + i + elem);
}

/// The tensor's elements as a CPU, contiguous, autograd-free tensor (a copy only when needed).
Tensor host_contiguous(const Tensor& t) {
  Tensor c = t.detach();
  if (!c.is_cpu()) c = c.cpu();
  return c.contiguous();
}

std::string hex_prefix(const char* p, size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    auto b = static_cast<uint8_t>(p[i]);
    if (i) s += ' ';
    s += digits[b >> 4];
    s += digits[b & 15];
  }
  return s;
}

// ---- writing

void check_defined(const StateDict& sd, const std::string& where) {
  for (const auto& [name, t] : sd)
    if (!t.defined())
      throw std::invalid_argument("[nn::save] state_dict entry '" + name + "' is an undefined tensor" + where);
}

void write_checkpoint_unchecked(const StateDict& sd, std::ostream& os);

void write_checkpoint(const StateDict& sd, std::ostream& os) {
  check_defined(sd, "");
  try {
    write_checkpoint_unchecked(sd, os);
  } catch (const cereal::Exception& e) {
    throw std::runtime_error(std::string("[nn::save] writing the checkpoint to the stream failed: ") + e.what());
  }
  if (!os) throw std::runtime_error("[nn::save] writing the checkpoint to the stream failed");
}

void write_checkpoint_unchecked(const StateDict& sd, std::ostream& os) {
  os.write(kCheckpointMagic, kMagicSize);
  cereal::PortableBinaryOutputArchive ar(os, cereal::PortableBinaryOutputArchive::Options::LittleEndian());
  ar(uint32_t{kCheckpointVersion}, static_cast<uint64_t>(sd.size()));
  for (const auto& [name, t] : sd) {
    Tensor c = host_contiguous(t);
    ar(static_cast<uint64_t>(name.size()));
    ar(cereal::binary_data(name.data(), name.size()));
    ar(dtype_code(c.dtype()), static_cast<uint32_t>(c.dim()));
    for (int64_t d : c.sizes()) ar(d);
    const uint64_t nbytes = c.nbytes();
    ar(nbytes);
    if (nbytes == 0) continue;
    // One blob per tensor; the archive writes little-endian, so big-endian hosts swap a copy.
    const auto* data = static_cast<const uint8_t*>(c.data_ptr());
    if constexpr (std::endian::native == std::endian::big) {
      std::vector<uint8_t> le(data, data + nbytes);
      swap_elements(le.data(), le.size(), c.element_size());
      ar(cereal::binary_data(le.data(), le.size()));
    } else {
      ar(cereal::binary_data(data, static_cast<size_t>(nbytes)));
    }
  }
  os.flush();
}

// ---- reading

/// Reads the checkpoint format from a stream, with every length checked before it sizes anything.
class CheckpointReader {
 public:
  CheckpointReader(std::istream& in, std::string source, std::optional<uint64_t> size)
      : in_(in), source_(std::move(source)), remaining_(size) {}

  StateDict read(bool require_eof) {
    char magic[kMagicSize] = {};
    in_.read(magic, kMagicSize);
    const auto got = static_cast<size_t>(in_.gcount());
    if (got == 0) fail("empty file: not a troupe checkpoint");
    if (got < kMagicSize && std::memcmp(magic, kCheckpointMagic, got) == 0)
      fail("truncated: the file ends inside the magic (" + std::to_string(got) + " of " +
           std::to_string(kMagicSize) + " bytes)");
    if (got < kMagicSize || std::memcmp(magic, kCheckpointMagic, kMagicSize) != 0) {
      std::string what = "not a troupe checkpoint: it starts with bytes [" + hex_prefix(magic, got) +
                         "], expected the magic '" + std::string(kCheckpointMagic) + "'";
      if (got >= 4 && std::memcmp(magic, "PK\x03\x04", 4) == 0)
        what += " (this is a zip archive, as torch.save writes; troupe reads its own checkpoints and safetensors)";
      fail(what);
    }
    consume(kMagicSize);
    // cereal reads its endianness byte in the archive's constructor: check it first (1 = little-endian)
    need(1, "the endianness byte");
    const int flag = in_.peek();
    if (flag == std::char_traits<char>::eof()) fail("truncated: the file ends before the endianness byte");
    if (flag != 1) fail("bad endianness byte " + std::to_string(flag) + " after the magic (expected 1)");
    std::optional<cereal::PortableBinaryInputArchive> ar;
    try {
      ar.emplace(in_, cereal::PortableBinaryInputArchive::Options::Default());  // host order out
    } catch (const cereal::Exception&) {
      fail("truncated: the file ends before the endianness byte");
    }
    ar_ = &*ar;
    consume(1);

    const auto version = value<uint32_t>("the format version");
    if (version == 0 || version > kCheckpointVersion)
      fail("format version " + std::to_string(version) + " is not supported (this build reads versions 1 to " +
           std::to_string(kCheckpointVersion) + ")");
    const auto count = value<uint64_t>("the entry count");

    StateDict sd;
    for (uint64_t i = 0; i < count; ++i) {
      context_ = "entry " + std::to_string(i) + " of " + std::to_string(count);
      const auto name_len = value<uint64_t>("the name length");
      if (name_len > kMaxNameBytes)
        fail(context_ + ": name length " + std::to_string(name_len) + " exceeds the limit of " +
             std::to_string(kMaxNameBytes) + " bytes");
      std::string name(static_cast<size_t>(need(name_len, "the name")), '\0');
      bytes(name.data(), name.size(), "the name");
      context_ += " '" + name + "'";
      if (sd.contains(name)) fail(context_ + ": duplicate name");

      const auto code = value<uint8_t>("the dtype");
      const auto dtype = dtype_from_code(code);
      if (!dtype) fail(context_ + ": unknown dtype code " + std::to_string(code) + " (known: 0 to 7)");
      const auto ndim = value<uint32_t>("the number of dimensions");
      if (ndim > kMaxDims)
        fail(context_ + ": " + std::to_string(ndim) + " dimensions (at most " + std::to_string(kMaxDims) + ")");
      std::vector<int64_t> shape;
      uint64_t numel = 1;
      bool overflow = false;
      for (uint32_t d = 0; d < ndim; ++d) {
        const auto s = value<int64_t>("the shape");
        if (s < 0) fail(context_ + ": negative size " + std::to_string(s) + " in dimension " + std::to_string(d));
        shape.push_back(s);
        overflow = overflow || __builtin_mul_overflow(numel, static_cast<uint64_t>(s), &numel);
      }
      const size_t elem = element_size(*dtype);
      uint64_t expected = 0;
      if (overflow || numel > static_cast<uint64_t>(INT64_MAX) || __builtin_mul_overflow(numel, elem, &expected))
        fail(context_ + ": shape " + shape_text(shape) + " has more elements than fit in memory");
      const auto nbytes = value<uint64_t>("the data length");
      if (nbytes != expected)
        fail(context_ + ": data length " + std::to_string(nbytes) + " bytes does not match shape " +
             shape_text(shape) + " of " + dtype_name(*dtype) + " (" + std::to_string(expected) + " bytes)");
      sd.insert(name, read_tensor(shape, *dtype, nbytes));
    }
    context_.clear();
    if (require_eof && (remaining_ ? *remaining_ != 0 : in_.peek() != std::char_traits<char>::eof())) {
      std::string extra = remaining_ ? std::to_string(*remaining_) + " unexpected bytes" : "unexpected bytes";
      fail(extra + " after the last entry");
    }
    return sd;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error("[nn::load_state_dict_file] " + source_ + ": " + what);
  }

  static std::string shape_text(const std::vector<int64_t>& shape) {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
  }

  std::string where(const char* what) const { return context_.empty() ? what : context_ + ": " + what; }

  /// Checks that `n` more bytes can exist (when the length is known); returns n.
  uint64_t need(uint64_t n, const char* what) const {
    if (remaining_ && n > *remaining_)
      fail("truncated: " + where(what) + " needs " + std::to_string(n) + " bytes but only " +
           std::to_string(*remaining_) + " remain");
    return n;
  }
  void consume(uint64_t n) {
    if (remaining_) *remaining_ -= n;
  }

  template <class T>
  T value(const char* what) {
    need(sizeof(T), what);
    T v{};
    try {
      (*ar_)(v);
    } catch (const cereal::Exception&) {
      fail("truncated: the file ends inside " + where(what));
    }
    consume(sizeof(T));
    return v;
  }

  void bytes(void* dst, size_t n, const char* what) {
    if (n == 0) return;
    need(n, what);
    try {
      (*ar_)(cereal::binary_data(static_cast<uint8_t*>(dst), n));
    } catch (const cereal::Exception&) {
      fail("truncated: the file ends inside " + where(what));
    }
    consume(n);
  }

  Tensor read_tensor(const std::vector<int64_t>& shape, ScalarType dtype, uint64_t nbytes) {
    Tensor t;
    if (remaining_ || nbytes <= kChunkBytes) {
      need(nbytes, "the data");  // bounds the allocation by the bytes that exist
      t = empty(shape, TensorOptions().dtype(dtype));
      bytes(t.data_ptr(), static_cast<size_t>(nbytes), "the data");
    } else {
      // Unknown stream length: grow a buffer as data arrives, so a corrupt length cannot size it.
      std::vector<uint8_t> buf;
      while (buf.size() < nbytes) {
        const size_t old = buf.size();
        buf.resize(old + static_cast<size_t>(std::min<uint64_t>(kChunkBytes, nbytes - old)));
        bytes(buf.data() + old, buf.size() - old, "the data");
      }
      t = empty(shape, TensorOptions().dtype(dtype));
      std::memcpy(t.data_ptr(), buf.data(), buf.size());
    }
    auto* p = static_cast<uint8_t*>(t.data_ptr());
    if constexpr (std::endian::native == std::endian::big) swap_elements(p, nbytes, element_size(dtype));
    if (dtype == kBool)
      for (uint64_t i = 0; i < nbytes; ++i)
        if (p[i] > 1)
          fail(context_ + ": bool element " + std::to_string(i) + " holds byte " + std::to_string(p[i]) +
               " (expected 0 or 1)");
    return t;
  }

  std::istream& in_;
  std::string source_;
  std::optional<uint64_t> remaining_;
  cereal::PortableBinaryInputArchive* ar_ = nullptr;
  std::string context_;
};

/// The bytes left in a seekable stream, or nullopt when it cannot seek.
std::optional<uint64_t> remaining_in(std::istream& in) {
  const auto here = in.tellg();
  if (here == std::istream::pos_type(-1)) {
    in.clear();
    return std::nullopt;
  }
  in.seekg(0, std::ios::end);
  const auto end = in.tellg();
  in.seekg(here);
  if (!in || end == std::istream::pos_type(-1) || end < here) {
    in.clear();
    in.seekg(here);
    return std::nullopt;
  }
  return static_cast<uint64_t>(end - here);
}

// ---- a streambuf writing to a file descriptor, remembering the first errno

class FdStreamBuf : public std::streambuf {
 public:
  explicit FdStreamBuf(int fd) : fd_(fd), buf_(size_t{1} << 16) { setp(buf_.data(), buf_.data() + buf_.size()); }
  int error() const { return error_; }

 protected:
  int_type overflow(int_type c) override {
    if (!flush_buffer()) return traits_type::eof();
    if (!traits_type::eq_int_type(c, traits_type::eof())) {
      *pptr() = traits_type::to_char_type(c);
      pbump(1);
    }
    return traits_type::not_eof(c);
  }
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    if (static_cast<size_t>(n) < buf_.size()) return std::streambuf::xsputn(s, n);
    // large blobs go straight to the file
    if (!flush_buffer() || !write_all(s, static_cast<size_t>(n))) return 0;
    return n;
  }
  int sync() override { return flush_buffer() ? 0 : -1; }

 private:
  bool flush_buffer() {
    const auto n = static_cast<size_t>(pptr() - pbase());
    setp(buf_.data(), buf_.data() + buf_.size());
    return n == 0 || write_all(buf_.data(), n);
  }
  bool write_all(const char* p, size_t n) {
    if (error_) return false;
    while (n > 0) {
      const ssize_t w = ::write(fd_, p, std::min<size_t>(n, size_t{1} << 30));
      if (w < 0) {
        if (errno == EINTR) continue;
        error_ = errno;
        return false;
      }
      p += w;
      n -= static_cast<size_t>(w);
    }
    return true;
  }

  int fd_;
  std::vector<char> buf_;
  int error_ = 0;
};

std::string random_suffix() {
  std::random_device rd;
  const uint64_t r = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  std::ostringstream s;
  s << std::hex << r;
  return s.str();
}

/// Opens `path` for reading with a clear error; returns its size (nullopt when not a regular file).
std::optional<uint64_t> open_for_reading(std::ifstream& f, const std::string& path, const std::string& fn) {
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(st)) {
    const int e = ec ? ec.value() : ENOENT;
    throw std::runtime_error("[" + fn + "] cannot open '" + path + "': " + errno_text(e));
  }
  if (std::filesystem::is_directory(st))
    throw std::runtime_error("[" + fn + "] cannot open '" + path + "': " + errno_text(EISDIR));
  errno = 0;
  f.open(path, std::ios::binary);
  if (!f) {
    const int e = errno ? errno : EIO;
    throw std::runtime_error("[" + fn + "] cannot open '" + path + "': " + errno_text(e));
  }
  if (!std::filesystem::is_regular_file(st)) return std::nullopt;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) return std::nullopt;
  return static_cast<uint64_t>(size);
}

}  // namespace

// ---------------------------------------------------------------------------------------------------
// atomic write

void write_file_atomically(const std::string& path, const std::function<void(std::ostream&)>& write,
                           const std::string& fn) {
  if (path.empty()) throw std::invalid_argument("[" + fn + "] the path is empty");
  const std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." + random_suffix();
  const std::string prefix = "[" + fn + "] cannot write '" + path + "': ";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0) {
    const int e = errno;
    throw std::runtime_error(prefix + "creating the temporary file '" + tmp + "' failed: " + errno_text(e));
  }
  auto give_up = [&](const std::string& what) {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    throw std::runtime_error(prefix + what + " (the previous file, if any, is unchanged)");
  };

  std::string error;
  {
    FdStreamBuf buf(fd);
    std::ostream os(&buf);
    try {
      write(os);
      os.flush();
    } catch (const std::exception& e) {
      error = e.what();
    } catch (...) {
      error = "unknown exception";
    }
    if (buf.error()) error = "write failed: " + errno_text(buf.error()) + (error.empty() ? "" : " (" + error + ")");
    else if (error.empty() && !os) error = "the output stream failed";
  }
  if (!error.empty()) give_up(error);
  if (::fsync(fd) != 0) give_up("fsync failed: " + errno_text(errno));
  const int closed = ::close(fd);
  fd = -1;
  if (closed != 0) give_up("close failed: " + errno_text(errno));
  if (::rename(tmp.c_str(), path.c_str()) != 0) give_up("renaming '" + tmp + "' failed: " + errno_text(errno));
  // Make the rename durable. Best effort: the new file is already in place, and some file systems
  // do not support fsync on a directory.
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)::fsync(dfd);
    ::close(dfd);
  }
}

// ---------------------------------------------------------------------------------------------------
// save / load

void save(const StateDict& state_dict, const std::string& path) {
  check_defined(state_dict, " (nothing written to '" + path + "')");
  write_file_atomically(path, [&](std::ostream& os) { write_checkpoint(state_dict, os); }, "nn::save");
}

void save(const StateDict& state_dict, std::ostream& stream) { write_checkpoint(state_dict, stream); }

void save(Module& module, const std::string& path) { save(module.state_dict(), path); }
void save(Module& module, std::ostream& stream) { save(module.state_dict(), stream); }

void save(const ModulePtr& module, const std::string& path) {
  if (!module) throw std::invalid_argument("[nn::save] the module is null (path '" + path + "')");
  save(*module, path);
}
void save(const ModulePtr& module, std::ostream& stream) {
  if (!module) throw std::invalid_argument("[nn::save] the module is null");
  save(*module, stream);
}

StateDict load_state_dict_file(const std::string& path) {
  std::ifstream f;
  const auto size = open_for_reading(f, path, "nn::load_state_dict_file");
  return CheckpointReader(f, "'" + path + "'", size).read(/*require_eof=*/true);
}

StateDict load_state_dict_file(std::istream& stream) {
  return CheckpointReader(stream, "<stream>", remaining_in(stream)).read(/*require_eof=*/false);
}

IncompatibleKeys load(Module& module, const std::string& path, bool strict) {
  return module.load_state_dict(load_state_dict_file(path), strict);
}
IncompatibleKeys load(Module& module, std::istream& stream, bool strict) {
  return module.load_state_dict(load_state_dict_file(stream), strict);
}
IncompatibleKeys load(const ModulePtr& module, const std::string& path, bool strict) {
  if (!module) throw std::invalid_argument("[nn::load] the module is null (path '" + path + "')");
  return load(*module, path, strict);
}
IncompatibleKeys load(const ModulePtr& module, std::istream& stream, bool strict) {
  if (!module) throw std::invalid_argument("[nn::load] the module is null");
  return load(*module, stream, strict);
}

}  // namespace troupe::nn
