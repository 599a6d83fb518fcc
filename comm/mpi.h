// The `mpi` backend: process groups over Open MPI for contiguous CPU tensors of every dtype.
//
//   auto world = comm::make_mpi_world();       // MPI_Init_thread(MPI_THREAD_MULTIPLE) if needed
//   Tensor t = full({4}, world->rank() + 1.0);
//   world->all_reduce(t);                       // size*(size+1)/2 everywhere
//   comm::mpi_finalize();
//
// Each group owns a duplicate communicator and runs its ops in issue order with nonblocking MPI
// (MPI_Iallreduce, MPI_Ibcast, ...; all-reduces up to 64 KB (2 MB across hosts) run troupe's recursive doubling over
// MPI_Isend / MPI_Irecv instead, cheaper than libnbc's schedules there), polled with MPI_Test until
// done or the group's timeout; the ops
// run on the group's worker thread, or on the thread that waits for them when the worker is idle (a
// synchronous collective then costs no thread hand-off). A timed-out collective breaks its group:
// later ops on it fail at once. Its error names the ranks that had not arrived: the timed-out rank asks
// every other rank's worker thread which op it began last (a rank that does not answer is named as
// dead or stalled). send is buffered (it completes once the data is copied), as the local
// backend's is. 16-bit floats are reduced in float32 and rounded once; bool reduces as OR (SUM, MAX)
// and AND (PRODUCT, MIN); AVG needs a floating dtype.
#pragma once

#include <cstdint>

#include <troupe/comm/process_group.h>

namespace troupe::comm {

/// The world group over MPI_COMM_WORLD (a duplicate of it). Initialises MPI with MPI_THREAD_MULTIPLE
/// when it is not initialised yet; throws CommError when MPI provides less.
ProcessGroupPtr make_mpi_world(GroupOptions options = {});

/// Stops every live mpi group (their pending ops fail with CommError), then MPI_Finalize if troupe
/// initialised MPI. Idempotent; groups used afterwards fail with CommError.
void mpi_finalize();

/// True when this process was started by mpirun (OMPI_COMM_WORLD_SIZE or PMI_SIZE is set).
bool started_by_mpirun();

/// Debug check (default off, or env TROUPE_COMM_DEBUG=1): before each collective, a tiny MPI
/// all-reduce compares every rank's (numel, dtype) and fails on all ranks when they differ.
void set_mpi_debug_checks(bool on);

namespace detail {
/// Largest element count passed to one MPI call (default INT_MAX); larger messages are split in
/// chunks. Tests lower it to exercise the chunked paths.
void set_mpi_max_count(int64_t count);
/// All-reduces of at most `bytes` use troupe's recursive doubling in every mpi group; 0 turns it off
/// (every all-reduce is an MPI_Iallreduce); -1 goes back to the default by where a group's ranks live:
/// 64 KB on one host, 2 MB when they span hosts. Tests and comm_bench set it to run both paths.
void set_mpi_small_allreduce_bytes(int64_t bytes);
/// The threshold set by set_mpi_small_allreduce_bytes, or -1 (the defaults by host apply).
int64_t mpi_small_allreduce_bytes();
/// The threshold `pg` uses now (-1 when it is not an mpi group).
int64_t mpi_small_allreduce_bytes(const ProcessGroup& pg);
/// True when `pg` is an mpi group whose ranks are on more than one host.
bool mpi_group_spans_hosts(const ProcessGroup& pg);
}  // namespace detail

}  // namespace troupe::comm
