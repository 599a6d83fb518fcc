// RNN, LSTM, GRU, their cells and packed sequences against PyTorch 1.13 (tests/fixtures/nn_rnn.txt, written
// by gen_nn_rnn.py): default initialisation bit for bit, outputs and gradients, packed batches, printed
// forms, errors; finite-difference gradient checks in float64 (also of the double backward).
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include <troupe/nn/modules/container.h>
#include <troupe/nn/modules/rnn.h>
#include <troupe/nn/utils/rnn.h>
#include <troupe/tensor/autograd.h>
#include <troupe/tensor/gradcheck.h>
#include <troupe/tensor/ops.h>

#include "common/fixtures.h"

namespace {

using namespace troupe;
namespace nn = troupe::nn;
namespace rnn_utils = troupe::nn::utils::rnn;
using troupe::testing::Fixtures;
using troupe::testing::tensors_close;

const Fixtures& fx() {
  static const Fixtures f = Fixtures::load("nn_rnn.txt");
  return f;
}
Tensor get(const std::string& name) { return fx().get(name); }
Tensor leaf(const std::string& name) { return fx().get(name).requires_grad_(true); }

template <class Fn>
void expect_error(Fn&& f, const std::string& text) {
  try {
    f();
    ADD_FAILURE() << "expected an error containing: " << text;
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << "message: " << e.what();
  }
}

/// Checks the module's parameters against the `<case>_w_<name>` records, bit for bit.
void expect_init(const nn::Module& m, const std::string& c) {
  auto params = m.named_parameters();
  ASSERT_GT(params.size(), 0u);
  for (const auto& item : params) {
    SCOPED_TRACE(item.key());
    ASSERT_TRUE(fx().has(c + "_w_" + item.key()));
    EXPECT_TRUE(tensors_close(item.value(), get(c + "_w_" + item.key()), 0, 0, true));
  }
  // and no record the module lacks
  for (const auto& n : fx().names())
    if (n.rfind(c + "_w_", 0) == 0) {
      EXPECT_TRUE(params.contains(n.substr(c.size() + 3))) << n;
    }
}

void expect_param_grads(const nn::Module& m, const std::string& c, double rtol = 1e-4, double atol = 1e-5) {
  for (const auto& item : m.named_parameters()) {
    SCOPED_TRACE(item.key());
    ASSERT_TRUE(item.value().grad().defined());
    EXPECT_TRUE(tensors_close(item.value().grad(), get(c + "_d_" + item.key()), rtol, atol));
  }
}

struct Case {
  int64_t seed, mode, in, hidden, layers;
  bool bias, batch_first, bidir;
  int64_t proj, T, B;
  bool has_hx, unbatched;
};

Case read_case(const std::string& c) {
  auto p = fx().ints(c + "_params");
  return {p[0], p[1], p[2], p[3], p[4], p[5] != 0, p[6] != 0, p[7] != 0, p[8], p[9], p[10], p[11] != 0, p[12] != 0};
}

std::shared_ptr<nn::Module> build(const Case& k) {
  manual_seed(static_cast<uint64_t>(k.seed));
  if (k.mode == 2)
    return std::make_shared<nn::LSTMImpl>(nn::LSTMOptions(k.in, k.hidden)
                                              .num_layers(k.layers)
                                              .bias(k.bias)
                                              .batch_first(k.batch_first)
                                              .bidirectional(k.bidir)
                                              .proj_size(k.proj));
  if (k.mode == 3)
    return std::make_shared<nn::GRUImpl>(nn::GRUOptions(k.in, k.hidden)
                                             .num_layers(k.layers)
                                             .bias(k.bias)
                                             .batch_first(k.batch_first)
                                             .bidirectional(k.bidir));
  return std::make_shared<nn::RNNImpl>(nn::RNNOptions(k.in, k.hidden)
                                           .num_layers(k.layers)
                                           .nonlinearity(k.mode == 1 ? "relu" : "tanh")
                                           .bias(k.bias)
                                           .batch_first(k.batch_first)
                                           .bidirectional(k.bidir));
}

// ---------------------------------------------------------------- modules against PyTorch

class RNNModules : public ::testing::TestWithParam<std::string> {};

TEST_P(RNNModules, InitForwardAndGradientsMatchPyTorch) {
  const std::string c = GetParam();
  const Case k = read_case(c);
  auto m = build(k);
  expect_init(*m, c);

  Tensor x = leaf(c + "_x");
  Tensor h0 = k.has_hx ? leaf(c + "_h0") : Tensor();
  Tensor c0 = k.has_hx && k.mode == 2 ? leaf(c + "_c0") : Tensor();
  Tensor out, hn, cn;
  if (auto* lstm = m->as<nn::LSTM>()) {
    std::optional<std::tuple<Tensor, Tensor>> hx;
    if (k.has_hx) hx = std::make_tuple(h0, c0);
    std::tuple<Tensor, Tensor> state;
    std::tie(out, state) = lstm->forward(x, hx);
    std::tie(hn, cn) = state;
  } else if (auto* gru = m->as<nn::GRU>()) {
    std::tie(out, hn) = gru->forward(x, h0);
  } else {
    std::tie(out, hn) = m->as<nn::RNN>()->forward(x, h0);
  }
  EXPECT_TRUE(tensors_close(out, get(c + "_out"), 1e-5, 1e-6));
  EXPECT_TRUE(tensors_close(hn, get(c + "_hn"), 1e-5, 1e-6));
  if (k.mode == 2) {
    EXPECT_TRUE(tensors_close(cn, get(c + "_cn"), 1e-5, 1e-6));
  }

  Tensor loss = (out * get(c + "_gout")).sum() + (hn * get(c + "_gh")).sum();
  if (k.mode == 2) loss = loss + (cn * get(c + "_gc")).sum();
  loss.backward();
  EXPECT_TRUE(tensors_close(x.grad(), get(c + "_dx"), 1e-4, 1e-5));
  if (k.has_hx) {
    EXPECT_TRUE(tensors_close(h0.grad(), get(c + "_dh0"), 1e-4, 1e-5));
  }
  if (c0.defined()) {
    EXPECT_TRUE(tensors_close(c0.grad(), get(c + "_dc0"), 1e-4, 1e-5));
  }
  expect_param_grads(*m, c);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, RNNModules,
                         ::testing::Values("lstm_basic", "lstm_deep", "lstm_proj", "lstm_nobias", "lstm_unbatched",
                                           "gru_deep", "gru_batch_first", "rnn_relu", "rnn_tanh_bidir"));

TEST(RNNTest, PackedSequencesMatchPyTorch) {
  for (std::string mode : {"lstm", "gru"}) {
    SCOPED_TRACE(mode);
    const std::string c = "packed_" + mode;
    auto p = fx().ints(c + "_params");  // [seed, in, hidden, layers, bidirectional, T]
    manual_seed(static_cast<uint64_t>(p[0]));
    std::shared_ptr<nn::Module> m;
    if (mode == "lstm")
      m = std::make_shared<nn::LSTMImpl>(
          nn::LSTMOptions(p[1], p[2]).num_layers(p[3]).bidirectional(p[4] != 0).batch_first(true));
    else
      m = std::make_shared<nn::GRUImpl>(
          nn::GRUOptions(p[1], p[2]).num_layers(p[3]).bidirectional(p[4] != 0).batch_first(true));
    expect_init(*m, c);
    Tensor x = leaf(c + "_x"), h0 = leaf(c + "_h0");
    auto packed = rnn_utils::pack_padded_sequence(x, get(c + "_lengths"), /*batch_first=*/true,
                                                  /*enforce_sorted=*/false);
    EXPECT_TRUE(tensors_close(packed.batch_sizes(), get(c + "_batch_sizes"), 0, 0));
    EXPECT_TRUE(tensors_close(packed.sorted_indices(), get(c + "_sorted_indices"), 0, 0));
    EXPECT_TRUE(tensors_close(packed.data(), get(c + "_data"), 0, 0));
    rnn_utils::PackedSequence pout;
    Tensor hn, cn, c0;
    if (auto* lstm = m->as<nn::LSTM>()) {
      c0 = leaf(c + "_c0");
      std::tuple<Tensor, Tensor> st;
      std::tie(pout, st) = lstm->forward_with_packed_input(packed, std::make_tuple(h0, c0));
      std::tie(hn, cn) = st;
    } else {
      std::tie(pout, hn) = m->as<nn::GRU>()->forward_with_packed_input(packed, h0);
    }
    auto [out, lengths] = rnn_utils::pad_packed_sequence(pout, /*batch_first=*/true, /*padding_value=*/-1.0);
    EXPECT_TRUE(tensors_close(out, get(c + "_out"), 1e-5, 1e-6));
    EXPECT_TRUE(tensors_close(lengths, get(c + "_out_lengths"), 0, 0));
    EXPECT_TRUE(tensors_close(hn, get(c + "_hn"), 1e-5, 1e-6));
    Tensor loss = (out * get(c + "_gout")).sum() + (hn * get(c + "_gh")).sum();
    if (cn.defined()) {
      EXPECT_TRUE(tensors_close(cn, get(c + "_cn"), 1e-5, 1e-6));
      loss = loss + (cn * get(c + "_gc")).sum();
    }
    loss.backward();
    EXPECT_TRUE(tensors_close(x.grad(), get(c + "_dx"), 1e-4, 1e-5));
    EXPECT_TRUE(tensors_close(h0.grad(), get(c + "_dh0"), 1e-4, 1e-5));
    if (c0.defined()) {
      EXPECT_TRUE(tensors_close(c0.grad(), get(c + "_dc0"), 1e-4, 1e-5));
    }
    expect_param_grads(*m, c);
  }
}

TEST(RNNTest, CellsMatchPyTorch) {
  for (std::string kind : {"rnn", "rnn_relu", "lstm", "gru", "lstm_unbatched"}) {
    SCOPED_TRACE(kind);
    const std::string c = "cell_" + kind;
    auto p = fx().ints(c + "_params");  // [seed, in, hidden, bias, B]
    manual_seed(static_cast<uint64_t>(p[0]));
    std::shared_ptr<nn::Module> m;
    if (kind == "rnn") m = std::make_shared<nn::RNNCellImpl>(p[1], p[2]);
    if (kind == "rnn_relu")
      m = std::make_shared<nn::RNNCellImpl>(nn::RNNCellOptions(p[1], p[2]).nonlinearity(troupe::kReLU).bias(false));
    if (kind.rfind("lstm", 0) == 0) m = std::make_shared<nn::LSTMCellImpl>(p[1], p[2]);
    if (kind == "gru") m = std::make_shared<nn::GRUCellImpl>(p[1], p[2]);
    expect_init(*m, c);
    Tensor x = leaf(c + "_x"), h0 = leaf(c + "_h0"), c0;
    Tensor hn, cn;
    if (auto* lstm = m->as<nn::LSTMCell>()) {
      c0 = leaf(c + "_c0");
      std::tie(hn, cn) = lstm->forward(x, std::make_tuple(h0, c0));
    } else if (auto* gru = m->as<nn::GRUCell>()) {
      hn = gru->forward(x, h0);
    } else {
      hn = m->as<nn::RNNCell>()->forward(x, h0);
    }
    EXPECT_TRUE(tensors_close(hn, get(c + "_hn"), 1e-5, 1e-6));
    Tensor loss = (hn * get(c + "_gh")).sum();
    if (cn.defined()) {
      EXPECT_TRUE(tensors_close(cn, get(c + "_cn"), 1e-5, 1e-6));
      loss = loss + (cn * get(c + "_gc")).sum();
    }
    loss.backward();
    EXPECT_TRUE(tensors_close(x.grad(), get(c + "_dx"), 1e-4, 1e-5));
    EXPECT_TRUE(tensors_close(h0.grad(), get(c + "_dh0"), 1e-4, 1e-5));
    if (c0.defined()) {
      EXPECT_TRUE(tensors_close(c0.grad(), get(c + "_dc0"), 1e-4, 1e-5));
    }
    expect_param_grads(*m, c);
  }
}

TEST(RNNUtilsTest, PadSequenceMatchesPyTorch) {
  std::vector<Tensor> seqs = {get("padseq_0"), get("padseq_1"), get("padseq_2")};
  EXPECT_TRUE(tensors_close(rnn_utils::pad_sequence(seqs), get("padseq_out"), 0, 0));
  EXPECT_TRUE(tensors_close(rnn_utils::pad_sequence(seqs, true, 7.0), get("padseq_out_bf"), 0, 0));
  // pack_sequence: sorted input only, unless enforce_sorted is false
  expect_error([&] { rnn_utils::pack_sequence(seqs); }, "`lengths` array must be sorted in decreasing order");
  auto packed = rnn_utils::pack_sequence(seqs, false);
  EXPECT_EQ(packed.batch_sizes().to_vector<int64_t>(), (std::vector<int64_t>{3, 2, 2, 1}));
  EXPECT_EQ(packed.sorted_indices().to_vector<int64_t>(), (std::vector<int64_t>{2, 0, 1}));
  EXPECT_EQ(packed.unsorted_indices().to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 0}));
  auto [padded, lengths] = rnn_utils::pad_packed_sequence(packed);
  EXPECT_EQ(lengths.to_vector<int64_t>(), (std::vector<int64_t>{3, 1, 4}));
  EXPECT_TRUE(tensors_close(padded, get("padseq_out"), 0, 0));
}

TEST(RNNUtilsTest, Errors) {
  Tensor x = randn({4, 3, 2});
  expect_error([&] { rnn_utils::pack_padded_sequence(x, tensor(std::vector<int64_t>{2, 3, 1})); },
               "`lengths` array must be sorted in decreasing order when `enforce_sorted` is True");
  expect_error([&] { rnn_utils::pack_padded_sequence(x, tensor(std::vector<int64_t>{2, 0, 1}), false, false); },
               "Length of all samples has to be greater than 0, but found an element in 'lengths' that is <= 0");
  auto p = rnn_utils::pack_padded_sequence(x, tensor(std::vector<int64_t>{2, 3, 1}), false, false);
  expect_error([&] { rnn_utils::pad_packed_sequence(p, false, 0.0, 2); },
               "Expected total_length to be at least the length of the longest sequence in input, but got "
               "total_length=2 and max sequence length being 3");
  auto [padded, len] = rnn_utils::pad_packed_sequence(p, false, 0.0, 6);
  EXPECT_EQ(padded.sizes().vec(), (std::vector<int64_t>{6, 3, 2}));
}

// ---------------------------------------------------------------- names, shapes, printing, errors

TEST(RNNTest, ParameterNamesAndStateDictKeysAreTorchs) {
  nn::LSTM lstm(nn::LSTMOptions(3, 5).num_layers(2).bidirectional(true).proj_size(2));
  std::vector<std::string> expected;
  for (std::string l : {"0", "1"})
    for (std::string s : {"", "_reverse"})
      for (std::string n : {"weight_ih_l", "weight_hh_l", "bias_ih_l", "bias_hh_l", "weight_hr_l"})
        expected.push_back(n + l + s);
  EXPECT_EQ(lstm->named_parameters().keys(), expected);
  EXPECT_EQ(lstm->flat_weights_names(), expected);
  EXPECT_EQ(lstm->state_dict().keys(), expected);
  EXPECT_EQ(lstm->named_parameters()["weight_ih_l1"].sizes().vec(), (std::vector<int64_t>{20, 4}));
  EXPECT_EQ(lstm->named_parameters()["weight_hh_l0_reverse"].sizes().vec(), (std::vector<int64_t>{20, 2}));
  EXPECT_EQ(lstm->named_parameters()["weight_hr_l0"].sizes().vec(), (std::vector<int64_t>{2, 5}));
  nn::GRUCell cell(3, 4);
  EXPECT_EQ(cell->named_parameters().keys(), (std::vector<std::string>{"weight_ih", "weight_hh", "bias_ih", "bias_hh"}));
  EXPECT_EQ(cell->weight_ih.sizes().vec(), (std::vector<int64_t>{12, 3}));
}

TEST(RNNTest, HolderCallsWithAndWithoutState) {
  nn::LSTM lstm(nn::LSTMOptions(3, 4).num_layers(2).batch_first(true));
  Tensor x = randn({2, 5, 3});
  auto [out, state] = lstm(x);  // through Module::call with the declared default
  EXPECT_EQ(out.sizes().vec(), (std::vector<int64_t>{2, 5, 4}));
  EXPECT_EQ(std::get<0>(state).sizes().vec(), (std::vector<int64_t>{2, 2, 4}));
  auto [out2, state2] = lstm(x, state);
  EXPECT_EQ(std::get<1>(state2).sizes().vec(), (std::vector<int64_t>{2, 2, 4}));
  int calls = 0;
  lstm->register_forward_hook([&](nn::Module&, const nn::Args& args, const nn::Value& v) {
    ++calls;
    EXPECT_EQ(args.size(), 1u);  // as passed (the default is filled in behind the hooks)
    EXPECT_EQ(v.tuple().size(), 3u);  // output, h_n, c_n
  });
  lstm(x);
  EXPECT_EQ(calls, 1);
  nn::GRU gru(3, 4);
  auto [g_out, g_h] = gru(randn({5, 2, 3}));
  EXPECT_EQ(g_h.sizes().vec(), (std::vector<int64_t>{1, 2, 4}));
  nn::RNNCell rc(3, 4);
  EXPECT_EQ(rc(randn({2, 3})).sizes().vec(), (std::vector<int64_t>{2, 4}));
  nn::LSTMCell lc(3, 4);
  auto [h, c] = lc(randn({3}));
  EXPECT_EQ(h.sizes().vec(), (std::vector<int64_t>{4}));
}

TEST(RNNTest, PrintsAsPyTorch) {
  // the `# repr:` comments of nn_rnn.txt
  EXPECT_EQ(nn::LSTM(3, 4)->repr(), "LSTM(3, 4)");
  EXPECT_EQ(nn::LSTM(nn::LSTMOptions(3, 4).num_layers(2).batch_first(true).bidirectional(true))->repr(),
            "LSTM(3, 4, num_layers=2, batch_first=True, bidirectional=True)");
  EXPECT_EQ(nn::LSTM(nn::LSTMOptions(3, 5).proj_size(2).num_layers(2).bidirectional(true))->repr(),
            "LSTM(3, 5, proj_size=2, num_layers=2, bidirectional=True)");
  EXPECT_EQ(nn::LSTM(nn::LSTMOptions(2, 3).bias(false))->repr(), "LSTM(2, 3, bias=False)");
  EXPECT_EQ(nn::GRU(nn::GRUOptions(2, 3).bias(false).batch_first(true))->repr(), "GRU(2, 3, bias=False, batch_first=True)");
  EXPECT_EQ(nn::RNN(nn::RNNOptions(3, 4).num_layers(2).bias(false).nonlinearity(troupe::kReLU))->repr(),
            "RNN(3, 4, num_layers=2, bias=False)");
  EXPECT_EQ(nn::RNN(nn::RNNOptions(3, 4).num_layers(2).dropout(0.5))->repr(), "RNN(3, 4, num_layers=2, dropout=0.5)");
  EXPECT_EQ(nn::RNNCell(3, 4)->repr(), "RNNCell(3, 4)");
  EXPECT_EQ(nn::RNNCell(nn::RNNCellOptions(3, 4).bias(false).nonlinearity("relu"))->repr(),
            "RNNCell(3, 4, bias=False, nonlinearity=relu)");
  EXPECT_EQ(nn::LSTMCell(3, 4)->repr(), "LSTMCell(3, 4)");
  EXPECT_EQ(nn::GRUCell(3, 4)->repr(), "GRUCell(3, 4)");
}

TEST(RNNTest, Errors) {
  expect_error([] { nn::LSTM(nn::LSTMOptions(3, 4).proj_size(4)); }, "proj_size has to be smaller than hidden_size");
  expect_error([] { nn::LSTM(nn::LSTMOptions(3, 4).proj_size(-1)); },
               "proj_size should be a positive integer or zero to disable projections");
  expect_error([] { nn::GRU(nn::GRUOptions(3, 4).dropout(1.5)); }, "dropout should be a number in range [0, 1]");
  expect_error([] { nn::RNN(nn::RNNOptions(3, 4).nonlinearity("gelu")); }, "Unknown nonlinearity 'gelu'");
  nn::LSTM lstm(nn::LSTMOptions(3, 4).num_layers(2));
  expect_error([&] { lstm(randn({5, 2, 7})); }, "input.size(-1) must be equal to input_size. Expected 3, got 7");
  expect_error([&] { lstm(randn({5, 2, 3, 1})); }, "LSTM: Expected input to be 2D or 3D, got 4D instead");
  expect_error([&] { lstm(randn({5, 2, 3}), std::make_tuple(randn({1, 2, 4}), randn({2, 2, 4}))); },
               "Expected hidden[0] size (2, 2, 4), got [1, 2, 4]");
  expect_error([&] { lstm(randn({5, 2, 3}), std::make_tuple(randn({2, 2, 4}), randn({2, 3, 4}))); },
               "Expected hidden[1] size (2, 2, 4), got [2, 3, 4]");
  expect_error([&] { lstm(randn({5, 2, 3}), std::make_tuple(randn({2, 4}), randn({2, 4}))); },
               "For batched 3-D input, hx and cx should also be 3-D but got (2-D, 2-D) tensors");
  nn::GRU gru(3, 4);
  expect_error([&] { gru(randn({5, 2, 3}), randn({1, 3, 4})); }, "Expected hidden size (1, 2, 4), got [1, 3, 4]");
  nn::GRUCell cell(3, 4);
  expect_error([&] { cell(randn({2, 5})); }, "input has inconsistent input_size: got 5 expected 3");
  expect_error([&] { cell(randn({2, 3}), randn({3, 4})); }, "Input batch size 2 doesn't match hidden batch size 3");
  nn::LSTMCell lc(3, 4);
  expect_error([&] { lc(randn({2, 3}), std::make_tuple(randn({2, 4}), randn({2, 5}))); },
               "hidden[1] has inconsistent hidden_size: got 5, expected 4");
}

TEST(RNNTest, DropoutBetweenLayersOnlyInTraining) {
  nn::GRU gru(nn::GRUOptions(3, 4).num_layers(2).dropout(0.5));
  Tensor x = randn({6, 2, 3});
  gru->eval();
  auto [a, ha] = gru(x);
  auto [b, hb] = gru(x);
  EXPECT_TRUE(equal(a, b));
  gru->train();
  manual_seed(1);
  auto [c, hc] = gru(x);
  EXPECT_FALSE(allclose(a, c));
}

// ---------------------------------------------------------------- finite differences (float64)

/// gradcheck of sum(out * g) + sum(states * g) with respect to the input, the states and every weight.
void gradcheck_module(nn::Module& m, const std::function<std::vector<Tensor>(const Tensor&, const Tensor&, const Tensor&)>& f,
                      Tensor x, Tensor h0, Tensor c0, bool gradgrad = false) {
  std::vector<Tensor> inputs = {x.requires_grad_(true), h0.requires_grad_(true)};
  if (c0.defined()) inputs.push_back(c0.requires_grad_(true));
  const size_t n_data = inputs.size();
  for (const Tensor& p : m.parameters()) inputs.push_back(p);  // perturbed in place: the module sees it
  auto fn = [&, n_data](const autograd::variable_list& in) {
    return f(in[0], in[1], n_data > 2 ? in[2] : Tensor());
  };
  autograd::GradcheckOptions o;
  o.full_jacobian_max_outputs = 64;
  EXPECT_TRUE(autograd::gradcheck(fn, inputs, o));
  if (gradgrad) {
    std::vector<Tensor> small = {inputs[0], inputs[1]};
    if (n_data > 2) small.push_back(inputs[2]);
    EXPECT_TRUE(autograd::gradgradcheck(fn, small, o));
  }
}

TEST(RNNGradcheck, LSTMBidirectionalWithProjection) {
  manual_seed(3);
  nn::LSTM lstm(nn::LSTMOptions(3, 4).num_layers(2).bidirectional(true).proj_size(2).dtype(kFloat64));
  gradcheck_module(
      *lstm.ptr(),
      [&](const Tensor& x, const Tensor& h, const Tensor& c) {
        auto [out, st] = lstm->forward(x, std::make_tuple(h, c));
        return std::vector<Tensor>{out, std::get<0>(st), std::get<1>(st)};
      },
      randn({3, 2, 3}, kFloat64), randn({4, 2, 2}, kFloat64), randn({4, 2, 4}, kFloat64), /*gradgrad=*/true);
}

TEST(RNNGradcheck, GRUAndRNN) {
  manual_seed(4);
  nn::GRU gru(nn::GRUOptions(3, 4).num_layers(2).bidirectional(true).batch_first(true).dtype(kFloat64));
  gradcheck_module(
      *gru.ptr(),
      [&](const Tensor& x, const Tensor& h, const Tensor&) {
        auto [out, hn] = gru->forward(x, h);
        return std::vector<Tensor>{out, hn};
      },
      randn({2, 3, 3}, kFloat64), randn({4, 2, 4}, kFloat64), Tensor(), /*gradgrad=*/true);
  for (std::string nl : {"tanh", "relu"}) {
    SCOPED_TRACE(nl);
    nn::RNN rnn(nn::RNNOptions(3, 4).num_layers(2).nonlinearity(nl).dtype(kFloat64));
    gradcheck_module(
        *rnn.ptr(),
        [&](const Tensor& x, const Tensor& h, const Tensor&) {
          auto [out, hn] = rnn->forward(x, h);
          return std::vector<Tensor>{out, hn};
        },
        randn({3, 2, 3}, kFloat64), randn({2, 2, 4}, kFloat64), Tensor());
  }
}

TEST(RNNGradcheck, PackedLSTMAndCells) {
  manual_seed(5);
  nn::LSTM lstm(nn::LSTMOptions(2, 3).bidirectional(true).dtype(kFloat64));
  const Tensor lengths = tensor(std::vector<int64_t>{2, 4, 1});
  gradcheck_module(
      *lstm.ptr(),
      [&](const Tensor& x, const Tensor& h, const Tensor& c) {
        auto packed = rnn_utils::pack_padded_sequence(x, lengths, false, false);
        auto [out, st] = lstm->forward_with_packed_input(packed, std::make_tuple(h, c));
        auto [padded, len] = rnn_utils::pad_packed_sequence(out);
        return std::vector<Tensor>{padded, std::get<0>(st), std::get<1>(st)};
      },
      randn({4, 3, 2}, kFloat64), randn({2, 3, 3}, kFloat64), randn({2, 3, 3}, kFloat64));
  nn::LSTMCell lc(nn::LSTMCellOptions(3, 4).dtype(kFloat64));
  gradcheck_module(
      *lc.ptr(),
      [&](const Tensor& x, const Tensor& h, const Tensor& c) {
        auto [hn, cn] = lc->forward(x, std::make_tuple(h, c));
        return std::vector<Tensor>{hn, cn};
      },
      randn({2, 3}, kFloat64), randn({2, 4}, kFloat64), randn({2, 4}, kFloat64), /*gradgrad=*/true);
  nn::GRUCell gc(nn::GRUCellOptions(3, 4).dtype(kFloat64));
  gradcheck_module(
      *gc.ptr(), [&](const Tensor& x, const Tensor& h, const Tensor&) { return std::vector<Tensor>{gc->forward(x, h)}; },
      randn({2, 3}, kFloat64), randn({2, 4}, kFloat64), Tensor());
}

TEST(RNNTest, FusedAndCompositePathsAgree) {
  // float32 runs the fused kernels; a double-backward (create_graph) recomputes through the composite form
  manual_seed(6);
  nn::LSTM lstm(nn::LSTMOptions(4, 8).num_layers(2).bidirectional(true));
  Tensor x = randn({7, 3, 4}).requires_grad_(true);
  auto [out, st] = lstm(x);
  Tensor g = randn(out.sizes());
  auto fused = autograd::grad({out}, {x}, {g}, true, false);
  auto composite = autograd::grad({out}, {x}, {g}, true, true);  // create_graph: the composite path
  EXPECT_TRUE(tensors_close(fused[0], composite[0].detach(), 1e-4, 1e-5));
}

}  // namespace
