// ZeRO stages 1-3 over flat per-dtype buffers, and the sharded checkpoint (see zero.h).
#include <troupe/comm/zero.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <sstream>
#include <stdexcept>
#include <utility>

#include <troupe/nn/serialize.h>
#include <troupe/tensor/autograd.h>
#include <troupe/tensor/ops.h>

namespace troupe::comm {

namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

std::vector<int64_t> to_shape(IntArrayRef s) { return std::vector<int64_t>(s.begin(), s.end()); }

int64_t bytes_of(const Tensor& t) {
  return t.defined() ? t.numel() * static_cast<int64_t>(t.element_size()) : 0;
}

// [lo, lo + len) of member k's flattened tensor that rank r's slice of `g` covers (len may be 0).
std::pair<int64_t, int64_t> piece_of(const FlatShardInfo& g, int64_t member_numel, size_t k, int r) {
  const int64_t po = g.offsets[k], so = static_cast<int64_t>(r) * g.shard_numel;
  const int64_t lo = std::max(po, so), hi = std::min(po + member_numel, so + g.shard_numel);
  if (hi <= lo) return {0, 0};
  return {lo - po, hi - lo};
}

constexpr const char* kMeta = "__meta__.";
constexpr const char* kWorldSize = "__world_size__";

}  // namespace

namespace detail {

struct ShardCore {
  ProcessGroupPtr group;
  int stage = 1;
  std::string who;  // "[ZeroOptimizer]", "[FullyShardedDataParallel]"
  std::vector<std::string> names;
  std::vector<Tensor> params;  // parameters that require grad, registration order
  std::vector<std::vector<int64_t>> shapes;
  std::vector<FlatShardInfo> groups;
  std::vector<Tensor> full;    // per group: the flat buffer (stages 1-2 always; stage 3 while gathered)
  std::vector<Tensor> shards;  // per group: the shard the inner optimizer steps (stages 1-2: an alias of full's slice)
  std::unique_ptr<optim::Optimizer> opt;
  bool gathered = false;

  // ---- construction

  void build(const nn::ModulePtr& module, const OptimizerFactory& factory) {
    if (!module) throw std::invalid_argument(who + " module is null");
    if (!group)
      throw std::invalid_argument(who + " no process group: pass one, or call launch::init / run under "
                                        "comm::run_local first (comm::world() is null)");
    if (!factory) throw std::invalid_argument(who + " the optimizer factory is empty");
    for (const auto& [n, p] : module->named_parameters()) {
      if (!p.defined() || !p.requires_grad()) continue;
      if (!is_floating_point(p.dtype()))
        throw std::invalid_argument(who + " parameter " + n + " has dtype " + dtype_name(p.dtype()) +
                                    "; only floating parameters can be averaged");
      names.push_back(n);
      params.push_back(p);
      shapes.push_back(to_shape(p.sizes()));
    }
    const int size = group->size(), rank = group->rank();
    for (size_t i = 0; i < params.size(); ++i) {
      auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.dtype == params[i].dtype(); });
      if (it == groups.end()) {
        groups.push_back(FlatShardInfo{});
        it = std::prev(groups.end());
        it->dtype = params[i].dtype();
      }
      it->params.push_back(i);
      it->offsets.push_back(it->numel);
      it->numel += params[i].numel();
    }
    for (auto& g : groups) {
      g.padded_numel = (g.numel + size - 1) / size * size;
      g.shard_numel = g.padded_numel / size;
      g.shard_offset = static_cast<int64_t>(rank) * g.shard_numel;
    }
    verify_across_ranks();

    NoGradGuard no_grad;
    for (auto& g : groups) {
      Tensor flat = zeros({g.padded_numel}, TensorOptions(g.dtype));
      for (size_t k = 0; k < g.params.size(); ++k) {
        const Tensor& p = params[g.params[k]];
        flat.narrow(0, g.offsets[k], p.numel()).copy_(p.detach().reshape({p.numel()}));
      }
      if (size > 1) group->broadcast(flat, 0);
      Tensor shard = empty({0}, TensorOptions(g.dtype));
      if (stage < 3) {
        shard.set_data(flat.narrow(0, g.shard_offset, g.shard_numel));
        full.push_back(flat);
      } else {
        shard.set_data(flat.narrow(0, g.shard_offset, g.shard_numel).clone());
        full.push_back(Tensor());
      }
      shard.requires_grad_(true);
      shards.push_back(shard);
    }
    if (stage < 3) {
      point_params_at_full();
    } else {
      gathered = true;  // so that free() drops the original storage
      free_params();
    }
    opt = factory(shards);
    if (!opt) throw std::invalid_argument(who + " the optimizer factory returned null");
    auto ps = opt->parameters();
    for (const auto& s : shards) {
      if (std::none_of(ps.begin(), ps.end(), [&](const Tensor& t) { return t.is_same(s); }))
        throw std::invalid_argument(who + " the optimizer the factory made does not hold every shard tensor it "
                                          "was given (build it over the shard_params argument)");
    }
  }

  // Every rank must wrap the same parameters: [count, per parameter: dtype, ndim, shape...].
  void verify_across_ranks() {
    const int n = group->size();
    if (n == 1) return;
    std::vector<int64_t> mine{static_cast<int64_t>(params.size())};
    for (size_t i = 0; i < params.size(); ++i) {
      mine.push_back(static_cast<int64_t>(params[i].dtype()));
      mine.push_back(static_cast<int64_t>(shapes[i].size()));
      for (int64_t d : shapes[i]) mine.push_back(d);
    }
    Tensor len = tensor(std::vector<int64_t>{static_cast<int64_t>(mine.size())});
    Tensor lens = empty({n}, TensorOptions(kInt64));
    group->all_gather_into_tensor(lens, len);
    std::vector<int64_t> L = lens.to_vector<int64_t>();
    const int64_t max_len = *std::max_element(L.begin(), L.end());
    mine.resize(static_cast<size_t>(max_len), -1);
    Tensor all = empty({n * max_len}, TensorOptions(kInt64));
    group->all_gather_into_tensor(all, tensor(mine));
    std::vector<int64_t> A = all.to_vector<int64_t>();
    auto describe = [&](int r) {
      std::vector<std::string> items;
      const int64_t* s = A.data() + static_cast<size_t>(r) * max_len;
      size_t pos = 0;
      const size_t end = static_cast<size_t>(L[static_cast<size_t>(r)]);
      auto next = [&]() -> int64_t { return pos < end ? s[pos++] : -1; };
      const int64_t count = next();
      items.push_back(std::to_string(count) + " parameters that require grad");
      for (int64_t i = 0; i < count && pos < end; ++i) {
        const int64_t dt = next(), nd = next();
        std::vector<int64_t> sh;
        for (int64_t d = 0; d < nd; ++d) sh.push_back(next());
        std::string label = "parameter " + std::to_string(i);
        if (static_cast<size_t>(i) < names.size()) label += " (" + names[static_cast<size_t>(i)] + ")";
        items.push_back(label + " of shape " + shape_str(sh) + " and dtype " +
                        (dt >= 0 && dt < 64 ? dtype_name(static_cast<ScalarType>(dt)) : "?"));
      }
      return items;
    };
    const auto ref = describe(0);
    for (int r = 1; r < n; ++r) {
      const auto items = describe(r);
      for (size_t k = 0; k < std::max(ref.size(), items.size()); ++k) {
        const std::string a = k < ref.size() ? ref[k] : "nothing", b = k < items.size() ? items[k] : "nothing";
        if (a == b) continue;
        throw std::runtime_error(who + " the model on rank " + std::to_string(r) +
                                 " differs from rank 0's (every rank must wrap the same parameters, in the same "
                                 "order): rank 0 has " + a + ", rank " + std::to_string(r) + " has " + b);
      }
    }
  }

  // ---- parameters

  // Every parameter becomes its view of the gathered flat buffer.
  void point_params_at_full() {
    for (size_t g = 0; g < groups.size(); ++g) {
      const FlatShardInfo& G = groups[g];
      for (size_t k = 0; k < G.params.size(); ++k) {
        const size_t i = G.params[k];
        params[i].set_data(full[g].narrow(0, G.offsets[k], numel_of(i)).view(shapes[i]));
      }
    }
  }

  int64_t numel_of(size_t i) const {
    int64_t n = 1;
    for (int64_t d : shapes[i]) n *= d;
    return n;
  }

  // Stage 3: all_gather every shard into a new flat buffer; the parameters view it.
  void gather() {
    if (gathered) return;
    NoGradGuard no_grad;
    for (size_t g = 0; g < groups.size(); ++g) {
      full[g] = empty({groups[g].padded_numel}, TensorOptions(groups[g].dtype));
      group->all_gather_into_tensor(full[g], shards[g].detach());
    }
    for (size_t g = 0; g < groups.size(); ++g) {
      const FlatShardInfo& G = groups[g];
      for (size_t k = 0; k < G.params.size(); ++k) {
        const size_t i = G.params[k];
        params[i].set_data(full[g].narrow(0, G.offsets[k], numel_of(i)).view(shapes[i]));
      }
    }
    gathered = true;
  }

  // Stage 3: the parameters and their gradients become empty; the gathered buffers go.
  void free_params() {
    if (!gathered) return;
    for (size_t i = 0; i < params.size(); ++i) {
      params[i].set_grad(Tensor());
      params[i].set_data(empty({0}, TensorOptions(params[i].dtype())));
    }
    for (auto& f : full) f = Tensor();
    gathered = false;
  }

  // Stages 1-2: the updated shards back into every rank's flat buffer.
  void all_gather_full() {
    NoGradGuard no_grad;
    for (size_t g = 0; g < groups.size(); ++g) {
      if (group->size() == 1) continue;  // the shard is the whole buffer
      Tensor mine = shards[g].detach().clone();
      group->all_gather_into_tensor(full[g], mine);
    }
  }

  // ---- gradients and step

  void zero_grad() {
    for (auto& p : params) p.set_grad(Tensor());
    for (auto& s : shards) s.set_grad(Tensor());
  }

  // The gradients averaged over the ranks: stage 1 into .grad (full) and the shard's; 2-3: the shard's
  // only (every .grad freed).
  void reduce_gradients() {
    NoGradGuard no_grad;
    for (size_t g = 0; g < groups.size(); ++g) {
      const FlatShardInfo& G = groups[g];
      Tensor flat = zeros({G.padded_numel}, TensorOptions(G.dtype));
      for (size_t k = 0; k < G.params.size(); ++k) {
        const Tensor& grad = params[G.params[k]].grad();
        if (!grad.defined()) continue;
        const int64_t n = numel_of(G.params[k]);
        if (grad.numel() != n) {
          throw std::runtime_error(who + " the gradient of parameter " + names[G.params[k]] + " has " +
                                   std::to_string(grad.numel()) + " elements; the parameter has " + std::to_string(n));
        }
        flat.narrow(0, G.offsets[k], n).copy_(grad.reshape({n}));
      }
      if (stage == 1) {
        if (group->size() > 1) group->all_reduce(flat, ReduceOp::AVG);
        for (size_t k = 0; k < G.params.size(); ++k) {
          const size_t i = G.params[k];
          Tensor avg = flat.narrow(0, G.offsets[k], numel_of(i)).view(shapes[i]);
          if (params[i].grad().defined())
            params[i].mutable_grad().copy_(avg);
          else
            params[i].set_grad(avg.clone());
        }
        shards[g].set_grad(flat.narrow(0, G.shard_offset, G.shard_numel).clone());
      } else {
        Tensor mine = empty({G.shard_numel}, TensorOptions(G.dtype));
        if (group->size() > 1)
          group->reduce_scatter_tensor(mine, flat, ReduceOp::AVG);
        else
          mine.copy_(flat);
        shards[g].set_grad(mine);
        for (size_t i : G.params) params[i].set_grad(Tensor());
      }
    }
  }

  void step() {
    if (stage < 3) {
      reduce_gradients();
      opt->step();
      if (stage == 1)
        for (auto& s : shards) s.set_grad(Tensor());  // the full .grad stays; the shard's copy goes
      all_gather_full();
    } else {
      if (gathered) {
        reduce_gradients();
        free_params();
      }
      opt->step();
    }
  }

  // ---- memory

  ShardMemory memory() const {
    ShardMemory m;
    if (stage < 3) {
      for (const auto& f : full) m.params += bytes_of(f);
    } else {
      for (const auto& s : shards) m.params += bytes_of(s);
      if (gathered)
        for (const auto& f : full) m.params += bytes_of(f);
    }
    for (const auto& p : params) m.grads += bytes_of(p.grad());
    for (const auto& s : shards) m.grads += bytes_of(s.grad());
    for (const auto& [impl, st] : opt->state()) {
      if (!st) continue;
      nn::StateDict d;
      st->write(d, "");
      for (const auto& [k, t] : d) m.optimizer_state += bytes_of(t);
    }
    return m;
  }

  // ---- sharded state dict

  struct Entry {
    ShardedTensor t;
    int g = -1;   // dtype group (sharded entries)
    int k = -1;   // member of the group
  };

  // Inner optimizer parameter index -> dtype group.
  int group_of_opt_index(size_t idx) const {
    auto ps = opt->parameters();
    if (idx >= ps.size()) return -1;
    for (size_t g = 0; g < shards.size(); ++g)
      if (ps[idx].is_same(shards[g])) return static_cast<int>(g);
    return -1;
  }

  std::vector<Entry> entries() const {
    NoGradGuard no_grad;
    std::vector<Entry> out;
    const int rank = group->rank();
    auto add_pieces = [&](const std::string& prefix, const std::string& suffix, size_t g, const Tensor& flat_shard) {
      const FlatShardInfo& G = groups[g];
      for (size_t k = 0; k < G.params.size(); ++k) {
        const size_t i = G.params[k];
        auto [off, len] = piece_of(G, numel_of(i), k, rank);
        Entry e;
        e.t.name = prefix + names[i] + suffix;
        e.t.full_shape = shapes[i];
        e.t.offset = off;
        e.t.length = len;
        const int64_t at = len > 0 ? G.offsets[k] + off - G.shard_offset : 0;
        e.t.shard = flat_shard.narrow(0, at, len).clone();
        e.g = static_cast<int>(g);
        e.k = static_cast<int>(k);
        out.push_back(std::move(e));
      }
    };
    for (size_t g = 0; g < groups.size(); ++g) add_pieces("model.", "", g, shards[g].detach());
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
      Entry e;
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

  void save(const std::string& dir) const {
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

  struct IndexEntry {
    bool replicated = false;
    std::vector<int64_t> shape;
    std::vector<std::pair<int64_t, int64_t>> ranges;  // per old rank
  };

  void load(const std::string& dir) {
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
    for (const auto& [name, t] : index) {
      if (name == kWorldSize) continue;
      const auto v = t.to_vector<int64_t>();
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
    for (size_t g = 0; g < groups.size(); ++g) new_shards.push_back(load_flat(g, rank, "model.", "", idx, read_range));

    // The optimizer: replicated entries from rank 0's file, sharded ones reassembled per dtype group.
    nn::StateDict osd;
    for (const auto& [name, e] : idx) {
      if (name.rfind("optim.", 0) != 0 || !e.replicated) continue;
      const Tensor* t = file(0).find(name);
      if (!t) throw std::runtime_error(fn + " shard file rank0.troupe in " + dir + " has no entry " + name);
      osd.insert(name.substr(6), *t);
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
                   load_flat(static_cast<size_t>(g), rank, "optim.", "." + key, idx, read_range));
    }
    opt->load_state_dict(osd);

    for (size_t g = 0; g < groups.size(); ++g) shards[g].detach().copy_(new_shards[g]);
    if (stage < 3) {
      all_gather_full();
    } else {
      free_params();
    }
  }

  template <class ReadRange>
  Tensor load_flat(size_t g, int rank, const std::string& prefix, const std::string& suffix,
                   const std::map<std::string, IndexEntry>& idx, ReadRange& read_range) {
    const FlatShardInfo& G = groups[g];
    Tensor out = zeros({G.shard_numel}, TensorOptions(G.dtype));
    for (size_t k = 0; k < G.params.size(); ++k) {
      const size_t i = G.params[k];
      auto [off, len] = piece_of(G, numel_of(i), k, rank);
      if (len == 0) continue;
      const std::string name = prefix + names[i] + suffix;
      auto it = idx.find(name);
      if (it == idx.end()) {
        if (prefix == "optim.") continue;  // state this parameter did not have (zeros)
        throw std::runtime_error("[load_sharded] the checkpoint has no entry " + name);
      }
      if (it->second.shape != shapes[i])
        throw std::runtime_error("[load_sharded] " + name + ": the checkpoint has shape " +
                                 shape_str(it->second.shape) + ", this model has " + shape_str(shapes[i]));
      read_range(name, it->second, off, len, out.narrow(0, G.offsets[k] + off - G.shard_offset, len));
    }
    return out;
  }
};

}  // namespace detail

// ------------------------------------------------------------------------------------------- ZeroOptimizer

ZeroOptimizer::ZeroOptimizer(nn::ModulePtr module, OptimizerFactory factory, int stage, ProcessGroupPtr group)
    : core_(std::make_unique<detail::ShardCore>()) {
  if (stage != 1 && stage != 2)
    throw std::invalid_argument("[ZeroOptimizer] stage must be 1 or 2, got " + std::to_string(stage) +
                                " (stage 3 is FullyShardedDataParallel)");
  core_->who = "[ZeroOptimizer]";
  core_->stage = stage;
  core_->group = std::move(group);
  core_->build(module, factory);
}

ZeroOptimizer::~ZeroOptimizer() = default;

void ZeroOptimizer::zero_grad() { core_->zero_grad(); }
void ZeroOptimizer::step() { core_->step(); }
int ZeroOptimizer::stage() const { return core_->stage; }
const ProcessGroupPtr& ZeroOptimizer::process_group() const { return core_->group; }
optim::Optimizer& ZeroOptimizer::inner() { return *core_->opt; }
std::vector<Tensor> ZeroOptimizer::shard_parameters() const { return core_->shards; }
const std::vector<FlatShardInfo>& ZeroOptimizer::flat_shards() const { return core_->groups; }
ShardMemory ZeroOptimizer::memory_per_rank() const { return core_->memory(); }

std::vector<ShardedTensor> ZeroOptimizer::sharded_state_dict() const {
  std::vector<ShardedTensor> out;
  for (auto& e : core_->entries()) out.push_back(std::move(e.t));
  return out;
}
void ZeroOptimizer::save_sharded(const std::string& dir) const { core_->save(dir); }
void ZeroOptimizer::load_sharded(const std::string& dir) { core_->load(dir); }

// ------------------------------------------------------------------------------ FullyShardedDataParallel

FullyShardedDataParallel::FullyShardedDataParallel(nn::ModulePtr module, OptimizerFactory factory,
                                                   ProcessGroupPtr group)
    : module_(std::move(module)), core_(std::make_unique<detail::ShardCore>()) {
  core_->who = "[FullyShardedDataParallel]";
  core_->stage = 3;
  core_->group = std::move(group);
  core_->build(module_, factory);
  register_module("module", module_);
}

FullyShardedDataParallel::~FullyShardedDataParallel() = default;

Tensor FullyShardedDataParallel::forward(const Tensor& input) {
  return forward_args({nn::Value(input)}, {}).tensor();
}

nn::Value FullyShardedDataParallel::forward_args(const nn::Args& args, const nn::Kwargs& kwargs) {
  core_->gather();
  return module_->call(args, kwargs);
}

void FullyShardedDataParallel::zero_grad() { core_->zero_grad(); }
void FullyShardedDataParallel::step() { core_->step(); }
void FullyShardedDataParallel::gather_parameters() { core_->gather(); }
void FullyShardedDataParallel::free_parameters() { core_->free_params(); }
bool FullyShardedDataParallel::parameters_gathered() const { return core_->gathered; }
const ProcessGroupPtr& FullyShardedDataParallel::process_group() const { return core_->group; }
optim::Optimizer& FullyShardedDataParallel::inner() { return *core_->opt; }
std::vector<Tensor> FullyShardedDataParallel::shard_parameters() const { return core_->shards; }
const std::vector<FlatShardInfo>& FullyShardedDataParallel::flat_shards() const { return core_->groups; }
ShardMemory FullyShardedDataParallel::memory_per_rank() const { return core_->memory(); }

std::vector<ShardedTensor> FullyShardedDataParallel::sharded_state_dict() const {
  std::vector<ShardedTensor> out;
  for (auto& e : core_->entries()) out.push_back(std::move(e.t));
  return out;
}
void FullyShardedDataParallel::save_sharded(const std::string& dir) const { core_->save(dir); }
void FullyShardedDataParallel::load_sharded(const std::string& dir) { core_->load(dir); }

}  // namespace troupe::comm
