// A character-level LSTM language model (Embedding -> 2-layer LSTM -> Linear) trained with Adam on a text
// that ships with Debian (the GNU GPL v3), then sampled. With `--ranks N` (or mpirun -np N) it trains data
// parallel: every rank draws its own windows and DistributedDataParallel averages the gradients.
//   Usage: char_lm [--steps N] [--target LOSS] [--text PATH] [--ranks N]   (exit 1 when the last 50
//   steps' mean cross-entropy stays above LOSS)
#include <troupe/troupe.h>
#include <troupe/tools/cli.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

using namespace troupe;
namespace F = troupe::nn::functional;

struct CharLMImpl : nn::Module {
  CharLMImpl(int64_t vocab, int64_t hidden) {
    embed = register_module("embed", nn::Embedding(vocab, 32));
    lstm = register_module("lstm", nn::LSTM(nn::LSTMOptions(32, hidden).num_layers(2).batch_first(true)));
    head = register_module("head", nn::Linear(hidden, vocab));
  }
  /// tokens (B, T) int64 -> logits (B, T, vocab)
  Tensor forward(const Tensor& tokens) { return head(std::get<0>(lstm(embed(tokens)))); }
  nn::Embedding embed{nullptr};
  nn::LSTM lstm{nullptr};
  nn::Linear head{nullptr};
};
TROUPE_MODULE(CharLM);

int main(int argc, char** argv) {
  int steps = 1000;
  double target = 0;
  std::string path = "/usr/share/common-licenses/GPL-3";
  cli::App app("char_lm", "A character-level LSTM language model trained on a text file.");
  cli::add_launch_flags(app);
  app.add_option("--steps", steps, "Adam steps")->check(cli::Positive);
  app.add_option("--target", target, "exit 1 when the last 50 steps' mean loss stays above this")
      ->check(cli::NonNegative);
  app.add_option("--text", path, "text to learn (at least 66 bytes)")
      ->check(cli::ReadableFile)
      ->check(CLI::Validator(
          [](std::string& p) -> std::string {  // windows of 64 + 1 characters are drawn from it
            std::ifstream f(p, std::ios::binary | std::ios::ate);
            const auto n = static_cast<long long>(f.tellg());
            return n >= 66 ? "" : p + " holds " + std::to_string(n) + " bytes; windows of 65 need at least 66";
          },
          "FILE"));
  cli::parse(app, argc, argv);
  int rc = 0;
  launch::run(argc, argv, [&](launch::Context& ctx) {
  std::ifstream in(path);
  if (!in) {
    if (ctx.rank == 0) std::cerr << "char_lm: cannot read " << path << "\n";
    rc = 2;
    return 0;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  // vocabulary: the bytes that occur
  std::vector<int64_t> index(256, -1);
  std::string chars;
  for (unsigned char c : text)
    if (index[c] < 0) {
      index[c] = static_cast<int64_t>(chars.size());
      chars.push_back(static_cast<char>(c));
    }
  std::vector<int64_t> ids;
  for (unsigned char c : text) ids.push_back(index[c]);
  const int64_t V = static_cast<int64_t>(chars.size()), T = 64, B = 32;
  const bool lead = ctx.rank == 0;
  if (lead)
    std::printf("text %s: %zu characters, vocabulary %lld; %d rank(s)\n", path.c_str(), text.size(),
                static_cast<long long>(V), ctx.size);

  manual_seed(0);  // the same initial weights everywhere (DDP also broadcasts rank 0's)
  CharLM model(V, 128);
  std::shared_ptr<parallel::DistributedDataParallel> ddp;
  if (ctx.size > 1) ddp = std::make_shared<parallel::DistributedDataParallel>(model.ptr(), ctx.world);
  manual_seed(1000 + ctx.rank);  // each rank its own windows
  optim::Adam opt(model->parameters(), optim::AdamOptions(3e-3));
  Tensor all = tensor(ids, TensorOptions().dtype(kInt64));
  double recent = 0;
  int n_recent = 0;
  for (int step = 1; step <= steps; ++step) {
    // B random windows of T + 1 characters: inputs and the next characters
    Tensor starts = randint(0, static_cast<int64_t>(ids.size()) - T - 1, {B});
    std::vector<Tensor> rows;
    for (int64_t s : starts.to_vector<int64_t>()) rows.push_back(all.narrow(0, s, T + 1));
    Tensor batch = stack(rows, 0);
    Tensor x = batch.narrow(1, 0, T), y = batch.narrow(1, 1, T);
    Tensor logits = ddp ? ddp->forward(x) : model(x);
    Tensor loss = F::cross_entropy(logits.reshape({B * T, V}), y.reshape({B * T}));
    opt.zero_grad();
    loss.backward();
    nn::utils::clip_grad_norm_(model->parameters(), 1.0);
    opt.step();
    const double l = loss.item<double>();
    if (step > steps - 50) {
      recent += l;
      ++n_recent;
    }
    if (lead && (step % 100 == 0 || step == 1)) std::printf("step %4d  loss %.3f\n", step, l);
  }
  const double final_loss = recent / std::max(1, n_recent);
  if (!lead) return 0;
  std::printf("mean loss of the last %d steps: %.3f (uniform guess: %.3f)\n", n_recent, final_loss,
              std::log(static_cast<double>(V)));

  // sample 200 characters after a prompt, feeding the state forward one character at a time
  {
    NoGradGuard ng;
    model->eval();
    const std::string prompt = "The GNU General Public License ";
    std::string out = prompt;
    std::vector<int64_t> p;
    for (unsigned char c : prompt) p.push_back(index[c] < 0 ? 0 : index[c]);
    Tensor tok = tensor(p, TensorOptions().dtype(kInt64)).unsqueeze(0);
    auto [h, state] = model->lstm(model->embed(tok));
    Tensor logits = model->head(h.select(1, h.size(1) - 1));
    for (int i = 0; i < 200; ++i) {
      Tensor probs = softmax(logits / 0.7, -1);
      // inverse-CDF draw from the distribution
      std::vector<float> pr = probs.to_vector<float>();
      double u = rand({1}).item<double>(), acc = 0;
      int64_t next = V - 1;
      for (int64_t k = 0; k < V; ++k) {
        acc += pr[static_cast<size_t>(k)];
        if (u < acc) {
          next = k;
          break;
        }
      }
      out.push_back(chars[static_cast<size_t>(next)]);
      Tensor t = tensor(std::vector<int64_t>{next}, TensorOptions().dtype(kInt64)).unsqueeze(0);
      std::tie(h, state) = model->lstm(model->embed(t), state);
      logits = model->head(h.select(1, 0));
    }
    std::printf("sample:\n%s\n", out.c_str());
  }
  if (target > 0 && final_loss > target) {
    std::printf("char_lm: loss %.3f did not reach the target %.3f\n", final_loss, target);
    rc = 1;
  }
  return 0;
  });
  return rc;
}
