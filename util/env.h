#pragma once
// Environment variables read strictly: a value that is set but is not what the variable takes is an
// error naming the variable and its text, never a silent fallback (TROUPE_ACTOR_TIMEOUT=abc used to
// mean 60 s; atoi turned "4k" into 4).

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>

namespace troupe::util {

/// The text of environment variable `name`, or nullopt when it is unset or empty.
inline std::optional<std::string> env_text(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

/// The whole number in `name`, or `fallback` when unset or empty. Throws std::invalid_argument
/// ("TROUPE_X='4k': expected a whole number >= 1") when the text is not a whole number in [lo, hi].
inline int64_t env_int(const char* name, int64_t fallback, int64_t lo = INT64_MIN, int64_t hi = INT64_MAX) {
  auto t = env_text(name);
  if (!t) return fallback;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(t->c_str(), &end, 10);
  auto bad = [&] {
    std::string want = "a whole number";
    if (lo != INT64_MIN) want += " >= " + std::to_string(lo);
    if (hi != INT64_MAX) want += (lo != INT64_MIN ? " and <= " : " <= ") + std::to_string(hi);
    return std::invalid_argument(std::string(name) + "='" + *t + "': expected " + want);
  };
  if (end == t->c_str() || *end != '\0' || errno == ERANGE || v < lo || v > hi) throw bad();
  return v;
}

/// The number in `name` (decimal, e.g. "0.5" or "30"), or `fallback` when unset or empty. Throws
/// std::invalid_argument naming the variable and its text unless it is a finite number > 0 (when
/// `positive`) or >= 0.
inline double env_number(const char* name, double fallback, bool positive = true) {
  auto t = env_text(name);
  if (!t) return fallback;
  char* end = nullptr;
  const double v = std::strtod(t->c_str(), &end);
  if (end == t->c_str() || *end != '\0' || !std::isfinite(v) || (positive ? v <= 0 : v < 0))
    throw std::invalid_argument(std::string(name) + "='" + *t + "': expected a " +
                                (positive ? "positive" : "non-negative") + " number");
  return v;
}

}  // namespace troupe::util
