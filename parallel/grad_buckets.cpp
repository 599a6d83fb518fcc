// Gradient-bucket pieces DDP and ZeRO share: assignment by size, post-accumulate-grad hooks, quiet waits.
#include <troupe/parallel/grad_buckets.h>

#include <algorithm>

namespace troupe::parallel::detail {

std::vector<std::vector<size_t>> bucket_assignment_by_size(const std::vector<Tensor>& params,
                                                           const std::vector<size_t>& order,
                                                           const std::vector<std::string>& keys,
                                                           int64_t first_bytes, int64_t cap_bytes) {
  struct Open {
    std::string key;
    std::vector<size_t> vars;
    int64_t bytes = 0;
    bool first = true;
  };
  std::vector<Open> open;  // one per key, in order of first appearance
  std::vector<std::vector<size_t>> done;
  for (size_t i : order) {
    auto it = std::find_if(open.begin(), open.end(), [&](const Open& o) { return o.key == keys[i]; });
    if (it == open.end()) {
      open.push_back(Open{keys[i], {}, 0, true});
      it = std::prev(open.end());
    }
    it->vars.push_back(i);
    it->bytes += params[i].numel() * static_cast<int64_t>(params[i].element_size());
    if (it->bytes >= (it->first ? first_bytes : cap_bytes)) {
      done.push_back(std::move(it->vars));
      it->vars.clear();
      it->bytes = 0;
      it->first = false;
    }
  }
  for (auto& b : open)
    if (!b.vars.empty()) done.push_back(std::move(b.vars));
  return done;
}

std::string bucket_key(const Tensor& param) { return std::string(dtype_name(param.dtype())) + "@" + param.device().str(); }

void GradReadyHooks::install(const std::vector<Tensor>& params, const std::function<bool(size_t)>& hooked,
                             const std::function<void(size_t)>& on_ready) {
  remove();
  params_ = params;
  ids_.assign(params.size(), -1);
  for (size_t i = 0; i < params.size(); ++i) {
    if (!hooked(i)) continue;
    ids_[i] = params[i].register_post_accumulate_grad_hook([on_ready, i](const Tensor&) { on_ready(i); });
  }
}

void GradReadyHooks::remove() {
  for (size_t i = 0; i < ids_.size(); ++i)
    if (ids_[i] >= 0) params_[i].remove_post_accumulate_grad_hook(ids_[i]);
  ids_.clear();
  params_.clear();
}

void wait_quietly(const comm::WorkPtr& work) noexcept {
  if (!work) return;
  try {
    work->wait();
  } catch (...) {
  }
}

}  // namespace troupe::parallel::detail
