// Included first (-include, precompiled) in every sample file by scripts/libtorch_sample.py: troupe's
// umbrella header in place of <torch/torch.h>, GoogleTest, the stand-in support helpers, and the
// alias that lets a `torch::` the rewrite did not reach resolve to troupe.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include <troupe/troupe.h>
// what a port includes for the c10:: / at:: helpers (c10::str, c10::irange, at::Tensor)
#include <troupe/util/c10_compat.h>

namespace torch = troupe;

#include "support.h"
