// The staged group (staged.h): the inner group's transports on copies of the tensors on its device, the
// results copied back when the Work completes.
#include "staged.h"

#include <functional>
#include <mutex>
#include <stdexcept>

#include <troupe/tensor/autograd.h>
#include <troupe/tensor/ops.h>

namespace troupe::comm {

namespace {

/// The inner op's Work, and what to copy back into the caller's tensors once it completed (once, by
/// whichever of wait() and is_completed() sees it first). The staged copies live as long as this Work.
class StagedWork final : public Work {
 public:
  StagedWork(WorkPtr inner, std::function<void()> copy_back) : inner_(std::move(inner)), copy_back_(std::move(copy_back)) {}

  bool is_completed() override {
    if (!inner_->is_completed()) return false;
    if (!inner_->exception()) finish();
    return true;
  }
  void wait(std::optional<std::chrono::milliseconds> timeout) override {
    inner_->wait(timeout);  // throws the op's failure
    finish();
  }
  std::exception_ptr exception() override { return inner_->exception(); }

 private:
  void finish() {
    std::lock_guard<std::mutex> g(mu_);
    if (!copy_back_) return;
    NoGradGuard no_grad;
    auto f = std::move(copy_back_);
    copy_back_ = nullptr;
    f();
  }
  WorkPtr inner_;
  std::mutex mu_;
  std::function<void()> copy_back_;  // null once run; it holds the staged copies until then
};

}  // namespace

class StagedGroup final : public ProcessGroup {
 public:
  StagedGroup(ProcessGroupPtr inner, Device device)
      : ProcessGroup(Traits{device, inner->traits_.p2p_with_self, inner->traits_.max_tag}),
        inner_(std::move(inner)),
        home_(inner_->device()) {}

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string backend() const override { return "staged " + inner_->backend(); }
  const GroupOptions& options() const override { return inner_->options(); }
  uint64_t sequence_number() const override { return inner_->sequence_number(); }
  const ProcessGroupPtr& inner() const { return inner_; }

 protected:
  WorkPtr do_all_reduce(Tensor& tensor, ReduceOp op) override {
    Tensor s = stage(tensor);
    return staged(inner_->do_all_reduce(s, op), [tensor, s]() mutable { tensor.copy_(s); });
  }
  WorkPtr do_broadcast(Tensor& tensor, int src) override {
    Tensor s = stage(tensor);
    return staged(inner_->do_broadcast(s, src), [tensor, s]() mutable { tensor.copy_(s); });
  }
  WorkPtr do_all_gather_into_tensor(Tensor& output, const Tensor& input) override {
    Tensor in = stage(input), out = room(output);
    return staged(inner_->do_all_gather_into_tensor(out, in), [output, out]() mutable { output.copy_(out); });
  }
  WorkPtr do_all_gather(std::vector<Tensor>& outputs, const Tensor& input) override {
    Tensor in = stage(input);
    std::vector<Tensor> outs;
    for (const auto& o : outputs) outs.push_back(room(o));
    WorkPtr w = inner_->do_all_gather(outs, in);
    return staged(std::move(w), [outputs, outs]() mutable {
      for (size_t i = 0; i < outputs.size(); ++i) outputs[i].copy_(outs[i]);
    });
  }
  WorkPtr do_reduce_scatter_tensor(Tensor& output, const Tensor& input, ReduceOp op) override {
    Tensor in = stage(input), out = room(output);
    return staged(inner_->do_reduce_scatter_tensor(out, in, op), [output, out]() mutable { output.copy_(out); });
  }
  WorkPtr do_reduce_scatter(Tensor& output, const std::vector<Tensor>& inputs, ReduceOp op) override {
    std::vector<Tensor> ins;
    for (const auto& t : inputs) ins.push_back(stage(t));
    Tensor out = room(output);
    return staged(inner_->do_reduce_scatter(out, ins, op), [output, out]() mutable { output.copy_(out); });
  }
  WorkPtr do_all_to_all(Tensor& output, const Tensor& input) override {
    Tensor in = stage(input), out = room(output);
    return staged(inner_->do_all_to_all(out, in), [output, out]() mutable { output.copy_(out); });
  }
  WorkPtr do_send(const Tensor& tensor, int dst, int tag) override {
    Tensor s = stage(tensor);
    return staged(inner_->do_send(s, dst, tag), [s] {});  // keeps the copy until the send completed
  }
  WorkPtr do_recv(Tensor& tensor, int src, int tag) override {
    Tensor s = room(tensor);
    return staged(inner_->do_recv(s, src, tag), [tensor, s]() mutable { tensor.copy_(s); });
  }
  WorkPtr do_barrier() override { return inner_->do_barrier(); }
  ProcessGroupPtr do_new_group(const std::vector<int>& ranks, int color, int key, int64_t check,
                               std::optional<GroupOptions> options) override {
    ProcessGroupPtr g = inner_->do_new_group(ranks, color, key, check, std::move(options));
    return g ? std::make_shared<StagedGroup>(std::move(g), device()) : nullptr;
  }
  ProcessGroupPtr do_split(int color, int key, std::optional<GroupOptions> options) override {
    ProcessGroupPtr g = inner_->do_split(color, key, std::move(options));
    return g ? std::make_shared<StagedGroup>(std::move(g), device()) : nullptr;
  }

 private:
  /// A copy of `t` on the inner group's device (always a copy: the caller's tensor is written only by
  /// the copy back).
  Tensor stage(const Tensor& t) const {
    NoGradGuard no_grad;
    return t.to(home_, /*copy=*/true);
  }
  /// Room for a result of `t`'s shape and dtype on the inner group's device.
  Tensor room(const Tensor& t) const { return empty(t.sizes(), TensorOptions().dtype(t.dtype()).device(home_)); }
  static WorkPtr staged(WorkPtr inner, std::function<void()> copy_back) {
    return std::make_shared<StagedWork>(std::move(inner), std::move(copy_back));
  }

  ProcessGroupPtr inner_;
  Device home_;
};

ProcessGroupPtr make_staged_group(ProcessGroupPtr inner, Device device) {
  if (!inner) throw std::invalid_argument("make_staged_group: the inner group is null");
  return std::make_shared<StagedGroup>(std::move(inner), device);
}

ProcessGroupPtr staged_inner(const ProcessGroupPtr& group) {
  auto s = std::dynamic_pointer_cast<StagedGroup>(group);
  return s ? s->inner() : nullptr;
}

}  // namespace troupe::comm
