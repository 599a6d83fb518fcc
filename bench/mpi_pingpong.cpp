// A bare MPI ping-pong between two ranks, nothing of troupe in the process: the transport's own round
// trip, for reading remote_bench's raw-MPI column (scripts/remote_bench.sh --hosts runs it between the
// two test hosts with Open MPI's default and with mpi_yield_when_idle=1).
//   mpirun -np 2 mpi_pingpong [BYTES ...]       (default 4096 65536 1048576)
// Rank 0 sends BYTES and waits for an 8-byte answer, rank 1 answers, with blocking MPI_Send / MPI_Recv
// as remote_bench's raw side does; per size, the median of 5 samples of at least 20 round trips (and
// 4 MB) is printed.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size != 2) {  // alone (scripts/bench.sh runs every bench so): nothing to time, not a failure
    if (rank == 0) std::printf("mpi_pingpong: times a round trip between 2 ranks (mpirun -np 2); %d here, nothing timed\n", size);
    MPI_Finalize();
    return size == 1 ? 0 : 2;
  }
  std::vector<long> sizes;
  for (int i = 1; i < argc; ++i) {
    char* end = nullptr;
    const long b = std::strtol(argv[i], &end, 10);
    if (!end || *end || b < 1 || b > (1L << 30)) {
      if (rank == 0) std::fprintf(stderr, "mpi_pingpong: '%s' is not a size in bytes (1 .. 2^30)\n", argv[i]);
      MPI_Finalize();
      return 2;
    }
    sizes.push_back(b);
  }
  if (sizes.empty()) sizes = {4096, 65536, 1048576};
  if (rank == 0) std::printf("pingpong  bytes       round trip ms (median of 5 samples)\n");
  for (long bytes : sizes) {
    std::vector<char> buf(static_cast<size_t>(bytes), 1);
    long long ack = 0;
    const int n = static_cast<int>(std::clamp((4L << 20) / bytes, 20L, 1000L));
    std::vector<double> ms;
    for (int s = 0; s < 6; ++s) {  // the first sample warms up (connections, buffers) and is dropped
      MPI_Barrier(MPI_COMM_WORLD);
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < n; ++i) {
        if (rank == 0) {
          MPI_Send(buf.data(), static_cast<int>(bytes), MPI_BYTE, 1, 1, MPI_COMM_WORLD);
          MPI_Recv(&ack, 1, MPI_LONG_LONG, 1, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
          MPI_Recv(buf.data(), static_cast<int>(bytes), MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
          MPI_Send(&ack, 1, MPI_LONG_LONG, 0, 2, MPI_COMM_WORLD);
        }
      }
      const double dt = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (s > 0) ms.push_back(dt / n);
    }
    std::sort(ms.begin(), ms.end());
    if (rank == 0) std::printf("pingpong  %-10ld  %9.3f\n", bytes, ms[ms.size() / 2]);
  }
  MPI_Finalize();
  return 0;
}
