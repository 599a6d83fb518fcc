// ScriptModule::save / jit::load: round trips with extra files (forward and gradients equal the original's,
// without the C++ class), truncated and corrupt archives (a clear error, nothing returned), and PyTorch
// 1.13's archives (tests/fixtures/jit_*_torch.pt, written by tests/fixtures/gen_jit.py).
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <troupe/jit/jit.h>
#include <troupe/nn/nn.h>
#include <troupe/tensor/random.h>

#include "common/fixtures.h"
#include "jit_models.h"

namespace troupe::jit {
namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("troupe_jit_" + std::to_string(::getpid()) + "_" + name)).string();
}

std::string read_file(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}
void write_file(const std::string& p, const std::string& bytes) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << bytes;
}

// io.txt of the fixtures: `x <shape> <hex floats>` and `y ...`.
std::map<std::string, Tensor> parse_io(const std::string& text) {
  std::map<std::string, Tensor> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string name, shape, v;
    ls >> name >> shape;
    std::vector<int64_t> sizes;
    std::stringstream ss(shape);
    std::string d;
    while (std::getline(ss, d, 'x')) sizes.push_back(std::stoll(d));
    std::vector<float> vals;
    while (ls >> v) vals.push_back(static_cast<float>(std::strtod(v.c_str(), nullptr)));
    out[name] = tensor(vals).reshape(sizes);
  }
  return out;
}

std::string io_text(const Tensor& x, const Tensor& y) {
  auto line = [](const char* name, const Tensor& t) {
    std::string s = name;
    s += " ";
    for (int64_t i = 0; i < t.dim(); ++i) s += (i ? "x" : "") + std::to_string(t.size(i));
    Tensor c = t.detach().contiguous().to(kFloat64);
    char buf[64];
    for (int64_t i = 0; i < c.numel(); ++i) {
      std::snprintf(buf, sizeof buf, " %a", c.data_ptr<double>()[i]);
      s += buf;
    }
    return s + "\n";
  };
  return line("x", x) + line("y", y);
}

TEST(Archive, RoundTripForwardBackwardAndExtraFiles) {
  default_generator().manual_seed(0);
  auto net = std::make_shared<troupe::testing::Conv>();
  Tensor x = randn({2, 1, 8, 8});
  auto traced = trace(net, x, /*check_trace=*/false);  // train mode: BatchNorm updates, dropout draws
  const std::string path = temp_path("conv.pt");
  traced->save(path, {{"notes.txt", "hello"}, {"bin", std::string("\0\1\2", 3)}});
  ExtraFilesMap extra{{"notes.txt", ""}, {"bin", ""}, {"absent", "kept"}};
  auto loaded = load(path, extra);
  EXPECT_EQ(extra["notes.txt"], "hello");
  EXPECT_EQ(extra["bin"], std::string("\0\1\2", 3));
  EXPECT_EQ(extra["absent"], "kept");
  EXPECT_EQ(loaded->name(), "Conv");
  EXPECT_EQ(loaded->named_parameters().keys(), traced->named_parameters().keys());
  EXPECT_EQ(loaded->named_buffers().keys(), traced->named_buffers().keys());
  EXPECT_TRUE(loaded->is_training());
  for (const auto& [k, b] : traced->named_buffers()) EXPECT_TRUE(equal(b, loaded->named_buffers()[k])) << k;
  // one training step on each: same outputs, gradients and buffers, bit for bit
  auto step = [&](ScriptModule& m) {
    m.zero_grad();
    default_generator().manual_seed(3);
    Tensor y = m.forward(x);
    (y * y).sum().backward();
    return y.detach();
  };
  Tensor y1 = step(*traced), y2 = step(*loaded);
  EXPECT_TRUE(equal(y1, y2));
  for (const auto& [k, p] : traced->named_parameters())
    EXPECT_TRUE(equal(p.grad(), loaded->named_parameters()[k].grad())) << k;
  for (const auto& [k, b] : traced->named_buffers()) EXPECT_TRUE(equal(b, loaded->named_buffers()[k])) << k;
  // the loaded module saves again and loads the same
  const std::string again = temp_path("again.pt");
  loaded->save(again);
  auto loaded2 = load(again);
  loaded->eval();
  loaded2->eval();
  EXPECT_EQ(loaded2->code(), loaded->code());
  std::remove(path.c_str());
  std::remove(again.c_str());
}

TEST(Archive, SaveIsAtomic) {
  auto t = trace(std::make_shared<troupe::testing::MLP>(), randn({16, 32}));
  const std::string path = temp_path("atomic.pt");
  write_file(path, "old contents");
  EXPECT_THROW(t->save(temp_path("no_such_dir/x/y.pt")), std::runtime_error);
  t->save(path);
  EXPECT_NE(read_file(path), "old contents");
  for (const auto& e : std::filesystem::directory_iterator(std::filesystem::temp_directory_path()))
    EXPECT_EQ(e.path().string().find(path + ".tmp"), std::string::npos) << "left behind: " << e.path();
  std::remove(path.c_str());
}

TEST(Archive, TruncatedAndCorruptArchivesFailClearly) {
  auto t = trace(std::make_shared<troupe::testing::MLP>(), randn({16, 32}));
  const std::string path = temp_path("good.pt");
  t->save(path);
  const std::string good = read_file(path);
  const std::string bad = temp_path("bad.pt");
  auto expect_error = [&](const std::string& bytes, const std::string& needle) {
    write_file(bad, bytes);
    try {
      load(bad);
      ADD_FAILURE() << "loaded a damaged archive (" << needle << ")";
    } catch (const std::runtime_error& e) {
      const std::string msg = e.what();
      EXPECT_EQ(msg.rfind("[jit::load] " + bad, 0), 0u) << msg;
      EXPECT_NE(msg.find(needle), std::string::npos) << msg;
    }
  };
  expect_error(good.substr(0, good.size() / 2), "not a readable TorchScript archive");
  expect_error(good.substr(0, 10), "not a readable TorchScript archive");
  expect_error("", "not a readable TorchScript archive");
  // a zip with no records (only its end-of-directory record): refused, and the open archive is released
  // (it leaked when the reader's constructor threw; ASan's leak check caught it)
  expect_error(std::string("PK\x05\x06") + std::string(18, '\0'), "the archive is empty");
  // flip a byte inside the first stored tensor (data/0): the CRC catches it
  std::string corrupt = good;
  const size_t at = corrupt.find("data/0");
  ASSERT_NE(at, std::string::npos);
  corrupt[at + 6 + 30 + 4] ^= 0x5a;  // past the local header's name, into the data
  expect_error(corrupt, "failed");
  std::remove(path.c_str());
  std::remove(bad.c_str());
}

TEST(Archive, LoadsFromAStreamAsFromAPath) {
  // torch::jit::load(std::istream&): the same module as from the file; a damaged stream fails naming "the
  // archive in memory (<n> bytes)"
  const std::string path = troupe::testing::fixtures_dir() + "/jit_mlp_torch.pt";
  ExtraFilesMap extra{{"io.txt", ""}};
  std::ifstream in(path, std::ios::binary);
  auto m = load(in, extra);
  auto io = parse_io(extra["io.txt"]);
  EXPECT_TRUE(allclose(m->forward(io.at("x")), io.at("y"), 1e-5, 1e-6));
  EXPECT_EQ(m->code(), load(path)->code());
  const std::string good = read_file(path);
  // a truncated archive, and no bytes at all
  for (const auto& [bytes, text] : {std::pair<std::string, std::string>{good.substr(0, good.size() / 2), "[jit::load] the archive in memory (" + std::to_string(good.size() / 2) + " bytes) is not a readable TorchScript archive"},
                                    {std::string(), "[jit::load] the archive in memory (0 bytes) is empty"}}) {
    std::istringstream bad(bytes);
    try {
      load(bad);
      ADD_FAILURE() << "loaded a damaged archive of " << bytes.size() << " bytes";
    } catch (const std::runtime_error& e) {
      EXPECT_EQ(std::string(e.what()).rfind(text, 0), 0u) << e.what();
    }
  }
}

TEST(Archive, LoadsPyTorchTracedMlpAndConvNet) {
  for (const char* name : {"jit_mlp_torch.pt", "jit_conv_torch.pt"}) {
    SCOPED_TRACE(name);
    ExtraFilesMap extra{{"io.txt", ""}};
    auto m = load(troupe::testing::fixtures_dir() + "/" + name, extra);
    auto io = parse_io(extra["io.txt"]);
    Tensor y = m->forward(io.at("x"));
    EXPECT_TRUE(allclose(y, io.at("y"), 1e-5, 1e-6)) << y << "\n" << io.at("y");
    // and it trains: gradients reach every parameter
    y.sum().backward();
    for (const auto& [k, p] : m->named_parameters()) EXPECT_TRUE(p.grad().defined()) << k;
  }
}

TEST(Archive, PyTorchArchiveWithAnOpTroupeLacksNamesIt) {
  try {
    load(troupe::testing::fixtures_dir() + "/jit_abs_torch.pt");
    FAIL();
  } catch (const std::runtime_error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("aten::abs, an op troupe does not have"), std::string::npos) << msg;
  }
}

TEST(Archive, WritesAnArchiveForPyTorch) {
  // The conv net saved with its input and output; gen_jit.py --check-troupe loads it in PyTorch 1.13.
  default_generator().manual_seed(0);
  auto net = std::make_shared<troupe::testing::Conv>();
  net->eval();  // traced in eval mode: BatchNorm's running statistics, no dropout
  auto t = trace(net, randn({2, 1, 8, 8}));
  Tensor x = randn({2, 1, 8, 8});
  Tensor y = t->forward(x);
  const char* dir = std::getenv("TROUPE_JIT_EXPORT");
  const std::string path = dir ? std::string(dir) + "/troupe_conv.pt" : temp_path("troupe_conv.pt");
  t->save(path, {{"io.txt", io_text(x, y)}});
  auto back = load(path);
  EXPECT_TRUE(equal(back->forward(x), y));
  if (!dir) std::remove(path.c_str());
}

// save(std::ostream&) / load(std::istream&): the bytes a file would hold, records under archive/; a file
// saved by path loads from its bytes too; damaged bytes fail naming the archive in memory.
TEST(Archive, StreamRoundTripAndDamagedBytes) {
  default_generator().manual_seed(3);
  auto net = std::make_shared<troupe::testing::MLP>();
  Tensor x = randn({4, 32});
  ScriptModulePtr t = trace(net, x);
  std::ostringstream out;
  t->save(out, {{"notes.txt", "v2"}});
  const std::string bytes = out.str();
  ASSERT_GT(bytes.size(), 100u);
  EXPECT_NE(bytes.find("archive/data.pkl"), std::string::npos);
  std::istringstream in(bytes);
  ExtraFilesMap extra{{"notes.txt", ""}};
  ScriptModulePtr back = load(in, extra);
  EXPECT_EQ(extra["notes.txt"], "v2");
  EXPECT_TRUE(equal(back->forward(x), t->forward(x)));
  const std::string path = temp_path("stream.pt");
  t->save(path);
  std::istringstream from_file(read_file(path));
  EXPECT_TRUE(equal(load(from_file)->forward(x), t->forward(x)));
  std::remove(path.c_str());
  for (size_t keep : {size_t{0}, size_t{10}, bytes.size() / 2, bytes.size() - 1}) {
    std::istringstream cut(bytes.substr(0, keep));
    try {
      load(cut);
      FAIL() << "loaded " << keep << " of " << bytes.size() << " bytes";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("[jit::load] the archive in memory (" + std::to_string(keep) + " bytes)"),
                std::string::npos)
          << e.what();
    }
  }
}

// A Sequential's children are named "0", "1", ...: code() reads them as PyTorch writes them
// (`_0 = getattr(self, "0")`), the class block declares them as `__annotations__["0"] = ...` (code is
// stored deflated, so that line is checked by loading), and the archive loads back (PyTorch 1.13 loads it too: bench/jit_bench runs torch::jit::load on such archives).
TEST(Archive, SequentialChildrenWithNumericNames) {
  default_generator().manual_seed(4);
  auto net = std::make_shared<nn::SequentialImpl>(std::make_shared<nn::LinearImpl>(3, 5), std::make_shared<nn::ReLUImpl>(),
                                                  std::make_shared<nn::LinearImpl>(5, 2));
  Tensor x = randn({4, 3});
  ScriptModulePtr t = trace(net, x);
  const std::string code = t->code();
  EXPECT_NE(code.find("_0 = getattr(self, \"0\")"), std::string::npos) << code;
  EXPECT_EQ(code.find("self.0"), std::string::npos) << code;
  std::ostringstream out;
  t->save(out);
  std::istringstream in(out.str());
  ScriptModulePtr back = load(in);
  EXPECT_EQ(back->named_children().keys(), (std::vector<std::string>{"0", "1", "2"}));
  EXPECT_TRUE(equal(back->forward(x), t->forward(x)));
}

}  // namespace
}  // namespace troupe::jit
