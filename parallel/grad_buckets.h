// What DDP's and ZeRO's gradient buckets share (internal): the assignment of parameters to buckets by
// size, the post-accumulate-grad hooks that report each parameter's gradient, and waiting out the
// buckets' collectives in a destructor.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <troupe/comm/process_group.h>
#include <troupe/tensor/tensor.h>

namespace troupe::parallel::detail {

/// PyTorch's compute_bucket_assignment_by_size, shared by DDP and ZeRO: walks `order` (indices into
/// `params`), keeping one open bucket per distinct `keys[i]` (dtype and device, and for ZeRO the unit);
/// a bucket closes once it holds at least `first_bytes` (a key's first bucket) or `cap_bytes` (the
/// rest). Returns the buckets in the order they closed, then the unclosed ones by first appearance of
/// their key; members in walk order.
std::vector<std::vector<size_t>> bucket_assignment_by_size(const std::vector<Tensor>& params,
                                                           const std::vector<size_t>& order,
                                                           const std::vector<std::string>& keys,
                                                           int64_t first_bytes, int64_t cap_bytes);

/// The key that keeps buckets to one dtype and device: "float32@cpu".
std::string bucket_key(const Tensor& param);

/// Post-accumulate-grad hooks on some parameters, each calling on_ready(its index); removed together.
class GradReadyHooks {
 public:
  GradReadyHooks() = default;
  /// Removes the hooks still installed.
  ~GradReadyHooks() { remove(); }
  GradReadyHooks(const GradReadyHooks&) = delete;
  GradReadyHooks& operator=(const GradReadyHooks&) = delete;

  /// Hooks params[i] for every i where `hooked(i)`: after its .grad is accumulated, on_ready(i) runs.
  void install(const std::vector<Tensor>& params, const std::function<bool(size_t)>& hooked,
               const std::function<void(size_t)>& on_ready);
  /// Removes every hook installed.
  void remove();

 private:
  std::vector<Tensor> params_;
  std::vector<int64_t> ids_;  // per parameter: hook id, -1 when none
};

/// Waits for `work` (bounded by its group's timeout) and swallows its error: for destructors.
void wait_quietly(const comm::WorkPtr& work) noexcept;

}  // namespace troupe::parallel::detail
