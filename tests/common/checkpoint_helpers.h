// Helpers shared by the checkpoint tests (serialize_test.cpp, safetensors_test.cpp): a temporary
// directory, whole-file reads and writes, exact tensor comparison, error-message checks, a file-size
// limit that makes writes fail, and the small MLP of the PyTorch interop fixture.
#pragma once

#include <gtest/gtest.h>

#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include <troupe/nn/module.h>
#include <troupe/tensor/ops.h>

namespace troupe::testing {

/// A fresh directory under the system temp directory, removed with its contents on destruction.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "troupe_ckpt_XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  /// `name` inside the directory.
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  /// The names of the files in the directory, sorted.
  std::vector<std::string> listing() const {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(path_)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

inline std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot read " + path);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

inline void write_bytes(const std::string& path, const std::string& bytes) {
  // a new file rather than a truncated one: ext4 flushes a file truncated and rewritten on close
  std::error_code ec;
  std::filesystem::remove(path, ec);
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!f) throw std::runtime_error("cannot write " + path);
}

/// The row-major bytes of a tensor (a CPU contiguous copy).
inline std::string data_bytes(const Tensor& t) {
  Tensor c = t.detach().cpu().contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()), c.nbytes());
}

/// Same dtype, same sizes and the same bytes (so NaN payloads and -0.0 count).
inline ::testing::AssertionResult identical(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype())
    return ::testing::AssertionFailure() << "dtype " << a.dtype() << " vs " << b.dtype();
  if (a.sizes().vec() != b.sizes().vec()) return ::testing::AssertionFailure() << "sizes differ";
  if (data_bytes(a) != data_bytes(b)) return ::testing::AssertionFailure() << "data differs";
  return ::testing::AssertionSuccess();
}

/// Runs f, which must throw an exception of type E whose message contains every one of `parts`.
template <class E = std::runtime_error, class F>
void expect_error(F&& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "expected an exception containing: " << (parts.empty() ? "" : parts[0]);
  } catch (const E& e) {
    for (const auto& p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << "message: " << e.what() << "\nwanted: " << p;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type, message: " << e.what();
  }
}

/// While alive, writes past `bytes` in any file fail with EFBIG (RLIMIT_FSIZE, SIGXFSZ ignored).
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    ::getrlimit(RLIMIT_FSIZE, &old_);
    old_handler_ = ::signal(SIGXFSZ, SIG_IGN);
    rlimit lim = old_;
    lim.rlim_cur = bytes;
    ::setrlimit(RLIMIT_FSIZE, &lim);
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &old_);
    ::signal(SIGXFSZ, old_handler_);
  }

 private:
  rlimit old_{};
  sighandler_t old_handler_;
};

/// y = x @ weight.T + bias, with parameters named as torch.nn.Linear's (no nn::Linear needed).
struct TinyLinear : nn::Module {
  Tensor weight, bias;
  TinyLinear(int64_t in, int64_t out) : nn::Module("Linear") {
    weight = register_parameter("weight", zeros({out, in}));
    bias = register_parameter("bias", zeros({out}));
  }
  Tensor forward(const Tensor& x) override { return x.matmul(weight.t()) + bias; }
};

/// nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3)): children "0" and "2" as in PyTorch.
struct TinyMlp : nn::Module {
  std::shared_ptr<TinyLinear> l0, l2;
  TinyMlp() : nn::Module("Sequential") {
    l0 = register_module("0", std::make_shared<TinyLinear>(4, 8));
    l2 = register_module("2", std::make_shared<TinyLinear>(8, 3));
  }
  Tensor forward(const Tensor& x) override { return (*l2)((*l0)(x).relu()); }
};

}  // namespace troupe::testing
