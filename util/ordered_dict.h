// OrderedDict<Key, Value>: libtorch's torch::OrderedDict (what named_parameters(), named_buffers(),
// named_children() and state_dict() return): keys in insertion order with O(1) lookup, items with key()
// and value(), libtorch's errors. An Item is also a std::pair, so `for (auto& [name, t] : dict)` works.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <sstream>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace troupe {

/// A map from keys to values that iterates in insertion order, as Python's dict.
template <class Key, class Value>
class OrderedDict {
 public:
  /// One entry: key() and value() (libtorch's OrderedDict::Item), and first / second as a std::pair.
  class Item : public std::pair<Key, Value> {
   public:
    Item(Key key, Value value) : std::pair<Key, Value>(std::move(key), std::move(value)) {}
    const Key& key() const noexcept { return this->first; }
    Value& value() noexcept { return this->second; }
    const Value& value() const noexcept { return this->second; }
    const std::pair<Key, Value>& pair() const noexcept { return *this; }
    Value& operator*() noexcept { return this->second; }
    const Value& operator*() const noexcept { return this->second; }
    Value* operator->() noexcept { return &this->second; }
    const Value* operator->() const noexcept { return &this->second; }
  };
  using Iterator = typename std::vector<Item>::iterator;
  using ConstIterator = typename std::vector<Item>::const_iterator;
  using iterator = Iterator;
  using const_iterator = ConstIterator;

  /// `key_description` names the keys in errors ("Parameter 'w' is not defined").
  explicit OrderedDict(std::string key_description = "Key") : key_description_(std::move(key_description)) {}
  OrderedDict(std::initializer_list<Item> items) : OrderedDict() {
    for (const auto& it : items) insert(it.key(), it.value());
  }

  const std::string& key_description() const noexcept { return key_description_; }

  /// The first / last item; an error on an empty dict.
  Item& front() { return items_.at(checked_end("front")); }
  const Item& front() const { return items_.at(checked_end("front")); }
  Item& back() { return items_.at(checked_end("back") + items_.size() - 1); }
  const Item& back() const { return items_.at(checked_end("back") + items_.size() - 1); }

  /// The item at `index` in insertion order.
  Item& operator[](size_t index) { return items_[checked_index(index)]; }
  const Item& operator[](size_t index) const { return items_[checked_index(index)]; }
  /// The value of `key`; "<Key> '<key>' is not defined" when missing.
  Value& operator[](const Key& key) { return at(key); }
  const Value& operator[](const Key& key) const { return at(key); }
  Value& at(const Key& key) {
    auto f = index_.find(key);
    if (f == index_.end()) fail(key, "' is not defined");
    return items_[f->second].second;
  }
  const Value& at(const Key& key) const { return const_cast<OrderedDict*>(this)->at(key); }
  /// Pointer to the value of `key`, or null.
  Value* find(const Key& key) noexcept {
    auto f = index_.find(key);
    return f == index_.end() ? nullptr : &items_[f->second].second;
  }
  const Value* find(const Key& key) const noexcept { return const_cast<OrderedDict*>(this)->find(key); }
  bool contains(const Key& key) const noexcept { return index_.count(key) != 0; }

  /// Appends a new key; "<Key> '<key>' already defined" if it exists.
  Value& insert(Key key, Value value) {
    if (index_.count(key)) fail(key, "' already defined");
    index_.emplace(key, items_.size());
    items_.emplace_back(std::move(key), std::move(value));
    return items_.back().second;
  }
  /// Appends `key`, or replaces its value in place (keeping its position): Python's dict[key] = value.
  Value& insert_or_assign(const Key& key, Value value) {
    if (Value* v = find(key)) return *v = std::move(value);
    return insert(key, std::move(value));
  }
  /// insert_or_assign of every item of `other`, in its order.
  void update(const OrderedDict& other) {
    for (const auto& it : other) insert_or_assign(it.key(), it.value());
  }
  void update(OrderedDict&& other) {
    for (auto& it : other) insert_or_assign(it.key(), std::move(it.second));
  }
  /// Removes `key`; "Key '<key>' doesn't exist" when missing.
  void erase(const Key& key) {
    auto f = index_.find(key);
    if (f == index_.end()) {
      std::ostringstream m;
      m << "Key '" << key << "' doesn't exist";
      throw std::out_of_range(m.str());
    }
    const size_t pos = f->second;
    items_.erase(items_.begin() + static_cast<std::ptrdiff_t>(pos));
    index_.erase(f);
    for (auto& [k, i] : index_)
      if (i > pos) --i;
  }
  void clear() {
    items_.clear();
    index_.clear();
  }
  void reserve(size_t n) {
    items_.reserve(n);
    index_.reserve(n);
  }

  size_t size() const noexcept { return items_.size(); }
  bool is_empty() const noexcept { return items_.empty(); }
  bool empty() const noexcept { return items_.empty(); }
  const std::vector<Item>& items() const noexcept { return items_; }
  std::vector<Key> keys() const {
    std::vector<Key> k;
    k.reserve(items_.size());
    for (const auto& it : items_) k.push_back(it.first);
    return k;
  }
  std::vector<Value> values() const {
    std::vector<Value> v;
    v.reserve(items_.size());
    for (const auto& it : items_) v.push_back(it.second);
    return v;
  }
  std::vector<std::pair<Key, Value>> pairs() const {
    return std::vector<std::pair<Key, Value>>(items_.begin(), items_.end());
  }

  Iterator begin() { return items_.begin(); }
  Iterator end() { return items_.end(); }
  ConstIterator begin() const { return items_.begin(); }
  ConstIterator end() const { return items_.end(); }

 private:
  [[noreturn]] void fail(const Key& key, const char* what) const {
    std::ostringstream m;
    m << key_description_ << " '" << key << what;
    throw std::out_of_range(m.str());
  }
  size_t checked_index(size_t index) const {
    if (index >= items_.size()) throw std::out_of_range("Index " + std::to_string(index) + " is out of bounds");
    return index;
  }
  size_t checked_end(const char* which) const {
    if (items_.empty()) throw std::out_of_range(std::string("Called ") + which + "() on an empty OrderedDict");
    return 0;
  }

  std::vector<Item> items_;
  std::unordered_map<Key, size_t> index_;
  std::string key_description_ = "Key";
};

/// Same items in the same order (libtorch's operator==).
template <class K, class V>
bool operator==(const OrderedDict<K, V>& a, const OrderedDict<K, V>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!(a[i].key() == b[i].key() && a[i].value() == b[i].value())) return false;
  return true;
}

}  // namespace troupe
