// ParallelEnv (rl/parallel_env.h): worker environments stepped on a pool of threads.
#include <troupe/rl/parallel_env.h>

#include <condition_variable>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <thread>

#include <troupe/tensor/ops.h>

namespace troupe::rl {

// One thread per worker past the first; run_all hands them a job and a generation number, runs worker 0
// itself and waits until every worker has finished the generation.
struct ParallelEnv::Pool {
  std::mutex mu;
  std::condition_variable start, finished;
  const std::function<void(size_t)>* job = nullptr;
  uint64_t generation = 0;
  size_t pending = 0;
  bool stop = false;
  std::vector<std::exception_ptr> errors;
  std::vector<std::thread> threads;

  void loop(size_t w) {
    uint64_t seen = 0;
    while (true) {
      const std::function<void(size_t)>* fn;
      {
        std::unique_lock<std::mutex> lk(mu);
        start.wait(lk, [&] { return stop || generation != seen; });
        if (stop) return;
        seen = generation;
        fn = job;
      }
      std::exception_ptr e;
      try {
        (*fn)(w);
      } catch (...) {
        e = std::current_exception();
      }
      std::lock_guard<std::mutex> g(mu);
      errors[w] = e;
      if (--pending == 0) finished.notify_one();
    }
  }
};

namespace {
const Key& key_reset() { static const Key k("_reset"); return k; }
}  // namespace

ParallelEnv::ParallelEnv(int64_t num_workers, const std::function<std::shared_ptr<EnvBase>()>& create_env_fn)
    : EnvBase({0}), pool_(std::make_unique<Pool>()) {
  if (num_workers <= 0) throw std::invalid_argument("[ParallelEnv] num_workers must be positive, got " + std::to_string(num_workers));
  if (!create_env_fn) throw std::invalid_argument("[ParallelEnv] no create_env_fn");
  offsets_.push_back(0);
  for (int64_t w = 0; w < num_workers; ++w) {
    auto env = create_env_fn();
    if (!env) throw std::invalid_argument("[ParallelEnv] create_env_fn returned no environment for worker " + std::to_string(w));
    if (env->batch_size().size() != 1)
      throw std::invalid_argument("[ParallelEnv] worker " + std::to_string(w) + "'s environment has " +
                                  std::to_string(env->batch_size().size()) + " batch dims; one (its copies) is needed");
    offsets_.push_back(offsets_.back() + env->batch_size()[0]);
    envs_.push_back(std::move(env));
  }
  batch_size_ = {offsets_.back()};
  pool_->errors.resize(envs_.size());
  for (size_t w = 1; w < envs_.size(); ++w) pool_->threads.emplace_back([this, w] { pool_->loop(w); });
}

ParallelEnv::~ParallelEnv() {
  {
    std::lock_guard<std::mutex> g(pool_->mu);
    pool_->stop = true;
  }
  pool_->start.notify_all();
  for (auto& t : pool_->threads) t.join();
}

void ParallelEnv::run_all(const std::function<void(size_t)>& fn) {
  Pool& p = *pool_;
  {
    std::lock_guard<std::mutex> g(p.mu);
    p.job = &fn;
    p.pending = envs_.size() - 1;
    ++p.generation;
    std::fill(p.errors.begin(), p.errors.end(), nullptr);
  }
  p.start.notify_all();
  std::exception_ptr first;
  try {
    fn(0);
  } catch (...) {
    first = std::current_exception();
  }
  std::unique_lock<std::mutex> lk(p.mu);
  p.finished.wait(lk, [&] { return p.pending == 0; });  // the workers' steps are bounded computations
  size_t failed = 0;
  if (!first)
    for (size_t w = 1; w < p.errors.size() && !first; ++w)
      if (p.errors[w]) {
        first = p.errors[w];
        failed = w;
      }
  if (!first) return;
  try {
    std::rethrow_exception(first);
  } catch (const std::exception& e) {
    throw std::runtime_error("[ParallelEnv] worker " + std::to_string(failed) + " (" + envs_[failed]->name() + ") failed: " + e.what());
  }
}

TensorDict ParallelEnv::reset(const std::optional<TensorDict>& td) {
  std::vector<TensorDict> out(envs_.size());
  run_all([&](size_t w) {
    if (td) out[w] = envs_[w]->reset(td->slice(0, offsets_[w], offsets_[w + 1]));
    else out[w] = envs_[w]->reset();
  });
  return TensorDict::cat(out, 0);
}

TensorDict ParallelEnv::step(const TensorDict& td) {
  std::vector<TensorDict> out(envs_.size());
  run_all([&](size_t w) { out[w] = envs_[w]->step(td.slice(0, offsets_[w], offsets_[w + 1])); });
  return TensorDict::cat(out, 0);
}

std::pair<TensorDict, TensorDict> ParallelEnv::step_and_maybe_reset(const TensorDict& td) {
  std::vector<TensorDict> full(envs_.size()), root(envs_.size());
  run_all([&](size_t w) {
    full[w] = envs_[w]->step(td.slice(0, offsets_[w], offsets_[w + 1]));
    root[w] = step_mdp(full[w]);
    Tensor mask = done_mask(root[w]);
    if (any_done(mask)) {
      TensorDict request = root[w];
      request.set(key_reset(), mask);
      root[w].update(envs_[w]->reset(request));
    }
  });
  return {TensorDict::cat(full, 0), TensorDict::cat(root, 0)};
}

uint64_t ParallelEnv::set_seed(uint64_t seed) {
  for (auto& e : envs_) seed = e->set_seed(seed);
  return seed;
}

Tensor ParallelEnv::rand_action() {
  std::vector<Tensor> parts;
  for (auto& e : envs_) parts.push_back(e->rand_action());
  return cat(parts, 0);
}

std::string ParallelEnv::name() const {
  return "ParallelEnv(" + std::to_string(envs_.size()) + " x " + envs_.front()->name() + ")";
}

}  // namespace troupe::rl
