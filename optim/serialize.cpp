// Optimizers into and out of serialize archives (through Optimizer::state_dict / load_state_dict).
#include <troupe/optim/serialize.h>

#include <stdexcept>
#include <string>

namespace troupe::serialize {

OutputArchive& operator<<(OutputArchive& archive, const optim::Optimizer& optimizer) {
  for (const auto& [name, t] : optimizer.state_dict()) archive.write(name, t);
  return archive;
}

InputArchive& operator>>(InputArchive& archive, optim::Optimizer& optimizer) {
  const nn::StateDict sd = archive.tensors();
  if (sd.is_empty())
    throw std::runtime_error("[troupe::load] " + archive.source() + " holds no optimizer state" +
                             (archive.prefix().empty() ? "" : " under '" + archive.prefix() + "'") +
                             " (expected keys such as 'param_groups.0.lr')");
  try {
    optimizer.load_state_dict(sd);
  } catch (const std::exception& e) {
    throw std::runtime_error("[troupe::load] " + optimizer.name() + " from " + archive.source() + ": " + e.what());
  }
  return archive;
}

}  // namespace troupe::serialize
