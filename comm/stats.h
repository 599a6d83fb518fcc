// Light counters of the collectives every process group runs (for the live page, launch/dashboard.h):
// ProcessGroup's front counts each op it issues with its bytes, and times it from issue until its
// completion is seen (a wait() that returns, or is_completed() true). Cost per op: one small allocation
// (the timing wrapper of its Work), two clock reads and a few relaxed atomics.
//
//   for (const auto& s : comm::collective_stats())   // every live group of this process
//     std::printf("%s rank %d %s: %lld ops, %.3f ms mean\n", s.group.c_str(), s.rank, s.op.c_str(),
//                 (long long)s.count, 1e3 * s.total_seconds / std::max<int64_t>(s.completed, 1));
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace troupe::comm {

/// One op's counters on one group, as seen by this process's rank of it.
struct CollectiveStats {
  /// The group's name ("world", "world/group[0,2]"), backend, this rank in it and its size.
  std::string group;
  std::string backend;
  int rank = 0;
  int size = 0;
  /// "all_reduce", "broadcast", "all_gather_into_tensor", "all_gather", "reduce_scatter_tensor",
  /// "reduce_scatter", "all_to_all", "send", "recv" or "barrier".
  std::string op;
  /// Ops issued; ops whose completion was seen (and timed).
  int64_t count = 0;
  int64_t completed = 0;
  /// Bytes of the tensors given to the issued ops (the input side).
  int64_t bytes = 0;
  /// Seconds from issue to seen completion: summed over the completed ops, the last one, the longest.
  double total_seconds = 0;
  double last_seconds = 0;
  double max_seconds = 0;
};

/// Every op with at least one issue, of every group of this process still alive, ordered by group
/// name, rank, then op. With --ranks N (one process) every rank's groups are here.
std::vector<CollectiveStats> collective_stats();

}  // namespace troupe::comm
