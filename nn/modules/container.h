// Containers: Sequential, ModuleList, ModuleDict, ParameterList, ParameterDict.
#pragma once

#include <initializer_list>
#include <map>
#include <stdexcept>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <troupe/nn/cloneable.h>
#include <troupe/nn/module.h>

namespace troupe::nn {

/// Chains its children: the output of each is the input of the next (children named "0", "1", ...
/// or by the names given).
class Sequential : public Cloneable<Sequential> {
 public:
  /// Nothing to register: clone() copies the entries.
  void reset() override {}
  Sequential() = default;
  Sequential(std::initializer_list<ModulePtr> modules);
  /// Sequential(std::make_shared<Linear>(4, 3), std::make_shared<ReLU>(), ...).
  template <class... Ms, class = std::enable_if_t<(sizeof...(Ms) > 0) &&
                                                  (std::is_convertible_v<std::shared_ptr<Ms>, ModulePtr> && ...)>>
  explicit Sequential(std::shared_ptr<Ms>... modules) : Sequential({ModulePtr(std::move(modules))...}) {}
  /// Named children, in order (PyTorch's Sequential(OrderedDict(...))).
  explicit Sequential(const OrderedDict<std::string, ModulePtr>& named);
  explicit Sequential(const std::vector<std::pair<std::string, ModulePtr>>& named);

  std::string name() const override { return "Sequential"; }
  Tensor forward(const Tensor& input) override;
  Value forward_args(const Args& args, const Kwargs& kwargs) override;
  using Module::operator();

  /// Appends a module named by its position.
  Sequential& push_back(ModulePtr module);
  Sequential& append(ModulePtr module) { return push_back(std::move(module)); }
  /// Appends a module under `name`.
  Sequential& push_back(const std::string& name, ModulePtr module);
  /// Inserts at `index` (negative counts from the end); later modules are renumbered.
  Sequential& insert(int64_t index, ModulePtr module);
  Sequential& extend(const std::vector<ModulePtr>& modules);
  /// Removes and returns the module at `index`; the rest are renumbered.
  ModulePtr pop(int64_t index = -1);
  /// The module at `index` (negative counts from the end).
  ModulePtr operator[](int64_t index) const;
  /// A Sequential of the modules in [start, end) (shared, not copied), as net[start:end].
  std::shared_ptr<Sequential> slice(int64_t start, int64_t end) const;
  size_t size() const { return children_.size(); }
  bool empty() const { return children_.empty(); }
  std::vector<ModulePtr> modules_list() const { return children_.values(); }
  auto begin() const { return children_.begin(); }
  auto end() const { return children_.end(); }

 private:
  void renumber();
};

/// Holds submodules in a list, named "0", "1", ...; not callable.
class ModuleList : public Cloneable<ModuleList> {
 public:
  /// Nothing to register: clone() copies the entries.
  void reset() override {}
  ModuleList() = default;
  ModuleList(std::initializer_list<ModulePtr> modules);
  explicit ModuleList(const std::vector<ModulePtr>& modules);

  std::string name() const override { return "ModuleList"; }
  ModuleList& push_back(ModulePtr module);
  ModuleList& append(ModulePtr module) { return push_back(std::move(module)); }
  ModuleList& extend(const std::vector<ModulePtr>& modules);
  ModuleList& insert(int64_t index, ModulePtr module);
  ModulePtr pop(int64_t index = -1);
  ModulePtr operator[](int64_t index) const;
  /// Replaces the module at `index`.
  void set(int64_t index, ModulePtr module);
  size_t size() const { return children_.size(); }
  bool empty() const { return children_.empty(); }
  std::vector<ModulePtr> modules_list() const { return children_.values(); }
  /// Iterates the modules (not the names).
  std::vector<ModulePtr>::const_iterator begin() const;
  std::vector<ModulePtr>::const_iterator end() const;

 private:
  void renumber();
  /// Refreshes cache_ when the children changed behind its back (a copy made by clone()).
  void sync_cache() const;
  mutable std::vector<ModulePtr> cache_;
};

/// Holds submodules by name, in insertion order; not callable.
class ModuleDict : public Cloneable<ModuleDict> {
 public:
  /// Nothing to register: clone() copies the entries.
  void reset() override {}
  ModuleDict() = default;
  /// ModuleDict({{"relu", relu}, {"lrelu", lrelu}}): insertion order is kept.
  ModuleDict(std::initializer_list<std::pair<std::string, ModulePtr>> modules);
  explicit ModuleDict(const std::vector<std::pair<std::string, ModulePtr>>& modules);
  explicit ModuleDict(const OrderedDict<std::string, ModulePtr>& modules);

  std::string name() const override { return "ModuleDict"; }
  /// The module under `key`; throws KeyError-like std::out_of_range naming the key.
  ModulePtr operator[](const std::string& key) const;
  void set(const std::string& key, ModulePtr module) { register_module(key, std::move(module)); }
  bool contains(const std::string& key) const { return children_.contains(key); }
  ModulePtr pop(const std::string& key);
  void update(const std::vector<std::pair<std::string, ModulePtr>>& modules);
  void clear() { children_.clear(); }
  std::vector<std::string> keys() const { return children_.keys(); }
  std::vector<ModulePtr> values() const { return children_.values(); }
  const std::vector<OrderedDict<std::string, ModulePtr>::Item>& items() const { return children_.items(); }
  size_t size() const { return children_.size(); }
  bool empty() const { return children_.empty(); }
};

/// Holds parameters in a list, named "0", "1", ...; tensors are made parameters; not callable.
class ParameterList : public Cloneable<ParameterList> {
 public:
  /// Nothing to register: clone() copies the entries.
  void reset() override {}
  ParameterList() = default;
  ParameterList(std::initializer_list<Tensor> params);
  explicit ParameterList(const std::vector<Tensor>& params);

  std::string name() const override { return "ParameterList"; }
  std::string extra_repr() const override;
  Value forward_args(const Args&, const Kwargs&) override { throw std::runtime_error("ParameterList should not be called."); }
  ParameterList& append(const Tensor& param);
  ParameterList& push_back(const Tensor& param) { return append(param); }
  ParameterList& extend(const std::vector<Tensor>& params);
  Tensor operator[](int64_t index) const;
  /// Replaces the parameter at `index`.
  void set(int64_t index, const Tensor& param);
  size_t size() const { return parameters_.size(); }
  bool empty() const { return parameters_.empty(); }
  std::vector<Tensor> values() const { return parameters_.values(); }
};

/// Holds parameters by name; not callable. From a std::map the keys are sorted (as PyTorch sorts a
/// plain dict); from a list of pairs the order is kept.
class ParameterDict : public Cloneable<ParameterDict> {
 public:
  /// Nothing to register: clone() copies the entries.
  void reset() override {}
  ParameterDict() = default;
  ParameterDict(std::initializer_list<std::pair<std::string, Tensor>> params);
  explicit ParameterDict(const std::map<std::string, Tensor>& params);
  explicit ParameterDict(const std::vector<std::pair<std::string, Tensor>>& params);

  std::string name() const override { return "ParameterDict"; }
  std::string extra_repr() const override;
  Value forward_args(const Args&, const Kwargs&) override { throw std::runtime_error("ParameterDict should not be called."); }
  Tensor operator[](const std::string& key) const;
  void set(const std::string& key, const Tensor& param) { register_parameter(key, param); }
  bool contains(const std::string& key) const { return parameters_.contains(key); }
  Tensor pop(const std::string& key);
  void update(const std::vector<std::pair<std::string, Tensor>>& params);
  void clear() { parameters_.clear(); }
  std::vector<std::string> keys() const { return parameters_.keys(); }
  std::vector<Tensor> values() const { return parameters_.values(); }
  const std::vector<OrderedDict<std::string, Tensor>::Item>& items() const { return parameters_.items(); }
  size_t size() const { return parameters_.size(); }
  bool empty() const { return parameters_.empty(); }
};

}  // namespace troupe::nn
