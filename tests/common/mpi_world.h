// The MPI world group of a test program started by mpirun (comm, parallel suites): one per process, a 60 s
// timeout so that a failing test cannot hang ctest, MPI finalised at exit. Header-only: only the suites
// that link troupe_comm include it.
#pragma once

#ifdef TROUPE_HAVE_MPI

#include <troupe/comm/comm.h>

#include <chrono>
#include <cstdlib>

namespace troupe::testing {

inline comm::ProcessGroupPtr mpi_test_world() {
  static comm::ProcessGroupPtr w = [] {
    comm::GroupOptions o;
    o.timeout = std::chrono::seconds(60);
    auto g = comm::make_mpi_world(o);
    std::atexit([] { comm::mpi_finalize(); });
    return g;
  }();
  return w;
}

}  // namespace troupe::testing

#endif  // TROUPE_HAVE_MPI
