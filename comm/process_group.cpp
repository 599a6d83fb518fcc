// The front of every backend: ProcessGroup's collectives check their arguments once (checks.h) and call
// the backend's do_*; also the process-wide world group and its per-thread override, reduce_op_name.
#include "process_group.h"

#include <troupe/comm/checks.h>
#include <troupe/comm/stats_internal.h>

#include <mutex>

namespace troupe::comm {

namespace {
int64_t nbytes(const Tensor& t) { return t.defined() ? t.numel() * static_cast<int64_t>(t.element_size()) : 0; }
int64_t nbytes(const std::vector<Tensor>& ts) {
  int64_t n = 0;
  for (const auto& t : ts) n += nbytes(t);
  return n;
}
}  // namespace

WorkPtr ProcessGroup::counted(int op, int64_t bytes, WorkPtr work) {
  return detail::count_op(*counters_, *this, op, bytes, std::move(work));
}

// ---- the front: checks in the order the backends made them, then the transport. Each `at` builds the
// error prefix only when a check fails.

std::string ProcessGroup::where(const char* fn) const {
  return "[" + std::string(fn) + "] " + detail::group_desc(options().name, backend(), rank(), size(), traits_.device);
}

void ProcessGroup::check_tensor(const char* fn, const char* what, const Tensor& t) const {
  auto at = [&] { return where(fn); };
  detail::check_defined(at, what, t);
  if (t.device() != traits_.device) detail::fail_device(where(fn), what, t, backend(), traits_.device);
  detail::check_contiguous(at, what, t);
}

void ProcessGroup::check_list(const char* fn, const char* what, const std::vector<Tensor>& list,
                              const Tensor& like) const {
  detail::check_list_like([&] { return where(fn); }, what, list, like, size(),
                          [&](const char* name, const Tensor& t) { check_tensor(fn, name, t); });
}

void ProcessGroup::check_peer(const char* fn, const char* what, int peer, int tag) const {
  auto at = [&] { return where(fn); };
  detail::check_rank(at, what, peer, size());
  if (!traits_.p2p_with_self && peer == rank()) detail::fail_self_peer(where(fn), what, peer, backend());
  detail::check_tag(at, tag, traits_.max_tag);
}

WorkPtr ProcessGroup::all_reduce_async(Tensor& tensor, ReduceOp op) {
  const char* fn = "all_reduce";
  check_tensor(fn, "tensor", tensor);
  detail::check_reduce([&] { return where(fn); }, op, tensor.dtype());
  return counted(0, nbytes(tensor), do_all_reduce(tensor, op));
}

WorkPtr ProcessGroup::broadcast_async(Tensor& tensor, int src) {
  const char* fn = "broadcast";
  check_tensor(fn, "tensor", tensor);
  detail::check_rank([&] { return where(fn); }, "src", src, size());
  return counted(1, nbytes(tensor), do_broadcast(tensor, src));
}

WorkPtr ProcessGroup::all_gather_into_tensor_async(Tensor& output, const Tensor& input) {
  const char* fn = "all_gather_into_tensor";
  auto at = [&] { return where(fn); };
  check_tensor(fn, "input", input);
  check_tensor(fn, "output", output);
  detail::check_same_dtype(at, "output", output, input);
  detail::check_gather_sizes(at, output, input, size());
  return counted(2, nbytes(input), do_all_gather_into_tensor(output, input));
}

WorkPtr ProcessGroup::all_gather_async(std::vector<Tensor>& outputs, const Tensor& input) {
  const char* fn = "all_gather";
  check_tensor(fn, "input", input);
  check_list(fn, "outputs", outputs, input);
  return counted(3, nbytes(input), do_all_gather(outputs, input));
}

WorkPtr ProcessGroup::reduce_scatter_tensor_async(Tensor& output, const Tensor& input, ReduceOp op) {
  const char* fn = "reduce_scatter_tensor";
  auto at = [&] { return where(fn); };
  check_tensor(fn, "input", input);
  check_tensor(fn, "output", output);
  detail::check_same_dtype(at, "output", output, input);
  detail::check_reduce(at, op, input.dtype());
  detail::check_scatter_sizes(at, output, input, size());
  return counted(4, nbytes(input), do_reduce_scatter_tensor(output, input, op));
}

WorkPtr ProcessGroup::reduce_scatter_async(Tensor& output, const std::vector<Tensor>& inputs, ReduceOp op) {
  const char* fn = "reduce_scatter";
  check_tensor(fn, "output", output);
  check_list(fn, "inputs", inputs, output);
  detail::check_reduce([&] { return where(fn); }, op, output.dtype());
  return counted(5, nbytes(inputs), do_reduce_scatter(output, inputs, op));
}

WorkPtr ProcessGroup::all_to_all_async(Tensor& output, const Tensor& input) {
  const char* fn = "all_to_all";
  auto at = [&] { return where(fn); };
  check_tensor(fn, "input", input);
  check_tensor(fn, "output", output);
  detail::check_same_dtype(at, "output", output, input);
  detail::check_all_to_all_sizes(at, output, input, size());
  return counted(6, nbytes(input), do_all_to_all(output, input));
}

WorkPtr ProcessGroup::send_async(const Tensor& tensor, int dst, int tag) {
  check_tensor("send", "tensor", tensor);
  check_peer("send", "dst", dst, tag);
  return counted(7, nbytes(tensor), do_send(tensor, dst, tag));
}

WorkPtr ProcessGroup::recv_async(Tensor& tensor, int src, int tag) {
  check_tensor("recv", "tensor", tensor);
  check_peer("recv", "src", src, tag);
  return counted(8, nbytes(tensor), do_recv(tensor, src, tag));
}

WorkPtr ProcessGroup::barrier_async() { return counted(9, 0, do_barrier()); }

namespace {
// A sub-group's own timeout must be positive (as make_local_groups' and the world's).
void check_group_timeout(const std::string& where, const std::optional<GroupOptions>& options) {
  if (options && options->timeout.count() <= 0)
    throw CommError(where + ": timeout must be positive, got " + std::to_string(options->timeout.count()) + " ms");
}
}  // namespace

ProcessGroupPtr ProcessGroup::new_group(const std::vector<int>& ranks, std::optional<GroupOptions> options) {
  auto g = detail::new_group_split(where("new_group"), ranks, rank(), size());
  check_group_timeout(where("new_group"), options);
  return do_new_group(ranks, g.color, g.key, g.check, std::move(options));
}

ProcessGroupPtr ProcessGroup::split(int color, int key, std::optional<GroupOptions> options) {
  check_group_timeout(where("split"), options);
  return do_split(color < 0 ? -1 : color, key, std::move(options));
}

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::SUM: return "SUM";
    case ReduceOp::AVG: return "AVG";
    case ReduceOp::PRODUCT: return "PRODUCT";
    case ReduceOp::MIN: return "MIN";
    case ReduceOp::MAX: return "MAX";
  }
  return "UNKNOWN";
}

namespace {
std::mutex g_world_mu;
ProcessGroupPtr g_world;              // set by launch::init / set_world
thread_local ProcessGroupPtr t_world;  // set by run_local on each rank's thread; wins over g_world
}  // namespace

ProcessGroupPtr world() {
  if (t_world) return t_world;
  std::lock_guard<std::mutex> g(g_world_mu);
  return g_world;
}

void set_world(ProcessGroupPtr group) {
  std::lock_guard<std::mutex> g(g_world_mu);
  g_world = std::move(group);
}

void set_thread_world(ProcessGroupPtr group) { t_world = std::move(group); }

}  // namespace troupe::comm
