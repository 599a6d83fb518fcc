// troupe's checkpoint format (nn/serialize.h): round trips of every dtype and layout through files and
// streams, modules (torch.save(model.state_dict()) / model.load_state_dict(torch.load(...))), the byte
// layout, atomic writes that leave the previous file intact, and corrupt input: every truncation, byte
// flips, wrong magic, huge declared lengths, foreign, empty and missing files.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <troupe/nn/serialize.h>
#include <troupe/tensor/autograd.h>
#include <troupe/tensor/backend.h>
#include <troupe/tensor/ops.h>

#include "checkpoint_helpers.h"
#include "common/fixtures.h"

using namespace troupe;
using troupe::testing::data_bytes;
using troupe::testing::expect_error;
using troupe::testing::identical;
using troupe::testing::read_bytes;
using troupe::testing::TempDir;
using troupe::testing::write_bytes;

namespace {

/// A state_dict with every dtype, a 0-dim, an empty and a 3-D tensor.
nn::StateDict every_dtype() {
  nn::StateDict sd;
  sd.insert("f32", arange(6, TensorOptions().dtype(kFloat32)).reshape({2, 3}).mul(0.25).sub(0.5));
  sd.insert("f64", tensor({0.1, -2.5, 1e300}, TensorOptions().dtype(kFloat64)));
  sd.insert("f16", tensor({1.0, -2.0, 0.5, 65504.0}).to(kFloat16).reshape({2, 2}));
  sd.insert("bf16", tensor({1.0, -0.5, 3.0}).to(kBFloat16));
  sd.insert("i64", scalar_tensor(int64_t{1234567890123}, TensorOptions().dtype(kInt64)));
  sd.insert("i32", tensor(std::vector<int32_t>{-1, 0, 7, 2147483647}, kInt32));
  sd.insert("u8", tensor(std::vector<uint8_t>{0, 1, 2, 128, 254, 255}).reshape({2, 3}));
  sd.insert("mask", tensor({true, false, true, true, false}));
  sd.insert("empty", zeros({0, 3}));
  sd.insert("cube", arange(24, TensorOptions().dtype(kFloat64)).reshape({2, 3, 4}));
  return sd;
}

void expect_same_state(const nn::StateDict& got, const nn::StateDict& want) {
  ASSERT_EQ(got.keys(), want.keys());
  for (const auto& [name, t] : want) {
    const Tensor& g = got.at(name);
    EXPECT_TRUE(identical(g, t)) << name;
    EXPECT_TRUE(g.is_cpu()) << name;
    EXPECT_TRUE(g.is_contiguous()) << name;
    EXPECT_FALSE(g.requires_grad()) << name;
  }
}

/// Little-endian fields, for writing checkpoints by hand.
struct Bytes {
  std::string s;
  Bytes& raw(const std::string& b) { s += b; return *this; }
  template <class T>
  Bytes& le(T v) {
    for (size_t k = 0; k < sizeof(T); ++k) s += static_cast<char>((static_cast<uint64_t>(v) >> (8 * k)) & 0xff);
    return *this;
  }
  Bytes& u8(uint8_t v) { return le(v); }
  Bytes& u32(uint32_t v) { return le(v); }
  Bytes& u64(uint64_t v) { return le(v); }
  Bytes& i64(int64_t v) { return le(static_cast<uint64_t>(v)); }
  Bytes& name(const std::string& n) { return u64(n.size()).raw(n); }
  /// magic, endianness flag, version 1, count
  static Bytes header(uint64_t count) { return Bytes().raw("TROUPESD").u8(1).u32(1).u64(count); }
};

/// An istream over a string that cannot seek (tellg gives -1), like a pipe or socket.
class NoSeekBuf : public std::streambuf {
 public:
  explicit NoSeekBuf(std::string s) : s_(std::move(s)) { setg(s_.data(), s_.data(), s_.data() + s_.size()); }

 private:
  std::string s_;
};

nn::StateDict load_bytes(const std::string& bytes) {
  std::istringstream in(bytes);
  return nn::load_state_dict_file(in);
}

}  // namespace

// ---------------------------------------------------------------------------------------------------
// round trips

TEST(Serialize, FileRoundTripKeepsEveryDtypeShapeAndOrder) {
  TempDir dir;
  const auto sd = every_dtype();
  nn::save(sd, dir.file("model.pt"));
  expect_same_state(nn::load_state_dict_file(dir.file("model.pt")), sd);
  EXPECT_EQ(dir.listing(), std::vector<std::string>{"model.pt"});  // no temporary file left behind
}

TEST(Serialize, SpecialFloatsKeepTheirBits) {
  const double inf = std::numeric_limits<double>::infinity();
  nn::StateDict sd;
  sd.insert("d", tensor({std::nan(""), inf, -inf, -0.0, 5e-324}, TensorOptions().dtype(kFloat64)));
  sd.insert("f", tensor({std::nan(""), inf, -0.0, 1e-45}, TensorOptions().dtype(kFloat32)));
  sd.insert("h", tensor({std::nan(""), inf, -0.0, 6e-8}).to(kFloat16));
  std::stringstream ss;
  nn::save(sd, ss);
  expect_same_state(nn::load_state_dict_file(ss), sd);
}

TEST(Serialize, NonContiguousTensorsAreSavedAsTheirValues) {
  const Tensor base = arange(24, TensorOptions().dtype(kFloat32)).reshape({4, 6});
  nn::StateDict sd;
  sd.insert("transposed", base.t());
  sd.insert("strided", base.slice(1, 0, 6, 2));
  sd.insert("offset_row", base.select(0, 2));
  sd.insert("expanded", tensor({1.0f, 2.0f}).unsqueeze(1).expand({2, 3}));
  ASSERT_FALSE(sd.at("transposed").is_contiguous());
  std::stringstream ss;
  nn::save(sd, ss);
  const auto got = nn::load_state_dict_file(ss);
  for (const auto& [name, t] : sd) EXPECT_TRUE(identical(got.at(name), t.contiguous())) << name;
}

TEST(Serialize, TensorsThatRequireGradAreSavedWithoutAutograd) {
  nn::StateDict sd;
  sd.insert("w", ones({2, 2}).requires_grad_());
  std::stringstream ss;
  nn::save(sd, ss);
  const auto got = nn::load_state_dict_file(ss);
  EXPECT_FALSE(got.at("w").requires_grad());
  EXPECT_TRUE(identical(got.at("w"), ones({2, 2})));
}

TEST(Serialize, EmptyStateDict) {
  TempDir dir;
  nn::save(nn::StateDict{}, dir.file("empty.pt"));
  EXPECT_TRUE(nn::load_state_dict_file(dir.file("empty.pt")).empty());
}

TEST(Serialize, StreamHoldsSeveralCheckpointsBackToBack) {
  nn::StateDict a, b;
  a.insert("x", ones({3}));
  b.insert("y", zeros({2}, TensorOptions().dtype(kInt64)));
  std::stringstream ss;
  nn::save(a, ss);
  nn::save(b, ss);
  expect_same_state(nn::load_state_dict_file(ss), a);
  expect_same_state(nn::load_state_dict_file(ss), b);
}

TEST(Serialize, NonSeekableStream) {
  const auto sd = every_dtype();
  std::ostringstream out;
  nn::save(sd, out);
  NoSeekBuf buf(out.str());
  std::istream in(&buf);
  ASSERT_EQ(in.tellg(), std::istream::pos_type(-1));
  expect_same_state(nn::load_state_dict_file(in), sd);
}

TEST(Serialize, LargeTensorRoundTrip) {
  // 3 MB: the writer sends it past its buffer in one piece
  manual_seed(0);
  nn::StateDict sd;
  sd.insert("big", randn({768, 1024}));
  TempDir dir;
  nn::save(sd, dir.file("big.pt"));
  expect_same_state(nn::load_state_dict_file(dir.file("big.pt")), sd);
}

TEST(Serialize, CudaTensorsAreCopiedToTheHost) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  nn::StateDict sd;
  sd.insert("w", arange(6, TensorOptions().dtype(kFloat32)).reshape({2, 3}).cuda().t());
  sd.insert("m", tensor({true, false}).cuda());
  std::stringstream ss;
  nn::save(sd, ss);
  const auto got = nn::load_state_dict_file(ss);
  EXPECT_TRUE(got.at("w").is_cpu());
  EXPECT_TRUE(identical(got.at("w"), sd.at("w").cpu().contiguous()));
  EXPECT_TRUE(identical(got.at("m"), tensor({true, false})));
}

// ---------------------------------------------------------------------------------------------------
// modules

TEST(Serialize, ModuleSaveAndLoadRestoreParameters) {
  TempDir dir;
  manual_seed(0);
  auto model = std::make_shared<troupe::testing::TinyMlp>();
  for (auto& p : model->parameters()) {
    NoGradGuard g;
    p.normal_();
  }
  const auto saved = model->state_dict();
  nn::save(model, dir.file("mlp.pt"));

  auto other = std::make_shared<troupe::testing::TinyMlp>();
  const auto keys = nn::load(other, dir.file("mlp.pt"));
  EXPECT_TRUE(keys.missing_keys.empty());
  EXPECT_TRUE(keys.unexpected_keys.empty());
  EXPECT_EQ(other->state_dict().keys(), (std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"}));
  for (const auto& [name, t] : saved) EXPECT_TRUE(identical(other->state_dict().at(name), t)) << name;
  // the module's own parameter handles see the loaded values
  EXPECT_TRUE(identical(other->l0->weight, saved.at("0.weight")));
  EXPECT_TRUE(other->l0->weight.requires_grad());

  // and through a stream, with a Module&
  std::stringstream ss;
  nn::save(*model, ss);
  troupe::testing::TinyMlp third;
  nn::load(third, ss);
  EXPECT_TRUE(identical(third.l2->bias, saved.at("2.bias")));
}

TEST(Serialize, StrictLoadReportsMissingAndUnexpectedKeys) {
  TempDir dir;
  nn::StateDict partial;
  partial.insert("0.weight", ones({8, 4}));
  partial.insert("extra", ones({1}));
  nn::save(partial, dir.file("partial.pt"));
  auto model = std::make_shared<troupe::testing::TinyMlp>();
  expect_error([&] { nn::load(model, dir.file("partial.pt")); },
               {"Error(s) in loading state_dict for Sequential", "Missing key(s)", "\"0.bias\"",
                "Unexpected key(s)", "\"extra\""});
  const auto keys = nn::load(model, dir.file("partial.pt"), /*strict=*/false);
  EXPECT_EQ(keys.missing_keys, (std::vector<std::string>{"0.bias", "2.weight", "2.bias"}));
  EXPECT_EQ(keys.unexpected_keys, std::vector<std::string>{"extra"});
  EXPECT_TRUE(identical(model->l0->weight, ones({8, 4})));
}

TEST(Serialize, NullModuleIsAnError) {
  expect_error<std::invalid_argument>([] { nn::save(nn::ModulePtr(), "/tmp/never-written.pt"); },
                                      {"[nn::save] the module is null"});
}

// ---------------------------------------------------------------------------------------------------
// format

TEST(Serialize, ByteLayoutOfASmallCheckpoint) {
  nn::StateDict sd;
  sd.insert("w", tensor({1.0f, -2.0f}));
  sd.insert("n", scalar_tensor(int64_t{258}, TensorOptions().dtype(kInt64)));
  std::ostringstream out;
  nn::save(sd, out);
  const float one = 1.0f, minus_two = -2.0f;
  std::string fl(8, '\0');
  std::memcpy(fl.data(), &one, 4);
  std::memcpy(fl.data() + 4, &minus_two, 4);
  const std::string want = Bytes::header(2)
                               .name("w").u8(6).u32(1).i64(2).u64(8).raw(fl)
                               .name("n").u8(3).u32(0).u64(8).i64(258)
                               .s;
  EXPECT_EQ(out.str(), want);
  EXPECT_EQ(out.str().substr(0, 8), std::string(nn::kCheckpointMagic));
}

// ---------------------------------------------------------------------------------------------------
// atomic writes

TEST(Serialize, SaveReplacesAnExistingFile) {
  TempDir dir;
  nn::StateDict a, b;
  a.insert("a", ones({2}));
  b.insert("b", zeros({3}));
  nn::save(a, dir.file("m.pt"));
  nn::save(b, dir.file("m.pt"));
  expect_same_state(nn::load_state_dict_file(dir.file("m.pt")), b);
  EXPECT_EQ(dir.listing(), std::vector<std::string>{"m.pt"});
}

TEST(Serialize, WriterThatThrowsMidwayLeavesThePreviousFileIntact) {
  TempDir dir;
  const std::string path = dir.file("state.pt");
  write_bytes(path, "previous content");
  expect_error([&] {
    nn::write_file_atomically(path, [](std::ostream& os) {
      os << std::string(100000, 'x');  // past the write buffer: bytes reach the temporary file
      throw std::runtime_error("simulated failure");
    }, "nn::save");
  }, {"[nn::save] cannot write '" + path + "'", "simulated failure", "previous file"});
  EXPECT_EQ(read_bytes(path), "previous content");
  EXPECT_EQ(dir.listing(), std::vector<std::string>{"state.pt"});
}

TEST(Serialize, FailedWriteLeavesThePreviousFileIntact) {
  // The file-size limit makes write(2) fail with EFBIG once the temporary file reaches 4 KiB.
  TempDir dir;
  const std::string path = dir.file("state.pt");
  nn::StateDict old_sd, big;
  old_sd.insert("old", ones({4}));
  nn::save(old_sd, path);
  const std::string before = read_bytes(path);
  big.insert("big", zeros({100000}));
  {
    troupe::testing::FileSizeLimit limit(4096);
    expect_error([&] { nn::save(big, path); }, {"[nn::save] cannot write '" + path + "'", "File too large"});
  }
  EXPECT_EQ(read_bytes(path), before);
  EXPECT_EQ(dir.listing(), std::vector<std::string>{"state.pt"});
}

TEST(Serialize, UndefinedTensorIsRejectedBeforeWriting) {
  TempDir dir;
  const std::string path = dir.file("state.pt");
  write_bytes(path, "previous content");
  nn::StateDict sd;
  sd.insert("ok", ones({2}));
  sd.insert("none", Tensor());
  expect_error<std::invalid_argument>([&] { nn::save(sd, path); },
                                      {"[nn::save] state_dict entry 'none' is an undefined tensor (nothing written to '" + path + "')"});
  EXPECT_EQ(read_bytes(path), "previous content");
  EXPECT_EQ(dir.listing(), std::vector<std::string>{"state.pt"});
}

TEST(Serialize, FailingStreamIsAnError) {
  // a stream that accepts 20 bytes and then fails
  struct Full : std::streambuf {
    char buf[20];
    Full() { setp(buf, buf + sizeof(buf)); }
    int_type overflow(int_type) override { return traits_type::eof(); }
  } full;
  std::ostream os(&full);
  expect_error([&] { nn::save(every_dtype(), os); }, {"[nn::save] writing the checkpoint to the stream failed"});
}

TEST(Serialize, SaveIntoAMissingDirectoryNamesThePathAndTheCause) {
  TempDir dir;
  const std::string path = dir.file("no/such/dir/m.pt");
  expect_error([&] { nn::save(every_dtype(), path); }, {"[nn::save] cannot write '" + path + "'", "No such file or directory"});
}

// ---------------------------------------------------------------------------------------------------
// corrupt input

TEST(Serialize, MissingFile) {
  TempDir dir;
  const std::string path = dir.file("absent.pt");
  expect_error([&] { nn::load_state_dict_file(path); }, {"[nn::load_state_dict_file] cannot open '" + path + "'", "No such file or directory"});
}

TEST(Serialize, DirectoryIsNotACheckpoint) {
  TempDir dir;
  expect_error([&] { nn::load_state_dict_file(dir.path().string()); }, {"Is a directory"});
}

TEST(Serialize, EmptyFile) {
  TempDir dir;
  write_bytes(dir.file("e.pt"), "");
  expect_error([&] { nn::load_state_dict_file(dir.file("e.pt")); }, {dir.file("e.pt"), "empty file: not a troupe checkpoint"});
}

TEST(Serialize, ForeignFiles) {
  TempDir dir;
  write_bytes(dir.file("notes.txt"), "hello, this is a text file\n");
  expect_error([&] { nn::load_state_dict_file(dir.file("notes.txt")); },
               {dir.file("notes.txt"), "not a troupe checkpoint: it starts with bytes [68 65 6c 6c 6f 2c 20 74]"});
  write_bytes(dir.file("torch.pt"), std::string("PK\x03\x04", 4) + "archive/data.pkl");
  expect_error([&] { nn::load_state_dict_file(dir.file("torch.pt")); }, {"zip archive, as torch.save writes"});
  write_bytes(dir.file("short"), "abc");
  expect_error([&] { nn::load_state_dict_file(dir.file("short")); }, {"not a troupe checkpoint: it starts with bytes [61 62 63]"});
}

TEST(Serialize, HeaderErrors) {
  expect_error([] { load_bytes(Bytes().raw("TROUPESD").u8(0).u32(1).u64(0).s); }, {"<stream>", "bad endianness byte 0"});
  expect_error([] { load_bytes(Bytes().raw("TROUPESD").u8(1).u32(2).u64(0).s); },
               {"format version 2 is not supported (this build reads versions 1 to 1)"});
  expect_error([] { load_bytes(Bytes().raw("TROUPESD").u8(1).u32(0).u64(0).s); }, {"format version 0"});
}

TEST(Serialize, EntryErrors) {
  expect_error([] { load_bytes(Bytes::header(1).name("w").u8(9).u32(0).u64(4).raw("abcd").s); },
               {"entry 0 of 1 'w': unknown dtype code 9"});
  expect_error([] { load_bytes(Bytes::header(1).name("w").u8(6).u32(1).i64(-2).u64(0).s); },
               {"entry 0 of 1 'w': negative size -2 in dimension 0"});
  expect_error([] { load_bytes(Bytes::header(1).name("w").u8(6).u32(1).i64(2).u64(4).raw("abcd").s); },
               {"entry 0 of 1 'w': data length 4 bytes does not match shape [2] of float32 (8 bytes)"});
  expect_error([] { load_bytes(Bytes::header(1).name("w").u8(6).u32(65).s); }, {"65 dimensions (at most 64)"});
  expect_error([] {
    load_bytes(Bytes::header(2).name("w").u8(1).u32(0).u64(1).raw("a").name("w").u8(1).u32(0).u64(1).raw("b").s);
  }, {"entry 1 of 2 'w': duplicate name"});
  expect_error([] { load_bytes(Bytes::header(1).name("m").u8(0).u32(1).i64(3).u64(3).raw(std::string("\x01\x00\x02", 3)).s); },
               {"'m': bool element 2 holds byte 2 (expected 0 or 1)"});
}

TEST(Serialize, TrailingBytesInAFile) {
  TempDir dir;
  std::ostringstream out;
  nn::save(every_dtype(), out);
  write_bytes(dir.file("t.pt"), out.str() + "junk");
  expect_error([&] { nn::load_state_dict_file(dir.file("t.pt")); }, {"4 unexpected bytes after the last entry"});
}

TEST(Serialize, HugeDeclaredLengthsAreRejectedBeforeAllocating) {
  // a name of 2^60 bytes
  expect_error([] { load_bytes(Bytes::header(1).u64(uint64_t{1} << 60).s); },
               {"entry 0 of 1: name length 1152921504606846976 exceeds the limit of 1048576 bytes"});
  // 2^40 float32 elements (4 TiB) declared, 8 bytes present
  const std::string huge = Bytes::header(1).name("w").u8(6).u32(1).i64(int64_t{1} << 40).u64(uint64_t{1} << 42).raw("12345678").s;
  expect_error([&] { load_bytes(huge); },
               {"truncated: entry 0 of 1 'w': the data needs 4398046511104 bytes but only 8 remain"});
  {
    NoSeekBuf buf(huge);  // unknown length: read in bounded chunks until the data runs out
    std::istream in(&buf);
    expect_error([&] { nn::load_state_dict_file(in); }, {"truncated: the file ends inside entry 0 of 1 'w': the data"});
  }
  // a shape whose element count overflows
  expect_error([] { load_bytes(Bytes::header(1).name("w").u8(6).u32(2).i64(int64_t{1} << 62).i64(int64_t{1} << 62).u64(0).s); },
               {"shape [4611686018427387904, 4611686018427387904] has more elements than fit in memory"});
  // a count of 2^63 entries with nothing after it
  expect_error([] { load_bytes(Bytes::header(uint64_t{1} << 63).s); }, {"truncated: entry 0 of 9223372036854775808"});
}

TEST(Serialize, EveryTruncationGivesAClearError) {
  TempDir dir;
  nn::StateDict sd;
  sd.insert("weight", arange(6, TensorOptions().dtype(kFloat32)).reshape({2, 3}));
  sd.insert("steps", scalar_tensor(int64_t{7}, TensorOptions().dtype(kInt64)));
  sd.insert("mask", tensor({true, false}));
  std::ostringstream out;
  nn::save(sd, out);
  const std::string full = out.str();
  const std::string path = dir.file("cut.pt");
  for (size_t n = 0; n < full.size(); ++n) {
    SCOPED_TRACE("prefix of " + std::to_string(n) + " bytes");
    const std::string cut = full.substr(0, n);
    write_bytes(path, cut);
    const std::string expected = n == 0 ? "empty file" : "truncated";
    expect_error([&] { nn::load_state_dict_file(path); }, {"'" + path + "'", expected});
    expect_error([&] { load_bytes(cut); }, {"<stream>", expected});
    NoSeekBuf buf(cut);
    std::istream in(&buf);
    expect_error([&] { nn::load_state_dict_file(in); }, {"<stream>", expected});
  }
  write_bytes(path, full);
  expect_same_state(nn::load_state_dict_file(path), sd);
}

TEST(Serialize, RandomByteFlipsNeverCrash) {
  std::ostringstream out;
  nn::save(every_dtype(), out);
  const std::string full = out.str();
  std::mt19937 rng(1234);
  int rejected = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::string bytes = full;
    const int flips = 1 + static_cast<int>(rng() % 3);
    for (int k = 0; k < flips; ++k) bytes[rng() % bytes.size()] ^= static_cast<char>(1 + rng() % 255);
    try {
      load_bytes(bytes);  // a flip inside tensor data still loads
    } catch (const std::runtime_error& e) {
      ++rejected;
      EXPECT_NE(std::string(e.what()).find("[nn::load_state_dict_file] <stream>: "), std::string::npos) << e.what();
    }
  }
  EXPECT_GT(rejected, 100);
}
