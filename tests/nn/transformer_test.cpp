// MultiheadAttention, the transformer layers and stacks and F::scaled_dot_product_attention against
// PyTorch (tests/fixtures/nn_transformer.txt, written by gen_nn_transformer.py): default initialisation
// bit for bit, outputs and gradients, masks, printed forms, errors; finite-difference checks in float64.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include <troupe/nn/functional/attention.h>
#include <troupe/nn/modules/transformer.h>
#include <troupe/tensor/autograd.h>
#include <troupe/tensor/gradcheck.h>
#include <troupe/tensor/ops.h>

#include "common/fixtures.h"

namespace {

using namespace troupe;
namespace nn = troupe::nn;
namespace F = troupe::nn::functional;
using troupe::testing::Fixtures;
using troupe::testing::tensors_close;

const Fixtures& fx() {
  static const Fixtures f = Fixtures::load("nn_transformer.txt");
  return f;
}
Tensor get(const std::string& name) { return fx().get(name); }
Tensor opt(const std::string& name) { return fx().has(name) ? fx().get(name) : Tensor(); }
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

void expect_init(const nn::Module& m, const std::string& c) {
  auto params = m.named_parameters();
  size_t n = 0;
  for (const auto& name : fx().names())
    if (name.rfind(c + "_w_", 0) == 0) ++n;
  EXPECT_EQ(params.size(), n);
  for (const auto& item : params) {
    SCOPED_TRACE(item.key());
    ASSERT_TRUE(fx().has(c + "_w_" + item.key()));
    EXPECT_TRUE(tensors_close(item.value(), get(c + "_w_" + item.key()), 0, 0, true));
  }
}

void expect_param_grads(const nn::Module& m, const std::string& c) {
  for (const auto& item : m.named_parameters()) {
    SCOPED_TRACE(item.key());
    ASSERT_TRUE(item.value().grad().defined());
    EXPECT_TRUE(tensors_close(item.value().grad(), get(c + "_d_" + item.key()), 1e-4, 1e-5));
  }
}

// ---------------------------------------------------------------- MultiheadAttention

TEST(MultiheadAttentionTest, MatchesPyTorch) {
  for (std::string c : {"a", "b", "c", "d", "e"}) {
    SCOPED_TRACE(c);
    const std::string n = "mha_" + c;
    // [seed, E, H, kdim, vdim, bias, add_bias_kv, add_zero_attn, batch_first, L, S, N, kpm, am, need, avg]
    auto p = fx().ints(n + "_params");
    manual_seed(static_cast<uint64_t>(p[0]));
    nn::MultiheadAttention m(nn::MultiheadAttentionOptions(p[1], p[2])
                                 .kdim(p[3])
                                 .vdim(p[4])
                                 .bias(p[5] != 0)
                                 .add_bias_kv(p[6] != 0)
                                 .add_zero_attn(p[7] != 0)
                                 .batch_first(p[8] != 0));
    expect_init(*m.ptr(), n);
    Tensor q = leaf(n + "_q"), k = leaf(n + "_k"), v = leaf(n + "_v");
    auto [out, w] = m(q, k, v, opt(n + "_kpm"), p[14] != 0, opt(n + "_am"), p[15] != 0);
    EXPECT_TRUE(tensors_close(out, get(n + "_out"), 1e-5, 1e-6));
    Tensor loss = (out * get(n + "_g")).sum();
    if (p[14]) {
      EXPECT_TRUE(tensors_close(w, get(n + "_weights"), 1e-5, 1e-6));
      loss = loss + (w * get(n + "_gw")).sum();
    } else {
      EXPECT_FALSE(w.defined());
    }
    loss.backward();
    EXPECT_TRUE(tensors_close(q.grad(), get(n + "_dq"), 1e-4, 1e-5));
    EXPECT_TRUE(tensors_close(k.grad(), get(n + "_dk"), 1e-4, 1e-5));
    EXPECT_TRUE(tensors_close(v.grad(), get(n + "_dv"), 1e-4, 1e-5));
    expect_param_grads(*m.ptr(), n);
  }
}

TEST(MultiheadAttentionTest, NamesPrintingAndErrors) {
  nn::MultiheadAttention m(8, 2);
  EXPECT_EQ(m->named_parameters().keys(),
            (std::vector<std::string>{"in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"}));
  EXPECT_EQ(m->repr(),
            "MultiheadAttention(\n  (out_proj): NonDynamicallyQuantizableLinear(in_features=8, out_features=8, "
            "bias=True)\n)");
  nn::MultiheadAttention sep(nn::MultiheadAttentionOptions(8, 2).kdim(5).vdim(6).add_bias_kv(true));
  EXPECT_EQ(sep->named_parameters().keys(),
            (std::vector<std::string>{"q_proj_weight", "k_proj_weight", "v_proj_weight", "in_proj_bias", "bias_k",
                                      "bias_v", "out_proj.weight", "out_proj.bias"}));
  expect_error([] { nn::MultiheadAttention(6, 4); }, "embed_dim must be divisible by num_heads");
  Tensor x = randn({3, 2, 8});
  expect_error([&] { m(x, x, x, Tensor(), true, zeros({3, 4})); },
               "The shape of the 2D attn_mask is torch.Size([3, 4]), but should be (3, 3).");
  expect_error([&] { m(x, x, x, zeros({2, 4}, kBool)); }, "expecting key_padding_mask shape of (2, 3)");
  expect_error([&] { m(randn({3, 2, 6}), x, x); }, "was expecting embedding dimension of 8, but got 6");
  // a copy keeps the printed class of out_proj
  auto copy = std::dynamic_pointer_cast<nn::MultiheadAttentionImpl>(m->clone());
  EXPECT_EQ(copy->repr(), m->repr());
  // through the holder with defaults: need_weights = true
  auto [o, w] = m(x, x, x);
  EXPECT_EQ(w.sizes().vec(), (std::vector<int64_t>{2, 3, 3}));
}

// ---------------------------------------------------------------- layers and stacks

TEST(TransformerLayersTest, EncoderLayerMatchesPyTorch) {
  for (std::string c : {"a", "b"}) {
    SCOPED_TRACE(c);
    const std::string n = "enc_" + c;
    // [seed, d_model, nhead, ff, gelu, norm_first, batch_first, S, N, src_mask, kpm, eps * 1e6]
    auto p = fx().ints(n + "_params");
    manual_seed(static_cast<uint64_t>(p[0]));
    auto o = nn::TransformerEncoderLayerOptions(p[1], p[2])
                 .dim_feedforward(p[3])
                 .dropout(0.0)
                 .norm_first(p[5] != 0)
                 .batch_first(p[6] != 0)
                 .layer_norm_eps(static_cast<double>(p[11]) * 1e-6);
    if (p[4]) o.activation(troupe::kGELU);
    nn::TransformerEncoderLayer m(o);
    expect_init(*m.ptr(), n);
    Tensor x = leaf(n + "_x");
    Tensor mask = p[9] ? nn::TransformerImpl::generate_square_subsequent_mask(p[7]) : Tensor();
    Tensor out = m(x, mask, opt(n + "_kpm"));
    EXPECT_TRUE(tensors_close(out, get(n + "_out"), 1e-5, 1e-5));
    (out * get(n + "_g")).sum().backward();
    EXPECT_TRUE(tensors_close(x.grad(), get(n + "_dx"), 1e-4, 1e-5));
    expect_param_grads(*m.ptr(), n);
  }
}

TEST(TransformerLayersTest, DecoderLayerMatchesPyTorch) {
  for (std::string c : {"a", "b"}) {
    SCOPED_TRACE(c);
    const std::string n = "dec_" + c;
    auto p = fx().ints(n + "_params");  // [seed, d_model, nhead, ff, gelu, norm_first, batch_first, T, S, N]
    manual_seed(static_cast<uint64_t>(p[0]));
    auto o = nn::TransformerDecoderLayerOptions(p[1], p[2])
                 .dim_feedforward(p[3])
                 .dropout(0.0)
                 .norm_first(p[5] != 0)
                 .batch_first(p[6] != 0);
    if (p[4]) o.activation(troupe::kGELU);
    nn::TransformerDecoderLayer m(o);
    expect_init(*m.ptr(), n);
    Tensor tgt = leaf(n + "_tgt"), mem = leaf(n + "_mem");
    Tensor out = m(tgt, mem, nn::TransformerImpl::generate_square_subsequent_mask(p[7]), Tensor(), Tensor(),
                   get(n + "_mkpm"));
    EXPECT_TRUE(tensors_close(out, get(n + "_out"), 1e-5, 1e-5));
    (out * get(n + "_g")).sum().backward();
    EXPECT_TRUE(tensors_close(tgt.grad(), get(n + "_dtgt"), 1e-4, 1e-5));
    EXPECT_TRUE(tensors_close(mem.grad(), get(n + "_dmem"), 1e-4, 1e-5));
    expect_param_grads(*m.ptr(), n);
  }
}

TEST(TransformerLayersTest, EncoderStackAndTransformerMatchPyTorch) {
  manual_seed(90);
  nn::TransformerEncoderLayer layer(nn::TransformerEncoderLayerOptions(8, 2).dim_feedforward(16).dropout(0.0));
  nn::TransformerEncoder enc(nn::TransformerEncoderOptions(layer, 2).norm(nn::LayerNorm(nn::LayerNormOptions({8})).ptr()));
  expect_init(*enc.ptr(), "encstack");
  Tensor x = leaf("encstack_x");
  Tensor out = enc(x);
  EXPECT_TRUE(tensors_close(out, get("encstack_out"), 1e-5, 1e-5));
  (out * get("encstack_g")).sum().backward();
  EXPECT_TRUE(tensors_close(x.grad(), get("encstack_dx"), 1e-4, 1e-5));
  expect_param_grads(*enc.ptr(), "encstack");

  manual_seed(91);
  nn::Transformer tr(nn::TransformerOptions(8, 2, 2, 1).dim_feedforward(16).dropout(0.0));
  expect_init(*tr.ptr(), "transformer");
  Tensor src = leaf("transformer_src"), tgt = leaf("transformer_tgt");
  Tensor mask = nn::TransformerImpl::generate_square_subsequent_mask(3);
  EXPECT_TRUE(tensors_close(mask, get("transformer_tgt_mask"), 0, 0));
  Tensor y = tr(src, tgt, Tensor(), mask);
  EXPECT_TRUE(tensors_close(y, get("transformer_out"), 1e-5, 1e-5));
  (y * get("transformer_g")).sum().backward();
  EXPECT_TRUE(tensors_close(src.grad(), get("transformer_dsrc"), 1e-4, 1e-5));
  EXPECT_TRUE(tensors_close(tgt.grad(), get("transformer_dtgt"), 1e-4, 1e-5));
  expect_param_grads(*tr.ptr(), "transformer");
  expect_error([&] { tr(randn({5, 3, 8}), randn({3, 2, 8})); }, "the batch number of src and tgt must be equal");
  expect_error([&] { tr(randn({5, 2, 6}), randn({3, 2, 6})); },
               "the feature number of src and tgt must be equal to d_model");
}

TEST(TransformerLayersTest, PrintsAsPyTorch) {
  nn::TransformerEncoderLayer layer(nn::TransformerEncoderLayerOptions(8, 2).dim_feedforward(16).dropout(0.0));
  nn::TransformerEncoder enc(nn::TransformerEncoderOptions(layer, 2));
  const std::string layer_repr =
      "TransformerEncoderLayer(\n"
      "  (self_attn): MultiheadAttention(\n"
      "    (out_proj): NonDynamicallyQuantizableLinear(in_features=8, out_features=8, bias=True)\n"
      "  )\n"
      "  (linear1): Linear(in_features=8, out_features=16, bias=True)\n"
      "  (dropout): Dropout(p=0.0, inplace=False)\n"
      "  (linear2): Linear(in_features=16, out_features=8, bias=True)\n"
      "  (norm1): LayerNorm((8,), eps=1e-05, elementwise_affine=True)\n"
      "  (norm2): LayerNorm((8,), eps=1e-05, elementwise_affine=True)\n"
      "  (dropout1): Dropout(p=0.0, inplace=False)\n"
      "  (dropout2): Dropout(p=0.0, inplace=False)\n"
      ")";
  EXPECT_EQ(layer->repr(), layer_repr);  // the `# repr:` comment of enc_a (nn_transformer.txt)
  const std::string enc_repr = enc->repr();
  EXPECT_EQ(enc_repr.rfind("TransformerEncoder(\n  (layers): ModuleList(\n    (0): TransformerEncoderLayer(\n", 0), 0u);
  EXPECT_NE(enc_repr.find("\n  (norm): None\n)"), std::string::npos) << enc_repr;
  // the copies are independent
  auto p0 = enc->layers->ptr<nn::TransformerEncoderLayerImpl>(0);
  auto p1 = enc->layers->ptr<nn::TransformerEncoderLayerImpl>(1);
  EXPECT_FALSE(p0->linear1->weight.is_same(p1->linear1->weight));
  EXPECT_TRUE(equal(p0->linear1->weight, p1->linear1->weight));
}

// ---------------------------------------------------------------- scaled_dot_product_attention

TEST(ScaledDotProductAttentionTest, MatchesTheFormula) {
  for (int i = 0; i < 4; ++i) {
    SCOPED_TRACE(i);
    const std::string n = "sdpa_" + std::to_string(i);
    auto p = fx().ints(n + "_params");  // [mask kind, is_causal]
    Tensor q = leaf(n + "_q"), k = leaf(n + "_k"), v = leaf(n + "_v");
    Tensor out = F::scaled_dot_product_attention(q, k, v, opt(n + "_mask"), 0.0, p[1] != 0);
    EXPECT_TRUE(tensors_close(out, get(n + "_out"), 1e-12, 1e-12));
    (out * get(n + "_g")).sum().backward();
    EXPECT_TRUE(tensors_close(q.grad(), get(n + "_dq"), 1e-10, 1e-12));
    EXPECT_TRUE(tensors_close(k.grad(), get(n + "_dk"), 1e-10, 1e-12));
    EXPECT_TRUE(tensors_close(v.grad(), get(n + "_dv"), 1e-10, 1e-12));
  }
  Tensor q = randn({2, 3, 4});
  expect_error([&] { F::scaled_dot_product_attention(q, q, q, ones({3, 3}), 0.0, true); },
               "Explicit attn_mask should not be set when is_causal=True");
  // dropout 1 zeroes every weight
  EXPECT_TRUE(equal(F::scaled_dot_product_attention(q, q, q, Tensor(), 1.0), zeros({2, 3, 4})));
}

// ---------------------------------------------------------------- finite differences (float64)

TEST(TransformerGradcheck, AttentionAndLayers) {
  autograd::GradcheckOptions o;
  o.full_jacobian_max_outputs = 64;
  Tensor q = randn({2, 3, 4}, kFloat64).requires_grad_(true), k = randn({2, 5, 4}, kFloat64).requires_grad_(true),
         v = randn({2, 5, 3}, kFloat64).requires_grad_(true);
  Tensor mask = randn({3, 5}, kFloat64);
  EXPECT_TRUE(autograd::gradcheck(
      [&](const autograd::variable_list& in) {
        return autograd::variable_list{F::scaled_dot_product_attention(in[0], in[1], in[2], mask)};
      },
      {q, k, v}, o));
  EXPECT_TRUE(autograd::gradgradcheck(
      [&](const autograd::variable_list& in) {
        return autograd::variable_list{F::scaled_dot_product_attention(in[0], in[1], in[2], Tensor(), 0.0, true)};
      },
      {q, k.narrow(1, 0, 3).detach().requires_grad_(true), v.narrow(1, 0, 3).detach().requires_grad_(true)}, o));

  manual_seed(7);
  nn::MultiheadAttention mha(nn::MultiheadAttentionOptions(4, 2).kdim(3).vdim(5).add_bias_kv(true).dtype(kFloat64));
  Tensor mq = randn({3, 2, 4}, kFloat64).requires_grad_(true), mk = randn({2, 2, 3}, kFloat64).requires_grad_(true),
         mv = randn({2, 2, 5}, kFloat64).requires_grad_(true);
  Tensor kpm = tensor({{false, true}, {false, false}});  // (N, S): bias_k's column is appended inside
  std::vector<Tensor> inputs = {mq, mk, mv};
  for (const Tensor& p : mha->parameters()) inputs.push_back(p);
  EXPECT_TRUE(autograd::gradcheck(
      [&](const autograd::variable_list& in) {
        auto [out, w] = mha(in[0], in[1], in[2], kpm);
        return autograd::variable_list{out, w};
      },
      inputs, o));

  nn::TransformerDecoderLayer dec(
      nn::TransformerDecoderLayerOptions(4, 2).dim_feedforward(6).dropout(0.0).norm_first(true).activation(troupe::kGELU).dtype(kFloat64));
  Tensor tgt = randn({3, 2, 4}, kFloat64).requires_grad_(true), mem = randn({2, 2, 4}, kFloat64).requires_grad_(true);
  std::vector<Tensor> din = {tgt, mem};
  for (const Tensor& p : dec->parameters()) din.push_back(p);
  Tensor causal = nn::TransformerImpl::generate_square_subsequent_mask(3, kFloat64);
  EXPECT_TRUE(autograd::gradcheck(
      [&](const autograd::variable_list& in) { return autograd::variable_list{dec(in[0], in[1], causal)}; }, din, o));
}

}  // namespace
