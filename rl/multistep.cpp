// MultiStep and MultiStepTransform (rl/multistep.h): the n-step arithmetic in one pass per row.
#include <troupe/rl/multistep.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include <troupe/tensor/ops.h>

namespace troupe::rl {

namespace {

// done / reward must be shaped as the batch, or the batch followed by a singleton dim.
void check_per_frame(const char* what, const Tensor& t, const std::vector<int64_t>& batch) {
  auto s = t.sizes().vec();
  bool same = s == batch;
  bool trailing_one = s.size() == batch.size() + 1 && s.back() == 1 && std::equal(batch.begin(), batch.end(), s.begin());
  if (!same && !trailing_one) {
    std::string b, g;
    for (size_t i = 0; i < batch.size(); ++i) b += (i ? ", " : "") + std::to_string(batch[i]);
    for (size_t i = 0; i < s.size(); ++i) g += (i ? ", " : "") + std::to_string(s[i]);
    throw std::invalid_argument(std::string("[MultiStep] ") + what + " must have the batch shape [" + b +
                                "] (optionally followed by 1), got [" + g + "]");
  }
}

bool is_unshifted(const Key& k) {
  // next.reward / done / terminated / truncated / original_reward stay per frame
  if (k.parts().size() != 2) return false;
  const std::string& n = k.parts()[1];
  return n == "reward" || n == "done" || n == "terminated" || n == "truncated" || n == "original_reward";
}

}  // namespace

MultiStep::MultiStep(double gamma, int64_t n_steps) : gamma_(gamma), n_steps_(n_steps) {
  if (n_steps < 0) throw std::invalid_argument("n_steps must be a non-negative integer, got " + std::to_string(n_steps));
  if (!(gamma > 0 && gamma <= 1)) {
    std::string g = std::to_string(gamma);
    throw std::invalid_argument("got out-of-bounds gamma decay: gamma=" + g);
  }
}

TensorDict MultiStep::operator()(const TensorDict& batch) const {
  if (n_steps_ == 0) return batch;
  if (batch.batch_dims() < 1)
    throw std::invalid_argument("[MultiStep] expected a TensorDict with batch dims [*B, T] (time last), got batch_size torch.Size([])");
  if (!batch.contains("next.done") || !batch.contains("next.reward"))
    throw std::invalid_argument("[MultiStep] the batch must hold ('next', 'reward') and ('next', 'done')");
  const auto& bs = batch.batch_size();
  const int64_t T = bs.back();
  const int64_t rows = T == 0 ? 0 : batch.numel() / T;
  Tensor done = batch.get("next.done");
  Tensor reward = batch.get("next.reward");
  check_per_frame("('next', 'done')", done, bs);
  check_per_frame("('next', 'reward')", reward, bs);

  // One pass per row, reading done / terminated / reward in place and writing every output in its final
  // dtype (float32 and float64 rewards; others go through float64 and are converted at the end).
  Tensor done_c = done.to(kBool).contiguous();
  Tensor term = batch.contains("next.terminated") ? batch.get("next.terminated") : done;
  Tensor term_c = term.to(kBool).contiguous();
  if (term_c.numel() != done_c.numel())
    throw std::invalid_argument("[MultiStep] ('next', 'terminated') has " + std::to_string(term_c.numel()) + " entries, done " +
                                std::to_string(done_c.numel()));
  const ScalarType float_t = is_floating_point(reward.dtype()) ? reward.dtype() : kFloat32;
  const ScalarType sum_t = reward.dtype() == kFloat32 ? kFloat32 : kFloat64;
  const ScalarType gamma_st = float_t == kFloat32 ? kFloat32 : kFloat64;
  Tensor rew_c = reward.dtype() == kFloat32 || reward.dtype() == kFloat64 ? reward.contiguous() : reward.to(kFloat64).contiguous();
  const bool* dn = done_c.data_ptr<bool>();
  const bool* tm = term_c.data_ptr<bool>();
  const float* rf = rew_c.dtype() == kFloat32 ? rew_c.data_ptr<float>() : nullptr;
  const double* rd = rf ? nullptr : rew_c.data_ptr<double>();

  const int64_t N = rows * T;
  Tensor gather = empty({N}, TensorOptions().dtype(kInt64));
  Tensor steps = empty({N}, TensorOptions().dtype(kInt64));
  Tensor summed = empty({N}, TensorOptions().dtype(sum_t));
  Tensor nonterm = empty({N}, TensorOptions().dtype(kBool));
  Tensor n_term = empty({N}, TensorOptions().dtype(kBool));
  Tensor gamma_t = empty({N}, TensorOptions().dtype(gamma_st));
  int64_t* gi = gather.data_ptr<int64_t>();
  int64_t* st = steps.data_ptr<int64_t>();
  float* sf = sum_t == kFloat32 ? summed.data_ptr<float>() : nullptr;
  double* sd = sf ? nullptr : summed.data_ptr<double>();
  float* gf = gamma_st == kFloat32 ? gamma_t.data_ptr<float>() : nullptr;
  double* gd = gf ? nullptr : gamma_t.data_ptr<double>();
  bool* nt = nonterm.data_ptr<bool>();
  bool* ns = n_term.data_ptr<bool>();
  const int64_t n = n_steps_;
  // gamma^k for k = 0..n (steps_to_next_obs is at most n)
  std::vector<double> gpow(static_cast<size_t>(n + 1), 1.0);
  for (int64_t k = 1; k <= n; ++k) gpow[static_cast<size_t>(k)] = gpow[static_cast<size_t>(k - 1)] * gamma_;
  for (int64_t b = 0; b < rows; ++b) {
    const int64_t base = b * T;
    int64_t d = T - 1;  // d(t): the first done frame at or after t (else the batch's last)
    for (int64_t t = T - 1; t >= 0; --t) {
      if (dn[base + t]) d = t;
      const int64_t idx = std::min(t + n - 1, d);
      double acc = 0;
      if (rf)
        for (int64_t i = t; i <= idx; ++i) acc += gpow[static_cast<size_t>(i - t)] * static_cast<double>(rf[base + i]);
      else
        for (int64_t i = t; i <= idx; ++i) acc += gpow[static_cast<size_t>(i - t)] * rd[base + i];
      gi[base + t] = base + idx;
      st[base + t] = idx - t + 1;
      const double g = gpow[static_cast<size_t>(idx - t + 1)];
      if (gf) gf[base + t] = static_cast<float>(g);
      else gd[base + t] = g;
      if (sf) sf[base + t] = static_cast<float>(acc);
      else sd[base + t] = acc;
      nt[base + t] = t != d;
      ns[base + t] = tm[base + idx];
    }
  }

  TensorDict out = batch;
  // shift every next.* entry but the per-frame ones to frame idx
  for (const Key& k : batch.keys(true, true)) {
    if (k.parts().size() < 2 || k.parts()[0] != "next" || is_unshifted(k)) continue;
    Tensor v = batch.get(k);
    Tensor flat = v.reshape({N, -1}).index_select(0, gather).reshape(v.sizes().vec());
    out.set(k, flat);
  }
  const std::vector<int64_t> done_shape = done.sizes().vec();
  // whether the window ends on a terminal frame (terminated, else done, at idx): a value target must not
  // bootstrap there; the shifted next.observation of such a frame is the terminal one
  out.set("next.n_step_terminated", n_term.reshape(done_shape));
  out.set("next.original_reward", reward);
  out.set("next.reward", (summed.dtype() == reward.dtype() ? summed : summed.to(reward.dtype())).reshape(reward.sizes().vec()));
  out.set("steps_to_next_obs", steps.reshape(done_shape));
  out.set("gamma", (gamma_t.dtype() == float_t ? gamma_t : gamma_t.to(float_t)).reshape(done_shape));
  out.set("nonterminal", nonterm.reshape(done_shape));
  return out;
}

// ------------------------------------------------------------------------------ MultiStepTransform

MultiStepTransform::MultiStepTransform(double gamma, int64_t n_steps) : ms_(gamma, n_steps) {}

int64_t MultiStepTransform::held() const { return held_ ? held_->batch_size().back() : 0; }

TensorDict MultiStepTransform::operator()(const TensorDict& batch) {
  const int64_t keep = ms_.n_steps() > 0 ? ms_.n_steps() - 1 : 0;
  if (batch.batch_dims() < 1) throw std::invalid_argument("[MultiStepTransform] expected batch dims [*B, T]");
  const int64_t time = batch.batch_dims() - 1;
  TensorDict joined = batch;
  if (held_) {
    std::vector<int64_t> a = held_->batch_size(), b = batch.batch_size();
    a.pop_back();
    b.pop_back();
    if (a != b) throw std::invalid_argument("[MultiStepTransform] the batch's rows differ from the previous batch's");
    joined = TensorDict::cat({*held_, batch}, time);
  }
  const int64_t total = joined.batch_size().back();
  const int64_t ready = std::max<int64_t>(total - keep, 0);
  TensorDict done = ms_(joined);
  held_ = joined.slice(time, ready, total).clone();
  return done.slice(time, 0, ready);
}

std::optional<TensorDict> MultiStepTransform::flush() {
  if (!held_) return std::nullopt;
  TensorDict out = ms_(*held_);
  held_.reset();
  return out;
}

}  // namespace troupe::rl
