// rl::TensorDict: nested keys, batch checks, views, cat/stack, printing in TorchRL's layout.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <troupe/rl/tensordict.h>
#include <troupe/tensor/ops.h>

using namespace troupe;
using rl::Key;
using rl::TensorDict;

namespace {

using Shape = std::vector<int64_t>;
Shape shape(const Tensor& t) { return t.sizes().vec(); }

std::vector<std::string> strs(const std::vector<Key>& ks) {
  std::vector<std::string> out;
  for (const auto& k : ks) out.push_back(k.str());
  return out;
}

template <class E, class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "no throw";
}

TensorDict sample() {
  Tensor obs = arange(24.0).reshape({3, 4, 2});
  Tensor r = arange(12.0).reshape({3, 4, 1});
  return TensorDict({{"observation", obs}, {{"next", "reward"}, r}, {"next.done", zeros({3, 4, 1}, kBool)}}, {3, 4});
}

}  // namespace

TEST(TensorDict, NestedKeysBothSpellings) {
  TensorDict td = sample();
  EXPECT_TRUE(equal(td.get("next.reward"), td.get({"next", "reward"})));
  EXPECT_TRUE(td.is_sub("next"));
  EXPECT_EQ(td.get_sub("next").batch_size(), (Shape{3, 4}));
  EXPECT_EQ(strs(td.keys()), (std::vector<std::string>{"observation", "next"}));
  EXPECT_EQ(strs(td.keys(true)), (std::vector<std::string>{"observation", "next", "next.reward", "next.done"}));
  EXPECT_EQ(strs(td.keys(true, true)), (std::vector<std::string>{"observation", "next.reward", "next.done"}));
  EXPECT_TRUE(td.contains({"next", "done"}));
  EXPECT_FALSE(td.contains("next.obs"));
  EXPECT_EQ(Key({"next", "reward"}).repr(), "('next', 'reward')");
}

TEST(TensorDict, BatchSizeIsCheckedOnInsert) {
  TensorDict td({3});
  EXPECT_EQ(error_of<std::invalid_argument>([&] { td.set("x", zeros({4, 2})); }),
            "batch dimension mismatch for key 'x', got self.batch_size=torch.Size([3]) and "
            "value.shape=torch.Size([4, 2]).");
  td.set("x", zeros({3, 2}));
  EXPECT_EQ(error_of<std::out_of_range>([&] { td.get("y"); }), "key 'y' not found in TensorDict with keys ['x']");
  EXPECT_EQ(error_of<std::invalid_argument>([&] { td.set("x.y", zeros({3})); }),
            "[TensorDict] can't set ('x', 'y'): 'x' is a tensor, not a TensorDict");
  EXPECT_THROW(td.set_batch_size({2}), std::invalid_argument);
  td.set_batch_size({3, 2});
  EXPECT_EQ(td.batch_size(), (Shape{3, 2}));
}

TEST(TensorDict, IndexAndSliceAreViews) {
  TensorDict td = sample();
  TensorDict row = td[1];
  EXPECT_EQ(row.batch_size(), (Shape{4}));
  EXPECT_EQ(shape(row.get("observation")), (Shape{4, 2}));
  row.get("observation").fill_(-1);  // a view: the original changes
  EXPECT_EQ(td.get("observation").select(0, 1).sum().item<double>(), -8.0);
  TensorDict last = td[-1];
  EXPECT_EQ(last.get("next.reward").select(0, 0).item<double>(), 8.0);
  TensorDict cols = td.slice(1, 1, 4, 2);
  EXPECT_EQ(cols.batch_size(), (Shape{3, 2}));
  EXPECT_TRUE(equal(cols.get("next.reward").select(1, 1).reshape({-1}).to(kFloat64), tensor({3.0, 7.0, 11.0}).to(kFloat64)));
  EXPECT_EQ(error_of<std::out_of_range>([&] { td[3]; }), "index 3 is out of bounds for dimension 0 with size 3");
}

TEST(TensorDict, AdvancedIndexCopiesAndSetAt) {
  TensorDict td = sample();
  TensorDict picked = td.index(tensor({2, 0}, kInt64));
  EXPECT_EQ(picked.batch_size(), (Shape{2, 4}));
  EXPECT_TRUE(equal(picked.get("observation").select(0, 0), td.get("observation").select(0, 2)));
  TensorDict masked = td.index(tensor({true, false, true}));
  EXPECT_EQ(masked.batch_size(), (Shape{2, 4}));
  // writing rows back
  TensorDict storage = td.clone().zero_();
  storage.set_at_(tensor({2, 0}, kInt64), picked);
  EXPECT_TRUE(equal(storage.get("observation").select(0, 0), td.get("observation").select(0, 0)));
  EXPECT_EQ(storage.get("observation").select(0, 1).abs().sum().item<double>(), 0.0);
}

TEST(TensorDict, CatAndStack) {
  TensorDict a = sample(), b = sample().clone();
  b.get("observation").add_(100);
  TensorDict c = TensorDict::cat({a, b}, 0);
  EXPECT_EQ(c.batch_size(), (Shape{6, 4}));
  EXPECT_EQ(c.get_sub("next").batch_size(), (Shape{6, 4}));
  EXPECT_TRUE(equal(c[3].get("observation"), b[0].get("observation")));
  TensorDict t = TensorDict::cat({a, b}, 1);
  EXPECT_EQ(t.batch_size(), (Shape{3, 8}));
  TensorDict s = TensorDict::stack({a, b}, 1);
  EXPECT_EQ(s.batch_size(), (Shape{3, 2, 4}));
  EXPECT_EQ(shape(s.get("next.reward")), (Shape{3, 2, 4, 1}));
  EXPECT_TRUE(equal(s.get("observation").select(1, 1), b.get("observation")));
  TensorDict other({3, 4});
  other.set("x", zeros({3, 4}));
  EXPECT_EQ(error_of<std::invalid_argument>([&] { TensorDict::stack({a, other}); }),
            "[TensorDict.stack] the TensorDicts have different keys: ['observation', 'next'] and ['x']");
}

TEST(TensorDict, CopiesShareTensorsNotStructure) {
  TensorDict a = sample();
  TensorDict b = a;
  b.set("extra", zeros({3, 4}));
  b.get_sub("next").set("more", zeros({3, 4}));
  EXPECT_FALSE(a.contains("extra"));
  EXPECT_FALSE(a.contains("next.more"));
  b.get("observation").fill_(7);  // same tensor
  EXPECT_EQ(a.get("observation").min().item<double>(), 7.0);
  TensorDict c = a.clone();
  c.get("observation").fill_(0);
  EXPECT_EQ(a.get("observation").min().item<double>(), 7.0);
}

TEST(TensorDict, WholeDictOperations) {
  TensorDict td = sample();
  TensorDict f = td.to(kFloat32);
  EXPECT_EQ(f.get("observation").dtype(), kFloat32);
  EXPECT_EQ(strs(td.select({"next.reward"}).keys(true, true)), (std::vector<std::string>{"next.reward"}));
  EXPECT_EQ(strs(td.exclude({"next"}).keys(true)), (std::vector<std::string>{"observation"}));
  TensorDict doubled = td.apply([](const Tensor& t) { return t * 2; });
  EXPECT_TRUE(equal(doubled.get("observation"), td.get("observation") * 2));
  EXPECT_THROW(td.apply([](const Tensor& t) { return t.sum(); }), std::invalid_argument);
  EXPECT_TRUE(equal(td, td.clone()));
  EXPECT_FALSE(equal(td, doubled));
  TensorDict renamed = td;
  renamed.rename_key_("next.reward", "next.original_reward");
  EXPECT_TRUE(renamed.contains("next.original_reward"));
  EXPECT_FALSE(renamed.contains("next.reward"));
  EXPECT_EQ(td.reshape({12}).batch_size(), (Shape{12}));
  EXPECT_EQ(shape(td.reshape({-1}).get("observation")), (Shape{12, 2}));
  EXPECT_EQ(td.unsqueeze(0).batch_size(), (Shape{1, 3, 4}));
  EXPECT_EQ(td.unsqueeze(0).squeeze(0).batch_size(), (Shape{3, 4}));
  EXPECT_EQ(td[0].expand({5, 4}).batch_size(), (Shape{5, 4}));
  TensorDict upd({3, 4});
  upd.set("next.extra", ones({3, 4}));
  td.update(upd);
  EXPECT_TRUE(td.contains("next.reward"));
  EXPECT_TRUE(td.contains("next.extra"));
}

TEST(TensorDict, PrintsAsTorchRL) {
  TensorDict td({3});
  td.set("obs", zeros({3, 4}));
  td.set("action", zeros({3}, kInt64));
  td.set("next.reward", zeros({3, 1}));
  EXPECT_EQ(td.repr(),
            "TensorDict(\n"
            "    fields={\n"
            "        action: Tensor(shape=torch.Size([3]), device=cpu, dtype=torch.int64, is_shared=False),\n"
            "        next: TensorDict(\n"
            "            fields={\n"
            "                reward: Tensor(shape=torch.Size([3, 1]), device=cpu, dtype=torch.float32, is_shared=False)},\n"
            "            batch_size=torch.Size([3]),\n"
            "            device=None,\n"
            "            is_shared=False),\n"
            "        obs: Tensor(shape=torch.Size([3, 4]), device=cpu, dtype=torch.float32, is_shared=False)},\n"
            "    batch_size=torch.Size([3]),\n"
            "    device=None,\n"
            "    is_shared=False)");
  EXPECT_EQ(TensorDict({2}).repr(),
            "TensorDict(\n    fields={\n    },\n    batch_size=torch.Size([2]),\n    device=None,\n    is_shared=False)");
}
