// The warning handlers: the base handler that prints to std::cerr and the thread-local current one.
#include "warning.h"

#include <iostream>

namespace troupe {

namespace {
WarningHandler* base_handler() {
  static WarningHandler handler;
  return &handler;
}
thread_local WarningHandler* t_handler = nullptr;  // null: the base handler
std::atomic<bool> g_warn_always{false};
}  // namespace

void WarningHandler::process(const Warning& w) {
  std::cerr << (w.is_deprecation() ? "DeprecationWarning: " : "UserWarning: ") << w.msg() << "\n";
}

namespace WarningUtils {
void set_warning_handler(WarningHandler* handler) noexcept { t_handler = handler; }
WarningHandler* get_warning_handler() noexcept { return t_handler ? t_handler : base_handler(); }
void set_warnAlways(bool enabled) noexcept { g_warn_always = enabled; }
bool get_warnAlways() noexcept { return g_warn_always; }
}  // namespace WarningUtils

void warn(const Warning& w) { WarningUtils::get_warning_handler()->process(w); }

}  // namespace troupe
