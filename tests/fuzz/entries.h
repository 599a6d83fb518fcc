// The fuzz entry points: one function per decoder of bytes that come from outside the process (files a
// user names, messages from other ranks, a peer's handshake). libFuzzer's targets (fuzz_main.cpp, built
// by scripts/fuzz.sh with clang) and the replay test of the normal build (replay.cpp) call the same ones.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace troupe::fuzz {

/// One decoder under test. `run` feeds it `data` and returns true when the bytes decoded, false when
/// the decoder rejected them with its own error (std::runtime_error and kin, with a message). Anything
/// else is a finding: a crash, a sanitizer report, std::bad_alloc / std::length_error (an allocation
/// sized by what the bytes claim) or any other exception escaping `run`.
struct Entry {
  /// The target's name: fuzz_<name> and tests/fuzz/corpus/<name>/.
  const char* name;
  /// What it decodes.
  const char* what;
  bool (*run)(const uint8_t* data, size_t size);
  /// Small inputs that must decode (true) or be rejected (false): the seed corpus (replay --make-seeds).
  std::vector<std::pair<std::string, std::string>> (*seeds)();
};

/// The entry points of each part (entries_data.cpp, entries_metrics.cpp, entries_actors.cpp,
/// entries_jit.cpp): a libFuzzer target links only its part's libraries.
std::vector<Entry> data_entries();
std::vector<Entry> metrics_entries();
std::vector<Entry> actors_entries();
std::vector<Entry> jit_entries();
/// Every entry point (entries.cpp).
const std::vector<Entry>& entries();
/// The entry called `name`, or null.
const Entry* find(std::string_view name);

}  // namespace troupe::fuzz
