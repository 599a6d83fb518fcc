// The `mpi` backend: every collective x dtypes x sizes against closed forms in rank and size, async
// order, chunked messages, sub-groups, send/recv, local errors, the debug size check and a timeout.
// Each test skips unless this process was started by mpirun with more than one rank; ctest runs them as
// `mpirun -np 2|4 comm_tests --gtest_filter=Mpi*`.
#ifdef TROUPE_HAVE_MPI

#include <troupe/comm/comm.h>
#include <troupe/tensor/ops.h>
#include "mpi_world.h"

#include <gtest/gtest.h>

#include <chrono>
#include <climits>
#include <cstring>
#include <set>
#include <string>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <thread>

#include <signal.h>
#include <unistd.h>

using namespace troupe;
using namespace troupe::comm;
using namespace std::chrono_literals;

namespace {

#define MPI_SETUP(pg)                                                              \
  if (!started_by_mpirun()) GTEST_SKIP() << "not started by mpirun";              \
  ProcessGroupPtr pg = troupe::testing::mpi_test_world();                         \
  if (pg->size() < 2) GTEST_SKIP() << "needs mpirun -np 2 or more";

const std::vector<ScalarType> kDtypes = {kFloat32, kFloat64, kInt32, kInt64, kBFloat16, kFloat16};
const std::vector<ScalarType> kMoveDtypes = {kFloat32, kFloat64, kInt32, kInt64, kBFloat16, kFloat16, kUInt8, kBool};
const std::vector<int64_t> kSizes = {0, 1, 7, 1000, 65537};

Tensor make_t(int64_t n, ScalarType dtype, const std::function<double(int64_t)>& f) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = f(i);
  return tensor(v, kFloat64).to(dtype).contiguous();
}

// Compares every element with want(i); reports the first difference.
void expect_all(const Tensor& t, const std::function<double(int64_t)>& want, const std::string& what) {
  auto got = t.to(kFloat64).contiguous().to_vector<double>();
  for (size_t i = 0; i < got.size(); ++i) {
    double w = want(static_cast<int64_t>(i));
    if (got[i] != w) {
      ADD_FAILURE() << what << ": element " << i << " is " << got[i] << ", expected " << w;
      return;
    }
  }
}

std::string label(const std::string& op, ScalarType dt, int64_t n, const ProcessGroupPtr& pg) {
  return op + " " + dtype_name(dt) + " n=" + std::to_string(n) + " rank " + std::to_string(pg->rank()) + "/" +
         std::to_string(pg->size());
}

template <typename F>
std::string error_of(F f) {
  try {
    f();
  } catch (const CommError& e) {
    return e.what();
  }
  return "<no exception>";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Rank r contributes r + 1 + (i % 3) at element i.
double contribution(int r, int64_t i) { return r + 1 + static_cast<double>(i % 3); }

double reduced(ReduceOp op, int n, int64_t i) {
  double acc = op == ReduceOp::PRODUCT ? 1 : (op == ReduceOp::MIN ? 1e300 : (op == ReduceOp::MAX ? -1e300 : 0));
  for (int r = 0; r < n; ++r) {
    double v = contribution(r, i);
    switch (op) {
      case ReduceOp::SUM: case ReduceOp::AVG: acc += v; break;
      case ReduceOp::PRODUCT: acc *= v; break;
      case ReduceOp::MIN: acc = std::min(acc, v); break;
      case ReduceOp::MAX: acc = std::max(acc, v); break;
    }
  }
  return op == ReduceOp::AVG ? acc / n : acc;
}

const std::vector<ReduceOp> kOps = {ReduceOp::SUM, ReduceOp::AVG, ReduceOp::PRODUCT, ReduceOp::MIN, ReduceOp::MAX};

bool op_fits(ReduceOp op, ScalarType dt) {
  if (op == ReduceOp::AVG) return is_floating_point(dt);  // AVG needs a floating dtype
  return true;
}

// AVG in the tensor's dtype: sum / n rounded to that dtype (16-bit floats: in float, rounded once).
double expected_avg(ScalarType dt, double sum, int n) {
  if (dt == kFloat32) return static_cast<float>(static_cast<float>(sum) / static_cast<float>(n));
  if (dt == kBFloat16) return static_cast<float>(BFloat16(static_cast<float>(sum) / static_cast<float>(n)));
  if (dt == kFloat16) return static_cast<float>(Half(static_cast<float>(sum) / static_cast<float>(n)));
  return sum / n;
}

}  // namespace

TEST(MpiCollectives, AllReduceEveryOpDtypeAndSize) {
  MPI_SETUP(pg);
  int n = pg->size(), me = pg->rank();
  for (ScalarType dt : kDtypes) {
    for (ReduceOp op : kOps) {
      if (!op_fits(op, dt)) continue;
      for (int64_t len : kSizes) {
        Tensor t = make_t(len, dt, [&](int64_t i) { return contribution(me, i); });
        pg->all_reduce(t, op);
        auto want = [&](int64_t i) {
          if (op == ReduceOp::AVG) return expected_avg(dt, reduced(ReduceOp::SUM, n, i), n);
          return reduced(op, n, i);
        };
        expect_all(t, want, label(std::string("all_reduce ") + reduce_op_name(op), dt, len, pg));
        EXPECT_EQ(t.numel(), len);
      }
    }
  }
}

TEST(MpiCollectives, AllReduceUInt8AndBool) {
  MPI_SETUP(pg);
  int n = pg->size(), me = pg->rank();
  Tensor u = make_t(9, kUInt8, [&](int64_t i) { return me + 1 + i; });
  pg->all_reduce(u, ReduceOp::MAX);
  expect_all(u, [&](int64_t i) { return n + i; }, "all_reduce MAX uint8");
  u = make_t(9, kUInt8, [&](int64_t i) { return me + 1 + i; });
  pg->all_reduce(u);
  expect_all(u, [&](int64_t i) { return n * (n + 1) / 2 + n * i; }, "all_reduce SUM uint8");
  // bool: SUM is OR, PRODUCT is AND; only rank 0 holds true at even elements.
  for (ReduceOp op : {ReduceOp::SUM, ReduceOp::MAX, ReduceOp::PRODUCT, ReduceOp::MIN}) {
    Tensor b = make_t(6, kBool, [&](int64_t i) { return me == 0 && i % 2 == 0 ? 1 : 0; });
    pg->all_reduce(b, op);
    bool is_or = op == ReduceOp::SUM || op == ReduceOp::MAX;
    expect_all(b, [&](int64_t i) { return is_or && i % 2 == 0 ? 1 : 0; },
               std::string("all_reduce bool ") + reduce_op_name(op));
  }
  Tensor b = make_t(3, kBool, [](int64_t) { return 1; });
  pg->all_reduce(b, ReduceOp::PRODUCT);
  expect_all(b, [](int64_t) { return 1; }, "all_reduce bool PRODUCT of all true");
}

// A group knows whether its ranks share one host (the small all-reduce threshold depends on it): the
// same answer as the ranks' host names, gathered (tests/multihost runs this suite across test hosts with
// hostnames of their own).
TEST(MpiCollectives, AGroupKnowsWhetherItSpansHosts) {
  MPI_SETUP(pg);
  constexpr int64_t kLen = 256;
  char name[kLen] = {0};
  ASSERT_EQ(gethostname(name, kLen - 1), 0);
  Tensor mine = zeros({kLen}, TensorOptions().dtype(kUInt8));
  std::memcpy(mine.data_ptr(), name, std::strlen(name));
  Tensor all = zeros({pg->size() * kLen}, TensorOptions().dtype(kUInt8));
  pg->all_gather_into_tensor(all, mine);
  std::set<std::string> hosts;
  for (int r = 0; r < pg->size(); ++r) hosts.insert(static_cast<const char*>(all.data_ptr()) + r * kLen);
  EXPECT_EQ(comm::detail::mpi_group_spans_hosts(*pg), hosts.size() > 1) << hosts.size() << " host names";
  EXPECT_EQ(comm::detail::mpi_small_allreduce_bytes(*pg), hosts.size() > 1 ? int64_t{2} << 20 : int64_t{64} << 10);
}

// All-reduces up to 64 KB (2 MB when the group spans hosts) run troupe's recursive doubling (with folding when the size is not a power of
// two), larger ones MPI_Iallreduce; a synchronous call on an idle group runs either at once on its
// thread, an async one is queued. Every path, across the threshold, on values whose sum depends on the
// order: every rank must end with the same bits, and the paths agree to rounding.
// AVG of float32 / float64 above the small-all-reduce bytes runs troupe's ring with the division fused into
// its last reduce step (add_ring_avg_allreduce): the SUM all-reduce (MPI_Iallreduce) divided once by the
// size, to rounding (at 2 ranks to the bit: one addition, then an exact halving), every rank the same bits,
// sync and async; chunks of 0 elements (len < size) and uneven ones included.
TEST(MpiCollectives, AllReduceAvgRingIsTheSumDividedOnce) {
  MPI_SETUP(pg);
  int n = pg->size(), me = pg->rank();
  comm::detail::set_mpi_small_allreduce_bytes(0);  // every length takes the ring
  auto value = [&](int r, int64_t i) { return std::sin(0.37 * (r + 1) * (i + 1)) * std::pow(10.0, (i + r) % 7 - 3); };
  for (ScalarType dt : {kFloat32, kFloat64}) {
    for (int64_t len : {int64_t{1}, int64_t{3}, int64_t{16385}, int64_t{100003}}) {
      for (bool async : {false, true}) {
        const std::string what = label("all_reduce AVG (ring)", dt, len, pg) + (async ? " async" : " sync");
        Tensor avg = make_t(len, dt, [&](int64_t i) { return value(me, i); });
        Tensor sum = avg.clone();
        if (async) pg->all_reduce_async(avg, ReduceOp::AVG)->wait();
        else pg->all_reduce(avg, ReduceOp::AVG);
        pg->all_reduce(sum, ReduceOp::SUM);
        Tensor all = zeros({n * len}, TensorOptions().dtype(dt));
        pg->all_gather_into_tensor(all, avg);
        for (int r = 1; r < n; ++r)
          ASSERT_TRUE(all.narrow(0, 0, len).equal(all.narrow(0, r * len, len))) << what << ": rank " << r << " differs";
        auto a = avg.to(kFloat64).to_vector<double>(), b = sum.to(kFloat64).to_vector<double>();
        const double tol = dt == kFloat32 ? 1e-6 : 1e-15;
        for (int64_t i = 0; i < len; ++i) {
          double w = 0;
          for (int r = 0; r < n; ++r) w = std::max(w, std::fabs(value(r, i)));
          if (n == 2) ASSERT_EQ(a[i], b[i] / 2) << what << " element " << i;
          else ASSERT_LE(std::fabs(a[i] - b[i] / n), tol * w * n) << what << " element " << i;
        }
      }
    }
  }
  comm::detail::set_mpi_small_allreduce_bytes(-1);
}

TEST(MpiCollectives, AllReduceBothPathsEveryRankSameBits) {
  MPI_SETUP(pg);
  int n = pg->size(), me = pg->rank();
  // The threshold by where the ranks live: 64 KB on one host, 2 MB across hosts (tests/multihost runs this).
  ASSERT_EQ(comm::detail::mpi_small_allreduce_bytes(), -1);
  const int64_t saved = comm::detail::mpi_small_allreduce_bytes(*pg);
  ASSERT_EQ(saved, comm::detail::mpi_group_spans_hosts(*pg) ? int64_t{2} << 20 : int64_t{64} << 10);
  auto value = [&](int r, int64_t i) { return std::sin(0.37 * (r + 1) * (i + 1)) * std::pow(10.0, (i + r) % 7 - 3); };
  for (ScalarType dt : {kFloat32, kFloat64, kBFloat16}) {
    for (ReduceOp op : {ReduceOp::SUM, ReduceOp::AVG, ReduceOp::PRODUCT, ReduceOp::MIN, ReduceOp::MAX}) {
      for (int64_t len : {int64_t{1}, int64_t{1023}, int64_t{16384}, int64_t{16385}, int64_t{40000}}) {
        Tensor results[4];
        for (int path = 0; path < 4; ++path) {
          // 0, 1: MPI_Iallreduce always (sync, async); 2, 3: recursive doubling up to 64 KB (sync, async)
          comm::detail::set_mpi_small_allreduce_bytes(path < 2 ? 0 : saved);
          Tensor t = make_t(len, dt, [&](int64_t i) { return value(me, i); });
          if (path % 2) pg->all_reduce_async(t, op)->wait();
          else pg->all_reduce(t, op);
          // Every rank's result, gathered: all equal to the bit.
          Tensor all = zeros({n * len}, TensorOptions().dtype(dt));
          pg->all_gather_into_tensor(all, t);
          Tensor mine = all.narrow(0, 0, len).to(kFloat64);
          for (int r = 1; r < n; ++r) {
            Tensor other = all.narrow(0, r * len, len).to(kFloat64);
            ASSERT_TRUE(mine.equal(other)) << label(std::string("all_reduce ") + reduce_op_name(op), dt, len, pg)
                                           << " path " << path << ": rank " << r << " differs from rank 0";
          }
          results[path] = t.to(kFloat64);
        }
        // The same algorithm gives the same bits sync or async; the two algorithms agree to rounding.
        EXPECT_TRUE(results[0].equal(results[1]) && results[2].equal(results[3]))
            << label(std::string("all_reduce ") + reduce_op_name(op), dt, len, pg) << ": sync and async differ";
        auto a = results[0].to_vector<double>(), b = results[2].to_vector<double>();
        double tol = dt == kBFloat16 ? 2e-2 : (dt == kFloat32 ? 1e-5 : 1e-12);
        for (int64_t i = 0; i < len; ++i) {
          double w = 0;
          for (int r = 0; r < n; ++r) w = std::max(w, std::fabs(value(r, i)));
          double scale = op == ReduceOp::PRODUCT ? std::max(std::fabs(a[i]), 1e-300) : std::max(w, 1e-300);
          ASSERT_LE(std::fabs(a[i] - b[i]), tol * scale * n)
              << label(std::string("all_reduce ") + reduce_op_name(op), dt, len, pg) << " element " << i << ": MPI "
              << a[i] << ", troupe " << b[i];
        }
      }
    }
  }
  // MIN / MAX with signed zeros and NaN: symmetric, so every rank agrees, on both paths (MPI_Iallreduce
  // runs troupe's user ops for floats, as reduce_op.h defines MIN and MAX) and for both float dtypes.
  for (int path = 0; path < 2; ++path) {
    comm::detail::set_mpi_small_allreduce_bytes(path == 0 ? 0 : saved);
    for (ScalarType dt : {kFloat32, kFloat64}) {
      Tensor z = make_t(4, dt, [&](int64_t i) {
        if (i == 0) return me % 2 ? -0.0 : 0.0;
        if (i == 1) return me == n - 1 ? std::nan("") : 1.0;
        return static_cast<double>(i);
      });
      Tensor zmax = z.clone();
      pg->all_reduce(z, ReduceOp::MIN);
      pg->all_reduce(zmax, ReduceOp::MAX);
      auto zv = z.to_vector<double>(), xv = zmax.to_vector<double>();
      const std::string where = std::string(dtype_name(dt)) + (path == 0 ? ", MPI_Iallreduce" : ", recursive doubling");
      EXPECT_TRUE(zv[0] == 0.0 && std::signbit(zv[0])) << "MIN(+0, -0) should be -0, got " << zv[0] << " (" << where << ")";
      EXPECT_TRUE(xv[0] == 0.0 && !std::signbit(xv[0])) << "MAX(+0, -0) should be +0, got " << xv[0] << " (" << where << ")";
      EXPECT_TRUE(std::isnan(zv[1]) && std::isnan(xv[1])) << "a NaN on one rank should give NaN (" << where << ")";
      EXPECT_EQ(zv[3], 3.0);
      EXPECT_EQ(xv[2], 2.0);
    }
  }
  comm::detail::set_mpi_small_allreduce_bytes(-1);
  EXPECT_EQ(comm::detail::mpi_small_allreduce_bytes(*pg), saved);
}

TEST(MpiCollectives, BroadcastFromEveryRank) {
  MPI_SETUP(pg);
  int me = pg->rank();
  for (int src = 0; src < pg->size(); ++src) {
    for (ScalarType dt : kMoveDtypes) {
      for (int64_t len : kSizes) {
        Tensor t = make_t(len, dt, [&](int64_t i) { return me == src ? (dt == kBool ? i % 2 : src * 10 + i % 5) : 0; });
        pg->broadcast(t, src);
        expect_all(t, [&](int64_t i) { return dt == kBool ? i % 2 : src * 10 + i % 5; },
                   label("broadcast from " + std::to_string(src), dt, len, pg));
      }
    }
  }
}

TEST(MpiCollectives, AllGatherIntoTensorAndList) {
  MPI_SETUP(pg);
  int n = pg->size(), me = pg->rank();
  for (ScalarType dt : kMoveDtypes) {
    for (int64_t len : kSizes) {
      auto val = [&](int r, int64_t i) -> double { return dt == kBool ? (r + i) % 2 : r * 10 + i % 7; };
      Tensor in = make_t(len, dt, [&](int64_t i) { return val(me, i); });
      Tensor out = zeros({n * len}, TensorOptions().dtype(dt));
      pg->all_gather_into_tensor(out, in);
      expect_all(out, [&](int64_t j) { return val(static_cast<int>(j / std::max<int64_t>(len, 1)), j % std::max<int64_t>(len, 1)); },
                 label("all_gather_into_tensor", dt, len, pg));
      std::vector<Tensor> outs;
      for (int r = 0; r < n; ++r) outs.push_back(full({len}, 0, TensorOptions().dtype(dt)));
      pg->all_gather(outs, in);
      for (int r = 0; r < n; ++r) {
        expect_all(outs[r], [&](int64_t i) { return val(r, i); }, label("all_gather[" + std::to_string(r) + "]", dt, len, pg));
      }
    }
  }
  // In place: the input is this rank's slice of the output.
  Tensor out = zeros({n * 4}, TensorOptions().dtype(kFloat32));
  Tensor mine = out.narrow(0, me * 4, 4);
  mine.fill_(me + 1.0);
  pg->all_gather_into_tensor(out, mine);
  expect_all(out, [](int64_t j) { return j / 4 + 1.0; }, "all_gather_into_tensor in place");
}

TEST(MpiCollectives, ReduceScatterTensorAndList) {
  MPI_SETUP(pg);
  int n = pg->size(), me = pg->rank();
  double sum = n * (n + 1) / 2.0;
  for (ScalarType dt : kDtypes) {
    for (ReduceOp op : {ReduceOp::SUM, ReduceOp::AVG, ReduceOp::MIN, ReduceOp::MAX, ReduceOp::PRODUCT}) {
      if (!op_fits(op, dt)) continue;
      for (int64_t len : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{1000}}) {
        // Rank q holds (q + 1) * (1 + j % 3) at element j of its input (n * len elements).
        auto base = [](int64_t j) { return 1.0 + j % 3; };
        Tensor in = make_t(n * len, dt, [&](int64_t j) { return (me + 1) * base(j); });
        Tensor out = zeros({len}, TensorOptions().dtype(dt));
        auto want = [&](int64_t i) {
          double b = base(me * len + i);
          switch (op) {
            case ReduceOp::SUM: return sum * b;
            case ReduceOp::AVG: return expected_avg(dt, sum * b, n);
            case ReduceOp::MIN: return b;
            case ReduceOp::MAX: return n * b;
            case ReduceOp::PRODUCT: {
              double p = 1;
              for (int q = 0; q < n; ++q) p *= (q + 1) * b;
              return p;
            }
          }
          return 0.0;
        };
        std::string what = label(std::string("reduce_scatter_tensor ") + reduce_op_name(op), dt, len, pg);
        if (dt == kBFloat16 || dt == kFloat16) {
          if (op == ReduceOp::PRODUCT && n > 2) continue;  // 4! * 3^4 is not exact in 16 bits
        }
        pg->reduce_scatter_tensor(out, in, op);
        expect_all(out, want, what);
        std::vector<Tensor> ins;
        for (int r = 0; r < n; ++r) ins.push_back(in.narrow(0, r * len, len).contiguous());
        Tensor out2 = zeros({len}, TensorOptions().dtype(dt));
        pg->reduce_scatter(out2, ins, op);
        expect_all(out2, want, "list " + what);
      }
    }
  }
}

TEST(MpiCollectives, AllToAll) {
  MPI_SETUP(pg);
  int n = pg->size(), me = pg->rank();
  for (ScalarType dt : kMoveDtypes) {
    for (int64_t len : {int64_t{0}, int64_t{1}, int64_t{5}, int64_t{4096}}) {
      // Chunk j of rank q's input, element k: q*16 + j*4 + k%4 (bool: parity of it).
      auto val = [&](int q, int j, int64_t k) -> double {
        double v = q * 16 + j * 4 + k % 4;
        return dt == kBool ? std::fmod(v, 2.0) : v;
      };
      Tensor in = make_t(n * len, dt, [&](int64_t x) { return val(me, static_cast<int>(x / len), x % len); });
      Tensor out = zeros({n * len}, TensorOptions().dtype(dt));
      pg->all_to_all(out, in);
      expect_all(out, [&](int64_t x) { return val(static_cast<int>(x / len), me, x % len); }, label("all_to_all", dt, len, pg));
    }
  }
}

TEST(MpiCollectives, AsyncCompletesInIssueOrder) {
  MPI_SETUP(pg);
  int n = pg->size(), me = pg->rank();
  uint64_t seq0 = pg->sequence_number();
  std::vector<Tensor> ts;
  std::vector<WorkPtr> works;
  for (int k = 0; k < 8; ++k) {
    ts.push_back(full({1000 * (k + 1)}, me + k + 1.0, TensorOptions().dtype(kFloat64)));
    works.push_back(pg->all_reduce_async(ts.back()));
  }
  EXPECT_EQ(pg->sequence_number(), seq0 + 8);
  for (int k = 7; k >= 0; --k) {
    works[k]->wait();
    EXPECT_TRUE(works[k]->is_completed());
    EXPECT_EQ(works[k]->exception(), nullptr);
    // Issue order: once op k finished, every earlier one has too.
    for (int j = 0; j < k; ++j) EXPECT_TRUE(works[j]->is_completed()) << "op " << j << " before " << k;
  }
  for (int k = 0; k < 8; ++k) {
    expect_all(ts[k], [&](int64_t) { return n * (n + 1) / 2.0 + n * k; }, "async all_reduce " + std::to_string(k));
  }
  pg->barrier();
  EXPECT_EQ(pg->sequence_number(), seq0 + 9);
  // send and recv take no sequence number; new_group and split take one.
  int n1 = (me + 1) % n, p1 = (me + n - 1) % n;
  Tensor r = zeros({1});
  pg->send(full({1}, 1.0), n1);
  pg->recv(r, p1);
  EXPECT_EQ(pg->sequence_number(), seq0 + 9);
  auto sub = pg->split(0, me);
  EXPECT_EQ(pg->sequence_number(), seq0 + 10);
  EXPECT_EQ(sub->sequence_number(), 0u);
}

TEST(MpiCollectives, ChunkedMessages) {
  MPI_SETUP(pg);
  int n = pg->size(), me = pg->rank();
  comm::detail::set_mpi_max_count(3);  // every message below goes in pieces of at most 3 elements
  Tensor a = make_t(10, kFloat32, [&](int64_t i) { return contribution(me, i); });
  pg->all_reduce(a);
  expect_all(a, [&](int64_t i) { return reduced(ReduceOp::SUM, n, i); }, "chunked all_reduce");
  Tensor h = make_t(10, kBFloat16, [&](int64_t i) { return contribution(me, i); });
  pg->all_reduce(h, ReduceOp::MAX);
  expect_all(h, [&](int64_t i) { return reduced(ReduceOp::MAX, n, i); }, "chunked all_reduce bf16");
  Tensor b = make_t(10, kInt64, [&](int64_t i) { return me == 1 ? i * 3 : -1; });
  pg->broadcast(b, 1);
  expect_all(b, [](int64_t i) { return i * 3; }, "chunked broadcast");
  Tensor in = make_t(7, kInt32, [&](int64_t i) { return me * 10 + i; });
  Tensor out = zeros({7 * n}, TensorOptions().dtype(kInt32));
  pg->all_gather_into_tensor(out, in);
  expect_all(out, [](int64_t j) { return (j / 7) * 10 + j % 7; }, "chunked all_gather");
  Tensor rin = make_t(7 * n, kFloat64, [&](int64_t j) { return (me + 1) * (j + 1.0); });
  Tensor rout = zeros({7}, TensorOptions().dtype(kFloat64));
  pg->reduce_scatter_tensor(rout, rin);
  expect_all(rout, [&](int64_t i) { return n * (n + 1) / 2.0 * (me * 7 + i + 1.0); }, "chunked reduce_scatter");
  Tensor ain = make_t(7 * n, kInt64, [&](int64_t x) { return me * 1000 + x; });
  Tensor aout = zeros({7 * n}, TensorOptions().dtype(kInt64));
  pg->all_to_all(aout, ain);
  expect_all(aout, [&](int64_t x) { return (x / 7) * 1000 + me * 7 + x % 7; }, "chunked all_to_all");
  Tensor s = make_t(11, kFloat32, [&](int64_t i) { return me * 100 + i; });
  Tensor r = zeros({11}, TensorOptions().dtype(kFloat32));
  int next = (me + 1) % n, prev = (me + n - 1) % n;
  pg->send(s, next, 3);
  pg->recv(r, prev, 3);
  expect_all(r, [&](int64_t i) { return prev * 100 + i; }, "chunked send/recv");
  comm::detail::set_mpi_max_count(INT_MAX);
}

TEST(MpiPointToPoint, RingOfBlockingSendsThenRecvs) {
  MPI_SETUP(pg);
  int n = pg->size(), me = pg->rank();
  int next = (me + 1) % n, prev = (me + n - 1) % n;
  for (ScalarType dt : kMoveDtypes) {
    for (int64_t len : {int64_t{0}, int64_t{3}, int64_t{1} << 20}) {  // 1M elements: past the eager limit
      auto val = [&](int r, int64_t i) -> double { return dt == kBool ? (r + i) % 2 : r * 10 + i % 9; };
      Tensor s = make_t(len, dt, [&](int64_t i) { return val(me, i); });
      Tensor r = zeros({len}, TensorOptions().dtype(dt));
      pg->send(s, next, 7);  // buffered: returns before the peer receives
      pg->recv(r, prev, 7);
      expect_all(r, [&](int64_t i) { return val(prev, i); }, label("send/recv ring", dt, len, pg));
    }
  }
  // Tags keep messages apart: receive in the other order than sent.
  Tensor a = full({2}, me + 1.0), b = full({2}, -(me + 1.0));
  auto w1 = pg->send_async(a, next, 1);
  auto w2 = pg->send_async(b, next, 2);
  Tensor rb = zeros({2}), ra = zeros({2});
  pg->recv(rb, prev, 2);
  pg->recv(ra, prev, 1);
  w1->wait();
  w2->wait();
  expect_all(ra, [&](int64_t) { return prev + 1.0; }, "tag 1");
  expect_all(rb, [&](int64_t) { return -(prev + 1.0); }, "tag 2");
}

TEST(MpiPointToPoint, WrongSizeIsAnError) {
  MPI_SETUP(pg);
  if (pg->rank() == 0) {
    pg->send(full({5}, 1.0), 1, 9);
  } else if (pg->rank() == 1) {
    Tensor r = zeros({8});
    std::string err = error_of([&] { pg->recv(r, 0, 9); });
    EXPECT_TRUE(contains(err, "[recv]") && contains(err, "expected 8 elements from rank 0") && contains(err, "got 5"))
        << err;
  }
  pg->barrier();
}

TEST(MpiGroups, NewGroupAndSplit) {
  MPI_SETUP(pg);
  int n = pg->size(), me = pg->rank();
  // Even ranks, listed in reverse: new rank = position in the list.
  std::vector<int> evens;
  for (int r = n - 1; r >= 0; --r) {
    if (r % 2 == 0) evens.push_back(r);
  }
  auto g = pg->new_group(evens);
  if (me % 2 == 0) {
    ASSERT_NE(g, nullptr);
    EXPECT_EQ(g->size(), static_cast<int>(evens.size()));
    EXPECT_EQ(g->rank(), static_cast<int>(std::find(evens.begin(), evens.end(), me) - evens.begin()));
    EXPECT_EQ(g->backend(), "mpi");
    Tensor t = full({3}, me + 1.0);
    g->all_reduce(t);
    double want = 0;
    for (int r : evens) want += r + 1;
    expect_all(t, [&](int64_t) { return want; }, "new_group all_reduce");
    std::string name = "world/group[";
    for (size_t i = 0; i < evens.size(); ++i) name += (i ? "," : "") + std::to_string(evens[i]);
    EXPECT_EQ(g->options().name, name + "]");
  } else {
    EXPECT_EQ(g, nullptr);
  }
  // split: colour by parity, key reverses the order.
  auto s = pg->split(me % 2, -me);
  ASSERT_NE(s, nullptr);
  int members = (n - me % 2 + 1) / 2;
  EXPECT_EQ(s->size(), members);
  EXPECT_EQ(s->rank(), members - 1 - me / 2);
  Tensor t = full({4}, 1.0, TensorOptions().dtype(kInt64));
  s->all_reduce(t);
  expect_all(t, [&](int64_t) { return members; }, "split all_reduce");
  // Sub-group and world ops interleave (async on both).
  Tensor x = full({100}, me + 1.0), y = full({100}, 1.0);
  auto wx = pg->all_reduce_async(x);
  auto wy = s->all_reduce_async(y);
  wy->wait();
  wx->wait();
  expect_all(x, [&](int64_t) { return n * (n + 1) / 2.0; }, "world after split");
  expect_all(y, [&](int64_t) { return members; }, "split async");
  auto none = pg->split(me == 0 ? -1 : 0, me);
  if (me == 0) {
    EXPECT_EQ(none, nullptr);
  } else {
    ASSERT_NE(none, nullptr);
    EXPECT_EQ(none->size(), n - 1);
  }
  // A name from the options.
  GroupOptions o;
  o.name = "pairs";
  auto named = pg->split(me / 2, me, o);
  EXPECT_EQ(named->options().name, "pairs");
  std::string err = error_of([&] { pg->new_group({0, 0}); });
  EXPECT_TRUE(contains(err, "[new_group]") && contains(err, "appears twice")) << err;
  err = error_of([&] { pg->new_group({0, n}); });
  EXPECT_TRUE(contains(err, "[new_group]") && contains(err, "is not in [0, " + std::to_string(n) + ")")) << err;
}

TEST(MpiErrors, LocalChecksNameTheOpAndValues) {
  MPI_SETUP(pg);
  int n = pg->size();
  Tensor m = zeros({3, 4}).t();
  std::string err = error_of([&] { pg->all_reduce(m); });
  EXPECT_TRUE(contains(err, "[all_reduce]") && contains(err, "not contiguous") && contains(err, "(4, 3)")) << err;
  Tensor i = zeros({4}, TensorOptions().dtype(kInt32));
  err = error_of([&] { pg->all_reduce(i, ReduceOp::AVG); });
  EXPECT_TRUE(contains(err, "AVG needs a floating dtype, got int32")) << err;
  Tensor out = zeros({3});
  err = error_of([&] { pg->all_gather_into_tensor(out, zeros({2})); });
  EXPECT_TRUE(contains(err, "[all_gather_into_tensor]") && contains(err, "output has 3 elements")) << err;
  err = error_of([&] { pg->reduce_scatter_tensor(out, zeros({3})); });
  EXPECT_TRUE(contains(err, "[reduce_scatter_tensor]") && contains(err, "input has 3 elements")) << err;
  std::vector<Tensor> outs(n + 1, zeros({2}));
  err = error_of([&] { pg->all_gather(outs, zeros({2})); });
  EXPECT_TRUE(contains(err, "outputs holds " + std::to_string(n + 1) + " tensors")) << err;
  err = error_of([&] { pg->all_to_all(out, zeros({n * 2 + 1})); });
  EXPECT_TRUE(contains(err, "[all_to_all]") && contains(err, "not divisible")) << err;
  err = error_of([&] { pg->all_gather_into_tensor(out, zeros({1}, TensorOptions().dtype(kFloat64))); });
  EXPECT_TRUE(contains(err, "is float32, expected float64")) << err;
  err = error_of([&] { pg->broadcast(out, n); });
  EXPECT_TRUE(contains(err, "[broadcast]") && contains(err, "src " + std::to_string(n))) << err;
  err = error_of([&] { pg->send(out, 0, -1); });
  EXPECT_TRUE(contains(err, "[send]") && contains(err, "tag -1")) << err;
  // Nothing was issued: the ranks still agree.
  pg->barrier();
}

TEST(MpiErrors, DebugCheckCatchesSizeMismatchOnEveryRank) {
  MPI_SETUP(pg);
  set_mpi_debug_checks(true);
  Tensor t = zeros({pg->rank() == 0 ? 10 : 12});
  std::string err = error_of([&] { pg->all_reduce(t); });
  set_mpi_debug_checks(false);
  EXPECT_TRUE(contains(err, "[all_reduce]") && contains(err, "ranks disagree on the tensor size") &&
              contains(err, "from 10 to 12"))
      << err;
  Tensor ok = full({2}, 1.0);
  pg->all_reduce(ok);
  expect_all(ok, [&](int64_t) { return pg->size(); }, "all_reduce after the failed check");
}

TEST(MpiTimeout, LateRankMakesOthersFailNobodyHangs) {
  MPI_SETUP(pg);
  int me = pg->rank();
  GroupOptions o;
  o.timeout = 300ms;
  o.name = "slow";
  auto g = pg->split(0, me, o);
  ASSERT_NE(g, nullptr);
  Tensor t = full({1000}, 1.0);
  auto t0 = std::chrono::steady_clock::now();
  if (me == 1) {
    std::this_thread::sleep_for(1000ms);  // past the others' 300 ms
    std::string err = error_of([&] { g->all_reduce(t); });
    // Late: it either completes (the others' requests are still posted) or times out itself.
    EXPECT_TRUE(err == "<no exception>" || contains(err, "did not complete")) << err;
  } else {
    std::string err = error_of([&] { g->all_reduce(t); });
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
    // Rank 1 is the only one named: every other rank answered that it had begun op #0.
    EXPECT_TRUE(contains(err, "[all_reduce] group 'slow'") && contains(err, "op #0") &&
                contains(err, "did not complete within 300 ms; ranks not arrived: 1 (has begun no op of this group)") &&
                err.ends_with("ranks not arrived: 1 (has begun no op of this group)"))
        << err;
    EXPECT_GE(ms, 250);
    EXPECT_LT(ms, 5000);
    // The group is unusable from now on, at once.
    std::string again = error_of([&] { g->barrier(); });
    EXPECT_TRUE(contains(again, "group unusable: op #0 (all_reduce) timed out")) << again;
  }
  auto total = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(total, 10000);
  pg->barrier();  // every rank's diagnosis is over (they ask the others' groups) before any group goes
  g.reset();
  pg->barrier();  // the world is unaffected
  Tensor x = full({3}, 1.0);
  pg->all_reduce(x);
  expect_all(x, [&](int64_t) { return pg->size(); }, "world after the timeout");
  // Work::wait's own bound.
  if (me == 0) {
    Tensor r = zeros({1});
    auto w = pg->recv_async(r, 1, 77);
    std::string err = error_of([&] { w->wait(100ms); });
    EXPECT_TRUE(contains(err, "[wait] [recv] group 'world'") && contains(err, "from rank 1 (tag 77)") &&
                contains(err, "did not complete within 100 ms"))
        << err;
    pg->barrier();
    w->wait();
    expect_all(r, [](int64_t) { return 5.0; }, "recv after a bounded wait");
  } else {
    pg->barrier();
    if (me == 1) pg->send(full({1}, 5.0), 0, 77);
  }
  pg->barrier();
}

// A rank whose process is stopped (SIGSTOP) cannot answer: the others name it as not answering. Rank 0
// resumes it (SIGCONT) once they all have their error.
TEST(MpiTimeout, StoppedRankIsNamedAsNotAnswering) {
  MPI_SETUP(pg);
  int n = pg->size(), me = pg->rank();
  Tensor pid = full({1}, static_cast<double>(getpid()), TensorOptions().dtype(kInt64));
  Tensor pids = zeros({n}, TensorOptions().dtype(kInt64));
  pg->all_gather_into_tensor(pids, pid);
  GroupOptions o;
  o.timeout = 300ms;
  o.name = "stopped";
  auto g = pg->split(0, me, o);
  auto rest = pg->split(me == 1 ? -1 : 0, me);  // every rank but 1
  ASSERT_NE(g, nullptr);
  Tensor t = full({10}, 1.0);
  if (me == 1) {
    raise(SIGSTOP);  // until rank 0's SIGCONT
    std::string err = error_of([&] { g->all_reduce(t); });
    EXPECT_TRUE(err == "<no exception>" || contains(err, "did not complete")) << err;
  } else {
    auto t0 = std::chrono::steady_clock::now();
    std::string err = error_of([&] { g->all_reduce(t); });
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_TRUE(contains(err, "[all_reduce] group 'stopped'") && contains(err, "op #0") &&
                contains(err, "ranks not arrived: 1 (no answer within 300 ms: dead, stopped or its process stalled)"))
        << err;
    EXPECT_LT(ms, 5000);
    rest->barrier();
    if (me == 0) kill(static_cast<pid_t>(pids.to_vector<int64_t>()[1]), SIGCONT);
  }
  pg->barrier();
  g.reset();
  rest.reset();
  pg->barrier();
}

#endif  // TROUPE_HAVE_MPI
