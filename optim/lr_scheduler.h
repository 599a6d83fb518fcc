// Learning-rate schedulers (torch.optim.lr_scheduler, PyTorch 1.13): each step() computes the next lr of
// every parameter group from the groups' current lr (the chainable form), so that two schedulers
// stepping the same optimizer compose as in PyTorch, and SequentialLR hands over between schedulers
// exactly as 1.13 does.
//
// Usage, as the reference pages write it:
//   optim::StepLR scheduler(optimizer, /*step_size=*/30, /*gamma=*/0.1);
//   for (int epoch = 0; epoch < 100; ++epoch) { train(...); scheduler.step(); }
//
// state_dict layout (PyTorch's scheduler.__dict__ less the optimizer, flattened; scalars are float64
// 0-dim tensors written by write_scalar, lists are 1-D tensors):
//   last_epoch, _step_count           scalars
//   base_lrs, _last_lr                float64 (number of groups)
//   <own fields>                      step_size, gamma, milestones (int64, the multiset sorted), T_max...
//   SequentialLR: _milestones (int64), last_epoch, _last_lr, _schedulers.<i>.<child key>
// A scheduler defined outside this file derives LRScheduler, sets its fields, then calls
// initial_step() at the end of its constructor (PyTorch's base __init__ does that last).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <troupe/optim/optimizer.h>

namespace troupe::optim {

/// Base of the lr schedulers (PyTorch's _LRScheduler).
class LRScheduler {
 public:
  /// last_epoch = -1 sets every group's initial_lr to its lr where unset; any other value resumes and
  /// requires initial_lr on every group. base_lrs come from initial_lr. Does not step (see initial_step).
  explicit LRScheduler(Optimizer& optimizer, int64_t last_epoch = -1);
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;
  virtual ~LRScheduler() = default;

  /// Advances last_epoch by one and sets every group's lr from get_lr().
  virtual void step();
  /// Deprecated in PyTorch: sets last_epoch to `epoch` and the lrs from the closed form where the
  /// scheduler has one (else get_lr()). SequentialLR uses step(0) when it switches scheduler.
  virtual void step(int64_t epoch);

  /// The lrs set by the last step (one per group).
  const std::vector<double>& get_last_lr() const { return last_lr_; }
  /// The index of the last step (0 after construction).
  int64_t last_epoch() const { return last_epoch_; }
  /// The groups' initial_lr when the scheduler was built (or loaded).
  const std::vector<double>& base_lrs() const { return base_lrs_; }
  /// The optimizer whose groups' lr this scheduler sets.
  Optimizer& optimizer() const { return *optimizer_; }
  /// The class name used in error messages ("StepLR").
  virtual std::string name() const = 0;

  /// The scheduler's state as a flat dict (layout at the top of this file).
  virtual StateDict state_dict() const;
  /// Restores what state_dict() returned. The keys must be exactly those this scheduler writes; on any
  /// error nothing changes.
  void load_state_dict(const StateDict& state_dict);

 protected:
  /// For SequentialLR, which (as in PyTorch) neither touches initial_lr nor has base_lrs.
  struct NoBaseInit {};
  LRScheduler(Optimizer& optimizer, NoBaseInit);

  /// The chainable lrs for the new last_epoch (called by step() after last_epoch was advanced).
  virtual std::vector<double> get_lr() = 0;
  /// The closed-form lrs for last_epoch, when the scheduler has one (used by step(epoch)).
  virtual std::optional<std::vector<double>> get_closed_form_lr() { return std::nullopt; }
  /// Resets the step count and performs the first step (PyTorch's _initial_step).
  void initial_step();
  /// Writes the scheduler's own fields (state_dict() adds the base ones after them, PyTorch's order).
  virtual void write_fields(StateDict& /*out*/) const {}
  /// Reads every field state_dict() wrote (an override reads its own, then calls the base's); called
  /// after the key set was checked. May throw half way: load_state_dict then restores the old state.
  virtual void read_fields(const StateDict& state_dict);
  /// The groups' current lrs.
  std::vector<double> group_lrs() const;
  /// Sets every group's lr from `values` and records them as the last lrs.
  void apply_lrs(const std::vector<double>& values);

  Optimizer* optimizer_;
  std::vector<double> base_lrs_;
  int64_t last_epoch_ = -1;
  int64_t step_count_ = 0;
  std::vector<double> last_lr_;

  friend class SequentialLR;
};

/// lr = initial_lr * lr_lambda(epoch), one function for every group or one per group.
class LambdaLR : public LRScheduler {
 public:
  /// epoch -> factor of the group's initial lr.
  using LrLambda = std::function<double(int64_t)>;
  /// The same function for every group.
  LambdaLR(Optimizer& optimizer, LrLambda lr_lambda, int64_t last_epoch = -1);
  /// One function per group; error "Expected {groups} lr_lambdas, but got {n}".
  LambdaLR(Optimizer& optimizer, std::vector<LrLambda> lr_lambdas, int64_t last_epoch = -1);
  std::string name() const override { return "LambdaLR"; }

 protected:
  std::vector<double> get_lr() override;

 private:
  std::vector<LrLambda> lr_lambdas_;
};

/// Multiplies each group's lr by lr_lambda(epoch) every step after the first.
class MultiplicativeLR : public LRScheduler {
 public:
  /// epoch -> factor applied to the group's current lr.
  using LrLambda = std::function<double(int64_t)>;
  /// The same function for every group.
  MultiplicativeLR(Optimizer& optimizer, LrLambda lr_lambda, int64_t last_epoch = -1);
  /// One function per group; error "Expected {groups} lr_lambdas, but got {n}".
  MultiplicativeLR(Optimizer& optimizer, std::vector<LrLambda> lr_lambdas, int64_t last_epoch = -1);
  std::string name() const override { return "MultiplicativeLR"; }

 protected:
  std::vector<double> get_lr() override;

 private:
  std::vector<LrLambda> lr_lambdas_;
};

/// Multiplies the lr by gamma every step_size epochs.
class StepLR : public LRScheduler {
 public:
  /// Error unless step_size > 0.
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1, int64_t last_epoch = -1);
  std::string name() const override { return "StepLR"; }
  /// Period of the decay, in steps.
  int64_t step_size() const { return step_size_; }
  /// Factor applied every step_size steps.
  double gamma() const { return gamma_; }

 protected:
  std::vector<double> get_lr() override;
  std::optional<std::vector<double>> get_closed_form_lr() override;
  void write_fields(StateDict& out) const override;
  void read_fields(const StateDict& state_dict) override;

 private:
  int64_t step_size_;
  double gamma_;
};

/// Multiplies the lr by gamma at each milestone (a milestone listed k times multiplies by gamma^k).
class MultiStepLR : public LRScheduler {
 public:
  /// The milestones in any order; repeated ones count several times.
  MultiStepLR(Optimizer& optimizer, std::vector<int64_t> milestones, double gamma = 0.1, int64_t last_epoch = -1);
  std::string name() const override { return "MultiStepLR"; }
  /// The milestones as a sorted multiset.
  const std::vector<int64_t>& milestones() const { return milestones_; }
  /// Factor applied at each milestone.
  double gamma() const { return gamma_; }

 protected:
  std::vector<double> get_lr() override;
  std::optional<std::vector<double>> get_closed_form_lr() override;
  void write_fields(StateDict& out) const override;
  void read_fields(const StateDict& state_dict) override;

 private:
  int64_t count(int64_t epoch) const;
  std::vector<int64_t> milestones_;  // sorted, with repetitions
  double gamma_;
};

/// Multiplies the lr by factor until epoch total_iters, then restores it.
class ConstantLR : public LRScheduler {
 public:
  /// Error unless 0 <= factor <= 1 ("Constant multiplicative factor expected to be between 0 and 1.").
  ConstantLR(Optimizer& optimizer, double factor = 1.0 / 3, int64_t total_iters = 5, int64_t last_epoch = -1);
  std::string name() const override { return "ConstantLR"; }

 protected:
  std::vector<double> get_lr() override;
  std::optional<std::vector<double>> get_closed_form_lr() override;
  void write_fields(StateDict& out) const override;
  void read_fields(const StateDict& state_dict) override;

 private:
  double factor_;
  int64_t total_iters_;
};

/// Moves the lr's factor linearly from start_factor to end_factor over total_iters steps.
class LinearLR : public LRScheduler {
 public:
  /// Errors unless both factors lie in [0, 1] (PyTorch's texts).
  LinearLR(Optimizer& optimizer, double start_factor = 1.0 / 3, double end_factor = 1.0, int64_t total_iters = 5,
           int64_t last_epoch = -1);
  std::string name() const override { return "LinearLR"; }

 protected:
  std::vector<double> get_lr() override;
  std::optional<std::vector<double>> get_closed_form_lr() override;
  void write_fields(StateDict& out) const override;
  void read_fields(const StateDict& state_dict) override;

 private:
  double start_factor_;
  double end_factor_;
  int64_t total_iters_;
};

/// Multiplies the lr by gamma every step.
class ExponentialLR : public LRScheduler {
 public:
  /// Decay by gamma per step.
  ExponentialLR(Optimizer& optimizer, double gamma, int64_t last_epoch = -1);
  std::string name() const override { return "ExponentialLR"; }
  /// Factor applied every step.
  double gamma() const { return gamma_; }

 protected:
  std::vector<double> get_lr() override;
  std::optional<std::vector<double>> get_closed_form_lr() override;
  void write_fields(StateDict& out) const override;
  void read_fields(const StateDict& state_dict) override;

 private:
  double gamma_;
};

/// Cosine annealing from the base lr to eta_min over T_max steps, in 1.13's recursive form (which
/// also follows lr changes made by other schedulers); it rises back over the next T_max steps.
class CosineAnnealingLR : public LRScheduler {
 public:
  /// Error unless T_max > 0.
  CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min = 0, int64_t last_epoch = -1);
  std::string name() const override { return "CosineAnnealingLR"; }

 protected:
  std::vector<double> get_lr() override;
  std::optional<std::vector<double>> get_closed_form_lr() override;
  void write_fields(StateDict& out) const override;
  void read_fields(const StateDict& state_dict) override;

 private:
  int64_t T_max_;
  double eta_min_;
};

/// Runs `schedulers` one after the other, switching at `milestones` (one fewer than schedulers).
class SequentialLR : public LRScheduler {
 public:
  /// Resets the groups' lr to initial_lr, undoes the children's initial steps and re-runs the first
  /// one's. Errors as PyTorch's for a scheduler of another optimizer and a wrong milestone count.
  SequentialLR(Optimizer& optimizer, std::vector<std::shared_ptr<LRScheduler>> schedulers,
               std::vector<int64_t> milestones, int64_t last_epoch = -1);
  std::string name() const override { return "SequentialLR"; }
  /// Steps the scheduler whose interval holds the new epoch (with step(0) on entering it).
  void step() override;
  /// Not supported (PyTorch's SequentialLR.step takes no epoch).
  void step(int64_t epoch) override;
  /// The scheduler sequence.
  const std::vector<std::shared_ptr<LRScheduler>>& schedulers() const { return schedulers_; }
  StateDict state_dict() const override;

 protected:
  std::vector<double> get_lr() override;
  void read_fields(const StateDict& state_dict) override;

 private:
  std::vector<std::shared_ptr<LRScheduler>> schedulers_;
  std::vector<int64_t> milestones_;
};

// ---- helpers shared with SWALR

/// Reads a scalar of a scheduler state dict; the error names `who` ("StepLR.load_state_dict").
double read_scheduler_scalar(const StateDict& in, const std::string& key, const std::string& who);
/// Reads an integral scalar (last_epoch, step_size...); error when it is not an integer.
int64_t read_scheduler_int(const StateDict& in, const std::string& key, const std::string& who);
/// Reads a 1-D float64 list of `n` values (n < 0: any length).
std::vector<double> read_scheduler_doubles(const StateDict& in, const std::string& key, const std::string& who,
                                           int64_t n = -1);
/// Writes a list of doubles as a 1-D float64 tensor.
void write_scheduler_doubles(StateDict& out, const std::string& key, const std::vector<double>& values);

}  // namespace troupe::optim
