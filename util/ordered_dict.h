// OrderedDict: string keys in insertion order with O(1) lookup (parameters, buffers, children, state_dict).
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace troupe {

/// A map from string keys to V that iterates in insertion order, as Python's dict.
template <class V>
class OrderedDict {
 public:
  using Item = std::pair<std::string, V>;
  using iterator = typename std::vector<Item>::iterator;
  using const_iterator = typename std::vector<Item>::const_iterator;

  OrderedDict() = default;
  OrderedDict(std::initializer_list<Item> items) {
    for (const auto& it : items) insert_or_assign(it.first, it.second);
  }

  /// Inserts `key` at the end, or replaces its value in place (keeping its position), as dict[key] = v.
  V& insert_or_assign(const std::string& key, V value) {
    auto f = index_.find(key);
    if (f != index_.end()) {
      items_[f->second].second = std::move(value);
      return items_[f->second].second;
    }
    index_.emplace(key, items_.size());
    items_.emplace_back(key, std::move(value));
    return items_.back().second;
  }
  /// Inserts a new key; throws if it exists.
  V& insert(const std::string& key, V value) {
    if (index_.count(key)) throw std::runtime_error("[OrderedDict] key '" + key + "' already exists");
    return insert_or_assign(key, std::move(value));
  }
  /// The value of `key`, default-constructed and appended when missing (dict.setdefault).
  V& operator[](const std::string& key) {
    auto f = index_.find(key);
    if (f != index_.end()) return items_[f->second].second;
    return insert_or_assign(key, V{});
  }
  /// The value of `key`; throws naming the key when missing.
  const V& at(const std::string& key) const {
    auto f = index_.find(key);
    if (f == index_.end()) throw std::out_of_range("[OrderedDict] no key '" + key + "'");
    return items_[f->second].second;
  }
  V& at(const std::string& key) {
    auto f = index_.find(key);
    if (f == index_.end()) throw std::out_of_range("[OrderedDict] no key '" + key + "'");
    return items_[f->second].second;
  }
  /// Pointer to the value of `key`, or null.
  const V* find(const std::string& key) const {
    auto f = index_.find(key);
    return f == index_.end() ? nullptr : &items_[f->second].second;
  }
  V* find(const std::string& key) {
    auto f = index_.find(key);
    return f == index_.end() ? nullptr : &items_[f->second].second;
  }
  bool contains(const std::string& key) const { return index_.count(key) != 0; }
  /// Removes `key`; returns whether it was present.
  bool erase(const std::string& key) {
    auto f = index_.find(key);
    if (f == index_.end()) return false;
    size_t pos = f->second;
    items_.erase(items_.begin() + static_cast<std::ptrdiff_t>(pos));
    index_.erase(f);
    for (auto& [k, i] : index_)
      if (i > pos) --i;
    return true;
  }
  void clear() {
    items_.clear();
    index_.clear();
  }

  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  const std::vector<Item>& items() const { return items_; }
  std::vector<std::string> keys() const {
    std::vector<std::string> k;
    k.reserve(items_.size());
    for (const auto& it : items_) k.push_back(it.first);
    return k;
  }
  std::vector<V> values() const {
    std::vector<V> v;
    v.reserve(items_.size());
    for (const auto& it : items_) v.push_back(it.second);
    return v;
  }
  const Item& item(size_t i) const { return items_.at(i); }
  Item& item(size_t i) { return items_.at(i); }

  iterator begin() { return items_.begin(); }
  iterator end() { return items_.end(); }
  const_iterator begin() const { return items_.begin(); }
  const_iterator end() const { return items_.end(); }

 private:
  std::vector<Item> items_;
  std::unordered_map<std::string, size_t> index_;
};

}  // namespace troupe
