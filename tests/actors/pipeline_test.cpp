// Pipeline over hosted stages in one process (--ranks threads): both schedules give the whole batch's
// loss and gradients (float64, 1e-12) for 2 and 3 stages and 1, 4 and 8 micro-batches; 1F1B keeps at
// most p - i activations on stage i and p micro-batches in flight; forward() equals the local forward.
#include <gtest/gtest.h>

#include <troupe/nn/functional.h>

#include "actors_helpers.h"
#include "remote_models.h"

using namespace troupe;
using namespace troupe::actors;
using namespace troupe::actors::testing;

namespace {
Tensor mse(const Tensor& y, const Tensor& t) { return (y - t).pow(2).mean(); }
}  // namespace

TEST(Pipeline, BothSchedulesGiveTheWholeBatchsGradients) {
  register_remote_models();
  on_ranks(4, [](launch::Context& ctx) {
    if (ctx.rank == 0) {
      for (int p : {2, 3})
        for (int chunks : {1, 4, 8})
          for (auto schedule : {Pipeline::Schedule::FillDrain, Pipeline::Schedule::OneFOneB}) {
            // local reference
            manual_seed(21);
            std::vector<Block> local(p);
            manual_seed(21);
            std::vector<Block> twins(p);
            std::vector<RemoteModulePtr> stages;
            for (int i = 0; i < p; ++i) stages.push_back(host(ctx.actors(), twins[i].ptr(), 1 + i));
            manual_seed(5);
            Tensor x = randn({16, 4}, kFloat64), t = randn({16, 4}, kFloat64);
            Tensor y = x;
            for (auto& b : local) y = b(y);
            Tensor loss = mse(y, t);
            loss.backward();

            Pipeline pipe(stages, chunks, schedule);
            Tensor ploss = pipe.train_step(x, t, mse);
            const std::string what = "p " + std::to_string(p) + " chunks " + std::to_string(chunks) +
                                     (schedule == Pipeline::Schedule::OneFOneB ? " 1F1B" : " fill-drain");
            EXPECT_LT(std::abs(ploss.item<double>() - loss.item<double>()), 1e-12) << what;
            for (int i = 0; i < p; ++i) {
              auto a = local[i]->named_parameters();
              auto b = stages[i]->named_parameters();
              for (const auto& [k, w] : a) EXPECT_LT(max_diff(w.grad(), b[k].grad()), 1e-12) << what << " stage " << i << " " << k;
            }
            const auto& st = pipe.last_stats();
            const int m = std::min<int>(chunks, 16);
            if (schedule == Pipeline::Schedule::OneFOneB) {
              EXPECT_LE(st.max_in_flight, p) << what;
              for (int i = 0; i < p; ++i) EXPECT_LE(st.max_kept_per_stage[i], p - i) << what << " stage " << i;
            } else {
              EXPECT_EQ(st.max_in_flight, m) << what;
              EXPECT_EQ(st.max_kept_per_stage[0], m) << what;
            }
            // forward() matches
            NoGradGuard g;
            Tensor ly = x;
            for (auto& b : local) ly = b(ly);
            EXPECT_LT(max_diff(pipe.forward(x), ly), 1e-12) << what;
          }
      EXPECT_THROW(Pipeline({}, 4), std::invalid_argument);
    }
    ctx.world->barrier();
  });
}
