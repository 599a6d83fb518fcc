#include <troupe/optim/lr_scheduler.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <sstream>
#include <stdexcept>

#include <troupe/tensor/autograd.h>
#include <troupe/tensor/ops.h>

namespace troupe::optim {

namespace {

constexpr double kPi = std::numbers::pi;

// Python's a // b for b > 0.
int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

// Python's bisect.bisect_right, step for step (it gives the same index as Python on an unsorted list).
int64_t bisect_right(const std::vector<int64_t>& a, int64_t x) {
  size_t lo = 0, hi = a.size();
  while (lo < hi) {
    const size_t mid = (lo + hi) / 2;
    if (x < a[mid]) hi = mid;
    else lo = mid + 1;
  }
  return static_cast<int64_t>(lo);
}

std::string num_str(double v) {
  std::ostringstream os;
  os.precision(17);
  os << v;
  return os.str();
}

Tensor int_list_tensor(const std::vector<int64_t>& values) {
  return tensor(values, TensorOptions().dtype(kLong));
}

std::vector<int64_t> read_int_list(const StateDict& in, const std::string& key, const std::string& who) {
  const Tensor* t = in.find(key);
  if (!t) throw std::invalid_argument("[" + who + "] missing key '" + key + "'");
  if (!t->defined() || t->dim() != 1)
    throw std::invalid_argument("[" + who + "] '" + key + "' must be a 1-D tensor");
  Tensor d = t->cpu().to(kDouble).contiguous();
  std::vector<int64_t> out;
  for (int64_t i = 0; i < d.numel(); ++i) {
    const double v = d.data_ptr<double>()[i];
    if (v != std::floor(v)) throw std::invalid_argument("[" + who + "] '" + key + "' holds a non-integer " + num_str(v));
    out.push_back(static_cast<int64_t>(v));
  }
  return out;
}

void check_lambda_count(size_t groups, size_t lambdas) {
  if (groups != lambdas)
    throw std::invalid_argument("Expected " + std::to_string(groups) + " lr_lambdas, but got " +
                                std::to_string(lambdas));
}

}  // namespace

// ---- state dict helpers

double read_scheduler_scalar(const StateDict& in, const std::string& key, const std::string& who) {
  const Tensor* t = in.find(key);
  if (!t) throw std::invalid_argument("[" + who + "] missing key '" + key + "'");
  if (!t->defined() || t->numel() != 1)
    throw std::invalid_argument("[" + who + "] '" + key + "' must be a scalar, got " +
                                (t->defined() ? "a tensor of " + std::to_string(t->numel()) + " elements"
                                              : std::string("None")));
  return read_scalar(in, key);
}

int64_t read_scheduler_int(const StateDict& in, const std::string& key, const std::string& who) {
  const double v = read_scheduler_scalar(in, key, who);
  if (v != std::floor(v) || std::abs(v) > 9007199254740992.0)
    throw std::invalid_argument("[" + who + "] '" + key + "' must be an integer, got " + num_str(v));
  return static_cast<int64_t>(v);
}

std::vector<double> read_scheduler_doubles(const StateDict& in, const std::string& key, const std::string& who,
                                           int64_t n) {
  const Tensor* t = in.find(key);
  if (!t) throw std::invalid_argument("[" + who + "] missing key '" + key + "'");
  if (!t->defined() || t->dim() != 1)
    throw std::invalid_argument("[" + who + "] '" + key + "' must be a 1-D tensor");
  if (n >= 0 && t->numel() != n)
    throw std::invalid_argument("[" + who + "] '" + key + "' has " + std::to_string(t->numel()) +
                                " values, expected " + std::to_string(n) + " (one per parameter group)");
  Tensor d = t->cpu().to(kDouble).contiguous();
  const double* p = d.data_ptr<double>();
  return std::vector<double>(p, p + d.numel());
}

void write_scheduler_doubles(StateDict& out, const std::string& key, const std::vector<double>& values) {
  out.insert_or_assign(key, tensor(values, TensorOptions().dtype(kDouble)));
}

// ====================================================================== LRScheduler

LRScheduler::LRScheduler(Optimizer& optimizer, int64_t last_epoch) : optimizer_(&optimizer) {
  auto& groups = optimizer.param_groups();
  if (last_epoch == -1) {
    for (auto& g : groups)
      if (!g.initial_lr()) g.initial_lr() = g.options().get_lr();
  } else {
    for (size_t i = 0; i < groups.size(); ++i)
      if (!groups[i].initial_lr())
        throw std::invalid_argument("param 'initial_lr' is not specified in param_groups[" + std::to_string(i) +
                                    "] when resuming an optimizer");
  }
  for (const auto& g : groups) base_lrs_.push_back(*g.initial_lr());
  last_epoch_ = last_epoch;
}

LRScheduler::LRScheduler(Optimizer& optimizer, NoBaseInit) : optimizer_(&optimizer) {}

void LRScheduler::initial_step() {
  step_count_ = 0;
  step();
}

std::vector<double> LRScheduler::group_lrs() const {
  std::vector<double> out;
  for (const auto& g : optimizer_->param_groups()) out.push_back(g.options().get_lr());
  return out;
}

void LRScheduler::apply_lrs(const std::vector<double>& values) {
  auto& groups = optimizer_->param_groups();
  // zip(param_groups, values): the shorter one decides.
  const size_t n = std::min(groups.size(), values.size());
  for (size_t i = 0; i < n; ++i) groups[i].options().set_lr(values[i]);
  last_lr_ = group_lrs();
}

void LRScheduler::step() {
  ++step_count_;
  ++last_epoch_;
  apply_lrs(get_lr());
}

void LRScheduler::step(int64_t epoch) {
  ++step_count_;
  last_epoch_ = epoch;
  auto closed = get_closed_form_lr();
  apply_lrs(closed ? *closed : get_lr());
}

StateDict LRScheduler::state_dict() const {
  StateDict out;
  write_fields(out);
  write_scheduler_doubles(out, "base_lrs", base_lrs_);
  write_scalar(out, "last_epoch", static_cast<double>(last_epoch_));
  write_scalar(out, "_step_count", static_cast<double>(step_count_));
  write_scheduler_doubles(out, "_last_lr", last_lr_);
  return out;
}

void LRScheduler::read_fields(const StateDict& sd) {
  const std::string who = name() + ".load_state_dict";
  const auto n = static_cast<int64_t>(optimizer_->param_groups().size());
  auto base_lrs = read_scheduler_doubles(sd, "base_lrs", who, n);
  const int64_t last_epoch = read_scheduler_int(sd, "last_epoch", who);
  const int64_t step_count = read_scheduler_int(sd, "_step_count", who);
  auto last_lr = read_scheduler_doubles(sd, "_last_lr", who, n);
  base_lrs_ = std::move(base_lrs);
  last_epoch_ = last_epoch;
  step_count_ = step_count;
  last_lr_ = std::move(last_lr);
}

void LRScheduler::load_state_dict(const StateDict& sd) {
  const std::string who = name() + ".load_state_dict";
  StateDict current = state_dict();
  for (const auto& [key, value] : sd)
    if (!current.contains(key)) throw std::invalid_argument("[" + who + "] unexpected key '" + key + "'");
  for (const auto& [key, value] : current)
    if (!sd.contains(key)) throw std::invalid_argument("[" + who + "] missing key '" + key + "'");
  try {
    read_fields(sd);
  } catch (...) {
    read_fields(current);  // our own dict: cannot fail
    throw;
  }
}

// ====================================================================== LambdaLR

LambdaLR::LambdaLR(Optimizer& optimizer, LrLambda lr_lambda, int64_t last_epoch)
    : LambdaLR(optimizer, std::vector<LrLambda>(optimizer.param_groups().size(), lr_lambda), last_epoch) {}

namespace {
// Checks the count before the base constructor touches initial_lr (PyTorch checks first).
Optimizer& checked_lambdas(Optimizer& opt, const std::vector<std::function<double(int64_t)>>& fns,
                           const char* who) {
  check_lambda_count(opt.param_groups().size(), fns.size());
  for (size_t i = 0; i < fns.size(); ++i)
    if (!fns[i]) throw std::invalid_argument(std::string("[") + who + "] lr_lambda " + std::to_string(i) + " is empty");
  return opt;
}
}  // namespace

LambdaLR::LambdaLR(Optimizer& optimizer, std::vector<LrLambda> lr_lambdas, int64_t last_epoch)
    : LRScheduler(checked_lambdas(optimizer, lr_lambdas, "LambdaLR"), last_epoch),
      lr_lambdas_(std::move(lr_lambdas)) {
  initial_step();
}

std::vector<double> LambdaLR::get_lr() {
  std::vector<double> out;
  const size_t n = std::min(lr_lambdas_.size(), base_lrs_.size());
  for (size_t i = 0; i < n; ++i) out.push_back(base_lrs_[i] * lr_lambdas_[i](last_epoch_));
  return out;
}

// ====================================================================== MultiplicativeLR

MultiplicativeLR::MultiplicativeLR(Optimizer& optimizer, LrLambda lr_lambda, int64_t last_epoch)
    : MultiplicativeLR(optimizer, std::vector<LrLambda>(optimizer.param_groups().size(), lr_lambda), last_epoch) {}

MultiplicativeLR::MultiplicativeLR(Optimizer& optimizer, std::vector<LrLambda> lr_lambdas, int64_t last_epoch)
    : LRScheduler(checked_lambdas(optimizer, lr_lambdas, "MultiplicativeLR"), last_epoch),
      lr_lambdas_(std::move(lr_lambdas)) {
  initial_step();
}

std::vector<double> MultiplicativeLR::get_lr() {
  std::vector<double> lrs = group_lrs();
  if (last_epoch_ > 0) {
    const size_t n = std::min(lr_lambdas_.size(), lrs.size());
    lrs.resize(n);
    for (size_t i = 0; i < n; ++i) lrs[i] = lrs[i] * lr_lambdas_[i](last_epoch_);
  }
  return lrs;
}

// ====================================================================== StepLR

namespace {
Optimizer& positive_or_throw(Optimizer& opt, int64_t v, const char* who, const char* what) {
  if (v <= 0)
    throw std::invalid_argument(std::string("[") + who + "] " + what + " must be positive, got " + std::to_string(v));
  return opt;
}
}  // namespace

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma, int64_t last_epoch)
    : LRScheduler(positive_or_throw(optimizer, step_size, "StepLR", "step_size"), last_epoch),
      step_size_(step_size),
      gamma_(gamma) {
  initial_step();
}

std::vector<double> StepLR::get_lr() {
  std::vector<double> lrs = group_lrs();
  if (last_epoch_ == 0 || last_epoch_ % step_size_ != 0) return lrs;
  for (double& lr : lrs) lr = lr * gamma_;
  return lrs;
}

std::optional<std::vector<double>> StepLR::get_closed_form_lr() {
  std::vector<double> out;
  const double f = std::pow(gamma_, static_cast<double>(floor_div(last_epoch_, step_size_)));
  for (double b : base_lrs_) out.push_back(b * f);
  return out;
}

void StepLR::write_fields(StateDict& out) const {
  write_scalar(out, "step_size", static_cast<double>(step_size_));
  write_scalar(out, "gamma", gamma_);
}

void StepLR::read_fields(const StateDict& sd) {
  const std::string who = name() + ".load_state_dict";
  const int64_t step_size = read_scheduler_int(sd, "step_size", who);
  positive_or_throw(*optimizer_, step_size, "StepLR.load_state_dict", "step_size");
  const double gamma = read_scheduler_scalar(sd, "gamma", who);
  LRScheduler::read_fields(sd);
  step_size_ = step_size;
  gamma_ = gamma;
}

// ====================================================================== MultiStepLR

MultiStepLR::MultiStepLR(Optimizer& optimizer, std::vector<int64_t> milestones, double gamma, int64_t last_epoch)
    : LRScheduler(optimizer, last_epoch), milestones_(std::move(milestones)), gamma_(gamma) {
  std::sort(milestones_.begin(), milestones_.end());
  initial_step();
}

int64_t MultiStepLR::count(int64_t epoch) const {
  auto [lo, hi] = std::equal_range(milestones_.begin(), milestones_.end(), epoch);
  return static_cast<int64_t>(hi - lo);
}

std::vector<double> MultiStepLR::get_lr() {
  std::vector<double> lrs = group_lrs();
  const int64_t k = count(last_epoch_);
  if (k == 0) return lrs;
  const double f = std::pow(gamma_, static_cast<double>(k));
  for (double& lr : lrs) lr = lr * f;
  return lrs;
}

std::optional<std::vector<double>> MultiStepLR::get_closed_form_lr() {
  std::vector<double> out;
  const double f = std::pow(gamma_, static_cast<double>(bisect_right(milestones_, last_epoch_)));
  for (double b : base_lrs_) out.push_back(b * f);
  return out;
}

void MultiStepLR::write_fields(StateDict& out) const {
  out.insert_or_assign("milestones", int_list_tensor(milestones_));
  write_scalar(out, "gamma", gamma_);
}

void MultiStepLR::read_fields(const StateDict& sd) {
  const std::string who = name() + ".load_state_dict";
  auto milestones = read_int_list(sd, "milestones", who);
  std::sort(milestones.begin(), milestones.end());
  const double gamma = read_scheduler_scalar(sd, "gamma", who);
  LRScheduler::read_fields(sd);
  milestones_ = std::move(milestones);
  gamma_ = gamma;
}

// ====================================================================== ConstantLR

namespace {
Optimizer& check_constant_factor(Optimizer& opt, double factor) {
  if (factor > 1.0 || factor < 0)
    throw std::invalid_argument("Constant multiplicative factor expected to be between 0 and 1.");
  return opt;
}

Optimizer& check_linear_factors(Optimizer& opt, double start_factor, double end_factor) {
  if (start_factor > 1.0 || start_factor < 0)
    throw std::invalid_argument("Starting multiplicative factor expected to be between 0 and 1.");
  if (end_factor > 1.0 || end_factor < 0)
    throw std::invalid_argument("Ending multiplicative factor expected to be between 0 and 1.");
  return opt;
}

// Python's float division raises ZeroDivisionError where C++ would return inf or nan.
double py_div(double a, double b, const std::string& who) {
  if (b == 0) throw std::domain_error("[" + who + "] float division by zero");
  return a / b;
}
}  // namespace

ConstantLR::ConstantLR(Optimizer& optimizer, double factor, int64_t total_iters, int64_t last_epoch)
    : LRScheduler(check_constant_factor(optimizer, factor), last_epoch), factor_(factor), total_iters_(total_iters) {
  initial_step();
}

std::vector<double> ConstantLR::get_lr() {
  std::vector<double> lrs = group_lrs();
  if (last_epoch_ == 0) {
    for (double& lr : lrs) lr = lr * factor_;
    return lrs;
  }
  if (last_epoch_ != total_iters_) return lrs;
  const double inv = py_div(1.0, factor_, "ConstantLR.step");
  for (double& lr : lrs) lr = lr * inv;
  return lrs;
}

std::optional<std::vector<double>> ConstantLR::get_closed_form_lr() {
  std::vector<double> out;
  const double f = factor_ + (last_epoch_ >= total_iters_ ? 1.0 : 0.0) * (1 - factor_);
  for (double b : base_lrs_) out.push_back(b * f);
  return out;
}

void ConstantLR::write_fields(StateDict& out) const {
  write_scalar(out, "factor", factor_);
  write_scalar(out, "total_iters", static_cast<double>(total_iters_));
}

void ConstantLR::read_fields(const StateDict& sd) {
  const std::string who = name() + ".load_state_dict";
  const double factor = read_scheduler_scalar(sd, "factor", who);
  check_constant_factor(*optimizer_, factor);
  const int64_t total_iters = read_scheduler_int(sd, "total_iters", who);
  LRScheduler::read_fields(sd);
  factor_ = factor;
  total_iters_ = total_iters;
}

// ====================================================================== LinearLR

LinearLR::LinearLR(Optimizer& optimizer, double start_factor, double end_factor, int64_t total_iters,
                   int64_t last_epoch)
    : LRScheduler(check_linear_factors(optimizer, start_factor, end_factor), last_epoch),
      start_factor_(start_factor),
      end_factor_(end_factor),
      total_iters_(total_iters) {
  initial_step();
}

std::vector<double> LinearLR::get_lr() {
  std::vector<double> lrs = group_lrs();
  if (last_epoch_ == 0) {
    for (double& lr : lrs) lr = lr * start_factor_;
    return lrs;
  }
  if (last_epoch_ > total_iters_) return lrs;
  // lr * (1 + (end - start) / (total_iters * start + (epoch - 1) * (end - start))), in Python's order.
  const double diff = end_factor_ - start_factor_;
  const double denom = static_cast<double>(total_iters_) * start_factor_ + static_cast<double>(last_epoch_ - 1) * diff;
  const double f = 1. + py_div(diff, denom, "LinearLR.step");
  for (double& lr : lrs) lr = lr * f;
  return lrs;
}

std::optional<std::vector<double>> LinearLR::get_closed_form_lr() {
  std::vector<double> out;
  const double t = static_cast<double>(std::min(total_iters_, last_epoch_));
  const double f =
      start_factor_ + py_div((end_factor_ - start_factor_) * t, static_cast<double>(total_iters_), "LinearLR.step");
  for (double b : base_lrs_) out.push_back(b * f);
  return out;
}

void LinearLR::write_fields(StateDict& out) const {
  write_scalar(out, "start_factor", start_factor_);
  write_scalar(out, "end_factor", end_factor_);
  write_scalar(out, "total_iters", static_cast<double>(total_iters_));
}

void LinearLR::read_fields(const StateDict& sd) {
  const std::string who = name() + ".load_state_dict";
  const double start_factor = read_scheduler_scalar(sd, "start_factor", who);
  const double end_factor = read_scheduler_scalar(sd, "end_factor", who);
  check_linear_factors(*optimizer_, start_factor, end_factor);
  const int64_t total_iters = read_scheduler_int(sd, "total_iters", who);
  LRScheduler::read_fields(sd);
  start_factor_ = start_factor;
  end_factor_ = end_factor;
  total_iters_ = total_iters;
}

// ====================================================================== ExponentialLR

ExponentialLR::ExponentialLR(Optimizer& optimizer, double gamma, int64_t last_epoch)
    : LRScheduler(optimizer, last_epoch), gamma_(gamma) {
  initial_step();
}

std::vector<double> ExponentialLR::get_lr() {
  std::vector<double> lrs = group_lrs();
  if (last_epoch_ == 0) return lrs;
  for (double& lr : lrs) lr = lr * gamma_;
  return lrs;
}

std::optional<std::vector<double>> ExponentialLR::get_closed_form_lr() {
  std::vector<double> out;
  const double f = std::pow(gamma_, static_cast<double>(last_epoch_));
  for (double b : base_lrs_) out.push_back(b * f);
  return out;
}

void ExponentialLR::write_fields(StateDict& out) const { write_scalar(out, "gamma", gamma_); }

void ExponentialLR::read_fields(const StateDict& sd) {
  const double gamma = read_scheduler_scalar(sd, "gamma", name() + ".load_state_dict");
  LRScheduler::read_fields(sd);
  gamma_ = gamma;
}

// ====================================================================== CosineAnnealingLR

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min, int64_t last_epoch)
    : LRScheduler(positive_or_throw(optimizer, T_max, "CosineAnnealingLR", "T_max"), last_epoch),
      T_max_(T_max),
      eta_min_(eta_min) {
  initial_step();
}

std::vector<double> CosineAnnealingLR::get_lr() {
  std::vector<double> lrs = group_lrs();
  const double T = static_cast<double>(T_max_);
  const double e = static_cast<double>(last_epoch_);
  if (last_epoch_ == 0) return lrs;
  if (step_count_ == 1 && last_epoch_ > 0) {
    // First step of a resumed scheduler: the closed form from base_lrs.
    std::vector<double> out;
    const size_t n = std::min(base_lrs_.size(), lrs.size());
    for (size_t i = 0; i < n; ++i)
      out.push_back(eta_min_ + (base_lrs_[i] - eta_min_) * (1 + std::cos(e * kPi / T)) / 2);
    return out;
  }
  if ((last_epoch_ - 1 - T_max_) % (2 * T_max_) == 0) {
    // Start of a rising half period: add half a step of the cosine's amplitude.
    std::vector<double> out;
    const size_t n = std::min(base_lrs_.size(), lrs.size());
    for (size_t i = 0; i < n; ++i)
      out.push_back(lrs[i] + (base_lrs_[i] - eta_min_) * (1 - std::cos(kPi / T)) / 2);
    return out;
  }
  // lr_t - eta = (1 + cos(pi t / T)) / (1 + cos(pi (t-1) / T)) * (lr_{t-1} - eta)
  const double ratio = (1 + std::cos(kPi * e / T)) / (1 + std::cos(kPi * (e - 1) / T));
  for (double& lr : lrs) lr = ratio * (lr - eta_min_) + eta_min_;
  return lrs;
}

std::optional<std::vector<double>> CosineAnnealingLR::get_closed_form_lr() {
  std::vector<double> out;
  const double c = 1 + std::cos(kPi * static_cast<double>(last_epoch_) / static_cast<double>(T_max_));
  for (double b : base_lrs_) out.push_back(eta_min_ + (b - eta_min_) * c / 2);
  return out;
}

void CosineAnnealingLR::write_fields(StateDict& out) const {
  write_scalar(out, "T_max", static_cast<double>(T_max_));
  write_scalar(out, "eta_min", eta_min_);
}

void CosineAnnealingLR::read_fields(const StateDict& sd) {
  const std::string who = name() + ".load_state_dict";
  const int64_t T_max = read_scheduler_int(sd, "T_max", who);
  positive_or_throw(*optimizer_, T_max, "CosineAnnealingLR.load_state_dict", "T_max");
  const double eta_min = read_scheduler_scalar(sd, "eta_min", who);
  LRScheduler::read_fields(sd);
  T_max_ = T_max;
  eta_min_ = eta_min;
}

// ====================================================================== SequentialLR

namespace {
Optimizer& check_sequential(Optimizer& opt, const std::vector<std::shared_ptr<LRScheduler>>& schedulers,
                            const std::vector<int64_t>& milestones) {
  for (size_t i = 0; i < schedulers.size(); ++i) {
    if (!schedulers[i]) throw std::invalid_argument("[SequentialLR] scheduler " + std::to_string(i) + " is null");
    if (&schedulers[i]->optimizer() != &opt)
      throw std::invalid_argument(
          "Sequential Schedulers expects all schedulers to belong to the same optimizer, but got schedulers at "
          "index " + std::to_string(i) + " to be different than the optimizer passed in.");
  }
  if (milestones.size() + 1 != schedulers.size())
    throw std::invalid_argument(
        "Sequential Schedulers expects number of schedulers provided to be one more than the number of milestone "
        "points, but got number of schedulers " + std::to_string(schedulers.size()) +
        " and the number of milestones to be equal to " + std::to_string(milestones.size()));
  for (size_t i = 0; i < opt.param_groups().size(); ++i)
    if (!opt.param_groups()[i].initial_lr())
      throw std::invalid_argument("[SequentialLR] param_groups[" + std::to_string(i) + "] has no 'initial_lr'");
  return opt;
}
}  // namespace

SequentialLR::SequentialLR(Optimizer& optimizer, std::vector<std::shared_ptr<LRScheduler>> schedulers,
                           std::vector<int64_t> milestones, int64_t last_epoch)
    : LRScheduler(check_sequential(optimizer, schedulers, milestones), NoBaseInit{}),
      schedulers_(std::move(schedulers)),
      milestones_(std::move(milestones)) {
  last_epoch_ = last_epoch + 1;
  // Back to the initial lrs, undo every child's initial step, then redo the first child's.
  for (auto& g : optimizer_->param_groups()) g.options().set_lr(*g.initial_lr());
  for (auto& s : schedulers_) s->last_epoch_ -= 1;
  schedulers_[0]->initial_step();
  last_lr_ = schedulers_[0]->get_last_lr();
}

void SequentialLR::step() {
  ++last_epoch_;
  const int64_t idx = bisect_right(milestones_, last_epoch_);
  LRScheduler& s = *schedulers_[static_cast<size_t>(idx)];
  if (idx > 0 && milestones_[static_cast<size_t>(idx - 1)] == last_epoch_) s.step(0);
  else s.step();
  last_lr_ = s.get_last_lr();
}

void SequentialLR::step(int64_t epoch) {
  throw std::invalid_argument("[SequentialLR.step] takes no epoch (got " + std::to_string(epoch) + ")");
}

std::vector<double> SequentialLR::get_lr() {
  throw std::logic_error("[SequentialLR] has no get_lr: its step() steps the current scheduler");
}

StateDict SequentialLR::state_dict() const {
  StateDict out;
  for (size_t i = 0; i < schedulers_.size(); ++i) {
    const std::string prefix = "_schedulers." + std::to_string(i) + ".";
    for (const auto& [k, v] : schedulers_[i]->state_dict()) out.insert_or_assign(prefix + k, v);
  }
  out.insert_or_assign("_milestones", int_list_tensor(milestones_));
  write_scalar(out, "last_epoch", static_cast<double>(last_epoch_));
  write_scheduler_doubles(out, "_last_lr", last_lr_);
  return out;
}

void SequentialLR::read_fields(const StateDict& sd) {
  const std::string who = name() + ".load_state_dict";
  auto milestones = read_int_list(sd, "_milestones", who);
  if (milestones.size() + 1 != schedulers_.size())
    throw std::invalid_argument("[" + who + "] '_milestones' has " + std::to_string(milestones.size()) +
                                " values, expected " + std::to_string(schedulers_.size() - 1));
  const int64_t last_epoch = read_scheduler_int(sd, "last_epoch", who);
  auto last_lr = read_scheduler_doubles(sd, "_last_lr", who, static_cast<int64_t>(optimizer_->param_groups().size()));
  std::vector<StateDict> child(schedulers_.size());
  for (const auto& [k, v] : sd) {
    if (k.rfind("_schedulers.", 0) != 0) continue;
    const size_t dot = k.find('.', 12);
    const size_t i = std::stoul(k.substr(12, dot - 12));  // the key set was checked: well formed
    child[i].insert_or_assign(k.substr(dot + 1), v);
  }
  for (size_t i = 0; i < schedulers_.size(); ++i) schedulers_[i]->load_state_dict(child[i]);
  milestones_ = std::move(milestones);
  last_epoch_ = last_epoch;
  last_lr_ = std::move(last_lr);
}

}  // namespace troupe::optim
