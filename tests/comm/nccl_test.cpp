// The `nccl` backend: every collective x dtypes x sizes on CUDA tensors against closed forms in rank and
// size, in-place and staged forms, stream ordering after the producing kernels, async order, sub-groups,
// send/recv, local errors and a timeout. Suites:
//   NcclLocal*: the ranks are threads (run_local bootstrap), one per visible GPU; with a single GPU,
//               world size 1, plus 2 ranks on cuda:0 when NCCL accepts that (it reports a duplicate GPU
//               otherwise, and those runs are skipped with NCCL's message).
//   NcclMpi*:   under `mpirun -np N comm_tests --gtest_filter=NcclMpi*` (bootstrap over MPI, device
//               OMPI_COMM_WORLD_LOCAL_RANK % GPUs); skipped when not started by mpirun.
// Every test skips (GTEST_SKIP, with the reason) when cudaGetDeviceCount finds no device, except the
// error checks of make_nccl_group, which run everywhere.
#ifdef TROUPE_HAVE_NCCL

#include <troupe/comm/comm.h>
#include <troupe/tensor/ops.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <mutex>

using namespace troupe;
using namespace troupe::comm;
using namespace std::chrono_literals;

namespace {

int gpus() {
  static const int n = nccl_device_count();
  return n;
}

#define NEED_GPU()                                                                                   \
  if (gpus() < 1) GTEST_SKIP() << "no CUDA device (cudaGetDeviceCount < 1): the nccl backend needs a GPU"

using Body = std::function<void(const ProcessGroupPtr&, int device)>;

/// One way of laying ranks on GPUs: `ranks` threads, on device rank % GPUs, or all on cuda:0.
struct GpuLayout {
  int ranks;
  bool shared;  // every rank on cuda:0
  std::string str() const { return std::to_string(ranks) + (shared ? " ranks on cuda:0" : " ranks, one per GPU"); }
};

GroupOptions test_options(std::chrono::milliseconds timeout = 60s) {
  GroupOptions o;
  o.timeout = timeout;
  return o;
}

void run_layout(const GpuLayout& l, const Body& body, std::chrono::milliseconds timeout = 60s) {
  run_local(l.ranks, [&](ProcessGroupPtr boot) {
    int dev = l.shared ? 0 : boot->rank() % gpus();
    auto pg = make_nccl_group(boot, dev, test_options(timeout));
    body(pg, dev);
  }, test_options());
}

/// Empty when NCCL accepts two ranks on cuda:0, else why not (its error).
const std::string& shared_device_refusal() {
  static const std::string why = [] {
    try {
      run_layout({2, true}, [](const ProcessGroupPtr& pg, int) { pg->barrier(); }, 30s);
      return std::string();
    } catch (const std::exception& e) {
      std::string s = e.what();
      return s.empty() ? std::string("failed") : s;
    }
  }();
  return why;
}

/// The layouts every NcclLocal test runs: one rank per GPU; with one GPU, also 2 ranks on cuda:0 when
/// NCCL allows it.
std::vector<GpuLayout> layouts() {
  std::vector<GpuLayout> v = {{gpus(), false}};
  if (gpus() == 1) {
    if (shared_device_refusal().empty()) {
      v.push_back({2, true});
    } else {
      static std::once_flag once;
      std::call_once(once, [] {
        std::cout << "[ nccl     ] 2 ranks on cuda:0 not run: NCCL refused them: " << shared_device_refusal() << "\n";
      });
    }
  }
  return v;
}

void for_layouts(const Body& body) {
  for (const GpuLayout& l : layouts()) {
    SCOPED_TRACE(l.str());
    run_layout(l, body);
  }
}

// ---- the mpi bootstrap

bool under_mpirun() {
#ifdef TROUPE_HAVE_MPI
  return started_by_mpirun();
#else
  return false;
#endif
}

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

/// The NCCL world over MPI (created once; never destroyed, so that nothing runs at exit after CUDA's
/// teardown); null, with `*error` set, when it could not be made.
ProcessGroupPtr mpi_nccl_world(int* device, std::string* error) {
#ifdef TROUPE_HAVE_MPI
  static int dev = 0;
  static std::string err;
  static ProcessGroupPtr* w = [] {
    auto boot = make_mpi_world(test_options());
    std::atexit([] { mpi_finalize(); });
    dev = env_int("OMPI_COMM_WORLD_LOCAL_RANK", boot->rank()) % gpus();
    try {
      return new ProcessGroupPtr(make_nccl_group(boot, dev, test_options()));
    } catch (const std::exception& e) {
      err = e.what();
      return new ProcessGroupPtr();
    }
  }();
  *device = dev;
  *error = err;
  return *w;
#else
  (void)device;
  *error = "built without MPI";
  return nullptr;
#endif
}

// Skips unless under mpirun with a GPU; skips (with NCCL's error) when this host has more ranks than GPUs
// and NCCL refused the shared devices.
#define NCCL_MPI_SETUP(pg, dev)                                                                        \
  if (!under_mpirun()) GTEST_SKIP() << "not started by mpirun (built without MPI, or no mpirun)";      \
  NEED_GPU();                                                                                          \
  int dev = 0;                                                                                         \
  std::string setup_error;                                                                             \
  ProcessGroupPtr pg = mpi_nccl_world(&dev, &setup_error);                                             \
  if (!pg && env_int("OMPI_COMM_WORLD_LOCAL_SIZE", 1) > gpus())                                        \
    GTEST_SKIP() << "more ranks on this host than GPUs (" << gpus() << "), and NCCL refused: " << setup_error; \
  ASSERT_NE(pg, nullptr) << setup_error;

// ---- tensors and expectations

const std::vector<ScalarType> kDtypes = {kFloat32, kFloat64, kInt32, kInt64, kBFloat16, kFloat16};
const std::vector<ScalarType> kMoveDtypes = {kFloat32, kFloat64, kInt32, kInt64, kBFloat16, kFloat16, kUInt8, kBool};
const std::vector<int64_t> kSizes = {0, 1, 7, 1000, 65537};
const std::vector<ReduceOp> kOps = {ReduceOp::SUM, ReduceOp::AVG, ReduceOp::PRODUCT, ReduceOp::MIN, ReduceOp::MAX};

TensorOptions on(int dev, ScalarType dt) { return TensorOptions().dtype(dt).device(Device(kCUDA, dev)); }

Tensor make_t(int64_t n, ScalarType dt, int dev, const std::function<double(int64_t)>& f) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = f(i);
  return tensor(v, kFloat64).to(dt).contiguous().to(Device(kCUDA, dev));
}

/// Relative tolerance: exact for integers and moves; the rounding of 16-bit floats for reductions.
double tolerance(ScalarType dt, bool reduced) {
  if (!reduced || !is_floating_point(dt)) return 0;
  if (dt == kFloat16 || dt == kBFloat16) return 2e-2;
  return dt == kFloat32 ? 1e-6 : 1e-12;
}

void expect_all(const Tensor& t, const std::function<double(int64_t)>& want, const std::string& what, double rel = 0) {
  ASSERT_TRUE(t.is_cuda()) << what << ": result left the GPU";
  auto got = t.cpu().to(kFloat64).contiguous().to_vector<double>();
  for (size_t i = 0; i < got.size(); ++i) {
    double w = want(static_cast<int64_t>(i));
    if (std::fabs(got[i] - w) > rel * std::fabs(w)) {
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
  return "<no CommError>";
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

// ---- the checks (each runs on one rank's group; every rank runs the same)

void check_all_reduce(const ProcessGroupPtr& pg, int dev) {
  int n = pg->size(), me = pg->rank();
  for (ScalarType dt : kDtypes) {
    for (ReduceOp op : kOps) {
      if (op == ReduceOp::AVG && !is_floating_point(dt)) continue;
      for (int64_t len : kSizes) {
        Tensor t = make_t(len, dt, dev, [&](int64_t i) { return contribution(me, i); });
        pg->all_reduce(t, op);
        EXPECT_EQ(t.numel(), len);
        expect_all(t, [&](int64_t i) { return reduced(op, n, i); },
                   label(std::string("all_reduce ") + reduce_op_name(op), dt, len, pg), tolerance(dt, true));
      }
    }
  }
  // bool: SUM is OR, PRODUCT AND; uint8 MAX.
  Tensor b = make_t(6, kBool, dev, [&](int64_t i) { return me == 0 ? static_cast<double>(i % 2) : 0.0; });
  pg->all_reduce(b, ReduceOp::SUM);
  expect_all(b, [](int64_t i) { return static_cast<double>(i % 2); }, label("all_reduce SUM(OR)", kBool, 6, pg));
  Tensor a = make_t(6, kBool, dev, [&](int64_t i) { return me == 0 ? static_cast<double>(i % 2) : 1.0; });
  pg->all_reduce(a, ReduceOp::PRODUCT);
  expect_all(a, [](int64_t i) { return static_cast<double>(i % 2); }, label("all_reduce PRODUCT(AND)", kBool, 6, pg));
  Tensor u = make_t(9, kUInt8, dev, [&](int64_t i) { return me + 1 + static_cast<double>(i); });
  pg->all_reduce(u, ReduceOp::MAX);
  expect_all(u, [&](int64_t i) { return n + static_cast<double>(i); }, label("all_reduce MAX", kUInt8, 9, pg));
}

void check_broadcast(const ProcessGroupPtr& pg, int dev) {
  int n = pg->size(), me = pg->rank();
  for (int src : {0, n - 1}) {
    for (ScalarType dt : kMoveDtypes) {
      for (int64_t len : kSizes) {
        auto val = [](int r, int64_t i) { return static_cast<double>((r + 1 + i) % 2 + (r % 3)); };
        Tensor t = make_t(len, dt, dev, [&](int64_t i) { return val(me, i); });
        pg->broadcast(t, src);
        auto want = [&](int64_t i) { return dt == kBool ? static_cast<double>(val(src, i) != 0) : val(src, i); };
        expect_all(t, want, label("broadcast from " + std::to_string(src), dt, len, pg));
      }
    }
  }
}

// Rank r's element i of an all-gather: exact in every dtype (below 256 for up to 8 ranks).
double gathered(int r, int64_t i) { return r * 8 + static_cast<double>(i % 8); }

void check_all_gather(const ProcessGroupPtr& pg, int dev) {
  int n = pg->size(), me = pg->rank();
  for (ScalarType dt : kMoveDtypes) {
    if (dt == kBool) continue;
    for (int64_t len : kSizes) {
      Tensor in = make_t(len, dt, dev, [&](int64_t i) { return gathered(me, i); });
      auto want = [&](int64_t k) { return gathered(static_cast<int>(k / std::max<int64_t>(len, 1)), k % std::max<int64_t>(len, 1)); };
      // into a tensor
      Tensor out = zeros({len * n}, on(dev, dt));
      pg->all_gather_into_tensor(out, in);
      expect_all(out, want, label("all_gather_into_tensor", dt, len, pg));
      // in place: the input is this rank's slot of the output
      Tensor out2 = zeros({len * n}, on(dev, dt));
      Tensor slot = out2.narrow(0, me * len, len);
      slot.copy_(in);
      pg->all_gather_into_tensor(out2, slot);
      expect_all(out2, want, label("all_gather_into_tensor in place", dt, len, pg));
      // into a list
      std::vector<Tensor> outs;
      for (int r = 0; r < n; ++r) outs.push_back(full({len}, 99, on(dev, dt)));
      pg->all_gather(outs, in);
      for (int r = 0; r < n; ++r) {
        expect_all(outs[r], [&](int64_t i) { return gathered(r, i); },
                   label("all_gather outputs[" + std::to_string(r) + "]", dt, len, pg));
      }
    }
  }
}

void check_reduce_scatter(const ProcessGroupPtr& pg, int dev) {
  int n = pg->size(), me = pg->rank();
  for (ScalarType dt : kDtypes) {
    for (ReduceOp op : {ReduceOp::SUM, ReduceOp::AVG, ReduceOp::MAX}) {
      if (op == ReduceOp::AVG && !is_floating_point(dt)) continue;
      for (int64_t len : kSizes) {
        // Element k of the input is contribution(rank, k): rank r's output element i reduces input[r*len + i].
        Tensor in = make_t(len * n, dt, dev, [&](int64_t k) { return contribution(me, k); });
        auto want = [&](int64_t i) { return reduced(op, n, me * len + i); };
        std::string what = std::string("reduce_scatter_tensor ") + reduce_op_name(op);
        Tensor out = zeros({len}, on(dev, dt));
        pg->reduce_scatter_tensor(out, in, op);
        expect_all(out, want, label(what, dt, len, pg), tolerance(dt, true));
        // in place: the output is this rank's slot of the input
        Tensor in2 = in.clone();
        Tensor slot = in2.narrow(0, me * len, len);
        pg->reduce_scatter_tensor(slot, in2, op);
        expect_all(slot, want, label(what + " in place", dt, len, pg), tolerance(dt, true));
        // from a list: inputs[j] = input chunk j
        std::vector<Tensor> ins;
        for (int j = 0; j < n; ++j) ins.push_back(in.narrow(0, j * len, len).contiguous());
        Tensor out3 = zeros({len}, on(dev, dt));
        pg->reduce_scatter(out3, ins, op);
        expect_all(out3, want, label(std::string("reduce_scatter ") + reduce_op_name(op), dt, len, pg),
                   tolerance(dt, true));
      }
    }
  }
}

void check_all_to_all(const ProcessGroupPtr& pg, int dev) {
  int n = pg->size(), me = pg->rank();
  // Chunk j of rank s's input, element k: (s * n + j) * 4 + k % 4 (below 256 for up to 8 ranks).
  auto val = [&](int s, int j, int64_t k) { return static_cast<double>((s * n + j) * 4 + k % 4); };
  for (ScalarType dt : kDtypes) {
    for (int64_t chunk : {0, 1, 5, 4099}) {
      Tensor in = make_t(chunk * n, dt, dev, [&](int64_t k) { return val(me, static_cast<int>(k / std::max<int64_t>(chunk, 1)), k % std::max<int64_t>(chunk, 1)); });
      Tensor out = zeros({chunk * n}, on(dev, dt));
      pg->all_to_all(out, in);
      // Chunk i of my output is chunk `me` of rank i's input.
      auto want = [&](int64_t k) { int64_t c = std::max<int64_t>(chunk, 1); return val(static_cast<int>(k / c), me, k % c); };
      expect_all(out, want, label("all_to_all", dt, chunk, pg));
      // output == input: staged
      Tensor io = in.clone();
      pg->all_to_all(io, io);
      expect_all(io, want, label("all_to_all in place", dt, chunk, pg));
    }
  }
}

void check_send_recv(const ProcessGroupPtr& pg, int dev) {
  int n = pg->size(), me = pg->rank();
  if (n < 2) {
    EXPECT_TRUE(contains(error_of([&] { pg->send(zeros({1}, on(dev, kFloat32)), 0); }), "is this rank"));
    return;
  }
  // A ring: even ranks send first, odd ranks receive first (an NCCL send completes when its peer receives).
  int next = (me + 1) % n, prev = (me + n - 1) % n;
  for (ScalarType dt : kMoveDtypes) {
    for (int64_t len : kSizes) {
      Tensor mine = make_t(len, dt, dev, [&](int64_t i) { return static_cast<double>((me + i) % 2 + me); });
      Tensor got = zeros({len}, on(dev, dt));
      if (me % 2 == 0) {
        pg->send(mine, next);
        pg->recv(got, prev);
      } else {
        pg->recv(got, prev);
        pg->send(mine, next);
      }
      auto want = [&](int64_t i) {
        double v = static_cast<double>((prev + i) % 2 + prev);
        return dt == kBool ? static_cast<double>(v != 0) : v;
      };
      expect_all(got, want, label("recv from " + std::to_string(prev), dt, len, pg));
    }
  }
}

void check_barrier_and_order(const ProcessGroupPtr& pg, int dev) {
  int n = pg->size(), me = pg->rank();
  uint64_t s0 = pg->sequence_number();
  pg->barrier();
  EXPECT_EQ(pg->sequence_number(), s0 + 1);
  // Async ops complete in issue order; waiting in reverse gives the same results.
  std::vector<Tensor> ts;
  std::vector<WorkPtr> ws;
  for (int k = 0; k < 6; ++k) {
    ts.push_back(full({1000 + k}, me + 1 + k, on(dev, kFloat32)));
    ws.push_back(pg->all_reduce_async(ts.back()));
  }
  for (int k = 5; k >= 0; --k) ws[k]->wait(30s);
  for (int k = 0; k < 6; ++k) {
    EXPECT_TRUE(ws[k]->is_completed());
    EXPECT_EQ(ws[k]->exception(), nullptr);
    expect_all(ts[k], [&](int64_t) { return n * (n + 1) / 2.0 + n * k; }, "async all_reduce #" + std::to_string(k));
  }
  EXPECT_EQ(pg->sequence_number(), s0 + 7);
  // The collective waits for the kernels that produced its input (legacy default stream): a large input
  // computed just before it must arrive whole.
  Tensor base = full({1 << 22}, me + 1.0, on(dev, kFloat32));
  Tensor x = base * 2.0 + 1.0;
  x = x * 3.0;
  auto w = pg->all_reduce_async(x);
  w->wait();
  double want = 0;
  for (int r = 0; r < n; ++r) want += ((r + 1.0) * 2 + 1) * 3;
  expect_all(x, [&](int64_t) { return want; }, "all_reduce after producing kernels");
}

void check_subgroups(const ProcessGroupPtr& pg, int dev) {
  int n = pg->size(), me = pg->rank();
  // new_group of the even ranks
  std::vector<int> evens;
  for (int r = 0; r < n; r += 2) evens.push_back(r);
  uint64_t s0 = pg->sequence_number();
  auto sub = pg->new_group(evens);
  EXPECT_EQ(pg->sequence_number(), s0 + 1);
  if (me % 2 == 0) {
    ASSERT_NE(sub, nullptr);
    EXPECT_EQ(sub->backend(), "nccl");
    EXPECT_EQ(sub->size(), static_cast<int>(evens.size()));
    EXPECT_EQ(sub->rank(), me / 2);
    std::string name = "world/group[";
    for (size_t i = 0; i < evens.size(); ++i) name += (i ? "," : "") + std::to_string(evens[i]);
    EXPECT_EQ(sub->options().name, name + "]");
    Tensor t = full({5}, me + 1.0, on(dev, kFloat64));
    sub->all_reduce(t);
    double want = 0;
    for (int r : evens) want += r + 1;
    expect_all(t, [&](int64_t) { return want; }, "all_reduce on new_group of the even ranks");
  } else {
    EXPECT_EQ(sub, nullptr);
  }
  // split: two colours, keys reversing the order
  auto half = pg->split(me % 2, -me);
  ASSERT_NE(half, nullptr);
  int members = (n - me % 2 + 1) / 2;
  EXPECT_EQ(half->size(), members);
  EXPECT_EQ(half->rank(), members - 1 - me / 2);
  Tensor t = full({3}, static_cast<double>(me), on(dev, kInt64));
  half->all_reduce(t, ReduceOp::MAX);
  int top = (me % 2) + 2 * (members - 1);
  expect_all(t, [&](int64_t) { return static_cast<double>(top); }, "all_reduce MAX on split");
  // colour < 0: not in any group
  auto none = pg->split(me == 0 ? -1 : 1, 0);
  EXPECT_EQ(none == nullptr, me == 0);
}

void check_errors(const ProcessGroupPtr& pg, int dev) {
  int n = pg->size();
  Tensor cpu = zeros({4});
  std::string e = error_of([&] { pg->all_reduce(cpu); });
  EXPECT_TRUE(contains(e, "[all_reduce]") && contains(e, "nccl backend takes CUDA tensors") && contains(e, "cpu"))
      << e;
  Tensor nc = zeros({3, 4}, on(dev, kFloat32)).t();
  e = error_of([&] { pg->broadcast(nc, 0); });
  EXPECT_TRUE(contains(e, "[broadcast]") && contains(e, "not contiguous")) << e;
  Tensor ints = zeros({4}, on(dev, kInt32));
  e = error_of([&] { pg->all_reduce(ints, ReduceOp::AVG); });
  EXPECT_TRUE(contains(e, "AVG needs a floating dtype")) << e;
  Tensor in = zeros({4}, on(dev, kFloat32));
  Tensor out = zeros({4 * n + 1}, on(dev, kFloat32));
  e = error_of([&] { pg->all_gather_into_tensor(out, in); });
  EXPECT_TRUE(contains(e, "[all_gather_into_tensor]") && contains(e, "expected size * input.numel()")) << e;
  Tensor wrong = zeros({4 * n}, on(dev, kFloat64));
  e = error_of([&] { pg->all_gather_into_tensor(wrong, in); });
  EXPECT_TRUE(contains(e, "float64") || contains(e, "Float64") || contains(e, "double")) << e;
  std::vector<Tensor> few(static_cast<size_t>(n + 1), zeros({4}, on(dev, kFloat32)));
  e = error_of([&] { pg->all_gather(few, in); });
  EXPECT_TRUE(contains(e, "holds " + std::to_string(n + 1) + " tensors")) << e;
  e = error_of([&] { pg->broadcast(in, n); });
  EXPECT_TRUE(contains(e, "src " + std::to_string(n) + " is not in")) << e;
  e = error_of([&] { pg->new_group({0, 0}); });
  EXPECT_TRUE(contains(e, "appears twice")) << e;
  // Local errors take no sequence number, and the group still works.
  Tensor ok = full({2}, 1.0, on(dev, kFloat32));
  pg->all_reduce(ok);
  expect_all(ok, [&](int64_t) { return static_cast<double>(n); }, "all_reduce after local errors");
}

}  // namespace

// ---- make_nccl_group's own errors (run everywhere: with or without a GPU)

TEST(NcclLocal, MakeGroupErrors) {
  EXPECT_TRUE(contains(error_of([] { make_nccl_group(nullptr, 0); }), "bootstrap group is null"));
  std::string e;
  run_local(1, [&](ProcessGroupPtr boot) {
    e = error_of([&] { make_nccl_group(boot, gpus() < 1 ? 0 : gpus() + 3); });
  });
  if (gpus() < 1) {
    EXPECT_TRUE(contains(e, "[make_nccl_group]") && contains(e, "no CUDA device")) << e;
  } else {
    EXPECT_TRUE(contains(e, "[make_nccl_group]") && contains(e, "device " + std::to_string(gpus() + 3) + " is not in"))
        << e;
  }
  EXPECT_GE(nccl_version(), 21800);  // ncclCommSplit needs NCCL 2.18
}

// ---- on local ranks (threads)

TEST(NcclLocal, Basics) {
  NEED_GPU();
  for_layouts([](const ProcessGroupPtr& pg, int dev) {
    EXPECT_EQ(pg->backend(), "nccl");
    EXPECT_EQ(pg->options().name, "world");
    EXPECT_GE(pg->rank(), 0);
    EXPECT_LT(pg->rank(), pg->size());
    Tensor t = full({4}, pg->rank() + 1.0, on(dev, kFloat32));
    pg->all_reduce(t);
    int n = pg->size();
    expect_all(t, [&](int64_t) { return n * (n + 1) / 2.0; }, "all_reduce");
  });
}

TEST(NcclLocal, TwoRanksOnOneDevice) {
  NEED_GPU();
  if (!shared_device_refusal().empty()) GTEST_SKIP() << "NCCL refuses 2 ranks on cuda:0: " << shared_device_refusal();
  run_layout({2, true}, [](const ProcessGroupPtr& pg, int dev) {
    Tensor t = full({1000}, pg->rank() + 1.0, on(dev, kFloat32));
    pg->all_reduce(t);
    expect_all(t, [](int64_t) { return 3.0; }, "all_reduce, 2 ranks on cuda:0");
  });
}

TEST(NcclLocal, AllReduceEveryOpDtypeAndSize) { NEED_GPU(); for_layouts(check_all_reduce); }
TEST(NcclLocal, BroadcastEveryDtypeAndSize) { NEED_GPU(); for_layouts(check_broadcast); }
TEST(NcclLocal, AllGatherEveryDtypeAndSize) { NEED_GPU(); for_layouts(check_all_gather); }
TEST(NcclLocal, ReduceScatterEveryDtypeAndSize) { NEED_GPU(); for_layouts(check_reduce_scatter); }
TEST(NcclLocal, AllToAllEveryDtypeAndSize) { NEED_GPU(); for_layouts(check_all_to_all); }
TEST(NcclLocal, SendRecvRing) { NEED_GPU(); for_layouts(check_send_recv); }
TEST(NcclLocal, BarrierAsyncOrderAndStreamOrdering) { NEED_GPU(); for_layouts(check_barrier_and_order); }
TEST(NcclLocal, NewGroupAndSplit) { NEED_GPU(); for_layouts(check_subgroups); }
TEST(NcclLocal, LocalErrors) { NEED_GPU(); for_layouts(check_errors); }

TEST(NcclLocal, TimeoutAbortsAndNamesTheOp) {
  NEED_GPU();
  GpuLayout l = {gpus(), false};
  if (l.ranks < 2) {
    if (!shared_device_refusal().empty()) GTEST_SKIP() << "needs 2 ranks (2 GPUs, or NCCL accepting 2 ranks on one)";
    l = {2, true};
  }
  run_local(l.ranks, [&](ProcessGroupPtr boot) {
    int dev = l.shared ? 0 : boot->rank() % gpus();
    auto pg = make_nccl_group(boot, dev, test_options(1500ms));
    pg->barrier();  // connected
    if (pg->rank() == 0) {
      Tensor t = full({8}, 1.0, on(dev, kFloat32));
      auto t0 = std::chrono::steady_clock::now();
      std::string e = error_of([&] { pg->all_reduce(t); });  // nobody else joins
      auto took = std::chrono::steady_clock::now() - t0;
      EXPECT_TRUE(contains(e, "[all_reduce]") && contains(e, "group 'world'") && contains(e, "op #1") &&
                  contains(e, "did not complete within 1500 ms"))
          << e;
      EXPECT_LT(took, 30s);
      e = error_of([&] { pg->barrier(); });
      EXPECT_TRUE(contains(e, "group unusable")) << e;
    }
    boot->barrier();  // the other ranks stay until rank 0 is done
  }, test_options());
}

// ---- under mpirun (bootstrap over MPI)

TEST(NcclMpi, AllReduce) { NCCL_MPI_SETUP(pg, dev); check_all_reduce(pg, dev); }
TEST(NcclMpi, Broadcast) { NCCL_MPI_SETUP(pg, dev); check_broadcast(pg, dev); }
TEST(NcclMpi, AllGather) { NCCL_MPI_SETUP(pg, dev); check_all_gather(pg, dev); }
TEST(NcclMpi, ReduceScatter) { NCCL_MPI_SETUP(pg, dev); check_reduce_scatter(pg, dev); }
TEST(NcclMpi, AllToAll) { NCCL_MPI_SETUP(pg, dev); check_all_to_all(pg, dev); }
TEST(NcclMpi, SendRecv) { NCCL_MPI_SETUP(pg, dev); check_send_recv(pg, dev); }
TEST(NcclMpi, BarrierAndOrder) { NCCL_MPI_SETUP(pg, dev); check_barrier_and_order(pg, dev); }
TEST(NcclMpi, Subgroups) { NCCL_MPI_SETUP(pg, dev); check_subgroups(pg, dev); }
TEST(NcclMpi, Errors) { NCCL_MPI_SETUP(pg, dev); check_errors(pg, dev); }

#endif  // TROUPE_HAVE_NCCL
