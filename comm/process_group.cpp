// The process-wide world group and its per-thread override (local ranks are threads), reduce_op_name.
#include "process_group.h"

#include <mutex>

namespace troupe::comm {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::SUM: return "SUM";
    case ReduceOp::AVG: return "AVG";
    case ReduceOp::PRODUCT: return "PRODUCT";
    case ReduceOp::MIN: return "MIN";
    case ReduceOp::MAX: return "MAX";
  }
  return "UNKNOWN";
}

namespace {
std::mutex g_world_mu;
ProcessGroupPtr g_world;              // set by launch::init / set_world
thread_local ProcessGroupPtr t_world;  // set by run_local on each rank's thread; wins over g_world
}  // namespace

ProcessGroupPtr world() {
  if (t_world) return t_world;
  std::lock_guard<std::mutex> g(g_world_mu);
  return g_world;
}

void set_world(ProcessGroupPtr group) {
  std::lock_guard<std::mutex> g(g_world_mu);
  g_world = std::move(group);
}

void set_thread_world(ProcessGroupPtr group) { t_world = std::move(group); }

}  // namespace troupe::comm
