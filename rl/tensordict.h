// TensorDict (the tensordict library TorchRL is built on): named tensors, nested by key, sharing leading
// batch dimensions. The unit of data in rl/: an environment step, a collected batch, a replay sample.
//
//   rl::TensorDict td({{"observation", obs}, {"next.reward", r}}, /*batch_size=*/{16});
//   td.get({"next", "reward"});          // same as td.get("next.reward")
//   rl::TensorDict first = td[0];        // views of row 0, batch_size []
//   rl::TensorDict half = td.slice(0, 0, 8);
//   auto both = rl::TensorDict::stack({td, td}, 1);   // batch_size [16, 2]
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include <troupe/tensor/tensor.h>

namespace troupe::rl {

/// A nested key: "reward", "next.reward" or {"next", "reward"} (TorchRL's tuple keys).
class Key {
 public:
  Key(const char* key);         // NOLINT(google-explicit-constructor): "next.reward" splits at '.'
  Key(const std::string& key);  // NOLINT(google-explicit-constructor)
  Key(std::initializer_list<std::string> parts);
  explicit Key(std::vector<std::string> parts);

  const std::vector<std::string>& parts() const { return parts_; }
  /// The first part, and the key without it.
  const std::string& head() const { return parts_.front(); }
  Key tail() const;
  bool nested() const { return parts_.size() > 1; }
  /// "next.reward".
  std::string str() const;
  /// Python's repr of the key: 'reward' or ('next', 'reward').
  std::string repr() const;
  bool operator==(const Key& o) const { return parts_ == o.parts_; }
  bool operator!=(const Key& o) const { return parts_ != o.parts_; }

 private:
  std::vector<std::string> parts_;
};

/// Tensors and nested TensorDicts by name, in insertion order, every one shaped [*batch_size, ...].
/// Copies share the tensors (as Python references do) but not the structure: adding a key to a copy
/// leaves the original alone. clone() copies the data too.
class TensorDict {
 public:
  /// An empty TensorDict with this batch size (and device, when given: entries are moved to it).
  explicit TensorDict(std::vector<int64_t> batch_size = {}, std::optional<Device> device = std::nullopt);
  /// TensorDict({{"obs", x}, {"next.reward", r}}, {B}).
  TensorDict(std::initializer_list<std::pair<Key, Tensor>> entries, std::vector<int64_t> batch_size,
             std::optional<Device> device = std::nullopt);
  TensorDict(const TensorDict& other);
  TensorDict& operator=(const TensorDict& other);
  TensorDict(TensorDict&&) noexcept;
  TensorDict& operator=(TensorDict&&) noexcept;
  ~TensorDict();

  // ---- shape
  const std::vector<int64_t>& batch_size() const { return batch_size_; }
  int64_t batch_dims() const { return static_cast<int64_t>(batch_size_.size()); }
  int64_t ndim() const { return batch_dims(); }
  /// Product of the batch size.
  int64_t numel() const;
  /// Changes the batch size (every entry, nested ones included, must start with the new one).
  void set_batch_size(std::vector<int64_t> batch_size);
  const std::optional<Device>& device() const { return device_; }

  // ---- entries
  /// Sets `key` (intermediate TensorDicts are created). The tensor's leading dims must equal the batch
  /// size: "batch dimension mismatch, got self.batch_size=torch.Size([3]) and value.shape=torch.Size([4])".
  TensorDict& set(const Key& key, const Tensor& value);
  /// Sets a nested TensorDict; its batch size must start with this one's.
  TensorDict& set(const Key& key, const TensorDict& value);
  /// The same, taking `value`'s entries without copying them.
  TensorDict& set(const Key& key, TensorDict&& value);
  /// Writes into the existing tensor at `key` (same shape), keeping its storage (set_).
  TensorDict& set_(const Key& key, const Tensor& value);
  /// The tensor at `key`; KeyError-like std::out_of_range naming the key and the keys present.
  Tensor get(const Key& key) const;
  /// The tensor at `key`, or `fallback` when absent.
  Tensor get(const Key& key, const Tensor& fallback) const;
  /// The nested TensorDict at `key` (a reference into this one).
  TensorDict& get_sub(const Key& key);
  const TensorDict& get_sub(const Key& key) const;
  /// Whether `key` names a tensor or a nested TensorDict.
  bool contains(const Key& key) const;
  /// Whether `key` names a nested TensorDict.
  bool is_sub(const Key& key) const;
  /// Removes `key` (del td[key]); throws when absent.
  TensorDict& erase(const Key& key);
  /// Moves the entry at `old_key` to `new_key` (rename_key_).
  TensorDict& rename_key_(const Key& old_key, const Key& new_key);
  /// Keys in insertion order: the top level by default, nested keys too with include_nested, tensors
  /// only with leaves_only.
  std::vector<Key> keys(bool include_nested = false, bool leaves_only = false) const;
  /// Number of top-level entries.
  size_t size() const;
  bool empty() const { return size() == 0; }
  /// Sets every leaf of `other` into this one (nested keys merged).
  TensorDict& update(const TensorDict& other);

  // ---- batch indexing (views where PyTorch gives views)
  /// Row i of the first batch dim (negative counts from the end); batch size loses its first dim.
  TensorDict operator[](int64_t index) const;
  /// Entries narrowed along batch dim `dim` to [start, end) with `step`.
  TensorDict slice(int64_t dim, std::optional<int64_t> start, std::optional<int64_t> end, int64_t step = 1) const;
  /// Rows of the first batch dim at integer `indices` (int64, 1-D) or where a bool mask over the batch
  /// is true (a copy, as PyTorch's advanced indexing).
  TensorDict index(const Tensor& indices) const;
  /// Writes `value`'s rows into rows `indices` of the first batch dim (td[indices] = value).
  TensorDict& set_at_(const Tensor& indices, const TensorDict& value);
  /// Entries reshaped so that the batch becomes `batch_size` (same number of elements).
  TensorDict reshape(std::vector<int64_t> batch_size) const;
  TensorDict unsqueeze(int64_t dim) const;
  TensorDict squeeze(int64_t dim) const;
  /// Every entry with its batch dims expanded to `batch_size` (views).
  TensorDict expand(std::vector<int64_t> batch_size) const;
  /// Joins along batch dim `dim` (all must have the same keys and other batch dims).
  static TensorDict cat(const std::vector<TensorDict>& tds, int64_t dim = 0);
  /// Stacks along a new batch dim `dim`.
  static TensorDict stack(const std::vector<TensorDict>& tds, int64_t dim = 0);

  // ---- whole-dict operations
  /// Copies of every tensor.
  TensorDict clone() const;
  TensorDict to(ScalarType dtype) const;
  TensorDict to(Device device) const;
  /// fn applied to every leaf (the result must keep the batch dims).
  TensorDict apply(const std::function<Tensor(const Tensor&)>& fn) const;
  /// Only these keys (nested keys select inside), or all but these.
  TensorDict select(const std::vector<Key>& keys, bool strict = true) const;
  TensorDict exclude(const std::vector<Key>& keys) const;
  /// Fills every leaf with zeros (zero_()), in place.
  TensorDict& zero_();
  /// Detached from the autograd graph.
  TensorDict detach() const;

  /// Same keys, shapes, dtypes and values (tensordict's (a == b).all()).
  friend bool equal(const TensorDict& a, const TensorDict& b);
  friend TensorDict step_mdp(const TensorDict& td);

  /// TorchRL's printed form (fields sorted by key, batch_size, device, is_shared).
  std::string repr() const;

 private:
  struct Entry;
  const Entry* find(const std::string& name) const;
  Entry* find(const std::string& name);
  /// The TensorDict holding key's last part, made when `create`.
  TensorDict* parent_of(const Key& key, bool create);
  const TensorDict* parent_of(const Key& key) const;
  void check_batch(const Key& key, IntArrayRef shape, bool nested_td) const;
  /// set() of a tensor under the one-part key `name` of this TensorDict (no Key to parse).
  void set_entry(const std::string& name, const Tensor& value);
  /// Joins tds entry by entry with `join` (cat or stack) along dim d; batch is the result's batch size.
  static TensorDict join_all(const std::vector<const TensorDict*>& tds, int64_t d, std::vector<int64_t> batch,
                             const char* fn, const std::function<Tensor(const std::vector<Tensor>&)>& join);
  [[noreturn]] void key_error(const Key& key) const;
  /// A TensorDict whose leaves are fn(leaf), with batch size `batch` (recursively: nested dicts keep
  /// their extra dims after the batch).
  TensorDict map(const std::function<Tensor(const Tensor&)>& fn, std::vector<int64_t> batch) const;

  std::vector<Entry> entries_;
  std::vector<int64_t> batch_size_;
  std::optional<Device> device_;
};

/// Same keys, shapes, dtypes and values.
bool equal(const TensorDict& a, const TensorDict& b);
std::ostream& operator<<(std::ostream& os, const TensorDict& td);

}  // namespace troupe::rl
