// TensorDict: entries, batch checks, batch indexing, cat/stack, printing (rl/tensordict.h).
#include <troupe/rl/tensordict.h>

#include <algorithm>
#include <numeric>
#include <sstream>
#include <stdexcept>

#include <troupe/tensor/indexing.h>
#include <troupe/tensor/ops.h>

namespace troupe::rl {

namespace {

std::string torch_size(const std::vector<int64_t>& s) {
  std::string out = "torch.Size([";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "])";
}

std::vector<int64_t> concat(std::vector<int64_t> a, const std::vector<int64_t>& b, size_t from) {
  a.insert(a.end(), b.begin() + static_cast<std::ptrdiff_t>(std::min(from, b.size())), b.end());
  return a;
}

// Python's textwrap.indent(text, "    "): every line that is not only whitespace gets the prefix.
std::string indent4(const std::string& text) {
  std::string out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t nl = text.find('\n', start);
    std::string line = text.substr(start, nl == std::string::npos ? std::string::npos : nl - start);
    if (line.find_first_not_of(" \t") != std::string::npos) out += "    ";
    out += line;
    if (nl == std::string::npos) break;
    out += '\n';
    start = nl + 1;
  }
  return out;
}

int64_t wrap_dim(int64_t dim, int64_t ndims, const char* fn) {
  int64_t d = dim < 0 ? dim + ndims : dim;
  if (d < 0 || d >= ndims)
    throw std::out_of_range(std::string("[TensorDict.") + fn + "] dim " + std::to_string(dim) +
                            " is out of range for a TensorDict with " + std::to_string(ndims) + " batch dims");
  return d;
}

}  // namespace

// ------------------------------------------------------------------------------------------------ Key

Key::Key(const char* key) : Key(std::string(key)) {}
Key::Key(const std::string& key) {
  size_t start = 0;
  while (true) {
    size_t dot = key.find('.', start);
    parts_.push_back(key.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  for (const auto& p : parts_)
    if (p.empty()) throw std::invalid_argument("[TensorDict] invalid key '" + key + "': empty part");
}
Key::Key(std::initializer_list<std::string> parts) : Key(std::vector<std::string>(parts)) {}
Key::Key(std::vector<std::string> parts) : parts_(std::move(parts)) {
  if (parts_.empty()) throw std::invalid_argument("[TensorDict] empty key");
  for (const auto& p : parts_)
    if (p.empty() || p.find('.') != std::string::npos)
      throw std::invalid_argument("[TensorDict] invalid key part '" + p + "'");
}
Key Key::tail() const { return Key(std::vector<std::string>(parts_.begin() + 1, parts_.end())); }
std::string Key::str() const {
  std::string out;
  for (size_t i = 0; i < parts_.size(); ++i) out += (i ? "." : "") + parts_[i];
  return out;
}
std::string Key::repr() const {
  if (parts_.size() == 1) return "'" + parts_[0] + "'";
  std::string out = "(";
  for (size_t i = 0; i < parts_.size(); ++i) out += (i ? ", '" : "'") + parts_[i] + "'";
  return out + ")";
}

// ------------------------------------------------------------------------------------------ entries

struct TensorDict::Entry {
  std::string name;
  Tensor tensor;                    // a leaf, or
  std::unique_ptr<TensorDict> td;   // a nested TensorDict
  Entry(std::string n, Tensor t) : name(std::move(n)), tensor(std::move(t)) {}
  Entry(std::string n, const TensorDict& d) : name(std::move(n)), td(std::make_unique<TensorDict>(d)) {}
  Entry(const Entry& o) : name(o.name), tensor(o.tensor), td(o.td ? std::make_unique<TensorDict>(*o.td) : nullptr) {}
  Entry(Entry&&) noexcept = default;
  Entry& operator=(const Entry& o) {
    if (this != &o) *this = Entry(o);
    return *this;
  }
  Entry& operator=(Entry&&) noexcept = default;
};

TensorDict::TensorDict(std::vector<int64_t> batch_size, std::optional<Device> device)
    : batch_size_(std::move(batch_size)), device_(device) {
  for (int64_t s : batch_size_)
    if (s < 0) throw std::invalid_argument("[TensorDict] batch size " + torch_size(batch_size_) + " has a negative dim");
}
TensorDict::TensorDict(std::initializer_list<std::pair<Key, Tensor>> entries, std::vector<int64_t> batch_size,
                       std::optional<Device> device)
    : TensorDict(std::move(batch_size), device) {
  for (const auto& [k, v] : entries) set(k, v);
}
TensorDict::TensorDict(const TensorDict& other) = default;
TensorDict& TensorDict::operator=(const TensorDict& other) = default;
TensorDict::TensorDict(TensorDict&&) noexcept = default;
TensorDict& TensorDict::operator=(TensorDict&&) noexcept = default;
TensorDict::~TensorDict() = default;

int64_t TensorDict::numel() const {
  return std::accumulate(batch_size_.begin(), batch_size_.end(), int64_t{1}, std::multiplies<>());
}

const TensorDict::Entry* TensorDict::find(const std::string& name) const {
  for (const auto& e : entries_)
    if (e.name == name) return &e;
  return nullptr;
}
TensorDict::Entry* TensorDict::find(const std::string& name) {
  for (auto& e : entries_)
    if (e.name == name) return &e;
  return nullptr;
}

void TensorDict::key_error(const Key& key) const {
  std::string present;
  for (const auto& k : keys(true)) present += (present.empty() ? "" : ", ") + k.repr();
  throw std::out_of_range("key " + key.repr() + " not found in TensorDict with keys [" + present + "]");
}

TensorDict* TensorDict::parent_of(const Key& key, bool create) {
  TensorDict* td = this;
  const auto& parts = key.parts();
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    Entry* e = td->find(parts[i]);
    if (!e) {
      if (!create) return nullptr;
      td->entries_.emplace_back(parts[i], TensorDict(td->batch_size_, td->device_));
      e = &td->entries_.back();
    } else if (!e->td) {
      if (!create) return nullptr;
      throw std::invalid_argument("[TensorDict] can't set " + key.repr() + ": '" + parts[i] +
                                  "' is a tensor, not a TensorDict");
    }
    td = e->td.get();
  }
  return td;
}
const TensorDict* TensorDict::parent_of(const Key& key) const {
  return const_cast<TensorDict*>(this)->parent_of(key, false);
}

void TensorDict::check_batch(const Key& key, IntArrayRef shape, bool nested_td) const {
  bool ok = shape.size() >= batch_size_.size() && std::equal(batch_size_.begin(), batch_size_.end(), shape.begin());
  if (!ok)
    throw std::invalid_argument(std::string(nested_td ? "batch size mismatch" : "batch dimension mismatch") +
                                " for key " + key.repr() + ", got self.batch_size=" + torch_size(batch_size_) +
                                " and value.shape=" + torch_size(shape.vec()) + ".");
}

void TensorDict::set_entry(const std::string& name, const Tensor& value) {
  IntArrayRef shape = value.sizes();
  if (shape.size() < batch_size_.size() || !std::equal(batch_size_.begin(), batch_size_.end(), shape.begin()))
    check_batch(Key(std::vector<std::string>{name}), shape, false);
  Tensor v = device_ && value.device() != *device_ ? value.to(*device_) : value;
  if (Entry* e = find(name)) {
    e->td.reset();
    e->tensor = std::move(v);
  } else {
    entries_.emplace_back(name, std::move(v));
  }
}

TensorDict& TensorDict::set(const Key& key, const Tensor& value) {
  if (!value.defined()) throw std::invalid_argument("[TensorDict.set] undefined tensor for key " + key.repr());
  if (!key.nested()) {
    set_entry(key.head(), value);
    return *this;
  }
  TensorDict* parent = parent_of(key, true);
  parent->check_batch(key, value.sizes(), false);
  Tensor v = parent->device_ && value.device() != *parent->device_ ? value.to(*parent->device_) : value;
  const std::string& name = key.parts().back();
  if (Entry* e = parent->find(name)) {
    e->td.reset();
    e->tensor = v;
  } else {
    parent->entries_.emplace_back(name, v);
  }
  return *this;
}

TensorDict& TensorDict::set(const Key& key, const TensorDict& value) { return set(key, TensorDict(value)); }

TensorDict& TensorDict::set(const Key& key, TensorDict&& value) {
  TensorDict* parent = parent_of(key, true);
  parent->check_batch(key, value.batch_size_, true);
  const std::string& name = key.parts().back();
  TensorDict copy = std::move(value);
  if (parent->device_ && copy.device_ != parent->device_) copy = copy.to(*parent->device_);
  if (Entry* e = parent->find(name)) {
    e->tensor = Tensor();
    e->td = std::make_unique<TensorDict>(std::move(copy));
  } else {
    parent->entries_.emplace_back(name, std::move(copy));
  }
  return *this;
}

TensorDict& TensorDict::set_(const Key& key, const Tensor& value) {
  Tensor dst = get(key);
  if (dst.sizes().vec() != value.sizes().vec())
    throw std::invalid_argument("[TensorDict.set_] shape of " + key.repr() + " is " + torch_size(dst.sizes().vec()) +
                                ", got " + torch_size(value.sizes().vec()));
  dst.copy_(value);
  return *this;
}

Tensor TensorDict::get(const Key& key) const {
  const TensorDict* parent = parent_of(key);
  const Entry* e = parent ? parent->find(key.parts().back()) : nullptr;
  if (!e) key_error(key);
  if (e->td)
    throw std::invalid_argument("[TensorDict.get] " + key.repr() + " is a TensorDict, not a tensor (use get_sub)");
  return e->tensor;
}
Tensor TensorDict::get(const Key& key, const Tensor& fallback) const {
  const TensorDict* parent = parent_of(key);
  const Entry* e = parent ? parent->find(key.parts().back()) : nullptr;
  if (!e || e->td) return fallback;
  return e->tensor;
}
TensorDict& TensorDict::get_sub(const Key& key) {
  TensorDict* parent = parent_of(key, false);
  Entry* e = parent ? parent->find(key.parts().back()) : nullptr;
  if (!e) key_error(key);
  if (!e->td) throw std::invalid_argument("[TensorDict.get_sub] " + key.repr() + " is a tensor, not a TensorDict");
  return *e->td;
}
const TensorDict& TensorDict::get_sub(const Key& key) const { return const_cast<TensorDict*>(this)->get_sub(key); }
bool TensorDict::contains(const Key& key) const {
  const TensorDict* parent = parent_of(key);
  return parent && parent->find(key.parts().back());
}
bool TensorDict::is_sub(const Key& key) const {
  const TensorDict* parent = parent_of(key);
  const Entry* e = parent ? parent->find(key.parts().back()) : nullptr;
  return e && e->td;
}
TensorDict& TensorDict::erase(const Key& key) {
  TensorDict* parent = parent_of(key, false);
  if (!parent || !parent->find(key.parts().back())) key_error(key);
  auto& es = parent->entries_;
  es.erase(std::find_if(es.begin(), es.end(), [&](const Entry& e) { return e.name == key.parts().back(); }));
  return *this;
}
TensorDict& TensorDict::rename_key_(const Key& old_key, const Key& new_key) {
  if (contains(new_key)) throw std::invalid_argument("[TensorDict.rename_key_] key " + new_key.repr() + " already present");
  if (is_sub(old_key)) {
    TensorDict sub = get_sub(old_key);
    erase(old_key);
    set(new_key, sub);
  } else {
    Tensor t = get(old_key);
    erase(old_key);
    set(new_key, t);
  }
  return *this;
}
std::vector<Key> TensorDict::keys(bool include_nested, bool leaves_only) const {
  std::vector<Key> out;
  for (const auto& e : entries_) {
    if (!e.td || !leaves_only) out.push_back(Key(std::vector<std::string>{e.name}));
    if (e.td && include_nested)
      for (const auto& k : e.td->keys(true, leaves_only)) {
        std::vector<std::string> parts{e.name};
        parts.insert(parts.end(), k.parts().begin(), k.parts().end());
        out.push_back(Key(parts));
      }
  }
  return out;
}
size_t TensorDict::size() const { return entries_.size(); }
TensorDict& TensorDict::update(const TensorDict& other) {
  if (&other == this) return *this;  // every leaf set to itself
  // every leaf of other, in keys(true, true) order; top-level leaves without building their Keys
  for (const auto& e : other.entries_) {
    if (!e.td) {
      set_entry(e.name, e.tensor);
      continue;
    }
    for (const auto& k : e.td->keys(true, true)) {
      std::vector<std::string> parts{e.name};
      parts.insert(parts.end(), k.parts().begin(), k.parts().end());
      set(Key(std::move(parts)), e.td->get(k));
    }
  }
  return *this;
}

void TensorDict::set_batch_size(std::vector<int64_t> batch_size) {
  for (const auto& e : entries_) {
    std::vector<int64_t> shape = e.td ? e.td->batch_size_ : e.tensor.sizes().vec();
    bool ok = shape.size() >= batch_size.size() && std::equal(batch_size.begin(), batch_size.end(), shape.begin());
    if (!ok)
      throw std::invalid_argument("[TensorDict.batch_size] the batch size " + torch_size(batch_size) +
                                  " is incompatible with entry '" + e.name + "' of shape " + torch_size(shape));
  }
  batch_size_ = std::move(batch_size);
}

// ---------------------------------------------------------------------------------- batch indexing

TensorDict TensorDict::map(const std::function<Tensor(const Tensor&)>& fn, std::vector<int64_t> batch) const {
  TensorDict out(batch, device_);
  out.entries_.reserve(entries_.size());
  for (const auto& e : entries_) {
    if (e.td) out.entries_.emplace_back(e.name, e.td->map(fn, concat(batch, e.td->batch_size_, batch_size_.size())));
    else out.entries_.emplace_back(e.name, fn(e.tensor));
  }
  return out;
}

TensorDict TensorDict::operator[](int64_t index) const {
  if (batch_size_.empty()) throw std::out_of_range("[TensorDict] can't index a TensorDict with batch_size torch.Size([])");
  int64_t n = batch_size_[0];
  int64_t i = index < 0 ? index + n : index;
  if (i < 0 || i >= n)
    throw std::out_of_range("index " + std::to_string(index) + " is out of bounds for dimension 0 with size " +
                            std::to_string(n));
  return map([i](const Tensor& t) { return t.select(0, i); },
             std::vector<int64_t>(batch_size_.begin() + 1, batch_size_.end()));
}

TensorDict TensorDict::slice(int64_t dim, std::optional<int64_t> start, std::optional<int64_t> end,
                             int64_t step) const {
  int64_t d = wrap_dim(dim, batch_dims(), "slice");
  if (step <= 0) throw std::invalid_argument("[TensorDict.slice] step must be positive, got " + std::to_string(step));
  // the new length, with Python's clamping of start and end
  int64_t n = batch_size_[d];
  auto clamp = [n](std::optional<int64_t> v, int64_t dflt) {
    if (!v) return dflt;
    int64_t x = *v < 0 ? *v + n : *v;
    return std::clamp<int64_t>(x, 0, n);
  };
  int64_t s = clamp(start, 0), e = clamp(end, n);
  std::vector<int64_t> batch = batch_size_;
  batch[d] = e > s ? (e - s + step - 1) / step : 0;
  return map([=](const Tensor& t) { return t.slice(d, s, e, step); }, batch);
}

TensorDict TensorDict::index(const Tensor& indices) const {
  if (batch_size_.empty()) throw std::out_of_range("[TensorDict.index] no batch dimension to index");
  Tensor idx = indices;
  if (idx.dtype() == kBool) {
    if (idx.dim() != 1 || idx.size(0) != batch_size_[0])
      throw std::invalid_argument("[TensorDict.index] a mask must have shape " +
                                  torch_size({batch_size_[0]}) + ", got " + torch_size(idx.sizes().vec()));
    idx = nonzero(idx).reshape({-1});
  }
  if (idx.dtype() != kInt64 || idx.dim() != 1)
    throw std::invalid_argument("[TensorDict.index] indices must be a 1-D int64 or bool tensor, got " +
                                std::string(dtype_name(idx.dtype())) + " of shape " + torch_size(idx.sizes().vec()));
  std::vector<int64_t> batch = batch_size_;
  batch[0] = idx.size(0);
  return map([&](const Tensor& t) { return t.index_select(0, idx); }, batch);
}

TensorDict& TensorDict::set_at_(const Tensor& indices, const TensorDict& value) {
  for (const auto& k : keys(true, true)) {
    if (!value.contains(k)) key_error(k);
    Tensor dst = get(k);
    dst.index_put_({indices}, value.get(k).to(dst.dtype()));
  }
  return *this;
}

TensorDict TensorDict::reshape(std::vector<int64_t> batch_size) const {
  // resolve a -1 against numel()
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < batch_size.size(); ++i) {
    if (batch_size[i] == -1) infer = static_cast<int64_t>(i);
    else known *= batch_size[i];
  }
  if (infer >= 0 && known > 0) batch_size[static_cast<size_t>(infer)] = numel() / known;
  int64_t total = std::accumulate(batch_size.begin(), batch_size.end(), int64_t{1}, std::multiplies<>());
  if (total != numel())
    throw std::invalid_argument("[TensorDict.reshape] shape " + torch_size(batch_size) + " is invalid for batch_size " +
                                torch_size(batch_size_));
  const size_t old_dims = batch_size_.size();
  return map([&](const Tensor& t) {
    std::vector<int64_t> shape = concat(batch_size, t.sizes().vec(), old_dims);
    return t.reshape(shape);
  }, batch_size);
}

TensorDict TensorDict::unsqueeze(int64_t dim) const {
  int64_t d = dim < 0 ? dim + batch_dims() + 1 : dim;
  if (d < 0 || d > batch_dims()) throw std::out_of_range("[TensorDict.unsqueeze] dim " + std::to_string(dim) + " out of range");
  std::vector<int64_t> batch = batch_size_;
  batch.insert(batch.begin() + d, 1);
  return map([d](const Tensor& t) { return t.unsqueeze(d); }, batch);
}

TensorDict TensorDict::squeeze(int64_t dim) const {
  int64_t d = wrap_dim(dim, batch_dims(), "squeeze");
  if (batch_size_[d] != 1) return *this;
  std::vector<int64_t> batch = batch_size_;
  batch.erase(batch.begin() + d);
  return map([d](const Tensor& t) { return t.squeeze(d); }, batch);
}

TensorDict TensorDict::expand(std::vector<int64_t> batch_size) const {
  const size_t old_dims = batch_size_.size();
  return map([&](const Tensor& t) { return t.expand(concat(batch_size, t.sizes().vec(), old_dims)); }, batch_size);
}

TensorDict TensorDict::join_all(const std::vector<const TensorDict*>& tds, int64_t d, std::vector<int64_t> batch,
                                const char* fn, const std::function<Tensor(const std::vector<Tensor>&)>& join) {
  TensorDict out(batch, tds[0]->device());
  const auto& first = tds[0]->entries_;
  for (const TensorDict* td : tds) {
    bool same = td->entries_.size() == first.size();
    for (size_t i = 0; same && i < first.size(); ++i) same = td->entries_[i].name == first[i].name;
    if (!same) {
      auto names = [](const std::vector<Key>& ks) {
        std::string s;
        for (const auto& k : ks) s += (s.empty() ? "" : ", ") + k.repr();
        return "[" + s + "]";
      };
      throw std::invalid_argument(std::string("[TensorDict.") + fn + "] the TensorDicts have different keys: " +
                                  names(tds[0]->keys()) + " and " + names(td->keys()));
    }
  }
  out.entries_.reserve(first.size());
  std::vector<Tensor> ts;
  ts.reserve(tds.size());
  for (size_t i = 0; i < first.size(); ++i) {
    const std::string& name = first[i].name;
    if (first[i].td) {
      std::vector<const TensorDict*> subs;
      subs.reserve(tds.size());
      for (const TensorDict* td : tds) subs.push_back(&td->get_sub(Key(std::vector<std::string>{name})));
      std::vector<int64_t> sub_batch = batch;
      const auto& sb = subs[0]->batch_size();
      sub_batch.insert(sub_batch.end(), sb.begin() + static_cast<std::ptrdiff_t>(tds[0]->batch_dims()), sb.end());
      out.set(Key(std::vector<std::string>{name}), join_all(subs, d, sub_batch, fn, join));
    } else {
      ts.clear();
      for (const TensorDict* td : tds) {
        const Entry& e = td->entries_[i];
        if (e.td) td->get(Key(std::vector<std::string>{name}));  // a TensorDict where the first has a tensor: get's error
        ts.push_back(e.tensor);
      }
      out.set_entry(name, join(ts));
    }
  }
  return out;
}

TensorDict TensorDict::cat(const std::vector<TensorDict>& tds, int64_t dim) {
  if (tds.empty()) throw std::invalid_argument("[TensorDict.cat] no TensorDicts to join");
  int64_t d = wrap_dim(dim, tds[0].batch_dims(), "cat");
  std::vector<int64_t> batch = tds[0].batch_size();
  batch[d] = 0;
  for (const auto& td : tds) {
    auto b = td.batch_size();
    auto ref = tds[0].batch_size();
    b[d] = ref[d] = 0;
    if (b != ref)
      throw std::invalid_argument("[TensorDict.cat] batch sizes " + torch_size(tds[0].batch_size()) + " and " +
                                  torch_size(td.batch_size()) + " differ outside dim " + std::to_string(d));
    batch[d] += td.batch_size()[d];
  }
  std::vector<const TensorDict*> ptrs;
  for (const auto& td : tds) ptrs.push_back(&td);
  return join_all(ptrs, d, batch, "cat", [d](const std::vector<Tensor>& ts) { return troupe::cat(ts, d); });
}

TensorDict TensorDict::stack(const std::vector<TensorDict>& tds, int64_t dim) {
  if (tds.empty()) throw std::invalid_argument("[TensorDict.stack] no TensorDicts to stack");
  int64_t nd = tds[0].batch_dims();
  int64_t d = dim < 0 ? dim + nd + 1 : dim;
  if (d < 0 || d > nd) throw std::out_of_range("[TensorDict.stack] dim " + std::to_string(dim) + " out of range");
  for (const auto& td : tds)
    if (td.batch_size() != tds[0].batch_size())
      throw std::invalid_argument("[TensorDict.stack] batch sizes " + torch_size(tds[0].batch_size()) + " and " +
                                  torch_size(td.batch_size()) + " differ");
  std::vector<int64_t> batch = tds[0].batch_size();
  batch.insert(batch.begin() + d, static_cast<int64_t>(tds.size()));
  std::vector<const TensorDict*> ptrs;
  for (const auto& td : tds) ptrs.push_back(&td);
  return join_all(ptrs, d, batch, "stack", [d](const std::vector<Tensor>& ts) { return troupe::stack(ts, d); });
}

// step_mdp (declared in rl/env.h): here, since it reads the entries without building Keys.
TensorDict step_mdp(const TensorDict& td) {
  const TensorDict::Entry* next_entry = td.find("next");
  if (!next_entry || !next_entry->td)
    throw std::invalid_argument("[step_mdp] the TensorDict has no 'next' entry (step() it first)");
  // td without next and action (exclude), then next's leaves but reward set into it (nested leaves
  // through set(), in keys(true, true) order)
  TensorDict out(td.batch_size_, td.device_);
  out.entries_.reserve(td.entries_.size());
  for (const auto& e : td.entries_)
    if (e.name != "next" && e.name != "action") out.entries_.push_back(e);
  const TensorDict& next = *next_entry->td;
  for (const auto& e : next.entries_) {
    if (!e.td) {
      if (e.name != "reward") out.set_entry(e.name, e.tensor);
      continue;
    }
    for (const Key& k : e.td->keys(true, true)) {
      std::vector<std::string> parts{e.name};
      parts.insert(parts.end(), k.parts().begin(), k.parts().end());
      out.set(Key(std::move(parts)), e.td->get(k));
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------- whole-dict ops

TensorDict TensorDict::clone() const {
  return map([](const Tensor& t) { return t.clone(); }, batch_size_);
}
TensorDict TensorDict::to(ScalarType dtype) const {
  return map([dtype](const Tensor& t) { return t.to(dtype); }, batch_size_);
}
TensorDict TensorDict::to(Device device) const {
  TensorDict out = map([device](const Tensor& t) { return t.to(device); }, batch_size_);
  // the device recorded at every level
  std::function<void(TensorDict&)> mark = [&](TensorDict& td) {
    td.device_ = device;
    for (auto& e : td.entries_)
      if (e.td) mark(*e.td);
  };
  mark(out);
  return out;
}
TensorDict TensorDict::apply(const std::function<Tensor(const Tensor&)>& fn) const {
  TensorDict out = map(fn, batch_size_);
  for (const auto& k : out.keys(true, true)) {
    auto shape = out.get(k).sizes().vec();
    if (shape.size() < batch_size_.size() || !std::equal(batch_size_.begin(), batch_size_.end(), shape.begin()))
      throw std::invalid_argument("[TensorDict.apply] fn changed the batch dims of " + k.repr() + ": got shape " +
                                  torch_size(shape) + " for batch_size " + torch_size(batch_size_));
  }
  return out;
}
TensorDict TensorDict::select(const std::vector<Key>& keys, bool strict) const {
  TensorDict out(batch_size_, device_);
  for (const auto& k : keys) {
    if (!contains(k)) {
      if (strict) key_error(k);
      continue;
    }
    if (is_sub(k)) out.set(k, get_sub(k));
    else out.set(k, get(k));
  }
  return out;
}
TensorDict TensorDict::exclude(const std::vector<Key>& keys) const {
  TensorDict out = *this;
  for (const auto& k : keys)
    if (out.contains(k)) out.erase(k);
  return out;
}
TensorDict& TensorDict::zero_() {
  for (auto& e : entries_) {
    if (e.td) e.td->zero_();
    else e.tensor.zero_();
  }
  return *this;
}
TensorDict TensorDict::detach() const {
  return map([](const Tensor& t) { return t.detach(); }, batch_size_);
}

bool equal(const TensorDict& a, const TensorDict& b) {
  if (a.batch_size() != b.batch_size()) return false;
  auto ka = a.keys(true, true), kb = b.keys(true, true);
  if (ka.size() != kb.size()) return false;
  for (const auto& k : ka) {
    if (!b.contains(k) || b.is_sub(k)) return false;
    Tensor x = a.get(k), y = b.get(k);
    if (x.dtype() != y.dtype() || x.sizes().vec() != y.sizes().vec() || !troupe::equal(x, y)) return false;
  }
  return true;
}

std::string TensorDict::repr() const {
  std::vector<std::string> fields;
  for (const auto& e : entries_) {
    if (e.td) {
      fields.push_back(e.name + ": " + e.td->repr());
    } else {
      const Tensor& t = e.tensor;
      fields.push_back(e.name + ": Tensor(shape=" + torch_size(t.sizes().vec()) + ", device=" + t.device().str() +
                       ", dtype=torch." + dtype_name(t.dtype()) + ", is_shared=False)");
    }
  }
  std::sort(fields.begin(), fields.end());
  std::string joined;
  for (size_t i = 0; i < fields.size(); ++i) joined += (i ? ",\n" : "") + fields[i];
  std::string field_str = indent4("fields={" + indent4("\n" + joined) + "}");
  std::string out = "TensorDict(\n" + field_str + ",\n" + indent4("batch_size=" + torch_size(batch_size_)) + ",\n" +
                    indent4("device=" + (device_ ? device_->str() : std::string("None"))) + ",\n" +
                    indent4("is_shared=False") + ")";
  return out;
}

std::ostream& operator<<(std::ostream& os, const TensorDict& td) { return os << td.repr(); }

}  // namespace troupe::rl
