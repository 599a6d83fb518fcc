// DistributedDataParallel on the `local` backend (1-4 ranks as threads) and, under mpirun, on the mpi
// backend (DdpMpi*): training equals one process on the concatenated batch, the initial broadcast,
// bucket layouts and the cross-rank layout check, no_sync accumulation, unused parameters (found, or
// the error naming them), buffer broadcast, the wrapper's names and printing.
#include <troupe/comm/comm.h>
#include <troupe/optim/optim.h>
#include <troupe/parallel/parallel.h>

#include "mpi_world.h"
#include "parallel_helpers.h"
#include <troupe/nn/nn.h>
#include <troupe/tensor/autograd.h>
#include <troupe/tensor/ops.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

using namespace troupe;
using namespace troupe::comm;
using namespace troupe::parallel;
using troupe::parallel_test::contains;
using troupe::parallel_test::error_of;
using troupe::parallel_test::on_local_ranks;
using namespace std::chrono_literals;

namespace {

// The default generator is shared by the rank threads: models are built under this lock after seeding.
std::mutex& init_mutex() {
  static std::mutex m;
  return m;
}

constexpr int64_t kIn = 6, kHidden = 16, kOut = 4;

std::shared_ptr<nn::SequentialImpl> make_mlp(uint64_t seed, int64_t hidden = kHidden) {
  std::lock_guard<std::mutex> lock(init_mutex());
  manual_seed(seed);
  return std::make_shared<nn::SequentialImpl>(std::make_shared<nn::LinearImpl>(kIn, hidden), std::make_shared<nn::TanhImpl>(),
                                          std::make_shared<nn::LinearImpl>(hidden, kOut));
}

// Rows [row0, row0 + rows) of step `step`'s global batch (a closed form, the same on every rank).
Tensor batch_x(int step, int64_t row0, int64_t rows, int64_t cols = kIn) {
  std::vector<float> v;
  for (int64_t i = row0; i < row0 + rows; ++i)
    for (int64_t j = 0; j < cols; ++j) v.push_back(static_cast<float>(std::sin(0.37 * i + 0.71 * j + 1.3 * step)));
  return tensor(v).view({rows, cols});
}
Tensor batch_y(int step, int64_t row0, int64_t rows) {
  std::vector<float> v;
  for (int64_t i = row0; i < row0 + rows; ++i)
    for (int64_t k = 0; k < kOut; ++k) v.push_back(static_cast<float>(std::cos(0.23 * i - 0.5 * k + 0.9 * step)));
  return tensor(v).view({rows, kOut});
}

Tensor mse(const Tensor& out, const Tensor& y) { return (out - y).pow(2).mean(); }

std::vector<std::vector<float>> values(const nn::Module& m) {
  std::vector<std::vector<float>> out;
  for (const auto& p : m.parameters()) out.push_back(p.detach().contiguous().to_vector<float>());
  return out;
}

double max_diff(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  if (a.size() != b.size()) return INFINITY;
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].size() != b[i].size()) return INFINITY;
    for (size_t k = 0; k < a[i].size(); ++k) d = std::max(d, std::fabs(double(a[i][k]) - double(b[i][k])));
  }
  return d;
}

constexpr int kSteps = 10;
constexpr int64_t kPerRank = 3;  // b: rows per rank
constexpr double kLr = 0.1;

// One process trained on the concatenated batch of `size` ranks, from rank 0's initial model.
std::vector<std::vector<float>> reference_training(int size) {
  auto model = make_mlp(100);
  optim::SGD opt(model->parameters(), optim::SGDOptions(kLr));
  for (int s = 0; s < kSteps; ++s) {
    Tensor loss = mse((*model)(batch_x(s, 0, kPerRank * size)), batch_y(s, 0, kPerRank * size));
    opt.zero_grad();
    loss.backward();
    opt.step();
  }
  return values(*model);
}

// Rank r of `pg` trains from seed 100 + r on rows [r*b, (r+1)*b) of each global batch.
std::vector<std::vector<float>> ddp_training(const ProcessGroupPtr& pg, DDPOptions options) {
  auto model = make_mlp(100 + pg->rank());
  auto ddp = std::make_shared<DistributedDataParallel>(model, pg, options);
  optim::SGD opt(ddp->parameters(), optim::SGDOptions(kLr));
  const int64_t r0 = pg->rank() * kPerRank;
  for (int s = 0; s < kSteps; ++s) {
    Tensor loss = mse((*ddp)(batch_x(s, r0, kPerRank)), batch_y(s, r0, kPerRank));
    opt.zero_grad();
    loss.backward();
    opt.step();
  }
  return values(*model);
}

// ---- modules with a parameter the forward may skip

class TwoBranch : public nn::Module {
 public:
  explicit TwoBranch(uint64_t seed) {
    std::lock_guard<std::mutex> lock(init_mutex());
    manual_seed(seed);
    a = register_module("a", std::make_shared<nn::LinearImpl>(kIn, kOut));
    b = register_module("b", std::make_shared<nn::LinearImpl>(kIn, kOut));
  }
  Tensor forward(const Tensor& x) override { return use_b ? (*a)(x) + (*b)(x) : (*a)(x); }
  std::shared_ptr<nn::LinearImpl> a, b;
  bool use_b = false;
};

}  // namespace

// ------------------------------------------------------------------------------------------ training

TEST(DdpTraining, MatchesOneProcessOnTheConcatenatedBatch) {
  struct Variant {
    const char* what;
    DDPOptions options;
  };
  const std::vector<Variant> variants = {
      {"default buckets", DDPOptions()},
      {"one bucket per parameter", DDPOptions().first_bucket_mb(1e-6).bucket_cap_mb(1e-6)},
      {"gradient_as_bucket_view", DDPOptions().first_bucket_mb(1e-4).gradient_as_bucket_view(true)},
  };
  for (int n : {1, 2, 3, 4}) {
    const auto want = reference_training(n);
    for (const auto& v : variants) {
      auto got = on_local_ranks<std::vector<std::vector<float>>>(
          n, [&](ProcessGroupPtr pg) { return ddp_training(pg, v.options); });
      for (int r = 0; r < n; ++r) {
        EXPECT_LE(max_diff(got[r], want), 1e-6) << v.what << ", rank " << r << " of " << n;
        EXPECT_EQ(max_diff(got[r], got[0]), 0.0) << v.what << ": rank " << r << " differs from rank 0, " << n
                                                 << " ranks";
      }
    }
  }
}

// Over a staged group (comm/staged.h, staged to the CPU here: every bucket's all-reduce copied out and
// back, the copy back when DDP waits), training gives the inner group's parameters, to the bit.
TEST(DdpTraining, AStagedGroupTrainsAsItsInnerGroup) {
  for (int n : {2, 3}) {
    for (DDPOptions o : {DDPOptions(), DDPOptions().first_bucket_mb(1e-6).bucket_cap_mb(1e-6),
                         DDPOptions().first_bucket_mb(1e-4).gradient_as_bucket_view(true)}) {
      auto plain = on_local_ranks<std::vector<std::vector<float>>>(n, [&](ProcessGroupPtr pg) { return ddp_training(pg, o); });
      auto staged = on_local_ranks<std::vector<std::vector<float>>>(
          n, [&](ProcessGroupPtr pg) { return ddp_training(make_staged_group(pg, Device(kCPU)), o); });
      for (int r = 0; r < n; ++r) EXPECT_EQ(max_diff(staged[r], plain[r]), 0.0) << "rank " << r << " of " << n;
    }
  }
}

TEST(DdpTraining, TrainingWithoutDdpDiverges) {
  // The check above can fail: ranks training alone on their shards end far from the reference.
  const auto want = reference_training(2);
  auto got = on_local_ranks<std::vector<std::vector<float>>>(2, [&](ProcessGroupPtr pg) {
    auto model = make_mlp(100);
    optim::SGD opt(model->parameters(), optim::SGDOptions(kLr));
    for (int s = 0; s < kSteps; ++s) {
      Tensor loss = mse((*model)(batch_x(s, pg->rank() * kPerRank, kPerRank)), batch_y(s, pg->rank() * kPerRank, kPerRank));
      opt.zero_grad();
      loss.backward();
      opt.step();
    }
    return values(*model);
  });
  EXPECT_GT(max_diff(got[0], want), 1e-3);
  EXPECT_GT(max_diff(got[1], want), 1e-3);
}

TEST(DdpTraining, GradientsAreTheAverageAfterOneBackward) {
  for (int n : {2, 3, 4}) {
    // Every rank's loss is (rank + 1) * sum(w): the averaged gradient is (n + 1) / 2 everywhere.
    on_local_ranks<int>(n, [&](ProcessGroupPtr pg) {
      auto lin = std::make_shared<nn::LinearImpl>(3, 2);
      DistributedDataParallel ddp(lin, pg, DDPOptions().first_bucket_mb(1e-6).bucket_cap_mb(1e-6));
      Tensor out = ddp(ones({1, 3}));
      (out.sum() * static_cast<double>(pg->rank() + 1)).backward();
      const double want = (n + 1) / 2.0;
      for (auto g : lin->bias.grad().to_vector<float>()) EXPECT_NEAR(g, want, 1e-6) << "rank " << pg->rank();
      for (auto g : lin->weight.grad().to_vector<float>()) EXPECT_NEAR(g, want, 1e-6) << "rank " << pg->rank();
      return 0;
    });
  }
}

// ---------------------------------------------------------------------- in-place reduction (issue 18)

namespace {
// Sets parallel::detail::set_ddp_in_place_bytes for a scope (DDPs constructed in it use it).
struct InPlaceBytes {
  int64_t previous = parallel::detail::ddp_in_place_bytes();
  explicit InPlaceBytes(int64_t bytes) { parallel::detail::set_ddp_in_place_bytes(bytes); }
  ~InPlaceBytes() { parallel::detail::set_ddp_in_place_bytes(previous); }
};
}  // namespace

TEST(DdpInPlace, TrainingMatchesOneProcessWhenEveryGradientIsReducedInPlace) {
  InPlaceBytes all(0);  // every parameter its own all-reduce on its .grad
  const std::vector<DDPOptions> variants = {DDPOptions(), DDPOptions().first_bucket_mb(1e-6).bucket_cap_mb(1e-6),
                                            DDPOptions().first_bucket_mb(1e6).bucket_cap_mb(1e6)};
  for (int n : {1, 2, 3, 4}) {
    const auto want = reference_training(n);
    for (size_t v = 0; v < variants.size(); ++v) {
      auto got = on_local_ranks<std::vector<std::vector<float>>>(
          n, [&](ProcessGroupPtr pg) { return ddp_training(pg, variants[v]); });
      for (int r = 0; r < n; ++r) {
        EXPECT_LE(max_diff(got[r], want), 1e-6) << "variant " << v << ", rank " << r << " of " << n;
        EXPECT_EQ(max_diff(got[r], got[0]), 0.0) << "variant " << v << ", rank " << r << " of " << n;
      }
    }
  }
}

TEST(DdpInPlace, MixedLayoutKeepsTheAverages) {
  // hidden 40: the first Linear's weight (6 x 40 floats, 960 bytes) and the second's (40 x 4, 640 bytes)
  // are reduced in place, the biases (160 and 16 bytes) through their bucket's flat buffer.
  InPlaceBytes some(600);
  for (int n : {2, 3}) {
    // Every rank's loss is (rank + 1) * sum(out): the averaged gradient is (n + 1) / 2 times rank 0's.
    auto got = on_local_ranks<std::vector<std::vector<float>>>(n, [&](ProcessGroupPtr pg) {
      auto model = make_mlp(7, 40);
      DistributedDataParallel ddp(model, pg, DDPOptions().first_bucket_mb(1e6).bucket_cap_mb(1e6));
      (ddp(batch_x(0, 0, 3)).sum() * static_cast<double>(pg->rank() + 1)).backward();
      std::vector<std::vector<float>> g;
      for (const auto& p : model->parameters()) g.push_back(p.grad().to_vector<float>());
      return g;
    });
    auto ref = make_mlp(7, 40);
    ((*ref)(batch_x(0, 0, 3)).sum() * ((n + 1) / 2.0)).backward();
    std::vector<std::vector<float>> want;
    for (const auto& p : ref->parameters()) want.push_back(p.grad().to_vector<float>());
    for (int r = 0; r < n; ++r) EXPECT_LE(max_diff(got[r], want), 1e-5) << "rank " << r << " of " << n;
  }
}

TEST(DdpInPlace, GradientsKeepPyTorchsIdentityAndValues) {
  for (int64_t bytes : {int64_t{0}, INT64_MAX}) {  // in place, and through the buckets
    InPlaceBytes setting(bytes);
    on_local_ranks<int>(2, [&](ProcessGroupPtr pg) {
      std::shared_ptr<nn::LinearImpl> lin;
      {
        std::lock_guard<std::mutex> lock(init_mutex());
        lin = std::make_shared<nn::LinearImpl>(3, 2);
      }
      DistributedDataParallel ddp(lin, pg);
      const double k = pg->rank() + 1;  // loss (rank + 1) * sum(out): average 1.5 * d sum(out)
      (ddp(ones({1, 3})).sum() * k).backward();
      // zero_grad(set_to_none=false): the same .grad tensor, zeroed, accumulates and is averaged in place.
      Tensor held = lin->weight.grad();
      for (float g : held.to_vector<float>()) EXPECT_NEAR(g, 1.5, 1e-6) << "bytes " << bytes;
      {
        NoGradGuard no_grad;
        held.zero_();
      }
      (ddp(full({1, 3}, 2.0)).sum() * k).backward();
      EXPECT_EQ(lin->weight.grad().data_ptr(), held.data_ptr()) << "bytes " << bytes;
      for (float g : held.to_vector<float>()) EXPECT_NEAR(g, 3.0, 1e-6) << "bytes " << bytes;
      // set_to_none: a gradient held from before is not touched by the next reduction.
      lin->weight.set_grad(Tensor());
      (ddp(full({1, 3}, 4.0)).sum() * k).backward();
      for (float g : held.to_vector<float>()) EXPECT_NEAR(g, 3.0, 1e-6) << "bytes " << bytes;
      for (float g : lin->weight.grad().to_vector<float>()) EXPECT_NEAR(g, 6.0, 1e-6) << "bytes " << bytes;
      return 0;
    });
  }
}

TEST(DdpInPlace, UnusedParametersAndNoSync) {
  InPlaceBytes all(0);
  for (int n : {2, 3}) {
    on_local_ranks<int>(n, [&](ProcessGroupPtr pg) {
      // b unused on every rank, its .grad set before (different on each): left as it is, not averaged in place.
      auto m = std::make_shared<TwoBranch>(5);
      DistributedDataParallel ddp(m, pg, DDPOptions().find_unused_parameters(true));
      const float preset = 7.0f * static_cast<float>(pg->rank() + 1);
      m->b->weight.set_grad(full({kOut, kIn}, preset));
      ddp(ones({1, kIn})).sum().backward();
      for (float g : m->b->weight.grad().to_vector<float>()) EXPECT_EQ(g, preset) << "rank " << pg->rank();
      for (float g : m->a->bias.grad().to_vector<float>()) EXPECT_NEAR(g, 1.0, 1e-6) << "rank " << pg->rank();
      // b used on the last rank only: reduced in place there, through its bucket view elsewhere.
      auto m2 = std::make_shared<TwoBranch>(5);
      m2->use_b = pg->rank() == n - 1;
      DistributedDataParallel ddp2(m2, pg, DDPOptions().find_unused_parameters(true));
      {
        auto guard = ddp2.no_sync();
        ddp2(ones({1, kIn})).sum().backward();  // local only
      }
      ddp2(ones({1, kIn})).sum().backward();  // reduces both backwards' sums
      for (float g : m2->a->bias.grad().to_vector<float>()) EXPECT_NEAR(g, 2.0, 1e-6) << "rank " << pg->rank();
      for (float g : m2->b->bias.grad().to_vector<float>()) EXPECT_NEAR(g, 2.0 / n, 1e-6) << "rank " << pg->rank();
      return 0;
    });
  }
}

// ------------------------------------------------------------------------------------- construction

TEST(DdpConstruction, RanksStartFromRankZerosParameters) {
  const auto rank0 = values(*make_mlp(100));
  for (int n : {2, 3, 4}) {
    auto got = on_local_ranks<std::vector<std::vector<float>>>(n, [&](ProcessGroupPtr pg) {
      auto model = make_mlp(100 + pg->rank());
      if (pg->rank() > 0) {
        EXPECT_GT(max_diff(values(*model), rank0), 1e-3);  // different before
      }
      DistributedDataParallel ddp(model, pg);
      return values(*model);
    });
    for (int r = 0; r < n; ++r) EXPECT_EQ(max_diff(got[r], rank0), 0.0) << "rank " << r << " of " << n;
  }
}

TEST(DdpConstruction, NamesAndPrintingAsPyTorch) {
  run_local(1, [](ProcessGroupPtr pg) {
    auto model = make_mlp(1);
    auto ddp = std::make_shared<DistributedDataParallel>(model, pg);
    EXPECT_EQ(ddp->name(), "DistributedDataParallel");
    auto keys = ddp->state_dict().keys();
    ASSERT_EQ(keys.size(), 4u);
    EXPECT_EQ(keys[0], "module.0.weight");
    EXPECT_EQ(keys[3], "module.2.bias");
    EXPECT_EQ(ddp->repr().rfind("DistributedDataParallel(\n  (module): Sequential(\n    (0): Linear(", 0), 0u)
        << ddp->repr();
    EXPECT_EQ(ddp->module(), model);
    EXPECT_EQ(ddp->process_group(), pg);
    // forward and forward_args reach the wrapped module.
    Tensor x = batch_x(0, 0, 2);
    EXPECT_TRUE(equal((*ddp)(x), (*model)(x)));
    EXPECT_TRUE(equal((*ddp)(nn::Args{x}).tensor(), (*model)(x)));
  });
}

TEST(DdpConstruction, DefaultGroupIsTheWorld) {
  run_local(2, [](ProcessGroupPtr pg) {
    DistributedDataParallel ddp(make_mlp(7 + pg->rank()));
    EXPECT_EQ(ddp.process_group(), pg);
  });
}

TEST(DdpConstruction, DifferentModelsThrowNamingTheFirstDifference) {
  auto msgs = on_local_ranks<std::string>(2, [](ProcessGroupPtr pg) {
    return error_of([&] { DistributedDataParallel ddp(make_mlp(1, pg->rank() == 0 ? 16 : 8), pg); });
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(contains(msgs[r], "[DistributedDataParallel] the model on rank 1 differs from rank 0's")) << msgs[r];
    EXPECT_TRUE(contains(msgs[r], "parameter 0 (0.weight): rank 0 has shape [16, 6]")) << msgs[r];
    EXPECT_TRUE(contains(msgs[r], "rank 1 has shape [8, 6]")) << msgs[r];
  }
  // Same parameters, different bucket options: the layouts differ.
  msgs = on_local_ranks<std::string>(3, [](ProcessGroupPtr pg) {
    DDPOptions o;
    if (pg->rank() == 2) o.first_bucket_mb(1e-6).bucket_cap_mb(1e-6);
    return error_of([&] { DistributedDataParallel ddp(make_mlp(1), pg, o); });
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_TRUE(contains(msgs[r], "the model on rank 2 differs")) << msgs[r];
    EXPECT_TRUE(contains(msgs[r], "number of buckets: rank 0 has 1, rank 2 has 4")) << msgs[r];
  }
  // Different parameter counts.
  msgs = on_local_ranks<std::string>(2, [](ProcessGroupPtr pg) {
    nn::ModulePtr m = make_mlp(1);
    if (pg->rank() == 1) m = std::make_shared<nn::LinearImpl>(kIn, kOut);
    return error_of([&] { DistributedDataParallel ddp(m, pg); });
  });
  for (int r = 0; r < 2; ++r) EXPECT_TRUE(contains(msgs[r], "number of parameters: rank 0 has 4, rank 1 has 2")) << msgs[r];
}

TEST(DdpConstruction, BadArgumentsThrow) {
  run_local(1, [](ProcessGroupPtr pg) {
    EXPECT_TRUE(contains(error_of([&] { DistributedDataParallel d(nullptr, pg); }), "module is null"));
    EXPECT_TRUE(contains(error_of([&] { DistributedDataParallel d(make_mlp(1), nullptr); }), "no process group"));
    EXPECT_TRUE(contains(error_of([&] { DistributedDataParallel d(make_mlp(1), pg, DDPOptions().bucket_cap_mb(0)); }),
                         "must be positive"));
  });
}

// ------------------------------------------------------------------------------------------ buckets

TEST(DdpBuckets, LargeModelSplitsAndTheFirstBucketIsSmall) {
  // 10 x Linear(1024, 1024): 4,198,400 bytes each, 42 MB in all. Reverse order: the last layer fills
  // the first bucket (>= 1 MiB), the next 7 layers the second (>= 25 MiB), the first 2 the third.
  for (int n : {1, 2}) {
    run_local(n, [](ProcessGroupPtr pg) {
      auto seq = std::make_shared<nn::SequentialImpl>();
      {
        std::lock_guard<std::mutex> lock(init_mutex());
        for (int k = 0; k < 10; ++k) seq->push_back(std::make_shared<nn::LinearImpl>(1024, 1024));
      }
      DistributedDataParallel ddp(seq, pg);
      auto idx = ddp.bucket_indices();
      auto bytes = ddp.bucket_bytes();
      ASSERT_EQ(idx.size(), 3u);
      EXPECT_EQ(idx[0], (std::vector<size_t>{19, 18}));
      std::vector<size_t> second;
      for (size_t i = 17; i >= 4; --i) second.push_back(i);
      EXPECT_EQ(idx[1], second);
      EXPECT_EQ(idx[2], (std::vector<size_t>{3, 2, 1, 0}));
      EXPECT_EQ(bytes, (std::vector<int64_t>{4198400, 7 * 4198400, 2 * 4198400}));
      EXPECT_LT(bytes[0], bytes[1]);
      // One step still averages correctly across the three buckets.
      Tensor out = ddp(full({1, 1024}, 0.01));
      (out.sum() * static_cast<double>(pg->rank() + 1)).backward();
      const double want = (pg->size() + 1) / 2.0;
      EXPECT_NEAR(seq->parameters()[19].grad().to_vector<float>()[0], want, 1e-5);
    });
  }
}

TEST(DdpBuckets, CapsDtypesAndFrozenParameters) {
  run_local(2, [](ProcessGroupPtr pg) {
    // Mixed dtypes never share a bucket; frozen parameters are in none.
    auto m = std::make_shared<nn::Module>();
    m->register_parameter("a", zeros({100}));                                      // 400 B
    m->register_parameter("b", zeros({100}, TensorOptions(kFloat64)));             // 800 B
    m->register_parameter("c", zeros({300}));                                      // 1200 B
    m->register_parameter("frozen", zeros({10}), /*requires_grad=*/false);
    m->register_parameter("d", zeros({50}, TensorOptions(kFloat64)));              // 400 B
    const double kb = 1.0 / 1024;                                                  // MiB per KiB
    DistributedDataParallel ddp(m, pg, DDPOptions().first_bucket_mb(1 * kb).bucket_cap_mb(1.5 * kb));
    // Reverse order d, c, b, a: c (1200 B >= 1 KiB) closes float32's first bucket, b closes float64's
    // (d + b = 1200 B); a stays open. Sorted by their first parameter's position: [d, b], [c], [a].
    auto idx = ddp.bucket_indices();
    ASSERT_EQ(idx.size(), 3u);
    EXPECT_EQ(idx[0], (std::vector<size_t>{4, 1}));  // d, b (float64), closed at 1200 B
    EXPECT_EQ(idx[1], (std::vector<size_t>{2}));     // c (float32), closed at 1200 B
    EXPECT_EQ(idx[2], (std::vector<size_t>{0}));     // a, left open
    EXPECT_EQ(ddp.bucket_bytes(), (std::vector<int64_t>{1200, 1200, 400}));
  });
}

// ---------------------------------------------------------------------------------------- no_sync

TEST(DdpNoSync, AccumulatedGradientsEqualABiggerBatch) {
  for (int n : {1, 2, 3}) {
    // Reference: one process, loss over both micro-batches of every rank (4 * n rows).
    auto ref = make_mlp(100);
    {
      Tensor x = cat({batch_x(0, 0, 2 * n), batch_x(1, 0, 2 * n)}, 0);
      Tensor y = cat({batch_y(0, 0, 2 * n), batch_y(1, 0, 2 * n)}, 0);
      mse((*ref)(x), y).backward();
    }
    std::vector<std::vector<float>> want;
    for (const auto& p : ref->parameters()) want.push_back(p.grad().to_vector<float>());

    auto got = on_local_ranks<std::vector<std::vector<float>>>(n, [&](ProcessGroupPtr pg) {
      auto model = make_mlp(100 + pg->rank());
      DistributedDataParallel ddp(model, pg, DDPOptions().first_bucket_mb(1e-6).bucket_cap_mb(1e-6));
      const int64_t r0 = 2 * pg->rank();
      {
        auto guard = ddp.no_sync();
        EXPECT_FALSE(ddp.require_backward_grad_sync());
        (mse(ddp(batch_x(0, r0, 2)), batch_y(0, r0, 2)) * 0.5).backward();
        // Still local: this rank's gradient of its own micro-batch only.
        auto local = make_mlp(100);
        (mse((*local)(batch_x(0, r0, 2)), batch_y(0, r0, 2)) * 0.5).backward();
        std::vector<std::vector<float>> lg, mg;
        for (const auto& p : local->parameters()) lg.push_back(p.grad().to_vector<float>());
        for (const auto& p : model->parameters()) mg.push_back(p.grad().to_vector<float>());
        EXPECT_LE(max_diff(mg, lg), 1e-7) << "rank " << pg->rank();
      }
      EXPECT_TRUE(ddp.require_backward_grad_sync());
      (mse(ddp(batch_x(1, r0, 2)), batch_y(1, r0, 2)) * 0.5).backward();
      std::vector<std::vector<float>> g;
      for (const auto& p : model->parameters()) g.push_back(p.grad().to_vector<float>());
      return g;
    });
    for (int r = 0; r < n; ++r) EXPECT_LE(max_diff(got[r], want), 1e-6) << "rank " << r << " of " << n;
  }
}

// ------------------------------------------------------------------------------- unused parameters

TEST(DdpUnused, FindUnusedParametersCompletesTheReduction) {
  for (int n : {1, 2, 3}) {
    on_local_ranks<int>(n, [&](ProcessGroupPtr pg) {
      auto m = std::make_shared<TwoBranch>(5 + pg->rank());
      DistributedDataParallel ddp(m, pg, DDPOptions().find_unused_parameters(true).first_bucket_mb(1e-6));
      for (int s = 0; s < 3; ++s) {  // every iteration completes (no error on the next forward)
        for (auto& p : ddp.parameters()) p.set_grad(Tensor());
        Tensor out = ddp(ones({1, kIn}));
        (out.sum() * static_cast<double>(pg->rank() + 1)).backward();
        const double want = (pg->size() + 1) / 2.0;
        for (auto g : m->a->bias.grad().to_vector<float>()) EXPECT_NEAR(g, want, 1e-6);
        EXPECT_FALSE(m->b->weight.grad().defined()) << "unused on every rank: .grad left alone";
        EXPECT_FALSE(m->b->bias.grad().defined());
      }
      return 0;
    });
  }
  // b used on the last rank only: every rank gets its average (1 / n of that rank's gradient).
  for (int n : {2, 3}) {
    on_local_ranks<int>(n, [&](ProcessGroupPtr pg) {
      auto m = std::make_shared<TwoBranch>(5);
      m->use_b = pg->rank() == pg->size() - 1;
      DistributedDataParallel ddp(m, pg, DDPOptions().find_unused_parameters(true));
      ddp(ones({1, kIn})).sum().backward();
      EXPECT_TRUE(m->b->bias.grad().defined()) << "rank " << pg->rank();
      for (auto g : m->b->bias.grad().to_vector<float>()) EXPECT_NEAR(g, 1.0 / n, 1e-6) << "rank " << pg->rank();
      for (auto g : m->a->bias.grad().to_vector<float>()) EXPECT_NEAR(g, 1.0, 1e-6) << "rank " << pg->rank();
      return 0;
    });
  }
}

TEST(DdpUnused, WithoutFindUnusedTheNextForwardNamesTheParameters) {
  for (int n : {1, 2}) {
    auto msgs = on_local_ranks<std::string>(n, [](ProcessGroupPtr pg) {
      auto m = std::make_shared<TwoBranch>(5);
      DistributedDataParallel ddp(m, pg, DDPOptions().first_bucket_mb(1e-6).bucket_cap_mb(1e-6));
      ddp(ones({1, kIn})).sum().backward();  // b gets no gradient: its buckets never complete
      return error_of([&] { ddp(ones({1, kIn})); });
    });
    for (int r = 0; r < n; ++r) {
      const auto& m = msgs[r];
      EXPECT_TRUE(contains(m, "Expected to have finished reduction in the prior iteration before starting a new one"))
          << m;
      EXPECT_TRUE(contains(m, "find_unused_parameters(true)")) << m;
      EXPECT_TRUE(contains(m, "Parameter indices which did not receive grad for rank " + std::to_string(r) + ": 2 3"))
          << m;
      EXPECT_TRUE(contains(m, "Parameters which did not receive grad for rank " + std::to_string(r) +
                                  ": b.weight, b.bias"))
          << m;
    }
  }
  // Unused on rank 1 only: rank 0's reduction waits for rank 1, whose next forward throws; run_local then
  // fails rank 0's wait at once (no hang) and rethrows rank 1's error.
  const auto t0 = std::chrono::steady_clock::now();
  const std::string msg = error_of([] {
    run_local(2, [](ProcessGroupPtr pg) {
      auto m = std::make_shared<TwoBranch>(5);
      m->use_b = pg->rank() == 0;
      DistributedDataParallel ddp(m, pg);
      ddp(ones({1, kIn})).sum().backward();
      ddp(ones({1, kIn}));
    });
  });
  EXPECT_TRUE(contains(msg, "Parameters which did not receive grad for rank 1: b.weight, b.bias")) << msg;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 30s);
  // A forward without backward, or under no_grad, is no error.
  run_local(2, [](ProcessGroupPtr pg) {
    auto m = std::make_shared<TwoBranch>(5);
    DistributedDataParallel ddp(m, pg);
    ddp(ones({1, kIn}));
    ddp(ones({1, kIn})).sum().backward();
    m->use_b = true;  // all used now... but the previous reduction never started: fine
    NoGradGuard no_grad;
    ddp(ones({1, kIn}));
  });
}

// ------------------------------------------------------------------------------------------ buffers

TEST(DdpBuffers, RankZerosBuffersAreBroadcast) {
  for (bool broadcast : {true, false}) {
    auto got = on_local_ranks<std::vector<float>>(3, [&](ProcessGroupPtr pg) {
      std::shared_ptr<nn::BatchNorm1dImpl> bn;
      std::shared_ptr<nn::SequentialImpl> m;
      {
        std::lock_guard<std::mutex> lock(init_mutex());
        manual_seed(3);
        bn = std::make_shared<nn::BatchNorm1dImpl>(kIn);
        m = std::make_shared<nn::SequentialImpl>(bn, std::make_shared<nn::LinearImpl>(kIn, kOut));
      }
      {
        NoGradGuard g;
        bn->running_mean.fill_(10.0 * pg->rank());  // construction broadcasts rank 0's (zeros)
      }
      DistributedDataParallel ddp(m, pg, DDPOptions().broadcast_buffers(broadcast));
      EXPECT_EQ(bn->running_mean.to_vector<float>(), std::vector<float>(kIn, 0.0f)) << "rank " << pg->rank();
      // Training forward on rank-specific data: the running stats differ per rank ...
      ddp(batch_x(pg->rank(), 0, 4)).sum().backward();
      // ... until the next forward broadcasts rank 0's (eval: the stats are not updated again).
      ddp.eval();
      NoGradGuard g;
      ddp(batch_x(0, 0, 2));
      auto v = bn->running_mean.to_vector<float>();
      v.push_back(static_cast<float>(bn->num_batches_tracked.item<int64_t>()));
      return v;
    });
    for (int r = 1; r < 3; ++r) {
      if (broadcast) EXPECT_EQ(got[r], got[0]) << "rank " << r;
      else EXPECT_NE(got[r], got[0]) << "rank " << r << " (broadcast_buffers false)";
    }
  }
}

// ------------------------------------------------------------------------------- mpi (under mpirun)

#ifdef TROUPE_HAVE_MPI

#define DDP_MPI_SETUP(pg)                                                   \
  if (!started_by_mpirun()) GTEST_SKIP() << "not started by mpirun";       \
  ProcessGroupPtr pg = troupe::testing::mpi_test_world();                  \
  if (pg->size() < 2) GTEST_SKIP() << "needs mpirun -np 2 or more";

TEST(DdpMpi, MatchesOneProcessOnTheConcatenatedBatch) {
  DDP_MPI_SETUP(pg);
  const auto want = reference_training(pg->size());
  for (int64_t in_place : {parallel::detail::ddp_in_place_bytes(), int64_t{0}}) {  // the default, every one
    const int64_t previous = parallel::detail::ddp_in_place_bytes();
    parallel::detail::set_ddp_in_place_bytes(in_place);
    for (auto options : {DDPOptions(), DDPOptions().first_bucket_mb(1e-6).bucket_cap_mb(1e-6)}) {
      auto got = ddp_training(pg, options);
      EXPECT_LE(max_diff(got, want), 1e-6) << "rank " << pg->rank() << ", in place from " << in_place << " bytes";
    }
    parallel::detail::set_ddp_in_place_bytes(previous);
  }
}

TEST(DdpMpi, NoSyncUnusedAndBuffers) {
  DDP_MPI_SETUP(pg);
  const int n = pg->size();
  // find_unused: b used on the last rank only.
  auto m = std::make_shared<TwoBranch>(5 + pg->rank());
  m->use_b = pg->rank() == n - 1;
  DistributedDataParallel ddp(m, pg, DDPOptions().find_unused_parameters(true));
  {
    auto guard = ddp.no_sync();
    ddp(ones({1, kIn})).sum().backward();  // local only
  }
  ddp(ones({1, kIn})).sum().backward();  // reduces both backwards' sums
  for (auto g : m->a->bias.grad().to_vector<float>()) EXPECT_NEAR(g, 2.0, 1e-6);
  for (auto g : m->b->bias.grad().to_vector<float>()) EXPECT_NEAR(g, 2.0 / n, 1e-6);
  // The unused-parameter error, on every rank.
  auto m2 = std::make_shared<TwoBranch>(5);
  DistributedDataParallel ddp2(m2, pg);
  ddp2(ones({1, kIn})).sum().backward();
  std::string msg = error_of([&] { ddp2(ones({1, kIn})); });
  EXPECT_TRUE(contains(msg, "Parameters which did not receive grad for rank " + std::to_string(pg->rank()) +
                                ": b.weight, b.bias"))
      << msg;
}
#endif  // TROUPE_HAVE_MPI
