// Upsample over F::interpolate.
#include <troupe/nn/modules/upsampling.h>

#include <troupe/nn/functional/upsampling.h>
#include <troupe/util/python_format.h>

namespace troupe::nn {

Tensor UpsampleImpl::forward(const Tensor& input) {
  return functional::interpolate(input, functional::InterpolateFuncOptions()
                                            .size(options.size())
                                            .scale_factor(options.scale_factor())
                                            .mode(options.mode())
                                            .align_corners(options.align_corners()));
}

std::string UpsampleImpl::extra_repr() const {
  // Python keeps what it was given: a number (one value here) or a tuple; scale factors as floats
  std::string info;
  if (options.scale_factor()) {
    const auto& sf = *options.scale_factor();
    if (sf.size() == 1) {
      info = "scale_factor=" + util::py_float(sf[0]);
    } else {
      info = "scale_factor=(";
      for (size_t i = 0; i < sf.size(); ++i) info += (i ? ", " : "") + util::py_float(sf[i]);
      info += ")";
    }
  } else if (options.size()) {
    const auto& s = *options.size();
    info = "size=" + (s.size() == 1 ? std::to_string(s[0]) : util::py_tuple(s));
  } else {
    info = "size=None";
  }
  return info + ", mode=" + options.mode();  // PyTorch prints the mode without quotes
}

}  // namespace troupe::nn
