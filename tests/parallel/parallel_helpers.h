// Helpers shared by the parallel test files: run a function on N local ranks, and read an error's text.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include <troupe/comm/comm.h>

namespace troupe::parallel_test {

/// Runs fn on n local ranks (60 s group timeout) and returns what each rank's fn returned.
template <class R>
std::vector<R> on_local_ranks(int n, const std::function<R(comm::ProcessGroupPtr)>& fn) {
  std::vector<R> out(static_cast<size_t>(n));
  comm::GroupOptions o;
  o.timeout = std::chrono::seconds(60);
  comm::run_local(n, [&](comm::ProcessGroupPtr pg) { out[static_cast<size_t>(pg->rank())] = fn(pg); }, o);
  return out;
}

/// The text of what f throws, or "<no exception>".
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "<no exception>";
}

/// s contains part.
inline bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace troupe::parallel_test
