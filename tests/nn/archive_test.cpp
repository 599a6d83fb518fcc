// libtorch's serialization front spelled troupe::: troupe::save / troupe::load of tensors, lists of
// tensors and modules (std::shared_ptr and anything with .ptr()), serialize::OutputArchive /
// InputArchive with nested archives, files, streams and memory, and the errors for missing keys and
// corrupt or truncated files. The file is nn::save's checkpoint, so the two fronts read each other.
#include <gtest/gtest.h>

#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <troupe/nn/archive.h>
#include <troupe/nn/serialize.h>
#include <troupe/tensor/autograd.h>
#include <troupe/tensor/ops.h>

#include "checkpoint_helpers.h"

namespace {

using namespace troupe;
using troupe::testing::expect_error;
using troupe::testing::identical;
using troupe::testing::read_bytes;
using troupe::testing::TempDir;
using troupe::testing::write_bytes;

/// A layer with a parameter pair and a persistent buffer, as a libtorch user module would be.
struct Block : nn::Module {
  Tensor weight, bias, steps;
  Block(int64_t in, int64_t out) : nn::Module("Block") {
    weight = register_parameter("weight", randn({out, in}));
    bias = register_parameter("bias", randn({out}));
    steps = register_buffer("steps", zeros({}, TensorOptions().dtype(kInt64)));
  }
  Tensor forward(const Tensor& x) override { return x.matmul(weight.t()) + bias; }
};

struct Net : nn::Module {
  std::shared_ptr<Block> fc1, fc2;
  explicit Net(int64_t hidden = 5) : nn::Module("Net") {
    fc1 = register_module("fc1", std::make_shared<Block>(3, hidden));
    fc2 = register_module("fc2", std::make_shared<Block>(hidden, 2));
  }
  Tensor forward(const Tensor& x) override { return (*fc2)((*fc1)(x).relu()); }
};

/// What a libtorch module holder looks like to troupe::save: ptr() gives the module.
struct NetHolder {
  std::shared_ptr<Net> impl = std::make_shared<Net>();
  const std::shared_ptr<Net>& ptr() const { return impl; }
  Net* operator->() const { return impl.get(); }
};

void expect_same_state(nn::Module& a, nn::Module& b) {
  const auto sa = a.state_dict(), sb = b.state_dict();
  ASSERT_EQ(sa.size(), sb.size());
  for (const auto& item : sa) {
    const Tensor* other = sb.find(item.key());
    ASSERT_NE(other, nullptr) << item.key();
    EXPECT_TRUE(identical(item.value(), *other)) << item.key();
  }
}

TEST(TorchSave, TensorRoundTripsThroughFileAndStream) {
  TempDir dir;
  Tensor x = randn({3, 4}).to(kFloat64);
  troupe::save(x, dir.file("x.pt"));
  Tensor y;
  troupe::load(y, dir.file("x.pt"));
  EXPECT_TRUE(identical(x, y));

  std::stringstream stream;
  troupe::save(x, stream);
  Tensor z = zeros({1});  // a defined tensor takes the loaded data in place
  Tensor alias = z;
  troupe::load(z, stream);
  EXPECT_TRUE(identical(x, alias));
}

TEST(TorchSave, VectorOfTensors) {
  TempDir dir;
  std::vector<Tensor> tensors = {ones({2}), arange(6, TensorOptions().dtype(kInt64)).reshape({2, 3}),
                                 full({}, true, TensorOptions().dtype(kBool))};
  troupe::save(tensors, dir.file("list.pt"));
  std::vector<Tensor> back;
  troupe::load(back, dir.file("list.pt"));
  ASSERT_EQ(back.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(identical(tensors[i], back[i])) << i;
  std::vector<Tensor> empty;
  troupe::save(empty, dir.file("empty.pt"));
  troupe::load(back, dir.file("empty.pt"));  // appends nothing
  EXPECT_EQ(back.size(), 3u);
}

TEST(TorchSave, ModuleLoadsIntoAFreshOneOfTheSameShape) {
  TempDir dir;
  manual_seed(1);
  auto model = std::make_shared<Net>();
  model->fc1->steps.fill_(7);
  troupe::save(model, dir.file("model.pt"));

  manual_seed(2);
  auto fresh = std::make_shared<Net>();
  const Tensor weight_before = fresh->fc1->weight;  // members and optimizers keep the same tensors
  troupe::load(fresh, dir.file("model.pt"));
  expect_same_state(*model, *fresh);
  EXPECT_TRUE(weight_before.is_same(fresh->fc1->weight));
  EXPECT_TRUE(fresh->fc1->weight.requires_grad());
  Tensor x = randn({4, 3});
  EXPECT_TRUE(identical(model->forward(x), fresh->forward(x)));

  // the file is nn::save's checkpoint: keys are the state_dict's
  const auto sd = nn::load_state_dict_file(dir.file("model.pt"));
  std::vector<std::string> keys;
  for (const auto& item : sd) keys.push_back(item.key());
  EXPECT_EQ(keys, (std::vector<std::string>{"fc1.weight", "fc1.bias", "fc1.steps", "fc2.weight", "fc2.bias",
                                            "fc2.steps"}));
  nn::save(*model, dir.file("nn.pt"));
  auto third = std::make_shared<Net>();
  troupe::load(third, dir.file("nn.pt"));
  expect_same_state(*model, *third);
}

TEST(TorchSave, HoldersWithPtr) {
  TempDir dir;
  NetHolder a, b;
  troupe::save(a, dir.file("held.pt"));
  troupe::load(b, dir.file("held.pt"));
  expect_same_state(*a.impl, *b.impl);
  std::shared_ptr<nn::Module> base = std::make_shared<Net>();  // and a base-class pointer
  troupe::load(base, dir.file("held.pt"));
  expect_same_state(*a.impl, *base);
}

TEST(TorchSave, ModuleErrorsNameTheFileAndTheKey) {
  TempDir dir;
  const std::string path = dir.file("small.pt");
  auto small = std::make_shared<Block>(3, 5);
  troupe::save(small, path);
  auto net = std::make_shared<Net>();
  expect_error([&] { troupe::load(net, path); }, {"No such serialized tensor 'fc1.weight'", path, "Net"});
  auto wider = std::make_shared<Block>(3, 6);
  expect_error([&] { troupe::load(wider, path); }, {path, "size mismatch for weight"});
  std::shared_ptr<Net> null;
  expect_error<std::invalid_argument>([&] { troupe::save(null, path); }, {"the module is null"});
  expect_error([&] { troupe::load(small, dir.file("missing.pt")); }, {"cannot open", dir.file("missing.pt")});
}

TEST(TorchSave, CorruptAndTruncatedFiles) {
  TempDir dir;
  const std::string path = dir.file("t.pt");
  troupe::save(std::vector<Tensor>{randn({8}), randn({2, 2})}, path);
  const std::string bytes = read_bytes(path);
  for (size_t cut : {size_t{0}, size_t{5}, size_t{20}, bytes.size() / 2, bytes.size() - 1}) {
    write_bytes(path, bytes.substr(0, cut));
    Tensor t;
    expect_error([&] { troupe::load(t, path); }, {path, cut == 0 ? "empty file" : "truncated"});
  }
  write_bytes(path, "PK\x03\x04 not ours");
  Tensor t;
  expect_error([&] { troupe::load(t, path); }, {path, "not a troupe checkpoint", "zip archive"});
}

TEST(SerializeArchive, NestedArchivesKeysAndTryRead) {
  serialize::OutputArchive inner, outer;
  inner.write("w", ones({2}));
  inner.write("b", zeros({1}), /*is_buffer=*/true);
  outer.write("top", full({}, 3.0));
  outer.write("inner", inner);
  outer("again", ones({1}));  // operator() is write
  std::stringstream s;
  outer.save_to(s);

  serialize::InputArchive in;
  in.load_from(s);
  EXPECT_EQ(in.keys(), (std::vector<std::string>{"top", "inner", "again"}));
  Tensor top;
  in.read("top", top);
  EXPECT_EQ(top.item<float>(), 3.0f);
  serialize::InputArchive nested;
  in.read("inner", nested);
  EXPECT_EQ(nested.keys(), (std::vector<std::string>{"w", "b"}));
  Tensor w;
  nested("w", w);
  EXPECT_TRUE(identical(w, ones({2})));
  Tensor missing;
  EXPECT_FALSE(nested.try_read("nope", missing));
  EXPECT_FALSE(missing.defined());
  serialize::InputArchive none;
  EXPECT_FALSE(in.try_read("absent", none));
  expect_error([&] { nested.read("nope", missing); }, {"No such serialized tensor 'inner.nope' in <stream>"});
  expect_error([&] { in.read("absent", none); }, {"No such serialized submodule: 'absent'"});
}

TEST(SerializeArchive, MemoryAndWriterFunction) {
  serialize::OutputArchive out;
  out.write("x", arange(5, TensorOptions().dtype(kInt32)));
  std::string bytes;
  out.save_to([&](const void* data, size_t n) {
    bytes.append(static_cast<const char*>(data), n);
    return n;
  });
  serialize::InputArchive in;
  in.load_from(bytes.data(), bytes.size(), Device(kCPU));
  Tensor x;
  in.read("x", x);
  EXPECT_TRUE(identical(x, arange(5, TensorOptions().dtype(kInt32))));
  expect_error([&] { out.save_to([](const void*, size_t n) { return n - 1; }); }, {"took"});
  serialize::InputArchive bad;
  expect_error([&] { bad.load_from(bytes.data(), bytes.size() - 3); }, {"<stream>", "truncated"});
  expect_error<std::invalid_argument>([&] { out.write("u", Tensor()); }, {"the tensor for key 'u' is undefined"});
}

TEST(SerializeArchive, WriteAgainReplacesAndFilesAreAtomic) {
  TempDir dir;
  serialize::OutputArchive out;
  out.write("a", ones({1}));
  out.write("a", zeros({2}));
  out.save_to(dir.file("a.pt"));
  Tensor a;
  serialize::InputArchive in;
  in.load_from(dir.file("a.pt"));
  in.read("a", a);
  EXPECT_TRUE(identical(a, zeros({2})));
  EXPECT_EQ(dir.listing(), (std::vector<std::string>{"a.pt"}));  // no temporary left behind
}

}  // namespace
