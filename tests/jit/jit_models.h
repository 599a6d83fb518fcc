// The two traced models of the fixtures (tests/fixtures/gen_jit.py builds the same in PyTorch): the MLP
// 32-64-64-10 and a small conv net; class names as in the generator (MLP, Conv).
#pragma once

#include <troupe/nn/nn.h>
#include <troupe/tensor/ops.h>

namespace troupe::testing {

/// relu(fc1(x)) -> relu(fc2(.)) -> fc3(.), x (B, 32).
struct MLP : nn::Module {
  MLP() {
    fc1 = register_module("fc1", std::make_shared<nn::LinearImpl>(32, 64));
    fc2 = register_module("fc2", std::make_shared<nn::LinearImpl>(64, 64));
    fc3 = register_module("fc3", std::make_shared<nn::LinearImpl>(64, 10));
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = troupe::relu((*fc1)(x));
    h = troupe::relu((*fc2)(h));
    return (*fc3)(h);
  }
  std::shared_ptr<nn::LinearImpl> fc1, fc2, fc3;
};

/// pool(relu(bn(conv1(x)))) -> flatten(1) -> fc(drop(.)), x (B, 1, 8, 8).
struct Conv : nn::Module {
  Conv() {
    conv1 = register_module("conv1", std::make_shared<nn::Conv2dImpl>(nn::Conv2dOptions(1, 4, 3).padding(1)));
    bn = register_module("bn", std::make_shared<nn::BatchNorm2dImpl>(4));
    pool = register_module("pool", std::make_shared<nn::MaxPool2dImpl>(2));
    drop = register_module("drop", std::make_shared<nn::DropoutImpl>(0.25));
    fc = register_module("fc", std::make_shared<nn::LinearImpl>(4 * 4 * 4, 10));
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = (*pool)(troupe::relu((*bn)((*conv1)(x))));
    h = troupe::flatten(h, 1);
    return (*fc)((*drop)(h));
  }
  std::shared_ptr<nn::Conv2dImpl> conv1;
  std::shared_ptr<nn::BatchNorm2dImpl> bn;
  std::shared_ptr<nn::MaxPool2dImpl> pool;
  std::shared_ptr<nn::DropoutImpl> drop;
  std::shared_ptr<nn::LinearImpl> fc;
};

}  // namespace troupe::testing
