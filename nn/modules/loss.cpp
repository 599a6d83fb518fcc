// Loss modules: each forward is the nn::functional loss with the module's options and buffers.
#include <troupe/nn/modules/loss.h>

#include <stdexcept>
#include <string>

#include <troupe/tensor/ops.h>

namespace troupe::nn {

namespace F = functional;

Value Loss::forward_args(const Args& args, const Kwargs& kwargs) {
  const Value* input = args.size() > 0 ? &args[0] : nullptr;
  const Value* target = args.size() > 1 ? &args[1] : nullptr;
  bool ok = args.size() <= 2;
  for (const auto& [k, v] : kwargs) {
    const Value** slot = k == "input" ? &input : k == "target" ? &target : nullptr;
    if (!slot || *slot) ok = false;  // an unknown keyword, or one given twice
    else *slot = &v;
  }
  if (ok && input && target && input->is_tensor() && target->is_tensor())
    return forward(input->tensor(), target->tensor());
  std::string got;
  auto add = [&got](const std::string& item) {
    if (!got.empty()) got += ", ";
    got += item;
  };
  for (const auto& a : args) add(a.kind());
  for (const auto& [k, v] : kwargs) add(k + "=" + v.kind());
  throw std::invalid_argument("[" + name() + "] forward takes (input, target) Tensors, got (" + got + ")");
}

Value TripleInputLoss::forward_args(const Args& args, const Kwargs& kwargs) {
  const std::array<std::string, 3> names = arg_names();
  std::array<const Value*, 3> slots{};
  bool ok = args.size() <= 3;
  for (size_t i = 0; i < args.size() && i < 3; ++i) slots[i] = &args[i];
  for (const auto& [k, v] : kwargs) {
    size_t i = 0;
    while (i < 3 && names[i] != k) ++i;
    if (i == 3 || slots[i]) ok = false;  // an unknown keyword, or one given twice
    else slots[i] = &v;
  }
  for (const Value* v : slots) ok = ok && v && v->is_tensor();
  if (ok) return forward(slots[0]->tensor(), slots[1]->tensor(), slots[2]->tensor());
  std::string got;
  auto add = [&got](const std::string& item) {
    if (!got.empty()) got += ", ";
    got += item;
  };
  for (const auto& a : args) add(a.kind());
  for (const auto& [k, v] : kwargs) add(k + "=" + v.kind());
  throw std::invalid_argument("[" + name() + "] forward takes (" + names[0] + ", " + names[1] + ", " + names[2] +
                              ") Tensors, got (" + got + ")");
}

namespace {
// The tensor given in the options, registered as is (as PyTorch registers the weight it is given);
// while initialisation is skipped (skip_init, or reset() on a copy made by clone()) an uninitialised
// tensor of the same shape instead, so that the copy does not share the original's buffer.
Tensor own_tensor(const Tensor& t) {
  if (!t.defined() || !initialization_skipped()) return t;
  return empty_like(t);
}
}  // namespace

MSELossImpl::MSELossImpl(const MSELossOptions& options_) : options(options_) { reset(); }

Tensor MSELossImpl::forward(const Tensor& input, const Tensor& target) { return F::mse_loss(input, target, options); }

L1LossImpl::L1LossImpl(const L1LossOptions& options_) : options(options_) { reset(); }

Tensor L1LossImpl::forward(const Tensor& input, const Tensor& target) { return F::l1_loss(input, target, options); }

SmoothL1LossImpl::SmoothL1LossImpl(const SmoothL1LossOptions& options_) : options(options_) { reset(); }

Tensor SmoothL1LossImpl::forward(const Tensor& input, const Tensor& target) {
  return F::smooth_l1_loss(input, target, options);
}

HuberLossImpl::HuberLossImpl(const HuberLossOptions& options_) : options(options_) { reset(); }

Tensor HuberLossImpl::forward(const Tensor& input, const Tensor& target) { return F::huber_loss(input, target, options); }

KLDivLossImpl::KLDivLossImpl(const KLDivLossOptions& options_) : options(options_) { reset(); }

Tensor KLDivLossImpl::forward(const Tensor& input, const Tensor& target) { return F::kl_div(input, target, options); }

CosineEmbeddingLossImpl::CosineEmbeddingLossImpl(const CosineEmbeddingLossOptions& options_) : options(options_) {
  reset();
}

Tensor CosineEmbeddingLossImpl::forward(const Tensor& input1, const Tensor& input2, const Tensor& target) {
  return F::cosine_embedding_loss(input1, input2, target, options);
}

MarginRankingLossImpl::MarginRankingLossImpl(const MarginRankingLossOptions& options_) : options(options_) { reset(); }

Tensor MarginRankingLossImpl::forward(const Tensor& input1, const Tensor& input2, const Tensor& target) {
  return F::margin_ranking_loss(input1, input2, target, options);
}

TripletMarginLossImpl::TripletMarginLossImpl(const TripletMarginLossOptions& options_) : options(options_) { reset(); }

Tensor TripletMarginLossImpl::forward(const Tensor& anchor, const Tensor& positive, const Tensor& negative) {
  return F::triplet_margin_loss(anchor, positive, negative, options);
}

CrossEntropyLossImpl::CrossEntropyLossImpl(const CrossEntropyLossOptions& options_) : options(options_) { reset(); }

void CrossEntropyLossImpl::reset() { weight = register_buffer("weight", own_tensor(options.weight())); }

Tensor CrossEntropyLossImpl::forward(const Tensor& input, const Tensor& target) {
  return F::cross_entropy(input, target, CrossEntropyLossOptions(options).weight(weight));
}

NLLLossImpl::NLLLossImpl(const NLLLossOptions& options_) : options(options_) { reset(); }

void NLLLossImpl::reset() { weight = register_buffer("weight", own_tensor(options.weight())); }

Tensor NLLLossImpl::forward(const Tensor& input, const Tensor& target) {
  return F::nll_loss(input, target, NLLLossOptions(options).weight(weight));
}

BCELossImpl::BCELossImpl(const BCELossOptions& options_) : options(options_) { reset(); }

void BCELossImpl::reset() { weight = register_buffer("weight", own_tensor(options.weight())); }

Tensor BCELossImpl::forward(const Tensor& input, const Tensor& target) {
  return F::binary_cross_entropy(input, target, BCELossOptions(options).weight(weight));
}

BCEWithLogitsLossImpl::BCEWithLogitsLossImpl(const BCEWithLogitsLossOptions& options_) : options(options_) { reset(); }

void BCEWithLogitsLossImpl::reset() {
  weight = register_buffer("weight", own_tensor(options.weight()));
  pos_weight = register_buffer("pos_weight", own_tensor(options.pos_weight()));
}

Tensor BCEWithLogitsLossImpl::forward(const Tensor& input, const Tensor& target) {
  return F::binary_cross_entropy_with_logits(input, target,
                                             BCEWithLogitsLossOptions(options).weight(weight).pos_weight(pos_weight));
}

}  // namespace troupe::nn
