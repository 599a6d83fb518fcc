// ZeRO's gradient reduction: per-buffer buckets filled from the post-accumulate-grad hooks and
// reduce-scattered (AVG) in reduction order, overlapping backward (stages 2-3); stage 1's all-reduce.
#include <troupe/parallel/shard_core.h>

#include <stdexcept>

#include <troupe/tensor/autograd.h>
#include <troupe/tensor/ops.h>

namespace troupe::parallel::detail {

using comm::ReduceOp;

void ShardCore::install_grad_hooks() {
  if (stage < 2) return;
  std::weak_ptr<ShardCore> weak = weak_from_this();
  grad_hooks.install(
      params, [](size_t) { return true; },
      [weak](size_t i) {
        if (auto self = weak.lock()) self->on_grad_ready(i);
      });
}

void ShardCore::start_round() {
  round_active = true;
  next_launch = 0;
  ready.assign(params.size(), 0);
  for (size_t g = 0; g < groups.size(); ++g) buckets[g].pending = groups[g].params.size();
  for (size_t u = 0; u < units.size(); ++u) ustate[u].pending = units[u].params.size();
}

// The post-accumulate-grad hook of parameter i.
void ShardCore::on_grad_ready(size_t i) {
  if (!round_active) {
    start_round();
  } else if (ready[i]) {
    // A second gradient before the round ended: the last backward did not reach every parameter (or
    // gradients accumulate over backward calls without overlap): finish that round with zeros.
    launch_remaining();
    start_round();
  }
  mark_ready(i);
  if (overlap) launch_ready();
  poll();
  if (next_launch == launch_order.size()) round_active = false;
}

Tensor& ShardCore::bucket_flat(size_t g) {
  Bucket& b = buckets[g];
  if (!b.flat.defined())
    b.flat = zeros({groups[g].padded_numel}, TensorOptions(groups[g].dtype).device(full[g].device()));
  return b.flat;
}

// Parameter i's .grad (defined) into its place in `flat`, a full gradient of its flat buffer.
void ShardCore::copy_grad_into(Tensor& flat, size_t i) const {
  const Tensor& grad = params[i].grad();
  const int64_t n = numel_of(i);
  if (grad.numel() != n)
    throw std::runtime_error(who + " the gradient of parameter " + names[i] + " has " + std::to_string(grad.numel()) +
                             " elements; the parameter has " + std::to_string(n));
  flat.narrow(0, groups[group_of[i]].offsets[slot_of[i]], n).copy_(grad.reshape({n}));
}

// Moves parameter i's .grad (or zeros) into its bucket and frees it.
void ShardCore::take_grad(size_t i) {
  NoGradGuard no_grad;
  const size_t g = group_of[i];
  Tensor& flat = bucket_flat(g);
  const Tensor& grad = params[i].grad();
  if (grad.defined()) copy_grad_into(flat, i);
  note_peak_grads(bytes_of(grad));
  params[i].set_grad(Tensor());
}

void ShardCore::mark_ready(size_t i) {
  ready[i] = 1;
  take_grad(i);
  --buckets[group_of[i]].pending;
  if (stage == 3) {
    const size_t u = unit_of_param[i];
    if (--ustate[u].pending == 0) free_unit(u);  // the unit's backward is done
  }
}

// Starts bucket g's reduce-scatter (AVG); members without a gradient this round add their .grad, if
// any (set outside a hooked backward), else zeros.
void ShardCore::launch(size_t g) {
  for (size_t i : groups[g].params)
    if (!ready[i]) take_grad(i);
  auto f = std::make_unique<InFlight>();
  f->g = g;
  f->flat = std::move(bucket_flat(g));
  buckets[g].flat = Tensor();
  if (group->size() > 1) {
    f->out = empty({groups[g].shard_numel}, TensorOptions(groups[g].dtype).device(f->flat.device()));
    f->work = group->reduce_scatter_tensor_async(f->out, f->flat, ReduceOp::AVG);
  } else {
    f->out = f->flat;
  }
  in_flight.push_back(std::move(f));
  note_peak_grads(0);
}

// Launches, in reduction order, every bucket whose members are all in.
void ShardCore::launch_ready() {
  while (next_launch < launch_order.size() && buckets[launch_order[next_launch]].pending == 0)
    launch(launch_order[next_launch++]);
}

void ShardCore::launch_remaining() {
  while (next_launch < launch_order.size()) launch(launch_order[next_launch++]);
  round_active = false;
}

// A finished reduce-scatter: its result joins the shard's gradient; its full gradient goes.
void ShardCore::complete(InFlight& f) {
  if (f.work) f.work->wait();
  Tensor& shard = shards[f.g];
  if (!shard.grad().defined()) {
    shard.set_grad(f.out);
  } else {
    NoGradGuard no_grad;
    shard.mutable_grad().add_(f.out);
  }
}

void ShardCore::poll() {
  while (!in_flight.empty() && (!in_flight.front()->work || in_flight.front()->work->is_completed())) {
    auto f = std::move(in_flight.front());
    in_flight.pop_front();
    complete(*f);
  }
}

void ShardCore::wait_all() {
  while (!in_flight.empty()) {
    auto f = std::move(in_flight.front());
    in_flight.pop_front();
    complete(*f);
  }
}

void ShardCore::finish_reduction() {
  if (round_active) launch_remaining();
  wait_all();
}

// Waits for the reductions in flight and drops them with the round's partial buckets.
void ShardCore::drop_reduction() {
  while (!in_flight.empty()) {
    auto f = std::move(in_flight.front());
    in_flight.pop_front();
    if (f->work) f->work->wait();
  }
  round_active = false;
  for (auto& b : buckets) b.flat = Tensor();
}

// Stage 1: the gradients all-reduced (AVG) into .grad (full) and the shard's.
void ShardCore::all_reduce_gradients() {
  NoGradGuard no_grad;
  for (size_t g = 0; g < groups.size(); ++g) {
    const FlatShardInfo& G = groups[g];
    Tensor flat = zeros({G.padded_numel}, TensorOptions(G.dtype).device(full[g].device()));
    for (size_t k = 0; k < G.params.size(); ++k) {
      if (params[G.params[k]].grad().defined()) copy_grad_into(flat, G.params[k]);
    }
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
  }
}

}  // namespace troupe::parallel::detail
