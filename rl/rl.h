// troupe::rl umbrella: TensorDict, environments and transforms, MultiStep, replay, collectors, DQN loss.
#pragma once

#include <troupe/rl/cartpole.h>
#include <troupe/rl/collector.h>
#include <troupe/rl/dqn.h>
#include <troupe/rl/env.h>
#include <troupe/rl/multistep.h>
#include <troupe/rl/parallel_env.h>
#include <troupe/rl/replay.h>
#include <troupe/rl/tensordict.h>
#ifdef TROUPE_HAVE_ACTORS
#include <troupe/rl/distributed.h>
#endif
