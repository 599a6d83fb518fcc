// Options of the recurrent layers, as libtorch's torch/nn/options/rnn.h: RNNOptions, LSTMOptions,
// GRUOptions and the cells' RNNCellOptions, LSTMCellOptions, GRUCellOptions.
//
//   nn::LSTM lstm(nn::LSTMOptions(8, 16).num_layers(2).batch_first(true).bidirectional(true));
//   nn::RNN rnn(nn::RNNOptions(8, 16).nonlinearity(troupe::kReLU));
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <troupe/tensor/tensor.h>
#include <troupe/util/enum.h>
#include <troupe/util/options.h>

namespace troupe::nn {

/// Options of RNN (Elman network: h' = nonlinearity(W_ih x + b_ih + W_hh h + b_hh)).
struct RNNOptions {
  RNNOptions(int64_t input_size, int64_t hidden_size) : input_size_(input_size), hidden_size_(hidden_size) {}
  TROUPE_ARG(int64_t, input_size);
  TROUPE_ARG(int64_t, hidden_size);
  TROUPE_ARG(int64_t, num_layers) = 1;
  /// "tanh" or "relu" (troupe::kTanh, troupe::kReLU).
  TROUPE_ARG(std::string, nonlinearity) = "tanh";
  TROUPE_ARG(bool, bias) = true;
  /// Input and output are (batch, seq, feature) instead of (seq, batch, feature); the states are not.
  TROUPE_ARG(bool, batch_first) = false;
  /// Dropout on the outputs of every layer but the last, in training mode.
  TROUPE_ARG(double, dropout) = 0.0;
  TROUPE_ARG(bool, bidirectional) = false;
  TROUPE_ARG(Device, device) = Device(kCPU);
  TROUPE_ARG(std::optional<ScalarType>, dtype);
};

/// Options of LSTM; proj_size > 0 projects each h to proj_size features (weight_hr_l*).
struct LSTMOptions {
  LSTMOptions(int64_t input_size, int64_t hidden_size) : input_size_(input_size), hidden_size_(hidden_size) {}
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

/// Options of GRU.
struct GRUOptions {
  GRUOptions(int64_t input_size, int64_t hidden_size) : input_size_(input_size), hidden_size_(hidden_size) {}
  TROUPE_ARG(int64_t, input_size);
  TROUPE_ARG(int64_t, hidden_size);
  TROUPE_ARG(int64_t, num_layers) = 1;
  TROUPE_ARG(bool, bias) = true;
  TROUPE_ARG(bool, batch_first) = false;
  TROUPE_ARG(double, dropout) = 0.0;
  TROUPE_ARG(bool, bidirectional) = false;
  TROUPE_ARG(Device, device) = Device(kCPU);
  TROUPE_ARG(std::optional<ScalarType>, dtype);
};

/// Options of RNNCell.
struct RNNCellOptions {
  RNNCellOptions(int64_t input_size, int64_t hidden_size) : input_size_(input_size), hidden_size_(hidden_size) {}
  TROUPE_ARG(int64_t, input_size);
  TROUPE_ARG(int64_t, hidden_size);
  TROUPE_ARG(bool, bias) = true;
  /// "tanh" or "relu" (troupe::kTanh, troupe::kReLU).
  TROUPE_ARG(std::string, nonlinearity) = "tanh";
  TROUPE_ARG(Device, device) = Device(kCPU);
  TROUPE_ARG(std::optional<ScalarType>, dtype);
};

/// Options of LSTMCell.
struct LSTMCellOptions {
  LSTMCellOptions(int64_t input_size, int64_t hidden_size) : input_size_(input_size), hidden_size_(hidden_size) {}
  TROUPE_ARG(int64_t, input_size);
  TROUPE_ARG(int64_t, hidden_size);
  TROUPE_ARG(bool, bias) = true;
  TROUPE_ARG(Device, device) = Device(kCPU);
  TROUPE_ARG(std::optional<ScalarType>, dtype);
};

/// Options of GRUCell.
struct GRUCellOptions {
  GRUCellOptions(int64_t input_size, int64_t hidden_size) : input_size_(input_size), hidden_size_(hidden_size) {}
  TROUPE_ARG(int64_t, input_size);
  TROUPE_ARG(int64_t, hidden_size);
  TROUPE_ARG(bool, bias) = true;
  TROUPE_ARG(Device, device) = Device(kCPU);
  TROUPE_ARG(std::optional<ScalarType>, dtype);
};

}  // namespace troupe::nn
