// Staged groups (comm/staged.h): every collective, send/recv, barrier and sub-groups through a staged
// group against closed forms in rank and size, synchronous and async (completed by wait() and by
// polling is_completed()); over the local backend (ranks as threads, world sizes 1-4) and, under mpirun,
// over the mpi backend. Without a GPU the staged device is the CPU (each op still copies out and back);
// with one, the same checks run on cuda:0 and a CPU tensor is refused naming the group's device.
#include <troupe/comm/comm.h>
#include <troupe/tensor/backend.h>
#include <troupe/tensor/ops.h>
#include "mpi_world.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>

using namespace troupe;
using namespace troupe::comm;

namespace {

// A tensor on `dev` of `dtype` whose element i is f(i).
Tensor make(int64_t n, ScalarType dtype, Device dev, const std::function<double(int64_t)>& f) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = f(i);
  return tensor(v, kFloat64).to(dtype).to(dev);
}

// Every element of `t` against want(i); the first difference only.
void expect(const Tensor& t, const std::function<double(int64_t)>& want, const std::string& what) {
  auto got = t.to(Device(kCPU)).to(kFloat64).contiguous().to_vector<double>();
  for (size_t i = 0; i < got.size(); ++i) {
    const double w = want(static_cast<int64_t>(i));
    if (got[i] != w) {
      ADD_FAILURE() << what << ": element " << i << " is " << got[i] << ", expected " << w;
      return;
    }
  }
}

// Waits for `w` by polling is_completed() (the copy back then happens there, not in wait()).
void poll(const WorkPtr& w) {
  while (!w->is_completed()) {
  }
  if (auto e = w->exception()) std::rethrow_exception(e);
}

// Every op on the staged group `pg` (every rank calls this), results on pg's device.
void check_ops(const ProcessGroupPtr& pg) {
  const int r = pg->rank(), n = pg->size();
  const Device dev = pg->device();
  const std::string on = " on rank " + std::to_string(r) + " of " + std::to_string(n);
  const double tri = n * (n - 1) / 2.0;
  ASSERT_TRUE(staged_inner(pg) != nullptr);
  EXPECT_EQ(pg->backend(), "staged " + staged_inner(pg)->backend());

  for (ScalarType dt : {kFloat32, kFloat64, kInt64}) {
    const std::string d = std::string(" ") + dtype_name(dt) + on;
    Tensor t = make(1000, dt, dev, [&](int64_t i) { return r + i % 7; });
    pg->all_reduce(t);
    EXPECT_EQ(t.device(), dev);
    expect(t, [&](int64_t i) { return tri + n * static_cast<double>(i % 7); }, "all_reduce SUM" + d);

    Tensor b = make(5, dt, dev, [&](int64_t i) { return r * 10 + i; });
    pg->broadcast(b, n - 1);
    expect(b, [&](int64_t i) { return (n - 1) * 10.0 + i; }, "broadcast" + d);
  }
  Tensor avg = make(9, kFloat64, dev, [&](int64_t i) { return r * 2.0 + i; });
  pg->all_reduce(avg, ReduceOp::AVG);
  expect(avg, [&](int64_t i) { return (n - 1) + static_cast<double>(i); }, "all_reduce AVG" + on);
  Tensor mx = make(4, kInt32, dev, [&](int64_t i) { return r * (i + 1); });
  pg->all_reduce(mx, ReduceOp::MAX);
  expect(mx, [&](int64_t i) { return (n - 1.0) * (i + 1); }, "all_reduce MAX" + on);

  Tensor in = make(3, kFloat32, dev, [&](int64_t i) { return r * 100 + i; });
  Tensor out = zeros({3 * n}, TensorOptions().dtype(kFloat32).device(dev));
  pg->all_gather_into_tensor(out, in);
  expect(out, [&](int64_t k) { return (k / 3) * 100.0 + k % 3; }, "all_gather_into_tensor" + on);

  std::vector<Tensor> outs;
  for (int j = 0; j < n; ++j) outs.push_back(zeros({3}, TensorOptions().dtype(kFloat32).device(dev)));
  pg->all_gather(outs, in);
  for (int j = 0; j < n; ++j)
    expect(outs[static_cast<size_t>(j)], [&](int64_t i) { return j * 100.0 + i; }, "all_gather from " + std::to_string(j) + on);

  Tensor rs_in = make(2 * n, kFloat64, dev, [&](int64_t k) { return r + static_cast<double>(k); });
  Tensor rs_out = zeros({2}, TensorOptions().dtype(kFloat64).device(dev));
  pg->reduce_scatter_tensor(rs_out, rs_in);
  expect(rs_out, [&](int64_t i) { return tri + n * (r * 2.0 + i); }, "reduce_scatter_tensor" + on);

  std::vector<Tensor> rs_list;
  for (int j = 0; j < n; ++j) rs_list.push_back(make(4, kFloat64, dev, [&](int64_t i) { return r * j + static_cast<double>(i); }));
  Tensor rl_out = zeros({4}, TensorOptions().dtype(kFloat64).device(dev));
  pg->reduce_scatter(rl_out, rs_list);
  expect(rl_out, [&](int64_t i) { return r * tri + n * static_cast<double>(i); }, "reduce_scatter" + on);

  Tensor a2a_in = make(2 * n, kInt64, dev, [&](int64_t k) { return r * 1000 + (k / 2) * 10 + k % 2; });
  Tensor a2a_out = zeros({2 * n}, TensorOptions().dtype(kInt64).device(dev));
  pg->all_to_all(a2a_out, a2a_in);
  expect(a2a_out, [&](int64_t k) { return (k / 2) * 1000.0 + r * 10 + k % 2; }, "all_to_all" + on);

  // Async: completed by wait(), and by polling is_completed().
  Tensor x = make(64, kFloat32, dev, [&](int64_t i) { return r + static_cast<double>(i); });
  Tensor y = make(64, kFloat32, dev, [&](int64_t i) { return 2.0 * r - static_cast<double>(i); });
  WorkPtr wx = pg->all_reduce_async(x);
  WorkPtr wy = pg->all_reduce_async(y);
  wx->wait();
  poll(wy);
  expect(x, [&](int64_t i) { return tri + n * static_cast<double>(i); }, "all_reduce_async, wait()" + on);
  expect(y, [&](int64_t i) { return 2 * tri - n * static_cast<double>(i); }, "all_reduce_async, is_completed()" + on);
  wx->wait();  // a second wait copies nothing again
  expect(x, [&](int64_t i) { return tri + n * static_cast<double>(i); }, "all_reduce_async after a second wait()" + on);

  if (n > 1) {  // a ring: each rank sends to the next and receives from the previous
    Tensor s = make(33, kFloat64, dev, [&](int64_t i) { return r * 7.0 + i; });
    Tensor got = zeros({33}, TensorOptions().dtype(kFloat64).device(dev));
    const int prev = (r + n - 1) % n;
    WorkPtr ws = pg->send_async(s, (r + 1) % n, 3);
    WorkPtr wr = pg->recv_async(got, prev, 3);
    ws->wait();
    wr->wait();
    expect(got, [&](int64_t i) { return prev * 7.0 + i; }, "send/recv ring" + on);
  }
  pg->barrier();

  // Sub-groups stay staged, on the same device.
  std::vector<int> evens;
  for (int j = 0; j < n; j += 2) evens.push_back(j);
  ProcessGroupPtr sub = pg->new_group(evens);
  EXPECT_EQ(sub != nullptr, r % 2 == 0) << on;
  if (sub) {
    EXPECT_EQ(sub->device(), dev);
    EXPECT_TRUE(staged_inner(sub) != nullptr);
    Tensor t = make(3, kFloat64, dev, [&](int64_t) { return 1.0; });
    sub->all_reduce(t);
    expect(t, [&](int64_t) { return static_cast<double>(evens.size()); }, "all_reduce on new_group(evens)" + on);
  }
  ProcessGroupPtr half = pg->split(r % 2, r);
  ASSERT_TRUE(half != nullptr);
  EXPECT_EQ(half->device(), dev);
  Tensor h = make(2, kInt64, dev, [&](int64_t) { return r; });
  half->all_reduce(h);
  double want = 0;
  for (int j = r % 2; j < n; j += 2) want += j;
  expect(h, [&](int64_t) { return want; }, "all_reduce on split(rank % 2)" + on);

  // The front checks with the staged group's name: a list of the wrong length.
  std::vector<Tensor> short_list(static_cast<size_t>(n + 1), zeros({3}, TensorOptions().dtype(kFloat32).device(dev)));
  try {
    pg->all_gather(short_list, in);
    ADD_FAILURE() << "all_gather took " << n + 1 << " outputs" << on;
  } catch (const CommError& e) {
    EXPECT_NE(std::string(e.what()).find("[all_gather] group '" + pg->options().name + "' (staged "), std::string::npos)
        << e.what();
  }
}

TEST(StagedGroup, EveryOpThroughTheLocalBackendOnTheCpu) {
  for (int n : {1, 2, 3, 4}) {
    SCOPED_TRACE("world size " + std::to_string(n));
    run_local(n, [](ProcessGroupPtr w) { check_ops(make_staged_group(w, Device(kCPU))); });
  }
}

TEST(StagedGroup, NullInnerGroupIsRefused) {
  EXPECT_THROW(make_staged_group(nullptr, Device(kCPU)), std::invalid_argument);
  run_local(1, [](ProcessGroupPtr w) { EXPECT_EQ(staged_inner(w), nullptr); });
}

TEST(StagedGroup, CountsEachOpOnceUnderItself) {
  run_local(2, [](ProcessGroupPtr w) {
    auto pg = make_staged_group(w, Device(kCPU));
    const uint64_t before = w->sequence_number();
    Tensor t = ones({8});
    pg->all_reduce(t);
    pg->all_reduce(t);
    EXPECT_EQ(pg->sequence_number(), before + 2);  // the inner group's numbers: one each
    expect(t, [](int64_t) { return 4.0; }, "two all_reduce SUM of ones over 2 ranks");
  });
}

TEST(StagedGroup, EveryOpThroughTheLocalBackendOnTheGpu) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  run_local(2, [](ProcessGroupPtr w) {
    auto pg = make_staged_group(w, Device(kCUDA, 0));
    check_ops(pg);
    Tensor cpu = ones({4});
    try {
      pg->all_reduce(cpu);
      ADD_FAILURE() << "a CPU tensor was taken by a group staged on cuda:0";
    } catch (const CommError& e) {
      EXPECT_NE(std::string(e.what()).find("is on cpu"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("cuda:0"), std::string::npos) << e.what();
    }
  });
}

#ifdef TROUPE_HAVE_MPI
TEST(MpiStagedGroup, EveryOpThroughTheMpiBackend) {
  if (!started_by_mpirun()) GTEST_SKIP() << "not started by mpirun";
  ProcessGroupPtr w = troupe::testing::mpi_test_world();
  check_ops(make_staged_group(w, Device(kCPU)));
  if (cuda::is_available()) check_ops(make_staged_group(w, Device(kCUDA, 0)));
}
#endif

}  // namespace
