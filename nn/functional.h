// nn::functional (torch.nn.functional): the stateless forms of the layers and losses.
//   namespace F = troupe::nn::functional;
#pragma once

#include <troupe/nn/functional/layers.h>
#include <troupe/nn/functional/loss.h>
