// Reading a traced module's TorchScript code (the `def forward` of a class in code/__torch__/...) back into
// a graph, for jit::load.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <troupe/jit/script_module.h>

namespace troupe::jit {

/// The graph of `def forward`: `header` is the signature up to its final ':' (possibly several lines),
/// `body` its statements one per line. `self` resolves attributes; `constants` are constants.pkl's tensors.
/// Throws "[jit::load] <where>: ..." naming the first construct or op troupe lacks.
std::shared_ptr<Graph> parse_forward(const std::string& header, const std::vector<std::string>& body,
                                     const ScriptModule& self, const std::vector<Tensor>& constants,
                                     const std::string& where);

/// `def forward(self: <self_type>, ...)` of `g` as code() prints it; tensor constants are added to
/// `constants` as `CONSTANTS.c<n>` with n counting on from its size.
std::string print_forward(const Graph& g, std::map<std::string, Tensor>& constants, const std::string& self_type);

}  // namespace troupe::jit
