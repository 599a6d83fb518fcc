// The `nccl` backend: process groups over NCCL for contiguous CUDA tensors (compiled when troupe was
// built with CUDA and NCCL was found: TROUPE_HAVE_NCCL).
//
//   auto boot = comm::make_mpi_world();                   // or a `local` group (run_local)
//   auto pg = comm::make_nccl_group(boot, local_rank);    // one CUDA device per rank
//   Tensor g = full({4}, pg->rank() + 1.0, TensorOptions().device(Device(kCUDA, local_rank)));
//   pg->all_reduce(g);                                    // size*(size+1)/2 everywhere
//
// Each group owns an NCCL communicator (nonblocking mode, so that no NCCL call blocks past the group's
// timeout) and a CUDA stream of its own. An op first makes that stream wait for the work already issued
// on the tensors' device (troupe's kernels run on the legacy default stream: an event recorded there),
// then enqueues the NCCL call(s) and records a completion event; the op's Work polls that event.
// The tensors an op uses are kept alive until it completed. A collective that does not complete within
// the group's timeout (from when it was issued) aborts the communicator (ncclCommAbort): the waiting rank
// gets CommError naming the group, op and sequence number, and the group is unusable afterwards.
// Reductions: SUM, PRODUCT, MIN, MAX for every dtype (bool: SUM and MAX are OR, PRODUCT and MIN AND),
// AVG (ncclAvg) for floating dtypes only. send/recv match in issue order per peer pair (NCCL has no
// tags: `tag` is checked to be >= 0 and otherwise ignored, as in torch's ProcessGroupNCCL); a send
// completes once its peer receives (no buffering), so a ring must alternate the order of send and recv,
// and a rank cannot send to itself. Destroying a group waits (up to its timeout) for its ops in flight
// and for its peers (ncclCommFinalize), then ncclCommDestroy; past that it aborts the communicator.
#pragma once

#include <troupe/comm/process_group.h>

namespace troupe::comm {

/// An NCCL group over the ranks of `bootstrap` (a `local` or `mpi` group: every rank calls this, with
/// its own `device`): rank 0 creates the ncclUniqueId and broadcasts it over `bootstrap` as a CPU
/// uint8 tensor, then each rank joins with ncclCommInitRank on CUDA device `device` (-1: the current
/// device). Ranks and size are bootstrap's. Throws CommError when there is no such device, or when the
/// communicator is not up within options.timeout.
ProcessGroupPtr make_nccl_group(ProcessGroupPtr bootstrap, int device, GroupOptions options = {});

/// Number of visible CUDA devices (0 when there is no device or driver); never throws.
int nccl_device_count();

/// The NCCL library's version code (e.g. 22809 for 2.28.9), from ncclGetVersion.
int nccl_version();

}  // namespace troupe::comm
