// Optimizer base: parameter groups, per-parameter state, zero_grad, state_dict / load_state_dict, printing.
#include <troupe/optim/optimizer.h>

#include <algorithm>
#include <map>
#include <sstream>
#include <stdexcept>
#include <unordered_set>

#include <troupe/tensor/autograd.h>
#include <troupe/util/python_format.h>
#include <troupe/tensor/ops.h>

namespace troupe::optim {

void write_scalar(StateDict& out, const std::string& key, double value) {
  out.insert_or_assign(key, scalar_tensor(value, TensorOptions().dtype(kDouble)));
}

std::optional<double> read_optional_scalar(const StateDict& in, const std::string& key) {
  const Tensor* t = in.find(key);
  if (!t) return std::nullopt;
  if (!t->defined() || t->numel() != 1)
    throw std::invalid_argument("[Optimizer.load_state_dict] '" + key + "' must be a scalar, got " +
                                (t->defined() ? "a tensor of " + std::to_string(t->numel()) + " elements"
                                              : std::string("None")));
  return t->cpu().to(kDouble).item<double>();
}

double read_scalar(const StateDict& in, const std::string& key) {
  auto v = read_optional_scalar(in, key);
  if (!v) throw std::invalid_argument("[Optimizer.load_state_dict] missing key '" + key + "'");
  return *v;
}

namespace detail {

void write_option(StateDict& out, const std::string& key, double v) { write_scalar(out, key, v); }
void write_option(StateDict& out, const std::string& key, bool v) { write_scalar(out, key, v ? 1 : 0); }
void write_option(StateDict& out, const std::string& key, const std::tuple<double, double>& v) {
  write_scalar(out, key + ".0", std::get<0>(v));
  write_scalar(out, key + ".1", std::get<1>(v));
}
void read_option(const StateDict& in, const std::string& key, double& v) { v = read_scalar(in, key); }
void read_option(const StateDict& in, const std::string& key, bool& v) { v = read_scalar(in, key) != 0; }
void read_option(const StateDict& in, const std::string& key, std::tuple<double, double>& v) {
  v = std::make_tuple(read_scalar(in, key + ".0"), read_scalar(in, key + ".1"));
}
std::string option_repr(double v) { return util::py_number(v); }
std::string option_repr(bool v) { return util::py_bool(v); }
std::string option_repr(const std::tuple<double, double>& v) {
  return "(" + util::py_number(std::get<0>(v)) + ", " + util::py_number(std::get<1>(v)) + ")";
}

}  // namespace detail

std::vector<std::pair<std::string, std::string>> OptimizerOptions::repr_items() const {
  return {{"lr", util::py_number(get_lr())}};
}

std::string Optimizer::repr() const {
  std::string out = name() + " (";
  for (size_t g = 0; g < param_groups_.size(); ++g) {
    const auto& group = param_groups_[g];
    auto items = group.options().repr_items();
    if (group.initial_lr()) items.emplace_back("initial_lr", util::py_number(*group.initial_lr()));
    std::sort(items.begin(), items.end());
    out += "\nParameter Group " + std::to_string(g) + "\n";
    for (const auto& [key, value] : items) out += "    " + key + ": " + value + "\n";
  }
  return out + ")";
}

std::ostream& operator<<(std::ostream& os, const Optimizer& optimizer) { return os << optimizer.repr(); }

Tensor state_tensor_like(const Tensor& src, const Tensor& like) {
  NoGradGuard no_grad;
  Tensor t = src.detach();
  if (t.is_floating_point() && like.is_floating_point() && t.dtype() != like.dtype()) t = t.to(like.dtype());
  if (t.device() != like.device()) t = t.to(like.device());
  return t.clone();
}

// ---- OptimizerParamGroup

OptimizerParamGroup::OptimizerParamGroup(const OptimizerParamGroup& other)
    : params_(other.params_),
      options_(other.options_ ? other.options_->clone() : nullptr),
      initial_lr_(other.initial_lr_) {}

OptimizerParamGroup& OptimizerParamGroup::operator=(const OptimizerParamGroup& other) {
  if (this != &other) {
    params_ = other.params_;
    options_ = other.options_ ? other.options_->clone() : nullptr;
    initial_lr_ = other.initial_lr_;
  }
  return *this;
}

OptimizerOptions& OptimizerParamGroup::options() {
  if (!options_) throw std::logic_error("[OptimizerParamGroup] the group has no options yet");
  return *options_;
}

const OptimizerOptions& OptimizerParamGroup::options() const {
  if (!options_) throw std::logic_error("[OptimizerParamGroup] the group has no options yet");
  return *options_;
}

// ---- Optimizer

Optimizer::Optimizer(std::vector<OptimizerParamGroup> param_groups, std::unique_ptr<OptimizerOptions> defaults)
    : defaults_(std::move(defaults)) {
  if (!defaults_) throw std::invalid_argument("[Optimizer] defaults must not be null");
  if (param_groups.empty()) throw std::invalid_argument("optimizer got an empty parameter list");
  for (const auto& g : param_groups) add_param_group(g);
}

Optimizer::Optimizer(std::vector<Tensor> parameters, std::unique_ptr<OptimizerOptions> defaults)
    : defaults_(std::move(defaults)) {
  if (!defaults_) throw std::invalid_argument("[Optimizer] defaults must not be null");
  if (parameters.empty()) throw std::invalid_argument("optimizer got an empty parameter list");
  add_param_group(OptimizerParamGroup(std::move(parameters)));
}

void Optimizer::add_param_group(const OptimizerParamGroup& param_group) {
  const auto& params = param_group.params();
  std::unordered_set<const TensorImpl*> in_group;
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i];
    if (!p.defined())
      throw std::invalid_argument("[Optimizer.add_param_group] parameter " + std::to_string(i) +
                                  " of the group is None");
    if (!p.is_leaf()) throw std::invalid_argument("can't optimize a non-leaf Tensor");
    if (!p.is_floating_point())
      throw std::invalid_argument("[Optimizer.add_param_group] parameter " + std::to_string(i) + " has dtype " +
                                  std::string(dtype_name(p.dtype())) + "; only floating-point tensors can be optimized");
    in_group.insert(p.impl());
  }
  for (const auto& g : param_groups_)
    for (const auto& q : g.params())
      if (in_group.count(q.impl()))
        throw std::invalid_argument("some parameters appear in more than one parameter group");
  if (in_group.size() != params.size())
    // PyTorch 1.13 warns on duplicates inside one group; a parameter updated twice per step is a bug.
    throw std::invalid_argument("[Optimizer.add_param_group] a parameter appears twice in the group");
  OptimizerParamGroup g(params);
  g.set_options(param_group.has_options() ? param_group.options().clone() : defaults_->clone());
  g.initial_lr() = param_group.initial_lr();
  param_groups_.push_back(std::move(g));
}

void Optimizer::zero_grad(bool set_to_none) {
  for (auto& g : param_groups_) {
    for (auto& p : g.params()) {
      if (!p.grad().defined()) continue;
      if (set_to_none) {
        p.set_grad(Tensor());
      } else {
        Tensor& grad = p.mutable_grad();
        if (grad.grad_fn()) grad = grad.detach();
        else grad.requires_grad_(false);
        grad.zero_();
      }
    }
  }
}

std::vector<Tensor> Optimizer::parameters() const {
  std::vector<Tensor> out;
  for (const auto& g : param_groups_) out.insert(out.end(), g.params().begin(), g.params().end());
  return out;
}

size_t Optimizer::size() const {
  size_t n = 0;
  for (const auto& g : param_groups_) n += g.params().size();
  return n;
}

OptimizerParamState* Optimizer::find_state(const Tensor& param) const {
  auto it = state_.find(param.impl());
  return it == state_.end() ? nullptr : it->second.get();
}

Tensor Optimizer::run_closure(const LossClosure& closure) {
  if (!closure) return Tensor();
  EnableGradGuard enable;
  return closure();
}

StateDict Optimizer::state_dict() const {
  StateDict out;
  int64_t index = 0;
  // state first (PyTorch's dict order), then the groups.
  for (const auto& g : param_groups_)
    for (const auto& p : g.params()) {
      if (const auto* s = find_state(p)) {
        StateDict one;
        s->write(one, "state." + std::to_string(index) + ".");
        for (auto& [k, v] : one) out.insert_or_assign(k, v.defined() ? v.detach().clone() : v);
      }
      ++index;
    }
  index = 0;
  for (size_t gi = 0; gi < param_groups_.size(); ++gi) {
    const auto& g = param_groups_[gi];
    const std::string prefix = "param_groups." + std::to_string(gi) + ".";
    g.options().write(out, prefix);
    if (g.initial_lr()) write_scalar(out, prefix + "initial_lr", *g.initial_lr());
    std::vector<int64_t> ids;
    for (size_t i = 0; i < g.params().size(); ++i) ids.push_back(index++);
    out.insert_or_assign(prefix + "params", tensor(ids, TensorOptions().dtype(kLong)));
  }
  return out;
}

namespace {
// "<head>.<n>.<rest>" -> (n, rest); false when key does not have that shape.
bool split_indexed(const std::string& key, const std::string& head, int64_t& n, std::string& rest) {
  if (key.compare(0, head.size(), head) != 0) return false;
  size_t dot = key.find('.', head.size());
  if (dot == std::string::npos || dot == head.size()) return false;
  const std::string num = key.substr(head.size(), dot - head.size());
  for (char c : num)
    if (c < '0' || c > '9') return false;
  n = std::stoll(num);
  rest = key.substr(dot + 1);
  return !rest.empty();
}
}  // namespace

void Optimizer::load_state_dict(const StateDict& sd) {
  // Sort the keys into groups and per-parameter states.
  std::map<int64_t, StateDict> saved_groups;  // group index -> its keys without the prefix
  std::map<int64_t, StateDict> saved_states;  // param index -> its keys without the prefix
  for (const auto& [key, value] : sd) {
    int64_t n = 0;
    std::string rest;
    if (split_indexed(key, "param_groups.", n, rest)) saved_groups[n].insert_or_assign(rest, value);
    else if (split_indexed(key, "state.", n, rest)) saved_states[n].insert_or_assign(rest, value);
    else throw std::invalid_argument("[Optimizer.load_state_dict] unexpected key '" + key + "'");
  }
  for (int64_t i = 0; i < static_cast<int64_t>(saved_groups.size()); ++i)
    if (!saved_groups.count(i))
      throw std::invalid_argument("[Optimizer.load_state_dict] param_groups." + std::to_string(i) +
                                  " is missing while later groups are present");
  if (saved_groups.size() != param_groups_.size())
    throw std::invalid_argument("loaded state dict has a different number of parameter groups");

  // Saved parameter index -> current parameter, group by group (PyTorch's id_map).
  std::map<int64_t, Tensor> id_map;
  std::vector<std::unique_ptr<OptimizerOptions>> new_options;
  std::vector<std::optional<double>> new_initial_lr;
  for (size_t gi = 0; gi < param_groups_.size(); ++gi) {
    const StateDict& sg = saved_groups[static_cast<int64_t>(gi)];
    const std::string where = "param_groups." + std::to_string(gi) + ".";
    const Tensor* ids = sg.find("params");
    if (!ids || !ids->defined() || ids->dim() != 1)
      throw std::invalid_argument("[Optimizer.load_state_dict] missing or malformed key '" + where + "params'");
    const auto& params = param_groups_[gi].params();
    if (ids->numel() != static_cast<int64_t>(params.size()))
      throw std::invalid_argument(
          "loaded state dict contains a parameter group that doesn't match the size of optimizer's group");
    Tensor idl = ids->cpu().to(kLong).contiguous();
    const int64_t* pi = idl.data_ptr<int64_t>();
    for (size_t i = 0; i < params.size(); ++i) {
      if (!id_map.emplace(pi[i], params[i]).second)
        throw std::invalid_argument("[Optimizer.load_state_dict] parameter index " + std::to_string(pi[i]) +
                                    " appears in more than one group");
    }
    auto opts = param_groups_[gi].options().clone();
    StateDict prefixed;
    for (const auto& [k, v] : sg)
      if (k != "params") prefixed.insert_or_assign(where + k, v);
    opts->read(prefixed, where);
    new_options.push_back(std::move(opts));
    new_initial_lr.push_back(read_optional_scalar(prefixed, where + "initial_lr"));
  }
  std::unordered_map<const TensorImpl*, std::unique_ptr<OptimizerParamState>> new_state;
  for (const auto& [i, keys] : saved_states) {
    auto it = id_map.find(i);
    if (it == id_map.end())
      throw std::invalid_argument("[Optimizer.load_state_dict] state." + std::to_string(i) +
                                  " belongs to no parameter of the saved groups");
    const std::string where = "state." + std::to_string(i) + ".";
    StateDict prefixed;
    for (const auto& [k, v] : keys) prefixed.insert_or_assign(where + k, v);
    auto s = make_param_state();
    s->read(prefixed, where, it->second);
    new_state[it->second.impl()] = std::move(s);
  }
  // Everything parsed: commit.
  for (size_t gi = 0; gi < param_groups_.size(); ++gi) {
    param_groups_[gi].set_options(std::move(new_options[gi]));
    param_groups_[gi].initial_lr() = new_initial_lr[gi];
  }
  state_ = std::move(new_state);
}

}  // namespace troupe::optim
