// The soak job (scripts/soak.sh): every rank trains the digits MLP data-parallel (DDP over the world group)
// for --seconds, while actors carry traffic beside it: rank 0 feeds an EMA averager actor on the last rank
// after every step (never waiting), and every rank calls an echo actor on the next rank every step. Every
// --sample seconds each rank's resident memory is gathered and rank 0 prints one line; at the end every
// rank's parameters are checksummed and compared. Output (rank 0):
//   [soak] sample K t=SECONDS steps=N rss_mb=R0,R1,...
//   [soak] done: steps=N calls=C ema_applied=A replicas_identical=yes|no
// Runs the same with --ranks N (threads: one process, so every rank reads the same resident size).
#include <troupe/troupe.h>

#include "../../examples/digits_models.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <string>
#include <vector>

#include <unistd.h>

using namespace troupe;

namespace {

struct Echo : actors::Actor {
  Echo() {
    handle("echo", [](Tensor t) { return t + 1.0; });
  }
};

// Resident set size of this process in MiB (/proc/self/statm: pages).
double rss_mb() {
  std::ifstream f("/proc/self/statm");
  long pages_total = 0, pages_resident = 0;
  f >> pages_total >> pages_resident;
  return static_cast<double>(pages_resident) * static_cast<double>(sysconf(_SC_PAGESIZE)) / (1024.0 * 1024.0);
}

uint64_t checksum(const nn::StateDict& sd) {
  uint64_t h = 1469598103934665603ull;
  for (const auto& [k, v] : sd) {
    Tensor c = v.contiguous();
    const auto* p = static_cast<const unsigned char*>(c.data_ptr());
    for (size_t i = 0, n = c.numel() * c.element_size(); i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  }
  return h;
}

long positive_flag(int argc, char** argv, const char* name, long fallback) {
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) != name) continue;
    char* end = nullptr;
    long v = i + 1 < argc ? std::strtol(argv[i + 1], &end, 10) : 0;
    if (i + 1 >= argc || *end != '\0' || v <= 0) {
      std::fprintf(stderr, "soak_train: %s takes a positive whole number of seconds, got '%s'\n", name,
                   i + 1 < argc ? argv[i + 1] : "");
      std::exit(2);
    }
    return v;
  }
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  const long seconds = positive_flag(argc, argv, "--seconds", 60);
  const long sample_every = positive_flag(argc, argv, "--sample", 10);
  actors::register_actor<Echo>("SoakEcho");
  actors::register_module_factory("DigitsMLP", [](const actors::List&) -> nn::ModulePtr { return digits::make_mlp().ptr(); });
  return launch::run(argc, argv, [&](launch::Context& ctx) {
    const bool lead = ctx.rank == 0;
    auto& rt = ctx.actors();
    rt.spawn_on(ctx.rank, "soak.echo." + std::to_string(ctx.rank), "SoakEcho");
    ctx.world->barrier();
    auto next = rt.lookup("soak.echo." + std::to_string((ctx.rank + 1) % ctx.size));

    auto digits_set = data::Digits::load(data::default_digits_path());
    data::DataLoader loader(digits_set, data::DataLoaderOptions().batch_size(16 * ctx.size).shuffle(true).drop_last(true).seed(7));
    nn::Sequential model{nullptr};
    {
      static std::mutex init;  // ranks on threads share the default generator
      std::lock_guard<std::mutex> lock(init);
      manual_seed(0);
      model = digits::make_mlp();
    }
    auto ddp = std::make_shared<parallel::DistributedDataParallel>(model, ctx.world);
    optim::SGD opt(ddp->parameters(), optim::SGDOptions(0.01).momentum(0.9));
    nn::CrossEntropyLoss loss_fn;
    std::optional<actors::Averager> ema;
    if (lead) {
      actors::AveragerOptions o;
      o.in_flight(2).factory = "DigitsMLP";
      ema.emplace(actors::Averager::spawn(rt, ctx.size - 1, model.ptr(), o.ema(0.999), "soak.ema"));
    }

    const auto t0 = std::chrono::steady_clock::now();
    long steps = 0, calls = 0, samples = 0;
    double next_sample = 0;
    bool stop = false;
    while (!stop) {
      for (auto& batch : loader) {
        const int64_t rows = batch.target.size(0) / ctx.size;
        Tensor x = batch.data.narrow(0, ctx.rank * rows, rows);
        Tensor y = batch.target.narrow(0, ctx.rank * rows, rows);
        opt.zero_grad();
        loss_fn((*ddp)(x), y).backward();
        opt.step();
        ++steps;
        if (ema) ema->update(*model);
        Tensor e = next.request<Tensor>("echo", full({64}, static_cast<double>(steps))).get();
        if (e.sum().item<double>() != 64.0 * static_cast<double>(steps + 1)) {
          std::printf("[soak] rank %d WRONG echo at step %ld\n", ctx.rank, steps);
          return 1;
        }
        ++calls;
        // rank 0's clock decides, for every rank: 0 go on, 1 take a sample, 2 take the last one and stop
        const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        Tensor flag = full({1}, lead ? (t >= static_cast<double>(seconds) ? 2.0 : (t >= next_sample ? 1.0 : 0.0)) : 0.0);
        ctx.world->all_reduce(flag);
        const int f = static_cast<int>(flag.item<double>());
        if (f >= 1) {
          Tensor mine = full({1}, rss_mb(), kFloat64);
          std::vector<Tensor> all(ctx.size);
          for (auto& a : all) a = zeros({1}, kFloat64);
          ctx.world->all_gather(all, mine);
          if (lead) {
            std::string line;
            for (int r = 0; r < ctx.size; ++r) {
              char buf[32];
              std::snprintf(buf, sizeof buf, "%s%.1f", r ? "," : "", all[r].item<double>());
              line += buf;
            }
            std::printf("[soak] sample %ld t=%.1f steps=%ld rss_mb=%s\n", samples, t, steps, line.c_str());
            std::fflush(stdout);
          }
          ++samples;
          next_sample += static_cast<double>(sample_every);
        }
        if (f == 2) {
          stop = true;
          break;
        }
      }
    }
    std::size_t applied = 0;
    if (ema) {
      ema->flush();
      applied = ema->applied_versions().size();
    }
    Tensor mine = full({1}, static_cast<double>(checksum(model->state_dict()) >> 11), kFloat64);  // exact in a double
    std::vector<Tensor> all(ctx.size);
    for (auto& a : all) a = zeros({1}, kFloat64);
    ctx.world->all_gather(all, mine);
    bool same = true;
    for (auto& a : all) same = same && a.item<double>() == mine.item<double>();
    if (lead) {
      std::printf("[soak] done: steps=%ld calls=%ld ema_applied=%zu replicas_identical=%s\n", steps, calls, applied,
                  same ? "yes" : "no");
      std::fflush(stdout);
    }
    ctx.world->barrier();
    return same ? 0 : 1;
  });
}
