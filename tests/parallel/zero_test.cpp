// ZeRO stages 1-3 (parallel/zero.h) on the `local` backend (1-4 ranks as threads): training equals one
// process on the concatenated batch (SGD with momentum, Adam; float32 and mixed float32/float64 models;
// parameter counts not divisible by the world size) and DDP (stages 2 and 3 with bucket reduce-scatters
// started from the gradient hooks, FSDP units freed after forward or kept, with and without prefetch,
// two backward calls per step, unused parameters), the collectives issued during backward, the flat
// layout and the units, bytes per rank and the forward/backward peaks in closed form, the sharded
// checkpoint (saved at 2 ranks, loaded at 4, 3 and 1, across stages and unit layouts, continuing to the
// uninterrupted run's result), and the errors. ZeroMpi* run the same under mpirun.
// Over 800 lines on purpose: every suite here uses the models and reference runs defined once at the
// top (make_mlp, Mixed, reference(), the local-rank runners); a split by source file wants them in a
// tests/parallel header first.
#include <troupe/comm/comm.h>
#include <troupe/optim/optim.h>
#include <troupe/parallel/parallel.h>

#include "mpi_world.h"
#include "parallel_helpers.h"
#include <troupe/nn/nn.h>
#include <troupe/tensor/autograd.h>
#include <troupe/tensor/ops.h>

#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
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

std::mutex& init_mutex() {
  static std::mutex m;
  return m;
}

constexpr int64_t kIn = 6, kHidden = 5, kOut = 3;  // 6*5 + 5 + 5*3 + 3 = 53 parameters: uneven for 2, 3, 4
constexpr int64_t kNumel = kIn * kHidden + kHidden + kHidden * kOut + kOut;
constexpr int64_t kGlobalRows = 12;  // split evenly over 1, 2, 3, 4 ranks
constexpr int kSteps = 10;

nn::ModulePtr make_mlp(uint64_t seed, int64_t hidden = kHidden) {
  std::lock_guard<std::mutex> lock(init_mutex());
  manual_seed(seed);
  return std::make_shared<nn::SequentialImpl>(std::make_shared<nn::LinearImpl>(kIn, hidden), std::make_shared<nn::TanhImpl>(),
                                          std::make_shared<nn::LinearImpl>(hidden, kOut));
}

// A float32 layer then a float64 layer: two flat buffers.
class Mixed : public nn::Module {
 public:
  explicit Mixed(uint64_t seed) {
    std::lock_guard<std::mutex> lock(init_mutex());
    manual_seed(seed);
    a = register_module("a", std::make_shared<nn::LinearImpl>(kIn, kHidden));
    b = register_module("b", std::make_shared<nn::LinearImpl>(kHidden, kOut));
    b->to(kFloat64);
  }
  Tensor forward(const Tensor& x) override { return (*b)((*a)(x).tanh().to(kFloat64)).to(kFloat32); }
  std::shared_ptr<nn::LinearImpl> a, b;
};

Tensor batch_x(int step, int64_t row0, int64_t rows) {
  std::vector<float> v;
  for (int64_t i = row0; i < row0 + rows; ++i)
    for (int64_t j = 0; j < kIn; ++j) v.push_back(static_cast<float>(std::sin(0.37 * i + 0.71 * j + 1.3 * step)));
  return tensor(v).view({rows, kIn});
}
Tensor batch_y(int step, int64_t row0, int64_t rows) {
  std::vector<float> v;
  for (int64_t i = row0; i < row0 + rows; ++i)
    for (int64_t k = 0; k < kOut; ++k) v.push_back(static_cast<float>(std::cos(0.23 * i - 0.5 * k + 0.9 * step)));
  return tensor(v).view({rows, kOut});
}
Tensor mse(const Tensor& out, const Tensor& y) { return (out - y).pow(2).mean(); }

using Values = std::vector<std::vector<double>>;

Values values(const nn::Module& m) {
  Values out;
  for (const auto& p : m.parameters()) out.push_back(p.detach().contiguous().to_vector<double>());
  return out;
}

double max_diff(const Values& a, const Values& b) {
  if (a.size() != b.size()) return INFINITY;
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].size() != b[i].size()) return INFINITY;
    for (size_t k = 0; k < a[i].size(); ++k) d = std::max(d, std::fabs(a[i][k] - b[i][k]));
  }
  return d;
}

enum class Opt { SGD, Adam };
const char* opt_name(Opt o) { return o == Opt::SGD ? "SGD(momentum)" : "Adam"; }

std::unique_ptr<optim::Optimizer> make_opt(Opt o, std::vector<Tensor> params) {
  if (o == Opt::SGD)
    return std::make_unique<optim::SGD>(params, optim::SGDOptions(0.1).momentum(0.9).weight_decay(0.01));
  return std::make_unique<optim::Adam>(params, optim::AdamOptions(0.01).weight_decay(0.01));
}
OptimizerFactory factory(Opt o) {
  return [o](std::vector<Tensor> shards) { return make_opt(o, std::move(shards)); };
}

// One process on the whole batch, steps [0, steps), from seed 100's model.
Values reference(Opt o, const std::function<nn::ModulePtr(uint64_t)>& make = [](uint64_t s) { return make_mlp(s); },
                 int steps = kSteps) {
  auto model = make(100);
  auto opt = make_opt(o, model->parameters());
  for (int s = 0; s < steps; ++s) {
    Tensor loss = mse((*model)(batch_x(s, 0, kGlobalRows)), batch_y(s, 0, kGlobalRows));
    opt->zero_grad();
    loss.backward();
    opt->step();
  }
  return values(*model);
}

// Either wrapper, behind one interface.
struct Trainer {
  nn::ModulePtr model;
  std::unique_ptr<ZeroOptimizer> zero;
  std::shared_ptr<FullyShardedDataParallel> fsdp;

  Trainer(const ProcessGroupPtr& pg, int stage, Opt o, nn::ModulePtr m, ZeroOptions zo = {}, FSDPOptions fo = {})
      : model(std::move(m)) {
    if (stage == 3)
      fsdp = std::make_shared<FullyShardedDataParallel>(model, factory(o), pg, fo);
    else
      zero = std::make_unique<ZeroOptimizer>(model, factory(o), stage, pg, zo);
  }
  // Steps [from, to); with micro > 1, each step accumulates micro backward calls (batches s * micro + k).
  void train(const ProcessGroupPtr& pg, int from, int to, int micro = 1) {
    const int64_t rows = kGlobalRows / pg->size(), r0 = pg->rank() * rows;
    for (int s = from; s < to; ++s) {
      fsdp ? fsdp->zero_grad() : zero->zero_grad();
      for (int k = 0; k < micro; ++k) {
        const int b = micro == 1 ? s : s * micro + k;
        Tensor out = fsdp ? (*fsdp)(batch_x(b, r0, rows)) : (*model)(batch_x(b, r0, rows));
        mse(out, batch_y(b, r0, rows)).backward();
      }
      fsdp ? fsdp->step() : zero->step();
    }
  }
  Values params() {
    if (fsdp) fsdp->gather_parameters();
    return values(*model);
  }
  ShardMemory memory() const { return fsdp ? fsdp->memory_per_rank() : zero->memory_per_rank(); }
  void save(const std::string& dir) { fsdp ? fsdp->save_sharded(dir) : zero->save_sharded(dir); }
  void load(const std::string& dir) { fsdp ? fsdp->load_sharded(dir) : zero->load_sharded(dir); }
  std::vector<ShardedTensor> sharded() const { return fsdp ? fsdp->sharded_state_dict() : zero->sharded_state_dict(); }
};

// A fresh directory under the temp dir, removed with the object.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& tag) {
    static std::atomic<int> counter{0};
    path = std::filesystem::temp_directory_path() /
           ("troupe_zero_" + tag + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string str() const { return path.string(); }
};

}  // namespace

// ------------------------------------------------------------------------------------------ training

TEST(ZeroTraining, AllStagesMatchOneProcessOnTheConcatenatedBatch) {
  for (Opt o : {Opt::SGD, Opt::Adam}) {
    const Values want = reference(o);
    for (int n : {1, 2, 3, 4}) {
      for (int stage : {1, 2, 3}) {
        auto got = on_local_ranks<Values>(n, [&](ProcessGroupPtr pg) {
          Trainer t(pg, stage, o, make_mlp(100 + pg->rank()));  // rank 0's parameters win
          t.train(pg, 0, kSteps);
          return t.params();
        });
        for (int r = 0; r < n; ++r) {
          EXPECT_LE(max_diff(got[r], want), 1e-6) << opt_name(o) << ", stage " << stage << ", rank " << r << " of " << n;
          EXPECT_EQ(max_diff(got[r], got[0]), 0.0) << opt_name(o) << ", stage " << stage << ": rank " << r
                                                   << " differs from rank 0, " << n << " ranks";
        }
      }
    }
  }
}

// Over a staged group (comm/staged.h, staged to the CPU here: every reduce-scatter and all-gather copied
// out and back), each stage gives the inner group's parameters, to the bit.
TEST(ZeroTraining, AStagedGroupTrainsAsItsInnerGroup) {
  for (int stage : {1, 2, 3}) {
    auto run = [&](bool staged) {
      return on_local_ranks<Values>(2, [&](ProcessGroupPtr pg) {
        ProcessGroupPtr g = staged ? make_staged_group(pg, Device(kCPU)) : pg;
        Trainer t(g, stage, Opt::Adam, make_mlp(100 + pg->rank()));
        t.train(g, 0, kSteps);
        return t.params();
      });
    };
    auto plain = run(false), staged = run(true);
    for (int r = 0; r < 2; ++r) EXPECT_EQ(max_diff(staged[r], plain[r]), 0.0) << "stage " << stage << ", rank " << r;
  }
}

TEST(ZeroTraining, TheComparisonCanFail) {
  // Training moves the parameters far more than the tolerance, and a run without the averaging (each
  // rank alone on its rows) ends elsewhere.
  const Values want = reference(Opt::Adam);
  const Values start = values(*make_mlp(100));
  EXPECT_GT(max_diff(want, start), 1e-2);
  const Values half = reference(Opt::Adam, [](uint64_t s) { return make_mlp(s); }, kSteps / 2);
  EXPECT_GT(max_diff(want, half), 1e-3);
  auto alone = on_local_ranks<Values>(2, [&](ProcessGroupPtr pg) {
    auto single = make_local_groups(1)[0];
    Trainer t(single, 2, Opt::Adam, make_mlp(100));
    const int64_t rows = kGlobalRows / 2, r0 = pg->rank() * rows;
    auto opt_model = t.model;
    for (int s = 0; s < kSteps; ++s) {
      Tensor loss = mse((*opt_model)(batch_x(s, r0, rows)), batch_y(s, r0, rows));
      t.zero->zero_grad();
      loss.backward();
      t.zero->step();
    }
    return t.params();
  });
  EXPECT_GT(max_diff(alone[0], want), 1e-4);
  EXPECT_GT(max_diff(alone[1], want), 1e-4);
}

TEST(ZeroTraining, MixedDtypesMakeOneFlatBufferEach) {
  auto make = [](uint64_t s) -> nn::ModulePtr { return std::make_shared<Mixed>(s); };
  for (Opt o : {Opt::SGD, Opt::Adam}) {
    const Values want = reference(o, make);
    for (int n : {1, 3, 4}) {
      for (int stage : {1, 2, 3}) {
        auto got = on_local_ranks<Values>(n, [&](ProcessGroupPtr pg) {
          Trainer t(pg, stage, o, make(100 + pg->rank()));
          const auto& groups = t.fsdp ? t.fsdp->flat_shards() : t.zero->flat_shards();
          EXPECT_EQ(groups.size(), 2u);
          if (groups.size() == 2) {
            EXPECT_EQ(groups[0].dtype, kFloat32);
            EXPECT_EQ(groups[0].numel, kIn * kHidden + kHidden);
            EXPECT_EQ(groups[1].dtype, kFloat64);
            EXPECT_EQ(groups[1].numel, kHidden * kOut + kOut);
          }
          t.train(pg, 0, kSteps);
          return t.params();
        });
        for (int r = 0; r < n; ++r)
          EXPECT_LE(max_diff(got[r], want), 1e-6) << opt_name(o) << ", stage " << stage << ", rank " << r << " of " << n;
      }
    }
  }
}

TEST(ZeroTraining, Stage1KeepsTheAveragedFullGradientsStage2And3FreeThem) {
  on_local_ranks<int>(2, [](ProcessGroupPtr pg) {
    for (int stage : {1, 2}) {
      auto lin = std::make_shared<nn::LinearImpl>(3, 2);
      ZeroOptimizer zero(lin, factory(Opt::SGD), stage, pg);
      // Every rank's loss is (rank + 1) * sum(out): the average gradient of the bias is 1.5.
      ((*lin)(ones({1, 3})).sum() * static_cast<double>(pg->rank() + 1)).backward();
      zero.step();
      if (stage == 1) {
        EXPECT_TRUE(lin->bias.grad().defined());
        if (lin->bias.grad().defined()) {
          for (float g : lin->bias.grad().to_vector<float>()) EXPECT_NEAR(g, 1.5, 1e-6);
        }
      } else {
        EXPECT_FALSE(lin->bias.grad().defined()) << "stage 2 keeps only the shard's gradient";
        const Tensor& sg = zero.shard_parameters()[0].grad();
        EXPECT_TRUE(sg.defined());
        if (sg.defined()) {
          EXPECT_EQ(sg.numel(), 4);  // 8 elements over 2 ranks
        }
      }
    }
    return 0;
  });
}

// ------------------------------------------------------------------------------------------ layout

TEST(ZeroLayout, FlatBuffersArePaddedAndEachRankOwnsOneSlice) {
  for (int n : {1, 2, 3, 4}) {
    on_local_ranks<int>(n, [&](ProcessGroupPtr pg) {
      auto model = make_mlp(7);
      ZeroOptimizer zero(model, factory(Opt::SGD), 1, pg);
      const auto& g = zero.flat_shards();
      EXPECT_EQ(g.size(), 1u);
      const int64_t padded = (kNumel + n - 1) / n * n;
      EXPECT_EQ(g[0].numel, kNumel);
      EXPECT_EQ(g[0].padded_numel, padded);
      EXPECT_EQ(g[0].shard_numel, padded / n);
      EXPECT_EQ(g[0].shard_offset, pg->rank() * (padded / n));
      EXPECT_EQ(g[0].offsets, (std::vector<int64_t>{0, kIn * kHidden, kIn * kHidden + kHidden,
                                                    kIn * kHidden + kHidden + kHidden * kOut}));
      // The parameters are views of one buffer, in registration order; the shard aliases its slice.
      auto ps = model->parameters();
      const char* base = static_cast<const char*>(ps[0].data_ptr());
      for (size_t k = 0; k < ps.size(); ++k)
        EXPECT_EQ(static_cast<const char*>(ps[k].data_ptr()), base + g[0].offsets[k] * 4) << "parameter " << k;
      Tensor shard = zero.shard_parameters()[0];
      EXPECT_EQ(shard.numel(), padded / n);
      if (shard.numel() > 0) {
        EXPECT_EQ(static_cast<const char*>(shard.data_ptr()), base + g[0].shard_offset * 4);
      }
      EXPECT_EQ(zero.inner().parameters().size(), 1u);
      return 0;
    });
  }
}

TEST(ZeroLayout, FsdpFreesTheFullParametersOutsideForwardAndBackward) {
  on_local_ranks<int>(3, [](ProcessGroupPtr pg) {
    auto model = make_mlp(7);
    auto fsdp = std::make_shared<FullyShardedDataParallel>(model, factory(Opt::Adam), pg);
    EXPECT_FALSE(fsdp->parameters_gathered());
    for (const auto& p : model->parameters()) EXPECT_EQ(p.numel(), 0);
    Tensor loss = mse((*fsdp)(batch_x(0, 0, 4)), batch_y(0, 0, 4));
    EXPECT_TRUE(fsdp->parameters_gathered());
    auto sz = model->parameters()[0].sizes();
    EXPECT_EQ(std::vector<int64_t>(sz.begin(), sz.end()), (std::vector<int64_t>{kHidden, kIn}));
    loss.backward();
    fsdp->step();
    EXPECT_FALSE(fsdp->parameters_gathered());
    for (const auto& p : model->parameters()) {
      EXPECT_EQ(p.numel(), 0);
      EXPECT_FALSE(p.grad().defined());
    }
    EXPECT_EQ(fsdp->name(), "FullyShardedDataParallel");
    return 0;
  });
}

// ------------------------------------------------------------------------------------------ memory

TEST(ZeroMemory, BytesPerRankFollowTheClosedForm) {
  // After one step of SGD with momentum (state: one buffer per shard), float32, P = 53 elements,
  // Pp = P padded to a multiple of N, S = Pp / N:
  //   stage 1: params Pp + grads P (full .grad) + state S;   stage 2: Pp + S + S;   stage 3: S + S + S.
  // Adam's state is 2 S elements plus its float32 step scalar.
  std::map<std::pair<int, int>, int64_t> total;
  for (Opt o : {Opt::SGD, Opt::Adam}) {
    for (int n : {1, 2, 3, 4}) {
      const int64_t Pp = (kNumel + n - 1) / n * n, S = Pp / n, P = kNumel;
      for (int stage : {1, 2, 3}) {
        auto mem = on_local_ranks<ShardMemory>(n, [&](ProcessGroupPtr pg) {
          Trainer t(pg, stage, o, make_mlp(1));
          t.train(pg, 0, 1);
          return t.memory();
        });
        const int64_t params = 4 * (stage < 3 ? Pp : S);
        const int64_t grads = 4 * (stage == 1 ? P : S);
        const int64_t state = o == Opt::SGD ? 4 * S : 4 * 2 * S + 4;
        for (int r = 0; r < n; ++r) {
          EXPECT_EQ(mem[r].params, params) << opt_name(o) << " stage " << stage << " rank " << r << " of " << n;
          EXPECT_EQ(mem[r].grads, grads) << opt_name(o) << " stage " << stage << " rank " << r << " of " << n;
          EXPECT_EQ(mem[r].optimizer_state, state) << opt_name(o) << " stage " << stage << " rank " << r << " of " << n;
          EXPECT_EQ(mem[r].total(), params + grads + state);
        }
        if (o == Opt::Adam) total[std::make_pair(stage, n)] = mem[0].total();
      }
    }
  }
  // Falls with N: stage 3 at 4 ranks holds about a quarter of 1 rank's.
  auto tot = [&](int stage, int n) { return total[std::make_pair(stage, n)]; };
  for (int stage : {1, 2, 3}) EXPECT_LT(tot(stage, 4), tot(stage, 1)) << "stage " << stage;
  EXPECT_LT(tot(3, 4) * 3, tot(3, 1));
  EXPECT_LT(tot(3, 4), tot(2, 4));
  EXPECT_LT(tot(2, 4), tot(1, 4));
}

// ------------------------------------------------------------------------------------------ checkpoint

TEST(ZeroCheckpoint, ShardedStateDictPiecesTileEveryTensor) {
  const int n = 3;
  struct Got {
    std::vector<ShardedTensor> dict;
    Values params;
  };
  auto got = on_local_ranks<Got>(n, [](ProcessGroupPtr pg) {
    Trainer t(pg, 2, Opt::Adam, make_mlp(5));
    t.train(pg, 0, 2);
    return Got{t.sharded(), t.params()};
  });
  std::vector<std::vector<ShardedTensor>> dicts;
  for (auto& g : got) dicts.push_back(g.dict);
  // The model entries' pieces, concatenated in rank order, are the parameters.
  for (size_t i = 0; i < got[0].params.size(); ++i) {
    std::vector<double> cat;
    for (int r = 0; r < n; ++r) {
      auto v = dicts[r][i].shard.to_vector<double>();
      cat.insert(cat.end(), v.begin(), v.end());
    }
    EXPECT_EQ(cat, got[0].params[i]) << dicts[0][i].name;
  }
  // Every sharded entry: the ranks' pieces are disjoint, in rank order, and cover the full tensor.
  for (size_t e = 0; e < dicts[0].size(); ++e) {
    const ShardedTensor& t0 = dicts[0][e];
    int64_t numel = 1;
    for (int64_t d : t0.full_shape) numel *= d;
    if (t0.replicated) {
      for (int r = 1; r < n; ++r) EXPECT_TRUE(dicts[r][e].replicated) << t0.name;
      continue;
    }
    int64_t next = 0;
    for (int r = 0; r < n; ++r) {
      const ShardedTensor& t = dicts[r][e];
      EXPECT_EQ(t.name, t0.name);
      EXPECT_EQ(t.full_shape, t0.full_shape);
      EXPECT_EQ(t.shard.numel(), t.length) << t.name << " rank " << r;
      if (t.length == 0) continue;
      EXPECT_EQ(t.offset, next) << t.name << " rank " << r;
      next = t.offset + t.length;
    }
    EXPECT_EQ(next, numel) << t0.name;
  }
  // The names: every parameter, and Adam's two moments for each.
  std::vector<std::string> names;
  for (const auto& t : dicts[0]) names.push_back(t.name);
  for (const char* want : {"model.0.weight", "model.2.bias", "optim.0.weight.exp_avg", "optim.2.bias.exp_avg_sq",
                           "optim.state.0.step", "optim.param_groups.0.lr"})
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;
}

TEST(ZeroCheckpoint, SavedAtTwoRanksResumesAtAnyWorldSizeAndStage) {
  for (Opt o : {Opt::SGD, Opt::Adam}) {
    const Values want = reference(o);
    for (int save_stage : {1, 2, 3}) {
      TempDir dir("resume");
      on_local_ranks<int>(2, [&](ProcessGroupPtr pg) {
        Trainer t(pg, save_stage, o, make_mlp(100));
        t.train(pg, 0, kSteps / 2);
        t.save(dir.str());
        return 0;
      });
      EXPECT_TRUE(std::filesystem::exists(dir.path / "index.troupe"));
      EXPECT_TRUE(std::filesystem::exists(dir.path / "rank0.troupe"));
      EXPECT_TRUE(std::filesystem::exists(dir.path / "rank1.troupe"));
      for (int n : {4, 3, 1}) {
        for (int load_stage : {1, 2, 3}) {
          auto got = on_local_ranks<Values>(n, [&](ProcessGroupPtr pg) {
            Trainer t(pg, load_stage, o, make_mlp(555));  // other values: all must come from the checkpoint
            t.load(dir.str());
            t.train(pg, kSteps / 2, kSteps);
            return t.params();
          });
          for (int r = 0; r < n; ++r)
            EXPECT_LE(max_diff(got[r], want), 1e-6) << opt_name(o) << ": saved at stage " << save_stage
                                                    << " on 2 ranks, loaded at stage " << load_stage << " on " << n
                                                    << " ranks, rank " << r;
        }
      }
    }
  }
}

TEST(ZeroCheckpoint, WithoutTheOptimizerStateTheResumedRunDiffers) {
  // Loading only the parameters (the optimizer state reset) ends elsewhere: the moments are needed.
  const Values want = reference(Opt::Adam);
  TempDir dir("nostate");
  on_local_ranks<int>(2, [&](ProcessGroupPtr pg) {
    Trainer t(pg, 2, Opt::Adam, make_mlp(100));
    t.train(pg, 0, kSteps / 2);
    t.save(dir.str());
    return 0;
  });
  auto got = on_local_ranks<Values>(2, [&](ProcessGroupPtr pg) {
    Trainer t(pg, 2, Opt::Adam, make_mlp(555));
    t.load(dir.str());
    // A fresh optimizer over the same parameters: loaded, state not (one wrapper at a time).
    t.zero.reset();
    ZeroOptimizer fresh(t.model, factory(Opt::Adam), 2, pg);
    const int64_t rows = kGlobalRows / pg->size(), r0 = pg->rank() * rows;
    for (int s = kSteps / 2; s < kSteps; ++s) {
      Tensor loss = mse((*t.model)(batch_x(s, r0, rows)), batch_y(s, r0, rows));
      fresh.zero_grad();
      loss.backward();
      fresh.step();
    }
    return values(*t.model);
  });
  EXPECT_GT(max_diff(got[0], want), 1e-4);
}

TEST(ZeroCheckpoint, ErrorsNameTheFileOrTheShapes) {
  TempDir dir("errors");
  on_local_ranks<int>(2, [&](ProcessGroupPtr pg) {
    Trainer t(pg, 2, Opt::Adam, make_mlp(100));
    t.train(pg, 0, 1);
    t.save(dir.str());
    return 0;
  });
  // Different shapes: hidden 7 instead of 5.
  auto shape_err = on_local_ranks<std::string>(2, [&](ProcessGroupPtr pg) {
    Trainer t(pg, 2, Opt::Adam, make_mlp(1, 7));
    return error_of([&] { t.load(dir.str()); });
  });
  for (const auto& e : shape_err) {
    EXPECT_TRUE(contains(e, "[load_sharded]")) << e;
    EXPECT_TRUE(contains(e, "model.0.weight")) << e;
    EXPECT_TRUE(contains(e, "[5, 6]") && contains(e, "[7, 6]")) << e;
  }
  // Not a checkpoint directory.
  TempDir empty_dir("empty");
  auto no_index = on_local_ranks<std::string>(1, [&](ProcessGroupPtr pg) {
    Trainer t(pg, 1, Opt::SGD, make_mlp(1));
    return error_of([&] { t.load(empty_dir.str()); });
  });
  EXPECT_TRUE(contains(no_index[0], "no index file")) << no_index[0];
  // A missing shard file: at 1 rank both old files are needed; at 4 ranks rank 3's slice lies in the old
  // rank 1's, so (at least) the ranks that need rank1.troupe fail.
  std::filesystem::remove(dir.path / "rank1.troupe");
  auto missing = on_local_ranks<std::string>(1, [&](ProcessGroupPtr pg) {
    Trainer t(pg, 3, Opt::Adam, make_mlp(1));
    return error_of([&] { t.load(dir.str()); });
  });
  EXPECT_TRUE(contains(missing[0], "missing shard file")) << missing[0];
  EXPECT_TRUE(contains(missing[0], "rank1.troupe")) << missing[0];
  EXPECT_TRUE(contains(missing[0], "2 ranks")) << missing[0];
}

// ------------------------------------------------------------------------------------------ errors

TEST(ZeroErrors, BadArgumentsAndDifferentModels) {
  auto pg1 = make_local_groups(1)[0];
  EXPECT_TRUE(contains(error_of([&] { ZeroOptimizer z(make_mlp(1), factory(Opt::SGD), 3, pg1); }),
                       "stage must be 1 or 2, got 3"));
  EXPECT_TRUE(contains(error_of([&] { ZeroOptimizer z(nullptr, factory(Opt::SGD), 1, pg1); }), "module is null"));
  EXPECT_TRUE(contains(error_of([&] {
                         ZeroOptimizer z(make_mlp(1), [](std::vector<Tensor>) { return nullptr; }, 1, pg1);
                       }),
                       "factory returned null"));
  EXPECT_TRUE(contains(error_of([&] {
                         auto m = make_mlp(1);
                         ZeroOptimizer z(m, [m](std::vector<Tensor>) { return make_opt(Opt::SGD, m->parameters()); },
                                         1, pg1);
                       }),
                       "does not hold every shard tensor"));
  auto errs = on_local_ranks<std::string>(2, [](ProcessGroupPtr pg) {
    return error_of([&] { ZeroOptimizer z(make_mlp(1, pg->rank() == 0 ? 5 : 4), factory(Opt::SGD), 2, pg); });
  });
  for (const auto& e : errs) {
    EXPECT_TRUE(contains(e, "[ZeroOptimizer] the model on rank 1 differs from rank 0's")) << e;
    EXPECT_TRUE(contains(e, "0.weight")) << e;
    // The first difference, as DDP names it (one shared check).
    EXPECT_TRUE(contains(e, "parameter 0 (0.weight): rank 0 has shape [5, 6] dtype float32 requires_grad, rank 1 has "
                            "shape [4, 6]")) << e;
  }
}

// ------------------------------------------------------------------------- overlap, units, accumulation

namespace {

// Three layers (35, 24 and 15 parameters): with children_wrap_policy, units "0", "2", "4"; the root
// unit holds nothing.
nn::ModulePtr make_deep(uint64_t seed) {
  std::lock_guard<std::mutex> lock(init_mutex());
  manual_seed(seed);
  return std::make_shared<nn::SequentialImpl>(std::make_shared<nn::LinearImpl>(kIn, 5), std::make_shared<nn::TanhImpl>(),
                                          std::make_shared<nn::LinearImpl>(5, 4), std::make_shared<nn::TanhImpl>(),
                                          std::make_shared<nn::LinearImpl>(4, kOut));
}
constexpr int64_t kDeepUnits[] = {kIn * 5 + 5, 5 * 4 + 4, 4 * kOut + kOut};

// One bucket (flat buffer) per parameter, so that buckets start one by one during backward.
constexpr double kTiny = 1e-6;
ZeroOptions per_param_buckets() { return ZeroOptions().bucket_cap_mb(kTiny).first_bucket_mb(kTiny); }
FSDPOptions units_options(bool reshard, bool per_param = true) {
  FSDPOptions o = FSDPOptions().auto_wrap_policy(children_wrap_policy()).reshard_after_forward(reshard);
  if (per_param) o.bucket_cap_mb(kTiny).first_bucket_mb(kTiny);
  return o;
}

// DistributedDataParallel on the same ranks, rows and accumulation as Trainer::train.
Values ddp_values(const ProcessGroupPtr& pg, Opt o, nn::ModulePtr model, int steps, int micro = 1) {
  auto ddp = std::make_shared<DistributedDataParallel>(model, pg);
  auto opt = make_opt(o, ddp->parameters());
  const int64_t rows = kGlobalRows / pg->size(), r0 = pg->rank() * rows;
  for (int s = 0; s < steps; ++s) {
    opt->zero_grad();
    for (int k = 0; k < micro; ++k) {
      const int b = micro == 1 ? s : s * micro + k;
      mse((*ddp)(batch_x(b, r0, rows)), batch_y(b, r0, rows)).backward();
    }
    opt->step();
  }
  return values(*model);
}

// The sharded configurations the overlap tests run.
struct Config {
  std::string name;
  int stage;
  ZeroOptions zo;
  FSDPOptions fo;
};
std::vector<Config> overlap_configs() {
  return {
      {"stage 2, one bucket per parameter", 2, per_param_buckets(), {}},
      {"stage 2, default buckets", 2, {}, {}},
      {"stage 2, reduce-scatter in step()", 2, per_param_buckets().overlap_comm(false), {}},
      {"stage 3, one unit, one bucket per parameter", 3, {}, FSDPOptions().bucket_cap_mb(kTiny).first_bucket_mb(kTiny)},
      {"stage 3, units, reshard_after_forward", 3, {}, units_options(true)},
      {"stage 3, units, reshard_after_forward, backward_prefetch", 3, {}, units_options(true).backward_prefetch(true)},
      {"stage 3, units, keep after forward", 3, {}, units_options(false)},
      {"stage 3, units, default buckets", 3, {}, units_options(true, false)},
      {"stage 3, units, reduce-scatter in step()", 3, {}, units_options(true).overlap_comm(false)},
  };
}

}  // namespace

TEST(ZeroOverlap, Stages2And3MatchDdpAfterTenSteps) {
  for (Opt o : {Opt::SGD, Opt::Adam}) {
    for (int n : {2, 3, 4}) {
      const auto want = on_local_ranks<Values>(n, [&](ProcessGroupPtr pg) {
        return ddp_values(pg, o, make_deep(100 + pg->rank()), kSteps);
      });
      for (const auto& c : overlap_configs()) {
        auto got = on_local_ranks<Values>(n, [&](ProcessGroupPtr pg) {
          Trainer t(pg, c.stage, o, make_deep(100 + pg->rank()), c.zo, c.fo);
          t.train(pg, 0, kSteps);
          return t.params();
        });
        for (int r = 0; r < n; ++r)
          EXPECT_LE(max_diff(got[r], want[r]), 1e-6) << opt_name(o) << ", " << c.name << ", rank " << r << " of " << n;
      }
    }
  }
}

TEST(ZeroOverlap, TheDdpComparisonCanFail) {
  // A different seed on the sharded side, or one step fewer, ends far beyond the tolerance.
  auto got = on_local_ranks<std::vector<double>>(2, [](ProcessGroupPtr pg) {
    const Values want = ddp_values(pg, Opt::Adam, make_deep(100), kSteps);
    Trainer other(pg, 3, Opt::Adam, make_deep(101), {}, units_options(true));
    other.train(pg, 0, kSteps);
    Trainer fewer(pg, 2, Opt::Adam, make_deep(100), per_param_buckets());
    fewer.train(pg, 0, kSteps - 1);
    return std::vector<double>{max_diff(other.params(), want), max_diff(fewer.params(), want)};
  });
  EXPECT_GT(got[0][0], 1e-3);
  EXPECT_GT(got[0][1], 1e-4);
}

TEST(ZeroOverlap, ReduceScattersStartFromTheHooksDuringBackward) {
  // Collectives issued during backward (the group's sequence numbers), one bucket per parameter
  // (6 parameters, 6 flat buffers; each unit has 2):
  //   stage 2: 6 reduce-scatters (none with overlap_comm false; they come in step());
  //   stage 3, units, reshard_after_forward: 3 units gathered again (2 all_gathers each) + 6;
  //   stage 3, units kept after forward: 6.
  // Every .grad is None after backward (moved into the buckets by the hooks).
  on_local_ranks<int>(2, [](ProcessGroupPtr pg) {
    struct Case {
      std::string name;
      int stage;
      ZeroOptions zo;
      FSDPOptions fo;
      uint64_t in_forward, in_backward;
    };
    for (const Case& c : std::vector<Case>{{"stage 2", 2, per_param_buckets(), {}, 0, 6},
                                          {"stage 2, overlap_comm false", 2, per_param_buckets().overlap_comm(false), {}, 0, 0},
                                          {"stage 3 units, reshard", 3, {}, units_options(true), 6, 12},
                                          {"stage 3 units, keep", 3, {}, units_options(false), 6, 6},
                                          {"stage 3 units, overlap_comm false", 3, {}, units_options(true).overlap_comm(false), 6, 6}}) {
      Trainer t(pg, c.stage, Opt::SGD, make_deep(3), c.zo, c.fo);
      EXPECT_EQ((t.fsdp ? t.fsdp->flat_shards() : t.zero->flat_shards()).size(), 6u) << c.name;
      const int64_t rows = kGlobalRows / 2;
      const uint64_t s0 = pg->sequence_number();
      Tensor out = t.fsdp ? (*t.fsdp)(batch_x(0, pg->rank() * rows, rows)) : (*t.model)(batch_x(0, pg->rank() * rows, rows));
      Tensor loss = mse(out, batch_y(0, pg->rank() * rows, rows));
      const uint64_t s1 = pg->sequence_number();
      loss.backward();
      const uint64_t s2 = pg->sequence_number();
      EXPECT_EQ(s1 - s0, c.in_forward) << c.name;
      EXPECT_EQ(s2 - s1, c.in_backward) << c.name;
      for (const auto& p : t.model->parameters()) EXPECT_FALSE(p.grad().defined()) << c.name;
      t.fsdp ? t.fsdp->step() : t.zero->step();
    }
    return 0;
  });
}

TEST(ZeroAccumulation, TwoBackwardCallsBeforeStepAddUp) {
  for (int n : {2, 3}) {
    const auto want = on_local_ranks<Values>(n, [&](ProcessGroupPtr pg) {
      return ddp_values(pg, Opt::Adam, make_deep(100), kSteps, /*micro=*/2);
    });
    // One backward per step ends elsewhere (the accumulation matters).
    const auto single = on_local_ranks<Values>(n, [&](ProcessGroupPtr pg) {
      return ddp_values(pg, Opt::Adam, make_deep(100), kSteps, 1);
    });
    EXPECT_GT(max_diff(single[0], want[0]), 1e-4);
    for (const auto& c : overlap_configs()) {
      auto got = on_local_ranks<Values>(n, [&](ProcessGroupPtr pg) {
        Trainer t(pg, c.stage, Opt::Adam, make_deep(100), c.zo, c.fo);
        t.train(pg, 0, kSteps, /*micro=*/2);
        return t.params();
      });
      for (int r = 0; r < n; ++r)
        EXPECT_LE(max_diff(got[r], want[r]), 1e-6) << c.name << ", rank " << r << " of " << n;
    }
  }
}

namespace {
// Layer "c" runs in forward but its output is not used: it gets no gradient, so its buckets complete
// only in step(), with zeros (and, in stage 3 keeping units after forward, it stays gathered until then).
class WithUnused : public nn::Module {
 public:
  explicit WithUnused(uint64_t seed) {
    std::lock_guard<std::mutex> lock(init_mutex());
    manual_seed(seed);
    a = register_module("a", std::make_shared<nn::LinearImpl>(kIn, kHidden));
    c = register_module("c", std::make_shared<nn::LinearImpl>(kHidden, kHidden));
    b = register_module("b", std::make_shared<nn::LinearImpl>(kHidden, kOut));
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = (*a)(x).tanh();
    Tensor ignored = (*c)(h);
    return (*b)(h);
  }
  std::shared_ptr<nn::LinearImpl> a, c, b;
};
}  // namespace

TEST(ZeroAccumulation, UnusedParametersCountAsZeroGradients) {
  // Plain SGD: a zero gradient leaves "c" where it was, as a single process that skips it (no .grad).
  auto plain = [](std::vector<Tensor> ps) { return std::make_unique<optim::SGD>(ps, optim::SGDOptions(0.1)); };
  auto reference = [&](int micro) {
    auto m = std::make_shared<WithUnused>(100);
    optim::SGD opt(m->parameters(), optim::SGDOptions(0.1));
    for (int s = 0; s < kSteps; ++s) {
      opt.zero_grad();
      for (int k = 0; k < micro; ++k) {
        const int b = micro == 1 ? s : s * micro + k;
        // Mean over the global batch of each micro-batch, as the ranks' average.
        mse((*m)(batch_x(b, 0, kGlobalRows)), batch_y(b, 0, kGlobalRows)).backward();
      }
      opt.step();
    }
    return values(*m);
  };
  for (int micro : {1, 2}) {
    const Values want = reference(micro);
    for (int variant : {2, 3, 4}) {  // stage 2; stage 3 units freed after forward; kept after forward
      const int stage = variant == 2 ? 2 : 3;
      const bool reshard = variant == 3;
      auto got = on_local_ranks<Values>(2, [&](ProcessGroupPtr pg) {
        auto m = std::make_shared<WithUnused>(100);
        std::unique_ptr<ZeroOptimizer> zero;
        std::shared_ptr<FullyShardedDataParallel> fsdp;
        if (stage == 2)
          zero = std::make_unique<ZeroOptimizer>(m, plain, 2, pg, per_param_buckets());
        else
          fsdp = std::make_shared<FullyShardedDataParallel>(m, plain, pg, units_options(reshard));
        const int64_t rows = kGlobalRows / 2, r0 = pg->rank() * rows;
        for (int s = 0; s < kSteps; ++s) {
          zero ? zero->zero_grad() : fsdp->zero_grad();
          for (int k = 0; k < micro; ++k) {
            const int b = micro == 1 ? s : s * micro + k;
            Tensor out = fsdp ? (*fsdp)(batch_x(b, r0, rows)) : (*m)(batch_x(b, r0, rows));
            mse(out, batch_y(b, r0, rows)).backward();
          }
          if (fsdp) {
            EXPECT_EQ(fsdp->units()[2].name, "c");
            EXPECT_EQ(fsdp->unit_gathered(2), !reshard) << "unit c got no gradient: kept until step() unless freed "
                                                           "after forward";
            EXPECT_FALSE(fsdp->unit_gathered(1)) << "unit a: freed once its gradients were in";
          }
          zero ? zero->step() : fsdp->step();
          if (fsdp) {
            EXPECT_FALSE(fsdp->unit_gathered(2));
          }
        }
        if (fsdp) fsdp->gather_parameters();
        return values(*m);
      });
      for (int r = 0; r < 2; ++r)
        EXPECT_LE(max_diff(got[r], want), 1e-6) << "variant " << variant << ", " << micro
                                                << " backward calls per step, rank " << r;
    }
  }
}

TEST(FsdpUnits, ChildrenWithParametersBecomeUnits) {
  on_local_ranks<int>(2, [](ProcessGroupPtr pg) {
    auto model = make_deep(1);
    FullyShardedDataParallel fsdp(model, factory(Opt::SGD), pg, units_options(true, false));
    const auto& units = fsdp.units();
    EXPECT_EQ(units.size(), 4u);  // the root and the three Linear layers (Tanh has no parameters)
    if (units.size() != 4) return 0;
    EXPECT_EQ(units[0].name, "");
    EXPECT_TRUE(units[0].params.empty());
    const char* names[] = {"0", "2", "4"};
    for (size_t u = 1; u < 4; ++u) {
      EXPECT_EQ(units[u].name, names[u - 1]);
      EXPECT_EQ(units[u].params, (std::vector<size_t>{2 * (u - 1), 2 * (u - 1) + 1}));
      EXPECT_EQ(units[u].flat_shards.size(), 1u);  // one bucket: the unit's weight and bias
      const int64_t padded = (kDeepUnits[u - 1] + 1) / 2 * 2;
      EXPECT_EQ(units[u].full_bytes, 4 * padded) << units[u].name;
      for (size_t g : units[u].flat_shards) EXPECT_EQ(fsdp.flat_shards()[g].unit, u);
      EXPECT_FALSE(fsdp.unit_gathered(u));
    }
    // A user-given list: layers "0" and "4"; "2" stays with the root.
    auto m2 = make_deep(1);
    auto kids = m2->children();
    FullyShardedDataParallel listed(m2, factory(Opt::SGD), pg,
                                    FSDPOptions().auto_wrap_policy(modules_wrap_policy({kids[0], kids[4]})));
    EXPECT_EQ(listed.units().size(), 3u);
    if (listed.units().size() == 3) {
      EXPECT_EQ(listed.units()[0].params, (std::vector<size_t>{2, 3}));
      EXPECT_EQ(listed.units()[1].name, "0");
      EXPECT_EQ(listed.units()[2].name, "4");
    }
    EXPECT_TRUE(contains(error_of([&] { listed.unit_gathered(3); }), "there are 3 units"));
    return 0;
  });
}

namespace {
// A unit with a parameter of its own around a nested unit.
class Scaled : public nn::Module {
 public:
  Scaled() {
    scale = register_parameter("scale", full({5}, 0.9));
    lin = register_module("lin", std::make_shared<nn::LinearImpl>(5, 5));
  }
  Tensor forward(const Tensor& x) override { return (*lin)(x) * scale; }
  Tensor scale;
  std::shared_ptr<nn::LinearImpl> lin;
};
// Two layers sharing one weight (in no single one of them: it goes to their common unit).
class Tied : public nn::Module {
 public:
  Tied() {
    a = register_module("a", std::make_shared<nn::LinearImpl>(5, 5));
    b = register_module("b", std::make_shared<nn::LinearImpl>(5, 5));
    b->weight = b->register_parameter("weight", a->weight);
  }
  Tensor forward(const Tensor& x) override { return (*b)((*a)(x).tanh()); }
  std::shared_ptr<nn::LinearImpl> a, b;
};
class Composite : public nn::Module {
 public:
  explicit Composite(uint64_t seed) {
    std::lock_guard<std::mutex> lock(init_mutex());
    manual_seed(seed);
    inp = register_module("inp", std::make_shared<nn::LinearImpl>(kIn, 5));
    block = register_module("block", std::make_shared<Scaled>());
    tied = register_module("tied", std::make_shared<Tied>());
    out = register_module("out", std::make_shared<nn::LinearImpl>(5, kOut));
  }
  Tensor forward(const Tensor& x) override { return (*out)((*tied)((*block)((*inp)(x).tanh()))); }
  std::shared_ptr<nn::LinearImpl> inp, out;
  std::shared_ptr<Scaled> block;
  std::shared_ptr<Tied> tied;
};
}  // namespace

TEST(FsdpUnits, NestedUnitsAndSharedParametersMatchDdp) {
  // Every submodule is offered as a unit: a parameter goes to the innermost unit holding every module
  // that holds it; the shared weight to "tied".
  auto every = [](const std::string&, const nn::Module&) { return true; };
  for (int n : {2, 3}) {
    const auto want = on_local_ranks<Values>(n, [&](ProcessGroupPtr pg) {
      return ddp_values(pg, Opt::Adam, std::make_shared<Composite>(100), kSteps);
    });
    for (bool reshard : {true, false}) {
      auto got = on_local_ranks<Values>(n, [&](ProcessGroupPtr pg) {
        auto model = std::make_shared<Composite>(100);
        Trainer t(pg, 3, Opt::Adam, model, {}, FSDPOptions().auto_wrap_policy(every).reshard_after_forward(reshard));
        std::vector<std::string> names;
        std::map<std::string, std::vector<size_t>> params;
        for (const auto& u : t.fsdp->units()) {
          names.push_back(u.name);
          params[u.name] = u.params;
        }
        // Parameters (registration order): inp.weight 0, inp.bias 1, block.scale 2, block.lin.weight 3,
        // block.lin.bias 4, tied.a.weight 5 (= tied.b.weight), tied.a.bias 6, tied.b.bias 7, out.* 8, 9.
        EXPECT_EQ(names, (std::vector<std::string>{"", "inp", "block", "block.lin", "tied", "tied.a", "tied.b", "out"}));
        EXPECT_EQ(params["block"], std::vector<size_t>{2});
        EXPECT_EQ(params["tied"], std::vector<size_t>{5});
        EXPECT_EQ(params["tied.b"], std::vector<size_t>{7});
        EXPECT_TRUE(params[""].empty());
        t.train(pg, 0, kSteps);
        return t.params();
      });
      for (int r = 0; r < n; ++r)
        EXPECT_LE(max_diff(got[r], want[r]), 1e-6) << (reshard ? "reshard" : "kept") << ", rank " << r << " of " << n;
    }
  }
}

TEST(FsdpUnits, ForwardHoldsOneUnitsFullParametersAtATime) {
  // Float32, N ranks, unit u's padded size Pu = ceil(numel_u / N) * N, shards S = sum Pu / N:
  //   forward peak of parameter bytes: 4 (S + max Pu) freeing after forward, 4 (S + sum Pu) keeping;
  //   after forward: 4 S resp. 4 (S + sum Pu); through backward, freeing each unit once its gradients
  //   are in: 4 (S + max Pu) (each unit's gradients are in before backward reaches the unit before it),
  //   with backward_prefetch at most 4 (S + the two largest Pu).
  for (int n : {1, 2, 3, 4}) {
    int64_t S = 0, sum = 0, largest = 0, second = 0;
    for (int64_t numel : kDeepUnits) {
      const int64_t P = (numel + n - 1) / n * n;
      S += P / n;
      sum += P;
      second = std::max(second, std::min(largest, P));
      largest = std::max(largest, P);
    }
    for (int variant : {0, 1, 2}) {  // reshard_after_forward; the same with backward_prefetch; kept
      const bool reshard = variant < 2, prefetch = variant == 1;
      auto got = on_local_ranks<std::vector<int64_t>>(n, [&](ProcessGroupPtr pg) {
        auto fsdp = std::make_shared<FullyShardedDataParallel>(make_deep(1), factory(Opt::SGD), pg,
                                                               units_options(reshard, false).backward_prefetch(prefetch));
        const int64_t rows = kGlobalRows / n, r0 = pg->rank() * rows;
        fsdp->train(true);
        fsdp->zero_grad();
        fsdp->reset_peak_memory_stats();
        Tensor loss = mse((*fsdp)(batch_x(0, r0, rows)), batch_y(0, r0, rows));
        const int64_t forward_peak = fsdp->max_memory_per_rank().params;
        const int64_t after_forward = fsdp->memory_per_rank().params;
        loss.backward();
        const int64_t iteration_peak = fsdp->max_memory_per_rank().params;
        const int64_t after_backward = fsdp->memory_per_rank().params;
        fsdp->step();
        return std::vector<int64_t>{forward_peak, after_forward, iteration_peak, after_backward};
      });
      for (int r = 0; r < n; ++r) {
        const auto& g = got[r];
        const std::string what = std::string(reshard ? "reshard_after_forward, " : "kept after forward, ") +
                                 (prefetch ? "backward_prefetch, " : "") + std::to_string(n) + " ranks, rank " +
                                 std::to_string(r);
        EXPECT_EQ(g[0], 4 * (S + (reshard ? largest : sum))) << what;
        EXPECT_EQ(g[1], 4 * (S + (reshard ? 0 : sum))) << what;
        if (prefetch) {
          EXPECT_LE(g[2], 4 * (S + largest + second)) << what;
        } else {
          EXPECT_EQ(g[2], 4 * (S + (reshard ? largest : sum))) << what;
        }
        EXPECT_EQ(g[3], 4 * S) << what << ": every unit freed once its gradients are in";
        if (reshard) {
          EXPECT_LT(g[0], 4 * (S + sum)) << what;
        }
      }
    }
  }
}

TEST(FsdpUnits, CheckpointRoundTripTwoToFourToOneRanks) {
  // Units on every side; Adam (its step count must come through); then a units checkpoint into
  // stage 2 with one bucket per parameter (another buffer layout) and into one FSDP unit.
  const Values want = on_local_ranks<Values>(1, [](ProcessGroupPtr pg) {
    return ddp_values(pg, Opt::Adam, make_deep(100), kSteps);
  })[0];
  TempDir a("units2"), b("units4");
  on_local_ranks<int>(2, [&](ProcessGroupPtr pg) {
    Trainer t(pg, 3, Opt::Adam, make_deep(100), {}, units_options(true));
    t.train(pg, 0, 4);
    t.save(a.str());
    return 0;
  });
  on_local_ranks<int>(4, [&](ProcessGroupPtr pg) {
    Trainer t(pg, 3, Opt::Adam, make_deep(555), {}, units_options(false, false));
    t.load(a.str());
    t.train(pg, 4, 7);
    t.save(b.str());
    return 0;
  });
  struct Load {
    std::string name;
    int stage;
    ZeroOptions zo;
    FSDPOptions fo;
  };
  for (const Load& l : std::vector<Load>{{"units", 3, {}, units_options(true)},
                                         {"stage 2, one bucket per parameter", 2, per_param_buckets(), {}},
                                         {"one unit", 3, {}, {}}}) {
    auto got = on_local_ranks<Values>(1, [&](ProcessGroupPtr pg) {
      Trainer t(pg, l.stage, Opt::Adam, make_deep(555), l.zo, l.fo);
      t.load(b.str());
      t.train(pg, 7, kSteps);
      return t.params();
    });
    EXPECT_LE(max_diff(got[0], want), 1e-6) << "saved at 2 then 4 ranks with units, loaded at 1 rank: " << l.name;
  }
}

TEST(ZeroErrors, OneWrapperPerParameter) {
  auto pg1 = make_local_groups(1)[0];
  auto m = make_mlp(1);
  auto first = std::make_unique<ZeroOptimizer>(m, factory(Opt::SGD), 2, pg1);
  const std::string e = error_of([&] { FullyShardedDataParallel f(m, factory(Opt::SGD), pg1); });
  EXPECT_TRUE(contains(e, "[FullyShardedDataParallel] parameter 0.weight is already wrapped")) << e;
  first.reset();
  EXPECT_EQ(error_of([&] { ZeroOptimizer again(m, factory(Opt::SGD), 2, pg1); }), "<no exception>");
  EXPECT_TRUE(contains(error_of([&] { ZeroOptimizer z(make_mlp(1), factory(Opt::SGD), 2, pg1, ZeroOptions().bucket_cap_mb(0)); }),
                       "bucket_cap_mb and first_bucket_mb must be positive"));
}

// ------------------------------------------------------------------------------- mpi (under mpirun)

#ifdef TROUPE_HAVE_MPI

#define ZERO_MPI_SETUP(pg)                                                  \
  if (!started_by_mpirun()) GTEST_SKIP() << "not started by mpirun";       \
  ProcessGroupPtr pg = troupe::testing::mpi_test_world();                  \
  if (pg->size() < 2) GTEST_SKIP() << "needs mpirun -np 2 or more";        \
  if (kGlobalRows % pg->size() != 0) GTEST_SKIP() << "needs a world size dividing " << kGlobalRows;

TEST(ZeroMpi, AllStagesMatchOneProcessOnTheConcatenatedBatch) {
  ZERO_MPI_SETUP(pg);
  for (Opt o : {Opt::SGD, Opt::Adam}) {
    const Values want = reference(o);
    for (int stage : {1, 2, 3}) {
      Trainer t(pg, stage, o, make_mlp(100 + pg->rank()));
      t.train(pg, 0, kSteps);
      EXPECT_LE(max_diff(t.params(), want), 1e-6) << opt_name(o) << ", stage " << stage << ", rank " << pg->rank();
    }
  }
}

TEST(ZeroMpi, OverlapAndUnitsMatchDdp) {
  ZERO_MPI_SETUP(pg);
  for (int micro : {1, 2}) {
    const Values want = ddp_values(pg, Opt::Adam, make_deep(100 + pg->rank()), kSteps, micro);
    for (const auto& c : overlap_configs()) {
      Trainer t(pg, c.stage, Opt::Adam, make_deep(100 + pg->rank()), c.zo, c.fo);
      t.train(pg, 0, kSteps, micro);
      EXPECT_LE(max_diff(t.params(), want), 1e-6) << c.name << ", " << micro << " backward calls per step, rank "
                                                  << pg->rank() << " of " << pg->size();
    }
  }
}

TEST(ZeroMpi, CheckpointSavedByMpiRanksResumesOnLocalRanks) {
  ZERO_MPI_SETUP(pg);
  const Values want = reference(Opt::Adam);
  // One directory for every process: rank 0's pid.
  Tensor id = tensor(std::vector<int64_t>{static_cast<int64_t>(::getpid())});
  pg->broadcast(id, 0);
  const auto dir = std::filesystem::temp_directory_path() /
                   ("troupe_zero_mpi_" + std::to_string(id.to_vector<int64_t>()[0]));
  {
    Trainer t(pg, 3, Opt::Adam, make_mlp(100));
    t.train(pg, 0, kSteps / 2);
    t.save(dir.string());
  }
  // Every process resumes on its own 3 local ranks, and on the mpi world at stage 2.
  auto got = on_local_ranks<Values>(3, [&](ProcessGroupPtr lpg) {
    Trainer t(lpg, 1, Opt::Adam, make_mlp(555));
    t.load(dir.string());
    t.train(lpg, kSteps / 2, kSteps);
    return t.params();
  });
  for (int r = 0; r < 3; ++r) EXPECT_LE(max_diff(got[r], want), 1e-6) << "local rank " << r;
  Trainer t(pg, 2, Opt::Adam, make_mlp(555));
  t.load(dir.string());
  t.train(pg, kSteps / 2, kSteps);
  EXPECT_LE(max_diff(t.params(), want), 1e-6) << "mpi rank " << pg->rank();
  pg->barrier();
  if (pg->rank() == 0) std::filesystem::remove_all(dir);
}
#endif  // TROUPE_HAVE_MPI
