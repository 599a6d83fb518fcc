// StateDict: what state_dict() returns and load_state_dict() takes (dotted names -> tensors, in
// PyTorch's order). Its own header so that optimizers and checkpoints need not include module.h.
#pragma once

#include <troupe/tensor/tensor.h>
#include <troupe/util/ordered_dict.h>

namespace troupe::nn {

/// A state_dict: dotted names -> tensors, in PyTorch's order.
using StateDict = OrderedDict<std::string, Tensor>;

}  // namespace troupe::nn
