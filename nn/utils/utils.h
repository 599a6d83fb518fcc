// torch.nn.utils: gradient clipping, packed sequences (utils::rnn).
#pragma once

#include <troupe/nn/utils/clip_grad.h>
#include <troupe/nn/utils/rnn.h>
