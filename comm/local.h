// The `local` backend: the n ranks of a group are n threads of this process, sharing memory. Every
// collective is a rendezvous of the n ranks (one per group and sequence number); the results equal the
// mpi and nccl backends' for the same inputs. Tests and single-process runs use it:
//
//   comm::run_local(4, [](comm::ProcessGroupPtr pg) {
//     Tensor t = full({3}, pg->rank() + 1.0);
//     pg->all_reduce(t);                     // 1 + 2 + 3 + 4 = 10 on every rank
//   });
//
// Tensors must be contiguous CPU tensors, each rank's its own memory. Each rank's group object runs its
// collectives and point-to-point ops in issue order on a worker thread of its own, or on the thread that
// waits for one of them (without a timeout) while the worker is idle; send is eager (the data is copied
// into the receiver's mailbox), so a ring of blocking send-then-recv does not deadlock; send and recv
// take no sequence number.
// Reductions: SUM, PRODUCT, MIN, MAX for every dtype (bool: SUM is OR, PRODUCT AND, as NCCL does),
// AVG for floating dtypes only; 16-bit floats are reduced in float and rounded once.
#pragma once

#include <functional>
#include <vector>

#include <troupe/comm/process_group.h>

namespace troupe::comm {

/// The n group objects of one n-rank `local` group (groups[r] has rank r). Each rank issues its
/// collectives on its own object: from its own thread, or as async ops from anywhere.
std::vector<ProcessGroupPtr> make_local_groups(int n, GroupOptions options = {});

/// Runs fn(groups[r]) for every rank r of a new n-rank `local` group, each on a thread whose world()
/// is its group, and joins them. Once a rank throws, the other ranks' pending and later collectives
/// fail with CommError instead of waiting; run_local then rethrows the first exception, naming its rank.
/// Each rank thread computes with max(1, get_num_threads() / n) threads of its own (a NumThreadsGuard;
/// set_num_threads in fn changes its rank's only), and with n > 1 BLAS runs on the calling rank's thread
/// (a SerialBlasGuard); both end when run_local returns or throws.
void run_local(int n, std::function<void(ProcessGroupPtr)> fn, GroupOptions options = {});

}  // namespace troupe::comm
