// The aten ops a traced graph may hold: name -> the troupe function that runs it (the same one eager code
// calls), and the schema defaults code() leaves out.
#pragma once

#include <string>
#include <vector>

#include <troupe/jit/ir.h>

namespace troupe::jit {


/// The op named `name` ("aten::linear"); null when troupe lacks it.
OpFn find_op(const std::string& name);

/// The Python text of the op's default for each argument ("" for none), in schema order; empty when the
/// op has no defaults. code() drops trailing arguments that equal their default.
const std::vector<std::string>& op_defaults(const std::string& name);

/// Every op name the interpreter knows, sorted.
std::vector<std::string> known_ops();

}  // namespace troupe::jit
