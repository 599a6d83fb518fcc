// Construction checks DDP and ZeRO share (internal): the wrapper's arguments, and that every rank wraps
// the same parameters with the same bucket layout (one all_gather pair; the error names the first
// difference, the same text on every rank).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <troupe/comm/process_group.h>
#include <troupe/nn/module.h>
#include <troupe/tensor/tensor.h>

namespace troupe::parallel::detail {

/// "[1, 2, 3]".
std::string shape_str(IntArrayRef sizes);

/// Throws std::invalid_argument "<who> module is null" or "<who> no process group: ..." when one is.
void check_module_and_group(const std::string& who, const nn::ModulePtr& module, const comm::ProcessGroupPtr& group);

/// {first_bucket_mb, bucket_cap_mb} in bytes; throws "<who> bucket_cap_mb and first_bucket_mb must be
/// positive, got <cap> and <first>" unless both are.
std::pair<int64_t, int64_t> bucket_limits_bytes(const std::string& who, double first_bucket_mb, double bucket_cap_mb);

/// One gradient bucket (flat buffer) as every rank must have it.
struct BucketSignature {
  /// Its members: indices into WrapSignature::params.
  std::vector<size_t> params;
  /// Elements of the members together.
  int64_t numel = 0;
  /// The members' dtype.
  ScalarType dtype = kFloat32;
  /// The FSDP unit it belongs to; -1 where the wrapper has no units (DDP).
  int64_t unit = -1;
};

/// What verify_across_ranks compares: each parameter's requires_grad, dtype and shape, and the buckets.
struct WrapSignature {
  /// Names of the parameters (they label the message; they are not compared).
  std::vector<std::string> names;
  /// The wrapped parameters, in the wrapper's order.
  std::vector<Tensor> params;
  /// The buckets, in the wrapper's order.
  std::vector<BucketSignature> buckets;
  /// How the message names a bucket: "bucket" (DDP), "flat buffer" (ZeRO).
  std::string bucket_noun = "bucket";
  /// What else the ranks must share, for the message: "bucket options", "units and bucket options".
  std::string options = "bucket options";
};

/// all_gathers every rank's signature (collective; nothing with one rank) and throws std::runtime_error
/// on every rank at the first item where a rank differs from rank 0: "<who> the model on rank <r> differs
/// from rank 0's (every rank must wrap the same parameters, in the same order, with the same <options>):
/// parameter 0 (0.weight): rank 0 has shape [16, 6] dtype float32 requires_grad, rank 1 has ...".
void verify_across_ranks(const comm::ProcessGroupPtr& group, const std::string& who, const WrapSignature& mine);

}  // namespace troupe::parallel::detail
