#include <troupe/optim/swalr.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <stdexcept>

#include <troupe/tensor/ops.h>

namespace troupe::optim::swa_utils {

namespace {

void check_strategy(const std::string& s) {
  if (s != "cos" && s != "linear")
    throw std::invalid_argument("anneal_strategy must by one of 'cos' or 'linear', instead got " + s);
}

void check_anneal_epochs(int64_t n) {
  if (n < 0) throw std::invalid_argument("anneal_epochs must be equal or greater than 0, got " + std::to_string(n));
}

// PyTorch's _format_param, then its checks, all before the base constructor sets initial_lr.
Optimizer& checked(Optimizer& opt, const std::vector<double>& swa_lrs, const std::string& strategy,
                   int64_t anneal_epochs) {
  if (swa_lrs.size() != opt.param_groups().size())
    throw std::invalid_argument("swa_lr must have the same length as optimizer.param_groups: swa_lr has " +
                                std::to_string(swa_lrs.size()) + ", optimizer.param_groups has " +
                                std::to_string(opt.param_groups().size()));
  check_strategy(strategy);
  check_anneal_epochs(anneal_epochs);
  return opt;
}

// (lr - alpha * swa_lr) / (1 - alpha): the lr the previous step would have annealed from.
double initial_lr_of(double lr, double swa_lr, double alpha) {
  if (alpha == 1) return swa_lr;
  return (lr - alpha * swa_lr) / (1 - alpha);
}

Tensor string_tensor(const std::string& s) {
  std::vector<uint8_t> bytes(s.begin(), s.end());
  return tensor(bytes, TensorOptions().dtype(kByte));
}

}  // namespace

SWALR::SWALR(Optimizer& optimizer, double swa_lr, int64_t anneal_epochs, const std::string& anneal_strategy,
             int64_t last_epoch)
    : SWALR(optimizer, std::vector<double>(optimizer.param_groups().size(), swa_lr), anneal_epochs, anneal_strategy,
            last_epoch) {}

SWALR::SWALR(Optimizer& optimizer, std::vector<double> swa_lrs, int64_t anneal_epochs,
             const std::string& anneal_strategy, int64_t last_epoch)
    : LRScheduler(checked(optimizer, swa_lrs, anneal_strategy, anneal_epochs), last_epoch),
      swa_lrs_(std::move(swa_lrs)),
      anneal_strategy_(anneal_strategy),
      anneal_epochs_(anneal_epochs) {
  initial_step();
}

double SWALR::anneal(double t) const {
  if (anneal_strategy_ == "linear") return t;
  return (1 - std::cos(std::numbers::pi * t)) / 2;
}

std::vector<double> SWALR::get_lr() {
  int64_t step = step_count_ - 1;
  if (anneal_epochs_ == 0) step = std::max<int64_t>(1, step);
  const double span = static_cast<double>(std::max<int64_t>(1, anneal_epochs_));
  const double prev_t = std::max(0.0, std::min(1.0, static_cast<double>(step - 1) / span));
  const double prev_alpha = anneal(prev_t);
  const double t = std::max(0.0, std::min(1.0, static_cast<double>(step) / span));
  const double alpha = anneal(t);
  const std::vector<double> lrs = group_lrs();
  std::vector<double> out;
  const size_t n = std::min(lrs.size(), swa_lrs_.size());
  for (size_t i = 0; i < n; ++i) {
    const double prev_lr = initial_lr_of(lrs[i], swa_lrs_[i], prev_alpha);
    out.push_back(swa_lrs_[i] * alpha + prev_lr * (1 - alpha));
  }
  return out;
}

void SWALR::write_fields(StateDict& out) const {
  write_scheduler_doubles(out, "swa_lrs", swa_lrs_);
  out.insert_or_assign("anneal_strategy", string_tensor(anneal_strategy_));
  write_scalar(out, "anneal_epochs", static_cast<double>(anneal_epochs_));
}

void SWALR::read_fields(const StateDict& sd) {
  const std::string who = name() + ".load_state_dict";
  auto swa_lrs =
      read_scheduler_doubles(sd, "swa_lrs", who, static_cast<int64_t>(optimizer_->param_groups().size()));
  const Tensor* s = sd.find("anneal_strategy");
  if (!s || !s->defined() || s->dim() != 1 || s->dtype() != kByte)
    throw std::invalid_argument("[" + who + "] 'anneal_strategy' must be a 1-D uint8 tensor (the name's bytes)");
  Tensor bytes = s->cpu().contiguous();
  const uint8_t* p = bytes.data_ptr<uint8_t>();
  std::string strategy(p, p + bytes.numel());
  check_strategy(strategy);
  const int64_t anneal_epochs = read_scheduler_int(sd, "anneal_epochs", who);
  check_anneal_epochs(anneal_epochs);
  LRScheduler::read_fields(sd);
  swa_lrs_ = std::move(swa_lrs);
  anneal_strategy_ = std::move(strategy);
  anneal_epochs_ = anneal_epochs;
}

}  // namespace troupe::optim::swa_utils
