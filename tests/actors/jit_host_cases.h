// A traced ScriptModule hosted from its archive bytes (actors::host(rt, jit::trace(net, x), rank)), checked
// against the local ScriptModule: forward, distributed backward, an SGD step, state_dict / load_state_dict,
// train / eval, hooks by name, a compiled module, and bad archive bytes. Run by rank 0 of actors_tests
// (ranks as threads) and of actors_mpi_tests (a real connection); the other ranks serve.
#pragma once

#include <gtest/gtest.h>

#include <sstream>

#include <troupe/jit/jit.h>
#include <troupe/optim/sgd.h>

#include "actors_helpers.h"
#include "remote_models.h"

namespace troupe::actors::testing {

/// relu(fc1(x)) -> fc2, in float64; traced on rank 0.
inline jit::ScriptModulePtr traced_jit_net(uint64_t seed = 31) {
  manual_seed(seed);
  auto net = std::make_shared<nn::SequentialImpl>(std::make_shared<nn::LinearImpl>(4, 8), std::make_shared<nn::ReLUImpl>(),
                                                  std::make_shared<nn::LinearImpl>(8, 3));
  net->to(kFloat64);
  return jit::trace(net, randn({5, 4}, kFloat64));
}

inline std::string what_of_call(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

inline void check_hosted_script_module(Runtime& rt, int rank) {
  jit::ScriptModulePtr local = traced_jit_net();
  RemoteModulePtr remote = host(rt, local, rank);
  ASSERT_TRUE(remote->is_remote());
  EXPECT_EQ(remote->host_rank(), rank);
  EXPECT_EQ(remote->name(), "Sequential");
  EXPECT_EQ(remote->named_parameters().keys(), local->named_parameters().keys());

  // forward and the distributed backward
  manual_seed(32);
  Tensor x = randn({6, 4}, kFloat64);
  Tensor xl = x.clone().requires_grad_(true), xr = x.clone().requires_grad_(true);
  Tensor yl = local->forward(xl);
  Tensor yr = (*remote)(xr);
  EXPECT_LT(max_diff(yl, yr), 1e-12);
  (yl * yl).sum().backward();
  (yr * yr).sum().backward();
  EXPECT_LT(max_diff(xl.grad(), xr.grad()), 1e-12);
  // one SGD step on each side (the hosted parameters step on the host)
  optim::SGD sgd(local->parameters(), optim::SGDOptions(0.1));
  DistributedOptimizer dopt(remote, optim::SGDOptions(0.1));
  sgd.step();
  dopt.step();
  auto a = local->state_dict();
  auto b = remote->state_dict();
  ASSERT_EQ(a.keys(), b.keys());
  for (const auto& [k, t] : a) EXPECT_LT(max_diff(t, b[k]), 1e-12) << k;

  // load_state_dict of other values
  jit::ScriptModulePtr other = traced_jit_net(33);
  local->load_state_dict(other->state_dict());
  remote->load_state_dict(other->state_dict());
  for (const auto& [k, t] : remote->state_dict()) EXPECT_LT(max_diff(t, other->state_dict()[k]), 1e-12) << k;
  EXPECT_LT(max_diff(local->forward(x), (*remote)(x)), 1e-12);

  // train / eval reach the host's tree
  EXPECT_TRUE(remote->is_training());
  remote->eval();
  EXPECT_FALSE(remote->is_training());
  EXPECT_FALSE(remote->get_submodule("2")->is_training());
  remote->train();
  EXPECT_TRUE(remote->get_submodule("0")->is_training());

  // a forward hook by registered name runs on the host
  Tensor y0 = (*remote)(x);
  auto h = remote->register_forward_hook("test.double_output");
  EXPECT_LT(max_diff((*remote)(x), y0 * 2.0), 1e-12);
  h.remove();
  EXPECT_LT(max_diff((*remote)(x), y0), 1e-12);

  // a compiled module is compiled again on the host: same results
  jit::ScriptModulePtr fast = traced_jit_net(34);
  fast->compile();
  RemoteModulePtr rfast = host(rt, fast, rank);
  Tensor xf1 = x.clone().requires_grad_(true), xf2 = x.clone().requires_grad_(true);
  Tensor f1 = fast->forward(xf1), f2 = (*rfast)(xf2);
  EXPECT_LT(max_diff(f1, f2), 1e-12);
  f1.sum().backward();
  f2.sum().backward();
  EXPECT_LT(max_diff(xf1.grad(), xf2.grad()), 1e-12);

  // bad bytes: the error names the rank and what is wrong with the archive
  std::string e = what_of_call([&] { host(rt, rank, kScriptModuleFactory, {Value(std::string("not an archive")), Value(false)}); });
  EXPECT_TRUE(contains(e, "spawn_on(" + std::to_string(rank))) << e;
  EXPECT_TRUE(contains(e, "ScriptModule archive (14 bytes) cannot be loaded")) << e;
  EXPECT_TRUE(contains(e, "not a readable TorchScript archive")) << e;
  std::ostringstream out;
  local->save(out);
  std::string cut = out.str().substr(0, out.str().size() / 2);
  e = what_of_call([&] { host(rt, rank, kScriptModuleFactory, {Value(cut), Value(false)}); });
  EXPECT_TRUE(contains(e, "cannot be loaded")) << e;
  EXPECT_TRUE(contains(e, "[jit::load] the archive in memory (" + std::to_string(cut.size()) + " bytes)")) << e;
  e = what_of_call([&] { host(rt, rank, kScriptModuleFactory, {Value(int64_t{3})}); });
  EXPECT_TRUE(contains(e, "jit::ScriptModule")) << e;
}

}  // namespace troupe::actors::testing
