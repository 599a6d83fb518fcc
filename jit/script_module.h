// jit::ScriptModule: a module made by tracing (jit::trace). It is an nn::Module holding the traced
// submodule tree (one ScriptModule per traced child, as TorchScript keeps it), its own copies of the
// parameters and buffers, and a graph for forward, which an interpreter runs op by op through the same
// functions eager code calls (so outputs and gradients equal the eager module's bit for bit).
#pragma once

#include <iosfwd>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <troupe/jit/ir.h>
#include <troupe/nn/module.h>

namespace troupe::jit {

class ScriptModule;
/// Extra files saved beside a module: name -> contents (torch::jit::ExtraFilesMap).
using ExtraFilesMap = std::unordered_map<std::string, std::string>;
/// How ScriptModules are held (as every nn::Module is: by shared_ptr).
using ScriptModulePtr = std::shared_ptr<ScriptModule>;

/// A traced module (torch.jit.ScriptModule / torch::jit::Module). Every nn::Module method works on it.
class ScriptModule : public nn::Module {
 public:
  /// An empty module of class `original_name` whose TorchScript type is `qualified_name`
  /// (`__torch__.torch.nn.modules.linear.Linear`); jit::trace and jit::load build these.
  ScriptModule(std::string original_name, std::string qualified_name);

  /// The traced class's name ("Linear", "Net").
  std::string name() const override { return original_name_; }
  /// `original_name=<class>`, as PyTorch's RecursiveScriptModule prints.
  std::string extra_repr() const override { return "original_name=" + original_name_; }
  /// Runs the forward graph on one tensor.
  Tensor forward(const Tensor& input) override;
  /// Runs the forward graph on the positional tensors (keyword arguments are refused).
  nn::Value forward_args(const nn::Args& args, const nn::Kwargs& kwargs) override;

  /// The forward graph in TorchScript's printed form, submodule calls as prim::CallMethod.
  std::string graph() const;
  /// The forward graph with every submodule call inlined down to aten ops.
  std::string inlined_graph() const;
  /// The forward method as TorchScript's Python (`def forward(self, x: Tensor) -> Tensor:` ...).
  std::string code() const;
  /// code() and the tensor constants it names `CONSTANTS.c0`, `CONSTANTS.c1`, ... (keys "c0", ...).
  std::pair<std::string, std::map<std::string, Tensor>> code_with_constants() const;

  /// Writes the module as a TorchScript archive (torch.jit.save's zip layout, loadable by PyTorch 1.13's
  /// torch.jit.load) with `extra_files` under extra/; written to a temporary file and renamed, so `path`
  /// is either the old file or the whole new one.
  void save(const std::string& path, const ExtraFilesMap& extra_files = {}) const;

  /// The TorchScript class name (`__torch__.Net`, `__torch__.torch.nn.modules.linear.___torch_mangle_0.Linear`).
  const std::string& qualified_name() const { return qualified_name_; }
  /// The forward graph (null when forward was never traced for this module).
  const std::shared_ptr<Graph>& forward_graph() const { return graph_; }
  /// Sets the forward graph (the tracer and the loader).
  void set_forward_graph(std::shared_ptr<Graph> g) { graph_ = std::move(g); }
  /// The forward graph with submodule calls inlined (a new graph).
  std::shared_ptr<Graph> inline_graph() const;

  /// A child, parameter or buffer by attribute name, for the interpreter (nullptr / undefined when absent).
  ScriptModule* child(const std::string& name) const;
  /// A parameter or buffer by name; throws naming the module when neither exists.
  Tensor tensor_attr(const std::string& name) const;

 private:
  std::string original_name_, qualified_name_;
  std::shared_ptr<Graph> graph_;
};

/// Records `module` run on `example_inputs` into a ScriptModule (torch.jit.trace). With check_trace, runs
/// the module and the graph again on other inputs of the same shapes (and on the examples) and throws
/// when they disagree: a forward whose path depends on tensor values (data-dependent control flow) is
/// recorded only as the path the examples took. The check leaves buffers and the default generator as
/// the traced run left them.
ScriptModulePtr trace(const std::shared_ptr<nn::Module>& module, const std::vector<Tensor>& example_inputs,
                      bool check_trace = true);
/// trace() with one example input.
ScriptModulePtr trace(const std::shared_ptr<nn::Module>& module, const Tensor& example_input, bool check_trace = true);
/// trace() of a holder's module (`jit::trace(nn::Linear(4, 3), x)`).
template <class H, class = decltype(std::declval<H>().ptr())>
ScriptModulePtr trace(const H& holder, const Tensor& example_input, bool check_trace = true) {
  return trace(std::shared_ptr<nn::Module>(holder.ptr()), example_input, check_trace);
}

/// Reads a TorchScript archive (one saved by ScriptModule::save, or a traced module saved by PyTorch 1.13)
/// into a ScriptModule that runs forward and backward without the original C++ class. Each key of
/// `extra_files` found under extra/ gets its contents. A truncated or corrupt archive, or code troupe
/// cannot run, throws "[jit::load] <path>: ..." (naming the first op troupe lacks) and nothing is returned.
ScriptModulePtr load(const std::string& path, ExtraFilesMap& extra_files);
/// load() without extra files.
ScriptModulePtr load(const std::string& path);
/// load() from an archive's bytes in a stream (libtorch's `torch::jit::load(std::istream&)`); errors name
/// it "<stream>".
ScriptModulePtr load(std::istream& in, ExtraFilesMap& extra_files);
/// load(std::istream&) without extra files.
ScriptModulePtr load(std::istream& in);

/// Runs `graph` with `self` as its module input and `inputs` after it; the interpreter of ScriptModules.
std::vector<IValue> run_graph(const Graph& graph, ScriptModule& self, const std::vector<IValue>& inputs);

/// The TorchScript class path of a troupe layer's class name ("Linear" -> "torch.nn.modules.linear.Linear");
/// a class troupe does not ship keeps its own name ("Net").
std::string torch_class_path(const std::string& class_name);

}  // namespace troupe::jit
