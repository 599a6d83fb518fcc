// troupe::parallel umbrella: DistributedDataParallel, ZeRO stages 1-3 (ZeroOptimizer) and
// FullyShardedDataParallel with its units and sharded checkpoints, over a comm process group.
#pragma once

#include <troupe/parallel/ddp.h>
#include <troupe/parallel/zero.h>
