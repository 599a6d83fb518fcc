#pragma once
// The launch context of an actor test binary run under mpirun (actors_mpi_tests, actors_mpi_supervision):
// launch::init on first use (start-up is collective, so every rank runs every test in the same order),
// launch::finalize once the tests ran, while everything is still alive (launch would otherwise do it
// when the main thread ends). MPI_ONLY() skips a test without mpirun and binds `ctx` and `rt`.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include <troupe/launch/launch.h>

namespace troupe::actors::testing {

inline bool g_mpi_inited = false;

/// The context, made on the first call: `register_all` registers the binary's actors and factories first.
inline launch::Context& mpi_context(const char* program, void (*register_all)()) {
  static launch::Context ctx = [&] {
    g_mpi_inited = true;
    register_all();
    int argc = 1;
    std::string a0 = program;
    char* args[] = {a0.data(), nullptr};
    char** argv = args;
    return launch::init(argc, argv);
  }();
  return ctx;
}

class FinalizeBeforeExit : public ::testing::Environment {
 public:
  void TearDown() override {
    if (g_mpi_inited) launch::finalize();
  }
};
inline auto* const g_finalize_env = ::testing::AddGlobalTestEnvironment(new FinalizeBeforeExit);

}  // namespace troupe::actors::testing

/// In a test body: skip without mpirun, else `ctx` (the launch context) and `rt` (its actor runtime).
#define MPI_ONLY()                                                          \
  if (!std::getenv("OMPI_COMM_WORLD_SIZE")) GTEST_SKIP() << "needs mpirun"; \
  launch::Context& ctx = mpi_context();                                     \
  Runtime& rt = ctx.actors();                                               \
  (void)rt
