// The op table of the interpreter: each aten op a trace records, run by the troupe function that recorded
// it (tensor ops, or nn::functional with its options rebuilt from the schema's arguments).
#include <troupe/jit/ops.h>

#include <algorithm>
#include <map>
#include <stdexcept>

#include <troupe/jit/ir.h>
#include <troupe/nn/functional.h>
#include <troupe/tensor/ops.h>

namespace troupe::jit {

namespace F = nn::functional;

namespace {

Tensor T(const std::vector<IValue>& a, size_t i) { return a[i].isNone() ? Tensor() : a[i].toTensor(); }
int64_t I(const std::vector<IValue>& a, size_t i) { return a[i].toInt(); }
double D(const std::vector<IValue>& a, size_t i) { return a[i].isInt() ? static_cast<double>(a[i].toInt()) : a[i].toDouble(); }
bool B(const std::vector<IValue>& a, size_t i) { return a[i].toBool(); }
std::vector<int64_t> L(const std::vector<IValue>& a, size_t i) { return a[i].toIntVector(); }
Scalar S(const std::vector<IValue>& a, size_t i) {
  if (a[i].isBool()) return Scalar(a[i].toBool());
  if (a[i].isInt()) return Scalar(a[i].toInt());
  return Scalar(a[i].toDouble());
}
std::optional<ScalarType> DT(const std::vector<IValue>& a, size_t i) {
  if (a[i].isNone()) return std::nullopt;
  return scalar_type_of_code(a[i].toInt());
}
nn::Reduction R(const std::vector<IValue>& a, size_t i) {
  const int64_t r = a[i].toInt();
  if (r < 0 || r > 2) throw std::invalid_argument("[jit] reduction code " + std::to_string(r) + " is not 0, 1 or 2");
  return nn::Reduction(static_cast<nn::Reduction::Kind>(r));
}

struct OpInfo {
  OpFn fn;
  std::vector<std::string> defaults;
};

const std::map<std::string, OpInfo>& table() {
  static const std::map<std::string, OpInfo> ops = {
      {"aten::linear", {[](const std::vector<IValue>& a) -> IValue { return troupe::linear(T(a, 0), T(a, 1), T(a, 2)); },
                        {"", "", "None"}}},
      {"aten::matmul", {[](const std::vector<IValue>& a) -> IValue { return troupe::matmul(T(a, 0), T(a, 1)); }, {}}},
      {"aten::relu", {[](const std::vector<IValue>& a) -> IValue { return troupe::relu(T(a, 0)); }, {}}},
      {"aten::relu_", {[](const std::vector<IValue>& a) -> IValue { return F::relu(T(a, 0), F::ReLUFuncOptions(true)); }, {}}},
      {"aten::sigmoid", {[](const std::vector<IValue>& a) -> IValue { return troupe::sigmoid(T(a, 0)); }, {}}},
      {"aten::tanh", {[](const std::vector<IValue>& a) -> IValue { return troupe::tanh(T(a, 0)); }, {}}},
      {"aten::gelu", {[](const std::vector<IValue>& a) -> IValue { return troupe::gelu(T(a, 0), a[1].toStringRef()); },
                      {"", "\"none\""}}},
      {"aten::leaky_relu",
       {[](const std::vector<IValue>& a) -> IValue { return F::leaky_relu(T(a, 0), F::LeakyReLUFuncOptions().negative_slope(D(a, 1))); },
        {"", "0.01"}}},
      {"aten::leaky_relu_",
       {[](const std::vector<IValue>& a) -> IValue {
          return F::leaky_relu(T(a, 0), F::LeakyReLUFuncOptions().negative_slope(D(a, 1)).inplace(true));
        },
        {"", "0.01"}}},
      {"aten::softmax", {[](const std::vector<IValue>& a) -> IValue { return troupe::softmax(T(a, 0), I(a, 1), DT(a, 2)); },
                         {"", "", "None"}}},
      {"aten::log_softmax",
       {[](const std::vector<IValue>& a) -> IValue { return troupe::log_softmax(T(a, 0), I(a, 1), DT(a, 2)); }, {"", "", "None"}}},
      {"aten::add", {[](const std::vector<IValue>& a) -> IValue {
                       return a[1].isTensor() ? troupe::add(T(a, 0), T(a, 1), S(a, 2)) : troupe::add(T(a, 0), S(a, 1), S(a, 2));
                     },
                     {"", "", "1"}}},
      {"aten::sub", {[](const std::vector<IValue>& a) -> IValue {
                       return a[1].isTensor() ? troupe::sub(T(a, 0), T(a, 1), S(a, 2)) : troupe::sub(T(a, 0), S(a, 1), S(a, 2));
                     },
                     {"", "", "1"}}},
      {"aten::add_", {[](const std::vector<IValue>& a) -> IValue {
                        Tensor self = T(a, 0);
                        if (a[1].isTensor()) self.add_(T(a, 1), S(a, 2));
                        else self.add_(S(a, 1), S(a, 2));
                        return self;
                      },
                      {"", "", "1"}}},
      {"aten::mul", {[](const std::vector<IValue>& a) -> IValue {
                       return a[1].isTensor() ? troupe::mul(T(a, 0), T(a, 1)) : troupe::mul(T(a, 0), S(a, 1));
                     },
                     {}}},
      {"aten::div", {[](const std::vector<IValue>& a) -> IValue {
                       return a[1].isTensor() ? troupe::div(T(a, 0), T(a, 1)) : troupe::div(T(a, 0), S(a, 1));
                     },
                     {}}},
      {"aten::exp", {[](const std::vector<IValue>& a) -> IValue { return troupe::exp(T(a, 0)); }, {}}},
      {"aten::log", {[](const std::vector<IValue>& a) -> IValue { return troupe::log(T(a, 0)); }, {}}},
      {"aten::transpose", {[](const std::vector<IValue>& a) -> IValue { return troupe::transpose(T(a, 0), I(a, 1), I(a, 2)); }, {}}},
      {"aten::permute", {[](const std::vector<IValue>& a) -> IValue { return troupe::permute(T(a, 0), L(a, 1)); }, {}}},
      {"aten::unsqueeze", {[](const std::vector<IValue>& a) -> IValue { return troupe::unsqueeze(T(a, 0), I(a, 1)); }, {}}},
      {"aten::sum", {[](const std::vector<IValue>& a) -> IValue {
                       if (a.size() == 2) return troupe::sum(T(a, 0), DT(a, 1));
                       return troupe::sum(T(a, 0), L(a, 1), B(a, 2), DT(a, 3));
                     },
                     {}}},
      {"aten::mean", {[](const std::vector<IValue>& a) -> IValue {
                        if (a.size() == 2) return troupe::mean(T(a, 0));
                        return troupe::mean(T(a, 0), L(a, 1), B(a, 2));
                      },
                      {}}},
      {"aten::flatten", {[](const std::vector<IValue>& a) -> IValue { return troupe::flatten(T(a, 0), I(a, 1), I(a, 2)); },
                         {"", "0", "-1"}}},
      {"aten::view", {[](const std::vector<IValue>& a) -> IValue { return troupe::view(T(a, 0), L(a, 1)); }, {}}},
      {"aten::reshape", {[](const std::vector<IValue>& a) -> IValue { return troupe::reshape(T(a, 0), L(a, 1)); }, {}}},
      {"aten::_convolution",
       {[](const std::vector<IValue>& a) -> IValue {
          if (B(a, 6)) throw std::invalid_argument("[jit] aten::_convolution with transposed=True is not supported");
          return troupe::conv2d(T(a, 0), T(a, 1), T(a, 2), L(a, 3), L(a, 4), L(a, 5), I(a, 8));
        },
        {}}},
      {"aten::max_pool2d",
       {[](const std::vector<IValue>& a) -> IValue {
          return troupe::max_pool2d(T(a, 0), L(a, 1), L(a, 2), L(a, 3), L(a, 4), B(a, 5));
        },
        {"", "", "[]", "0", "1", "False"}}},
      {"aten::avg_pool2d",
       {[](const std::vector<IValue>& a) -> IValue {
          std::optional<int64_t> div;
          if (!a[6].isNone()) div = I(a, 6);
          return troupe::avg_pool2d(T(a, 0), L(a, 1), L(a, 2), L(a, 3), B(a, 4), B(a, 5), div);
        },
        {"", "", "[]", "0", "False", "True", "None"}}},
      {"aten::adaptive_avg_pool2d",
       {[](const std::vector<IValue>& a) -> IValue {
          const auto s = L(a, 1);
          return F::adaptive_avg_pool2d(T(a, 0), F::AdaptiveAvgPool2dFuncOptions({s.at(0), s.at(1)}));
        },
        {}}},
      {"aten::batch_norm",
       {[](const std::vector<IValue>& a) -> IValue {
          auto o = F::BatchNormFuncOptions().weight(T(a, 1)).bias(T(a, 2)).training(B(a, 5)).eps(D(a, 7));
          o.momentum(a[6].isNone() ? std::optional<double>() : std::optional<double>(D(a, 6)));
          return F::batch_norm(T(a, 0), T(a, 3), T(a, 4), o);
        },
        {}}},
      {"aten::layer_norm",
       {[](const std::vector<IValue>& a) -> IValue {
          return F::layer_norm(T(a, 0), F::LayerNormFuncOptions(L(a, 1)).weight(T(a, 2)).bias(T(a, 3)).eps(D(a, 4)));
        },
        {"", "", "None", "None", "1.0000000000000001e-05", "True"}}},
      {"aten::dropout",
       {[](const std::vector<IValue>& a) -> IValue { return F::dropout(T(a, 0), F::DropoutFuncOptions().p(D(a, 1)).training(B(a, 2))); },
        {}}},
      {"aten::dropout_",
       {[](const std::vector<IValue>& a) -> IValue {
          return F::dropout(T(a, 0), F::DropoutFuncOptions().p(D(a, 1)).training(B(a, 2)).inplace(true));
        },
        {}}},
      {"aten::embedding",
       {[](const std::vector<IValue>& a) -> IValue {
          auto o = F::EmbeddingFuncOptions().scale_grad_by_freq(B(a, 3)).sparse(B(a, 4));
          if (I(a, 2) >= 0) o.padding_idx(I(a, 2));
          return F::embedding(T(a, 1), T(a, 0), o);
        },
        {"", "", "-1", "False", "False"}}},
      {"aten::mse_loss", {[](const std::vector<IValue>& a) -> IValue { return F::mse_loss(T(a, 0), T(a, 1), F::MSELossFuncOptions(R(a, 2))); },
                          {"", "", "1"}}},
      {"aten::l1_loss", {[](const std::vector<IValue>& a) -> IValue { return F::l1_loss(T(a, 0), T(a, 1), F::L1LossFuncOptions(R(a, 2))); },
                         {"", "", "1"}}},
      {"aten::smooth_l1_loss",
       {[](const std::vector<IValue>& a) -> IValue {
          return F::smooth_l1_loss(T(a, 0), T(a, 1), F::SmoothL1LossFuncOptions(R(a, 2)).beta(D(a, 3)));
        },
        {"", "", "1", "1."}}},
      {"aten::cross_entropy_loss",
       {[](const std::vector<IValue>& a) -> IValue {
          return F::cross_entropy(T(a, 0), T(a, 1),
                                  F::CrossEntropyFuncOptions().weight(T(a, 2)).reduction(R(a, 3)).ignore_index(I(a, 4)).label_smoothing(D(a, 5)));
        },
        {"", "", "None", "1", "-100", "0."}}},
      {"aten::nll_loss_nd",
       {[](const std::vector<IValue>& a) -> IValue {
          return F::nll_loss(T(a, 0), T(a, 1), F::NLLLossFuncOptions().weight(T(a, 2)).reduction(R(a, 3)).ignore_index(I(a, 4)));
        },
        {"", "", "None", "1", "-100"}}},
      {"aten::binary_cross_entropy",
       {[](const std::vector<IValue>& a) -> IValue {
          return F::binary_cross_entropy(T(a, 0), T(a, 1), F::BinaryCrossEntropyFuncOptions().weight(T(a, 2)).reduction(R(a, 3)));
        },
        {"", "", "None", "1"}}},
      {"aten::binary_cross_entropy_with_logits",
       {[](const std::vector<IValue>& a) -> IValue {
          return F::binary_cross_entropy_with_logits(
              T(a, 0), T(a, 1),
              F::BinaryCrossEntropyWithLogitsFuncOptions().weight(T(a, 2)).pos_weight(T(a, 3)).reduction(R(a, 4)));
        },
        {"", "", "None", "None", "1"}}},
  };
  return ops;
}

}  // namespace

OpFn find_op(const std::string& name) {
  auto it = table().find(name);
  return it == table().end() ? nullptr : it->second.fn;
}

const std::vector<std::string>& op_defaults(const std::string& name) {
  static const std::vector<std::string> none;
  auto it = table().find(name);
  return it == table().end() ? none : it->second.defaults;
}

std::vector<std::string> known_ops() {
  std::vector<std::string> out;
  for (const auto& [k, v] : table()) out.push_back(k);
  return out;
}

}  // namespace troupe::jit
