// The `local` backend: every collective x dtypes x world sizes 1-4 (ranks as threads) against closed
// forms in rank and size, async order and overlap, sub-groups, send/recv, errors, timeouts, aborts.
// (Over 800 lines, kept whole: one table of collectives x dtypes x world sizes and the helpers that
// compute closed forms for them; the error and timeout cases share those helpers.)
#include <troupe/comm/comm.h>
#include <troupe/tensor/ops.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <thread>

using namespace troupe;
using namespace troupe::comm;
using namespace std::chrono_literals;

namespace {

const std::vector<ScalarType> kAllDtypes = {kFloat32, kFloat64, kInt32, kInt64, kBFloat16, kFloat16, kUInt8, kBool};
const std::vector<ScalarType> kFloatDtypes = {kFloat32, kFloat64, kBFloat16, kFloat16};
const std::vector<int> kWorldSizes = {1, 2, 3, 4};
// Shapes of the tensors reduced: empty, one element, odd counts (uneven shares over the ranks), 2-D, large.
const std::vector<std::vector<int64_t>> kShapes = {{0}, {1}, {7}, {5, 3}, {2, 0, 3}, {1000}, {70001}};

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// A contiguous tensor of `dtype` and `shape` whose flat element i is f(i).
Tensor make(const std::vector<int64_t>& shape, ScalarType dtype, const std::function<double(int64_t)>& f) {
  std::vector<double> v(static_cast<size_t>(numel_of(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = f(static_cast<int64_t>(i));
  return tensor(v, kFloat64).to(dtype).reshape(shape).contiguous();
}

std::vector<double> values(const Tensor& t) { return t.to(kFloat64).contiguous().to_vector<double>(); }

// Checks every element of t against want(i) (NaN equals NaN); reports the first difference only.
void expect_values(const Tensor& t, const std::function<double(int64_t)>& want, const std::string& what) {
  auto got = values(t);
  for (size_t i = 0; i < got.size(); ++i) {
    const double w = want(static_cast<int64_t>(i));
    if (!(got[i] == w || (std::isnan(got[i]) && std::isnan(w)))) {
      ADD_FAILURE() << what << ": element " << i << " is " << got[i] << ", expected " << w;
      return;
    }
  }
}

std::string label(const char* op, ScalarType dt, const std::vector<int64_t>& shape, int rank, int size) {
  std::string s = std::string(op) + " " + dtype_name(dt) + " [";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "] on rank " + std::to_string(rank) + " of " + std::to_string(size);
}

// "[fn] group 'world' (local, rank r of n): ", the prefix of the front's argument errors.
std::string at(const char* fn, const ProcessGroupPtr& pg) {
  return std::string("[") + fn + "] group '" + pg->options().name + "' (local, rank " + std::to_string(pg->rank()) +
         " of " + std::to_string(pg->size()) + "): ";
}

// The message of the E that f throws, or "<no exception>".
template <typename E = CommError, typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "<no exception>";
}

double wrap_u8(double x) { return std::fmod(x, 256.0); }

// Closed forms of every rank's contribution and of the reduction, for each op. Numbers stay small
// enough to be exact in bfloat16 (at most 8 significant bits).
struct ReduceCase {
  ReduceOp op;
  // Element i of rank r's input for a world of s ranks (non-bool dtypes).
  double input(int r, int s, int64_t i) const {
    switch (op) {
      case ReduceOp::PRODUCT: return (r + 1) * (1 + i % 2);
      case ReduceOp::MIN:
      case ReduceOp::MAX: return static_cast<double>(i % 3 + 2 * ((r + i) % s));
      default: return (r + 1) * (1 + i % 3);
    }
  }
  double expected(int s, int64_t i, ScalarType dt) const {
    const double tri = s * (s + 1) / 2.0;
    switch (op) {
      case ReduceOp::SUM: return (1 + i % 3) * tri;
      case ReduceOp::AVG: return (1 + i % 3) * (s + 1) / 2.0;
      case ReduceOp::PRODUCT: {
        double f = 1;
        for (int k = 2; k <= s; ++k) f *= k;
        double x = f * std::pow(1 + i % 2, s);
        return dt == kUInt8 ? wrap_u8(x) : x;
      }
      case ReduceOp::MIN: return static_cast<double>(i % 3);
      case ReduceOp::MAX: return static_cast<double>(i % 3 + 2 * (s - 1));
    }
    return 0;
  }
  // bool: SUM and MAX are OR, PRODUCT and MIN are AND.
  bool is_or() const { return op == ReduceOp::SUM || op == ReduceOp::MAX; }
  double bool_input(int r, int s, int64_t i) const { return is_or() ? (i % (s + 1) == r) : (i % (s + 1) != r); }
  double bool_expected(int s, int64_t i) const { return is_or() ? (i % (s + 1) < s) : (i % (s + 1) == s); }

  double in(int r, int s, int64_t i, ScalarType dt) const { return dt == kBool ? bool_input(r, s, i) : input(r, s, i); }
  double out(int s, int64_t i, ScalarType dt) const { return dt == kBool ? bool_expected(s, i) : expected(s, i, dt); }
  bool applies(ScalarType dt) const { return op != ReduceOp::AVG || is_floating_point(dt); }
};

const std::vector<ReduceCase> kReduceCases = {
    {ReduceOp::SUM}, {ReduceOp::AVG}, {ReduceOp::PRODUCT}, {ReduceOp::MIN}, {ReduceOp::MAX}};

// Small values for data movement (exact in every dtype; bool gets their parity).
double mv(ScalarType dt, double x) { return dt == kBool ? static_cast<double>(static_cast<int64_t>(x) % 2 != 0) : x; }

}  // namespace

// ---------------------------------------------------------------------------------------------
// Basics

TEST(CommLocal, ReduceOpNames) {
  EXPECT_STREQ(reduce_op_name(ReduceOp::SUM), "SUM");
  EXPECT_STREQ(reduce_op_name(ReduceOp::AVG), "AVG");
  EXPECT_STREQ(reduce_op_name(ReduceOp::PRODUCT), "PRODUCT");
  EXPECT_STREQ(reduce_op_name(ReduceOp::MIN), "MIN");
  EXPECT_STREQ(reduce_op_name(ReduceOp::MAX), "MAX");
}

TEST(CommLocal, GroupsKnowTheirRanks) {
  for (int s : kWorldSizes) {
    auto groups = make_local_groups(s, GroupOptions{200ms, "w"});
    ASSERT_EQ(groups.size(), static_cast<size_t>(s));
    for (int r = 0; r < s; ++r) {
      EXPECT_EQ(groups[r]->rank(), r);
      EXPECT_EQ(groups[r]->size(), s);
      EXPECT_EQ(groups[r]->backend(), "local");
      EXPECT_EQ(groups[r]->options().name, "w");
      EXPECT_EQ(groups[r]->options().timeout, 200ms);
      EXPECT_EQ(groups[r]->sequence_number(), 0u);
    }
  }
  EXPECT_THROW(make_local_groups(0), CommError);
  EXPECT_THROW(run_local(-1, [](ProcessGroupPtr) {}), CommError);
}

TEST(CommLocal, WorldIsTheRanksGroupInsideRunLocal) {
  auto outer = make_local_groups(1)[0];
  set_world(outer);
  std::atomic<int> ok{0};
  run_local(3, [&](ProcessGroupPtr pg) {
    EXPECT_EQ(world(), pg);
    EXPECT_EQ(world()->rank(), pg->rank());
    std::thread([&] { EXPECT_EQ(world(), outer); }).join();  // other threads see the process-wide one
    ++ok;
  });
  EXPECT_EQ(ok.load(), 3);
  EXPECT_EQ(world(), outer);
  set_world(nullptr);
  EXPECT_EQ(world(), nullptr);
}

// ---------------------------------------------------------------------------------------------
// Collectives x dtypes x world sizes, against closed forms

TEST(CommLocal, AllReduceEveryOpDtypeAndSize) {
  for (int s : kWorldSizes) {
    run_local(s, [&](ProcessGroupPtr pg) {
      const int r = pg->rank();
      for (const auto& rc : kReduceCases)
        for (ScalarType dt : kAllDtypes) {
          if (!rc.applies(dt)) continue;
          for (const auto& shape : kShapes) {
            Tensor t = make(shape, dt, [&](int64_t i) { return rc.in(r, s, i, dt); });
            pg->all_reduce(t, rc.op);
            EXPECT_EQ(t.sizes().vec(), shape);
            EXPECT_EQ(t.dtype(), dt);
            expect_values(t, [&](int64_t i) { return rc.out(s, i, dt); },
                          label(reduce_op_name(rc.op), dt, shape, r, s));
          }
        }
    });
  }
}

TEST(CommLocal, AllReduceMinMaxPropagateNaN) {
  run_local(3, [](ProcessGroupPtr pg) {
    for (ScalarType dt : kFloatDtypes)
      for (ReduceOp op : {ReduceOp::MIN, ReduceOp::MAX, ReduceOp::SUM}) {
        // element 0 is NaN on rank 1 only, element 1 on rank 0 only
        Tensor t = make({3}, dt, [&](int64_t i) {
          if ((i == 0 && pg->rank() == 1) || (i == 1 && pg->rank() == 0)) return std::nan("");
          return 1.0 + pg->rank();
        });
        pg->all_reduce(t, op);
        auto v = values(t);
        EXPECT_TRUE(std::isnan(v[0])) << reduce_op_name(op) << " " << dtype_name(dt);
        EXPECT_TRUE(std::isnan(v[1])) << reduce_op_name(op) << " " << dtype_name(dt);
        EXPECT_EQ(v[2], op == ReduceOp::MIN ? 1 : op == ReduceOp::MAX ? 3 : 6);
      }
  });
}

// The same bits as the mpi backend (MpiCollectives.AllReduceBothPathsEveryRankSameBits): MIN(+0, -0)
// is -0 and MAX is +0 whichever rank holds which, and a NaN on one rank gives NaN (reduce_op.h).
TEST(CommLocal, AllReduceMinMaxSignedZerosAndNaNAsMpi) {
  for (int n : {2, 3, 4}) {
    run_local(n, [n](ProcessGroupPtr pg) {
      const int me = pg->rank();
      for (ScalarType dt : kFloatDtypes) {
        Tensor z = make({4}, dt, [&](int64_t i) {
          if (i == 0) return me % 2 ? -0.0 : 0.0;
          if (i == 1) return me == n - 1 ? std::nan("") : 1.0;
          if (i == 2) return me % 2 ? 0.0 : -0.0;  // the other order
          return static_cast<double>(i);
        });
        Tensor zmax = z.clone();
        pg->all_reduce(z, ReduceOp::MIN);
        pg->all_reduce(zmax, ReduceOp::MAX);
        auto zv = values(z), xv = values(zmax);
        for (int i : {0, 2}) {
          EXPECT_TRUE(zv[i] == 0.0 && std::signbit(zv[i])) << "MIN(+0, -0) should be -0, got " << zv[i] << " "
                                                           << dtype_name(dt) << " on " << n << " ranks";
          EXPECT_TRUE(xv[i] == 0.0 && !std::signbit(xv[i])) << "MAX(+0, -0) should be +0, got " << xv[i] << " "
                                                            << dtype_name(dt) << " on " << n << " ranks";
        }
        EXPECT_TRUE(std::isnan(zv[1]) && std::isnan(xv[1])) << "a NaN on one rank should give NaN";
        EXPECT_EQ(zv[3], 3.0);
        EXPECT_EQ(xv[3], 3.0);
      }
    });
  }
}

TEST(CommLocal, AllReduceIntegersWrapAround) {
  run_local(2, [](ProcessGroupPtr pg) {
    Tensor a = full({2}, std::numeric_limits<int64_t>::max(), kInt64);
    pg->all_reduce(a);
    EXPECT_EQ(a.to_vector<int64_t>()[0], -2);  // 2 * (2^63 - 1) mod 2^64
    Tensor b = full({2}, 200, kUInt8);
    pg->all_reduce(b);
    EXPECT_EQ(b.to_vector<uint8_t>()[0], 144);  // 400 mod 256
  });
}

TEST(CommLocal, AllReduceAvgOnIntegersIsAnError) {
  run_local(2, [](ProcessGroupPtr pg) {
    for (ScalarType dt : {kInt32, kInt64, kUInt8, kBool}) {
      Tensor t = zeros({3}, dt);
      auto msg = error_of([&] { pg->all_reduce(t, ReduceOp::AVG); });
      EXPECT_EQ(msg, at("all_reduce", pg) + "AVG needs a floating dtype, got " + dtype_name(dt));
      Tensor out = zeros({3}, dt), in = zeros({3 * pg->size()}, dt);
      EXPECT_THROW(pg->reduce_scatter_tensor(out, in, ReduceOp::AVG), CommError);
    }
    EXPECT_EQ(pg->sequence_number(), 0u);  // nothing was issued
    Tensor ok = full({2}, 1.0);
    pg->all_reduce(ok, ReduceOp::AVG);  // the group still works
    EXPECT_EQ(values(ok)[0], 1.0);
  });
}

TEST(CommLocal, BroadcastFromEverySource) {
  for (int s : kWorldSizes) {
    run_local(s, [&](ProcessGroupPtr pg) {
      const int r = pg->rank();
      for (int src = 0; src < s; ++src)
        for (ScalarType dt : kAllDtypes)
          for (const auto& shape : {std::vector<int64_t>{0}, std::vector<int64_t>{4, 5}, std::vector<int64_t>{1001}}) {
            Tensor t = make(shape, dt, [&](int64_t i) { return mv(dt, r * 10 + i % 8); });
            pg->broadcast(t, src);
            expect_values(t, [&](int64_t i) { return mv(dt, src * 10 + i % 8); },
                          label("broadcast", dt, shape, r, s) + " from " + std::to_string(src));
          }
    });
  }
}

TEST(CommLocal, AllGatherIntoTensor) {
  for (int s : kWorldSizes) {
    run_local(s, [&](ProcessGroupPtr pg) {
      const int r = pg->rank();
      for (ScalarType dt : kAllDtypes)
        for (int64_t m : {0, 1, 3, 257}) {
          // rank q contributes q*10 + k%8 at element k of its (m, 2) input
          auto want = [&](int64_t j) { return mv(dt, (j / (2 * m)) * 10 + (j % (2 * m)) % 8); };
          Tensor in = make({m, 2}, dt, [&](int64_t k) { return mv(dt, r * 10 + k % 8); });
          Tensor out = zeros({s * m, 2}, dt);
          pg->all_gather_into_tensor(out, in);
          expect_values(out, want, label("all_gather_into_tensor", dt, {m, 2}, r, s));
          // in place: the input is this rank's chunk of the output
          Tensor out2 = zeros({s * m, 2}, dt);
          Tensor mine = out2.narrow(0, r * m, m);
          mine.copy_(in);
          pg->all_gather_into_tensor(out2, mine);
          expect_values(out2, want, label("all_gather_into_tensor (in place)", dt, {m, 2}, r, s));
        }
    });
  }
}

TEST(CommLocal, AllGatherIntoList) {
  for (int s : kWorldSizes) {
    run_local(s, [&](ProcessGroupPtr pg) {
      const int r = pg->rank();
      for (ScalarType dt : kAllDtypes)
        for (const auto& shape : {std::vector<int64_t>{0}, std::vector<int64_t>{3, 2}, std::vector<int64_t>{999}}) {
          Tensor in = make(shape, dt, [&](int64_t k) { return mv(dt, r * 10 + k % 8); });
          std::vector<Tensor> outs;
          for (int q = 0; q < s; ++q) outs.push_back(zeros(shape, dt));
          pg->all_gather(outs, in);
          for (int q = 0; q < s; ++q)
            expect_values(outs[q], [&](int64_t k) { return mv(dt, q * 10 + k % 8); },
                          label("all_gather", dt, shape, r, s) + " outputs[" + std::to_string(q) + "]");
        }
    });
  }
}

TEST(CommLocal, ReduceScatterTensor) {
  for (int s : kWorldSizes) {
    run_local(s, [&](ProcessGroupPtr pg) {
      const int r = pg->rank();
      for (const auto& rc : kReduceCases)
        for (ScalarType dt : kAllDtypes) {
          if (!rc.applies(dt)) continue;
          for (int64_t m : {0, 1, 5, 1001}) {
            // element j of the (s*m) input is the reduction case's element j; rank r gets chunk r
            Tensor in = make({s * m}, dt, [&](int64_t j) { return rc.in(r, s, j, dt); });
            Tensor out = zeros({m}, dt);
            pg->reduce_scatter_tensor(out, in, rc.op);
            auto want = [&](int64_t i) { return rc.out(s, r * m + i, dt); };
            const auto what = label("reduce_scatter_tensor", dt, {m}, r, s) + " " + reduce_op_name(rc.op);
            expect_values(out, want, what);
            // in place: the output is this rank's chunk of the input
            Tensor in2 = in.clone();
            Tensor mine = in2.narrow(0, r * m, m);
            pg->reduce_scatter_tensor(mine, in2, rc.op);
            expect_values(mine, want, what + " (in place)");
          }
        }
    });
  }
}

TEST(CommLocal, ReduceScatterList) {
  for (int s : kWorldSizes) {
    run_local(s, [&](ProcessGroupPtr pg) {
      const int r = pg->rank();
      for (const auto& rc : kReduceCases)
        for (ScalarType dt : kAllDtypes) {
          if (!rc.applies(dt)) continue;
          for (const auto& shape : {std::vector<int64_t>{0}, std::vector<int64_t>{2, 3}, std::vector<int64_t>{777}}) {
            const int64_t m = numel_of(shape);
            std::vector<Tensor> ins;
            for (int q = 0; q < s; ++q)
              ins.push_back(make(shape, dt, [&](int64_t i) { return rc.in(r, s, q * m + i, dt); }));
            Tensor out = zeros(shape, dt);
            pg->reduce_scatter(out, ins, rc.op);
            expect_values(out, [&](int64_t i) { return rc.out(s, r * m + i, dt); },
                          label("reduce_scatter", dt, shape, r, s) + " " + reduce_op_name(rc.op));
          }
        }
    });
  }
}

TEST(CommLocal, AllToAll) {
  for (int s : kWorldSizes) {
    run_local(s, [&](ProcessGroupPtr pg) {
      const int r = pg->rank();
      for (ScalarType dt : kAllDtypes)
        for (int64_t m : {0, 1, 4, 333}) {
          // chunk q of rank r's input, element k: r*16 + q*4 + k%4 -> chunk q of rank r's output: q*16 + r*4 + k%4
          Tensor in = make({s * m, 1}, dt, [&](int64_t j) { return mv(dt, r * 16 + (j / m) * 4 + (j % m) % 4); });
          auto want = [&](int64_t j) { return mv(dt, (j / m) * 16 + r * 4 + (j % m) % 4); };
          Tensor out = zeros({s * m, 1}, dt);
          pg->all_to_all(out, in);
          expect_values(out, want, label("all_to_all", dt, {s * m, 1}, r, s));
          pg->all_to_all(in, in);  // in place
          expect_values(in, want, label("all_to_all (in place)", dt, {s * m, 1}, r, s));
        }
    });
  }
}

TEST(CommLocal, BarrierWaitsForEveryRank) {
  for (int s : kWorldSizes) {
    std::atomic<int> before{0};
    run_local(s, [&](ProcessGroupPtr pg) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10 * pg->rank()));
      ++before;
      pg->barrier();
      EXPECT_EQ(before.load(), s) << "rank " << pg->rank() << " left the barrier early";
      pg->barrier();
    });
  }
}

TEST(CommLocal, SequenceNumbersCountCollectivesOnly) {
  run_local(2, [](ProcessGroupPtr pg) {
    Tensor t = zeros({2});
    pg->all_reduce(t);
    pg->broadcast(t, 0);
    pg->barrier();
    EXPECT_EQ(pg->sequence_number(), 3u);
    if (pg->rank() == 0) pg->send(t, 1);
    else pg->recv(t, 0);
    EXPECT_EQ(pg->sequence_number(), 3u);
  });
}

// ---------------------------------------------------------------------------------------------
// Async: overlap, order, is_completed

TEST(CommLocal, AsyncOpsOfAllRanksFromOneThread) {
  // One thread issues rank 0's, 1's and 2's all_reduce: only possible if issuing does not block.
  auto g = make_local_groups(3, GroupOptions{5000ms});
  std::vector<Tensor> t;
  std::vector<WorkPtr> w;
  for (int r = 0; r < 3; ++r) {
    t.push_back(full({100}, r + 1.0));
    w.push_back(g[r]->all_reduce_async(t[r]));
  }
  for (int r = 2; r >= 0; --r) w[r]->wait();
  for (int r = 0; r < 3; ++r) {
    EXPECT_TRUE(w[r]->is_completed());
    EXPECT_EQ(w[r]->exception(), nullptr);
    expect_values(t[r], [](int64_t) { return 6.0; }, "rank " + std::to_string(r));
  }
}

TEST(CommLocal, IsCompletedOnlyOnceEveryRankArrived) {
  auto g = make_local_groups(2, GroupOptions{5000ms});
  Tensor a = full({4}, 1.0), b = full({4}, 2.0);
  auto wa = g[0]->all_reduce_async(a);
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(wa->is_completed());
  auto msg = error_of([&] { wa->wait(20ms); });
  EXPECT_NE(msg.find("[comm] wait on all_reduce #0 on group 'world' (local, 2 ranks): not completed within 20 ms"),
            std::string::npos)
      << msg;
  EXPECT_FALSE(wa->is_completed());  // a wait that gives up leaves the collective running
  auto wb = g[1]->all_reduce_async(b);
  wb->wait();
  wa->wait(2000ms);
  EXPECT_TRUE(wa->is_completed());
  EXPECT_TRUE(wb->is_completed());
  expect_values(a, [](int64_t) { return 3.0; }, "rank 0");
  expect_values(b, [](int64_t) { return 3.0; }, "rank 1");
}

TEST(CommLocal, AsyncWorkProgressesWhileTheIssuerIsBusy) {
  // Rank 0 issues an async all_reduce and then blocks until rank 1's blocking all_reduce returned:
  // that can only happen if rank 0's collective runs without rank 0's thread.
  std::atomic<bool> rank1_done{false};
  run_local(2, [&](ProcessGroupPtr pg) {
    Tensor t = full({1 << 16}, pg->rank() + 1.0);
    if (pg->rank() == 0) {
      auto w = pg->all_reduce_async(t);
      const auto until = std::chrono::steady_clock::now() + 5s;
      while (!rank1_done.load() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
      EXPECT_TRUE(rank1_done.load());
      w->wait();  // (its last step, copying the sum into t, may still be running when rank 1 is done)
    } else {
      pg->all_reduce(t);
      rank1_done = true;
    }
    expect_values(t, [](int64_t) { return 3.0; }, "rank " + std::to_string(pg->rank()));
  });
}

TEST(CommLocal, AsyncOpsCompleteInIssueOrder) {
  for (int s : {2, 3, 4}) {
    run_local(s, [&](ProcessGroupPtr pg) {
      // SUM then PRODUCT on the same tensor: (s(s+1)/2)^s; the other order would give s * s!.
      Tensor t = full({5}, pg->rank() + 1.0, kFloat64);
      auto w1 = pg->all_reduce_async(t, ReduceOp::SUM);
      auto w2 = pg->all_reduce_async(t, ReduceOp::PRODUCT);
      std::vector<WorkPtr> more;
      std::vector<Tensor> ts;
      for (int k = 0; k < 20; ++k) {
        ts.push_back(full({3}, static_cast<double>(k), kInt64));
        more.push_back(pg->all_reduce_async(ts.back(), ReduceOp::MAX));
      }
      more.back()->wait();
      for (auto& w : more) EXPECT_TRUE(w->is_completed());  // earlier ops finished first
      EXPECT_TRUE(w1->is_completed());
      EXPECT_TRUE(w2->is_completed());
      const double tri = s * (s + 1) / 2.0;
      expect_values(t, [&](int64_t) { return std::pow(tri, s); }, "SUM then PRODUCT");
      for (int k = 0; k < 20; ++k) expect_values(ts[k], [&](int64_t) { return k; }, "MAX " + std::to_string(k));
    });
  }
}

// ---------------------------------------------------------------------------------------------
// Sub-groups

TEST(CommLocal, NewGroup) {
  run_local(4, [](ProcessGroupPtr pg) {
    const int r = pg->rank();
    auto g = pg->new_group({0, 2});
    if (r == 0 || r == 2) {
      ASSERT_NE(g, nullptr);
      EXPECT_EQ(g->size(), 2);
      EXPECT_EQ(g->rank(), r / 2);
      EXPECT_EQ(g->options().name, "world/group[0,2]");
      EXPECT_EQ(g->backend(), "local");
      Tensor t = full({3}, r + 1.0);
      g->all_reduce(t);
      expect_values(t, [](int64_t) { return 4.0; }, "sum over ranks 0 and 2");
      // a group of one inside it
      auto solo = g->new_group({1});
      EXPECT_EQ(solo != nullptr, r == 2);
      if (solo) {
        EXPECT_EQ(solo->options().name, "world/group[0,2]/group[1]");
        EXPECT_EQ(solo->size(), 1);
        solo->all_reduce(t);
        expect_values(t, [](int64_t) { return 4.0; }, "group of one");
      }
    } else {
      EXPECT_EQ(g, nullptr);
    }
    // rank order follows the list; options can name the group and set its timeout
    auto h = pg->new_group({3, 1}, GroupOptions{1234ms, "odd"});
    EXPECT_EQ(h != nullptr, r % 2 == 1);
    if (h) {
      EXPECT_EQ(h->rank(), r == 3 ? 0 : 1);
      EXPECT_EQ(h->options().name, "odd");
      EXPECT_EQ(h->options().timeout, 1234ms);
      Tensor t = full({2}, static_cast<double>(r), kInt32);
      h->broadcast(t, 0);
      expect_values(t, [](int64_t) { return 3.0; }, "broadcast from rank 3");
    }
    // the world still works, and its sequence counted the two new_group calls
    Tensor w = full({1}, 1.0);
    pg->all_reduce(w);
    EXPECT_EQ(values(w)[0], 4.0);
    EXPECT_EQ(pg->sequence_number(), 3u);
  });
}

TEST(CommLocal, NewGroupErrors) {
  run_local(3, [](ProcessGroupPtr pg) {
    EXPECT_EQ(error_of([&] { pg->new_group({}); }), at("new_group", pg) + "ranks is empty");
    EXPECT_EQ(error_of([&] { pg->new_group({0, 3}); }), at("new_group", pg) + "rank 3 is not in [0, 3)");
    EXPECT_EQ(error_of([&] { pg->new_group({1, 1}); }), at("new_group", pg) + "rank 1 appears twice");
    EXPECT_EQ(pg->sequence_number(), 0u);  // none of these was issued
    // ranks asking for different groups: an error on every rank
    auto msg = error_of([&] { pg->new_group(pg->rank() == 1 ? std::vector<int>{0, 1} : std::vector<int>{0, 2}); });
    EXPECT_NE(msg.find("[comm] new_group #0 on group 'world' (local, 3 ranks): rank 1 asks for ranks [0, 1], rank 0 "
                       "for [0, 2]"),
              std::string::npos)
        << msg;
  });
}

TEST(CommLocal, Split) {
  run_local(4, [](ProcessGroupPtr pg) {
    const int r = pg->rank();
    // colour by parity, keys reversing the order: colour 0 is (2, 0), colour 1 is (3, 1)
    auto g = pg->split(r % 2, -r);
    ASSERT_NE(g, nullptr);
    EXPECT_EQ(g->size(), 2);
    EXPECT_EQ(g->rank(), r >= 2 ? 0 : 1);
    EXPECT_EQ(g->options().name, r % 2 ? "world/group[3,1]" : "world/group[2,0]");
    Tensor t = full({4}, r + 1.0);
    g->all_reduce(t);
    expect_values(t, [&](int64_t) { return r % 2 ? 6.0 : 4.0; }, "sum within the colour");
    Tensor b = full({1}, static_cast<double>(r), kInt64);
    g->broadcast(b, 0);
    EXPECT_EQ(b.to_vector<int64_t>()[0], r % 2 ? 3 : 2);
    // negative colour: no group; equal keys keep the parent's order
    auto h = pg->split(r == 3 ? -1 : 7, 0);
    EXPECT_EQ(h == nullptr, r == 3);
    if (h) {
      EXPECT_EQ(h->rank(), r);
      EXPECT_EQ(h->size(), 3);
      h->barrier();
    }
  });
}

TEST(CommLocal, SubGroupsRunConcurrently) {
  // Ranks {0,1} and {2,3} each run many collectives on their own group while the other pair does too.
  run_local(4, [](ProcessGroupPtr pg) {
    auto g = pg->split(pg->rank() / 2, 0);
    for (int k = 0; k < 50; ++k) {
      Tensor t = full({64}, pg->rank() + k + 0.0);
      g->all_reduce(t);
      const double want = pg->rank() < 2 ? (0 + 1 + 2.0 * k) : (2 + 3 + 2.0 * k);
      expect_values(t, [&](int64_t) { return want; }, "iteration " + std::to_string(k));
    }
  });
}

// ---------------------------------------------------------------------------------------------
// send / recv

TEST(CommLocal, SendRecvRing) {
  for (int s : {2, 3, 4}) {
    run_local(s, [&](ProcessGroupPtr pg) {
      const int r = pg->rank(), next = (r + 1) % s, prev = (r + s - 1) % s;
      for (ScalarType dt : kAllDtypes) {
        Tensor out = make({3, 7}, dt, [&](int64_t i) { return mv(dt, r * 10 + i % 8); });
        Tensor in = zeros({3, 7}, dt);
        pg->send(out, next);  // eager: returns before the peer receives
        pg->recv(in, prev);
        expect_values(in, [&](int64_t i) { return mv(dt, prev * 10 + i % 8); }, label("recv", dt, {3, 7}, r, s));
      }
      Tensor e0 = zeros({0}), e1 = zeros({0});
      auto ws = pg->send_async(e0, next);
      auto wr = pg->recv_async(e1, prev);
      ws->wait();
      wr->wait();
    });
  }
}

TEST(CommLocal, SendRecvTagsAndOrder) {
  run_local(2, [](ProcessGroupPtr pg) {
    if (pg->rank() == 0) {
      pg->send(full({1}, 10.0), 1, 1);
      pg->send(full({1}, 20.0), 1, 2);
      pg->send(full({1}, 11.0), 1, 1);
    } else {
      Tensor t = zeros({1});
      pg->recv(t, 0, 2);  // tags are separate mailboxes
      EXPECT_EQ(values(t)[0], 20.0);
      pg->recv(t, 0, 1);  // one tag is first in, first out
      EXPECT_EQ(values(t)[0], 10.0);
      pg->recv(t, 0, 1);
      EXPECT_EQ(values(t)[0], 11.0);
    }
  });
}

TEST(CommLocal, SendRecvErrors) {
  run_local(2, [](ProcessGroupPtr pg) {
    const int r = pg->rank();
    Tensor t = zeros({4});
    auto msg = error_of([&] { pg->send(t, r); });
    EXPECT_EQ(msg, at("send", pg) + "dst " + std::to_string(r) +
                       " is this rank; the local backend cannot send to or receive from itself");
    msg = error_of([&] { pg->send(t, 2); });
    EXPECT_EQ(msg, at("send", pg) + "dst 2 is not in [0, 2)");
    EXPECT_EQ(error_of([&] { pg->recv(t, 1 - r, -1); }), at("recv", pg) + "tag -1 is not in [0, 2147483647]");
    EXPECT_THROW(pg->recv(t, -1), CommError);
    EXPECT_THROW(pg->recv(t, r), CommError);
    // a message of the wrong size fails on the receiver
    if (r == 0) {
      pg->send(zeros({3}), 1);
      pg->send(zeros({4}, kInt32), 1);
    } else {
      msg = error_of([&] { pg->recv(t, 0); });
      EXPECT_NE(msg.find("[comm] recv from rank 0 (tag 0) on group 'world' (local, 2 ranks): rank 0 sent shape [3] "
                         "(float32), rank 1 receives into shape [4] (float32)"),
                std::string::npos)
          << msg;
      msg = error_of([&] { pg->recv(t, 0); });
      EXPECT_NE(msg.find("sent shape [4] (int32)"), std::string::npos) << msg;
    }
  });
}

TEST(CommLocal, RecvTimesOut) {
  run_local(
      2,
      [](ProcessGroupPtr pg) {
        if (pg->rank() == 1) {
          Tensor t = zeros({2});
          const auto t0 = std::chrono::steady_clock::now();
          auto msg = error_of([&] { pg->recv(t, 0, 5); });
          EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
          EXPECT_NE(msg.find("[comm] recv from rank 0 (tag 5) on group 'world' (local, 2 ranks) timed out after 200 "
                             "ms: rank 0 sent nothing with tag 5"),
                    std::string::npos)
              << msg;
        }
      },
      GroupOptions{200ms});
}

// ---------------------------------------------------------------------------------------------
// Errors: mismatches across ranks (CommError on every rank), bad arguments (CommError on the calling rank, nothing issued)

TEST(CommLocal, MismatchedShapesFailOnEveryRank) {
  for (int s : {2, 3, 4}) {
    std::atomic<int> failed{0};
    run_local(s, [&](ProcessGroupPtr pg) {
      Tensor t = zeros({pg->rank() == 1 ? 3 : 2});
      auto msg = error_of([&] { pg->all_reduce(t); });
      EXPECT_NE(msg.find("[comm] all_reduce #0 on group 'world' (local, " + std::to_string(s) +
                         " ranks): tensor on rank 1 has shape [3] (float32), rank 0 has shape [2] (float32)"),
                std::string::npos)
          << msg;
      if (msg != "<no exception>") ++failed;
      // the group goes on: the next collective is #1 everywhere
      Tensor u = full({2}, 1.0);
      pg->all_reduce(u);
      EXPECT_EQ(values(u)[0], s);
    });
    EXPECT_EQ(failed.load(), s);
  }
}

TEST(CommLocal, MismatchedDtypesOpsAndArguments) {
  run_local(3, [](ProcessGroupPtr pg) {
    const int r = pg->rank();
    Tensor t = zeros({2}, r == 2 ? kInt64 : kFloat32);
    auto msg = error_of([&] { pg->all_reduce(t); });
    EXPECT_NE(msg.find("tensor on rank 2 has shape [2] (int64), rank 0 has shape [2] (float32)"), std::string::npos)
        << msg;

    Tensor f = zeros({2});
    msg = error_of([&] {
      if (r == 1) pg->broadcast(f, 0);
      else pg->all_reduce(f);
    });
    EXPECT_NE(msg.find("[comm] collective #1 on group 'world' (local, 3 ranks): rank 1 called broadcast, rank 0 "
                       "called all_reduce"),
              std::string::npos)
        << msg;

    msg = error_of([&] { pg->all_reduce(f, r == 1 ? ReduceOp::MAX : ReduceOp::SUM); });
    EXPECT_NE(msg.find("all_reduce #2 on group 'world' (local, 3 ranks): rank 1 reduces with MAX, rank 0 with SUM"),
              std::string::npos)
        << msg;

    msg = error_of([&] { pg->broadcast(f, r == 2 ? 1 : 0); });
    EXPECT_NE(msg.find("rank 2 broadcasts from rank 1, rank 0 from rank 0"), std::string::npos) << msg;

    Tensor in = zeros({2});
    Tensor out = r == 1 ? zeros({6}) : zeros({3, 2});
    msg = error_of([&] { pg->all_gather_into_tensor(out, in); });
    EXPECT_NE(msg.find("all_gather_into_tensor #4 on group 'world' (local, 3 ranks): output on rank 1 has shape [6], "
                       "rank 0 has shape [3, 2]"),
              std::string::npos)
        << msg;
    EXPECT_EQ(pg->sequence_number(), 5u);
  },
  GroupOptions{5000ms});
}

TEST(CommLocal, BadArgumentsAreLocalErrors) {
  run_local(2, [](ProcessGroupPtr pg) {
    const char* contiguous = "is not contiguous";
    Tensor nc = zeros({3, 4}).t();
    auto has = [](const std::string& msg, const std::string& part) {
      EXPECT_NE(msg.find(part), std::string::npos) << msg;
    };
    EXPECT_EQ(error_of([&] { pg->all_reduce(nc); }),
              at("all_reduce", pg) +
                  "tensor (4, 3) is not contiguous; pass a contiguous tensor (.contiguous(), then copy back)");
    has(error_of([&] { pg->broadcast(nc, 0); }), contiguous);
    has(error_of([&] { pg->send(nc, 1 - pg->rank()); }), contiguous);
    has(error_of([&] { pg->recv(nc, 1 - pg->rank()); }), contiguous);
    Tensor out = zeros({24});
    has(error_of([&] { pg->all_gather_into_tensor(out, nc); }), contiguous);
    Tensor undefined;
    EXPECT_EQ(error_of([&] { pg->all_reduce(undefined); }), at("all_reduce", pg) + "tensor is undefined");
    Tensor t = zeros({3});
    EXPECT_EQ(error_of([&] { pg->broadcast(t, 2); }), at("broadcast", pg) + "src 2 is not in [0, 2)");
    EXPECT_EQ(error_of([&] { pg->broadcast(t, -1); }), at("broadcast", pg) + "src -1 is not in [0, 2)");

    Tensor small = zeros({5});
    EXPECT_EQ(error_of([&] { pg->all_gather_into_tensor(small, t); }),
              at("all_gather_into_tensor", pg) + "output has 5 elements (5,), expected size * input.numel() = 2 * 3");
    Tensor dbl = zeros({6}, kFloat64);
    EXPECT_EQ(error_of([&] { pg->all_gather_into_tensor(dbl, t); }),
              at("all_gather_into_tensor", pg) + "output is float64, expected float32");
    EXPECT_EQ(error_of([&] { pg->reduce_scatter_tensor(t, small); }),
              at("reduce_scatter_tensor", pg) + "input has 5 elements (5,), expected size * output.numel() = 2 * 3");
    std::vector<Tensor> three = {zeros({3}), zeros({3}), zeros({3})};
    EXPECT_EQ(error_of([&] { pg->all_gather(three, t); }),
              at("all_gather", pg) + "outputs holds 3 tensors, expected 2 (the group size)");
    std::vector<Tensor> wrong = {zeros({3}), zeros({4})};
    EXPECT_EQ(error_of([&] { pg->all_gather(wrong, t); }),
              at("all_gather", pg) + "outputs[1] has 4 elements (4,), expected 3 (3,)");
    has(error_of([&] { pg->reduce_scatter(t, wrong); }), at("reduce_scatter", pg) + "inputs[1] has");
    Tensor odd = zeros({3}), odd_out = zeros({3});
    EXPECT_EQ(error_of([&] { pg->all_to_all(odd_out, odd); }),
              at("all_to_all", pg) + "input has 3 elements (3,), not divisible by the group size 2");
    Tensor scalar = zeros({}), scalar_out = zeros({});
    has(error_of([&] { pg->all_to_all(scalar_out, scalar); }), "not divisible by the group size 2");
    Tensor four = zeros({4}), eight = zeros({8});
    EXPECT_EQ(error_of([&] { pg->all_to_all(eight, four); }),
              at("all_to_all", pg) + "output has 8 elements, input has 4");
    EXPECT_EQ(error_of([&] { pg->send(t, 1 - pg->rank(), -1); }), at("send", pg) + "tag -1 is not in [0, 2147483647]");
    EXPECT_EQ(pg->sequence_number(), 0u);  // none of these was issued
  });
}

// Output and input overlapping other than as this rank's chunk (the in-place forms): the input is read
// from a copy taken when the op is issued, as the mpi and nccl backends do.
TEST(CommLocal, OverlappingOutputAndInputReadTheInputAsIssued) {
  run_local(2, [](ProcessGroupPtr pg) {
    const int r = pg->rank();
    Tensor buf = make({6}, kFloat32, [&](int64_t i) { return 10.0 * r + i; });
    Tensor wrong_chunk = buf.narrow(0, 1, 3);  // {10r + 1, 10r + 2, 10r + 3}
    pg->all_gather_into_tensor(buf, wrong_chunk);
    expect_values(buf, [](int64_t i) { return 10.0 * (i / 3) + 1 + i % 3; }, "all_gather_into_tensor overlapping");

    Tensor in = make({6}, kFloat32, [&](int64_t i) { return 10.0 * r + i; });
    Tensor out = in.narrow(0, 1, 3);  // input chunk r is {10r + 3r, ...}; out overlaps chunks 0 and 1
    pg->reduce_scatter_tensor(out, in);
    // rank q's out = sum over ranks p of p's original in[3q + j] = (0 + 10) + 2 * (3q + j)
    expect_values(out, [&](int64_t j) { return 10.0 + 2.0 * (3 * r + j); }, "reduce_scatter_tensor overlapping");
  });
}

// ---------------------------------------------------------------------------------------------
// Timeouts and failures: nothing waits forever

TEST(CommLocal, MissingRankTimesOutNamingIt) {
  std::atomic<int> timed_out{0};
  const auto t0 = std::chrono::steady_clock::now();
  run_local(
      4,
      [&](ProcessGroupPtr pg) {
        const std::string want =
            "[comm] all_reduce #0 on group 'world' (local, 4 ranks) timed out after 200 ms; ranks not arrived: 2";
        Tensor t = zeros({3});
        if (pg->rank() == 2) {
          std::this_thread::sleep_for(600ms);  // skips the collective; arriving late, it gets the same error
          EXPECT_EQ(error_of([&] { pg->all_reduce(t); }), want);
          return;
        }
        const auto start = std::chrono::steady_clock::now();
        auto msg = error_of([&] { pg->all_reduce(t); });
        const auto took = std::chrono::steady_clock::now() - start;
        EXPECT_EQ(msg, want);
        EXPECT_GE(took, 150ms);
        EXPECT_LT(took, 1500ms);  // (200 ms, with room for a loaded machine)
        ++timed_out;
      },
      GroupOptions{200ms});
  EXPECT_EQ(timed_out.load(), 3);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 4s);
}

TEST(CommLocal, AThrowingRankFailsTheOthersInsteadOfHanging) {
  std::atomic<int> aborted{0};
  const auto t0 = std::chrono::steady_clock::now();
  auto msg = error_of<std::runtime_error>([&] {
    run_local(3, [&](ProcessGroupPtr pg) {  // the default timeout: 5 minutes
      if (pg->rank() == 1) {
        std::this_thread::sleep_for(50ms);
        throw std::runtime_error("boom");
      }
      Tensor t = zeros({3});
      auto m = error_of([&] { pg->all_reduce(t); });
      EXPECT_NE(m.find("[comm] all_reduce #0 on group 'world' (local, 3 ranks) aborted: rank 1 failed: boom"),
                std::string::npos)
          << m;
      ++aborted;
      // later collectives fail at once too, also on sub-groups made before
      EXPECT_THROW(pg->barrier(), CommError);
      throw CommError("rank " + std::to_string(pg->rank()) + " gives up");  // not the first: not reported
    });
  });
  EXPECT_EQ(msg, "[run_local] rank 1: boom");
  EXPECT_EQ(aborted.load(), 2);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
}

TEST(CommLocal, RunLocalKeepsTheExceptionFamily) {
  EXPECT_THROW(run_local(2,
                         [](ProcessGroupPtr pg) {
                           if (pg->rank() == 1) throw std::invalid_argument("bad");
                         }),
               std::invalid_argument);
  auto msg = error_of([&] {
    run_local(2, [](ProcessGroupPtr pg) {
      Tensor t = zeros({1});
      if (pg->rank() == 0) pg->recv(t, 1);  // rank 1 sends nothing and returns
    }, GroupOptions{100ms});
  });
  EXPECT_NE(msg.find("[run_local] rank 0: [comm] recv from rank 1 (tag 0)"), std::string::npos) << msg;
}

TEST(CommLocal, AbortReachesSubGroupsAndRecv) {
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_THROW(run_local(4,
                         [](ProcessGroupPtr pg) {
                           auto g = pg->split(pg->rank() % 2, 0);
                           if (pg->rank() == 3) throw std::runtime_error("rank 3 dies");
                           Tensor t = zeros({2});
                           if (pg->rank() == 1) {
                             EXPECT_THROW(g->all_reduce(t), CommError);  // its peer is rank 3
                           } else if (pg->rank() == 0) {
                             EXPECT_THROW(pg->recv(t, 3), CommError);
                           } else {
                             EXPECT_THROW(g->all_reduce(t), CommError);  // its peer, rank 0, never comes
                           }
                         }),
               std::runtime_error);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
}

TEST(CommLocal, DestroyingAGroupFailsItsPendingWork) {
  auto g = make_local_groups(2);  // 5 minute timeout: the failures below must come from the destruction
  Tensor a = zeros({2}), b = zeros({2});
  auto w = g[0]->all_reduce_async(a);
  const auto t0 = std::chrono::steady_clock::now();
  g[0].reset();
  auto msg = error_of([&] { w->wait(); });
  EXPECT_NE(msg.find("[comm] all_reduce #0 on group 'world' (local, 2 ranks) failed: the group object of rank 0 was "
                     "destroyed while it was pending"),
            std::string::npos)
      << msg;
  // rank 1 arriving later gets the same error instead of waiting
  EXPECT_EQ(error_of([&] { g[1]->all_reduce(b); }), msg);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
}
