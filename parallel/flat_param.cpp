// ZeRO's flat layout: the parameters packed into flat per-dtype buffers (one per gradient bucket) padded
// to a multiple of size(), each rank's shard of them, and the all_gather that refills them.
#include <troupe/parallel/shard_core.h>

#include <algorithm>

#include <troupe/tensor/autograd.h>
#include <troupe/tensor/ops.h>

namespace troupe::parallel::detail {

std::pair<int64_t, int64_t> piece_of(const FlatShardInfo& g, int64_t member_numel, size_t k, int r) {
  const int64_t po = g.offsets[k], so = static_cast<int64_t>(r) * g.shard_numel;
  const int64_t lo = std::max(po, so), hi = std::min(po + member_numel, so + g.shard_numel);
  if (hi <= lo) return {0, 0};
  return {lo - po, hi - lo};
}

// DDP's bucket assignment per (unit, dtype, device): parameters in reverse registration order, a
// bucket closes once it holds at least its limit (the first bucket of each key first_bucket_mb, the
// others bucket_cap_mb). Each bucket is one flat buffer, its members in registration order, padded to
// a multiple of size(); the units list their buffers.
void ShardCore::assign_buckets() {
  std::vector<size_t> order;  // reverse registration order
  std::vector<std::string> keys(params.size());
  for (size_t i = params.size(); i-- > 0;) {
    order.push_back(i);
    keys[i] = std::to_string(unit_of_param[i]) + "/" + bucket_key(params[i]);
  }
  auto done = bucket_assignment_by_size(params, order, keys, first_bucket_bytes, bucket_cap_bytes);
  for (auto& vars : done) std::sort(vars.begin(), vars.end());
  std::sort(done.begin(), done.end(), [](const auto& a, const auto& b) { return a.front() < b.front(); });
  group_of.assign(params.size(), 0);
  slot_of.assign(params.size(), 0);
  for (auto& vars : done) {
    FlatShardInfo G;
    G.dtype = params[vars[0]].dtype();
    G.unit = unit_of_param[vars[0]];
    for (size_t k = 0; k < vars.size(); ++k) {
      group_of[vars[k]] = groups.size();
      slot_of[vars[k]] = k;
      G.params.push_back(vars[k]);
      G.offsets.push_back(G.numel);
      G.numel += params[vars[k]].numel();
    }
    groups.push_back(std::move(G));
  }
  // Reduction order: by the last member (the first whose gradient backward produces).
  for (size_t g = 0; g < groups.size(); ++g) launch_order.push_back(g);
  std::sort(launch_order.begin(), launch_order.end(),
            [&](size_t a, size_t b) { return groups[a].params.back() > groups[b].params.back(); });
  const int size = group->size(), rank = group->rank();
  for (auto& g : groups) {
    g.padded_numel = (g.numel + size - 1) / size * size;
    g.shard_numel = g.padded_numel / size;
    g.shard_offset = static_cast<int64_t>(rank) * g.shard_numel;
  }
  for (size_t g = 0; g < groups.size(); ++g) {
    ShardUnit& u = units[groups[g].unit];
    u.flat_shards.push_back(g);
    u.full_bytes += groups[g].padded_numel * static_cast<int64_t>(element_size(groups[g].dtype));
  }
}

// Rank 0's parameters into the flat buffers (broadcast); each parameter's view of its buffer, and this
// rank's shard (stages 1-2: a slice of the buffer; stage 3: a copy, the buffer is freed afterwards).
void ShardCore::make_flat_buffers() {
  NoGradGuard no_grad;
  const int size = group->size();
  views.resize(params.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    const FlatShardInfo& G = groups[g];
    const TensorOptions o = TensorOptions(G.dtype).device(params[G.params[0]].device());
    Tensor flat = zeros({G.padded_numel}, o);
    for (size_t k = 0; k < G.params.size(); ++k) {
      const Tensor& p = params[G.params[k]];
      flat.narrow(0, G.offsets[k], p.numel()).copy_(p.detach().reshape({p.numel()}));
    }
    if (size > 1) group->broadcast(flat, 0);
    for (size_t k = 0; k < G.params.size(); ++k) {
      const size_t i = G.params[k];
      views[i] = flat.narrow(0, G.offsets[k], numel_of(i)).view(shapes[i]);
    }
    Tensor shard = empty({0}, o);
    if (stage < 3)
      shard.set_data(flat.narrow(0, G.shard_offset, G.shard_numel));
    else
      shard.set_data(flat.narrow(0, G.shard_offset, G.shard_numel).clone());
    shard.requires_grad_(true);
    full.push_back(flat);
    shards.push_back(shard);
  }
}

int64_t ShardCore::numel_of(size_t i) const {
  int64_t n = 1;
  for (int64_t d : shapes[i]) n *= d;
  return n;
}

// The updated shards back into every rank's flat buffer.
void ShardCore::all_gather_full() {
  if (group->size() == 1) return;  // the shard is the whole buffer
  NoGradGuard no_grad;
  std::vector<Tensor> mine;
  std::vector<comm::WorkPtr> works;
  for (size_t g = 0; g < groups.size(); ++g) {
    mine.push_back(shards[g].detach().clone());
    works.push_back(group->all_gather_into_tensor_async(full[g], mine.back()));
  }
  for (auto& w : works) w->wait();
}

}  // namespace troupe::parallel::detail
