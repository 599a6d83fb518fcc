// troupe::nn umbrella: the Module tree, containers, layers, losses, their options, functional, init, checkpoints.
#pragma once

#include <troupe/nn/archive.h>
#include <troupe/nn/cloneable.h>
#include <troupe/nn/functional.h>
#include <troupe/nn/init.h>
#include <troupe/nn/module.h>
#include <troupe/nn/modules/activation.h>
#include <troupe/nn/modules/any.h>
#include <troupe/nn/modules/batchnorm.h>
#include <troupe/nn/modules/container.h>
#include <troupe/nn/modules/conv.h>
#include <troupe/nn/modules/dropout.h>
#include <troupe/nn/modules/embedding.h>
#include <troupe/nn/modules/functional.h>
#include <troupe/nn/modules/linear.h>
#include <troupe/nn/modules/loss.h>
#include <troupe/nn/modules/normalization.h>
#include <troupe/nn/modules/pooling.h>
#include <troupe/nn/modules/rnn.h>
#include <troupe/nn/modules/transformer.h>
#include <troupe/nn/options.h>
#include <troupe/nn/pimpl.h>
#include <troupe/nn/registry.h>
#include <troupe/nn/safetensors.h>
#include <troupe/nn/serialize.h>
#include <troupe/nn/utils/utils.h>
