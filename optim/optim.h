// torch.optim for troupe: the Optimizer base, the optimizers, the lr schedulers and swa_utils
// (libtorch's torch::optim spelling).
//
//   #include <troupe/optim/optim.h>
//   namespace optim = troupe::optim;
//   optim::SGD opt(model->parameters(), optim::SGDOptions(0.1).momentum(0.9));
#pragma once

#include <troupe/optim/optimizer.h>

#include <troupe/optim/adam.h>
#include <troupe/optim/adamw.h>
#include <troupe/optim/rmsprop.h>
#include <troupe/optim/sgd.h>

#include <troupe/optim/lr_scheduler.h>
#include <troupe/optim/swa_utils.h>
#include <troupe/optim/swalr.h>

#include <troupe/optim/serialize.h>
