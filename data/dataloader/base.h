// DataLoaderBase (libtorch's torch::data::DataLoaderBase): the epoch machinery of make_data_loader's
// loaders. begin() resets the sampler and, with workers, queues up to max_jobs batch requests; each
// worker thread owns a copy of the dataset and answers requests with get_batch; next() hands batches
// back in request order (enforce_ordering) or as they finish, queueing one more request per batch.
// Without workers, the calling thread calls get_batch itself when a batch is asked for.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <troupe/data/dataloader_options.h>
#include <troupe/data/iterator.h>
#include <troupe/data/worker_exception.h>

namespace troupe::data {

/// The base of StatelessDataLoader; Dataset's get_batch takes a BatchRequest and returns a Batch.
template <typename Dataset, typename Batch, typename BatchRequest>
class DataLoaderBase {
 public:
  using BatchType = Batch;
  using BatchRequestType = BatchRequest;

  /// Throws std::invalid_argument for batch_size <= 0.
  DataLoaderBase(DataLoaderOptions options, std::unique_ptr<Dataset> main_thread_dataset = nullptr)
      : options_(checked(options)), main_thread_dataset_(std::move(main_thread_dataset)) {}
  DataLoaderBase(const DataLoaderBase&) = delete;
  DataLoaderBase& operator=(const DataLoaderBase&) = delete;
  /// Stops and joins the workers.
  virtual ~DataLoaderBase() { join(); }

  /// Starts an epoch. Throws while an earlier epoch still has requests in flight (left with a break).
  Iterator<Batch> begin() {
    if (in_flight_ != 0)
      throw std::runtime_error(
          "Attempted to get a new DataLoader iterator while another iterator is not yet exhausted");
    reset();
    return Iterator<Batch>([this] { return this->next(); });
  }
  /// The end of any epoch.
  Iterator<Batch> end() { return Iterator<Batch>(); }

  /// Discards outstanding requests, stops the workers and waits for them (the destructor does it too).
  void join() {
    if (joined_) return;
    drain();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (size_t i = 0; i < workers_.size(); ++i) jobs_.push_back(Job{std::nullopt, 0, /*quit=*/true});
    }
    job_ready_.notify_all();
    for (auto& w : workers_) w.join();
    joined_ = true;
  }

  /// The options with defaults resolved.
  const FullDataLoaderOptions& options() const noexcept { return options_; }

 protected:
  struct Job {
    std::optional<BatchRequest> request;
    size_t sequence_number = 0;
    bool quit = false;
  };
  struct Result {
    std::optional<Batch> batch;
    std::exception_ptr exception;
  };

  /// The next batch request of the epoch, or nullopt when it is over.
  virtual std::optional<BatchRequest> get_batch_request() = 0;

  /// Starts an epoch: drops what an earlier one left, then queues max_jobs requests (with workers).
  virtual void reset() {
    drain();
    sequence_number_ = 0;
    next_sequence_number_ = 0;
    if (options_.workers > 0) prefetch(options_.max_jobs);
  }

  /// Queues up to `requested_jobs` requests for the workers.
  void prefetch(size_t requested_jobs) {
    for (size_t i = 0; i < requested_jobs; ++i) {
      auto request = get_batch_request();
      if (!request) break;
      push_job(std::move(*request));
    }
  }

  /// The next batch, or nullopt at the end of the epoch; a worker's exception is rethrown as
  /// WorkerException.
  std::optional<Batch> next() {
    if (options_.workers > 0) {
      while (auto result = pop_result()) {
        if (result->exception) throw WorkerException(result->exception);
        if (result->batch) {
          prefetch(1);
          return std::move(result->batch);
        }
      }
      return std::nullopt;
    }
    if (auto request = get_batch_request()) return main_thread_dataset_->get_batch(std::move(*request));
    return std::nullopt;
  }

  /// A worker's loop over the job queue, with its own copy of the dataset.
  void worker_thread(Dataset& dataset) {
    for (;;) {
      Job job;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        job_ready_.wait(lock, [this] { return !jobs_.empty(); });
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      if (job.quit) return;
      Result result;
      try {
        result.batch = dataset.get_batch(std::move(*job.request));
      } catch (...) {
        result.exception = std::current_exception();
      }
      {
        std::lock_guard<std::mutex> lock(mutex_);
        results_.emplace(job.sequence_number, std::move(result));
      }
      result_ready_.notify_one();
    }
  }

  FullDataLoaderOptions options_;
  std::unique_ptr<Dataset> main_thread_dataset_;
  std::vector<std::thread> workers_;

 private:
  static FullDataLoaderOptions checked(const DataLoaderOptions& options) {
    if (options.batch_size() <= 0)
      throw std::invalid_argument("batch_size should be a positive integer value, but got batch_size=" +
                                  std::to_string(options.batch_size()));
    return FullDataLoaderOptions(options);
  }

  void push_job(BatchRequest request) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      jobs_.push_back(Job{std::move(request), sequence_number_++, false});
    }
    ++in_flight_;
    job_ready_.notify_one();
  }

  /// The next finished request (the next in order with enforce_ordering), or nullopt when none is in flight.
  std::optional<Result> pop_result() {
    if (in_flight_ == 0) return std::nullopt;
    std::unique_lock<std::mutex> lock(mutex_);
    const bool ordered = options_.enforce_ordering;
    auto ready = [&] { return ordered ? results_.count(next_sequence_number_) > 0 : !results_.empty(); };
    if (options_.timeout) {
      if (!result_ready_.wait_for(lock, *options_.timeout, ready))
        throw std::runtime_error("Timeout in DataLoader queue while waiting for next batch (timeout was " +
                                 std::to_string(options_.timeout->count()) + " ms)");
    } else {
      result_ready_.wait(lock, ready);
    }
    auto it = ordered ? results_.find(next_sequence_number_) : results_.begin();
    std::optional<Result> result(std::in_place, std::move(it->second));
    results_.erase(it);
    --in_flight_;
    if (ordered) ++next_sequence_number_;
    return result;
  }

  /// Drops queued requests and waits for the running ones, discarding their results.
  void drain() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (auto it = jobs_.begin(); it != jobs_.end();) {
      if (it->quit) {
        ++it;
      } else {
        it = jobs_.erase(it);
        --in_flight_;
      }
    }
    result_ready_.wait(lock, [this] { return results_.size() == in_flight_; });
    results_.clear();
    in_flight_ = 0;
  }

  std::mutex mutex_;
  std::condition_variable job_ready_;
  std::condition_variable result_ready_;
  std::deque<Job> jobs_;
  std::map<size_t, Result> results_;  // by sequence number
  size_t in_flight_ = 0;              // requests queued or running whose result next() has not taken
  size_t sequence_number_ = 0;
  size_t next_sequence_number_ = 0;
  bool joined_ = false;
};

}  // namespace troupe::data
