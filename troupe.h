// troupe: umbrella header. Installed as <troupe/troupe.h>; includes every layer's public API.
#pragma once

// Layer: tensor (tensors, ops, autograd)
#include "tensor/tensor.h"
#include "tensor/ops.h"
#include "tensor/autograd.h"
#include "tensor/indexing.h"
#include "tensor/gradcheck.h"
#include "tensor/custom_function.h"
#include "tensor/warning.h"

// Layer: nn (Module tree, layers, losses, init, checkpoints)
#include "nn/nn.h"

// Layers: optim (optimizers, lr schedulers, swa_utils), data (Dataset, DataLoader, digits)
#include "optim/optim.h"
#include "data/data.h"
#include "jit/jit.h"

// Layers: comm (process groups; local, mpi, nccl backends), metrics (progress, SummaryWriter, plots), parallel (DDP, ZeRO, FSDP), launch
#include "comm/comm.h"
#include "metrics/metrics.h"
#include "parallel/parallel.h"
#include "rl/rl.h"
#include "launch/launch.h"
#ifdef TROUPE_HAVE_DASHBOARD
#include "launch/dashboard.h"
#endif
#include "actors/actors.h"
