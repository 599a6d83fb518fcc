// Pipeline: a micro-batched pipeline over hosted stages (GPipe). A batch is split into `chunks`
// micro-batches along dim 0; each goes through stage 0, 1, ..., p-1 (RemoteModules, usually on different
// ranks), and the caller drives forward and backward requests as results arrive, so different stages work
// on different micro-batches at once. Two schedules:
//   FillDrain  every forward first, then every backward (GPipe): stage i keeps all `chunks` activations;
//   OneFOneB   at most p micro-batches in flight; a micro-batch's backward starts as soon as its forward
//              ends (1F1B, PipeDream-flush): stage i keeps at most p - i activations.
// Both give the gradients of the whole batch: the loss is sum_m loss_fn(y_m, t_m) * n_m / N, which for a
// mean-reduced loss_fn is the full batch's loss; gradients accumulate in the stages' parameters as
// backward() would leave them. CAF-free.
//
//   actors::Pipeline pipe({s0, s1}, /*chunks=*/8, actors::Pipeline::Schedule::OneFOneB);
//   Tensor loss = pipe.train_step(x, y, [](const Tensor& out, const Tensor& t) { return F::cross_entropy(out, t); });
//   opt.step();   // e.g. a DistributedOptimizer over a model holding the stages
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include <troupe/actors/remote_module.h>

namespace troupe::actors {

class Pipeline {
 public:
  enum class Schedule { FillDrain, OneFOneB };
  using LossFn = std::function<Tensor(const Tensor& output, const Tensor& target)>;

  /// What the last step did (for tests and benchmarks).
  struct Stats {
    int64_t max_in_flight = 0;                // micro-batches between forward start and backward end
    std::vector<int64_t> max_kept_per_stage;  // activations a stage held at once
    double seconds = 0;
  };

  Pipeline(std::vector<RemoteModulePtr> stages, int chunks, Schedule schedule = Schedule::FillDrain);

  /// Forward and backward of one batch; returns the loss (a detached scalar). The stages' parameters'
  /// .grad accumulate the batch's gradients.
  Tensor train_step(const Tensor& input, const Tensor& target, const LossFn& loss_fn);
  /// Forward only (no graph kept), micro-batched; the outputs concatenated along dim 0.
  Tensor forward(const Tensor& input);

  int num_stages() const { return static_cast<int>(stages_.size()); }
  int chunks() const { return chunks_; }
  Schedule schedule() const { return schedule_; }
  const Stats& last_stats() const { return stats_; }

 private:
  std::vector<RemoteModulePtr> stages_;
  int chunks_;
  Schedule schedule_;
  Stats stats_;
};

}  // namespace troupe::actors
