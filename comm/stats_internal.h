// Private to comm: the per-group counters behind comm/stats.h and the front's hook that fills them.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include <troupe/comm/process_group.h>

namespace troupe::comm::detail {

/// The ops counted, in ProcessGroup::counted's numbering.
inline constexpr int kCountedOps = 10;
/// "all_reduce", ... by number.
const char* counted_op_name(int op);

/// One group's counters (shared with the registry of comm/stats.cpp, which holds them weakly).
struct GroupCounters : std::enable_shared_from_this<GroupCounters> {
  struct Op {
    std::atomic<int64_t> count{0}, completed{0}, bytes{0}, total_ns{0}, last_ns{0}, max_ns{0};
  };
  Op ops[kCountedOps];
  std::once_flag labelled;
  std::string group, backend;  // written once (labelled), before the first count
  int rank = 0, size = 0;
  std::atomic<bool> used{false};
};

/// Counts `op` on `g` (labelling the counters with pg's name, backend, rank and size the first time) and
/// returns `work` wrapped so that its completion, once seen, records its time.
WorkPtr count_op(GroupCounters& g, const ProcessGroup& pg, int op, int64_t bytes, WorkPtr work);

}  // namespace troupe::comm::detail
