// BatchNorm1d and BatchNorm2d (torch.nn.BatchNorm1d / BatchNorm2d): batch normalisation with running
// statistics.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <troupe/nn/cloneable.h>
#include <troupe/nn/module.h>
#include <troupe/nn/pimpl.h>
#include <troupe/nn/options/batchnorm.h>
#include <troupe/util/options.h>

namespace troupe::nn {

/// What BatchNorm1d and BatchNorm2d share (PyTorch's _BatchNorm); they differ in the input dims accepted.
class BatchNormBase : public Module {
 public:
  explicit BatchNormBase(const BatchNormOptions& options);

  /// Registers weight, bias, running_mean, running_var, num_batches_tracked and initialises them.
  void reset();
  /// running_mean = 0, running_var = 1, num_batches_tracked = 0 (when tracked).
  void reset_running_stats();
  /// reset_running_stats(); weight = ones, bias = zeros.
  void reset_parameters();
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;

  BatchNormOptions options;
  /// Undefined without affine.
  Tensor weight;
  Tensor bias;
  /// Undefined without track_running_stats.
  Tensor running_mean;
  Tensor running_var;
  /// int64 scalar: training batches seen.
  Tensor num_batches_tracked;

 protected:
  /// Throws PyTorch's ValueError text for an input of the wrong dims.
  virtual void check_input_dim(const Tensor& input) const = 0;
};

/// Batch normalisation over (N, C) or (N, C, L) input.
class BatchNorm1dImpl : public Cloneable<BatchNorm1dImpl, BatchNormBase> {
 public:
  explicit BatchNorm1dImpl(const BatchNormOptions& options) : Cloneable(options) {}
  BatchNorm1dImpl(int64_t num_features, double eps = 1e-5, std::optional<double> momentum = 0.1, bool affine = true,
              bool track_running_stats = true)
      : Cloneable(BatchNormOptions(num_features)
                          .eps(eps)
                          .momentum(momentum)
                          .affine(affine)
                          .track_running_stats(track_running_stats)) {}
  void reset() override { BatchNormBase::reset(); }
  std::string name() const override { return "BatchNorm1d"; }

 protected:
  void check_input_dim(const Tensor& input) const override;
};
TROUPE_MODULE(BatchNorm1d);

/// Batch normalisation over (N, C, H, W) input.
class BatchNorm2dImpl : public Cloneable<BatchNorm2dImpl, BatchNormBase> {
 public:
  explicit BatchNorm2dImpl(const BatchNormOptions& options) : Cloneable(options) {}
  BatchNorm2dImpl(int64_t num_features, double eps = 1e-5, std::optional<double> momentum = 0.1, bool affine = true,
              bool track_running_stats = true)
      : Cloneable(BatchNormOptions(num_features)
                          .eps(eps)
                          .momentum(momentum)
                          .affine(affine)
                          .track_running_stats(track_running_stats)) {}
  void reset() override { BatchNormBase::reset(); }
  std::string name() const override { return "BatchNorm2d"; }

 protected:
  void check_input_dim(const Tensor& input) const override;
};
TROUPE_MODULE(BatchNorm2d);

}  // namespace troupe::nn
