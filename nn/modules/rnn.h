// Recurrent layers (torch.nn.RNN, LSTM, GRU and the cells RNNCell, LSTMCell, GRUCell) with PyTorch's
// parameter names (weight_ih_l0, bias_hh_l1_reverse, weight_hr_l0, ...), default initialisation,
// printed forms and libtorch's forward signatures:
//
//   nn::LSTM lstm(nn::LSTMOptions(8, 16).num_layers(2).batch_first(true));
//   auto [out, state] = lstm(x);                 // out (B, T, 16); state = (h_n, c_n), each (2, B, 16)
//   auto [h_n, c_n] = state;
//   auto [packed_out, st] = lstm->forward_with_packed_input(nn::utils::rnn::pack_padded_sequence(x, len, true));
//
// Each layer and direction runs as one recorded op (rnn_layer in rnn.cpp): one GEMM projects the inputs
// of all steps, then each step does one GEMM with the hidden state and a fused pointwise kernel; backward
// collects the gate gradients of all steps and forms the weight gradients with one GEMM each.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include <troupe/nn/cloneable.h>
#include <troupe/nn/module.h>
#include <troupe/nn/options/rnn.h>
#include <troupe/nn/pimpl.h>
#include <troupe/nn/utils/rnn.h>
#include <troupe/util/options.h>

namespace troupe::nn {

namespace detail {

/// The options every recurrent layer has (libtorch's RNNOptionsBase); mode is "RNN_TANH", "RNN_RELU",
/// "LSTM" or "GRU".
struct RNNOptionsBase {
  RNNOptionsBase(std::string mode, int64_t input_size, int64_t hidden_size)
      : mode_(std::move(mode)), input_size_(input_size), hidden_size_(hidden_size) {}
  TROUPE_ARG(std::string, mode);
  TROUPE_ARG(int64_t, input_size);
  TROUPE_ARG(int64_t, hidden_size);
  TROUPE_ARG(int64_t, num_layers) = 1;
  TROUPE_ARG(bool, bias) = true;
  TROUPE_ARG(bool, batch_first) = false;
  TROUPE_ARG(double, dropout) = 0.0;
  TROUPE_ARG(bool, bidirectional) = false;
  TROUPE_ARG(int64_t, proj_size) = 0;
  TROUPE_ARG(Device, device) = Device(kCPU);
  TROUPE_ARG(std::optional<ScalarType>, dtype);
};

/// What RNN, LSTM and GRU share: the weights of every layer and direction, their initialisation,
/// the argument checks and the stacked run over layers and directions.
class RNNImplBase : public Module {
 public:
  explicit RNNImplBase(RNNOptionsBase options_base);

  /// Every weight ~ U(-1/sqrt(hidden_size), 1/sqrt(hidden_size)), in parameter order.
  void reset_parameters();
  /// The weights in PyTorch's _flat_weights order: per layer and direction w_ih, w_hh, [b_ih, b_hh], [w_hr].
  std::vector<Tensor> all_weights() const;
  /// The names of all_weights() ("weight_ih_l0", ..., "weight_hr_l1_reverse").
  const std::vector<std::string>& flat_weights_names() const { return flat_weights_names_; }
  std::string extra_repr() const override;

  RNNOptionsBase options_base;

 protected:
  /// Checks the options and registers the weights (uninitialised); called by each class's reset().
  void register_weights();
  /// The number of gates: 4 for LSTM, 3 for GRU, 1 for RNN.
  int64_t gate_count() const;
  /// Runs all layers and directions. input: (T, B, in) when batch_sizes is empty, else packed data
  /// (N, in) with these step batch sizes. hx (L*D, B, H_out) and cx (L*D, B, H) (LSTM only) are
  /// already in the packed (sorted) batch order. Returns (output, h_n, c_n), c_n undefined but for LSTM.
  std::tuple<Tensor, Tensor, Tensor> run(const Tensor& input, const std::vector<int64_t>& batch_sizes,
                                         const Tensor& hx, const Tensor& cx);
  /// Checks input dims and features; `packed`: input is packed data (2-D).
  void check_input(const Tensor& input, bool packed) const;
  /// Throws "Expected hidden size (..), got [..]" (msg with {expected} and {got}) when sizes differ.
  void check_hidden_size(const Tensor& hx, const std::vector<int64_t>& expected, const std::string& what) const;

  std::vector<std::string> flat_weights_names_;
};

}  // namespace detail

/// Elman RNN: h_t = tanh(W_ih x_t + b_ih + W_hh h_{t-1} + b_hh) (or relu), stacked num_layers deep.
class RNNImpl : public Cloneable<RNNImpl, detail::RNNImplBase> {
 public:
  explicit RNNImpl(const RNNOptions& options);
  RNNImpl(int64_t input_size, int64_t hidden_size) : RNNImpl(RNNOptions(input_size, hidden_size)) {}
  void reset() override;
  /// input (T, B, in) ((B, T, in) with batch_first, or unbatched (T, in)); hx (L*D, B, H) or undefined
  /// (zeros). Returns (output (T, B, D*H), h_n (L*D, B, H)).
  std::tuple<Tensor, Tensor> forward(const Tensor& input, Tensor hx = {});
  TROUPE_FORWARD_HAS_DEFAULT_ARGS({1, ::troupe::nn::Value(Tensor())})
  /// The same for a packed batch: output packed as the input.
  std::tuple<utils::rnn::PackedSequence, Tensor> forward_with_packed_input(
      const utils::rnn::PackedSequence& packed_input, Tensor hx = {});
  std::string name() const override { return "RNN"; }

  RNNOptions options;
};
TROUPE_MODULE(RNN);

/// Long short-term memory: gates i, f, g, o from W_ih x + b_ih + W_hh h + b_hh (in that order),
/// c_t = f * c_{t-1} + i * g, h_t = o * tanh(c_t) (times W_hr^T with proj_size).
class LSTMImpl : public Cloneable<LSTMImpl, detail::RNNImplBase> {
 public:
  explicit LSTMImpl(const LSTMOptions& options);
  LSTMImpl(int64_t input_size, int64_t hidden_size) : LSTMImpl(LSTMOptions(input_size, hidden_size)) {}
  void reset() override;
  /// input as for RNN; hx_opt = (h_0 (L*D, B, H_out), c_0 (L*D, B, H)) or zeros. Returns
  /// (output (T, B, D*H_out), (h_n, c_n)), H_out = proj_size or hidden_size.
  std::tuple<Tensor, std::tuple<Tensor, Tensor>> forward(const Tensor& input,
                                                         std::optional<std::tuple<Tensor, Tensor>> hx_opt = {});
  TROUPE_FORWARD_HAS_DEFAULT_ARGS({1, ::troupe::nn::Value()})
  std::tuple<utils::rnn::PackedSequence, std::tuple<Tensor, Tensor>> forward_with_packed_input(
      const utils::rnn::PackedSequence& packed_input, std::optional<std::tuple<Tensor, Tensor>> hx_opt = {});
  std::string name() const override { return "LSTM"; }

  LSTMOptions options;
};
TROUPE_MODULE(LSTM);

/// Gated recurrent unit: r, z, n gates, n = tanh(W_in x + b_in + r * (W_hn h + b_hn)),
/// h_t = (1 - z) * n + z * h_{t-1}.
class GRUImpl : public Cloneable<GRUImpl, detail::RNNImplBase> {
 public:
  explicit GRUImpl(const GRUOptions& options);
  GRUImpl(int64_t input_size, int64_t hidden_size) : GRUImpl(GRUOptions(input_size, hidden_size)) {}
  void reset() override;
  std::tuple<Tensor, Tensor> forward(const Tensor& input, Tensor hx = {});
  TROUPE_FORWARD_HAS_DEFAULT_ARGS({1, ::troupe::nn::Value(Tensor())})
  std::tuple<utils::rnn::PackedSequence, Tensor> forward_with_packed_input(
      const utils::rnn::PackedSequence& packed_input, Tensor hx = {});
  std::string name() const override { return "GRU"; }

  GRUOptions options;
};
TROUPE_MODULE(GRU);

namespace detail {
/// What the cells share: weight_ih (G*H, in), weight_hh (G*H, H), bias_ih, bias_hh (G*H, or None).
class RNNCellImplBase : public Module {
 public:
  RNNCellImplBase(int64_t input_size, int64_t hidden_size, bool bias, int64_t num_chunks, Device device,
                  std::optional<ScalarType> dtype);
  /// Every weight ~ U(-1/sqrt(hidden_size), 1/sqrt(hidden_size)).
  void reset_parameters();
  std::string extra_repr() const override;

  Tensor weight_ih;
  Tensor weight_hh;
  Tensor bias_ih;
  Tensor bias_hh;

 protected:
  void register_weights();
  /// Checks a 1-D or 2-D input of input_size features.
  void check_forward_input(const Tensor& input, const char* cls) const;
  /// "tanh" / "relu" for RNNCell ("" for the others: not printed).
  virtual std::string nonlinearity_str() const { return ""; }

  int64_t input_size_, hidden_size_, num_chunks_;
  bool bias_;
  Device device_;
  std::optional<ScalarType> dtype_;
};
}  // namespace detail

/// One step of RNN: h' = tanh(W_ih x + b_ih + W_hh h + b_hh) (or relu).
class RNNCellImpl : public Cloneable<RNNCellImpl, detail::RNNCellImplBase> {
 public:
  explicit RNNCellImpl(const RNNCellOptions& options);
  RNNCellImpl(int64_t input_size, int64_t hidden_size) : RNNCellImpl(RNNCellOptions(input_size, hidden_size)) {}
  void reset() override;
  /// input (B, in) or (in); hx (B, H) or (H), undefined: zeros. Returns h'.
  Tensor forward(const Tensor& input, Tensor hx = {});
  TROUPE_FORWARD_HAS_DEFAULT_ARGS({1, ::troupe::nn::Value(Tensor())})
  std::string name() const override { return "RNNCell"; }

  RNNCellOptions options;

 protected:
  std::string nonlinearity_str() const override { return options.nonlinearity(); }
};
TROUPE_MODULE(RNNCell);

/// One step of LSTM: returns (h', c').
class LSTMCellImpl : public Cloneable<LSTMCellImpl, detail::RNNCellImplBase> {
 public:
  explicit LSTMCellImpl(const LSTMCellOptions& options);
  LSTMCellImpl(int64_t input_size, int64_t hidden_size) : LSTMCellImpl(LSTMCellOptions(input_size, hidden_size)) {}
  void reset() override;
  std::tuple<Tensor, Tensor> forward(const Tensor& input, std::optional<std::tuple<Tensor, Tensor>> hx_opt = {});
  TROUPE_FORWARD_HAS_DEFAULT_ARGS({1, ::troupe::nn::Value()})
  std::string name() const override { return "LSTMCell"; }

  LSTMCellOptions options;
};
TROUPE_MODULE(LSTMCell);

/// One step of GRU: returns h'.
class GRUCellImpl : public Cloneable<GRUCellImpl, detail::RNNCellImplBase> {
 public:
  explicit GRUCellImpl(const GRUCellOptions& options);
  GRUCellImpl(int64_t input_size, int64_t hidden_size) : GRUCellImpl(GRUCellOptions(input_size, hidden_size)) {}
  void reset() override;
  Tensor forward(const Tensor& input, Tensor hx = {});
  TROUPE_FORWARD_HAS_DEFAULT_ARGS({1, ::troupe::nn::Value(Tensor())})
  std::string name() const override { return "GRUCell"; }

  GRUCellOptions options;
};
TROUPE_MODULE(GRUCell);


}  // namespace troupe::nn
