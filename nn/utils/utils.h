// torch.nn.utils: gradient clipping.
#pragma once

#include <troupe/nn/utils/clip_grad.h>
