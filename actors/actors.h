// The actor layer's public API: Value and ActorRef (value.h), Future (future.h), Actor and the factory
// registry (actor.h), Runtime (runtime.h), RemoteModule, host() and DistributedOptimizer (remote_module.h),
// place() with replicated() / sharded() (placement.h), supervision (supervisor.h), whole-model checkpoints
// (checkpoint.h), Averager (averager.h), Pipeline (pipeline.h). CAF-free.
#pragma once

#include <troupe/actors/actor.h>
#include <troupe/actors/averager.h>
#include <troupe/actors/checkpoint.h>
#include <troupe/actors/future.h>
#include <troupe/actors/pipeline.h>
#include <troupe/actors/placement.h>
#include <troupe/actors/introspect.h>
#include <troupe/actors/remote_module.h>
#include <troupe/actors/runtime.h>
#include <troupe/actors/supervisor.h>
#include <troupe/actors/value.h>
