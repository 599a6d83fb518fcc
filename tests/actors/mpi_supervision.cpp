// actors_mpi_supervision: the supervision and whole-model checkpoint cases of supervision_cases.h across
// processes (ctest actors_mpi_supervision_np2 / np3): rank 0 trains, the hosts live on ranks 1 and the
// last one. Skipped without mpirun.
#include <cstdlib>

#include "supervision_cases.h"

using namespace troupe;
using namespace troupe::actors;
using namespace troupe::actors::testing;

namespace {

bool g_inited = false;

launch::Context& mpi_context() {
  static launch::Context ctx = [] {
    g_inited = true;
    register_test_actors();
    register_chain();
    int argc = 1;
    std::string a0 = "actors_mpi_supervision";
    char* args[] = {a0.data(), nullptr};
    char** argv = args;
    return launch::init(argc, argv);
  }();
  return ctx;
}

class FinalizeBeforeExit : public ::testing::Environment {
 public:
  void TearDown() override {
    if (g_inited) launch::finalize();
  }
};
[[maybe_unused]] auto* const g_env = ::testing::AddGlobalTestEnvironment(new FinalizeBeforeExit);

#define MPI_ONLY()                                                          \
  if (!std::getenv("OMPI_COMM_WORLD_SIZE")) GTEST_SKIP() << "needs mpirun"; \
  launch::Context& ctx = mpi_context();                                     \
  Runtime& rt = ctx.actors()

}  // namespace

TEST(MpiSupervision, AHostStoppedMidTrainingEndsAtTheHandRestartedParameters) {
  MPI_ONLY();
  if (ctx.rank == 0) restart_matches_hand_restart(rt, 1, ctx.size - 1);
  ctx.world->barrier();
}

TEST(MpiSupervision, IdempotentCallsAreRetriedTrainingAndGraphCallsFailClearly) {
  MPI_ONLY();
  if (ctx.rank == 0) idempotent_calls_retried_graph_calls_fail(rt, 1, ctx.size - 1);
  ctx.world->barrier();
}

TEST(MpiSupervision, TheRestartLimitNamesTheActorAndItsLastFailure) {
  MPI_ONLY();
  if (ctx.rank == 0) restart_limit(rt, ctx.size - 1);
  ctx.world->barrier();
}

TEST(MpiWholeModelCheckpoint, SavedWithOnePlacementLoadsIntoAnotherAndIntoTheLocalModel) {
  MPI_ONLY();
  if (ctx.rank == 0) checkpoint_across_placements(rt, 1, ctx.size - 1);
  ctx.world->barrier();
}
