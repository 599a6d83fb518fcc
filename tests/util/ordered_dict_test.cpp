// troupe::OrderedDict as libtorch's torch::OrderedDict (written in libtorch's spelling): insertion order,
// items with key()/value(), index and key access, insert / update / erase, and libtorch's errors.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <troupe/nn/nn.h>
#include <troupe/tensor/ops.h>
#include <troupe/util/ordered_dict.h>

namespace {

namespace torch = troupe;

template <class Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "no exception";
}

TEST(OrderedDict, InsertionOrderItemsAndAccess) {
  torch::OrderedDict<std::string, int> dict;
  EXPECT_TRUE(dict.is_empty());
  dict.insert("b", 2);
  dict.insert("a", 1);
  dict.insert("c", 3);
  ASSERT_EQ(dict.size(), 3u);
  EXPECT_EQ(dict.keys(), (std::vector<std::string>{"b", "a", "c"}));
  EXPECT_EQ(dict.values(), (std::vector<int>{2, 1, 3}));
  EXPECT_EQ(dict["a"], 1);
  EXPECT_EQ(dict[0].key(), "b");
  EXPECT_EQ(dict[2].value(), 3);
  EXPECT_EQ(*dict[1], 1);
  EXPECT_EQ(dict.front().key(), "b");
  EXPECT_EQ(dict.back().key(), "c");
  EXPECT_TRUE(dict.contains("c"));
  EXPECT_EQ(dict.find("zz"), nullptr);
  ASSERT_NE(dict.find("b"), nullptr);
  *dict.find("b") = 20;
  EXPECT_EQ(dict["b"], 20);
  std::vector<std::string> seen;
  for (const auto& item : dict) seen.push_back(item.key() + "=" + std::to_string(item.value()));
  EXPECT_EQ(seen, (std::vector<std::string>{"b=20", "a=1", "c=3"}));
  int sum = 0;
  for (const auto& [k, v] : dict) sum += v;  // an item is also a std::pair
  EXPECT_EQ(sum, 24);
  auto pairs = dict.pairs();
  EXPECT_EQ(pairs[1], (std::pair<std::string, int>("a", 1)));
}

TEST(OrderedDict, UpdateEraseClearAndErrors) {
  torch::OrderedDict<std::string, int> dict("Parameter");
  dict.insert("w", 1);
  dict.insert("b", 2);
  EXPECT_EQ(error_of([&] { dict.insert("w", 5); }), "Parameter 'w' already defined");
  EXPECT_EQ(error_of([&] { dict["x"]; }), "Parameter 'x' is not defined");
  EXPECT_EQ(error_of([&] { dict[7]; }), "Index 7 is out of bounds");
  torch::OrderedDict<std::string, int> other;
  other.insert("b", 20);
  other.insert("z", 26);
  dict.update(other);  // replaces in place, appends new keys
  EXPECT_EQ(dict.keys(), (std::vector<std::string>{"w", "b", "z"}));
  EXPECT_EQ(dict["b"], 20);
  dict.erase("w");
  EXPECT_EQ(dict.keys(), (std::vector<std::string>{"b", "z"}));
  EXPECT_EQ(dict["z"], 26);
  EXPECT_EQ(error_of([&] { dict.erase("w"); }), "Key 'w' doesn't exist");
  torch::OrderedDict<std::string, int> copy = dict;
  EXPECT_TRUE(copy == dict);
  dict.clear();
  EXPECT_EQ(dict.size(), 0u);
  EXPECT_EQ(error_of([&] { dict.front(); }), "Called front() on an empty OrderedDict");
  EXPECT_EQ(copy.size(), 2u);
  torch::OrderedDict<std::string, int> listed = {{"x", 1}, {"y", 2}};
  EXPECT_EQ(listed.keys(), (std::vector<std::string>{"x", "y"}));
}

TEST(OrderedDict, WhatNamedParametersReturns) {
  torch::nn::Sequential net(torch::nn::Linear(3, 2), torch::nn::ReLU());
  torch::OrderedDict<std::string, torch::Tensor> params = net->named_parameters();
  ASSERT_EQ(params.size(), 2u);
  EXPECT_EQ(params[0].key(), "0.weight");
  EXPECT_EQ(params["0.bias"].sizes().vec(), (std::vector<int64_t>{2}));
  for (auto& p : net->named_parameters()) EXPECT_TRUE(p.value().requires_grad()) << p.key();
  EXPECT_EQ(net->named_children().keys(), (std::vector<std::string>{"0", "1"}));
}

}  // namespace
