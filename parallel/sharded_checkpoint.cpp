// The sharded checkpoint (layout in zero.h): this rank's piece of every parameter and optimizer state
// tensor, rank<r>.troupe + index.troupe, and loading at any world size.
#include <troupe/parallel/shard_core.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <stdexcept>

#include <troupe/nn/serialize.h>
#include <troupe/parallel/wrap_checks.h>
#include <troupe/tensor/autograd.h>
#include <troupe/tensor/ops.h>

namespace troupe::parallel::detail {

namespace {

constexpr const char* kMeta = "__meta__.";
constexpr const char* kWorldSize = "__world_size__";

struct IndexEntry {
  bool replicated = false;
  std::vector<int64_t> shape;
  std::vector<std::pair<int64_t, int64_t>> ranges;  // per old rank
};

// Rank `rank`'s shard of flat buffer g of entries prefix + <parameter name> + suffix, read from the old
// files (zeros where an optimizer entry is missing).
template <class ReadRange>
Tensor load_flat(const ShardCore& c, size_t g, int rank, const std::string& prefix, const std::string& suffix,
                 const std::map<std::string, IndexEntry>& idx, ReadRange& read_range) {
  const FlatShardInfo& G = c.groups[g];
  Tensor out = zeros({G.shard_numel}, TensorOptions(G.dtype));
  for (size_t k = 0; k < G.params.size(); ++k) {
    const size_t i = G.params[k];
    auto [off, len] = piece_of(G, c.numel_of(i), k, rank);
    if (len == 0) continue;
    const std::string name = prefix + c.names[i] + suffix;
    auto it = idx.find(name);
    if (it == idx.end()) {
      if (prefix == "optim.") continue;  // state this parameter did not have (zeros)
      throw std::runtime_error("[load_sharded] the checkpoint has no entry " + name);
    }
    if (it->second.shape != c.shapes[i])
      throw std::runtime_error("[load_sharded] " + name + ": the checkpoint has shape " +
                               shape_str(it->second.shape) + ", this model has " + shape_str(c.shapes[i]));
    read_range(name, it->second, off, len, out.narrow(0, G.offsets[k] + off - G.shard_offset, len));
  }
  return out;
}

}  // namespace

// Inner optimizer parameter index -> flat buffer.
int ShardCore::group_of_opt_index(size_t idx) const {
  auto ps = opt->parameters();
  if (idx >= ps.size()) return -1;
  for (size_t g = 0; g < shards.size(); ++g)
    if (ps[idx].is_same(shards[g])) return static_cast<int>(g);
  return -1;
}

std::vector<ShardEntry> ShardCore::entries() const {
  NoGradGuard no_grad;
  std::vector<ShardEntry> out;
  const int rank = group->rank();
  // Parameter i's piece of a flat shard-sized tensor of its buffer.
  auto add_piece = [&](const std::string& prefix, const std::string& suffix, size_t i, const Tensor& flat_shard) {
    const size_t g = group_of[i], k = slot_of[i];
    const FlatShardInfo& G = groups[g];
    auto [off, len] = piece_of(G, numel_of(i), k, rank);
    ShardEntry e;
    e.t.name = prefix + names[i] + suffix;
    e.t.full_shape = shapes[i];
    e.t.offset = off;
    e.t.length = len;
    const int64_t at = len > 0 ? G.offsets[k] + off - G.shard_offset : 0;
    e.t.shard = flat_shard.narrow(0, at, len).clone();
    e.g = static_cast<int>(g);
    e.k = static_cast<int>(k);
    out.push_back(std::move(e));
  };
  auto add_pieces = [&](const std::string& prefix, const std::string& suffix, size_t g, const Tensor& flat_shard) {
    for (size_t i : groups[g].params) add_piece(prefix, suffix, i, flat_shard);
  };
  for (size_t i = 0; i < params.size(); ++i) add_piece("model.", "", i, shards[group_of[i]].detach());
  const nn::StateDict sd = opt->state_dict();
  for (const auto& [key, t] : sd) {
    // "state.<idx>.<name>": sharded when it is a 1-d tensor of the shard's size.
    if (key.rfind("state.", 0) == 0) {
      const size_t dot = key.find('.', 6);
      if (dot != std::string::npos) {
        const int g = group_of_opt_index(static_cast<size_t>(std::stoll(key.substr(6, dot - 6))));
        if (g >= 0 && t.dim() == 1 && t.numel() == groups[static_cast<size_t>(g)].shard_numel) {
          add_pieces("optim.", "." + key.substr(dot + 1), static_cast<size_t>(g), t);
          continue;
        }
      }
    }
    ShardEntry e;
    e.t.name = "optim." + key;
    e.t.shard = t.contiguous();
    e.t.full_shape = to_shape(t.sizes());
    e.t.offset = 0;
    e.t.length = t.numel();
    e.t.replicated = true;
    out.push_back(std::move(e));
  }
  return out;
}

void ShardCore::save(const std::string& dir) const {
  namespace fs = std::filesystem;
  const std::string fn = "[save_sharded]";
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw std::runtime_error(fn + " cannot create the directory " + dir + ": " + ec.message());
  const auto es = entries();
  const int rank = group->rank(), size = group->size();
  nn::StateDict mine;
  for (const auto& e : es) {
    mine.insert(e.t.name, e.t.shard);
    std::vector<int64_t> meta{e.t.offset, e.t.length, e.t.replicated ? 1 : 0,
                              static_cast<int64_t>(e.t.full_shape.size())};
    meta.insert(meta.end(), e.t.full_shape.begin(), e.t.full_shape.end());
    mine.insert(kMeta + e.t.name, tensor(meta));
  }
  nn::save(mine, (fs::path(dir) / ("rank" + std::to_string(rank) + ".troupe")).string());
  if (rank == 0) {
    nn::StateDict index;
    index.insert(kWorldSize, tensor(std::vector<int64_t>{size}));
    for (const auto& e : es) {
      std::vector<int64_t> v{e.t.replicated ? 1 : 0, static_cast<int64_t>(e.t.full_shape.size())};
      v.insert(v.end(), e.t.full_shape.begin(), e.t.full_shape.end());
      v.push_back(size);
      for (int r = 0; r < size; ++r) {
        if (e.t.replicated) {
          v.push_back(0);
          v.push_back(e.t.length);
        } else {
          const FlatShardInfo& G = groups[static_cast<size_t>(e.g)];
          auto [off, len] = piece_of(G, numel_of(G.params[static_cast<size_t>(e.k)]), static_cast<size_t>(e.k), r);
          v.push_back(off);
          v.push_back(len);
        }
      }
      index.insert(e.t.name, tensor(v));
    }
    nn::save(index, (fs::path(dir) / "index.troupe").string());
  }
  if (size > 1) group->barrier();
}

void ShardCore::load(const std::string& dir) {
  namespace fs = std::filesystem;
  const std::string fn = "[load_sharded]";
  const std::string index_path = (fs::path(dir) / "index.troupe").string();
  if (!fs::exists(index_path))
    throw std::runtime_error(fn + " no index file " + index_path +
                             ": not a sharded checkpoint directory (save_sharded writes index.troupe and "
                             "rank<r>.troupe there)");
  const nn::StateDict index = nn::load_state_dict_file(index_path);
  const Tensor* ws = index.find(kWorldSize);
  if (!ws) throw std::runtime_error(fn + " " + index_path + " has no " + kWorldSize + " entry");
  const int old_size = static_cast<int>(ws->to_vector<int64_t>().at(0));
  std::map<std::string, IndexEntry> idx;
  for (const auto& kv : index) {
    const std::string& name = kv.first;  // not a structured binding: the lambda below captures it (clang-14)
    if (name == kWorldSize) continue;
    const auto v = kv.second.to_vector<int64_t>();
    IndexEntry e;
    size_t p = 0;
    auto next = [&]() {
      if (p >= v.size()) throw std::runtime_error(fn + " " + index_path + ": entry " + name + " is truncated");
      return v[p++];
    };
    e.replicated = next() != 0;
    const int64_t nd = next();
    for (int64_t d = 0; d < nd; ++d) e.shape.push_back(next());
    const int64_t n = next();
    if (n != old_size)
      throw std::runtime_error(fn + " " + index_path + ": entry " + name + " lists " + std::to_string(n) +
                               " ranks, the checkpoint has " + std::to_string(old_size));
    for (int64_t r = 0; r < n; ++r) {
      const int64_t o = next(), l = next();
      e.ranges.push_back({o, l});
    }
    idx[name] = std::move(e);
  }

  std::map<int, nn::StateDict> files;
  auto file = [&](int r) -> const nn::StateDict& {
    auto it = files.find(r);
    if (it != files.end()) return it->second;
    const std::string path = (fs::path(dir) / ("rank" + std::to_string(r) + ".troupe")).string();
    if (!fs::exists(path))
      throw std::runtime_error(fn + " missing shard file " + path + " (the index says " +
                               std::to_string(old_size) + " ranks saved this checkpoint)");
    return files.emplace(r, nn::load_state_dict_file(path)).first->second;
  };
  auto entry_of = [&](const std::string& name, const std::vector<int64_t>& shape) -> const IndexEntry& {
    auto it = idx.find(name);
    if (it == idx.end()) throw std::runtime_error(fn + " the checkpoint in " + dir + " has no entry " + name);
    if (!it->second.replicated && it->second.shape != shape)
      throw std::runtime_error(fn + " " + name + ": the checkpoint has shape " + shape_str(it->second.shape) +
                               ", this model has " + shape_str(shape));
    return it->second;
  };
  // Elements [lo, lo + len) of entry `name`'s flattened tensor, from the old files, into dest (1-d).
  auto read_range = [&](const std::string& name, const IndexEntry& e, int64_t lo, int64_t len, Tensor dest) {
    int64_t covered = 0;
    for (int r = 0; r < old_size && len > 0; ++r) {
      const auto [o, l] = e.ranges[static_cast<size_t>(r)];
      const int64_t a = std::max(o, lo), b = std::min(o + l, lo + len);
      if (b <= a) continue;
      const nn::StateDict& f = file(r);
      const Tensor* t = f.find(name);
      if (!t || t->numel() != l)
        throw std::runtime_error(fn + " shard file rank" + std::to_string(r) + ".troupe in " + dir + ": entry " +
                                 name + (t ? " has " + std::to_string(t->numel()) + " elements, the index says " +
                                                 std::to_string(l)
                                           : std::string(" is missing")));
      dest.narrow(0, a - lo, b - a).copy_(t->reshape({l}).narrow(0, a - o, b - a));
      covered += b - a;
    }
    if (covered != len)
      throw std::runtime_error(fn + " " + name + ": the old shards cover " + std::to_string(covered) + " of the " +
                               std::to_string(len) + " elements this rank needs");
  };

  NoGradGuard no_grad;
  drop_reduction();
  // Every model entry must exist, with this model's shapes; no extra ones.
  for (size_t i = 0; i < params.size(); ++i) entry_of("model." + names[i], shapes[i]);
  for (const auto& [name, e] : idx) {
    if (name.rfind("model.", 0) != 0) continue;
    const std::string p = name.substr(6);
    if (std::find(names.begin(), names.end(), p) == names.end())
      throw std::runtime_error(fn + " the checkpoint has " + name + ", which this model does not have");
  }
  const int rank = group->rank();
  std::vector<Tensor> new_shards;
  for (size_t g = 0; g < groups.size(); ++g) new_shards.push_back(load_flat(*this, g, rank, "model.", "", idx, read_range));

  // The optimizer: replicated entries from rank 0's file; the "params" lists from this optimizer, and
  // the per-buffer scalars ("state.<g>.<key>") by index when the saved run had as many buffers, else
  // from the first saved buffer that has them (the buffers step together).
  nn::StateDict osd;
  const nn::StateDict current = opt->state_dict();
  for (const auto& [key, t] : current)
    if (key.rfind("param_groups.", 0) == 0 && key.size() > 7 && key.compare(key.size() - 7, 7, ".params") == 0)
      osd.insert(key, t);
  std::map<std::string, std::map<int64_t, Tensor>> scalars;  // key -> saved buffer index -> value
  int64_t saved_buffers = 0;
  for (const auto& [name, e] : idx) {
    if (name.rfind("optim.", 0) != 0 || !e.replicated) continue;
    const Tensor* t = file(0).find(name);
    if (!t) throw std::runtime_error(fn + " shard file rank0.troupe in " + dir + " has no entry " + name);
    const std::string key = name.substr(6);
    if (key.rfind("param_groups.", 0) == 0) {
      if (key.size() > 7 && key.compare(key.size() - 7, 7, ".params") == 0)
        saved_buffers += t->numel();
      else
        osd.insert(key, *t);
    } else if (key.rfind("state.", 0) == 0 && key.find('.', 6) != std::string::npos) {
      const size_t dot = key.find('.', 6);
      scalars[key.substr(dot + 1)][std::stoll(key.substr(6, dot - 6))] = *t;
    } else {
      osd.insert(key, *t);  // the inner optimizer's own check names it
    }
  }
  const auto ps = opt->parameters();
  for (size_t oi = 0; oi < ps.size(); ++oi) {
    const int g = group_of_opt_index(oi);
    if (g < 0) continue;
    const FlatShardInfo& G = groups[static_cast<size_t>(g)];
    std::vector<std::string> keys;
    for (const auto& [name, e] : idx) {
      if (name.rfind("optim.", 0) != 0 || e.replicated) continue;
      for (size_t i : G.params) {
        const std::string pre = "optim." + names[i] + ".";
        if (name.rfind(pre, 0) == 0) {
          const std::string key = name.substr(pre.size());
          if (std::find(keys.begin(), keys.end(), key) == keys.end()) keys.push_back(key);
        }
      }
    }
    for (const auto& key : keys)
      osd.insert("state." + std::to_string(oi) + "." + key,
                 load_flat(*this, static_cast<size_t>(g), rank, "optim.", "." + key, idx, read_range));
    for (const auto& [key, by_index] : scalars) {
      auto it = saved_buffers == static_cast<int64_t>(ps.size()) ? by_index.find(static_cast<int64_t>(oi))
                                                                : by_index.end();
      osd.insert("state." + std::to_string(oi) + "." + key,
                 it != by_index.end() ? it->second : by_index.begin()->second);
    }
  }
  opt->load_state_dict(osd);

  for (size_t g = 0; g < groups.size(); ++g) shards[g].detach().copy_(new_shards[g]);
  if (stage < 3) {
    all_gather_full();
  } else {
    free_all();
  }
}

}  // namespace troupe::parallel::detail
