// Functional: a function as a module, so that it can sit in a Sequential (libtorch's
// torch::nn::Functional). Extra arguments are bound after the input:
//
//   nn::Sequential net(nn::Linear(4, 8), nn::Functional(troupe::relu), nn::Linear(8, 2));
//   nn::Functional leaky(troupe::leaky_relu, 0.2);      // x -> leaky_relu(x, 0.2)
#pragma once

#include <functional>
#include <string>
#include <type_traits>
#include <utility>

#include <troupe/nn/cloneable.h>
#include <troupe/nn/module.h>
#include <troupe/nn/pimpl.h>

namespace troupe::nn {

/// Wraps a Tensor -> Tensor function; it has no parameters.
class FunctionalImpl : public Cloneable<FunctionalImpl> {
 public:
  using Function = std::function<Tensor(Tensor)>;

  explicit FunctionalImpl(Function function) : function_(std::move(function)) {}
  /// f(x, args...): the arguments after the input are bound now.
  template <class F, class A, class... Rest>
  explicit FunctionalImpl(F function, A&& arg, Rest&&... rest)
      : function_([f = std::move(function), bound = std::make_tuple(std::forward<A>(arg), std::forward<Rest>(rest)...)](
                      Tensor x) {
          return std::apply([&](const auto&... b) { return Tensor(f(x, b...)); }, bound);
        }) {}

  /// Nothing to register.
  void reset() override {}
  Tensor forward(const Tensor& input) override { return function_(input); }
  std::string name() const override { return "Functional"; }

 private:
  Function function_;
};
TROUPE_MODULE(Functional);

}  // namespace troupe::nn
