// nn::functional losses: compositions of differentiable tensor ops (autograd gives their backward),
// with PyTorch 1.13's shape rules and error texts. binary_cross_entropy alone records its backward.
#include <troupe/nn/functional/loss.h>
#include <troupe/tensor/tracing.h>

#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <troupe/tensor/autograd.h>
#include <troupe/tensor/ops.h>
#include <troupe/tensor/warning.h>

namespace troupe::nn {

Reduction::Reduction(const std::string& s) {
  if (s == "none") kind_ = None;
  else if (s == "mean" || s == "elementwise_mean") kind_ = Mean;  // the deprecated alias PyTorch accepts
  else if (s == "sum") kind_ = Sum;
  else throw std::invalid_argument(s + " is not a valid value for reduction");
}

std::string Reduction::str() const {
  switch (kind_) {
    case None: return "none";
    case Sum: return "sum";
    case Mean: break;
  }
  return "mean";
}

KLDivReduction::KLDivReduction(const std::string& s) {
  if (s == "none") kind_ = None;
  else if (s == "batchmean") kind_ = BatchMean;
  else if (s == "mean" || s == "elementwise_mean") kind_ = Mean;
  else if (s == "sum") kind_ = Sum;
  else throw std::invalid_argument(s + " is not a valid value for reduction");
}

std::string KLDivReduction::str() const {
  switch (kind_) {
    case None: return "none";
    case BatchMean: return "batchmean";
    case Sum: return "sum";
    case Mean: break;
  }
  return "mean";
}

namespace functional {
namespace {

/// "[2, 3]", as c10 prints sizes in error messages.
std::string sizes_str(IntArrayRef s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

/// "torch.Size([2, 3])", as Python prints tensor.size().
std::string torch_size_str(IntArrayRef s) { return "torch.Size(" + sizes_str(s) + ")"; }

/// PyTorch's scalar type name in "expected scalar type Long but found Float".
std::string scalar_type_name(ScalarType t) {
  std::string n = legacy_type_name(t);
  return n.substr(0, n.size() - 6);  // drop "Tensor"
}

/// A double as C++ streams print it (PyTorch's TORCH_CHECK formatting): 1.5, 0.1, 2.
std::string num_str(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

Tensor apply_reduction(const Tensor& loss, Reduction reduction) {
  switch (reduction.kind()) {
    case Reduction::None: return loss;
    case Reduction::Sum: return loss.sum();
    case Reduction::Mean: break;
  }
  return loss.mean();
}

/// The class weights viewed as (1, C, 1, ..., 1) to broadcast against an input of `ndim` dims whose
/// class dim is 1 (or as (C) for an unbatched input).
Tensor weight_view(const Tensor& weight, int64_t ndim) {
  if (ndim <= 1) return weight;
  std::vector<int64_t> shape(static_cast<size_t>(ndim), 1);
  shape[1] = weight.size(0);
  return weight.reshape(shape);
}

// ---------------------------------------------------------------- nll_loss

/// PyTorch's checks of nll_loss_nd / nll_loss / nll_loss2d, in PyTorch's order.
void check_nll_shapes(const Tensor& input, const Tensor& target, const Tensor& weight) {
  if (input.dim() < 1)
    throw std::invalid_argument("Expected 1 or more dimensions (got " + std::to_string(input.dim()) + ")");
  if (input.dim() != 1) {
    const int64_t tb = target.dim() == 0 ? 0 : target.size(0);
    if (input.size(0) != tb)
      throw std::invalid_argument("Expected input batch_size (" + std::to_string(input.size(0)) +
                                  ") to match target batch_size (" + std::to_string(tb) + ").");
  }
  const int64_t n_classes = input.dim() == 1 ? input.size(0) : input.size(1);
  if (input.dim() <= 2) {
    if (target.dim() > 1)
      throw std::runtime_error("0D or 1D target tensor expected, multi-target not supported");
    const bool no_batch_dim = input.dim() == 1 && target.dim() == 0;
    if (!no_batch_dim && input.size(0) != target.size(0))
      throw std::runtime_error("size mismatch (got input: " + sizes_str(input.sizes()) +
                               ", target: " + sizes_str(target.sizes()) + ")");
    // PyTorch 1.13 silently reads only target[0] here; later versions reject it with this text.
    if (input.dim() == 1 && target.dim() == 1)
      throw std::runtime_error("Expected target to be 0D when input is 1D, but got target.dim =" +
                               std::to_string(target.dim()));
    if (weight.defined() && !(weight.dim() == 1 && weight.numel() == n_classes))
      throw std::runtime_error("weight tensor should be defined either for all " + std::to_string(n_classes) +
                               " classes or no classes but got weight tensor of shape: " +
                               sizes_str(weight.sizes()));
  } else {
    // (N, C, d1, ..., dK): PyTorch checks the spatial sizes, then runs nll_loss2d on (N, C, 1, -1)
    // (a 4-D input goes to nll_loss2d as it is, with that function's checks and texts)
    if (input.dim() != 4) {
      std::vector<int64_t> expected{input.size(0)};
      for (int64_t d = 2; d < input.dim(); ++d) expected.push_back(input.size(d));
      const std::vector<int64_t> have(target.sizes().begin() + 1, target.sizes().end());
      if (have != std::vector<int64_t>(expected.begin() + 1, expected.end()))
        throw std::runtime_error("Expected target size " + sizes_str(expected) + ", got " +
                                 sizes_str(target.sizes()));
    } else if (target.dim() != 3) {
      throw std::runtime_error(
          "only batches of spatial targets supported (3D tensors) but got targets of dimension: " +
          std::to_string(target.dim()));
    }
    if (weight.defined() && weight.numel() != n_classes)
      throw std::runtime_error("weight tensor should be defined either for all or no classes");
    if (input.dim() == 4 &&
        (input.size(0) != target.size(0) || input.size(2) != target.size(1) || input.size(3) != target.size(2)))
      throw std::runtime_error("size mismatch (got input: " + sizes_str(input.sizes()) +
                               " , target: " + sizes_str(target.sizes()));  // sic: PyTorch's text
  }
  if (target.dtype() != kInt64)
    throw std::runtime_error("expected scalar type Long but found " + scalar_type_name(target.dtype()));
}

/// Throws PyTorch's IndexError text for the first target (row-major) that is neither ignore_index nor
/// a class in [0, n_classes).
void check_targets_in_range(const Tensor& target, int64_t n_classes, int64_t ignore_index) {
  if (target.numel() == 0) return;
  const Tensor t = target.to(Device(kCPU)).contiguous();
  const int64_t* p = t.data_ptr<int64_t>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    const int64_t v = p[i];
    if (v != ignore_index && (v < 0 || v >= n_classes))
      throw std::out_of_range("Target " + std::to_string(v) + " is out of bounds.");
  }
}

/// The pieces shared by nll_loss and cross_entropy's label smoothing, all of the target's shape:
/// `valid` (target != ignore_index), `safe` (the target with ignored entries replaced by class 0, so
/// that gather and index_select stay in range) and `w` (weight[target], or 1; 0 where ignored).
struct TargetInfo {
  Tensor valid, safe, w;
};

TargetInfo target_info(const Tensor& input, const Tensor& target, const Tensor& weight, int64_t ignore_index) {
  TargetInfo ti;
  ti.valid = target.ne(ignore_index);
  ti.safe = target.masked_fill(ti.valid.logical_not(), 0);
  if (weight.defined()) {
    Tensor wt = weight.to(input.dtype()).index_select(0, ti.safe.reshape({-1})).reshape(target.sizes());
    ti.w = where(ti.valid, wt, zeros({}, input.options()));
  } else {
    ti.w = ti.valid.to(input.dtype());
  }
  return ti;
}

/// nll_loss after its checks.
Tensor nll_impl(const Tensor& input, const Tensor& target, const TargetInfo& ti, Reduction reduction) {
  // input[n, target[n, ...], ...] of the target's shape (class dim 1, or 0 for an unbatched input)
  Tensor picked = input.dim() == 1 ? input.gather(0, ti.safe.reshape({1})).reshape({})
                                   : input.gather(1, ti.safe.unsqueeze(1)).squeeze(1);
  // where (not a multiply by 0) keeps ignored entries out of the value and of the gradient, even when
  // input holds -inf there or the mean divides by a zero total weight
  Tensor losses = where(ti.valid, picked.neg() * ti.w, zeros({}, input.options()));
  switch (reduction.kind()) {
    case Reduction::None: return losses;
    case Reduction::Sum: return losses.sum();
    case Reduction::Mean: break;
  }
  // mean divides by the total weight of the non-ignored targets: 0 / 0 = nan when all are ignored
  return losses.sum() / ti.w.sum();
}

}  // namespace

// ---------------------------------------------------------------- regression losses

Tensor mse_loss(const Tensor& input, const Tensor& target, const MSELossFuncOptions& options) {
  TROUPE_TRACE_OP("aten::mse_loss", mse_loss(input, target, options), input, target, int64_t{options.reduction().kind()});
  return apply_reduction((input - target).square(), options.reduction());
}

Tensor l1_loss(const Tensor& input, const Tensor& target, const L1LossFuncOptions& options) {
  TROUPE_TRACE_OP("aten::l1_loss", l1_loss(input, target, options), input, target, int64_t{options.reduction().kind()});
  return apply_reduction((input - target).abs(), options.reduction());
}

Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, const SmoothL1LossFuncOptions& options) {
  TROUPE_TRACE_OP("aten::smooth_l1_loss", smooth_l1_loss(input, target, options), input, target, int64_t{options.reduction().kind()}, options.beta());
  const double beta = options.beta();
  const Reduction reduction = options.reduction();
  if (beta < 0) throw std::runtime_error("smooth_l1_loss does not support negative values for beta.");
  // beta = 0 must not reach the quadratic branch (0/0 there would poison the gradient through where)
  if (beta == 0) return l1_loss(input, target, L1LossFuncOptions(reduction));
  Tensor z = (input - target).abs();
  Tensor loss = where(z.lt(beta), z * 0.5 * z / beta, z - 0.5 * beta);
  return apply_reduction(loss, reduction);
}

Tensor huber_loss(const Tensor& input, const Tensor& target, const HuberLossFuncOptions& options) {
  const double delta = options.delta();
  const Reduction reduction = options.reduction();
  if (!(delta > 0)) throw std::runtime_error("huber_loss does not support non-positive values for delta.");
  Tensor z = (input - target).abs();
  Tensor loss = where(z.lt(delta), z * 0.5 * z, (z - 0.5 * delta) * delta);
  return apply_reduction(loss, reduction);
}

// ---------------------------------------------------------------- classification losses

Tensor nll_loss(const Tensor& input, const Tensor& target, const NLLLossFuncOptions& options) {
  TROUPE_TRACE_OP("aten::nll_loss_nd", nll_loss(input, target, options), input, target, options.weight(), int64_t{options.reduction().kind()}, options.ignore_index());
  const Tensor& weight = options.weight();
  const int64_t ignore_index = options.ignore_index();
  check_nll_shapes(input, target, weight);
  const int64_t n_classes = input.dim() == 1 ? input.size(0) : input.size(1);
  check_targets_in_range(target, n_classes, ignore_index);
  return nll_impl(input, target, target_info(input, target, weight, ignore_index), options.reduction());
}

Tensor cross_entropy(const Tensor& input, const Tensor& target, const CrossEntropyFuncOptions& options) {
  TROUPE_TRACE_OP("aten::cross_entropy_loss", cross_entropy(input, target, options), input, target, options.weight(), int64_t{options.reduction().kind()}, options.ignore_index(), options.label_smoothing());
  const Tensor& weight = options.weight();
  const int64_t ignore_index = options.ignore_index();
  const Reduction reduction = options.reduction();
  const double label_smoothing = options.label_smoothing();
  const int64_t class_dim = input.dim() == 1 ? 0 : 1;
  if (input.sizes() == target.sizes()) {
    // class probabilities
    if (!target.is_floating_point())
      throw std::runtime_error("Expected floating point type for target with class probabilities, got " +
                               scalar_type_name(target.dtype()));
    if (ignore_index >= 0) throw std::runtime_error("ignore_index is not supported for floating point target");
    const int64_t n_classes = input.dim() == 0 ? 1 : input.size(class_dim);
    if (weight.defined() && !(weight.dim() == 1 && weight.numel() == n_classes))
      throw std::runtime_error("cross_entropy: weight tensor should be defined either for all " +
                               std::to_string(n_classes) + " classes or no classes but got weight tensor of shape: " +
                               sizes_str(weight.sizes()));
    Tensor logp = input.log_softmax(class_dim);
    Tensor t = target;
    if (label_smoothing > 0) {
      if (label_smoothing > 1)
        throw std::runtime_error("label_smoothing must be between 0.0 and 1.0. Got: " + num_str(label_smoothing));
      t = target * (1 - label_smoothing) + label_smoothing / static_cast<double>(n_classes);
    }
    Tensor prod = logp * t;
    if (weight.defined()) prod = prod * weight_view(weight.to(input.dtype()), input.dim());
    switch (reduction.kind()) {
      case Reduction::None: return prod.sum({class_dim}).neg();
      case Reduction::Sum: return prod.sum().neg();
      case Reduction::Mean: break;
    }
    // the number of samples (N * d1 * ... * dK), whatever the weights; an empty input gives 0/0 = nan
    return prod.sum().neg() / static_cast<double>(input.numel() / n_classes);
  }

  // class indices
  if (label_smoothing > 1)
    throw std::runtime_error("label_smoothing must be between 0.0 and 1.0. Got: " + num_str(label_smoothing));
  check_nll_shapes(input, target, weight);
  Tensor logp = input.log_softmax(class_dim);
  const int64_t n_classes = input.size(class_dim);
  check_targets_in_range(target, n_classes, ignore_index);
  TargetInfo ti = target_info(input, target, weight, ignore_index);
  Tensor nll = nll_impl(logp, target, ti, reduction);
  if (!(label_smoothing > 0)) return nll;

  // label smoothing: the loss against the uniform distribution, -sum_c weight[c] * logp[c], with the
  // ignored targets' entries zeroed; its mean divides by the same total weight as nll's
  Tensor lw = weight.defined() ? logp * weight_view(weight.to(input.dtype()), input.dim()) : logp;
  Tensor smooth = where(ti.valid, lw.sum({class_dim}).neg(), zeros({}, input.options()));
  Tensor ret;
  switch (reduction.kind()) {
    case Reduction::None: ret = smooth; break;
    case Reduction::Sum: ret = smooth.sum(); break;
    case Reduction::Mean: ret = smooth.sum() / ti.w.sum(); break;
  }
  return nll * (1 - label_smoothing) + ret * (label_smoothing / static_cast<double>(n_classes));
}

// ---------------------------------------------------------------- binary losses

Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, const BinaryCrossEntropyFuncOptions& options) {
  TROUPE_TRACE_OP("aten::binary_cross_entropy", binary_cross_entropy(input, target, options), input, target, options.weight(), int64_t{options.reduction().kind()});
  const Tensor& weight = options.weight();
  if (input.sizes() != target.sizes())
    throw std::invalid_argument("Using a target size (" + torch_size_str(target.sizes()) +
                                ") that is different to the input size (" + torch_size_str(input.sizes()) +
                                ") is deprecated. Please ensure they have the same size.");
  Tensor w = weight.defined() ? weight.expand(broadcast_shapes(target.sizes(), weight.sizes(), "binary_cross_entropy"))
                              : Tensor();
  Tensor loss;
  {
    NoGradGuard ng;
    // NaN fails the check too, as in PyTorch
    if (input.numel() > 0 && !logical_and(input.ge(0), input.le(1)).all().item<bool>())
      throw std::runtime_error("all elements of input should be between 0 and 1");
    // (t - 1) * max(log(1 - x), -100) - t * max(log(x), -100)
    loss = (target - 1) * input.neg().add(1).log().clamp_min(-100) - target * input.log().clamp_min(-100);
    if (w.defined()) loss = loss * w;
  }
  // Hand-written backward (PyTorch's): the composite's log'(0) * 0 would make nan where x is 0 or 1.
  autograd::record(
      "BinaryCrossEntropyBackward0", {input, target}, loss,
      [sx = autograd::SavedVariable(input, false), st = autograd::SavedVariable(target, false),
       sw = autograd::SavedVariable(w, false), rx = input.requires_grad(),
       rt = target.requires_grad()](const autograd::variable_list& g) {
        Tensor x = sx.unpack(), t = st.unpack(), w = sw.unpack();
        Tensor gw = w.defined() ? g[0] * w : g[0];
        Tensor gx, gt;
        // d/dx = w * (x - t) / max(x * (1 - x), 1e-12)
        if (rx) gx = gw * (x - t) / (x * x.neg().add(1)).clamp_min(1e-12);
        // d/dt = w * (log(1 - x) - log(x))
        if (rt) gt = gw * (x.neg().add(1).log() - x.log());
        return autograd::variable_list{gx, gt};
      });
  return apply_reduction(loss, options.reduction());
}

Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target,
                                        const BinaryCrossEntropyWithLogitsFuncOptions& options) {
  TROUPE_TRACE_OP("aten::binary_cross_entropy_with_logits", binary_cross_entropy_with_logits(input, target, options),
                  input, target, options.weight(), options.pos_weight(), int64_t{options.reduction().kind()});
  const Tensor& weight = options.weight();
  const Tensor& pos_weight = options.pos_weight();
  if (input.sizes() != target.sizes())
    throw std::invalid_argument("Target size (" + torch_size_str(target.sizes()) +
                                ") must be the same as input size (" + torch_size_str(input.sizes()) + ")");
  // m = max(-x, 0); log(exp(-m) + exp(-x - m)) + m = log(1 + exp(-x)) without overflow. Its gradient
  // through autograd is -sigmoid(-x) exactly: the terms in dm/dx cancel, whatever clamp's gradient at 0.
  Tensor m = input.neg().clamp_min(0);
  Tensor softplus_neg = (m.neg().exp() + (input.neg() - m).exp()).log() + m;
  Tensor loss;
  if (pos_weight.defined()) {
    Tensor log_weight = (pos_weight - 1) * target + 1;
    loss = target.neg().add(1) * input + log_weight * softplus_neg;
  } else {
    loss = target.neg().add(1) * input + softplus_neg;
  }
  if (weight.defined()) loss = loss * weight;
  return apply_reduction(loss, options.reduction());
}

// ---------------------------------------------------------------- divergence and embedding losses

Tensor kl_div(const Tensor& input, const Tensor& target, const KLDivFuncOptions& options) {
  if (!input.defined() || !target.defined()) throw std::invalid_argument("[kl_div] got an undefined tensor");
  const KLDivReduction reduction = options.reduction();
  if (reduction.kind() == KLDivReduction::Mean)
    TROUPE_WARN_ONCE("reduction: 'mean' divides the total loss by both the batch size and the support size.'batchmean' "
                     "divides only by the batch size, and aligns with the KL div math definition.'mean' will be changed "
                     "to behave the same as 'batchmean' in the next major release.");
  Tensor out;
  if (options.log_target()) {
    out = exp(target) * (target - input);
  } else {
    // xlogy(t, t) - t * x: 0 where t == 0 (its gradient too), nan for t < 0
    Tensor safe = where(eq(target, 0), ones_like(target), target);
    out = target * log(safe) - target * input;
  }
  switch (reduction.kind()) {
    case KLDivReduction::None: return out;
    case KLDivReduction::Sum: return out.sum();
    case KLDivReduction::BatchMean: return input.dim() == 0 ? out.sum() : out.sum() / static_cast<double>(input.size(0));
    case KLDivReduction::Mean: break;
  }
  return out.mean();
}

Tensor cosine_embedding_loss(const Tensor& input1, const Tensor& input2, const Tensor& target,
                             const CosineEmbeddingLossFuncOptions& options) {
  if (!input1.defined() || !input2.defined() || !target.defined())
    throw std::invalid_argument("[cosine_embedding_loss] got an undefined tensor");
  const int64_t td = target.dim();
  if (td != 0 && td != 1) throw std::invalid_argument("0D or 1D target tensor expected, multi-target not supported");
  if (td == 1 && (input1.dim() != 2 || input2.dim() != 2))
    throw std::invalid_argument("1D target tensor expects 2D input tensors, but found inputs with sizes " +
                                sizes_str(input1.sizes()) + " and " + sizes_str(input2.sizes()) + ".");
  if (td == 0 && (input1.dim() != 1 || input2.dim() != 1))
    throw std::invalid_argument("0D target tensor expects 1D input tensors, but found inputs with sizes " +
                                sizes_str(input1.sizes()) + " and " + sizes_str(input2.sizes()) + ".");
  constexpr double kEps = 1e-12;
  Tensor prod_sum = (input1 * input2).sum({td});
  Tensor mag1 = (input1 * input1).sum({td}) + kEps;
  Tensor mag2 = (input2 * input2).sum({td}) + kEps;
  Tensor cos = prod_sum / sqrt(mag1 * mag2);
  Tensor zero = zeros_like(cos);
  Tensor pos = rsub(cos, 1);
  Tensor neg = clamp_min(cos - options.margin(), 0);
  Tensor out = where(eq(target, 1), pos, zero) + where(eq(target, -1), neg, zero);
  return apply_reduction(out, options.reduction());
}

Tensor margin_ranking_loss(const Tensor& input1, const Tensor& input2, const Tensor& target,
                           const MarginRankingLossFuncOptions& options) {
  if (!input1.defined() || !input2.defined() || !target.defined())
    throw std::invalid_argument("[margin_ranking_loss] got an undefined tensor");
  if (input1.dim() != input2.dim() || input1.dim() != target.dim())
    throw std::invalid_argument("margin_ranking_loss : All input tensors should have same dimension but got sizes: "
                                "input1: " + torch_size_str(input1.sizes()) + ", input2: " +
                                torch_size_str(input2.sizes()) + ", target: " + torch_size_str(target.sizes()) + " ");
  Tensor out = clamp_min(-target * (input1 - input2) + options.margin(), 0);
  return apply_reduction(out, options.reduction());
}

Tensor triplet_margin_loss(const Tensor& anchor, const Tensor& positive, const Tensor& negative,
                           const TripletMarginLossFuncOptions& options) {
  if (!anchor.defined() || !positive.defined() || !negative.defined())
    throw std::invalid_argument("[triplet_margin_loss] got an undefined tensor");
  const int64_t a = anchor.dim(), p = positive.dim(), n = negative.dim();
  if (a != p || p != n)
    throw std::invalid_argument("The anchor, positive, and negative tensors are expected to have the same number of "
                                "dimensions, but got: anchor " + std::to_string(a) + "D, positive " +
                                std::to_string(p) + "D, and negative " + std::to_string(n) + "D inputs");
  // PyTorch's pairwise_distance: ||x1 - x2 + eps||_p over the last dim of the broadcast shape
  auto dist = [&](const Tensor& x1, const Tensor& x2) {
    const int64_t last = std::max(x1.dim(), x2.dim()) - 1;
    return norm(x1 - x2 + options.eps(), options.p(), {last}, false);
  };
  Tensor d_pos = dist(anchor, positive), d_neg = dist(anchor, negative);
  if (options.swap()) d_neg = minimum(d_neg, dist(positive, negative));
  Tensor out = clamp_min(d_pos + options.margin() - d_neg, 0);
  return apply_reduction(out, options.reduction());
}

}  // namespace functional
}  // namespace troupe::nn
