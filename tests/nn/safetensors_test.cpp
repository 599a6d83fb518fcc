// safetensors (nn/safetensors.h): the reference writer's bytes (the crate's own test vectors and a
// fixture written like safetensors.torch.save_file), a PyTorch MLP loaded and run, round trips of
// every dtype, metadata, atomic writes, and corrupt input: every truncation, header byte flips,
// malformed JSON, bad offsets, unsupported dtypes, huge declared sizes, foreign, empty, missing files.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <troupe/nn/safetensors.h>
#include <troupe/tensor/autograd.h>
#include <troupe/tensor/backend.h>
#include <troupe/tensor/ops.h>

#include "checkpoint_helpers.h"
#include "common/fixtures.h"

using namespace troupe;
using troupe::testing::expect_error;
using troupe::testing::fixtures_dir;
using troupe::testing::identical;
using troupe::testing::read_bytes;
using troupe::testing::TempDir;
using troupe::testing::write_bytes;

namespace {

/// A safetensors file from its JSON header (unpadded) and data buffer.
std::string st_file(const std::string& json, const std::string& data = "") {
  std::string out;
  uint64_t n = json.size();
  for (int k = 0; k < 8; ++k, n >>= 8) out += static_cast<char>(n & 0xff);
  return out + json + data;
}

/// The tensors of tests/fixtures/nn_troupe.safetensors (gen_nn_safetensors.py: troupe_tensors()).
nn::StateDict troupe_tensors() {
  nn::StateDict sd;
  sd.insert("layer.weight", tensor({-1.0f, -0.5f, 0.0f, 0.5f, 1.0f, 1.5f}).reshape({2, 3}));
  sd.insert("layer.bias", tensor({0.1, -2.5, 3e100}, TensorOptions().dtype(kFloat64)));
  sd.insert("a", tensor({42.0f}));
  sd.insert("half", tensor({1.0f, -2.0f, 0.5f, 65504.0f}).to(kFloat16).reshape({2, 2}));
  sd.insert("bf", tensor({1.0f, -0.5f, 3.0f}).to(kBFloat16));
  sd.insert("steps", scalar_tensor(int64_t{1234567890123}, TensorOptions().dtype(kInt64)));
  sd.insert("ids", tensor(std::vector<int32_t>{-1, 0, 7, 2147483647}, kInt32));
  sd.insert("bytes", tensor(std::vector<uint8_t>{0, 1, 2, 128, 254, 255}).reshape({2, 3}));
  sd.insert("mask", tensor({true, false, true, true, false}));
  sd.insert("empty", zeros({0, 3}));
  sd.insert("odd \"q\" \\ \t end", tensor({-3.25f}));
  return sd;
}

std::string fixture(const std::string& name) { return fixtures_dir() + "/" + name; }

nn::StateDict parse(const std::string& bytes) { return nn::deserialize_safetensors(bytes); }

}  // namespace

// ---------------------------------------------------------------------------------------------------
// the reference writer's bytes

TEST(Safetensors, ReferenceCrateTestVectors) {
  // safetensors/src/tensor.rs, test_serialization: "attn.0" F32 [1, 2, 3] = 0..5
  nn::StateDict sd;
  sd.insert("attn.0", arange(6, TensorOptions().dtype(kFloat32)).reshape({1, 2, 3}));
  std::string data(24, '\0');
  const auto t = sd.at("attn.0");
  std::memcpy(data.data(), t.data_ptr(), 24);
  const std::string json = R"({"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})";
  ASSERT_EQ(json.size() % 8, 0u);
  EXPECT_EQ(nn::serialize_safetensors(sd), st_file(json, data));
  // test_serialization_forced_alignement: a shorter name is padded with spaces to a multiple of 8
  nn::StateDict sd2;
  sd2.insert("attn0", t.reshape({1, 1, 2, 3}));
  EXPECT_EQ(nn::serialize_safetensors(sd2),
            st_file(R"({"attn0":{"dtype":"F32","shape":[1,1,2,3],"data_offsets":[0,24]}})" + std::string(7, ' '), data));
  // test_empty, with and without metadata
  EXPECT_EQ(nn::serialize_safetensors(nn::StateDict()), st_file("{}      "));
  EXPECT_EQ(nn::serialize_safetensors(nn::StateDict(), {{"framework", "pt"}}), st_file(R"({"__metadata__":{"framework":"pt"}})" "     "));
  EXPECT_TRUE(parse(st_file("{}      ")).empty());
}

TEST(Safetensors, WritesTheFixtureByteForByte) {
  // nn_troupe.safetensors was written by gen_nn_safetensors.py as the reference writer lays files out
  // (dtype order, then name; "__metadata__" first); check_troupe_safetensors.py loads it in PyTorch.
  const std::string want = read_bytes(fixture("nn_troupe.safetensors"));
  EXPECT_EQ(nn::serialize_safetensors(troupe_tensors(), {{"format", "pt"}}), want);
  TempDir dir;
  nn::save_safetensors(troupe_tensors(), dir.file("t.safetensors"), {{"format", "pt"}});
  EXPECT_EQ(read_bytes(dir.file("t.safetensors")), want);
  EXPECT_EQ(dir.listing(), std::vector<std::string>{"t.safetensors"});
}

TEST(Safetensors, LoadsTheFixtureInDataOrder) {
  const auto got = nn::load_safetensors(fixture("nn_troupe.safetensors"));
  // data-offset order = the writer's order: I64, F64, F32 (by name), I32, BF16, F16, U8, BOOL
  EXPECT_EQ(got.keys(), (std::vector<std::string>{"steps", "layer.bias", "a", "empty", "layer.weight",
                                                  "odd \"q\" \\ \t end", "ids", "bf", "half", "bytes", "mask"}));
  const auto want = troupe_tensors();
  for (const auto& [name, t] : want) {
    EXPECT_TRUE(identical(got.at(name), t)) << name;
    EXPECT_TRUE(got.at(name).is_contiguous());
    EXPECT_FALSE(got.at(name).requires_grad());
  }
  EXPECT_EQ(nn::load_safetensors_metadata(fixture("nn_troupe.safetensors")),
            (nn::SafetensorsMetadata{{"format", "pt"}}));
}

TEST(Safetensors, PyTorchMlpReproducesItsOutput) {
  // tests/fixtures/nn_mlp.safetensors: the state_dict of PyTorch's
  // nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3)) after torch.manual_seed(0)
  auto fx = troupe::testing::Fixtures::load("nn_mlp.txt");
  auto model = std::make_shared<troupe::testing::TinyMlp>();
  const auto state = nn::load_safetensors(fixture("nn_mlp.safetensors"));
  EXPECT_EQ(state.keys(), (std::vector<std::string>{"0.bias", "0.weight", "2.bias", "2.weight"}));
  model->load_state_dict(state);
  NoGradGuard g;
  EXPECT_TRUE(troupe::testing::tensors_close((*model)(fx.get("x")), fx.get("y"), 1e-5, 1e-6, true));
  EXPECT_EQ(nn::load_safetensors_metadata(fixture("nn_mlp.safetensors")), (nn::SafetensorsMetadata{{"format", "pt"}}));
}

// ---------------------------------------------------------------------------------------------------
// round trips

TEST(Safetensors, RoundTripOfNonContiguousAndSpecialValues) {
  const Tensor base = arange(12, TensorOptions().dtype(kFloat64)).reshape({3, 4});
  nn::StateDict sd;
  sd.insert("t", base.t());
  sd.insert("s", base.slice(1, 1, 4, 2));
  sd.insert("e", tensor({1.0f, 2.0f}).unsqueeze(0).expand({3, 2}));
  sd.insert("nan", tensor({std::nanf(""), -0.0f, std::numeric_limits<float>::infinity()}));
  sd.insert("g", ones({2}).requires_grad_());
  const auto got = parse(nn::serialize_safetensors(sd));
  for (const auto& [name, t] : sd) EXPECT_TRUE(identical(got.at(name), t.contiguous())) << name;
  EXPECT_FALSE(got.at("g").requires_grad());
}

TEST(Safetensors, LoadFollowsDataOffsetsNotJsonOrder) {
  std::string data(12, '\0');
  const float vals[3] = {1, 2, 3};
  std::memcpy(data.data(), vals, 12);
  const auto got = parse(st_file(R"({"z":{"dtype":"F32","shape":[2],"data_offsets":[4,12]},)"
                                 R"("b":{"dtype":"F32","shape":[],"data_offsets":[0,4]}})", data));
  EXPECT_EQ(got.keys(), (std::vector<std::string>{"b", "z"}));
  EXPECT_TRUE(identical(got.at("b"), scalar_tensor(1.0f, TensorOptions().dtype(kFloat32))));
  EXPECT_TRUE(identical(got.at("z"), tensor({2.0f, 3.0f})));
}

TEST(Safetensors, ReaderAcceptsWhitespaceEscapesAndUnicode) {
  // the header must start with '{' (the format's rule); whitespace may follow anywhere after it
  const std::string file = st_file("{ \n"
                                   R"( "__metadata__" : { "k\u00e9y" : "v\/\ud83d\ude00" } ,)"
                                   "\t\"n\\u0061me\" : {\"shape\": [ 1 ], \"data_offsets\": [0, 1], \"dtype\": \"U8\"}}\r\n",
                                   "\x07");
  EXPECT_TRUE(identical(parse(file).at("name"), tensor(std::vector<uint8_t>{7})));
  TempDir dir;
  write_bytes(dir.file("ws.safetensors"), file);
  EXPECT_EQ(nn::load_safetensors_metadata(dir.file("ws.safetensors")),
            (nn::SafetensorsMetadata{{"k\xc3\xa9y", "v/\xf0\x9f\x98\x80"}}));
}

TEST(Safetensors, Metadata) {
  TempDir dir;
  nn::StateDict sd;
  sd.insert("w", ones({2}));
  const nn::SafetensorsMetadata md{{"format", "pt"}, {"note", "line\nbreak \"quoted\" \xc3\xa9"}, {"a", ""}};
  nn::save_safetensors(sd, dir.file("m.safetensors"), md);
  EXPECT_EQ(nn::load_safetensors_metadata(dir.file("m.safetensors")), md);
  EXPECT_TRUE(identical(nn::load_safetensors(dir.file("m.safetensors")).at("w"), ones({2})));
  nn::save_safetensors(sd, dir.file("none.safetensors"));
  EXPECT_TRUE(nn::load_safetensors_metadata(dir.file("none.safetensors")).empty());
  EXPECT_EQ(read_bytes(dir.file("none.safetensors")).find("__metadata__"), std::string::npos);
  EXPECT_TRUE(parse(st_file(R"({"__metadata__":null})")).empty());
}

TEST(Safetensors, CudaTensorsAreCopiedToTheHost) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  nn::StateDict sd;
  sd.insert("w", arange(6, TensorOptions().dtype(kFloat32)).reshape({2, 3}).cuda().t());
  const auto got = parse(nn::serialize_safetensors(sd));
  EXPECT_TRUE(got.at("w").is_cpu());
  EXPECT_TRUE(identical(got.at("w"), sd.at("w").cpu().contiguous()));
}

// ---------------------------------------------------------------------------------------------------
// writing errors and atomicity

TEST(Safetensors, WriterRejectsWhatTheFormatCannotHold) {
  nn::StateDict sd;
  sd.insert("__metadata__", ones({1}));
  expect_error<std::invalid_argument>([&] { nn::serialize_safetensors(sd); }, {"cannot be named '__metadata__'"});
  nn::StateDict bad_name;
  bad_name.insert("w\xff", ones({1}));
  expect_error<std::invalid_argument>([&] { nn::serialize_safetensors(bad_name); }, {"is not valid UTF-8"});
  nn::StateDict undefined;
  undefined.insert("u", Tensor());
  expect_error<std::invalid_argument>([&] { nn::serialize_safetensors(undefined); }, {"tensor 'u' is undefined"});
  expect_error<std::invalid_argument>([] { nn::serialize_safetensors(nn::StateDict(), {{"k", "\xc0\x80"}}); },
                                      {"metadata entry 'k' is not valid UTF-8"});
}

TEST(Safetensors, FailedSaveLeavesThePreviousFileIntact) {
  TempDir dir;
  const std::string path = dir.file("w.safetensors");
  nn::StateDict small, big;
  small.insert("w", ones({2}));
  nn::save_safetensors(small, path);
  const std::string before = read_bytes(path);
  big.insert("w", zeros({100000}));
  {
    troupe::testing::FileSizeLimit limit(4096);  // write(2) fails with EFBIG past 4 KiB
    expect_error([&] { nn::save_safetensors(big, path); },
                 {"[nn::save_safetensors] cannot write '" + path + "'", "File too large"});
  }
  EXPECT_EQ(read_bytes(path), before);
  EXPECT_EQ(dir.listing(), std::vector<std::string>{"w.safetensors"});
  const std::string missing = dir.file("no/dir/w.safetensors");
  expect_error([&] { nn::save_safetensors(small, missing); }, {"cannot write '" + missing + "'", "No such file or directory"});
}

// ---------------------------------------------------------------------------------------------------
// corrupt input

TEST(Safetensors, MissingEmptyAndForeignFiles) {
  TempDir dir;
  const std::string absent = dir.file("absent.safetensors");
  expect_error([&] { nn::load_safetensors(absent); }, {"[nn::load_safetensors] cannot open '" + absent + "'", "No such file or directory"});
  expect_error([&] { nn::load_safetensors_metadata(absent); }, {"[nn::load_safetensors_metadata] cannot open", "No such file"});
  write_bytes(dir.file("empty"), "");
  expect_error([&] { nn::load_safetensors(dir.file("empty")); }, {"'" + dir.file("empty") + "'", "empty file: not a safetensors file"});
  write_bytes(dir.file("text"), "hello, this is a plain text file and no safetensors\n");
  expect_error([&] { nn::load_safetensors(dir.file("text")); }, {"header length", "exceeds the limit of 100000000 bytes"});
  write_bytes(dir.file("tiny"), "hi\n");
  expect_error([&] { nn::load_safetensors(dir.file("tiny")); }, {"the file is 3 bytes, shorter than the 8-byte header length"});
  expect_error([&] { nn::load_safetensors(dir.path().string()); }, {"Is a directory"});
}

TEST(Safetensors, HeaderLengthErrors) {
  expect_error([] { parse(st_file("{}").substr(0, 8) + "{"); }, {"<bytes>", "truncated: the header length is 2 bytes but only 1 bytes follow it"});
  std::string big = st_file("{}");
  big[3] = 0x10;  // 2^28 + 2 > 100 MB
  expect_error([&] { parse(big); }, {"header length 268435458 exceeds the limit of 100000000 bytes"});
}

TEST(Safetensors, MalformedJsonIsRejected) {
  const std::string info = R"({"dtype":"U8","shape":[1],"data_offsets":[0,1]})";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "the header does not start with '{'"},
      {"[]", "the header does not start with '{'"},
      {" {}", "the header does not start with '{'"},
      {"{", "expected a string key"},
      {R"({"a":)" + info, "expected ',' or '}' in an object"},
      {R"({"a":)" + info + ",}", "expected a string key"},
      {R"({"a" )" + info + "}", "expected ':'"},
      {R"({a:1})", "expected a string key"},
      {R"({"a":)" + info + "} x", "unexpected data after the JSON object"},
      {R"({"a":)" + info + "}\x01", "unexpected data after the JSON object"},
      {R"({"a":1})", "the value of tensor \"a\" is not an object"},
      {R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"extra":2}})", "unknown key \"extra\""},
      {R"({"a":{"dtype":"U8","dtype":"U8","shape":[1],"data_offsets":[0,1]}})", "duplicate key \"dtype\""},
      {R"({"a":{"shape":[1],"data_offsets":[0,1]}})", "tensor \"a\" has no \"dtype\""},
      {R"({"a":{"dtype":"U8","data_offsets":[0,1]}})", "tensor \"a\" has no \"shape\""},
      {R"({"a":{"dtype":"U8","shape":[1]}})", "tensor \"a\" has no \"data_offsets\""},
      {R"({"a":{"dtype":8,"shape":[1],"data_offsets":[0,1]}})", "the dtype of tensor \"a\" is not a string"},
      {R"({"a":{"dtype":"U8","shape":[-1],"data_offsets":[0,1]}})", "is negative"},
      {R"({"a":{"dtype":"U8","shape":[1.0],"data_offsets":[0,1]}})", "is not an integer"},
      {R"({"a":{"dtype":"U8","shape":[1e0],"data_offsets":[0,1]}})", "is not an integer"},
      {R"({"a":{"dtype":"U8","shape":[01],"data_offsets":[0,1]}})", "has a leading zero"},
      {R"({"a":{"dtype":"U8","shape":[1,],"data_offsets":[0,1]}})", "is not a number"},
      {R"({"a":{"dtype":"U8","shape":[1 1],"data_offsets":[0,1]}})", "expected ',' or ']'"},
      {R"({"a":{"dtype":"U8","shape":[18446744073709551616],"data_offsets":[0,1]}})", "does not fit in 64 bits"},
      {R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0]}})", "have 1 values (expected 2)"},
      {R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1,2]}})", "have 3 values (expected 2)"},
      {R"({"a":{"dtype":"U8","shape":[1],"data_offsets":"0,1"}})", "expected '['"},
      {R"({"a)", "unterminated string"},
      {"{\"a\nb\":" + info + "}", "control character in a string"},
      {R"({"a\x":)" + info + "}", "invalid escape '\\x'"},
      {R"({"a\u12":)" + info + "}", "invalid hex digit"},
      {R"({"a\ud800":)" + info + "}", "lone high surrogate"},
      {R"({"a\udc00":)" + info + "}", "lone low surrogate"},
      {"{\"a\xff\":" + info + "}", "not valid UTF-8"},
      {"{\"a\xc0\x80\":" + info + "}", "not valid UTF-8"},
      {R"({"a":)" + info + R"(,"a":)" + info + "}", "duplicate tensor name \"a\""},
      {R"({"__metadata__":{},"__metadata__":{}})", "duplicate key \"__metadata__\""},
      {R"({"__metadata__":{"k":"1","k":"2"}})", "duplicate key \"k\" in \"__metadata__\""},
      {R"({"__metadata__":{"k":1}})", "the value of \"__metadata__\" key \"k\" is not a string"},
      {R"({"__metadata__":[]})", "expected '{'"},
      {R"({"a":{"dtype":"U8","shape":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,)"
       R"(1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1],"data_offsets":[0,1]}})",
       "has more than 64 values"},
  };
  for (const auto& [json, message] : cases) {
    SCOPED_TRACE(json);
    expect_error([&] { parse(st_file(json, "x")); }, {"[nn::deserialize_safetensors] <bytes>: ", message});
  }
}

TEST(Safetensors, DtypeErrorsNameTheDtype) {
  expect_error([] { parse(st_file(R"({"a":{"dtype":"I8","shape":[1],"data_offsets":[0,1]}})", "x")); },
               {"dtype \"I8\" of tensor \"a\" is not supported by troupe (supported: F64 F32 F16 BF16 I64 I32 U8 BOOL)"});
  expect_error([] { parse(st_file(R"({"a":{"dtype":"F8_E4M3","shape":[1],"data_offsets":[0,1]}})", "x")); },
               {"dtype \"F8_E4M3\" of tensor \"a\" is not supported"});
  expect_error([] { parse(st_file(R"({"a":{"dtype":"f32","shape":[1],"data_offsets":[0,4]}})", "xxxx")); },
               {"unknown dtype \"f32\" of tensor \"a\""});
}

TEST(Safetensors, OffsetErrors) {
  auto t = [](const std::string& name, const std::string& dtype, const std::string& shape, uint64_t b, uint64_t e) {
    return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":[" +
           std::to_string(b) + "," + std::to_string(e) + "]}";
  };
  const std::string eight(8, '\0');
  expect_error([&] { parse(st_file("{" + t("a", "F32", "[1]", 0, 4) + "," + t("b", "F32", "[1]", 2, 6) + "}", std::string(6, '\0'))); },
               {"tensor \"b\" data_offsets [2, 6] overlap tensor \"a\" [0, 4]"});
  expect_error([&] { parse(st_file("{" + t("a", "F32", "[1]", 0, 4) + "," + t("b", "F32", "[1]", 0, 4) + "}", eight)); },
               {"overlap tensor"});
  expect_error([&] { parse(st_file("{" + t("a", "U8", "[4]", 4, 8) + "}", eight)); },
               {"bytes [0, 4) of the data buffer belong to no tensor"});
  expect_error([&] { parse(st_file("{" + t("a", "U8", "[4]", 0, 4) + "}", eight)); },
               {"the data buffer has 8 bytes but the tensors cover 4"});
  expect_error([&] { parse(st_file("{" + t("a", "U8", "[16]", 0, 16) + "}", eight)); },
               {"tensor \"a\" has data_offsets [0, 16] past the end of the 8-byte data buffer"});
  expect_error([&] { parse(st_file("{" + t("a", "U8", "[0]", 4, 0) + "}", eight)); }, {"that end before they begin"});
  expect_error([&] { parse(st_file("{" + t("a", "F32", "[3]", 0, 8) + "}", eight)); },
               {"tensor \"a\" has shape [3] of F32 (12 bytes) but data_offsets [0, 8] hold 8 bytes"});
  expect_error([&] { parse(st_file("{" + t("m", "BOOL", "[2]", 0, 2) + "}", std::string("\x01\x05", 2))); },
               {"bool tensor \"m\" holds byte 5 at element 1"});
  // zero-sized tensors may share an offset
  const auto ok = parse(st_file("{" + t("e", "F32", "[0]", 0, 0) + "," + t("f", "I64", "[2,0]", 0, 0) + "}"));
  EXPECT_EQ(ok.at("f").sizes().vec(), (std::vector<int64_t>{2, 0}));
}

TEST(Safetensors, HugeDeclaredSizesAreRejectedBeforeAllocating) {
  // 2^40 float32 elements with matching offsets (4 TiB) in a file of a few dozen bytes
  expect_error([] { parse(st_file(R"({"a":{"dtype":"F32","shape":[1099511627776],"data_offsets":[0,4398046511104]}})", "abcd")); },
               {"data_offsets [0, 4398046511104] past the end of the 4-byte data buffer"});
  expect_error([] { parse(st_file(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}})", "abcd")); },
               {"shape [4294967296, 4294967296] whose size overflows 64 bits"});
  expect_error([] { parse(st_file(R"({"a":{"dtype":"U8","shape":[9223372036854775808],"data_offsets":[0,4]}})", "abcd")); },
               {"a size in the shape of tensor \"a\" is too large"});
}

TEST(Safetensors, EveryTruncationGivesAClearError) {
  TempDir dir;
  const std::string full = read_bytes(fixture("nn_troupe.safetensors"));
  const std::string path = dir.file("cut.safetensors");
  uint64_t data_start = 8;
  for (int k = 7; k >= 0; --k) data_start += static_cast<uint64_t>(static_cast<uint8_t>(full[k])) << (8 * k);
  for (size_t n = 0; n < full.size(); ++n) {
    SCOPED_TRACE("prefix of " + std::to_string(n) + " bytes");
    const std::string cut = full.substr(0, n);
    write_bytes(path, cut);
    expect_error([&] { nn::load_safetensors(path); }, {"[nn::load_safetensors] '" + path + "': "});
    expect_error([&] { parse(cut); }, {"[nn::deserialize_safetensors] <bytes>: "});
    if (n < 8) expect_error([&] { parse(cut); }, {n == 0 ? "empty file" : "shorter than the 8-byte header length"});
    else if (n < data_start) expect_error([&] { parse(cut); }, {"truncated: the header length is"});
    else expect_error([&] { parse(cut); }, {"past the end of the", "(truncated file?)"});
  }
  EXPECT_EQ(parse(full).size(), 11u);
}

TEST(Safetensors, RandomHeaderByteFlipsNeverCrash) {
  const std::string full = read_bytes(fixture("nn_troupe.safetensors"));
  uint64_t n = 0;
  for (int k = 7; k >= 0; --k) n = (n << 8) | static_cast<uint8_t>(full[k]);
  std::mt19937 rng(42);
  int rejected = 0;
  for (int trial = 0; trial < 4000; ++trial) {
    std::string bytes = full;
    const int flips = 1 + static_cast<int>(rng() % 2);
    for (int k = 0; k < flips; ++k) {
      const size_t at = trial % 50 == 0 ? rng() % 8 : 8 + rng() % n;  // mostly the JSON, sometimes its length
      bytes[at] = static_cast<char>(rng() % 256);
    }
    try {
      parse(bytes);  // a flip inside a name, say, still gives a valid file
    } catch (const std::runtime_error& e) {
      ++rejected;
      EXPECT_EQ(std::string(e.what()).rfind("[nn::deserialize_safetensors] <bytes>: ", 0), 0u) << e.what();
    }
  }
  EXPECT_GT(rejected, 2000);
}
