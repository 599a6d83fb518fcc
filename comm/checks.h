// The argument checks of ProcessGroup's front (process_group.cpp; internal). `where` is a callable
// returning the error prefix ("[all_gather] group 'world' (mpi, rank 1 of 2)"); it is only called when a
// check fails, so the checks cost a few comparisons per collective. Each failure throws CommError naming
// what was wrong and the values.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <troupe/comm/process_group.h>
#include <troupe/tensor/dtype.h>
#include <troupe/tensor/tensor.h>

namespace troupe::comm::detail {

/// "group 'world' (mpi, rank 1 of 2)"; on a cuda device "group 'world' (nccl, rank 1 of 2, cuda:0)".
std::string group_desc(const std::string& name, const std::string& backend, int rank, int size, Device device);

/// "(2, 3)", "(4,)", "()" as Python prints a shape.
std::string shape_str(const Tensor& t);

[[noreturn]] void fail_undefined(const std::string& where, const char* what);
[[noreturn]] void fail_device(const std::string& where, const char* what, const Tensor& t, const std::string& backend,
                              Device device);
[[noreturn]] void fail_self_peer(const std::string& where, const char* what, int peer, const std::string& backend);
[[noreturn]] void fail_tag(const std::string& where, int tag, int max_tag);
[[noreturn]] void fail_not_contiguous(const std::string& where, const char* what, const Tensor& t);
[[noreturn]] void fail_dtype(const std::string& where, const std::string& what, const Tensor& t, const Tensor& ref);
[[noreturn]] void fail_list_count(const std::string& where, const char* what, size_t count, int size);
[[noreturn]] void fail_list_numel(const std::string& where, const std::string& name, const Tensor& t,
                                  const Tensor& like);
[[noreturn]] void fail_avg(const std::string& where, ScalarType dtype);
[[noreturn]] void fail_rank(const std::string& where, const char* what, int r, int size);
[[noreturn]] void fail_gather_sizes(const std::string& where, const Tensor& output, const Tensor& input, int size);
[[noreturn]] void fail_scatter_sizes(const std::string& where, const Tensor& output, const Tensor& input, int size);
[[noreturn]] void fail_all_to_all_sizes(const std::string& where, const Tensor& output, const Tensor& input,
                                        int size);

/// new_group(ranks) as a split of the parent: this rank's color (0 in the group, -1 not), key (its index
/// in `ranks`) and a hash of the list that every rank compares (all must pass the same list).
struct NewGroupSplit {
  int color = -1, key = 0;
  int64_t check = 0;
};
/// Validates `ranks` (non-empty, each in [0, size), none twice; errors prefixed by `where`) and gives
/// the split of rank `rank`.
NewGroupSplit new_group_split(const std::string& where, const std::vector<int>& ranks, int rank, int size);

/// What a rank learns from every rank's (color, key, check) of a new_group or split.
struct SubgroupPlan {
  std::vector<int> members;  // this rank's new group: ranks here, in new-rank order by (key, rank); empty: none
  int new_rank = -1;         // this rank's rank in it
  GroupOptions options;      // its options (subgroup_options)
};
/// The plan of rank `rank` (its color and check) from `all` (3 values per rank of the parent group);
/// throws CommError prefixed by `where` when a rank's check differs from this rank's.
SubgroupPlan plan_subgroup(const std::string& where, const std::vector<int64_t>& all, int rank, int color,
                           int64_t check, const GroupOptions& parent, const std::optional<GroupOptions>& given);
/// A sub-group's options: `given`, else the parent's; unless `given` names it, it is named
/// "<parent's name>/group[<members>]".
GroupOptions subgroup_options(const GroupOptions& parent, const std::optional<GroupOptions>& given,
                              const std::vector<int>& members);

/// An undefined tensor.
template <class W>
void check_defined(const W& where, const char* what, const Tensor& t) {
  if (!t.defined()) fail_undefined(where(), what);
}
/// A non-contiguous tensor.
template <class W>
void check_contiguous(const W& where, const char* what, const Tensor& t) {
  if (!t.is_contiguous()) fail_not_contiguous(where(), what, t);
}
/// t has ref's dtype.
template <class W>
void check_same_dtype(const W& where, const char* what, const Tensor& t, const Tensor& ref) {
  if (t.dtype() != ref.dtype()) fail_dtype(where(), what, t, ref);
}
/// list holds `size` tensors, each passing check_tensor(name, t) (device, layout: the backend's) and
/// of like's dtype and element count.
template <class W, class CheckTensor>
void check_list_like(const W& where, const char* what, const std::vector<Tensor>& list, const Tensor& like,
                     int size, const CheckTensor& check_tensor) {
  if (static_cast<int>(list.size()) != size) fail_list_count(where(), what, list.size(), size);
  for (size_t r = 0; r < list.size(); ++r) {
    auto name = [&] { return std::string(what) + "[" + std::to_string(r) + "]"; };
    check_tensor(name().c_str(), list[r]);
    if (list[r].dtype() != like.dtype()) fail_dtype(where(), name(), list[r], like);
    if (list[r].numel() != like.numel()) fail_list_numel(where(), name(), list[r], like);
  }
}
/// AVG needs a floating dtype.
template <class W>
void check_reduce(const W& where, ReduceOp op, ScalarType dtype) {
  if (op == ReduceOp::AVG && !is_floating_point(dtype)) fail_avg(where(), dtype);
}
/// 0 <= r < size.
template <class W>
void check_rank(const W& where, const char* what, int r, int size) {
  if (r < 0 || r >= size) fail_rank(where(), what, r, size);
}
/// 0 <= tag <= max_tag.
template <class W>
void check_tag(const W& where, int tag, int max_tag) {
  if (tag < 0 || tag > max_tag) fail_tag(where(), tag, max_tag);
}
/// all_gather_into_tensor: output.numel() == size * input.numel().
template <class W>
void check_gather_sizes(const W& where, const Tensor& output, const Tensor& input, int size) {
  if (output.numel() != input.numel() * size) fail_gather_sizes(where(), output, input, size);
}
/// reduce_scatter_tensor: input.numel() == size * output.numel().
template <class W>
void check_scatter_sizes(const W& where, const Tensor& output, const Tensor& input, int size) {
  if (input.numel() != output.numel() * size) fail_scatter_sizes(where(), output, input, size);
}
/// all_to_all: input.numel() divisible by size and equal to output.numel().
template <class W>
void check_all_to_all_sizes(const W& where, const Tensor& output, const Tensor& input, int size) {
  if (input.numel() % size != 0 || output.numel() != input.numel()) fail_all_to_all_sizes(where(), output, input, size);
}

}  // namespace troupe::comm::detail
