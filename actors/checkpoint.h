// A consistent cut of a whole actor-hosted model in one file: every host's subtree under the full keys
// of model->state_dict(), the DistributedOptimizer's state under parameter names, and an Averager's
// state, taken between steps (no step in flight; the averager's updates are flushed first). The file is
// nn::save's format, written atomically, and loads into the same model placed in any other way
// (another placement map, or all local): keys name parameters, not hosts. CAF-free.
//
//   actors::save_checkpoint("run.troupe", model, &opt, &ema);        // placed {enc: 1, dec: 2}
//   ...
//   actors::load_checkpoint("run.troupe", model2, &opt2, &ema2);     // placed {enc: 2}, or local
//
// Entries:
//   model.<key>                       every entry of model->state_dict()
//   optimizer.state.<param>.<key>     each parameter's optimizer state ("momentum_buffer", "exp_avg")
//   optimizer.param_groups.0.<option> the options ("lr", "momentum", "betas.0"), one group
//   optimizer.steps                   DistributedOptimizer::steps(), int64
//   averager.<key>                    the AveragedModel's state_dict ("n_averaged", "module.<name>")
//   averager.applied                  the versions it applied, int64
#pragma once

#include <cstdint>
#include <string>

#include <troupe/actors/averager.h>
#include <troupe/actors/remote_module.h>
#include <troupe/nn/module.h>

namespace troupe::actors {

/// The cut save_checkpoint writes, as a state dict (entries above).
nn::StateDict checkpoint_state_dict(const nn::ModulePtr& model, DistributedOptimizer* optimizer = nullptr,
                                    Averager* averager = nullptr);
/// Writes the cut of `model` (and the optimizer's and averager's state, when given) to `path`, atomically.
void save_checkpoint(const std::string& path, const nn::ModulePtr& model, DistributedOptimizer* optimizer = nullptr,
                     Averager* averager = nullptr);
/// Loads a cut into `model` (any placement), the optimizer (which then takes a checkpoint() of it, so a
/// restart or restore() resumes from here) and the averager; returns the optimizer's step count saved.
/// The model's entries load strictly (PyTorch's error texts); a part asked for but absent from the file
/// is an error naming it.
int64_t load_checkpoint(const std::string& path, const nn::ModulePtr& model, DistributedOptimizer* optimizer = nullptr,
                        Averager* averager = nullptr);
/// load_checkpoint from a state dict.
int64_t load_checkpoint_state_dict(const nn::StateDict& state, const nn::ModulePtr& model,
                                   DistributedOptimizer* optimizer = nullptr, Averager* averager = nullptr);

}  // namespace troupe::actors
