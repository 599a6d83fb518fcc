// troupe::comm umbrella: process groups and collectives, the `local` backend, and the `mpi` backend
// when troupe was built with MPI (TROUPE_HAVE_MPI), the `nccl` backend when built with CUDA and NCCL
// (TROUPE_HAVE_NCCL); staged groups (CUDA tensors moved by a CPU group).
#pragma once

#include <troupe/comm/local.h>
#include <troupe/comm/process_group.h>
#include <troupe/comm/staged.h>
#include <troupe/comm/stats.h>
#ifdef TROUPE_HAVE_MPI
#include <troupe/comm/mpi.h>
#endif
#ifdef TROUPE_HAVE_NCCL
#include <troupe/comm/nccl.h>
#endif
