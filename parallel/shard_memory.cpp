// ZeRO's memory figures: what a rank holds now (parameters, gradients, optimizer state) and the peaks.
#include <troupe/parallel/shard_core.h>

#include <algorithm>

namespace troupe::parallel::detail {

int64_t ShardCore::shard_bytes() const {
  int64_t b = 0;
  for (const auto& s : shards) b += bytes_of(s);
  return b;
}

int64_t ShardCore::param_bytes() const {
  int64_t b = 0;
  if (stage < 3) {
    for (const auto& f : full) b += bytes_of(f);
  } else {
    b = shard_bytes();
    for (const auto& f : full) b += storage_bytes(f);
  }
  return b;
}

// Gradients held besides the parameters' .grad: the shards', the buckets', those in flight.
int64_t ShardCore::reduction_grad_bytes() const {
  int64_t b = 0;
  for (const auto& s : shards) b += bytes_of(s.grad());
  for (const auto& k : buckets) b += bytes_of(k.flat);
  for (const auto& f : in_flight) b += bytes_of(f->flat) + (f->out.is_same(f->flat) ? 0 : bytes_of(f->out));
  return b;
}

ShardMemory ShardCore::memory() const {
  ShardMemory m;
  m.params = param_bytes();
  for (const auto& p : params) m.grads += bytes_of(p.grad());
  m.grads += reduction_grad_bytes();
  for (const auto& [impl, st] : opt->state()) {
    if (!st) continue;
    nn::StateDict d;
    st->write(d, "");
    for (const auto& [k, t] : d) m.optimizer_state += bytes_of(t);
  }
  return m;
}

void ShardCore::note_peak_params() { peak.params = std::max(peak.params, param_bytes()); }

void ShardCore::note_peak_grads(int64_t extra) { peak.grads = std::max(peak.grads, reduction_grad_bytes() + extra); }

void ShardCore::note_peak(const ShardMemory& m) {
  peak.params = std::max(peak.params, m.params);
  peak.grads = std::max(peak.grads, m.grads);
  peak.optimizer_state = std::max(peak.optimizer_state, m.optimizer_state);
}

}  // namespace troupe::parallel::detail
