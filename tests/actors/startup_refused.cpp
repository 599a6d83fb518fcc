// ctest actors_mpi_startup_refused: mpirun -np 1 (TROUPE_SECRET=one) : -np 2 (TROUPE_SECRET=two). Rank 0's
// gate refuses ranks 1 and 2, so their actor systems cannot connect to it. Every rank's launch::init must
// then throw, naming what failed (rank 0 names rank 1, whose connection it refused), and return: no rank
// may wait in a collective for the others. Each rank prints "startup refused on rank R: <error>".
#include <cstdio>
#include <cstdlib>
#include <string>

#include <troupe/launch/launch.h>

using namespace troupe;

int main(int argc, char** argv) {
  const char* r = std::getenv("OMPI_COMM_WORLD_RANK");
  const int rank = r ? std::atoi(r) : -1;
  try {
    launch::Context ctx = launch::init(argc, argv);
    std::printf("rank %d: startup WRONG: the actor systems connected with different secrets\n", rank);
    std::fflush(stdout);
    launch::finalize();
    return 1;
  } catch (const std::exception& e) {
    std::printf("startup refused on rank %d: %s\n", rank, e.what());
    std::fflush(stdout);
  }
  return 0;
}
