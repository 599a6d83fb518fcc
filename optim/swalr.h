// SWALR (torch.optim.swa_utils.SWALR, PyTorch 1.13): anneals each group's lr to a fixed swa_lr over
// anneal_epochs steps, cosine or linear, then holds it. With nothing else changing the lr,
//   lr_k = swa_lr * f(k / E) + lr_0 * (1 - f(k / E))  for k < E,  swa_lr from k = E on,
// f(t) = t ("linear") or (1 - cos(pi t)) / 2 ("cos"); E = 0 sets swa_lr at once (at construction).
// Each step starts from the group's current lr, so it also takes over from another scheduler, as in
// the reference page's recipe (CosineAnnealingLR until swa_start, then SWALR).
//
// PyTorch keeps swa_lr in each param group; here the scheduler keeps one per group and saves it in
// its state_dict: swa_lrs (float64, one per group), anneal_strategy (uint8, the name's ASCII bytes),
// anneal_epochs, then the base keys (lr_scheduler.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <troupe/optim/lr_scheduler.h>

namespace troupe::optim::swa_utils {

/// Anneals the lr of every group to swa_lr (torch.optim.swa_utils.SWALR).
class SWALR : public LRScheduler {
 public:
  /// One swa_lr for every group. Errors: "anneal_strategy must by one of 'cos' or 'linear', instead
  /// got {s}" and "anneal_epochs must be equal or greater than 0, got {n}" (PyTorch's texts).
  SWALR(Optimizer& optimizer, double swa_lr, int64_t anneal_epochs = 10, const std::string& anneal_strategy = "cos",
        int64_t last_epoch = -1);
  /// One swa_lr per group; error when the count differs from the number of groups.
  SWALR(Optimizer& optimizer, std::vector<double> swa_lrs, int64_t anneal_epochs = 10,
        const std::string& anneal_strategy = "cos", int64_t last_epoch = -1);
  std::string name() const override { return "SWALR"; }

  /// The target lr of each group.
  const std::vector<double>& swa_lrs() const { return swa_lrs_; }
  int64_t anneal_epochs() const { return anneal_epochs_; }
  /// "cos" or "linear".
  const std::string& anneal_strategy() const { return anneal_strategy_; }

 protected:
  std::vector<double> get_lr() override;
  void write_fields(StateDict& out) const override;
  void read_fields(const StateDict& state_dict) override;

 private:
  /// The annealing weight of the swa_lr at fraction t of the annealing.
  double anneal(double t) const;

  std::vector<double> swa_lrs_;
  std::string anneal_strategy_;
  int64_t anneal_epochs_;
};

}  // namespace troupe::optim::swa_utils
