// A staged group: tensors on one device, moved by a group of another (CUDA tensors over the mpi or
// local backend, as torch's gloo backend takes CUDA tensors). Each op copies its inputs to the inner
// group's device when it is issued, runs the inner group's transport on the copies, and copies the
// results back into the caller's tensors when its Work completes (wait(), or is_completed() returning
// true). Every rank of the inner group wraps it the same way and calls the same ops, as for any group.
//
//   auto cpu = comm::world();                                    // mpi or local: CPU tensors
//   auto pg = comm::make_staged_group(cpu, Device(kCUDA, 0));    // CUDA tensors, each op staged
//   Tensor g = full({4}, 1.0, TensorOptions().device(Device(kCUDA, 0)));
//   pg->all_reduce(g);                                           // size() everywhere, on the GPU
//
// What it is for: several ranks sharing one GPU (NCCL refuses two ranks of a communicator on one
// device), or a build without NCCL. With one GPU per rank and NCCL, make_nccl_group is the fast path:
// a staged op pays a device-to-host and a host-to-device copy of its tensors.
// Ranks, size, options and sequence numbers are the inner group's, the backend "staged mpi" or "staged
// local"; the collective counters (comm/stats.h) count each op once, under this group. Sub-groups
// (new_group, split) are the inner group's sub-groups, staged to the same device.
#pragma once

#include <troupe/comm/process_group.h>

namespace troupe::comm {

/// A group over `inner`'s ranks whose tensors are on `device`, staged through `inner`'s device (see
/// above). `device` may equal inner's device (each op then copies needlessly; the tests use it where no
/// GPU is present). Throws std::invalid_argument when `inner` is null.
ProcessGroupPtr make_staged_group(ProcessGroupPtr inner, Device device);

/// The group a staged group moves its tensors through (null when `group` is not a staged group).
ProcessGroupPtr staged_inner(const ProcessGroupPtr& group);

}  // namespace troupe::comm
