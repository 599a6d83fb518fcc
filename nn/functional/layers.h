// nn::functional for the layers: linear, activations, dropout, embedding, conv, pooling, normalization,
// interpolation, pixel shuffle.
#pragma once

#include <troupe/nn/functional/activation.h>
#include <troupe/nn/functional/attention.h>
#include <troupe/nn/functional/conv.h>
#include <troupe/nn/functional/dropout.h>
#include <troupe/nn/functional/embedding.h>
#include <troupe/nn/functional/linear.h>
#include <troupe/nn/functional/normalization.h>
#include <troupe/nn/functional/pixelshuffle.h>
#include <troupe/nn/functional/pooling.h>
#include <troupe/nn/functional/upsampling.h>
