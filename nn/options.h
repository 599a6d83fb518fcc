// The options structs of the layers and losses and of their nn::functional forms (libtorch's torch/nn/options.h).
#pragma once

#include <troupe/nn/options/activation.h>
#include <troupe/nn/options/batchnorm.h>
#include <troupe/nn/options/conv.h>
#include <troupe/nn/options/dropout.h>
#include <troupe/nn/options/embedding.h>
#include <troupe/nn/options/instancenorm.h>
#include <troupe/nn/options/linear.h>
#include <troupe/nn/options/loss.h>
#include <troupe/nn/options/normalization.h>
#include <troupe/nn/options/pixelshuffle.h>
#include <troupe/nn/options/pooling.h>
#include <troupe/nn/options/upsampling.h>
#include <troupe/nn/options/rnn.h>
#include <troupe/nn/options/transformer.h>
