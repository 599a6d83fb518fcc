// torch::save / torch::load of an optimizer (libtorch's torch/optim/serialize.h): its state_dict (step
// counts, momentum buffers and moments, every param group's options) into a serialize archive.
//
//   troupe::save(optimizer, "optim.pt");   // after troupe::save(model, "model.pt")
//   troupe::load(optimizer, "optim.pt");   // an optimizer of the same kind over the loaded model
#pragma once

#include <troupe/nn/archive.h>
#include <troupe/optim/optimizer.h>

namespace troupe::serialize {

/// Writes optimizer.state_dict() (layout in optim/optimizer.h) into the archive.
OutputArchive& operator<<(OutputArchive& archive, const optim::Optimizer& optimizer);
/// optimizer.load_state_dict(every tensor of the archive); errors name the archive's file and the key.
InputArchive& operator>>(InputArchive& archive, optim::Optimizer& optimizer);

}  // namespace troupe::serialize
