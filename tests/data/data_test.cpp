// troupe::data (nn/data): TensorDataset, Subset, random_split and DataLoader against PyTorch 1.13's
// torch.utils.data (tests/fixtures/data.txt, from gen_data.py): batching, len(loader), the shuffled order
// of three epochs from a seeded generator, random_split's subsets for lengths and fractions, and
// PyTorch's error texts; then the digits file in datasets/digits: its contents against scikit-learn's
// CSV, and missing, foreign, truncated and corrupt files.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <iterator>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <troupe/data/data.h>
#include <troupe/tensor/ops.h>
#include <troupe/tensor/random.h>

#include "checkpoint_helpers.h"
#include "common/fixtures.h"

namespace {

using namespace troupe;
using troupe::testing::expect_error;
using troupe::testing::Fixtures;
using troupe::testing::TempDir;
using troupe::testing::write_bytes;

const Fixtures& fx() {
  static Fixtures f = Fixtures::load("data.txt");
  return f;
}

std::vector<int64_t> ints_of(const Tensor& t) {
  Tensor c = t.to(kInt64).contiguous();
  const int64_t* p = c.data_ptr<int64_t>();
  return {p, p + c.numel()};
}

/// TensorDataset(arange(2n).reshape(n, 2).float(), arange(n)), as gen_data.py builds it.
std::shared_ptr<data::TensorDataset> counting_dataset(int64_t n) {
  return std::make_shared<data::TensorDataset>(arange(2 * n, TensorOptions().dtype(kFloat32)).reshape({n, 2}),
                                               arange(n, TensorOptions().dtype(kInt64)));
}

/// The targets of one epoch, batch after batch (at most `max_batches`), with each batch's size.
std::vector<int64_t> run_epoch(data::DataLoader& loader, std::vector<int64_t>* sizes = nullptr,
                               int64_t max_batches = -1) {
  std::vector<int64_t> targets;
  int64_t batches = 0;
  for (auto& batch : loader) {
    // data row i of the counting dataset is (2i, 2i+1)
    const auto t = ints_of(batch.target);
    const auto d = ints_of(batch.data);
    EXPECT_EQ(d.size(), 2 * t.size());
    for (size_t k = 0; k < t.size() && 2 * k + 1 < d.size(); ++k) {
      EXPECT_EQ(d[2 * k], 2 * t[k]);
      EXPECT_EQ(d[2 * k + 1], 2 * t[k] + 1);
    }
    targets.insert(targets.end(), t.begin(), t.end());
    if (sizes) sizes->push_back(batch.target.size(0));
    if (++batches == max_batches) break;
  }
  return targets;
}

/// A dataset with no get_batch of its own: sample i is data full({3}, i) (float32), target i * 10.
struct Squares : data::Dataset {
  int64_t n;
  explicit Squares(int64_t n_) : n(n_) {}
  data::Example<> get(int64_t index) const override {
    const int64_t i = wrap_index(index, n, "Squares::get");
    return {full({3}, static_cast<double>(i), TensorOptions().dtype(kFloat32)),
            scalar_tensor(i * 10, TensorOptions().dtype(kInt64))};
  }
  int64_t size() const override { return n; }
};

// ------------------------------------------------------------------------------------- TensorDataset

TEST(DataTensorDataset, GetIndexesAlongTheFirstDimension) {
  data::TensorDataset ds(arange(12, TensorOptions().dtype(kFloat32)).reshape({4, 3}), tensor({5, 6, 7, 8}));
  EXPECT_EQ(ds.size(), 4);
  data::Example<> e = ds.get(2);
  EXPECT_EQ(ints_of(e.data), (std::vector<int64_t>{6, 7, 8}));
  EXPECT_EQ(e.target.dim(), 0);
  EXPECT_EQ(e.target.item<int64_t>(), 7);
  // tensor[-1], as Python indexing
  EXPECT_EQ(ds.get(-1).target.item<int64_t>(), 8);
  EXPECT_EQ(ds.get(-4).target.item<int64_t>(), 5);
  // a view, as tensor[index]
  EXPECT_EQ(e.data.data_ptr<float>(), ds.data().data_ptr<float>() + 6);
}

TEST(DataTensorDataset, GetBatchGathersInTheGivenOrder) {
  data::TensorDataset ds(arange(12, TensorOptions().dtype(kFloat32)).reshape({4, 3}), tensor({5, 6, 7, 8}));
  data::Example<> b = ds.get_batch({3, 0, -2});
  EXPECT_EQ(b.data.sizes().vec(), (std::vector<int64_t>{3, 3}));
  EXPECT_EQ(ints_of(b.data), (std::vector<int64_t>{9, 10, 11, 0, 1, 2, 6, 7, 8}));
  EXPECT_EQ(ints_of(b.target), (std::vector<int64_t>{8, 5, 7}));
  EXPECT_EQ(b.data.dtype(), kFloat32);
  EXPECT_EQ(b.target.dtype(), kInt64);
}

TEST(DataTensorDataset, Errors) {
  expect_error<std::invalid_argument>([] { data::TensorDataset(zeros({5, 2}), zeros({4})); },
                                      {"Size mismatch between tensors", "(5, 2)", "targets (4)"});
  expect_error<std::invalid_argument>([] { data::TensorDataset(scalar_tensor(1.0), zeros({1})); },
                                      {"[TensorDataset] the data tensor is 0-dim"});
  expect_error<std::invalid_argument>([] { data::TensorDataset(Tensor(), zeros({1})); },
                                      {"[TensorDataset] the data tensor is undefined"});
  data::TensorDataset ds(zeros({10, 2}), zeros({10}));
  expect_error<std::out_of_range>([&] { ds.get(10); },
                                  {"[TensorDataset::get] index 10 is out of bounds for dimension 0 with size 10"});
  expect_error<std::out_of_range>([&] { ds.get(-11); }, {"index -11 is out of bounds for dimension 0 with size 10"});
  expect_error<std::out_of_range>([&] { ds.get_batch({0, 12}); }, {"[TensorDataset::get_batch] index 12"});
}

TEST(DataDataset, DefaultGetBatchStacksSamples) {
  Squares ds(5);
  data::Example<> b = ds.get_batch({4, 1});
  EXPECT_EQ(b.data.sizes().vec(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(ints_of(b.data), (std::vector<int64_t>{4, 4, 4, 1, 1, 1}));
  EXPECT_EQ(ints_of(b.target), (std::vector<int64_t>{40, 10}));
  expect_error<std::invalid_argument>([&] { ds.get_batch({}); }, {"[Dataset::get_batch] indices is empty"});
  expect_error<std::out_of_range>([&] { ds.get_batch({5}); }, {"[Squares::get] index 5 is out of bounds"});
}

// --------------------------------------------------------------------------------------------- Subset

TEST(DataSubset, MapsIndicesIntoTheDataset) {
  auto ds = counting_dataset(6);
  data::Subset sub(ds, {4, 0, -1});
  EXPECT_EQ(sub.size(), 3);
  EXPECT_EQ(sub.indices(), (std::vector<int64_t>{4, 0, 5}));
  EXPECT_EQ(sub.get(0).target.item<int64_t>(), 4);
  EXPECT_EQ(sub.get(-1).target.item<int64_t>(), 5);
  EXPECT_EQ(ints_of(sub.get_batch({2, 1, 0}).target), (std::vector<int64_t>{5, 0, 4}));
  EXPECT_EQ(sub.dataset(), ds);
  expect_error<std::out_of_range>([&] { sub.get(3); }, {"[Subset::get] index 3 is out of bounds for dimension 0 with size 3"});
  expect_error<std::out_of_range>([&] { data::Subset(ds, {6}); }, {"[Subset] index 6 is out of bounds"});
  expect_error<std::invalid_argument>([] { data::Subset(nullptr, {}); }, {"[Subset] dataset is null"});
}

// --------------------------------------------------------------------------------------- random_split

TEST(DataRandomSplit, MatchesPyTorch) {
  for (const char* name : {"counts", "counts3", "fracs", "fracs_remainder", "fracs_round_robin", "fracs_zero",
                           "fracs_close", "digits"}) {
    SCOPED_TRACE(name);
    const std::string c = std::string("split_") + name;
    const auto spec = fx().ints(c + "_spec");
    auto ds = counting_dataset(spec[0]);
    std::vector<std::shared_ptr<data::Subset>> parts;
    if (fx().dtype(c + "_lengths") == kInt64)
      parts = data::random_split(ds, fx().ints(c + "_lengths"), static_cast<uint64_t>(spec[1]));
    else
      parts = data::random_split(ds, fx().doubles(c + "_lengths"), static_cast<uint64_t>(spec[1]));
    size_t k = 0;
    for (; fx().has(c + "_" + std::to_string(k)); ++k) {
      ASSERT_LT(k, parts.size());
      EXPECT_EQ(parts[k]->indices(), fx().ints(c + "_" + std::to_string(k))) << "subset " << k;
      EXPECT_EQ(parts[k]->dataset(), ds);
    }
    EXPECT_EQ(k, parts.size());
  }
}

TEST(DataRandomSplit, BracedListsPickCountsOrFractions) {
  auto ds = counting_dataset(10);
  auto counts = data::random_split(ds, {3, 7}, 42);
  EXPECT_EQ(counts[0]->indices(), fx().ints("split_counts_0"));
  EXPECT_EQ(counts[1]->indices(), fx().ints("split_counts_1"));
  auto fracs = data::random_split(counting_dataset(30), {0.3, 0.3, 0.4}, 42);
  EXPECT_EQ(fracs[2]->indices(), fx().ints("split_fracs_2"));
  // fractions and counts that give the same lengths draw the same permutation
  auto same = data::random_split(counting_dataset(30), {9, 9, 12}, 42);
  for (size_t k = 0; k < 3; ++k) EXPECT_EQ(same[k]->indices(), fracs[k]->indices());
}

TEST(DataRandomSplit, Errors) {
  auto ds = counting_dataset(10);
  expect_error<std::invalid_argument>([&] { data::random_split(ds, {3, 6}, 0); },
                                      {"Sum of input lengths does not equal the length of the input dataset!",
                                       "lengths sum to 9, the dataset has 10 samples"});
  // close to 1 but above it: not fractions (PyTorch's `sum(lengths) <= 1`), so a length mismatch
  expect_error<std::invalid_argument>([&] { data::random_split(ds, {0.1, 0.2, 0.7000000001}, 0); },
                                      {"Sum of input lengths does not equal the length of the input dataset!"});
  expect_error<std::invalid_argument>([&] { data::random_split(ds, {1.5, -0.5}, 0); },
                                      {"Fraction at index 0 is not between 0 and 1"});
  expect_error<std::invalid_argument>([&] { data::random_split(ds, {2.5, 7.5}, 0); },
                                      {"[random_split] length at index 0 is 2.5", "integers, or fractions"});
  expect_error<std::invalid_argument>([&] { data::random_split(ds, {12, -2}, 0); },
                                      {"[random_split] length at index 1 is negative (-2)"});
  expect_error<std::invalid_argument>([] { data::random_split(nullptr, {1}, 0); }, {"[random_split] dataset is null"});
  // whole-number doubles that sum to the size are lengths
  auto parts = data::random_split(ds, std::vector<double>{3.0, 7.0}, 42);
  EXPECT_EQ(parts[0]->indices(), fx().ints("split_counts_0"));
}

// ----------------------------------------------------------------------------------------- DataLoader

static_assert(std::input_iterator<data::DataLoader::Iterator>);

TEST(DataLoader, BatchesInOrderWithAPartialLastBatch) {
  data::DataLoader loader(counting_dataset(10), data::DataLoaderOptions().batch_size(3));
  std::vector<int64_t> sizes;
  EXPECT_EQ(run_epoch(loader, &sizes), fx().ints("loader_seq_epoch0"));
  EXPECT_EQ(sizes, (std::vector<int64_t>{3, 3, 3, 1}));
  EXPECT_EQ(sizes, fx().ints("loader_seq_sizes"));
  EXPECT_EQ(loader.size(), 4);
  // a batch: data (B, 2) float32, target (B,) int64
  auto it = loader.begin();
  EXPECT_EQ(it->data.sizes().vec(), (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(it->data.dtype(), kFloat32);
  EXPECT_EQ(it->target.sizes().vec(), (std::vector<int64_t>{3}));
  EXPECT_EQ(it->target.dtype(), kInt64);
}

TEST(DataLoader, DropLastDropsThePartialBatch) {
  data::DataLoader loader(counting_dataset(10), data::DataLoaderOptions().batch_size(3).drop_last(true));
  std::vector<int64_t> sizes;
  EXPECT_EQ(run_epoch(loader, &sizes), fx().ints("loader_seq_drop_epoch0"));
  EXPECT_EQ(sizes, (std::vector<int64_t>{3, 3, 3}));
  EXPECT_EQ(loader.size(), 3);
  // batch_size larger than the dataset: one short batch, or none with drop_last
  data::DataLoader big(counting_dataset(5), data::DataLoaderOptions().batch_size(8));
  EXPECT_EQ(run_epoch(big), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  data::DataLoader none(counting_dataset(5), data::DataLoaderOptions().batch_size(8).drop_last(true));
  EXPECT_EQ(none.size(), 0);
  EXPECT_TRUE(none.begin() == none.end());
}

TEST(DataLoader, SizeIsLenOfLoader) {
  for (int64_t n : {0, 1, 7, 12, 13})
    for (int64_t b : {1, 3, 4, 12, 20})
      for (bool drop : {false, true}) {
        data::DataLoader loader(counting_dataset(n), data::DataLoaderOptions().batch_size(b).drop_last(drop));
        const int64_t expected = drop ? n / b : (n + b - 1) / b;
        EXPECT_EQ(loader.size(), expected) << n << " " << b << " " << drop;
        int64_t count = 0;
        for (auto it = loader.begin(); it != loader.end(); ++it) ++count;
        EXPECT_EQ(count, expected) << n << " " << b << " " << drop;
      }
}

TEST(DataLoader, ShuffledEpochsMatchPyTorch) {
  for (const char* name : {"seq", "seq_drop", "shuf", "shuf_drop", "shuf_exact", "shuf_exact_drop", "shuf_big_batch",
                           "shuf_big_batch_drop", "shuf_one", "shuf_digits", "shuf_partial", "shuf_partial_exact"}) {
    SCOPED_TRACE(name);
    const std::string c = std::string("loader_") + name;
    const auto spec = fx().ints(c + "_spec");  // n, batch_size, shuffle, drop_last, seed, partial
    data::DataLoader loader(counting_dataset(spec[0]), data::DataLoaderOptions()
                                                           .batch_size(spec[1])
                                                           .shuffle(spec[2] != 0)
                                                           .drop_last(spec[3] != 0)
                                                           .seed(static_cast<uint64_t>(spec[4])));
    EXPECT_EQ(loader.size(), fx().ints(c + "_len")[0]);
    for (int e = 0; e < 3; ++e) {
      const bool partial = spec[5] != 0 && e == 0;
      std::vector<int64_t> sizes;
      EXPECT_EQ(run_epoch(loader, &sizes, partial ? 1 : -1), fx().ints(c + "_epoch" + std::to_string(e)))
          << "epoch " << e;
      if (!partial) {
        EXPECT_EQ(sizes, fx().ints(c + "_sizes")) << "epoch " << e;
      }
    }
    // the generator made exactly PyTorch's draws
    EXPECT_EQ(ints_of(randperm(8, loader.generator())), fx().ints(c + "_after"));
  }
}

TEST(DataLoader, DefaultCollateOfADatasetWithoutGetBatch) {
  auto ds = std::make_shared<Squares>(7);
  data::DataLoader loader(ds, data::DataLoaderOptions().batch_size(3).shuffle(true).seed(0));
  // the same seed orders a TensorDataset of the same size the same way
  data::DataLoader reference(counting_dataset(7), data::DataLoaderOptions().batch_size(3).shuffle(true).seed(0));
  const auto order = run_epoch(reference);
  std::vector<int64_t> got;
  for (auto& batch : loader) {
    EXPECT_EQ(batch.data.dim(), 2);
    EXPECT_EQ(batch.data.size(1), 3);
    for (int64_t t : ints_of(batch.target)) got.push_back(t / 10);
  }
  EXPECT_EQ(got, order);
}

TEST(DataLoader, StateDictResumesTheShuffleSequence) {
  data::DataLoaderOptions opts = data::DataLoaderOptions().batch_size(4).shuffle(true).seed(3);
  data::DataLoader a(counting_dataset(10), opts);
  run_epoch(a);
  const auto sd = a.state_dict();
  ASSERT_EQ(sd.keys(), std::vector<std::string>{"generator_state"});
  EXPECT_EQ(sd.at("generator_state").numel(), static_cast<int64_t>(Generator::kStateSize));
  const auto second = run_epoch(a), third = run_epoch(a);

  data::DataLoader b(counting_dataset(10), opts.seed(99));
  b.load_state_dict(sd);
  EXPECT_EQ(run_epoch(b), second);
  EXPECT_EQ(run_epoch(b), third);

  troupe::OrderedDict<std::string, Tensor> bad;
  bad.insert("generator_state", zeros({7}, TensorOptions().dtype(kUInt8)));
  expect_error<std::invalid_argument>([&] { b.load_state_dict(bad); },
                                      {"[DataLoader::load_state_dict] 'generator_state': "});
  bad.insert("epoch", zeros({1}));
  expect_error<std::invalid_argument>([&] { b.load_state_dict(bad); }, {"unexpected key 'epoch'"});
  expect_error<std::invalid_argument>([&] { b.load_state_dict(troupe::OrderedDict<std::string, Tensor>()); }, {"missing key 'generator_state'"});
}

TEST(DataLoader, Errors) {
  expect_error<std::invalid_argument>(
      [] { data::DataLoader(counting_dataset(3), data::DataLoaderOptions().batch_size(0)); },
      {"batch_size should be a positive integer value, but got batch_size=0"});
  expect_error<std::invalid_argument>(
      [] { data::DataLoader(counting_dataset(3), data::DataLoaderOptions().batch_size(-2)); },
      {"batch_size should be a positive integer value, but got batch_size=-2"});
  expect_error<std::invalid_argument>(
      [] { data::DataLoader(counting_dataset(0), data::DataLoaderOptions().shuffle(true)); },
      {"num_samples should be a positive integer value, but got num_samples=0"});
  expect_error<std::invalid_argument>([] { data::DataLoader(nullptr); }, {"[DataLoader] dataset is null"});
  data::DataLoader empty(counting_dataset(0));
  EXPECT_EQ(empty.size(), 0);
  EXPECT_TRUE(empty.begin() == empty.end());
  auto it = empty.begin();
  expect_error<std::out_of_range>([&] { ++it; }, {"[DataLoader::Iterator] incremented past the end"});
}

// --------------------------------------------------------------------------------------------- Digits

std::shared_ptr<data::Digits> digits() {
  static std::shared_ptr<data::Digits> d = data::Digits::load();
  return d;
}

TEST(Digits, DefaultPathFindsTheShippedFile) {
  const char* saved = std::getenv("TROUPE_DATA_DIR");
  const std::string keep = saved ? saved : "";
  ::unsetenv("TROUPE_DATA_DIR");
  const std::string path = data::default_digits_path();
  EXPECT_NE(path.find("datasets/digits/digits.bin"), std::string::npos) << path;
  ::setenv("TROUPE_DATA_DIR", "/some/where", 1);
  EXPECT_EQ(data::default_digits_path(), "/some/where/digits/digits.bin");
  ::setenv("TROUPE_DATA_DIR", "", 1);
  EXPECT_EQ(data::default_digits_path(), path);
  if (saved) ::setenv("TROUPE_DATA_DIR", keep.c_str(), 1);
  else ::unsetenv("TROUPE_DATA_DIR");
}

TEST(Digits, HasTheImagesAndLabelsOfScikitLearn) {
  auto d = digits();
  EXPECT_EQ(d->size(), fx().ints("digits_count")[0]);
  EXPECT_EQ(d->size(), 1797);
  EXPECT_EQ(d->data().sizes().vec(), (std::vector<int64_t>{1797, 1, 8, 8}));
  EXPECT_EQ(d->data().dtype(), kFloat32);
  EXPECT_EQ(d->targets().sizes().vec(), (std::vector<int64_t>{1797}));
  EXPECT_EQ(d->targets().dtype(), kInt64);
  // label counts per class
  std::vector<int64_t> counts(10, 0);
  for (int64_t t : ints_of(d->targets())) {
    ASSERT_GE(t, 0);
    ASSERT_LT(t, 10);
    ++counts[static_cast<size_t>(t)];
  }
  EXPECT_EQ(counts, fx().ints("digits_label_counts"));
  // pixels are k / 16 for k in 0..16
  Tensor raw = d->data() * 16.0;
  EXPECT_TRUE(equal(raw, raw.to(kInt64).to(kFloat32)));
  EXPECT_EQ(raw.min().item<float>(), 0.0f);
  EXPECT_EQ(raw.max().item<float>(), 16.0f);
  EXPECT_EQ(raw.sum(kFloat64).item<double>(), static_cast<double>(fx().ints("digits_total_pixel_sum")[0]));
  // a few images: pixel sums, labels, and two images pixel by pixel
  const auto idx = fx().ints("digits_sum_index"), sums = fx().ints("digits_pixel_sums"),
             labels = fx().ints("digits_labels_of");
  for (size_t k = 0; k < idx.size(); ++k) {
    data::Example<> e = d->get(idx[k]);
    EXPECT_EQ(e.data.sizes().vec(), (std::vector<int64_t>{1, 8, 8}));
    EXPECT_EQ((e.data * 16.0).sum().item<float>(), static_cast<float>(sums[k])) << "image " << idx[k];
    EXPECT_EQ(e.target.item<int64_t>(), labels[k]) << "image " << idx[k];
  }
  EXPECT_EQ(ints_of(d->get(0).data * 16.0), fx().ints("digits_image_0"));
  EXPECT_EQ(ints_of(d->get(-1).data * 16.0), fx().ints("digits_image_1796"));
}

TEST(Digits, ChecksumAndFileSize) {
  auto d = digits();
  EXPECT_EQ(static_cast<int64_t>(d->checksum()), fx().ints("digits_crc32")[0]);
  EXPECT_EQ(static_cast<int64_t>(troupe::testing::read_bytes(d->path()).size()), fx().ints("digits_file_size")[0]);
  // the CRC-32 check value of the IEEE polynomial (zlib.crc32(b"123456789"))
  const char* check = "123456789";
  EXPECT_EQ(data::crc32(reinterpret_cast<const uint8_t*>(check), 9), 0xCBF43926u);
  EXPECT_EQ(data::crc32(reinterpret_cast<const uint8_t*>(check) + 4, 5,
                        data::crc32(reinterpret_cast<const uint8_t*>(check), 4)),
            0xCBF43926u);
}

TEST(Digits, SplitAndLoadLikeTheTrainingExample) {
  auto parts = data::random_split(digits(), {0.8, 0.2}, 42);
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0]->indices(), fx().ints("split_digits_0"));
  EXPECT_EQ(parts[1]->indices(), fx().ints("split_digits_1"));
  data::DataLoader loader(parts[0], data::DataLoaderOptions().batch_size(64).shuffle(true).seed(0));
  EXPECT_EQ(loader.size(), 23);  // ceil(1438 / 64)
  int64_t seen = 0;
  for (auto& batch : loader) {
    EXPECT_EQ(batch.data.dim(), 4);
    EXPECT_EQ(batch.data.size(1), 1);
    EXPECT_EQ(batch.target.size(0), batch.data.size(0));
    seen += batch.data.size(0);
  }
  EXPECT_EQ(seen, 1438);
}

// ------------------------------------------------------------------------------- digits file errors

/// A digits file of `count` images of rows x cols: pixel (i, j) = (i + j) % 17, label i % 10, and its CRC.
std::string make_digits_file(uint32_t count, uint32_t rows = 8, uint32_t cols = 8, uint32_t version = 1,
                             bool fix_crc = true) {
  std::string s = "TRDIGITS";
  auto u32 = [&](uint32_t v) {
    for (int k = 0; k < 4; ++k) s += static_cast<char>((v >> (8 * k)) & 0xFF);
  };
  u32(version);
  u32(count);
  u32(rows);
  u32(cols);
  for (uint32_t i = 0; i < count; ++i)
    for (uint32_t j = 0; j < rows * cols; ++j) s += static_cast<char>((i + j) % 17);
  for (uint32_t i = 0; i < count; ++i) s += static_cast<char>(i % 10);
  u32(fix_crc ? data::crc32(reinterpret_cast<const uint8_t*>(s.data()), s.size()) : 0);
  return s;
}

/// Rewrites the trailing CRC so that only the content checks can reject the file.
std::string with_crc(std::string s) {
  s.resize(s.size() - 4);
  const uint32_t c = data::crc32(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  for (int k = 0; k < 4; ++k) s += static_cast<char>((c >> (8 * k)) & 0xFF);
  return s;
}

TEST(DigitsFile, SmallFileRoundTrip) {
  TempDir dir;
  const std::string path = dir.file("small.bin");
  write_bytes(path, make_digits_file(3, 2, 4));
  auto d = data::Digits::load(path);
  EXPECT_EQ(d->size(), 3);
  EXPECT_EQ(d->path(), path);
  EXPECT_EQ(d->data().sizes().vec(), (std::vector<int64_t>{3, 1, 2, 4}));
  EXPECT_EQ(ints_of(d->data()[2] * 16.0), (std::vector<int64_t>{2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(ints_of(d->targets()), (std::vector<int64_t>{0, 1, 2}));
}

TEST(DigitsFile, MissingEmptyDirectoryAndForeignFiles) {
  TempDir dir;
  const std::string missing = dir.file("nope.bin");
  expect_error([&] { data::Digits::load(missing); },
               {"[Digits::load] '" + missing + "': cannot open the file: No such file or directory"});
  expect_error([&] { data::Digits::load(dir.path().string()); }, {"[Digits::load] '" + dir.path().string() + "'"});
  const std::string path = dir.file("x.bin");
  write_bytes(path, "");
  expect_error([&] { data::Digits::load(path); }, {"'" + path + "': empty file"});
  write_bytes(path, "PK\x03\x04 a zip archive, not digits");
  expect_error([&] { data::Digits::load(path); },
               {"not a digits file: it starts with bytes [50 4b 03 04 20 61 20 7a], expected the magic 'TRDIGITS'"});
  write_bytes(path, "TRDX");
  expect_error([&] { data::Digits::load(path); }, {"not a digits file"});
}

TEST(DigitsFile, HeaderAndContentErrors) {
  TempDir dir;
  const std::string path = dir.file("bad.bin");
  auto expect_load_error = [&](const std::string& bytes, const std::string& what) {
    write_bytes(path, bytes);
    expect_error([&] { data::Digits::load(path); }, {"[Digits::load] '" + path + "': " + what});
  };
  expect_load_error(make_digits_file(2, 8, 8, 2), "format version 2 is not supported (this build reads version 1)");
  expect_load_error(make_digits_file(2, 0, 8), "bad image size 0x8");
  expect_load_error(make_digits_file(0, 300, 300), "bad image size 300x300");
  expect_load_error(make_digits_file(2, 8, 8, 1, false), "checksum mismatch: the file stores CRC-32 0x00000000");
  expect_load_error(make_digits_file(2) + "x", "159 bytes, but the header announces 2 images of 8x8 (158 bytes): "
                                              "1 unexpected bytes after the checksum");
  // a huge declared count is refused from the file size, before anything is allocated
  std::string huge = make_digits_file(1);
  huge[12] = huge[13] = huge[14] = huge[15] = '\xff';
  expect_load_error(huge, "truncated: 93 bytes, but the header announces 4294967295 images of 8x8");
  // values out of range behind a valid checksum
  std::string pixel = make_digits_file(2);
  pixel[24 + 70] = 17;
  expect_load_error(with_crc(pixel), "image 1 has pixel value 17 at position 6 (pixels are 0..16)");
  std::string label = make_digits_file(2);
  label[24 + 128 + 1] = 10;
  expect_load_error(with_crc(label), "image 1 has label 10 (labels are 0..9)");
}

TEST(DigitsFile, EveryTruncationGivesAClearError) {
  TempDir dir;
  const std::string path = dir.file("cut.bin");
  const std::string full = make_digits_file(3);
  for (size_t n = 0; n < full.size(); ++n) {
    SCOPED_TRACE("prefix of " + std::to_string(n) + " bytes");
    write_bytes(path, full.substr(0, n));
    expect_error([&] { data::Digits::load(path); }, {"'" + path + "'", n == 0 ? "empty file" : "truncated"});
  }
  // prefixes of the shipped file: inside the header and at random lengths
  const std::string shipped = troupe::testing::read_bytes(digits()->path());
  std::mt19937 rng(7);
  std::vector<size_t> cuts = {1, 8, 23, 24, 25, shipped.size() - 5, shipped.size() - 1};
  for (int k = 0; k < 20; ++k) cuts.push_back(rng() % shipped.size());
  for (size_t n : cuts) {
    write_bytes(path, shipped.substr(0, n));
    expect_error([&] { data::Digits::load(path); }, {"'" + path + "': truncated"});
  }
}

TEST(DigitsFile, EveryByteFlipIsRejected) {
  TempDir dir;
  const std::string path = dir.file("flip.bin");
  const std::string full = make_digits_file(3);
  // the CRC-32 catches any change of one byte, wherever it is; header changes may be caught earlier
  for (size_t i = 0; i < full.size(); ++i) {
    std::string bytes = full;
    bytes[i] = static_cast<char>(bytes[i] ^ 0x5A);
    write_bytes(path, bytes);
    expect_error([&] { data::Digits::load(path); }, {"[Digits::load] '" + path + "': "});
  }
  // random multi-byte damage to the shipped file
  const std::string shipped = troupe::testing::read_bytes(digits()->path());
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 50; ++trial) {
    std::string bytes = shipped;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < flips; ++k) bytes[rng() % bytes.size()] ^= static_cast<char>(1 + rng() % 255);
    write_bytes(path, bytes);
    expect_error([&] { data::Digits::load(path); }, {"[Digits::load] '" + path + "': "});
  }
}

}  // namespace
