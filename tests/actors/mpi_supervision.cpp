// actors_mpi_supervision: the supervision and whole-model checkpoint cases of supervision_cases.h across
// processes (ctest actors_mpi_supervision_np2 / np3): rank 0 trains, the hosts live on ranks 1 and the
// last one. Skipped without mpirun.
#include <cstdlib>

#include "mpi_context.h"
#include "supervision_cases.h"

using namespace troupe;
using namespace troupe::actors;
using namespace troupe::actors::testing;

namespace {
void register_all() {
  register_test_actors();
  register_chain();
}
launch::Context& mpi_context() { return troupe::actors::testing::mpi_context("actors_mpi_supervision", register_all); }
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
