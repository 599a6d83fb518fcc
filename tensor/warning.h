// Warnings as c10 raises them: TROUPE_WARN(...) (libtorch's TORCH_WARN) builds a Warning and hands it to
// the calling thread's WarningHandler; the default one prints `UserWarning: <msg>` to std::cerr, and a
// test or an application swaps in its own with WarningUtils::WarningHandlerGuard.
//
//   struct Collect : troupe::WarningHandler {
//     std::vector<std::string> msgs;
//     void process(const troupe::Warning& w) override { msgs.push_back(w.msg()); }
//   } collect;
//   troupe::WarningUtils::WarningHandlerGuard guard(&collect);
#pragma once

#include <atomic>
#include <cstdint>
#include <sstream>
#include <string>

namespace troupe {

namespace detail {
inline void str_append(std::ostringstream&) {}
template <typename T, typename... Rest>
void str_append(std::ostringstream& os, const T& v, const Rest&... rest) {
  os << v;
  str_append(os, rest...);
}
/// The arguments streamed one after another into a string (c10::str).
template <typename... Args>
std::string str(const Args&... args) {
  std::ostringstream os;
  str_append(os, args...);
  return os.str();
}
}  // namespace detail

/// Where a warning was raised (c10::SourceLocation).
struct SourceLocation {
  const char* function;
  const char* file;
  uint32_t line;
};

/// One warning: its text, where it was raised, and whether it is a DeprecationWarning (else a
/// UserWarning), as c10::Warning.
class Warning {
 public:
  Warning(const SourceLocation& loc, std::string msg, bool verbatim = false, bool deprecation = false)
      : loc_(loc), msg_(std::move(msg)), verbatim_(verbatim), deprecation_(deprecation) {}
  const SourceLocation& source_location() const { return loc_; }
  const std::string& msg() const { return msg_; }
  bool verbatim() const { return verbatim_; }
  bool is_deprecation() const { return deprecation_; }

 private:
  SourceLocation loc_;
  std::string msg_;
  bool verbatim_;
  bool deprecation_;
};

/// Receives warnings (c10::WarningHandler). The base class prints `UserWarning: <msg>` (or
/// `DeprecationWarning: <msg>`) and a newline to std::cerr.
class WarningHandler {
 public:
  virtual ~WarningHandler() = default;
  virtual void process(const Warning& warning);
};

namespace WarningUtils {
/// Sets the calling thread's handler (null restores the base handler), as c10's thread-local one.
void set_warning_handler(WarningHandler* handler) noexcept;
/// The calling thread's handler.
WarningHandler* get_warning_handler() noexcept;

/// Installs a handler for its scope and restores the previous one.
class WarningHandlerGuard {
 public:
  explicit WarningHandlerGuard(WarningHandler* handler) : prev_(get_warning_handler()) { set_warning_handler(handler); }
  ~WarningHandlerGuard() { set_warning_handler(prev_); }
  WarningHandlerGuard(const WarningHandlerGuard&) = delete;
  WarningHandlerGuard& operator=(const WarningHandlerGuard&) = delete;

 private:
  WarningHandler* prev_;
};

/// When true, TROUPE_WARN_ONCE warns every time (c10's set_warnAlways; for tests).
void set_warnAlways(bool enabled) noexcept;
bool get_warnAlways() noexcept;
}  // namespace WarningUtils

/// Hands `w` to the calling thread's handler (c10::warn).
void warn(const Warning& w);

}  // namespace troupe

/// Raises a UserWarning whose text is the arguments streamed together (libtorch's TORCH_WARN).
#define TROUPE_WARN(...) \
  ::troupe::warn(::troupe::Warning({__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, ::troupe::detail::str(__VA_ARGS__)))

/// TROUPE_WARN the first time this line runs in the process (Python's default warning filter), or every
/// time under WarningUtils::set_warnAlways(true) (libtorch's TORCH_WARN_ONCE).
#define TROUPE_WARN_ONCE(...)                                                             \
  do {                                                                                    \
    static std::atomic<bool> troupe_warned_once_{false};                                  \
    if (!troupe_warned_once_.exchange(true) || ::troupe::WarningUtils::get_warnAlways())  \
      TROUPE_WARN(__VA_ARGS__);                                                           \
  } while (false)

/// A DeprecationWarning (libtorch's TORCH_WARN_DEPRECATION).
#define TROUPE_WARN_DEPRECATION(...)                                                                \
  ::troupe::warn(::troupe::Warning({__func__, __FILE__, static_cast<uint32_t>(__LINE__)},           \
                                   ::troupe::detail::str(__VA_ARGS__), false, /*deprecation=*/true))
