// Private, CAF-free: the group of every rank that start_connected makes for place()'s group hosts
// (system.cpp sets it, placement.cpp makes sub-groups of it).
#pragma once

#include <troupe/comm/process_group.h>

namespace troupe::actors::detail {

/// Under mpirun, a group of every rank ("actors-groups") whose only collectives are the new_group calls
/// that make a placed group's comm group; null with --ranks N and before start-up.
comm::ProcessGroupPtr& groups_world();

}  // namespace troupe::actors::detail
