// Fuzz entry point over TorchScript archives (jit::load from a stream): the zip directory and records
// (libzip), the pickles (data.pkl, constants.pkl), the tensor storages and the code files' forward.
// Byte 0 picks the mode: odd = the CRC-32 of every stored record is recomputed into its local and central
// headers (so that mutations of data.pkl, the storages and stored code reach troupe's readers behind
// libzip's check), even = the bytes as they are.
#include "fuzz_common.h"

#include <zip.h>

#include <array>
#include <sstream>

#include <troupe/jit/jit.h>
#include <troupe/nn/nn.h>
#include <troupe/tensor/ops.h>

namespace troupe::fuzz {
namespace {

// A two-layer module with a child of its own: data.pkl nests objects, code/ holds three classes.
struct Small : nn::Module {
  Small() {
    fc1 = register_module("fc1", std::make_shared<nn::LinearImpl>(3, 4));
    fc2 = register_module("fc2", std::make_shared<nn::LinearImpl>(4, 2));
  }
  Tensor forward(const Tensor& x) override { return (*fc2)(troupe::relu((*fc1)(x))); }
  std::shared_ptr<nn::LinearImpl> fc1, fc2;
};

uint32_t crc32(const char* p, size_t n) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xedb88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  uint32_t c = 0xffffffffu;
  for (size_t i = 0; i < n; ++i) c = table[(c ^ static_cast<uint8_t>(p[i])) & 0xff] ^ (c >> 8);
  return c ^ 0xffffffffu;
}
uint32_t get_le(const std::string& z, size_t at, int bytes) {
  uint32_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(z[at + static_cast<size_t>(i)]);
  return v;
}
void set_u32le(std::string& z, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) z[at + static_cast<size_t>(i)] = static_cast<char>((v >> (8 * i)) & 0xff);
}

// Recomputes the CRC-32 of each stored (method 0) record from its bytes, where the headers are in range.
void fix_stored_crcs(std::string& z) {
  if (z.size() < 22) return;
  size_t eocd = std::string::npos;
  for (size_t i = z.size() - 22 + 1; i-- > 0 && z.size() - i <= 22 + 65535;)
    if (get_le(z, i, 4) == 0x06054b50u) { eocd = i; break; }
  if (eocd == std::string::npos) return;
  const uint32_t entries = get_le(z, eocd + 10, 2);
  size_t cd = get_le(z, eocd + 16, 4);
  for (uint32_t e = 0; e < entries; ++e) {
    if (cd + 46 > z.size() || get_le(z, cd, 4) != 0x02014b50u) return;
    const uint32_t method = get_le(z, cd + 10, 2), comp = get_le(z, cd + 20, 4);
    const size_t local = get_le(z, cd + 42, 4);
    const size_t next = cd + 46 + get_le(z, cd + 28, 2) + get_le(z, cd + 30, 2) + get_le(z, cd + 32, 2);
    if (method == 0 && local + 30 <= z.size() && get_le(z, local, 4) == 0x04034b50u) {
      const size_t begin = local + 30 + get_le(z, local + 26, 2) + get_le(z, local + 28, 2);
      if (begin + comp <= z.size()) {
        const uint32_t crc = crc32(z.data() + begin, comp);
        set_u32le(z, local + 14, crc);
        set_u32le(z, cd + 16, crc);
      }
    }
    cd = next;
  }
}

bool run_jit_archive(const uint8_t* data, size_t size) {
  if (size == 0) return false;
  std::string archive = bytes_of(data + 1, size - 1);
  if (data[0] & 1) fix_stored_crcs(archive);
  return guarded([&] {
    std::istringstream in(archive);
    jit::ExtraFilesMap extra{{"notes.txt", ""}};
    (void)jit::load(in, extra);
  });
}

Seeds seeds_jit_archive() {
  auto traced = jit::trace(std::make_shared<Small>(), ones({2, 3}), /*check_trace=*/false);
  const std::string path = (scratch() / "small.pt").string();
  traced->save(path, {{"notes.txt", "seed"}});
  const auto read = [](const std::string& p) {
    std::ifstream f(p, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  };
  const std::string ok = read(path);
  // the same archive with its code stored too (libzip rewrites the deflated records), for the CRC mode
  int err = 0;
  zip_t* za = zip_open(path.c_str(), 0, &err);
  if (!za) throw std::runtime_error("[fuzz] cannot reopen " + path);
  for (zip_int64_t i = 0; i < zip_get_num_entries(za, 0); ++i)
    zip_set_file_compression(za, static_cast<zip_uint64_t>(i), ZIP_CM_STORE, 0);
  if (zip_close(za) != 0) throw std::runtime_error("[fuzz] cannot rewrite " + path);
  const std::string stored = read(path);
  // data.pkl's first opcode after PROTO 2 changed (GLOBAL 'c' -> '#'), its CRC recomputed by the mode byte
  std::string flipped = stored;
  const size_t local = flipped.rfind("PK\x03\x04", flipped.find("data.pkl"));
  const size_t begin = local + 30 + get_le(flipped, local + 26, 2) + get_le(flipped, local + 28, 2);
  flipped[begin + 2] ^= 0x40;
  const std::string even(1, '\0'), odd(1, '\1');
  return {{"ok-small-traced", even + ok},
          {"ok-small-stored-crc", odd + stored},
          {"bad-truncated", even + ok.substr(0, ok.size() / 2)},
          {"bad-pickle-opcode", odd + flipped},
          {"bad-empty", ""}};
}

}  // namespace

std::vector<Entry> jit_entries() {
  return {{"jit_archive", "TorchScript archives (jit::load from a stream)", run_jit_archive, seeds_jit_archive}};
}

}  // namespace troupe::fuzz
