// RNN, LSTM, GRU and their cells (torch/nn/modules/rnn.py of PyTorch 1.13): options checks, weights,
// initialisation, printing, and rnn_layer, one recorded op per layer and direction.
//
// rnn_layer runs the steps of one direction over "packed" rows: step t uses rows off[t] .. off[t] + bs[t]
// of x (N, in), and the state buffers (B, H) are updated in their first bs[t] rows (batch sizes never
// increase along the sequence, so the rows still running are always a prefix). A padded (T, B, in) input
// is the case bs[t] = B. Forward: one GEMM x W_ih^T for all steps, then per step one GEMM h W_hh^T added
// into that step's rows and the fused pointwise kernel (rnn_kernels.h). Backward walks the steps in the
// opposite order, keeping the pre-activation gradients dG (N, G) of every step, and then forms
// dx = dG W_ih, dW_ih = dG^T x, dW_hh = dG^T h_prev with one GEMM each. Other devices and dtypes, and
// double backward, use rnn_layer_composite: the same maths from differentiable primitives.
#include <troupe/nn/modules/rnn.h>

#include <cmath>
#include <cstring>
#include <sstream>
#include <stdexcept>

#include <troupe/nn/functional/dropout.h>
#include <troupe/nn/init.h>
#include <troupe/nn/modules/rnn_kernels.h>
#include <troupe/tensor/autograd.h>
#include <troupe/tensor/backend.h>
#include <troupe/tensor/ops.h>
#include <troupe/tensor/warning.h>
#include <troupe/util/python_format.h>

namespace troupe::nn {

namespace {

enum class CellKind { Tanh, Relu, LSTM, GRU };

CellKind cell_kind(const std::string& mode) {
  if (mode == "RNN_TANH") return CellKind::Tanh;
  if (mode == "RNN_RELU") return CellKind::Relu;
  if (mode == "LSTM") return CellKind::LSTM;
  if (mode == "GRU") return CellKind::GRU;
  throw std::invalid_argument("Unrecognized RNN mode: " + mode);
}

int64_t gates_of(CellKind k) { return k == CellKind::LSTM ? 4 : k == CellKind::GRU ? 3 : 1; }

/// The weights of one layer and direction (b_*, w_hr may be undefined).
struct LayerWeights {
  Tensor w_ih, w_hh, b_ih, b_hh, w_hr;
};

/// The steps of one direction: batch sizes and first rows, in the order they run.
struct StepPlan {
  std::vector<int64_t> bs, off, order;
  int64_t rows = 0;
};

StepPlan make_plan(const std::vector<int64_t>& batch_sizes, bool reverse) {
  StepPlan p;
  p.bs = batch_sizes;
  for (int64_t b : batch_sizes) {
    p.off.push_back(p.rows);
    p.rows += b;
  }
  const int64_t T = static_cast<int64_t>(batch_sizes.size());
  for (int64_t i = 0; i < T; ++i) p.order.push_back(reverse ? T - 1 - i : i);
  return p;
}

/// state with its first b rows replaced by `head` (differentiable).
Tensor replace_head(const Tensor& state, const Tensor& head) {
  const int64_t B = state.size(0), b = head.size(0);
  return b == B ? head : cat({head, state.narrow(0, b, B - b)}, 0);
}

// ------------------------------------------------------------------ composite form

/// rnn_layer from differentiable primitives: returns {out (N, P), h_n (B, P), c_n (B, H) or undefined}.
std::vector<Tensor> rnn_layer_composite(CellKind kind, const Tensor& x, const Tensor& h0, const Tensor& c0,
                                        const LayerWeights& w, const StepPlan& plan) {
  const Tensor xp = linear(x, w.w_ih, w.b_ih);  // (N, G)
  std::vector<Tensor> outs(plan.bs.size());
  Tensor h = h0, c = c0;
  for (int64_t t : plan.order) {
    const int64_t b = plan.bs[static_cast<size_t>(t)];
    const Tensor hp = h.narrow(0, 0, b);
    const Tensor gx = xp.narrow(0, plan.off[static_cast<size_t>(t)], b);
    const Tensor gh = linear(hp, w.w_hh, w.b_hh);
    Tensor hn;
    switch (kind) {
      case CellKind::Tanh: hn = tanh(gx + gh); break;
      case CellKind::Relu: hn = relu(gx + gh); break;
      case CellKind::LSTM: {
        auto g = chunk(gx + gh, 4, 1);
        const Tensor cn = sigmoid(g[1]) * c.narrow(0, 0, b) + sigmoid(g[0]) * tanh(g[2]);
        hn = sigmoid(g[3]) * tanh(cn);
        if (w.w_hr.defined()) hn = matmul(hn, w.w_hr.t());
        c = replace_head(c, cn);
        break;
      }
      case CellKind::GRU: {
        auto a = chunk(gx, 3, 1), bh = chunk(gh, 3, 1);
        const Tensor r = sigmoid(a[0] + bh[0]), z = sigmoid(a[1] + bh[1]);
        const Tensor n = tanh(a[2] + r * bh[2]);
        hn = n + z * (hp - n);
        break;
      }
    }
    outs[static_cast<size_t>(t)] = hn;
    h = replace_head(h, hn);
  }
  return {cat(outs, 0), h, kind == CellKind::LSTM ? c : Tensor()};
}

// ------------------------------------------------------------------ fused form (CPU, float32 / float64)

/// A contiguous copy detached from the graph.
Tensor raw_copy(const Tensor& t) { return t.detach().contiguous().clone(); }

/// C = alpha * A @ B + beta * C through the backend (C contiguous; A, B any strides); no autograd.
void gemm(const Tensor& c, const Tensor& a, const Tensor& b, double beta) {
  if (c.numel() == 0) return;
  backend(c).gemm(c, a, b, 1.0, beta);
}

/// What forward keeps for backward (internal buffers, none of them requires grad).
struct LayerSaved {
  Tensor act;     // (N, G): gate activations (the outputs for RNN)
  Tensor hprev;   // (N, P): h_{t-1} of every row
  Tensor cprev;   // (N, H): c_{t-1} (LSTM)
  Tensor call;    // (N, H): c_t (LSTM)
  Tensor hpre;    // (N, H): o * tanh(c_t) before the projection (LSTM with proj_size)
  Tensor gh;      // (N, G): h W_hh^T + b_hh (GRU)
  Tensor out;     // (N, P)
};

template <class T>
std::vector<Tensor> fused_forward(CellKind kind, const Tensor& x_in, const Tensor& h0, const Tensor& c0,
                                  const LayerWeights& w, const StepPlan& plan, LayerSaved& s) {
  NoGradGuard no_grad;
  const int64_t N = plan.rows, B = h0.size(0), P = h0.size(1);
  const int64_t G = w.w_hh.size(0), H = G / gates_of(kind);
  const auto opts = x_in.options();
  const Tensor x = x_in.detach();
  const Tensor w_hh_t = w.w_hh.detach().t();
  // the input projection of all steps, with b_hh folded in where it adds outside the gates
  Tensor bias;
  if (w.b_ih.defined()) bias = (kind == CellKind::GRU) ? w.b_ih.detach() : w.b_ih.detach() + w.b_hh.detach();
  Tensor xp = linear(x, w.w_ih.detach(), bias).contiguous();  // (N, G)
  if (!xp.is_contiguous() || xp.is_same(x)) xp = xp.clone();
  Tensor hbuf = raw_copy(h0);
  Tensor cbuf = kind == CellKind::LSTM ? raw_copy(c0) : Tensor();
  s.out = empty({N, P}, opts);
  s.hprev = empty({N, P}, opts);
  const bool proj = w.w_hr.defined();
  if (kind == CellKind::LSTM) {
    s.cprev = empty({N, H}, opts);
    s.call = empty({N, H}, opts);
    if (proj) s.hpre = empty({N, H}, opts);
  }
  if (kind == CellKind::GRU) s.gh = empty({N, G}, opts);
  Tensor b_hh = w.b_hh.defined() ? w.b_hh.detach().contiguous() : Tensor();
  const Tensor w_hr_t = proj ? w.w_hr.detach().t() : Tensor();

  T* xpp = xp.data_ptr<T>();
  T* hb = hbuf.data_ptr<T>();
  T* outp = s.out.data_ptr<T>();
  T* hprevp = s.hprev.data_ptr<T>();
  for (int64_t t : plan.order) {
    const int64_t b = plan.bs[static_cast<size_t>(t)], o = plan.off[static_cast<size_t>(t)];
    if (b == 0) continue;
    std::memcpy(hprevp + o * P, hb, static_cast<size_t>(b * P) * sizeof(T));
    const Tensor hp = hbuf.narrow(0, 0, b);
    const Tensor gx = xp.narrow(0, o, b);
    switch (kind) {
      case CellKind::Tanh:
      case CellKind::Relu:
        gemm(gx, hp, w_hh_t, 1.0);
        rnn_detail::rnn_forward_rows<T>(b * H, kind == CellKind::Relu, xpp + o * G, outp + o * P);
        break;
      case CellKind::LSTM: {
        gemm(gx, hp, w_hh_t, 1.0);
        T* hpre = proj ? s.hpre.data_ptr<T>() + o * H : outp + o * P;
        rnn_detail::lstm_forward_rows<T>(b, H, xpp + o * G, cbuf.data_ptr<T>(), s.cprev.data_ptr<T>() + o * H,
                                         s.call.data_ptr<T>() + o * H, hpre);
        if (proj) gemm(s.out.narrow(0, o, b), s.hpre.narrow(0, o, b), w_hr_t, 0.0);
        break;
      }
      case CellKind::GRU: {
        Tensor gh = s.gh.narrow(0, o, b);
        if (b_hh.defined()) {
          gh.copy_(b_hh.expand({b, G}));
          gemm(gh, hp, w_hh_t, 1.0);
        } else {
          gemm(gh, hp, w_hh_t, 0.0);
        }
        rnn_detail::gru_forward_rows<T>(b, H, xpp + o * G, s.gh.data_ptr<T>() + o * G, hb, outp + o * P);
        break;
      }
    }
    std::memcpy(hb, outp + o * P, static_cast<size_t>(b * P) * sizeof(T));
  }
  s.act = xp;
  (void)B;
  // the output is returned as an alias: the recorded op's closure keeps s.out, and the output gets that
  // op as its grad_fn (the same TensorImpl in both would be a reference cycle)
  return {s.out.detach(), hbuf, cbuf};
}

/// Gradients of (x, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr) (undefined where the input is) from those of
/// (out, h_n, c_n).
template <class T>
std::vector<Tensor> fused_backward(CellKind kind, const Tensor& x, const LayerWeights& w, const StepPlan& plan,
                                   const LayerSaved& s, const Tensor& d_out_in, const Tensor& d_hn,
                                   const Tensor& d_cn) {
  NoGradGuard no_grad;
  const int64_t N = plan.rows, P = s.out.size(1);
  const int64_t G = w.w_hh.size(0), H = G / gates_of(kind);
  const auto opts = s.out.options();
  const bool proj = w.w_hr.defined();
  const Tensor d_out = d_out_in.contiguous();
  Tensor dh = raw_copy(d_hn);  // (B, P): the gradient of the state rows
  Tensor dc = kind == CellKind::LSTM ? raw_copy(d_cn) : Tensor();
  Tensor dG = empty({N, G}, opts);
  Tensor dGh = kind == CellKind::GRU ? empty({N, G}, opts) : dG;
  Tensor dht_all = proj ? empty({N, P}, opts) : Tensor();  // dh_t of every row, for dW_hr
  Tensor dhpre = proj ? empty({d_hn.size(0), H}, opts) : Tensor();
  const Tensor w_hh = w.w_hh.detach();
  const Tensor w_hr = proj ? w.w_hr.detach() : Tensor();
  T* dhp = dh.data_ptr<T>();
  const T* doutp = d_out.data_ptr<T>();
  T* dGp = dG.data_ptr<T>();
  for (auto it = plan.order.rbegin(); it != plan.order.rend(); ++it) {
    const int64_t t = *it;
    const int64_t b = plan.bs[static_cast<size_t>(t)], o = plan.off[static_cast<size_t>(t)];
    if (b == 0) continue;
    for (int64_t j = 0; j < b * P; ++j) dhp[j] += doutp[o * P + j];
    const Tensor dh_rows = dh.narrow(0, 0, b);
    switch (kind) {
      case CellKind::Tanh:
      case CellKind::Relu:
        rnn_detail::rnn_backward_rows<T>(b * H, kind == CellKind::Relu, dhp, s.out.data_ptr<T>() + o * P,
                                         dGp + o * G);
        gemm(dh_rows, dG.narrow(0, o, b), w_hh, 0.0);
        break;
      case CellKind::LSTM: {
        const T* dpre = dhp;
        if (proj) {
          std::memcpy(dht_all.data_ptr<T>() + o * P, dhp, static_cast<size_t>(b * P) * sizeof(T));
          gemm(dhpre.narrow(0, 0, b), dh_rows, w_hr, 0.0);
          dpre = dhpre.data_ptr<T>();
        }
        rnn_detail::lstm_backward_rows<T>(b, H, dpre, dc.data_ptr<T>(), s.act.data_ptr<T>() + o * G,
                                          s.cprev.data_ptr<T>() + o * H, s.call.data_ptr<T>() + o * H, dGp + o * G);
        gemm(dh_rows, dG.narrow(0, o, b), w_hh, 0.0);
        break;
      }
      case CellKind::GRU:
        rnn_detail::gru_backward_rows<T>(b, H, dhp, s.act.data_ptr<T>() + o * G, s.gh.data_ptr<T>() + o * G,
                                         s.hprev.data_ptr<T>() + o * P, dGp + o * G, dGh.data_ptr<T>() + o * G);
        gemm(dh_rows, dGh.narrow(0, o, b), w_hh, 1.0);
        break;
    }
  }
  std::vector<Tensor> g(8);
  const Tensor xd = x.detach();
  if (x.requires_grad()) g[0] = mm(dG, w.w_ih.detach());
  g[1] = dh;
  g[2] = dc;
  g[3] = mm(dG.t(), xd);
  g[4] = mm(dGh.t(), s.hprev);
  if (w.b_ih.defined()) {
    g[5] = dG.sum({0});
    g[6] = kind == CellKind::GRU ? dGh.sum({0}) : g[5].clone();
  }
  if (proj) g[7] = mm(dht_all.t(), s.hpre);
  return g;
}

/// One layer and direction: {out (N, P), h_n (B, P), c_n (B, H) or undefined}, recorded as one op.
std::vector<Tensor> rnn_layer(CellKind kind, const Tensor& x, const Tensor& h0, const Tensor& c0,
                              const LayerWeights& w, const StepPlan& plan) {
  const ScalarType dt = x.dtype();
  const bool fusable = x.is_cpu() && (dt == kFloat32 || dt == kFloat64) && h0.dtype() == dt &&
                       w.w_ih.dtype() == dt && w.w_hh.dtype() == dt && (!c0.defined() || c0.dtype() == dt);
  if (!fusable) return rnn_layer_composite(kind, x, h0, c0, w, plan);
  // the inputs in a fixed order; undefined ones are left out of the recorded op
  const std::vector<Tensor> all_inputs = {x, h0, c0, w.w_ih, w.w_hh, w.b_ih, w.b_hh, w.w_hr};
  auto s = std::make_shared<LayerSaved>();
  std::vector<Tensor> outs = dt == kFloat32 ? fused_forward<float>(kind, x, h0, c0, w, plan, *s)
                                            : fused_forward<double>(kind, x, h0, c0, w, plan, *s);
  std::vector<Tensor> inputs;
  std::vector<size_t> slot;
  for (size_t i = 0; i < all_inputs.size(); ++i)
    if (all_inputs[i].defined()) {
      inputs.push_back(all_inputs[i]);
      slot.push_back(i);
    }
  if (!autograd::any_requires_grad(inputs)) return outs;
  std::vector<autograd::SavedVariable> saved;
  for (const Tensor& t : inputs) saved.emplace_back(t, false);
  std::vector<Tensor> recorded = {outs[0], outs[1]};
  if (kind == CellKind::LSTM) recorded.push_back(outs[2]);
  const char* name = kind == CellKind::LSTM ? "LstmLayerBackward"
                     : kind == CellKind::GRU ? "GruLayerBackward"
                                             : "RnnLayerBackward";
  autograd::record(
      name, inputs, recorded,
      [kind, plan, s, saved, slot](const autograd::variable_list& grads) mutable {
        std::vector<Tensor> in(8);
        for (size_t i = 0; i < saved.size(); ++i) in[slot[i]] = saved[i].unpack();
        const LayerWeights lw{in[3], in[4], in[5], in[6], in[7]};
        std::vector<Tensor> g;
        if (autograd::GradMode::is_enabled()) {
          // create_graph: differentiate the composite form, whose gradients are differentiable
          std::vector<Tensor> fwd = rnn_layer_composite(kind, in[0], in[1], in[2], lw, plan);
          std::vector<Tensor> outs_c = {fwd[0], fwd[1]}, gs = {grads[0], grads[1]};
          if (kind == CellKind::LSTM) {
            outs_c.push_back(fwd[2]);
            gs.push_back(grads[2]);
          }
          std::vector<Tensor> want;
          std::vector<size_t> want_slot;
          for (size_t i : slot)
            if (in[i].requires_grad()) {
              want.push_back(in[i]);
              want_slot.push_back(i);
            }
          std::vector<Tensor> r = autograd::grad(outs_c, want, gs, true, true, true);
          g.assign(8, Tensor());
          for (size_t i = 0; i < want_slot.size(); ++i) g[want_slot[i]] = r[i];
        } else {
          const Tensor dcn = kind == CellKind::LSTM ? grads[2] : Tensor();
          g = in[0].dtype() == kFloat32 ? fused_backward<float>(kind, in[0], lw, plan, *s, grads[0], grads[1], dcn)
                                        : fused_backward<double>(kind, in[0], lw, plan, *s, grads[0], grads[1], dcn);
        }
        autograd::variable_list result;
        for (size_t i : slot) {
          const bool needed = in[i].requires_grad();
          result.push_back(needed ? g[i] : Tensor());
        }
        return result;
      });
  return outs;
}

std::string shape_tuple(const std::vector<int64_t>& s) { return util::py_tuple(s); }

}  // namespace

// ================================================================== RNNImplBase

namespace detail {

RNNImplBase::RNNImplBase(RNNOptionsBase options_base_) : options_base(std::move(options_base_)) {}

int64_t RNNImplBase::gate_count() const { return gates_of(cell_kind(options_base.mode())); }

void RNNImplBase::register_weights() {
  const auto& o = options_base;
  cell_kind(o.mode());
  if (o.dropout() < 0 || o.dropout() > 1)
    throw std::invalid_argument(
        "dropout should be a number in range [0, 1] representing the probability of an element being zeroed");
  if (o.dropout() > 0 && o.num_layers() == 1)
    TROUPE_WARN("dropout option adds dropout after all but last recurrent layer, so non-zero dropout expects "
                "num_layers greater than 1, but got dropout=",
                util::py_float(o.dropout()), " and num_layers=", o.num_layers());
  if (o.proj_size() < 0)
    throw std::invalid_argument("proj_size should be a positive integer or zero to disable projections");
  if (o.proj_size() >= o.hidden_size()) throw std::invalid_argument("proj_size has to be smaller than hidden_size");
  if (o.num_layers() < 1)
    throw std::invalid_argument("[" + name() + "] num_layers must be at least 1, got " + std::to_string(o.num_layers()));
  if (o.input_size() < 0 || o.hidden_size() < 0)
    throw std::invalid_argument("[" + name() + "] input_size and hidden_size must be non-negative, got input_size=" +
                                std::to_string(o.input_size()) + ", hidden_size=" + std::to_string(o.hidden_size()));
  TensorOptions topts = TensorOptions().device(o.device());
  if (o.dtype()) topts = topts.dtype(*o.dtype());
  const int64_t D = o.bidirectional() ? 2 : 1;
  const int64_t gate_size = gate_count() * o.hidden_size();
  const int64_t real_hidden = o.proj_size() > 0 ? o.proj_size() : o.hidden_size();
  flat_weights_names_.clear();
  for (int64_t layer = 0; layer < o.num_layers(); ++layer) {
    for (int64_t dir = 0; dir < D; ++dir) {
      const int64_t in = layer == 0 ? o.input_size() : real_hidden * D;
      const std::string sfx = std::to_string(layer) + (dir == 1 ? "_reverse" : "");
      auto add = [&](const std::string& n, std::vector<int64_t> shape) {
        register_parameter(n + sfx, empty(shape, topts));
        flat_weights_names_.push_back(n + sfx);
      };
      add("weight_ih_l", {gate_size, in});
      add("weight_hh_l", {gate_size, real_hidden});
      if (o.bias()) {
        add("bias_ih_l", {gate_size});
        add("bias_hh_l", {gate_size});
      }
      if (o.proj_size() > 0) add("weight_hr_l", {o.proj_size(), o.hidden_size()});
    }
  }
  reset_parameters();
}

void RNNImplBase::reset_parameters() {
  if (initialization_skipped()) return;
  const double stdv = options_base.hidden_size() > 0 ? 1.0 / std::sqrt(static_cast<double>(options_base.hidden_size())) : 0;
  for (Tensor& p : parameters()) init::uniform_(p, -stdv, stdv);
}

std::vector<Tensor> RNNImplBase::all_weights() const {
  std::vector<Tensor> out;
  for (const auto& n : flat_weights_names_) out.push_back(parameters_dict()[n]);
  return out;
}

std::string RNNImplBase::extra_repr() const {
  const auto& o = options_base;
  std::string s = std::to_string(o.input_size()) + ", " + std::to_string(o.hidden_size());
  if (o.proj_size() != 0) s += ", proj_size=" + std::to_string(o.proj_size());
  if (o.num_layers() != 1) s += ", num_layers=" + std::to_string(o.num_layers());
  if (!o.bias()) s += ", bias=False";
  if (o.batch_first()) s += ", batch_first=True";
  if (o.dropout() != 0) s += ", dropout=" + util::py_float(o.dropout());
  if (o.bidirectional()) s += ", bidirectional=True";
  return s;
}

void RNNImplBase::check_input(const Tensor& input, bool packed) const {
  const int64_t expected = packed ? 2 : 3;
  if (input.dim() != expected)
    throw std::invalid_argument("input must have " + std::to_string(expected) + " dimensions, got " +
                                std::to_string(input.dim()));
  if (input.size(-1) != options_base.input_size())
    throw std::invalid_argument("input.size(-1) must be equal to input_size. Expected " +
                                std::to_string(options_base.input_size()) + ", got " + std::to_string(input.size(-1)));
}

void RNNImplBase::check_hidden_size(const Tensor& hx, const std::vector<int64_t>& expected,
                                    const std::string& what) const {
  if (hx.sizes().vec() != expected)
    throw std::invalid_argument("Expected " + what + " size " + shape_tuple(expected) + ", got " +
                                list_str(hx.sizes()));
}

std::tuple<Tensor, Tensor, Tensor> RNNImplBase::run(const Tensor& input, const std::vector<int64_t>& batch_sizes,
                                                     const Tensor& hx, const Tensor& cx) {
  const auto& o = options_base;
  const CellKind kind = cell_kind(o.mode());
  const int64_t D = o.bidirectional() ? 2 : 1;
  const auto params = parameters_dict();
  Tensor layer_in = batch_sizes.empty() ? input.reshape({-1, input.size(-1)}) : input;
  std::vector<int64_t> bs = batch_sizes;
  if (bs.empty()) bs.assign(static_cast<size_t>(input.size(0)), input.size(1));
  std::vector<Tensor> h_n, c_n;
  for (int64_t layer = 0; layer < o.num_layers(); ++layer) {
    std::vector<Tensor> dir_out;
    for (int64_t dir = 0; dir < D; ++dir) {
      const std::string sfx = std::to_string(layer) + (dir == 1 ? "_reverse" : "");
      auto get = [&](const std::string& n) -> Tensor {
        const Tensor* p = params.find(n + sfx);
        return p ? *p : Tensor();
      };
      const LayerWeights w{get("weight_ih_l"), get("weight_hh_l"), get("bias_ih_l"), get("bias_hh_l"),
                           get("weight_hr_l")};
      const int64_t k = layer * D + dir;
      const Tensor h0 = hx.select(0, k);
      const Tensor c0 = cx.defined() ? cx.select(0, k) : Tensor();
      auto r = rnn_layer(kind, layer_in, h0, c0, w, make_plan(bs, dir == 1));
      dir_out.push_back(r[0]);
      h_n.push_back(r[1]);
      if (r[2].defined()) c_n.push_back(r[2]);
    }
    layer_in = D == 1 ? dir_out[0] : cat(dir_out, 1);
    if (o.dropout() > 0 && is_training() && layer + 1 < o.num_layers())
      layer_in = functional::dropout(layer_in, functional::DropoutFuncOptions().p(o.dropout()).training(true));
  }
  Tensor out = layer_in;
  if (batch_sizes.empty()) out = out.view({input.size(0), input.size(1), out.size(-1)});
  return {out, stack(h_n, 0), c_n.empty() ? Tensor() : stack(c_n, 0)};
}

}  // namespace detail

// ================================================================== RNN, LSTM, GRU

namespace {

detail::RNNOptionsBase base_of(const RNNOptions& o) {
  const std::string& nl = o.nonlinearity();
  if (nl != "tanh" && nl != "relu") throw std::invalid_argument("Unknown nonlinearity '" + nl + "'. Select from 'tanh' or 'relu'.");
  return detail::RNNOptionsBase(nl == "tanh" ? "RNN_TANH" : "RNN_RELU", o.input_size(), o.hidden_size())
      .num_layers(o.num_layers())
      .bias(o.bias())
      .batch_first(o.batch_first())
      .dropout(o.dropout())
      .bidirectional(o.bidirectional())
      .device(o.device())
      .dtype(o.dtype());
}
detail::RNNOptionsBase base_of(const LSTMOptions& o) {
  return detail::RNNOptionsBase("LSTM", o.input_size(), o.hidden_size())
      .num_layers(o.num_layers())
      .bias(o.bias())
      .batch_first(o.batch_first())
      .dropout(o.dropout())
      .bidirectional(o.bidirectional())
      .proj_size(o.proj_size())
      .device(o.device())
      .dtype(o.dtype());
}
detail::RNNOptionsBase base_of(const GRUOptions& o) {
  return detail::RNNOptionsBase("GRU", o.input_size(), o.hidden_size())
      .num_layers(o.num_layers())
      .bias(o.bias())
      .batch_first(o.batch_first())
      .dropout(o.dropout())
      .bidirectional(o.bidirectional())
      .device(o.device())
      .dtype(o.dtype());
}

/// The padded input as (T, B, in), whether it was batched, and the batch size.
struct PreparedInput {
  Tensor x;
  bool batched;
};

PreparedInput prepare(const Tensor& input, bool batch_first, const char* cls) {
  if (input.dim() != 2 && input.dim() != 3)
    throw std::invalid_argument(std::string(cls) + ": Expected input to be 2D or 3D, got " +
                                std::to_string(input.dim()) + "D instead");
  const bool batched = input.dim() == 3;
  Tensor x = batched ? input : input.unsqueeze(batch_first ? 0 : 1);
  if (batch_first) x = x.transpose(0, 1);
  return {x.contiguous(), batched};
}

Tensor finish_output(Tensor out, bool batched, bool batch_first) {
  if (batch_first) out = out.transpose(0, 1);
  if (!batched) out = out.squeeze(batch_first ? 0 : 1);
  return out;
}

}  // namespace

RNNImpl::RNNImpl(const RNNOptions& options_) : Cloneable(base_of(options_)), options(options_) { reset(); }
void RNNImpl::reset() { register_weights(); }

std::tuple<Tensor, Tensor> RNNImpl::forward(const Tensor& input, Tensor hx) {
  auto [x, batched] = prepare(input, options.batch_first(), "RNN");
  const int64_t D = options.bidirectional() ? 2 : 1;
  std::vector<int64_t> expected = {options.num_layers() * D, x.size(1), options.hidden_size()};
  if (!hx.defined()) {
    hx = zeros(expected, x.options());
  } else if (batched && hx.dim() != 3) {
    throw std::invalid_argument("For batched 3-D input, hx should also be 3-D but got " + std::to_string(hx.dim()) +
                                "-D tensor");
  } else if (!batched) {
    if (hx.dim() != 2)
      throw std::invalid_argument("For unbatched 2-D input, hx should also be 2-D but got " +
                                  std::to_string(hx.dim()) + "-D tensor");
    hx = hx.unsqueeze(1);
  }
  check_input(x, false);
  check_hidden_size(hx, expected, "hidden");
  auto [out, h_n, c_n] = run(x, {}, hx, Tensor());
  (void)c_n;
  return {finish_output(out, batched, options.batch_first()), batched ? h_n : h_n.squeeze(1)};
}

namespace {
Tensor permute_hidden(const Tensor& hx, const Tensor& permutation) {
  return permutation.defined() ? hx.index_select(1, permutation) : hx;
}
}  // namespace

std::tuple<utils::rnn::PackedSequence, Tensor> RNNImpl::forward_with_packed_input(
    const utils::rnn::PackedSequence& packed_input, Tensor hx) {
  const Tensor& data = packed_input.data();
  std::vector<int64_t> bs = packed_input.batch_sizes().to_vector<int64_t>();
  const int64_t D = options.bidirectional() ? 2 : 1;
  const int64_t B = bs.empty() ? 0 : bs[0];
  std::vector<int64_t> expected = {options.num_layers() * D, B, options.hidden_size()};
  hx = hx.defined() ? permute_hidden(hx, packed_input.sorted_indices()) : zeros(expected, data.options());
  check_input(data, true);
  check_hidden_size(hx, expected, "hidden");
  auto [out, h_n, c_n] = run(data, bs, hx, Tensor());
  (void)c_n;
  return {utils::rnn::PackedSequence(out, packed_input.batch_sizes(), packed_input.sorted_indices(),
                                     packed_input.unsorted_indices()),
          permute_hidden(h_n, packed_input.unsorted_indices())};
}

LSTMImpl::LSTMImpl(const LSTMOptions& options_) : Cloneable(base_of(options_)), options(options_) { reset(); }
void LSTMImpl::reset() { register_weights(); }

namespace {
std::pair<std::vector<int64_t>, std::vector<int64_t>> lstm_sizes(const LSTMOptions& o, int64_t B) {
  const int64_t D = o.bidirectional() ? 2 : 1;
  const int64_t real = o.proj_size() > 0 ? o.proj_size() : o.hidden_size();
  return {{o.num_layers() * D, B, real}, {o.num_layers() * D, B, o.hidden_size()}};
}
}  // namespace

std::tuple<Tensor, std::tuple<Tensor, Tensor>> LSTMImpl::forward(const Tensor& input,
                                                                 std::optional<std::tuple<Tensor, Tensor>> hx_opt) {
  auto [x, batched] = prepare(input, options.batch_first(), "LSTM");
  auto [hs, cs] = lstm_sizes(options, x.size(1));
  Tensor h0, c0;
  if (!hx_opt) {
    h0 = zeros(hs, x.options());
    c0 = zeros(cs, x.options());
  } else {
    std::tie(h0, c0) = *hx_opt;
    if (batched && (h0.dim() != 3 || c0.dim() != 3))
      throw std::invalid_argument("For batched 3-D input, hx and cx should also be 3-D but got (" +
                                  std::to_string(h0.dim()) + "-D, " + std::to_string(c0.dim()) + "-D) tensors");
    if (!batched) {
      if (h0.dim() != 2 || c0.dim() != 2)
        throw std::invalid_argument("For unbatched 2-D input, hx and cx should also be 2-D but got (" +
                                    std::to_string(h0.dim()) + "-D, " + std::to_string(c0.dim()) + "-D) tensors");
      h0 = h0.unsqueeze(1);
      c0 = c0.unsqueeze(1);
    }
  }
  check_input(x, false);
  check_hidden_size(h0, hs, "hidden[0]");
  check_hidden_size(c0, cs, "hidden[1]");
  auto [out, h_n, c_n] = run(x, {}, h0, c0);
  if (!batched) {
    h_n = h_n.squeeze(1);
    c_n = c_n.squeeze(1);
  }
  return {finish_output(out, batched, options.batch_first()), {h_n, c_n}};
}

std::tuple<utils::rnn::PackedSequence, std::tuple<Tensor, Tensor>> LSTMImpl::forward_with_packed_input(
    const utils::rnn::PackedSequence& packed_input, std::optional<std::tuple<Tensor, Tensor>> hx_opt) {
  const Tensor& data = packed_input.data();
  std::vector<int64_t> bs = packed_input.batch_sizes().to_vector<int64_t>();
  auto [hs, cs] = lstm_sizes(options, bs.empty() ? 0 : bs[0]);
  Tensor h0, c0;
  if (!hx_opt) {
    h0 = zeros(hs, data.options());
    c0 = zeros(cs, data.options());
  } else {
    h0 = permute_hidden(std::get<0>(*hx_opt), packed_input.sorted_indices());
    c0 = permute_hidden(std::get<1>(*hx_opt), packed_input.sorted_indices());
  }
  check_input(data, true);
  check_hidden_size(h0, hs, "hidden[0]");
  check_hidden_size(c0, cs, "hidden[1]");
  auto [out, h_n, c_n] = run(data, bs, h0, c0);
  return {utils::rnn::PackedSequence(out, packed_input.batch_sizes(), packed_input.sorted_indices(),
                                     packed_input.unsorted_indices()),
          {permute_hidden(h_n, packed_input.unsorted_indices()), permute_hidden(c_n, packed_input.unsorted_indices())}};
}

GRUImpl::GRUImpl(const GRUOptions& options_) : Cloneable(base_of(options_)), options(options_) { reset(); }
void GRUImpl::reset() { register_weights(); }

std::tuple<Tensor, Tensor> GRUImpl::forward(const Tensor& input, Tensor hx) {
  auto [x, batched] = prepare(input, options.batch_first(), "GRU");
  const int64_t D = options.bidirectional() ? 2 : 1;
  std::vector<int64_t> expected = {options.num_layers() * D, x.size(1), options.hidden_size()};
  if (!hx.defined()) {
    hx = zeros(expected, x.options());
  } else if (batched && hx.dim() != 3) {
    throw std::invalid_argument("For batched 3-D input, hx should also be 3-D but got " + std::to_string(hx.dim()) +
                                "-D tensor");
  } else if (!batched) {
    if (hx.dim() != 2)
      throw std::invalid_argument("For unbatched 2-D input, hx should also be 2-D but got " +
                                  std::to_string(hx.dim()) + "-D tensor");
    hx = hx.unsqueeze(1);
  }
  check_input(x, false);
  check_hidden_size(hx, expected, "hidden");
  auto [out, h_n, c_n] = run(x, {}, hx, Tensor());
  (void)c_n;
  return {finish_output(out, batched, options.batch_first()), batched ? h_n : h_n.squeeze(1)};
}

std::tuple<utils::rnn::PackedSequence, Tensor> GRUImpl::forward_with_packed_input(
    const utils::rnn::PackedSequence& packed_input, Tensor hx) {
  const Tensor& data = packed_input.data();
  std::vector<int64_t> bs = packed_input.batch_sizes().to_vector<int64_t>();
  const int64_t D = options.bidirectional() ? 2 : 1;
  std::vector<int64_t> expected = {options.num_layers() * D, bs.empty() ? 0 : bs[0], options.hidden_size()};
  hx = hx.defined() ? permute_hidden(hx, packed_input.sorted_indices()) : zeros(expected, data.options());
  check_input(data, true);
  check_hidden_size(hx, expected, "hidden");
  auto [out, h_n, c_n] = run(data, bs, hx, Tensor());
  (void)c_n;
  return {utils::rnn::PackedSequence(out, packed_input.batch_sizes(), packed_input.sorted_indices(),
                                     packed_input.unsorted_indices()),
          permute_hidden(h_n, packed_input.unsorted_indices())};
}

// ================================================================== cells

namespace detail {

RNNCellImplBase::RNNCellImplBase(int64_t input_size, int64_t hidden_size, bool bias, int64_t num_chunks,
                                 Device device, std::optional<ScalarType> dtype)
    : input_size_(input_size),
      hidden_size_(hidden_size),
      num_chunks_(num_chunks),
      bias_(bias),
      device_(device),
      dtype_(dtype) {}

void RNNCellImplBase::register_weights() {
  TensorOptions topts = TensorOptions().device(device_);
  if (dtype_) topts = topts.dtype(*dtype_);
  weight_ih = register_parameter("weight_ih", empty({num_chunks_ * hidden_size_, input_size_}, topts));
  weight_hh = register_parameter("weight_hh", empty({num_chunks_ * hidden_size_, hidden_size_}, topts));
  bias_ih = register_parameter("bias_ih", bias_ ? empty({num_chunks_ * hidden_size_}, topts) : Tensor());
  bias_hh = register_parameter("bias_hh", bias_ ? empty({num_chunks_ * hidden_size_}, topts) : Tensor());
  reset_parameters();
}

void RNNCellImplBase::reset_parameters() {
  if (initialization_skipped()) return;
  const double stdv = hidden_size_ > 0 ? 1.0 / std::sqrt(static_cast<double>(hidden_size_)) : 0;
  for (Tensor& p : parameters()) init::uniform_(p, -stdv, stdv);
}

std::string RNNCellImplBase::extra_repr() const {
  std::string s = std::to_string(input_size_) + ", " + std::to_string(hidden_size_);
  if (!bias_) s += ", bias=False";
  const std::string nl = nonlinearity_str();
  if (!nl.empty() && nl != "tanh") s += ", nonlinearity=" + nl;
  return s;
}

void RNNCellImplBase::check_forward_input(const Tensor& input, const char* cls) const {
  if (input.dim() != 1 && input.dim() != 2)
    throw std::invalid_argument(std::string(cls) + ": Expected input to be 1-D or 2-D but received " +
                                std::to_string(input.dim()) + "-D tensor");
  if (input.size(-1) != input_size_)
    throw std::invalid_argument("input has inconsistent input_size: got " + std::to_string(input.size(-1)) +
                                " expected " + std::to_string(input_size_));
}

}  // namespace detail

namespace {
/// hx as (B, H): zeros when undefined, a batch of one for unbatched input; checks its shape. label is
/// "" or "[0]" / "[1]" (LSTMCell's h and c), as in PyTorch's messages.
Tensor cell_state(Tensor hx, const Tensor& input, int64_t hidden, const std::string& label) {
  const bool batched = input.dim() == 2;
  const int64_t B = batched ? input.size(0) : 1;
  if (!hx.defined()) return zeros({B, hidden}, input.options());
  if (hx.dim() != input.dim())
    throw std::invalid_argument("hidden" + label + " must have " + std::to_string(input.dim()) +
                                " dimensions as input does, got " + std::to_string(hx.dim()));
  if (!batched) hx = hx.unsqueeze(0);
  if (hx.size(0) != B)
    throw std::invalid_argument("Input batch size " + std::to_string(B) + " doesn't match hidden" + label +
                                " batch size " + std::to_string(hx.size(0)));
  if (hx.size(1) != hidden)
    throw std::invalid_argument("hidden" + label + " has inconsistent hidden_size: got " +
                                std::to_string(hx.size(1)) + ", expected " + std::to_string(hidden));
  return hx;
}

/// One step of any cell through rnn_layer (one step of B rows).
std::vector<Tensor> cell_step(CellKind kind, const Tensor& input, const Tensor& h, const Tensor& c,
                              const LayerWeights& w) {
  const Tensor x = input.dim() == 1 ? input.unsqueeze(0) : input;
  return rnn_layer(kind, x, h, c, w, make_plan({x.size(0)}, false));
}
}  // namespace

RNNCellImpl::RNNCellImpl(const RNNCellOptions& options_)
    : Cloneable(options_.input_size(), options_.hidden_size(), options_.bias(), 1, options_.device(),
                options_.dtype()),
      options(options_) {
  reset();
}
void RNNCellImpl::reset() {
  const std::string& nl = options.nonlinearity();
  if (nl != "tanh" && nl != "relu") throw std::invalid_argument("Unknown nonlinearity: " + nl);
  register_weights();
}

Tensor RNNCellImpl::forward(const Tensor& input, Tensor hx) {
  check_forward_input(input, "RNNCell");
  const Tensor h = cell_state(hx, input, hidden_size_, "");
  auto r = cell_step(options.nonlinearity() == "relu" ? CellKind::Relu : CellKind::Tanh, input, h, Tensor(),
                     {weight_ih, weight_hh, bias_ih, bias_hh, Tensor()});
  return input.dim() == 1 ? r[0].squeeze(0) : r[0];
}

LSTMCellImpl::LSTMCellImpl(const LSTMCellOptions& options_)
    : Cloneable(options_.input_size(), options_.hidden_size(), options_.bias(), 4, options_.device(),
                options_.dtype()),
      options(options_) {
  reset();
}
void LSTMCellImpl::reset() { register_weights(); }

std::tuple<Tensor, Tensor> LSTMCellImpl::forward(const Tensor& input, std::optional<std::tuple<Tensor, Tensor>> hx_opt) {
  check_forward_input(input, "LSTMCell");
  Tensor h0, c0;
  if (hx_opt) std::tie(h0, c0) = *hx_opt;
  const Tensor h = cell_state(h0, input, hidden_size_, "[0]");
  const Tensor c = cell_state(c0, input, hidden_size_, "[1]");
  auto r = cell_step(CellKind::LSTM, input, h, c, {weight_ih, weight_hh, bias_ih, bias_hh, Tensor()});
  if (input.dim() == 1) return {r[1].squeeze(0), r[2].squeeze(0)};
  return {r[1], r[2]};
}

GRUCellImpl::GRUCellImpl(const GRUCellOptions& options_)
    : Cloneable(options_.input_size(), options_.hidden_size(), options_.bias(), 3, options_.device(),
                options_.dtype()),
      options(options_) {
  reset();
}
void GRUCellImpl::reset() { register_weights(); }

Tensor GRUCellImpl::forward(const Tensor& input, Tensor hx) {
  check_forward_input(input, "GRUCell");
  const Tensor h = cell_state(hx, input, hidden_size_, "");
  auto r = cell_step(CellKind::GRU, input, h, Tensor(), {weight_ih, weight_hh, bias_ih, bias_hh, Tensor()});
  return input.dim() == 1 ? r[0].squeeze(0) : r[0];
}

}  // namespace troupe::nn
