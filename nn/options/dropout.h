// Options of dropout, as libtorch's torch/nn/options/dropout.h: the module's DropoutOptions and the
// functional's own DropoutFuncOptions (which also says whether it is training).
//
//   F::dropout(x, F::DropoutFuncOptions().p(0.2).training(false));
#pragma once

#include <troupe/util/options.h>

namespace troupe::nn {

/// Options of Dropout (p = 0.5, inplace = false).
struct DropoutOptions {
  DropoutOptions(double p = 0.5) : p_(p) {}
  TROUPE_ARG(double, p);
  TROUPE_ARG(bool, inplace) = false;
};

namespace functional {
/// Options of F::dropout.
struct DropoutFuncOptions {
  /// The probability of zeroing an element.
  TROUPE_ARG(double, p) = 0.5;
  /// False: F::dropout returns its input.
  TROUPE_ARG(bool, training) = true;
  TROUPE_ARG(bool, inplace) = false;
};
}  // namespace functional

}  // namespace troupe::nn
