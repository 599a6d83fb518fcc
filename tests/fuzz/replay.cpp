// fuzz_replay: runs every committed input of tests/fuzz/corpus/<entry>/ through its entry point, in the
// normal (gcc) build, so that CI exercises the fuzz targets without clang. An input named ok-* must
// decode, bad-* must be rejected with the decoder's own error, any other (crash-*, a finding kept as a
// regression input) must only not crash.
//   fuzz_replay CORPUS_DIR              replay (exit 1 on a failed expectation; a crash aborts)
//   fuzz_replay --make-seeds CORPUS_DIR write each entry's seeds (entries.cpp) as files
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "entries.h"

namespace fs = std::filesystem;

int main(int argc, char** argv) {
  const bool make = argc == 3 && std::strcmp(argv[1], "--make-seeds") == 0;
  if (!(argc == 2 || make)) {
    std::fprintf(stderr, "usage: fuzz_replay [--make-seeds] CORPUS_DIR\n");
    return 2;
  }
  const fs::path root = argv[argc - 1];
  if (make) {
    for (const auto& e : troupe::fuzz::entries()) {
      fs::create_directories(root / e.name);
      for (const auto& [name, bytes] : e.seeds()) {
        std::ofstream(root / e.name / name, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
      }
      std::printf("fuzz_replay: %zu seeds -> %s\n", e.seeds().size(), (root / e.name).c_str());
    }
    return 0;
  }
  int passed = 0, failed = 0;
  for (const auto& e : troupe::fuzz::entries()) {
    const fs::path dir = root / e.name;
    std::vector<fs::path> files;
    if (fs::is_directory(dir))
      for (const auto& f : fs::directory_iterator(dir))
        if (f.is_regular_file()) files.push_back(f.path());
    std::sort(files.begin(), files.end());
    if (files.empty()) {
      std::printf("FAIL %s: no inputs in %s\n", e.name, dir.c_str());
      ++failed;
      continue;
    }
    int accepted = 0;
    for (const auto& path : files) {
      std::ifstream in(path, std::ios::binary);
      const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      const bool ok = e.run(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
      accepted += ok;
      const std::string name = path.filename().string();
      const bool want_ok = name.rfind("ok-", 0) == 0, want_bad = name.rfind("bad-", 0) == 0;
      if ((want_ok && !ok) || (want_bad && ok)) {
        std::printf("FAIL %s/%s: %s, expected %s\n", e.name, name.c_str(), ok ? "decoded" : "rejected",
                    want_ok ? "to decode" : "a rejection");
        ++failed;
      } else {
        ++passed;
      }
    }
    std::printf("%-14s %3zu inputs, %zu decoded, %zu rejected: %s\n", e.name, files.size(), size_t(accepted),
                files.size() - size_t(accepted), e.what);
  }
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
