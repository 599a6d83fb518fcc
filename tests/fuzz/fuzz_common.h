// Shared by the fuzz entry points (entries_*.cpp): the guard that tells a decoder's own error from a
// finding, and scratch files for decoders that read paths.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <new>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "entries.h"

namespace troupe::fuzz {

using Seeds = std::vector<std::pair<std::string, std::string>>;

/// Runs a decoder: true when it returned, false when it threw its own error. Its own errors are
/// troupe's ("[function] what was wrong"): an exception without that prefix (std::stoi's "stoi",
/// basic_string::substr's range error) escaped from an unchecked step and is a finding, as are
/// std::bad_alloc and std::length_error (an allocation sized by the input).
template <class F>
bool guarded(F&& decode) {
  try {
    decode();
    return true;
  } catch (const std::bad_alloc&) {
    throw;
  } catch (const std::length_error&) {
    throw;
  } catch (const std::exception& e) {
    if (e.what()[0] != '[') {
      std::fprintf(stderr, "fuzz: an error without troupe's \"[function] ...\" prefix escaped: %s\n", e.what());
      std::abort();
    }
    return false;
  }
}

inline std::string bytes_of(const uint8_t* data, size_t size) { return std::string(reinterpret_cast<const char*>(data), size); }

/// A scratch folder of this process (removed at exit).
inline const std::filesystem::path& scratch() {
  static const std::filesystem::path dir = [] {
    auto d = std::filesystem::temp_directory_path() / ("troupe-fuzz-" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(std::filesystem::temp_directory_path() /
                                      ("troupe-fuzz-" + std::to_string(::getpid())),
                                  ec);
    });
    return d;
  }();
  return dir;
}

inline std::string write_file(const std::string& name, std::string_view bytes) {
  const std::string path = (scratch() / name).string();
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return path;
}

inline void put_u32le(std::string& s, uint32_t v) {
  for (int i = 0; i < 4; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
inline void put_u32be(std::string& s, uint32_t v) {
  for (int i = 3; i >= 0; --i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

}  // namespace troupe::fuzz
