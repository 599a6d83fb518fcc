// DistributedDataParallel training step and ZeRO memory per rank (issue 5). Run as
//   mpirun --allow-run-as-root -np 2 ddp_bench [--quick] [--samples=N] [--loss=mse|ce] [--profile]
// (or `ddp_bench --ranks 2`: two ranks as threads of one process, the `local` backend).
//
// Step: opt.zero_grad(); loss = cross_entropy (or mse) of an MLP 784-1024-1024-10 (ReLU) on this rank's
// 128 rows; loss.backward(); SGD step. One troupe (and OpenBLAS) thread per rank. Cases, each with its
// own model (same seed) and optimizer:
//   local           no communication (each rank trains alone): the compute floor
//   DDP one bucket  first_bucket_mb = bucket_cap_mb = 1e6: one all_reduce of every gradient once the
//                   last one is ready, i.e. after backward (no overlap)
//   DDP buckets     PyTorch's defaults (first bucket 1 MiB, then 25 MiB; a bucket closes once it reaches
//                   its cap, so here [layer 3, layer 2] 4.24 MB and [layer 1] 3.22 MB): the first
//                   bucket's all_reduce runs while backward computes layer 1's gradients
//   DDP per tensor  bucket_cap_mb = first_bucket_mb = 1e-6: one bucket per parameter (informative)
//   DDP view        the defaults with gradient_as_bucket_view (no copy out of the buckets; informative)
//   DDP through buckets  the defaults with parallel::detail::set_ddp_in_place_bytes(INT64_MAX): every
//                   gradient copied into its bucket and back, the schedule before issue 18 (the other
//                   DDP cases all-reduce the gradients of 256 KiB and more in place on .grad)
// --no-zero skips the ZeRO tables. --profile adds each phase per rank, and the all-reduces the bound is
// made of: all gradients' bytes alone (SUM and AVG, hot in cache) and each fresh .grad after a local
// backward and a barrier (out of cache, no wait for the other rank).
// Timing: samples of `steps` steps each, cases interleaved in rotating order; a sample starts after a
// barrier, its time is the slowest rank's (MAX all_reduce) divided by steps; medians are printed by
// rank 0. overlap gain = (one bucket - buckets) / one bucket.
// Checks: every DDP model is the same on every rank, and the bucketed and one-bucket models are equal
// (the same averages, whatever the bucketing).
// ZeRO (when comm/zero.h is there): bytes per rank (params, grads, optimizer state; Adam) after one
// step, for stages 1, 2 and 3 at world size 1 (a `local` group of one on each rank) and at the world's
// size, next to plain DDP's; memory falls as 1/N for the sharded parts. Then the ZeRO step (same model,
// batch and SGD as the DDP cases, timed the same way), before and after the bucket reduce-scatters
// moved into backward, with each case's peak bytes per rank over one step (max_memory_per_rank):
//   ZeRO-2 before     overlap_comm(false), one bucket: one reduce-scatter after backward, in step()
//                     (the schedule of the previous implementation)
//   ZeRO-2 overlapped the defaults: buckets 1+25 MiB reduce-scattered from the gradient hooks
//   FSDP before       one unit, overlap_comm(false), one bucket (the previous schedule)
//   FSDP overlapped   one unit, buckets from the hooks
//   FSDP units        children_wrap_policy (one unit per Linear): gathered before each layer's forward,
//                     freed after it (reshard_after_forward) or kept, gathered again in backward
//                     (without or with backward_prefetch); peak parameter bytes fall to about the
//                     largest unit plus the shards (two units in backward with prefetch)
// Check: every ZeRO case ends with the same parameters (the same averages whatever the schedule).
#include <troupe/comm/comm.h>
#include <troupe/optim/optim.h>
#include <troupe/parallel/parallel.h>
#include <troupe/launch/launch.h>
#include <troupe/nn/nn.h>
#include <troupe/tensor/ops.h>

#if __has_include(<troupe/parallel/zero.h>)
#include <troupe/parallel/zero.h>
#define TROUPE_BENCH_HAVE_ZERO 1
#endif

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

// OpenBLAS extension (declared in OpenBLAS's cblas.h; repeated so other CBLAS headers compile too).
extern "C" {
void openblas_set_num_threads(int num_threads) __attribute__((weak));
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"  // the table helpers this bench does not use
#include "harness.h"
#pragma GCC diagnostic pop

namespace {

using namespace troupe;
namespace F = troupe::nn::functional;

constexpr int64_t kBatch = 128, kIn = 784, kHidden = 1024, kOut = 10;
bool use_mse = false;

// The default generator is shared by the rank threads of `--ranks N`: seeding and drawing hold this lock.
std::mutex& rng_mutex() {
  static std::mutex m;
  return m;
}

std::shared_ptr<nn::SequentialImpl> make_mlp() {
  std::lock_guard<std::mutex> lock(rng_mutex());
  manual_seed(1234);
  return std::make_shared<nn::SequentialImpl>(std::make_shared<nn::LinearImpl>(kIn, kHidden), std::make_shared<nn::ReLUImpl>(),
                                          std::make_shared<nn::LinearImpl>(kHidden, kHidden), std::make_shared<nn::ReLUImpl>(),
                                          std::make_shared<nn::LinearImpl>(kHidden, kOut));
}

Tensor loss_of(const Tensor& out, const Tensor& y_class, const Tensor& y_dense) {
  return use_mse ? F::mse_loss(out, y_dense) : F::cross_entropy(out, y_class);
}

// One case: a model (DDP-wrapped or not), its optimizer and its timing samples.
struct Case {
  std::string name;
  nn::ModulePtr model;  // what forward is called on (the DDP wrapper or the plain model)
  nn::ModulePtr inner;  // the plain model
  std::unique_ptr<optim::SGD> opt;
  std::vector<double> ms;  // per-step ms of each sample (already the max over ranks)
};

std::unique_ptr<Case> make_case(const std::string& name, const comm::ProcessGroupPtr& pg,
                                std::optional<parallel::DDPOptions> ddp) {
  auto c = std::make_unique<Case>();
  c->name = name;
  c->inner = make_mlp();
  c->model = ddp ? nn::ModulePtr(std::make_shared<parallel::DistributedDataParallel>(c->inner, pg, *ddp)) : c->inner;
  c->opt = std::make_unique<optim::SGD>(c->model->parameters(), optim::SGDOptions(0.01));
  return c;
}

// The slowest rank's value.
double max_over_ranks(const comm::ProcessGroupPtr& pg, double v) {
  Tensor t = full({1}, v, TensorOptions().dtype(kFloat64));
  pg->all_reduce(t, comm::ReduceOp::MAX);
  return t.to_vector<double>()[0];
}

// Times each case's `step` into its `ms`: a warm-up (allocations, first-iteration work), then
// cfg.samples samples of `steps` steps (from the slowest case, ~250 ms a sample, 60 with --quick), the
// cases in rotating order, each sample after a barrier and the slowest rank's per-step mean. Returns
// `steps`.
template <typename C, typename Step>
int time_cases(const comm::ProcessGroupPtr& pg, std::vector<std::unique_ptr<C>>& cases, Step step) {
  double slowest = 0;
  for (auto& c : cases) {
    step(*c);
    auto t0 = Clock::now();
    for (int i = 0; i < 2; ++i) step(*c);
    slowest = std::max(slowest, max_over_ranks(pg, ms_since(t0) / 2));
  }
  const int steps = std::max(1, static_cast<int>(std::ceil((cfg.quick ? 60.0 : 250.0) / slowest)));
  for (int s = 0; s < cfg.samples; ++s) {
    for (size_t k = 0; k < cases.size(); ++k) {
      C& c = *cases[(k + static_cast<size_t>(s)) % cases.size()];
      pg->barrier();
      auto t0 = Clock::now();
      for (int i = 0; i < steps; ++i) step(c);
      c.ms.push_back(max_over_ranks(pg, ms_since(t0) / steps));
    }
  }
  return steps;
}

// Flattened parameters (float64 copies) of a module.
std::vector<double> flat_params(const nn::Module& m) {
  std::vector<double> out;
  for (const auto& p : m.parameters())
    for (float v : p.detach().contiguous().to_vector<float>()) out.push_back(v);
  return out;
}

// Largest difference between this rank's `v` and rank 0's.
double diff_to_rank0(const comm::ProcessGroupPtr& pg, const std::vector<double>& v) {
  Tensor t = tensor(v, kFloat64);
  pg->broadcast(t, 0);
  auto r0 = t.to_vector<double>();
  double d = 0;
  for (size_t i = 0; i < v.size(); ++i) d = std::max(d, std::fabs(v[i] - r0[i]));
  return max_over_ranks(pg, d);
}

std::string mb(int64_t bytes) { return fmt("%.2f MB", static_cast<double>(bytes) / 1e6); }

#ifdef TROUPE_BENCH_HAVE_ZERO
// Bytes per rank after one Adam step at stage 0 (plain DDP: full params, grads, state), 1, 2 or 3.
parallel::ShardMemory zero_memory(int stage, const comm::ProcessGroupPtr& pg, const Tensor& x, const Tensor& yc,
                              const Tensor& yd) {
  auto factory = [](std::vector<Tensor> shards) {
    return std::make_unique<optim::Adam>(std::move(shards), optim::AdamOptions(1e-3));
  };
  auto model = make_mlp();
  if (stage == 0) {
    auto ddp = std::make_shared<parallel::DistributedDataParallel>(model, pg);
    optim::Adam opt(ddp->parameters(), optim::AdamOptions(1e-3));
    opt.zero_grad();
    loss_of((*ddp)(x), yc, yd).backward();
    opt.step();
    parallel::ShardMemory m;
    for (const auto& p : model->parameters()) {
      m.params += p.numel() * p.element_size();
      if (p.grad().defined()) m.grads += p.grad().numel() * p.grad().element_size();
    }
    for (const auto& [impl, st] : opt.state()) {  // as ShardCore::memory() counts it
      if (!st) continue;
      nn::StateDict d;
      st->write(d, "");
      for (const auto& [k, t] : d)
        if (t.defined()) m.optimizer_state += t.numel() * t.element_size();
    }
    return m;
  }
  if (stage == 3) {
    auto fsdp = std::make_shared<parallel::FullyShardedDataParallel>(model, factory, pg);
    fsdp->zero_grad();
    loss_of((*fsdp)(x), yc, yd).backward();
    fsdp->step();
    return fsdp->memory_per_rank();
  }
  parallel::ZeroOptimizer zero(model, factory, stage, pg);
  zero.zero_grad();
  loss_of((*model)(x), yc, yd).backward();
  zero.step();
  return zero.memory_per_rank();
}

// One ZeRO configuration: its own model (same seed), wrapper, timing samples and peak.
struct ZeroCase {
  std::string name;
  nn::ModulePtr model;
  std::unique_ptr<parallel::ZeroOptimizer> zero;
  std::shared_ptr<parallel::FullyShardedDataParallel> fsdp;
  std::vector<double> ms;
  parallel::ShardMemory peak;
  int64_t forward_peak_params = 0;  // FSDP: the most parameter bytes during forward
};

// The ZeRO step before and after the overlap; returns whether the cases agree.
bool zero_steps(const comm::ProcessGroupPtr& pg, const Tensor& x, const Tensor& yc, const Tensor& yd) {
  auto sgd = [](std::vector<Tensor> shards) {
    return std::make_unique<optim::SGD>(std::move(shards), optim::SGDOptions(0.01));
  };
  const double huge = 1e6;  // MiB: one bucket
  auto zero_case = [&](const std::string& name, parallel::ZeroOptions o) {
    auto c = std::make_unique<ZeroCase>();
    c->name = name;
    c->model = make_mlp();
    c->zero = std::make_unique<parallel::ZeroOptimizer>(c->model, sgd, 2, pg, o);
    return c;
  };
  auto fsdp_case = [&](const std::string& name, parallel::FSDPOptions o) {
    auto c = std::make_unique<ZeroCase>();
    c->name = name;
    c->model = make_mlp();
    c->fsdp = std::make_shared<parallel::FullyShardedDataParallel>(c->model, sgd, pg, o);
    return c;
  };
  std::vector<std::unique_ptr<ZeroCase>> cases;
  cases.push_back(zero_case("ZeRO-2 before: one bucket, in step()",
                            parallel::ZeroOptions().overlap_comm(false).bucket_cap_mb(huge).first_bucket_mb(huge)));
  cases.push_back(zero_case("ZeRO-2 overlapped: buckets 1+25 MiB", parallel::ZeroOptions()));
  cases.push_back(fsdp_case("FSDP before: one unit, one bucket, in step()",
                            parallel::FSDPOptions().overlap_comm(false).bucket_cap_mb(huge).first_bucket_mb(huge)));
  cases.push_back(fsdp_case("FSDP overlapped: one unit, buckets 1+25 MiB", parallel::FSDPOptions()));
  cases.push_back(fsdp_case("FSDP units (children), reshard_after_forward",
                            parallel::FSDPOptions().auto_wrap_policy(parallel::children_wrap_policy())));
  cases.push_back(fsdp_case("FSDP units (children), reshard, prefetch",
                            parallel::FSDPOptions().auto_wrap_policy(parallel::children_wrap_policy()).backward_prefetch(true)));
  cases.push_back(fsdp_case("FSDP units (children), kept after forward",
                            parallel::FSDPOptions().auto_wrap_policy(parallel::children_wrap_policy()).reshard_after_forward(false)));

  auto step = [&](ZeroCase& c) {
    c.zero ? c.zero->zero_grad() : c.fsdp->zero_grad();
    Tensor out = c.fsdp ? (*c.fsdp)(x) : (*c.model)(x);
    Tensor loss = loss_of(out, yc, yd);
    loss.backward();
    c.zero ? c.zero->step() : c.fsdp->step();
    do_not_optimize(loss.item<float>());
  };
  const int steps = time_cases(pg, cases, step);
  // Peak bytes per rank over one more step, and during its forward (the most of the ranks).
  for (auto& c : cases) {
    c->zero ? c->zero->zero_grad() : c->fsdp->zero_grad();
    c->zero ? c->zero->reset_peak_memory_stats() : c->fsdp->reset_peak_memory_stats();
    Tensor loss = loss_of(c->fsdp ? (*c->fsdp)(x) : (*c->model)(x), yc, yd);
    if (c->fsdp)
      c->forward_peak_params =
          static_cast<int64_t>(max_over_ranks(pg, static_cast<double>(c->fsdp->max_memory_per_rank().params)));
    loss.backward();
    c->zero ? c->zero->step() : c->fsdp->step();
    parallel::ShardMemory m = c->zero ? c->zero->max_memory_per_rank() : c->fsdp->max_memory_per_rank();
    c->peak.params = static_cast<int64_t>(max_over_ranks(pg, static_cast<double>(m.params)));
    c->peak.grads = static_cast<int64_t>(max_over_ranks(pg, static_cast<double>(m.grads)));
    c->peak.optimizer_state = static_cast<int64_t>(max_over_ranks(pg, static_cast<double>(m.optimizer_state)));
  }
  // Every case took the same steps from the same parameters: the same result.
  for (auto& c : cases)
    if (c->fsdp) c->fsdp->gather_parameters();
  const std::vector<double> first = flat_params(*cases[0]->model);
  double diff = 0;
  for (auto& c : cases) {
    auto v = flat_params(*c->model);
    for (size_t k = 0; k < v.size(); ++k) diff = std::max(diff, std::fabs(v[k] - first[k]));
  }
  diff = max_over_ranks(pg, diff);
  const bool ok = diff <= 1e-6;
  if (!ok) ++check_failures;
  if (pg->rank() == 0) {
    std::printf("\nZeRO step (stage 2 and FSDP; SGD, same MLP and batch as above; %d samples x %d steps; ms per step\n"
                "= median over samples of the slowest rank's mean; peak bytes per rank over one step)\n",
                cfg.samples, steps);
    std::printf("  %-46s %8s  %-16s %12s %12s %12s\n", "case", "ms/step", "(min, max)", "peak params",
                "in forward", "peak grads");
    for (const auto& c : cases) {
      const std::string range = fmt("(%.2f, ", *std::min_element(c->ms.begin(), c->ms.end())) +
                                fmt("%.2f)", *std::max_element(c->ms.begin(), c->ms.end()));
      std::printf("  %-46s %8.2f  %-16s %12s %12s %12s\n", c->name.c_str(), median(c->ms), range.c_str(),
                  mb(c->peak.params).c_str(), c->fsdp ? mb(c->forward_peak_params).c_str() : "",
                  mb(c->peak.grads).c_str());
    }
    const double z_before = median(cases[0]->ms), z_after = median(cases[1]->ms);
    const double f_before = median(cases[2]->ms), f_after = median(cases[3]->ms);
    std::printf("ZeRO-2 overlapped vs before: %.2f -> %.2f ms (%+.1f%%); FSDP one unit: %.2f -> %.2f ms (%+.1f%%); "
                "FSDP units: %.2f ms (reshard), %.2f ms (prefetch), %.2f ms (kept)\n",
                z_before, z_after, 100 * (z_after - z_before) / z_before, f_before, f_after,
                100 * (f_after - f_before) / f_before, median(cases[4]->ms), median(cases[5]->ms), median(cases[6]->ms));
    std::printf("peak bytes per rank: ZeRO-2 grads %s -> %s; FSDP params %s (one unit) -> %s (units, reshard; %s in "
                "forward, %s with backward_prefetch)\n",
                mb(cases[0]->peak.grads).c_str(), mb(cases[1]->peak.grads).c_str(), mb(cases[3]->peak.params).c_str(),
                mb(cases[4]->peak.params).c_str(), mb(cases[4]->forward_peak_params).c_str(),
                mb(cases[5]->peak.params).c_str());
    std::printf("troupe_zero2_before_ms_per_step %.3f\ntroupe_zero2_ms_per_step %.3f\n", z_before, z_after);
    std::printf("troupe_fsdp_before_ms_per_step %.3f\ntroupe_fsdp_ms_per_step %.3f\n", f_before, f_after);
    std::printf("checks: every ZeRO case ends with the same parameters (max diff %.1e): %s\n", diff, ok ? "ok" : "FAILED");
    std::fflush(stdout);
  }
  return ok;
}
#endif

bool profile = false;
bool no_zero = false;

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// --profile: where a step's time goes, local and DDP (default buckets) side by side: zero_grad, forward (model and
// loss), backward (for DDP: with the bucket copies, the all-reduces it overlaps and the wait for the last bucket),
// the optimizer step; each phase is the median over `steps` steps of the slowest rank's time (the ranks time a step
// after a barrier). Then one all_reduce of all the gradients (7.45 MB) alone, the wait DDP cannot hide at best.
void profile_step(const comm::ProcessGroupPtr& pg, Case& local, Case& ddp, const Tensor& x, const Tensor& yc,
                  const Tensor& yd, int steps) {
  const char* phases[] = {"zero_grad", "forward + loss", "backward", "optimizer step", "whole step"};
  // per rank: each rank's own median per phase (a rank late at the all-reduce shows where the skew is)
  auto per_rank = [&](const std::vector<std::vector<double>>& own) {
    Tensor t = zeros({pg->size(), 5}, TensorOptions().dtype(kFloat64));
    for (int k = 0; k < 5; ++k) t[pg->rank()][k].fill_(median(own[k]));
    pg->all_reduce(t, comm::ReduceOp::SUM);
    return t.to_vector<double>();
  };
  std::vector<std::vector<double>> own_lo, own_dd;
  auto run = [&](Case& c) {
    std::vector<std::vector<double>> ms(5), own(5);
    for (int i = 0; i < steps; ++i) {
      pg->barrier();
      auto t0 = Clock::now();
      c.opt->zero_grad();
      auto t1 = Clock::now();
      Tensor loss = loss_of((*c.model)(x), yc, yd);
      auto t2 = Clock::now();
      loss.backward();
      auto t3 = Clock::now();
      c.opt->step();
      auto t4 = Clock::now();
      do_not_optimize(loss.item<float>());
      const double d[5] = {ms_between(t0, t1), ms_between(t1, t2), ms_between(t2, t3), ms_between(t3, t4),
                           ms_between(t0, t4)};
      for (int k = 0; k < 5; ++k) {
        ms[k].push_back(max_over_ranks(pg, d[k]));
        own[k].push_back(d[k]);
      }
    }
    (&c == &local ? own_lo : own_dd) = own;
    std::vector<double> med;
    for (auto& v : ms) med.push_back(median(v));
    return med;
  };
  auto lo = run(local), dd = run(ddp);
  const std::vector<double> lo_ranks = per_rank(own_lo), dd_ranks = per_rank(own_dd);
  int64_t numel = 0;
  for (const auto& p : local.inner->parameters()) numel += p.numel();
  Tensor flat = zeros({numel});
  std::vector<double> ar, ar_avg;  // SUM, and AVG (the in-place DDP's op), alternately
  for (int i = 0; i < std::max(steps, 5); ++i) {
    pg->barrier();
    auto t0 = Clock::now();
    pg->all_reduce(flat, comm::ReduceOp::SUM);
    ar.push_back(max_over_ranks(pg, ms_since(t0)));
    pg->barrier();
    t0 = Clock::now();
    pg->all_reduce(flat, comm::ReduceOp::AVG);
    ar_avg.push_back(max_over_ranks(pg, ms_since(t0)));
  }
  // The same all-reduces on fresh gradients: a local backward, a barrier, then each parameter's .grad
  // all-reduced in place (what the in-place DDP issues, without its hooks and without the wait for the
  // slower rank), and the bytes those all-reduces touch being out of cache.
  std::vector<double> fresh;
  for (int i = 0; i < std::max(steps, 5); ++i) {
    local.opt->zero_grad();
    loss_of((*local.model)(x), yc, yd).backward();
    pg->barrier();
    auto t0 = Clock::now();
    for (auto& p : local.inner->parameters()) {
      Tensor g = p.grad();
      pg->all_reduce(g, comm::ReduceOp::SUM);
    }
    fresh.push_back(max_over_ranks(pg, ms_since(t0)));
  }
  if (pg->rank() != 0) return;
  std::printf("\nstep profile (--profile; %d steps each, median of the slowest rank's ms per phase)\n", steps);
  std::printf("  %-16s %10s %10s %10s\n", "phase", "local", "DDP", "DDP-local");
  for (int k = 0; k < 5; ++k)
  {
    std::printf("  %-16s %10.2f %10.2f %+10.2f   per rank local", phases[k], lo[k], dd[k], dd[k] - lo[k]);
    for (int r = 0; r < pg->size(); ++r) std::printf(" %.2f", lo_ranks[static_cast<size_t>(r * 5 + k)]);
    std::printf(", DDP");
    for (int r = 0; r < pg->size(); ++r) std::printf(" %.2f", dd_ranks[static_cast<size_t>(r * 5 + k)]);
    std::printf("\n");
  }
  std::printf("  all_reduce of all gradients alone (%.2f MB): %.2f ms SUM, %.2f ms AVG (median of %zu)\n",
              numel * 4 / 1e6, median(ar), median(ar_avg), ar.size());
  std::printf("  all_reduce of each fresh .grad after a local backward and a barrier: %.2f ms (median of %zu)\n",
              median(fresh), fresh.size());
  std::fflush(stdout);
}

int bench(launch::Context& ctx) {
  auto pg = ctx.world;
  const int me = ctx.rank, n = ctx.size;
  set_num_threads(1);
  if (openblas_set_num_threads) openblas_set_num_threads(1);

  // This rank's batch: 128 rows of its own.
  Tensor x, yc, yd;
  {
    std::lock_guard<std::mutex> lock(rng_mutex());
    manual_seed(100 + static_cast<uint64_t>(me));
    x = randn({kBatch, kIn});
    yc = randint(0, kOut, {kBatch}, TensorOptions().dtype(kInt64));
    yd = randn({kBatch, kOut});
  }

  if (me == 0) {
    std::printf("ddp_bench%s: %s, %d ranks (backend %s), 1 thread per rank, MLP %lld-%lld-%lld-%lld, batch %lld per "
                "rank, %s loss, SGD; load average %s\n",
                cfg.quick ? " --quick" : "", cpu_name().c_str(), n, ctx.backend.c_str(), (long long)kIn,
                (long long)kHidden, (long long)kHidden, (long long)kOut, (long long)kBatch,
                use_mse ? "mse" : "cross-entropy", loadavg().c_str());
  }

  std::vector<std::unique_ptr<Case>> cases;
  cases.push_back(make_case("local step (no communication)", pg, std::nullopt));
  cases.push_back(make_case("DDP one bucket (all_reduce after backward)", pg,
                            parallel::DDPOptions().first_bucket_mb(1e6).bucket_cap_mb(1e6)));
  cases.push_back(make_case("DDP buckets 1+25 MiB (overlapped, default)", pg, parallel::DDPOptions()));
  cases.push_back(make_case("DDP one bucket per tensor (overlapped)", pg,
                            parallel::DDPOptions().first_bucket_mb(1e-6).bucket_cap_mb(1e-6)));
  cases.push_back(make_case("DDP buckets 1+25 MiB, gradient_as_bucket_view", pg,
                            parallel::DDPOptions().gradient_as_bucket_view(true)));
  {
    // the schedule before issue 18: every gradient copied into its bucket and back
    const int64_t in_place = parallel::detail::ddp_in_place_bytes();
    parallel::detail::set_ddp_in_place_bytes(INT64_MAX);
    cases.push_back(make_case("DDP buckets 1+25 MiB, all through the buckets", pg, parallel::DDPOptions()));
    parallel::detail::set_ddp_in_place_bytes(in_place);
  }
  if (me == 0) {
    int64_t nparams = 0;
    for (const auto& p : cases[0]->inner->parameters()) nparams += p.numel();
    std::printf("parameters: %lld (%.2f MB float32)\n", (long long)nparams, nparams * 4 / 1e6);
    for (size_t i = 1; i < cases.size(); ++i) {
      auto* ddp = dynamic_cast<parallel::DistributedDataParallel*>(cases[i]->model.get());
      std::string s;
      for (int64_t b : ddp->bucket_bytes()) s += (s.empty() ? "" : ", ") + mb(b);
      std::printf("  %-48s buckets (reduction order): %s\n", cases[i]->name.c_str(), s.c_str());
    }
  }

  auto step = [&](Case& c) {
    c.opt->zero_grad();
    Tensor loss = loss_of((*c.model)(x), yc, yd);
    loss.backward();
    c.opt->step();
    do_not_optimize(loss.item<float>());
  };
  const int steps = time_cases(pg, cases, step);
  const int samples = cfg.samples;

  // Checks: the DDP models agree across ranks and with each other.
  std::vector<double> one_bucket = flat_params(*cases[1]->inner);
  double rank_diff = 0, bucket_diff = 0;
  for (size_t i = 1; i < cases.size(); ++i) {
    auto v = flat_params(*cases[i]->inner);
    rank_diff = std::max(rank_diff, diff_to_rank0(pg, v));
    for (size_t k = 0; k < v.size(); ++k) bucket_diff = std::max(bucket_diff, std::fabs(v[k] - one_bucket[k]));
  }
  bucket_diff = max_over_ranks(pg, bucket_diff);
  const bool ok = rank_diff == 0 && bucket_diff <= 1e-6;
  if (!ok) ++check_failures;
  // after the checks: the profile steps the local and the default DDP models further than the others
  if (profile) profile_step(pg, *cases[0], *cases[2], x, yc, yd, steps * samples);

  if (me == 0) {
    std::printf("\n%d samples x %d steps per case; ms per step = median over samples of the slowest rank's mean\n",
                samples, steps);
    const double local = median(cases[0]->ms), flat = median(cases[1]->ms);
    for (const auto& c : cases) {
      const double m = median(c->ms);
      std::printf("  %-48s %9.2f ms/step  (min %.2f, max %.2f)  comm overhead over local %+6.2f ms\n", c->name.c_str(),
                  m, *std::min_element(c->ms.begin(), c->ms.end()), *std::max_element(c->ms.begin(), c->ms.end()),
                  m - local);
    }
    const double bucketed = median(cases[2]->ms), small = median(cases[3]->ms);
    std::printf("overlap gain (default buckets vs one bucket): %.1f%% (%.2f ms of %.2f); one bucket per tensor: %.1f%%\n",
                100 * (flat - bucketed) / flat, flat - bucketed, flat, 100 * (flat - small) / flat);
    std::printf("troupe_ddp_ms_per_step %.3f\n", bucketed);  // read by scripts/ddp_bench.sh
    std::printf("troupe_ddp_one_bucket_ms_per_step %.3f\n", flat);
    std::printf("checks: DDP models equal on every rank (max diff %.1e), bucketed == one bucket (max diff %.1e): %s\n",
                rank_diff, bucket_diff, ok ? "ok" : "FAILED");
    std::fflush(stdout);
  }

#ifdef TROUPE_BENCH_HAVE_ZERO
  if (no_zero) {
    if (me == 0) std::printf("load average at end %s\n", loadavg().c_str());
    return ok ? 0 : 1;
  }
  // ZeRO memory per rank: world size 1 (a local group of one on each rank) and the world.
  auto single = comm::make_local_groups(1)[0];
  struct Mem {
    parallel::ShardMemory one, world;
  };
  std::vector<Mem> mems;
  for (int stage = 0; stage <= 3; ++stage) mems.push_back({zero_memory(stage, single, x, yc, yd), zero_memory(stage, pg, x, yc, yd)});
  if (me == 0) {
    std::printf("\nZeRO bytes per rank after one Adam step (params + grads + optimizer state), world size 1 and %d\n", n);
    std::printf("  %-22s | %-34s | %-34s | %s\n", "stage", "world size 1 (p / g / state)", "world size N (p / g / state)",
                "total N/1");
    const char* names[] = {"0 (DDP, unsharded)", "1 (optimizer state)", "2 (+ gradients)", "3 (+ parameters, FSDP)"};
    for (int s = 0; s <= 3; ++s) {
      auto col = [](const parallel::ShardMemory& m) {
        return mb(m.total()) + " (" + fmt("%.1f", m.params / 1e6) + " / " + fmt("%.1f", m.grads / 1e6) + " / " +
               fmt("%.1f", m.optimizer_state / 1e6) + ")";
      };
      std::printf("  %-22s | %-34s | %-34s | %.3f\n", names[s], col(mems[s].one).c_str(), col(mems[s].world).c_str(),
                  static_cast<double>(mems[s].world.total()) / static_cast<double>(mems[s].one.total()));
    }
    std::printf("  (ideal N/1 with N = %d: stage 1 (4+4+8/N)/16 = %.3f, stage 2 (4+(4+8)/N)/16 = %.3f, stage 3 1/N = %.3f)\n",
                n, (8 + 8.0 / n) / 16, (4 + 12.0 / n) / 16, 1.0 / n);
    std::fflush(stdout);
  }
  const bool zero_ok = zero_steps(pg, x, yc, yd);
#else
  const bool zero_ok = true;
  if (me == 0) std::printf("\nZeRO: comm/zero.h not there; memory table skipped\n");
#endif
  if (me == 0) std::printf("load average at end %s\n", loadavg().c_str());
  return ok && zero_ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  // --ranks N and --loss are ours or launch's; the harness's flags come with them.
  std::string loss = "ce";
  parse_args(argc, argv, "ddp_bench", [&](troupe::cli::App& app) {
    troupe::cli::add_launch_flags(app);
    app.add_option("--loss", loss, "ce or mse")->check(CLI::IsMember({"ce", "mse"}));
    app.add_flag("--profile", profile, "time zero_grad, forward, backward and the optimizer step apart");
    app.add_flag("--no-zero", no_zero, "the DDP cases only (no ZeRO / FSDP tables)");
  });
  use_mse = loss == "mse";
  if (!cfg.quick && cfg.samples == 15) cfg.samples = 9;
  return launch::run(argc, argv, [](launch::Context& ctx) { return bench(ctx); });
}
