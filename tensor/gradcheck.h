// Finite-difference checks of the analytical gradients (torch.autograd.gradcheck / gradgradcheck).
#pragma once

#include <functional>

#include "autograd.h"

namespace troupe::autograd {

struct GradcheckOptions {
  /// Step of the central differences.
  double eps = 1e-6;
  /// An analytical value a passes against the numerical n when |a - n| <= atol + rtol * |n|.
  double atol = 1e-5, rtol = 1e-3;
  /// Also require every analytical gradient to have its input's dtype.
  bool check_grad_dtypes = false;
  /// Outputs with at most this many elements in total are checked through the full Jacobian (one
  /// backward per output element); larger ones through `num_projections` random projections
  /// sum(out * r) with fixed random r.
  int64_t full_jacobian_max_outputs = 256;
  int num_projections = 3;
};

/// Compares the analytical gradients (backward) of `fn` with central finite differences, for every input
/// that requires grad (those must be float64: the differences are taken in float64), for a function
/// returning one tensor or a list (undefined and non-floating outputs are ignored). Throws
/// std::runtime_error with a report (input index, element, numerical vs analytical, largest difference)
/// on a mismatch, and std::invalid_argument for unusable inputs; returns true otherwise.
bool gradcheck(const std::function<variable_list(const variable_list&)>& fn, const variable_list& inputs,
               GradcheckOptions opts = {});

/// The same for the second derivative: gradcheck of the function (inputs, v) -> gradients of
/// sum(outputs * v) with respect to the inputs (computed with create_graph), where the v (one per
/// floating output, fixed random values) are themselves differentiated inputs.
bool gradgradcheck(const std::function<variable_list(const variable_list&)>& fn, const variable_list& inputs,
                   GradcheckOptions opts = {});

}  // namespace troupe::autograd
