// Containers: children (or parameters) kept in the Module base's ordered dicts, renumbered on insert/pop.
#include <troupe/nn/modules/container.h>

#include <algorithm>
#include <stdexcept>

namespace troupe::nn {

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

Sequential::Sequential(std::initializer_list<ModulePtr> modules) {
  for (const auto& m : modules) push_back(m);
}
Sequential::Sequential(const OrderedDict<std::string, ModulePtr>& named) {
  for (const auto& [k, m] : named) register_module(k, m);
}
Sequential::Sequential(const std::vector<std::pair<std::string, ModulePtr>>& named) {
  for (const auto& [k, m] : named) register_module(k, m);
}

Tensor Sequential::forward(const Tensor& input) {
  Tensor x = input;
  for (const auto& [k, m] : children_) x = (*m)(x);
  return x;
}

Value Sequential::forward_args(const Args& args, const Kwargs& kwargs) {
  if (args.size() != 1 || !kwargs.empty())
    throw std::invalid_argument("[Sequential] forward takes exactly one input, got " + std::to_string(args.size()) +
                                " positional and " + std::to_string(kwargs.size()) + " keyword arguments");
  if (args[0].is_tensor()) return forward(args[0].tensor());
  Value v = args[0];
  for (const auto& [k, m] : children_) v = m->call({v});
  return v;
}

Sequential& Sequential::push_back(ModulePtr module) {
  register_module(std::to_string(children_.size()), std::move(module));
  return *this;
}
Sequential& Sequential::push_back(const std::string& name, ModulePtr module) {
  register_module(name, std::move(module));
  return *this;
}
Sequential& Sequential::extend(const std::vector<ModulePtr>& modules) {
  for (const auto& m : modules) push_back(m);
  return *this;
}
void Sequential::renumber() {
  auto mods = children_.values();
  children_.clear();
  for (size_t i = 0; i < mods.size(); ++i) children_.insert_or_assign(std::to_string(i), mods[i]);
}
Sequential& Sequential::insert(int64_t index, ModulePtr module) {
  auto mods = children_.values();
  mods.insert(mods.begin() + static_cast<std::ptrdiff_t>(insert_index(index, mods.size())), std::move(module));
  children_.clear();
  for (size_t i = 0; i < mods.size(); ++i) register_module(std::to_string(i), mods[i]);
  return *this;
}
ModulePtr Sequential::pop(int64_t index) {
  size_t i = normalize_index(index, children_.size(), "Sequential");
  ModulePtr m = children_[i].second;
  children_.erase(children_[i].first);
  renumber();
  return m;
}
ModulePtr Sequential::operator[](int64_t index) const {
  return children_[normalize_index(index, children_.size(), "Sequential")].second;
}
std::shared_ptr<Sequential> Sequential::slice(int64_t start, int64_t end) const {
  int64_t n = static_cast<int64_t>(children_.size());
  auto clamp = [n](int64_t i) { return i < 0 ? std::max<int64_t>(0, i + n) : std::min(i, n); };
  auto out = std::make_shared<Sequential>();
  for (int64_t i = clamp(start); i < clamp(end); ++i) {
    const auto& it = children_[static_cast<size_t>(i)];
    out->register_module(it.first, it.second);
  }
  return out;
}

// ---- ModuleList

ModuleList::ModuleList(std::initializer_list<ModulePtr> modules) {
  for (const auto& m : modules) push_back(m);
}
ModuleList::ModuleList(const std::vector<ModulePtr>& modules) {
  for (const auto& m : modules) push_back(m);
}
void ModuleList::sync_cache() const {
  // reassigned only when stale, so that iterators from begin() stay valid for end()
  const auto& items = children_.items();
  bool same = cache_.size() == items.size();
  for (size_t i = 0; same && i < items.size(); ++i) same = cache_[i] == items[i].second;
  if (!same) cache_ = children_.values();
}
ModuleList& ModuleList::push_back(ModulePtr module) {
  register_module(std::to_string(children_.size()), std::move(module));
  sync_cache();
  return *this;
}
ModuleList& ModuleList::extend(const std::vector<ModulePtr>& modules) {
  for (const auto& m : modules) push_back(m);
  return *this;
}
void ModuleList::renumber() {
  auto mods = children_.values();
  children_.clear();
  for (size_t i = 0; i < mods.size(); ++i) children_.insert_or_assign(std::to_string(i), mods[i]);
  sync_cache();
}
ModuleList& ModuleList::insert(int64_t index, ModulePtr module) {
  auto mods = children_.values();
  mods.insert(mods.begin() + static_cast<std::ptrdiff_t>(insert_index(index, mods.size())), std::move(module));
  children_.clear();
  for (size_t i = 0; i < mods.size(); ++i) register_module(std::to_string(i), mods[i]);
  sync_cache();
  return *this;
}
ModulePtr ModuleList::pop(int64_t index) {
  size_t i = normalize_index(index, children_.size(), "ModuleList");
  ModulePtr m = children_[i].second;
  children_.erase(children_[i].first);
  renumber();
  return m;
}
ModulePtr ModuleList::operator[](int64_t index) const {
  return children_[normalize_index(index, children_.size(), "ModuleList")].second;
}
void ModuleList::set(int64_t index, ModulePtr module) {
  size_t i = normalize_index(index, children_.size(), "ModuleList");
  register_module(std::to_string(i), std::move(module));
  sync_cache();
}
std::vector<ModulePtr>::const_iterator ModuleList::begin() const {
  sync_cache();
  return cache_.begin();
}
std::vector<ModulePtr>::const_iterator ModuleList::end() const {
  sync_cache();
  return cache_.end();
}

// ---- ModuleDict

ModuleDict::ModuleDict(std::initializer_list<std::pair<std::string, ModulePtr>> modules) {
  for (const auto& [k, m] : modules) register_module(k, m);
}
ModuleDict::ModuleDict(const std::vector<std::pair<std::string, ModulePtr>>& modules) { update(modules); }
ModuleDict::ModuleDict(const OrderedDict<std::string, ModulePtr>& modules) {
  for (const auto& [k, m] : modules) register_module(k, m);
}
ModulePtr ModuleDict::operator[](const std::string& key) const {
  const ModulePtr* m = children_.find(key);
  if (!m) throw std::out_of_range("[ModuleDict] no module named '" + key + "'");
  return *m;
}
ModulePtr ModuleDict::pop(const std::string& key) {
  ModulePtr m = (*this)[key];
  children_.erase(key);
  return m;
}
void ModuleDict::update(const std::vector<std::pair<std::string, ModulePtr>>& modules) {
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
  std::string device = p.is_cuda() ? " (GPU " + std::to_string(std::max(p.device().index, 0)) + ")" : "";
  return "  (" + key + "): " + "Parameter" + " containing: [" + type +
         " of size " + size + device + "]";
}
}  // namespace

ParameterList::ParameterList(std::initializer_list<Tensor> params) {
  for (const auto& p : params) append(p);
}
ParameterList::ParameterList(const std::vector<Tensor>& params) { extend(params); }
ParameterList& ParameterList::append(const Tensor& param) {
  register_parameter(std::to_string(parameters_.size()), param.requires_grad() ? param : Parameter(param));
  return *this;
}
ParameterList& ParameterList::extend(const std::vector<Tensor>& params) {
  for (const auto& p : params) append(p);
  return *this;
}
Tensor ParameterList::operator[](int64_t index) const {
  return parameters_[normalize_index(index, parameters_.size(), "ParameterList")].second;
}
void ParameterList::set(int64_t index, const Tensor& param) {
  size_t i = normalize_index(index, parameters_.size(), "ParameterList");
  register_parameter(std::to_string(i), param.requires_grad() ? param : Parameter(param));
}
std::string ParameterList::extra_repr() const {
  std::string out;
  for (const auto& [k, p] : parameters_) {
    if (!p.defined()) continue;
    out += (out.empty() ? "" : "\n") + param_line(k, p, false);
  }
  return out;
}

// ---- ParameterDict

ParameterDict::ParameterDict(std::initializer_list<std::pair<std::string, Tensor>> params) {
  // a braced list reads like a Python dict literal, which PyTorch 1.13 sorts by key
  std::map<std::string, Tensor> sorted(params.begin(), params.end());
  for (const auto& [k, p] : sorted) set(k, p);
}
ParameterDict::ParameterDict(const std::map<std::string, Tensor>& params) {
  for (const auto& [k, p] : params) set(k, p);
}
ParameterDict::ParameterDict(const std::vector<std::pair<std::string, Tensor>>& params) { update(params); }
Tensor ParameterDict::operator[](const std::string& key) const {
  const Tensor* p = parameters_.find(key);
  if (!p) throw std::out_of_range("[ParameterDict] no parameter named '" + key + "'");
  return *p;
}
Tensor ParameterDict::pop(const std::string& key) {
  Tensor p = (*this)[key];
  parameters_.erase(key);
  return p;
}
void ParameterDict::update(const std::vector<std::pair<std::string, Tensor>>& params) {
  for (const auto& [k, p] : params) set(k, p);
}
std::string ParameterDict::extra_repr() const {
  std::string out;
  for (const auto& [k, p] : parameters_) {
    if (!p.defined()) continue;
    out += (out.empty() ? "" : "\n") + param_line(k, p, true);
  }
  return out;
}

}  // namespace troupe::nn
