// One libFuzzer target: LLVMFuzzerTestOneInput calls the entry named TROUPE_FUZZ_ENTRY of the part
// TROUPE_FUZZ_PART (data_entries, metrics_entries or actors_entries: the target links only that part).
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "entries.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const troupe::fuzz::Entry* entry = [] {
    static const std::vector<troupe::fuzz::Entry> part = troupe::fuzz::TROUPE_FUZZ_PART();
    const troupe::fuzz::Entry* e = nullptr;
    for (const auto& candidate : part)
      if (std::string_view(candidate.name) == TROUPE_FUZZ_ENTRY) e = &candidate;
    if (!e) {
      std::fprintf(stderr, "fuzz: no entry point named '%s'\n", TROUPE_FUZZ_ENTRY);
      std::abort();
    }
    return e;
  }();
  entry->run(data, size);  // an exception other than a decoder's own error escapes: libFuzzer reports it
  return 0;
}
