// data::WorkerException (libtorch's): what a loader throws in the calling thread when a worker's
// get_batch threw; it keeps the original exception.
#pragma once

#include <exception>
#include <string>

namespace troupe::data {

/// An exception thrown by a dataset inside a loader's worker thread.
struct WorkerException : public std::exception {
  explicit WorkerException(std::exception_ptr original)
      : original_exception(std::move(original)),
        message("Caught exception in DataLoader worker thread. Original message: ") {
    try {
      std::rethrow_exception(original_exception);
    } catch (const std::exception& e) {
      message += e.what();
    } catch (...) {
      message += "(not a std::exception)";
    }
  }

  const char* what() const noexcept override { return message.c_str(); }

  /// The exception the worker caught.
  std::exception_ptr original_exception;
  /// "Caught exception in DataLoader worker thread. Original message: <what()>".
  std::string message;
};

}  // namespace troupe::data
