// ZeRO stages 1-3 (comm/zero.h) on the `local` backend (1-4 ranks as threads): training equals one
// process on the concatenated batch (SGD with momentum, Adam; float32 and mixed float32/float64 models;
// parameter counts not divisible by the world size), the flat layout, bytes per rank in closed form,
// the sharded checkpoint (saved at 2 ranks, loaded at 4, 3 and 1, across stages, continuing to the
// uninterrupted run's result), and the errors.
#include <troupe/comm/comm.h>
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
  return std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(kIn, hidden), std::make_shared<nn::Tanh>(),
                                          std::make_shared<nn::Linear>(hidden, kOut));
}

// A float32 layer then a float64 layer: two flat buffers.
class Mixed : public nn::Module {
 public:
  explicit Mixed(uint64_t seed) {
    std::lock_guard<std::mutex> lock(init_mutex());
    manual_seed(seed);
    a = register_module("a", std::make_shared<nn::Linear>(kIn, kHidden));
    b = register_module("b", std::make_shared<nn::Linear>(kHidden, kOut));
    b->to(kFloat64);
  }
  Tensor forward(const Tensor& x) override { return (*b)((*a)(x).tanh().to(kFloat64)).to(kFloat32); }
  std::shared_ptr<nn::Linear> a, b;
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

  Trainer(const ProcessGroupPtr& pg, int stage, Opt o, nn::ModulePtr m) : model(std::move(m)) {
    if (stage == 3)
      fsdp = std::make_shared<FullyShardedDataParallel>(model, factory(o), pg);
    else
      zero = std::make_unique<ZeroOptimizer>(model, factory(o), stage, pg);
  }
  void train(const ProcessGroupPtr& pg, int from, int to) {
    const int64_t rows = kGlobalRows / pg->size(), r0 = pg->rank() * rows;
    for (int s = from; s < to; ++s) {
      Tensor out = fsdp ? (*fsdp)(batch_x(s, r0, rows)) : (*model)(batch_x(s, r0, rows));
      Tensor loss = mse(out, batch_y(s, r0, rows));
      if (fsdp) {
        fsdp->zero_grad();
        loss.backward();
        fsdp->step();
      } else {
        zero->zero_grad();
        loss.backward();
        zero->step();
      }
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

template <class R>
std::vector<R> on_local_ranks(int n, const std::function<R(ProcessGroupPtr)>& fn) {
  std::vector<R> out(static_cast<size_t>(n));
  GroupOptions o;
  o.timeout = 60s;
  run_local(n, [&](ProcessGroupPtr pg) { out[static_cast<size_t>(pg->rank())] = fn(pg); }, o);
  return out;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "<no exception>";
}
bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

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
      auto lin = std::make_shared<nn::Linear>(3, 2);
      ZeroOptimizer zero(lin, factory(Opt::SGD), stage, pg);
      // Every rank's loss is (rank + 1) * sum(out): the average gradient of the bias is 1.5.
      ((*lin)(ones({1, 3})).sum() * static_cast<double>(pg->rank() + 1)).backward();
      zero.step();
      if (stage == 1) {
        EXPECT_TRUE(lin->bias.grad().defined());
        if (lin->bias.grad().defined())
          for (float g : lin->bias.grad().to_vector<float>()) EXPECT_NEAR(g, 1.5, 1e-6);
      } else {
        EXPECT_FALSE(lin->bias.grad().defined()) << "stage 2 keeps only the shard's gradient";
        const Tensor& sg = zero.shard_parameters()[0].grad();
        EXPECT_TRUE(sg.defined());
        if (sg.defined()) EXPECT_EQ(sg.numel(), 4);  // 8 elements over 2 ranks
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
      if (shard.numel() > 0)
        EXPECT_EQ(static_cast<const char*>(shard.data_ptr()), base + g[0].shard_offset * 4);
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
    // A fresh optimizer over the same shards: parameters loaded, state not.
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
  }
}

// ------------------------------------------------------------------------------- mpi (under mpirun)

#ifdef TROUPE_HAVE_MPI
namespace {
ProcessGroupPtr zero_mpi_world() {
  static ProcessGroupPtr w = [] {
    GroupOptions o;
    o.timeout = 60s;
    auto g = make_mpi_world(o);
    std::atexit([] { mpi_finalize(); });
    return g;
  }();
  return w;
}
}  // namespace

#define ZERO_MPI_SETUP(pg)                                                  \
  if (!started_by_mpirun()) GTEST_SKIP() << "not started by mpirun";       \
  ProcessGroupPtr pg = zero_mpi_world();                                    \
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
