// n-step returns (TorchRL's MultiStep, pinned by shared/reference/semantics.md section 3), and the
// replay-side MultiStepTransform that carries the last n-1 frames of every row into the next batch so
// that no transition is cut short at a batch boundary.
//
//   rl::MultiStep ms(/*gamma=*/0.99, /*n_steps=*/4);
//   rl::TensorDict out = ms(batch);   // batch [*B, T]: next.reward summed over up to 4 frames, next.*
//                                     // shifted, gamma / steps_to_next_obs / nonterminal added
#pragma once

#include <cstdint>
#include <optional>

#include <troupe/rl/tensordict.h>

namespace troupe::rl {

/// The n-step transform of one batch [*B, T] (time is the last batch dim). For every frame t, with d(t)
/// the first done frame at or after t (else T - 1) and idx = min(t + n - 1, d(t)):
/// next.<key> <- next.<key>[idx] (all next keys but reward, done, terminated, truncated);
/// next.reward <- sum_{i <= idx - t} gamma^i r[t + i] (the original in next.original_reward);
/// steps_to_next_obs = idx - t + 1, gamma = gamma^steps_to_next_obs, nonterminal = (t != d(t)).
/// Beyond the pinned keys: next.n_step_terminated = next.terminated[idx] (next.done[idx] without a
/// terminated key), what a value target needs to know whether to bootstrap from the shifted observation.
/// n_steps = 0 is the identity.
class MultiStep {
 public:
  /// gamma in (0, 1], n_steps >= 0, else std::invalid_argument with TorchRL's text.
  MultiStep(double gamma, int64_t n_steps);

  /// The transformed batch (a new TensorDict; entries not rewritten are shared with `batch`).
  TensorDict operator()(const TensorDict& batch) const;

  double gamma() const { return gamma_; }
  int64_t n_steps() const { return n_steps_; }

 private:
  double gamma_;
  int64_t n_steps_;
};

/// MultiStep made exact across batches: each call prepends the n - 1 frames held back from the previous
/// batch (per row) and returns the frames whose n-step window is complete, holding back the last n - 1.
/// The first call returns T - (n - 1) frames per row, later calls T; flush() returns what is held,
/// finished as the plain MultiStep finishes a batch's end. Rows must stay the same environments.
class MultiStepTransform {
 public:
  MultiStepTransform(double gamma, int64_t n_steps);

  TensorDict operator()(const TensorDict& batch);
  /// The held-back frames, transformed with the batch end as the trajectory's end; none held after.
  std::optional<TensorDict> flush();
  /// Frames held back per row (n - 1 once a batch of at least n - 1 frames was seen).
  int64_t held() const;

 private:
  MultiStep ms_;
  std::optional<TensorDict> held_;
};

}  // namespace troupe::rl
