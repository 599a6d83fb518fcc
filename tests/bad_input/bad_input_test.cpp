// Bad values at every public entry point that takes a shape, an index, a dim, a size, a rank, a group or a
// timeout: one table, one row per call, each with the message it must throw (PyTorch's text where PyTorch
// has one, else "[function] what was wrong ... the value"). The call must throw before doing anything: a
// row whose call returns, or throws another message, fails.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <troupe/actors/actors.h>
#include <troupe/comm/local.h>
#include <troupe/data/data.h>
#include <troupe/launch/launch.h>
#include <troupe/nn/nn.h>
#include <troupe/optim/optim.h>
#include <troupe/parallel/parallel.h>
#include <troupe/rl/rl.h>
#include <troupe/tensor/ops.h>

namespace troupe {
namespace {

using std::chrono::milliseconds;

struct Row {
  const char* layer;
  const char* call;
  std::function<void()> fn;
  const char* message;  // a part of the error text
};

Tensor idx(std::vector<int64_t> v) { return tensor(v, TensorOptions().dtype(kInt64)); }

/// The rows that need no process group or actor system.
std::vector<Row> local_rows() {
  static Tensor a = zeros({2, 3});
  return {
      // ---- tensor: shapes, dims, indices
      {"tensor", "view({4, 2})", [] { a.view({4, 2}); }, "[view] shape '[4, 2]' is invalid for input of size 6"},
      {"tensor", "view({-1, -1})", [] { a.view({-1, -1}); }, "only one dimension can be inferred"},
      {"tensor", "view({-2, 3})", [] { a.view({-2, 3}); }, "invalid shape dimension -2"},
      {"tensor", "reshape({5})", [] { a.reshape({5}); }, "shape '[5]' is invalid for input of size 6"},
      {"tensor", "narrow(2, 0, 1)", [] { a.narrow(2, 0, 1); },
       "Dimension out of range (expected to be in range of [-2, 1], but got 2)"},
      {"tensor", "narrow(1, 2, 2)", [] { a.narrow(1, 2, 2); }, "start (2) + length (2) exceeds dimension size (3)."},
      {"tensor", "narrow(1, -5, 1)", [] { a.narrow(1, -5, 1); }, "start (-5) is out of bounds for dimension 1"},
      {"tensor", "narrow(1, 0, -1)", [] { a.narrow(1, 0, -1); }, "narrow(): length must be non-negative."},
      {"tensor", "select(0, 2)", [] { a.select(0, 2); }, "index 2 is out of bounds for dimension 0 with size 2"},
      {"tensor", "select(0, -3)", [] { a.select(0, -3); }, "index -3 is out of bounds for dimension 0 with size 2"},
      {"tensor", "a[5]", [] { a[5]; }, "index 5 is out of bounds for dimension 0 with size 2"},
      {"tensor", "permute({0})", [] { a.permute({0}); }, "number of dims don't match in permute"},
      {"tensor", "permute({0, 0})", [] { a.permute({0, 0}); }, "repeated dim 0 in permute"},
      {"tensor", "transpose(0, 2)", [] { a.transpose(0, 2); }, "Dimension out of range"},
      {"tensor", "squeeze(2)", [] { a.squeeze(2); }, "Dimension out of range"},
      {"tensor", "unsqueeze(-4)", [] { a.unsqueeze(-4); }, "expected to be in range of [-3, 2], but got -4"},
      {"tensor", "expand({3, 3})", [] { a.expand({3, 3}); }, "must match the existing size (2) at non-singleton dimension 0"},
      {"tensor", "flatten(1, 0)", [] { a.flatten(1, 0); }, "start_dim cannot come after end_dim"},
      {"tensor", "chunk(0)", [] { a.chunk(0); }, "chunk expects `chunks` to be greater than 0, got: 0"},
      {"tensor", "split(0)", [] { a.split(0); }, "split_size can only be 0 if dimension size is 0"},
      {"tensor", "index_select(0, [5])", [] { a.index_select(0, idx({5})); }, "index 5 is out of bounds for dimension 0"},
      {"tensor", "gather(1, [[3]])", [] { a.gather(1, idx({3}).reshape({1, 1})); }, "index 3 is out of bounds for dimension 1"},
      {"tensor", "repeat({2})", [] { a.repeat({2}); }, "can not be smaller than number of dimensions of tensor"},
      {"tensor", "zeros({2, -3})", [] { zeros({2, -3}); }, "Trying to create tensor with negative dimension -3: [2, -3]"},
      {"tensor", "randn({-2})", [] { randn({-2}); }, "Trying to create tensor with negative dimension -2"},
      {"tensor", "randint(5, 2, {3})", [] { randint(5, 2, {3}); }, "expects 'from' to be less than 'to'"},
      {"tensor", "linspace(0, 1, -1)", [] { linspace(0.0, 1.0, -1); }, "number of steps must be non-negative"},
      {"tensor", "cat({a, a}, 2)", [] { cat({a, a}, 2); }, "Dimension out of range"},
      {"tensor", "stack({a, a}, 4)", [] { stack({a, a}, 4); }, "expected to be in range of [-3, 2], but got 4"},
      {"tensor", "sum(5)", [] { a.sum(5); }, "Dimension out of range"},
      {"tensor", "size(2)", [] { a.size(2); }, "Dimension out of range"},
      // ---- nn: sizes and probabilities of layers
      {"nn", "Linear(-1, 3)", [] { nn::Linear(-1, 3); },
       "[Linear] in_features and out_features must be non-negative, got in_features=-1, out_features=3"},
      {"nn", "Dropout(1.5)", [] { nn::Dropout(1.5); }, "dropout probability has to be between 0 and 1, but got 1.5"},
      {"nn", "LSTM(num_layers=0)", [] { nn::LSTM(nn::LSTMOptions(4, 8).num_layers(0)); }, "num_layers must be at least 1, got 0"},
      {"nn", "Conv2d(stride=0) forward", [] { nn::Conv2d(nn::Conv2dOptions(1, 1, 3).stride(0))->forward(zeros({1, 1, 5, 5})); },
       "non-positive stride is not supported"},
      // ---- optim
      {"optim", "SGD(lr=-0.1)", [] { optim::SGD({zeros({1}).requires_grad_()}, optim::SGDOptions(-0.1)); },
       "Invalid learning rate: -0.1"},
      {"optim", "SGD(momentum=-1)", [] { optim::SGD({zeros({1}).requires_grad_()}, optim::SGDOptions(0.1).momentum(-1)); },
       "Invalid momentum value: -1"},
      {"optim", "Adam(betas=(1.0, 0.999))",
       [] { optim::Adam({zeros({1}).requires_grad_()}, optim::AdamOptions(0.1).betas({1.0, 0.999})); },
       "Invalid beta parameter at index 0: 1"},  // py_number: as Python prints betas=(1, 0.999)
      // ---- data
      {"data", "DataLoader(batch_size=0)",
       [] { data::DataLoader(std::make_shared<data::TensorDataset>(zeros({4, 2}), zeros({4})), data::DataLoaderOptions(0)); },
       "batch_size should be a positive integer value, but got batch_size=0"},
      {"data", "DataLoader(batch_size=-3)",
       [] { data::DataLoader(std::make_shared<data::TensorDataset>(zeros({4, 2}), zeros({4})), data::DataLoaderOptions(-3)); },
       "but got batch_size=-3"},
      {"data", "random_split(lengths {3, -1})",
       [] { data::random_split(std::make_shared<data::TensorDataset>(zeros({2, 2}), zeros({2})), std::vector<int64_t>{3, -1}, 0); },
       "[random_split] length at index 1 is negative"},
      {"data", "TensorDataset.get(4)", [] { data::TensorDataset(zeros({4, 2}), zeros({4})).get(4); }, "4"},
      // ---- rl
      {"rl", "MultiStep(gamma, n_steps=-1)", [] { rl::MultiStep(0.99, -1); }, "n_steps must be a non-negative integer, got -1"},
      {"rl", "TensorDictReplayBuffer(capacity=0)", [] { rl::TensorDictReplayBuffer(0); }, "capacity"},
      {"rl", "CartPoleEnv(num_envs=0)", [] { rl::CartPoleEnv(0); }, "num_envs"},
      {"rl", "TensorDict batch_size {-2}", [] { rl::TensorDict({-2}); }, "-2"},
      // ---- comm: groups and timeouts that need no peer
      {"comm", "make_local_groups(0)", [] { comm::make_local_groups(0); }, "[make_local_groups] n must be at least 1, got 0"},
      {"comm", "make_local_groups(2, timeout 0)",
       [] { comm::make_local_groups(2, comm::GroupOptions{milliseconds(0), "w"}); }, "timeout must be positive, got 0"},
      {"comm", "run_local(0, fn)", [] { comm::run_local(0, [](comm::ProcessGroupPtr) {}); }, "at least 1, got 0"},
  };
}

/// The rows that need a group of 2 ranks (every call fails at the front, before any rank waits).
std::vector<Row> group_rows(const comm::ProcessGroupPtr& pg) {
  static Tensor t = zeros({4});
  return {
      {"comm", "broadcast(t, src=2)", [pg] { pg->broadcast(t, 2); }, "src 2 is not in [0, 2)"},
      {"comm", "broadcast(t, src=-1)", [pg] { pg->broadcast(t, -1); }, "src -1 is not in [0, 2)"},
      {"comm", "send(t, dst=5)", [pg] { pg->send(t, 5); }, "dst 5 is not in [0, 2)"},
      {"comm", "send(t, dst=self)", [pg] { pg->send(t, pg->rank()); }, "is this rank"},
      {"comm", "recv(t, src=-1)", [pg] { pg->recv(t, -1); }, "src -1 is not in [0, 2)"},
      {"comm", "send(t, dst, tag=-1)", [pg] { pg->send(t, 1 - pg->rank(), -1); }, "tag -1 is not in [0, "},
      {"comm", "all_gather_into_tensor(wrong size)",
       [pg] {
         Tensor out = zeros({3});
         pg->all_gather_into_tensor(out, t);
       },
       "expected size * input.numel() = 2 * 4"},
      {"comm", "new_group({})", [pg] { pg->new_group({}); }, "[new_group]"},
      {"comm", "new_group({0, 0})", [pg] { pg->new_group({0, 0}); }, "0"},
      {"comm", "new_group({3})", [pg] { pg->new_group({3}); }, "3"},
      {"comm", "new_group({0, 1}, timeout -1)",
       [pg] { pg->new_group({0, 1}, comm::GroupOptions{milliseconds(-1), "g"}); }, "timeout must be positive, got -1 ms"},
      {"comm", "split(0, 0, timeout 0)", [pg] { pg->split(0, 0, comm::GroupOptions{milliseconds(0), "g"}); },
       "timeout must be positive, got 0 ms"},
  };
}

/// Runs a row: it must throw a std::exception whose text contains row.message.
void expect_rejected(const Row& row) {
  try {
    row.fn();
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find(row.message), std::string::npos)
        << row.layer << ": " << row.call << " threw\n  " << e.what() << "\nexpected a message containing\n  " << row.message;
    return;
  }
  ADD_FAILURE() << row.layer << ": " << row.call << " did not throw (expected '" << row.message << "')";
}

TEST(BadInput, EveryLocalEntryPointRejectsBadValues) {
  std::map<std::string, int> per_layer;
  for (const auto& row : local_rows()) {
    expect_rejected(row);
    ++per_layer[row.layer];
  }
  for (const char* layer : {"tensor", "nn", "optim", "data", "rl", "comm"}) EXPECT_GT(per_layer[layer], 0) << layer;
}

TEST(BadInput, CollectivesRejectBadRanksGroupsAndTimeoutsBeforeCommunicating) {
  // Both ranks walk the same rows: a row that reached the transport would wait for the other rank's
  // matching call and time out (2 s) instead of failing at once.
  comm::run_local(
      2,
      [](comm::ProcessGroupPtr pg) {
        for (const auto& row : group_rows(pg)) expect_rejected(row);
        // a Work's wait with a negative timeout
        Tensor t = ones({2});
        auto w = pg->all_reduce_async(t);
        expect_rejected({"comm", "Work::wait(-5 ms)", [w] { w->wait(milliseconds(-5)); }, "timeout must not be negative, got -5 ms"});
        w->wait();
        EXPECT_EQ(t[0].item<float>(), 2.0f);
      },
      comm::GroupOptions{milliseconds(2000), "world"});
}

/// An actor that is never spawned (spawn_on must refuse the rank first).
struct Idle : actors::Actor {
  explicit Idle(int64_t) {}
};

TEST(BadInput, ActorsRejectBadRanksAndTimeouts) {
  actors::register_actor<Idle, int64_t>("BadInputIdle");
  std::string a0 = "bad_input_tests", a1 = "--ranks", a2 = "2";
  char* argv[] = {a0.data(), a1.data(), a2.data(), nullptr};
  launch::run(3, argv, [](launch::Context& ctx) {
    auto& rt = ctx.actors();
    const std::vector<Row> rows = {
        {"actors", "spawn_on(2, ...)", [&rt] { rt.spawn_on(2, "x", "BadInputIdle", 0); }, "rank 2 does not exist (the world has 2 ranks)"},
        {"actors", "spawn_on(-1, ...)", [&rt] { rt.spawn_on(-1, "x", "BadInputIdle", 0); }, "rank -1 does not exist"},
        {"actors", "spawn_on_async(7, ...)", [&rt] { rt.spawn_on_async(7, "x", "BadInputIdle", {}); }, "rank 7 does not exist"},
        {"actors", "service(3)", [&rt] { rt.service(3); }, "rank 3 does not exist"},
        {"actors", "with_timeout(0 ms)", [&rt] { rt.service(0).with_timeout(milliseconds(0)); },
         "[ActorRef::with_timeout] timeout must be positive, got 0 ms"},
        {"actors", "with_timeout(-1 ms)", [&rt] { rt.service(0).with_timeout(milliseconds(-1)); }, "got -1 ms"},
        {"actors", "set_default_timeout(0 ms)", [] { actors::set_default_timeout(milliseconds(0)); },
         "[actors::set_default_timeout] timeout must be positive, got 0 ms"},
    };
    for (const auto& row : rows) expect_rejected(row);
    EXPECT_GT(actors::default_timeout().count(), 0);
    return 0;
  });
}

}  // namespace
}  // namespace troupe
