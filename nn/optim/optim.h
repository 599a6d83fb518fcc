// torch.optim for troupe: the Optimizer base and the optimizers (libtorch's torch::optim spelling).
//
//   #include <troupe/nn/optim/optim.h>
//   namespace optim = troupe::optim;
//   optim::SGD opt(model->parameters(), optim::SGDOptions(0.1).momentum(0.9));
#pragma once

#include <troupe/nn/optim/optimizer.h>

#include <troupe/nn/optim/adam.h>
#include <troupe/nn/optim/adamw.h>
#include <troupe/nn/optim/rmsprop.h>
#include <troupe/nn/optim/sgd.h>

#include <troupe/nn/optim/lr_scheduler.h>
#include <troupe/nn/optim/swalr.h>
