// Containers: children (or parameters) kept in the Module base's ordered dicts, renumbered on insert/pop.
#include <troupe/nn/modules/container.h>

#include <cxxabi.h>

#include <algorithm>
#include <cstdlib>
#include <stdexcept>

namespace troupe::nn {

std::string detail::demangled_name(const std::type_info& type) {
  int status = 0;
  char* dem = abi::__cxa_demangle(type.name(), nullptr, nullptr, &status);
  std::string out = (status == 0 && dem) ? dem : type.name();
  std::free(dem);
  return out;
}

namespace {
// Python-style index into a list of n: negative counts from the end; out of range throws.
size_t normalize_index(int64_t index, size_t n, const char* cls) {
  int64_t i = index < 0 ? index + static_cast<int64_t>(n) : index;
  if (i < 0 || i >= static_cast<int64_t>(n))
    throw std::out_of_range(std::string("[") + cls + "] index " + std::to_string(index) + " is out of range (size " +
                            std::to_string(n) + ")");
  return static_cast<size_t>(i);
}
// Index for insert(): clamps as list.insert does.
size_t insert_index(int64_t index, size_t n) {
  int64_t i = index < 0 ? index + static_cast<int64_t>(n) : index;
  if (i < 0) i = 0;
  if (i > static_cast<int64_t>(n)) i = static_cast<int64_t>(n);
  return static_cast<size_t>(i);
}
}  // namespace

// ---- Sequential

SequentialImpl::SequentialImpl(std::initializer_list<ModulePtr> modules) {
  for (const auto& m : modules) push_back(m);
}
SequentialImpl::SequentialImpl(std::initializer_list<NamedAnyModule> named) {
  for (const auto& m : named) push_back(m.name(), m.module().ptr());
}
SequentialImpl::SequentialImpl(const OrderedDict<std::string, ModulePtr>& named) {
  for (const auto& [k, m] : named) register_module(k, m);
}
SequentialImpl::SequentialImpl(const std::vector<std::pair<std::string, ModulePtr>>& named) {
  for (const auto& [k, m] : named) register_module(k, m);
}

Tensor SequentialImpl::forward(const Tensor& input) {
  Tensor x = input;
  for (const auto& [k, m] : children_) x = (*m)(x);
  return x;
}

Value SequentialImpl::forward_args(const Args& args, const Kwargs& kwargs) {
  if (args.size() != 1 || !kwargs.empty())
    throw std::invalid_argument("[Sequential] forward takes exactly one input, got " + std::to_string(args.size()) +
                                " positional and " + std::to_string(kwargs.size()) + " keyword arguments");
  if (args[0].is_tensor()) return forward(args[0].tensor());
  Value v = args[0];
  for (const auto& [k, m] : children_) v = m->call({v});
  return v;
}

SequentialImpl& SequentialImpl::push_back(ModulePtr module) {
  register_module(std::to_string(children_.size()), std::move(module));
  return *this;
}
SequentialImpl& SequentialImpl::push_back(const std::string& name, ModulePtr module) {
  register_module(name, std::move(module));
  return *this;
}
SequentialImpl& SequentialImpl::extend(const std::vector<ModulePtr>& modules) {
  for (const auto& m : modules) push_back(m);
  return *this;
}
void SequentialImpl::renumber() {
  auto mods = children_.values();
  children_.clear();
  for (size_t i = 0; i < mods.size(); ++i) children_.insert_or_assign(std::to_string(i), mods[i]);
}
SequentialImpl& SequentialImpl::insert(int64_t index, ModulePtr module) {
  auto mods = children_.values();
  mods.insert(mods.begin() + static_cast<std::ptrdiff_t>(insert_index(index, mods.size())), std::move(module));
  children_.clear();
  for (size_t i = 0; i < mods.size(); ++i) register_module(std::to_string(i), mods[i]);
  return *this;
}
ModulePtr SequentialImpl::pop(int64_t index) {
  size_t i = normalize_index(index, children_.size(), "Sequential");
  ModulePtr m = children_[i].second;
  children_.erase(children_[i].first);
  renumber();
  return m;
}
ModulePtr SequentialImpl::operator[](int64_t index) const {
  return children_[normalize_index(index, children_.size(), "Sequential")].second;
}
std::shared_ptr<SequentialImpl> SequentialImpl::slice(int64_t start, int64_t end) const {
  int64_t n = static_cast<int64_t>(children_.size());
  auto clamp = [n](int64_t i) { return i < 0 ? std::max<int64_t>(0, i + n) : std::min(i, n); };
  auto out = std::make_shared<SequentialImpl>();
  for (int64_t i = clamp(start); i < clamp(end); ++i) {
    const auto& it = children_[static_cast<size_t>(i)];
    out->register_module(it.first, it.second);
  }
  return out;
}

// ---- ModuleList

ModuleListImpl::ModuleListImpl(std::initializer_list<ModulePtr> modules) {
  for (const auto& m : modules) push_back(m);
}
ModuleListImpl::ModuleListImpl(const std::vector<ModulePtr>& modules) {
  for (const auto& m : modules) push_back(m);
}
void ModuleListImpl::sync_cache() const {
  // reassigned only when stale, so that iterators from begin() stay valid for end()
  const auto& items = children_.items();
  bool same = cache_.size() == items.size();
  for (size_t i = 0; same && i < items.size(); ++i) same = cache_[i] == items[i].second;
  if (!same) cache_ = children_.values();
}
ModuleListImpl& ModuleListImpl::push_back(ModulePtr module) {
  register_module(std::to_string(children_.size()), std::move(module));
  sync_cache();
  return *this;
}
ModuleListImpl& ModuleListImpl::extend(const std::vector<ModulePtr>& modules) {
  for (const auto& m : modules) push_back(m);
  return *this;
}
void ModuleListImpl::renumber() {
  auto mods = children_.values();
  children_.clear();
  for (size_t i = 0; i < mods.size(); ++i) children_.insert_or_assign(std::to_string(i), mods[i]);
  sync_cache();
}
ModuleListImpl& ModuleListImpl::insert(int64_t index, ModulePtr module) {
  auto mods = children_.values();
  mods.insert(mods.begin() + static_cast<std::ptrdiff_t>(insert_index(index, mods.size())), std::move(module));
  children_.clear();
  for (size_t i = 0; i < mods.size(); ++i) register_module(std::to_string(i), mods[i]);
  sync_cache();
  return *this;
}
ModulePtr ModuleListImpl::pop(int64_t index) {
  size_t i = normalize_index(index, children_.size(), "ModuleList");
  ModulePtr m = children_[i].second;
  children_.erase(children_[i].first);
  renumber();
  return m;
}
ModulePtr ModuleListImpl::operator[](int64_t index) const {
  return children_[normalize_index(index, children_.size(), "ModuleList")].second;
}
void ModuleListImpl::set(int64_t index, ModulePtr module) {
  size_t i = normalize_index(index, children_.size(), "ModuleList");
  register_module(std::to_string(i), std::move(module));
  sync_cache();
}
std::vector<ModulePtr>::const_iterator ModuleListImpl::begin() const {
  sync_cache();
  return cache_.begin();
}
std::vector<ModulePtr>::const_iterator ModuleListImpl::end() const {
  sync_cache();
  return cache_.end();
}

// ---- ModuleDict

ModuleDictImpl::ModuleDictImpl(std::initializer_list<std::pair<std::string, ModulePtr>> modules) {
  for (const auto& [k, m] : modules) register_module(k, m);
}
ModuleDictImpl::ModuleDictImpl(const std::vector<std::pair<std::string, ModulePtr>>& modules) { update(modules); }
ModuleDictImpl::ModuleDictImpl(const OrderedDict<std::string, ModulePtr>& modules) {
  for (const auto& [k, m] : modules) register_module(k, m);
}
void ModuleDictImpl::update(const OrderedDict<std::string, ModulePtr>& modules) {
  for (const auto& [k, m] : modules) register_module(k, m);
}
ModulePtr ModuleDictImpl::operator[](const std::string& key) const {
  const ModulePtr* m = children_.find(key);
  if (!m) throw std::out_of_range("[ModuleDict] no module named '" + key + "'");
  return *m;
}
ModulePtr ModuleDictImpl::pop(const std::string& key) {
  ModulePtr m = (*this)[key];
  children_.erase(key);
  return m;
}
void ModuleDictImpl::update(const std::vector<std::pair<std::string, ModulePtr>>& modules) {
  for (const auto& [k, m] : modules) register_module(k, m);
}

// ---- ParameterList

namespace {
// "Parameter containing: [torch.float32 of size 2x3]" (ParameterList) or with the legacy type name
// "torch.FloatTensor" (ParameterDict): the two differ in PyTorch 1.13.
std::string param_line(const std::string& key, const Tensor& p, bool legacy_type) {
  std::string size;
  for (int64_t i = 0; i < p.dim(); ++i) size += (i ? "x" : "") + std::to_string(p.size(i));
  std::string type = legacy_type ? std::string(p.is_cuda() ? "torch.cuda." : "torch.") + legacy_type_name(p.dtype())
                                 : std::string("torch.") + dtype_name(p.dtype());
  std::string device = p.is_cuda() ? " (GPU " + std::to_string(std::max(p.device().index(), 0)) + ")" : "";
  return "  (" + key + "): " + "Parameter" + " containing: [" + type +
         " of size " + size + device + "]";
}
}  // namespace

ParameterListImpl::ParameterListImpl(std::initializer_list<Tensor> params) {
  for (const auto& p : params) append(p);
}
ParameterListImpl::ParameterListImpl(const std::vector<Tensor>& params) { extend(params); }
ParameterListImpl& ParameterListImpl::append(const Tensor& param) {
  register_parameter(std::to_string(parameters_.size()), param.requires_grad() ? param : Parameter(param));
  return *this;
}
ParameterListImpl& ParameterListImpl::extend(const std::vector<Tensor>& params) {
  for (const auto& p : params) append(p);
  return *this;
}
Tensor ParameterListImpl::operator[](int64_t index) const {
  return parameters_[normalize_index(index, parameters_.size(), "ParameterList")].second;
}
void ParameterListImpl::set(int64_t index, const Tensor& param) {
  size_t i = normalize_index(index, parameters_.size(), "ParameterList");
  register_parameter(std::to_string(i), param.requires_grad() ? param : Parameter(param));
}
std::string ParameterListImpl::extra_repr() const {
  std::string out;
  for (const auto& [k, p] : parameters_) {
    if (!p.defined()) continue;
    out += (out.empty() ? "" : "\n") + param_line(k, p, false);
  }
  return out;
}

// ---- ParameterDict

ParameterDictImpl::ParameterDictImpl(std::initializer_list<std::pair<std::string, Tensor>> params) {
  // a braced list reads like a Python dict literal, which PyTorch 1.13 sorts by key
  std::map<std::string, Tensor> sorted(params.begin(), params.end());
  for (const auto& [k, p] : sorted) set(k, p);
}
ParameterDictImpl::ParameterDictImpl(const std::map<std::string, Tensor>& params) {
  for (const auto& [k, p] : params) set(k, p);
}
ParameterDictImpl::ParameterDictImpl(const std::vector<std::pair<std::string, Tensor>>& params) { update(params); }
ParameterDictImpl::ParameterDictImpl(const OrderedDict<std::string, Tensor>& params) {
  for (const auto& [k, p] : params) set(k, p);
}
Tensor ParameterDictImpl::operator[](const std::string& key) const {
  const Tensor* p = parameters_.find(key);
  if (!p) throw std::out_of_range("[ParameterDict] no parameter named '" + key + "'");
  return *p;
}
Tensor ParameterDictImpl::pop(const std::string& key) {
  Tensor p = (*this)[key];
  parameters_.erase(key);
  return p;
}
void ParameterDictImpl::update(const std::vector<std::pair<std::string, Tensor>>& params) {
  for (const auto& [k, p] : params) set(k, p);
}
std::string ParameterDictImpl::extra_repr() const {
  std::string out;
  for (const auto& [k, p] : parameters_) {
    if (!p.defined()) continue;
    out += (out.empty() ? "" : "\n") + param_line(k, p, true);
  }
  return out;
}

}  // namespace troupe::nn
