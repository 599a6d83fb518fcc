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
#include <troupe/nn/pimpl.h>
#include <troupe/nn/modules/any.h>

namespace troupe::nn {

namespace detail {
/// `module` as a shared_ptr to class T (or to the class of holder T); throws naming both classes
/// when it is not one (`container` names the caller).
template <class T>
auto module_as(const ModulePtr& module, const char* container) {
  using C = typename held_class<T>::type;
  auto p = std::dynamic_pointer_cast<C>(module);
  if (!p)
    throw std::invalid_argument(std::string("[") + container + "] Attempted to cast module of type " +
                                (module ? module->name() : std::string("None")) + " to type " +
                                demangled_name(typeid(C)));
  return p;
}
}  // namespace detail

/// Chains its children: the output of each is the input of the next (children named "0", "1", ...
/// or by the names given).
class SequentialImpl : public Cloneable<SequentialImpl> {
 public:
  /// Nothing to register: clone() copies the entries.
  void reset() override {}
  SequentialImpl() = default;
  SequentialImpl(std::initializer_list<ModulePtr> modules);
  /// Sequential(nn::Linear(4, 3), nn::ReLU(), ...): holders, shared_ptrs, AnyModules or module values.
  template <class... Ms, class = std::enable_if_t<(sizeof...(Ms) > 0) && (is_module_like_v<Ms> && ...) &&
                                                  (!std::is_same_v<std::decay_t<Ms>, SequentialImpl> && ...)>>
  explicit SequentialImpl(Ms&&... modules) {
    (push_back(to_module_ptr(std::forward<Ms>(modules))), ...);
  }
  /// Sequential({{"fc", nn::Linear(4, 3)}, {"act", nn::ReLU()}}): named children, in order.
  SequentialImpl(std::initializer_list<NamedAnyModule> named);
  /// Named children, in order (PyTorch's Sequential(OrderedDict(...))).
  explicit SequentialImpl(const OrderedDict<std::string, ModulePtr>& named);
  explicit SequentialImpl(const std::vector<std::pair<std::string, ModulePtr>>& named);

  std::string name() const override { return "Sequential"; }
  Tensor forward(const Tensor& input) override;
  Value forward_args(const Args& args, const Kwargs& kwargs) override;
  using Module::operator();

  /// The chain's output for any arguments to the first module, as R (libtorch's forward<R>(...)).
  template <class R, class... A>
  R forward(A&&... args) {
    return detail::value_conv<R>::from(forward_args(Args{detail::to_value(std::forward<A>(args))...}, {}));
  }

  /// Appends a module named by its position.
  SequentialImpl& push_back(ModulePtr module);
  template <class M, class = std::enable_if_t<is_module_like_v<M> && !std::is_same_v<std::decay_t<M>, ModulePtr>>>
  SequentialImpl& push_back(M&& module) {
    return push_back(to_module_ptr(std::forward<M>(module)));
  }
  SequentialImpl& append(ModulePtr module) { return push_back(std::move(module)); }
  /// Appends a module under `name`.
  SequentialImpl& push_back(const std::string& name, ModulePtr module);
  template <class M, class = std::enable_if_t<is_module_like_v<M> && !std::is_same_v<std::decay_t<M>, ModulePtr>>>
  SequentialImpl& push_back(const std::string& name, M&& module) {
    return push_back(name, to_module_ptr(std::forward<M>(module)));
  }
  /// Inserts at `index` (negative counts from the end); later modules are renumbered.
  SequentialImpl& insert(int64_t index, ModulePtr module);
  SequentialImpl& extend(const std::vector<ModulePtr>& modules);
  /// Removes and returns the module at `index`; the rest are renumbered.
  ModulePtr pop(int64_t index = -1);
  /// The module at `index` (negative counts from the end).
  ModulePtr operator[](int64_t index) const;
  /// The module at `index`, as libtorch's ptr(i); ptr<T>(i) and at<T>(i) as class T (holder classes
  /// name theirs), throwing naming both classes when it is not one.
  ModulePtr ptr(int64_t index) const { return (*this)[index]; }
  template <class T>
  auto ptr(int64_t index) const {
    return detail::module_as<T>((*this)[index], "Sequential");
  }
  template <class T>
  auto& at(int64_t index) const {
    return *ptr<T>(index);
  }
  /// A Sequential of the modules in [start, end) (shared, not copied), as net[start:end].
  std::shared_ptr<SequentialImpl> slice(int64_t start, int64_t end) const;
  size_t size() const { return children_.size(); }
  bool empty() const { return children_.empty(); }
  bool is_empty() const { return children_.empty(); }
  std::vector<ModulePtr> modules_list() const { return children_.values(); }
  auto begin() const { return children_.begin(); }
  auto end() const { return children_.end(); }

 private:
  void renumber();
};
/// Holder of a SequentialImpl; also Sequential({{"fc", nn::Linear(4, 3)}, {"act", nn::ReLU()}}).
class Sequential : public ModuleHolder<SequentialImpl> {
 public:
  using ModuleHolder<SequentialImpl>::ModuleHolder;
  Sequential() = default;
  Sequential(std::initializer_list<NamedAnyModule> named)
      : ModuleHolder<SequentialImpl>(std::make_shared<SequentialImpl>(named)) {}
};

/// Holds submodules in a list, named "0", "1", ...; not callable.
class ModuleListImpl : public Cloneable<ModuleListImpl> {
 public:
  /// Nothing to register: clone() copies the entries.
  void reset() override {}
  ModuleListImpl() = default;
  ModuleListImpl(std::initializer_list<ModulePtr> modules);
  explicit ModuleListImpl(const std::vector<ModulePtr>& modules);
  /// ModuleList(nn::Linear(3, 4), nn::BatchNorm1d(4)): holders, shared_ptrs, AnyModules or values.
  template <class... Ms, class = std::enable_if_t<(sizeof...(Ms) > 0) && (is_module_like_v<Ms> && ...) &&
                                                  (!std::is_same_v<std::decay_t<Ms>, ModuleListImpl> && ...)>>
  explicit ModuleListImpl(Ms&&... modules) {
    (push_back(to_module_ptr(std::forward<Ms>(modules))), ...);
  }

  std::string name() const override { return "ModuleList"; }
  ModuleListImpl& push_back(ModulePtr module);
  template <class M, class = std::enable_if_t<is_module_like_v<M> && !std::is_same_v<std::decay_t<M>, ModulePtr>>>
  ModuleListImpl& push_back(M&& module) {
    return push_back(to_module_ptr(std::forward<M>(module)));
  }
  ModuleListImpl& append(ModulePtr module) { return push_back(std::move(module)); }
  ModuleListImpl& extend(const std::vector<ModulePtr>& modules);
  ModuleListImpl& insert(int64_t index, ModulePtr module);
  ModulePtr pop(int64_t index = -1);
  ModulePtr operator[](int64_t index) const;
  /// Replaces the module at `index`.
  void set(int64_t index, ModulePtr module);
  /// The module at `index`, as libtorch's ptr(i); ptr<T>(i) and at<T>(i) as class T.
  ModulePtr ptr(int64_t index) const { return (*this)[index]; }
  template <class T>
  auto ptr(int64_t index) const {
    return detail::module_as<T>((*this)[index], "ModuleList");
  }
  template <class T>
  auto& at(int64_t index) const {
    return *ptr<T>(index);
  }
  size_t size() const { return children_.size(); }
  bool empty() const { return children_.empty(); }
  bool is_empty() const { return children_.empty(); }
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
TROUPE_MODULE(ModuleList);

/// Holds submodules by name, in insertion order; not callable.
class ModuleDictImpl : public Cloneable<ModuleDictImpl> {
 public:
  /// Nothing to register: clone() copies the entries.
  void reset() override {}
  ModuleDictImpl() = default;
  /// ModuleDict({{"relu", relu}, {"lrelu", lrelu}}): insertion order is kept.
  ModuleDictImpl(std::initializer_list<std::pair<std::string, ModulePtr>> modules);
  explicit ModuleDictImpl(const std::vector<std::pair<std::string, ModulePtr>>& modules);
  explicit ModuleDictImpl(const OrderedDict<std::string, ModulePtr>& modules);

  std::string name() const override { return "ModuleDict"; }
  /// The module under `key`; throws KeyError-like std::out_of_range naming the key.
  ModulePtr operator[](const std::string& key) const;
  /// The module under `key` as class T (a holder class names its class); throws naming both classes
  /// when it is not one.
  template <class T>
  auto& at(const std::string& key) const {
    return *detail::module_as<T>((*this)[key], "ModuleDict");
  }
  void set(const std::string& key, ModulePtr module) { register_module(key, std::move(module)); }
  bool contains(const std::string& key) const { return children_.contains(key); }
  ModulePtr pop(const std::string& key);
  void update(const std::vector<std::pair<std::string, ModulePtr>>& modules);
  void update(const OrderedDict<std::string, ModulePtr>& modules);
  void clear() { children_.clear(); }
  std::vector<std::string> keys() const { return children_.keys(); }
  std::vector<ModulePtr> values() const { return children_.values(); }
  /// (name, module) pairs in order (libtorch's items()).
  std::vector<std::pair<std::string, ModulePtr>> items() const { return children_.pairs(); }
  /// Iterates OrderedDict items: item.key(), item.value().
  auto begin() const { return children_.begin(); }
  auto end() const { return children_.end(); }
  size_t size() const { return children_.size(); }
  bool empty() const { return children_.empty(); }
};
/// Holder of a ModuleDictImpl; also ModuleDict({{"fc", fc}, {"act", act}}).
class ModuleDict : public ModuleHolder<ModuleDictImpl> {
 public:
  using ModuleHolder<ModuleDictImpl>::ModuleHolder;
  ModuleDict() = default;
  ModuleDict(std::initializer_list<std::pair<std::string, ModulePtr>> modules)
      : ModuleHolder<ModuleDictImpl>(std::make_shared<ModuleDictImpl>(modules)) {}
};

/// Holds parameters in a list, named "0", "1", ...; tensors are made parameters; not callable.
class ParameterListImpl : public Cloneable<ParameterListImpl> {
 public:
  /// Nothing to register: clone() copies the entries.
  void reset() override {}
  ParameterListImpl() = default;
  ParameterListImpl(std::initializer_list<Tensor> params);
  explicit ParameterListImpl(const std::vector<Tensor>& params);
  /// ParameterList(troupe::randn({2, 3}), troupe::randn({3})).
  template <class... Ts, class = std::enable_if_t<(sizeof...(Ts) > 0) && (std::is_convertible_v<Ts, Tensor> && ...)>>
  explicit ParameterListImpl(Ts&&... params) {
    (append(Tensor(std::forward<Ts>(params))), ...);
  }

  std::string name() const override { return "ParameterList"; }
  std::string extra_repr() const override;
  Value forward_args(const Args&, const Kwargs&) override { throw std::runtime_error("ParameterList should not be called."); }
  ParameterListImpl& append(const Tensor& param);
  ParameterListImpl& push_back(const Tensor& param) { return append(param); }
  ParameterListImpl& extend(const std::vector<Tensor>& params);
  /// Appends every tensor of a ParameterList, a std::vector or an OrderedDict's items.
  template <class Container, class = decltype(std::declval<const Container&>().begin())>
  ParameterListImpl& extend(const Container& params) {
    for (const auto& p : params) {
      if constexpr (std::is_convertible_v<decltype(p), Tensor>) append(p);
      else append(p.value());
    }
    return *this;
  }
  Tensor operator[](int64_t index) const;
  Tensor at(int64_t index) const { return (*this)[index]; }
  /// Replaces the parameter at `index`.
  void set(int64_t index, const Tensor& param);
  size_t size() const { return parameters_.size(); }
  bool empty() const { return parameters_.empty(); }
  bool is_empty() const { return parameters_.empty(); }
  std::vector<Tensor> values() const { return parameters_.values(); }
  /// Iterates OrderedDict items ("0", tensor), ("1", tensor), ...: item.key(), item.value().
  auto begin() const { return parameters_.begin(); }
  auto end() const { return parameters_.end(); }
};
TROUPE_MODULE(ParameterList);

/// Holds parameters by name; not callable. From a std::map the keys are sorted (as PyTorch sorts a
/// plain dict); from a list of pairs the order is kept.
class ParameterDictImpl : public Cloneable<ParameterDictImpl> {
 public:
  /// Nothing to register: clone() copies the entries.
  void reset() override {}
  ParameterDictImpl() = default;
  ParameterDictImpl(std::initializer_list<std::pair<std::string, Tensor>> params);
  explicit ParameterDictImpl(const std::map<std::string, Tensor>& params);
  explicit ParameterDictImpl(const std::vector<std::pair<std::string, Tensor>>& params);
  /// From an OrderedDict, in its order (libtorch's constructor).
  explicit ParameterDictImpl(const OrderedDict<std::string, Tensor>& params);

  std::string name() const override { return "ParameterDict"; }
  std::string extra_repr() const override;
  Value forward_args(const Args&, const Kwargs&) override { throw std::runtime_error("ParameterDict should not be called."); }
  Tensor operator[](const std::string& key) const;
  /// The parameter under `key`; throws naming the key when absent.
  Tensor get(const std::string& key) const { return (*this)[key]; }
  void set(const std::string& key, const Tensor& param) { register_parameter(key, param); }
  /// Adds or replaces the parameter under `key` and returns it (libtorch's insert).
  Tensor& insert(const std::string& key, const Tensor& param) { return register_parameter(key, param); }
  bool contains(const std::string& key) const { return parameters_.contains(key); }
  Tensor pop(const std::string& key);
  void update(const std::vector<std::pair<std::string, Tensor>>& params);
  /// Adds or replaces every (key, tensor) of another ParameterDict or an OrderedDict, in its order.
  template <class Container, class = decltype(std::declval<const Container&>().begin()->key())>
  void update(const Container& params) {
    for (const auto& item : params) set(item.key(), item.value());
  }
  void update(const ParameterDictImpl& other) { update(other.parameters_); }
  bool is_empty() const { return parameters_.empty(); }
  auto begin() const { return parameters_.begin(); }
  auto end() const { return parameters_.end(); }
  void clear() { parameters_.clear(); }
  std::vector<std::string> keys() const { return parameters_.keys(); }
  std::vector<Tensor> values() const { return parameters_.values(); }
  const std::vector<OrderedDict<std::string, Tensor>::Item>& items() const { return parameters_.items(); }
  size_t size() const { return parameters_.size(); }
  bool empty() const { return parameters_.empty(); }
};
/// Holder of a ParameterDictImpl; also ParameterDict({{"a", t}, {"b", u}}) (keys sorted, as a dict
/// literal in PyTorch 1.13).
class ParameterDict : public ModuleHolder<ParameterDictImpl> {
 public:
  using ModuleHolder<ParameterDictImpl>::ModuleHolder;
  ParameterDict() = default;
  ParameterDict(std::initializer_list<std::pair<std::string, Tensor>> params)
      : ModuleHolder<ParameterDictImpl>(std::make_shared<ParameterDictImpl>(params)) {}
};

}  // namespace troupe::nn
