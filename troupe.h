// troupe: umbrella header. Installed as <troupe/troupe.h>; includes every layer's public API.
#pragma once

// Layer: tensor (tensors, ops, autograd)
#include "tensor/tensor.h"
#include "tensor/ops.h"
#include "tensor/autograd.h"
#include "tensor/indexing.h"
#include "tensor/gradcheck.h"

// Layer: nn (Module tree, layers, losses, init, checkpoints)
#include "nn/nn.h"

// Layer: comm (process groups, collectives; local and mpi backends)
#include "comm/comm.h"
#include "launch/launch.h"
// #include "actors/actors.h"
