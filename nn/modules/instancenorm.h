// InstanceNorm1d and InstanceNorm2d (torch.nn.InstanceNorm1d / InstanceNorm2d): each channel of each sample
// normalised by its own statistics, with optional affine parameters and running statistics.
#pragma once

#include <cstdint>
#include <string>

#include <troupe/nn/cloneable.h>
#include <troupe/nn/module.h>
#include <troupe/nn/options/instancenorm.h>
#include <troupe/nn/pimpl.h>
#include <troupe/util/options.h>

namespace troupe::nn {

/// What InstanceNorm1d and InstanceNorm2d share (PyTorch's _InstanceNorm); they differ in the input dims.
class InstanceNormBase : public Module {
 public:
  explicit InstanceNormBase(const InstanceNormOptions& options);

  /// Registers weight, bias (None without affine), running_mean, running_var, num_batches_tracked (None
  /// without track_running_stats) and initialises them.
  void reset();
  /// running_mean = 0, running_var = 1, num_batches_tracked = 0 (when tracked).
  void reset_running_stats();
  /// reset_running_stats(); weight = ones, bias = zeros.
  void reset_parameters();
  /// Instance statistics in training or without running statistics, else the running ones; an unbatched
  /// input is taken as a batch of one.
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;

  InstanceNormOptions options;
  /// Undefined without affine.
  Tensor weight;
  Tensor bias;
  /// Undefined without track_running_stats.
  Tensor running_mean;
  Tensor running_var;
  /// int64 scalar kept for PyTorch's state_dict (instance norm does not count batches).
  Tensor num_batches_tracked;

 protected:
  /// The dims of an unbatched input (2 for InstanceNorm1d, 3 for InstanceNorm2d).
  virtual int64_t no_batch_dim() const = 0;
};

/// Instance normalisation over (N, C, L) or (C, L) input.
class InstanceNorm1dImpl : public Cloneable<InstanceNorm1dImpl, InstanceNormBase> {
 public:
  explicit InstanceNorm1dImpl(const InstanceNorm1dOptions& options) : Cloneable(options) {}
  InstanceNorm1dImpl(int64_t num_features) : Cloneable(InstanceNorm1dOptions(num_features)) {}
  void reset() override { InstanceNormBase::reset(); }
  std::string name() const override { return "InstanceNorm1d"; }

 protected:
  int64_t no_batch_dim() const override { return 2; }
};
TROUPE_MODULE(InstanceNorm1d);

/// Instance normalisation over (N, C, H, W) or (C, H, W) input.
class InstanceNorm2dImpl : public Cloneable<InstanceNorm2dImpl, InstanceNormBase> {
 public:
  explicit InstanceNorm2dImpl(const InstanceNorm2dOptions& options) : Cloneable(options) {}
  InstanceNorm2dImpl(int64_t num_features) : Cloneable(InstanceNorm2dOptions(num_features)) {}
  void reset() override { InstanceNormBase::reset(); }
  std::string name() const override { return "InstanceNorm2d"; }

 protected:
  int64_t no_batch_dim() const override { return 3; }
};
TROUPE_MODULE(InstanceNorm2d);

}  // namespace troupe::nn
