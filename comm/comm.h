// troupe::comm umbrella: process groups and collectives, the `local` backend, and the `mpi` backend
// when troupe was built with MPI (TROUPE_HAVE_MPI).
#pragma once

#include <troupe/comm/ddp.h>
#include <troupe/comm/local.h>
#include <troupe/comm/process_group.h>
#ifdef TROUPE_HAVE_MPI
#include <troupe/comm/mpi.h>
#endif
