// dropout: x times a Bernoulli(1 - p) mask scaled by 1 / (1 - p), drawn as ATen's CPU dropout draws it.
#include <sstream>
#include <stdexcept>
#include <string>

#include "autograd.h"
#include "ops.h"

namespace troupe {

// ============================================================ dropout

Tensor dropout(const Tensor& x, double p, bool train) {
  if (!(p >= 0 && p <= 1)) {
    std::ostringstream os;
    os << "[dropout] dropout probability has to be between 0 and 1, but got " << p;
    throw std::invalid_argument(os.str());
  }
  if (!x.defined()) throw std::invalid_argument("[dropout] got an undefined tensor");
  if (p == 0 || !train || x.numel() == 0) return x;
  if (!x.is_floating_point())
    throw std::invalid_argument(std::string("[dropout] expected a floating-point input, got ") + dtype_name(x.dtype()));
  if (p == 1) return mul(x, zeros({}, x.options()));
  Tensor noise;
  {
    NoGradGuard ng;
    // as ATen's CPU _dropout_impl: a Bernoulli(1 - p) mask in x's dtype (double draws), divided by 1 - p;
    // the same bits as torch.nn.functional.dropout after the same manual_seed
    noise = empty_like(x);
    noise.bernoulli_(1.0 - p);
    noise.div_(1.0 - p);
  }
  return mul(x, noise);  // MulBackward0, as PyTorch's CPU dropout
}

}  // namespace troupe
