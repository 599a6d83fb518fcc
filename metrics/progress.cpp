// ProgressBar: formatting (format_meter, a pure function) and drawing on a terminal or as log lines.
#include <troupe/metrics/progress.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include <unistd.h>

namespace troupe::metrics {

namespace {

// The partial-block characters of a bar cell, eighths 1..7, and the full block (UTF-8).
const char* const kEighths[] = {"", "▏", "▎", "▍", "▌", "▋", "▊", "▉"};
const char* const kFull = "█";

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// "3.10epoch/s", or "2.50s/epoch" below one count a second (tqdm's rate_fmt).
std::string rate_text(double rate, const std::string& unit) {
  if (!(rate > 0) || !std::isfinite(rate)) return "?" + unit + "/s";
  if (rate >= 1) return fmt("%.2f", rate) + unit + "/s";
  return fmt("%.2f", 1 / rate) + "s/" + unit;
}

// Columns a UTF-8 string takes on a terminal (every code point one column).
int display_width(const std::string& s) {
  int w = 0;
  for (unsigned char c : s)
    if ((c & 0xC0) != 0x80) ++w;
  return w;
}

}  // namespace

std::string ProgressBar::format_interval(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  auto t = static_cast<int64_t>(seconds);
  const int64_t h = t / 3600, m = t / 60 % 60, s = t % 60;
  char buf[48];
  if (h) std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", static_cast<long long>(h), static_cast<long long>(m),
                       static_cast<long long>(s));
  else std::snprintf(buf, sizeof buf, "%02lld:%02lld", static_cast<long long>(m), static_cast<long long>(s));
  return buf;
}

std::string ProgressBar::format_meter(int64_t n, int64_t total, double elapsed, int ncols, const std::string& desc,
                                      const std::string& unit, const std::string& postfix) {
  const double rate = elapsed > 0 ? static_cast<double>(n) / elapsed : 0;
  const std::string prefix = desc.empty() ? "" : desc + ": ";
  const std::string tail = postfix.empty() ? "" : ", " + postfix;
  if (total <= 0) {  // unknown total: count, elapsed, rate
    return prefix + std::to_string(n) + unit + " [" + format_interval(elapsed) + ", " + rate_text(rate, unit) + tail +
           "]";
  }
  const double frac = std::clamp(static_cast<double>(n) / static_cast<double>(total), 0.0, 1.0);
  const double remaining = rate > 0 ? static_cast<double>(std::max<int64_t>(total - n, 0)) / rate : NAN;
  const std::string pct = fmt("%3.0f", std::floor(frac * 100)) + "%";
  const std::string r_bar = " " + std::to_string(n) + "/" + std::to_string(total) + " [" + format_interval(elapsed) +
                            "<" + format_interval(remaining) + ", " + rate_text(rate, unit) + tail + "]";
  if (ncols <= 0) return prefix + fmt("%.0f", std::floor(frac * 100)) + "%" + r_bar;
  const std::string l_bar = prefix + pct + "|";
  const int width = std::max(1, ncols - 2 - display_width(l_bar) - display_width(r_bar));  // the closing '|' and one free column
  const auto eighths = static_cast<int64_t>(frac * width * 8);
  const int64_t full = eighths / 8, part = eighths % 8;
  std::string bar;
  for (int64_t i = 0; i < full; ++i) bar += kFull;
  int64_t used = full;
  if (full < width) {
    bar += part ? kEighths[part] : " ";
    ++used;
  }
  bar.append(static_cast<size_t>(width - used), ' ');
  return l_bar + bar + "|" + r_bar;
}

ProgressBar::ProgressBar(int64_t total, ProgressOptions options)
    : total_(total), options_(std::move(options)), start_(std::chrono::steady_clock::now()), last_draw_(start_) {
  tty_ = options_.tty() ? *options_.tty() : (options_.file() && isatty(fileno(options_.file())));
  if (options_.disable() || !options_.file()) closed_ = true;
  else if (tty_) draw(false);
}

ProgressBar::~ProgressBar() { close(); }

double ProgressBar::elapsed() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

int ProgressBar::columns() const {
  if (options_.ncols() > 0) return options_.ncols();
  if (const char* c = std::getenv("COLUMNS")) {
    const int v = std::atoi(c);
    if (v > 20) return v;
  }
  return 80;
}

void ProgressBar::update(int64_t n) {
  if (closed_) return;
  n_ += n;
  const double since = std::chrono::duration<double>(std::chrono::steady_clock::now() - last_draw_).count();
  const bool done = total_ > 0 && n_ >= total_;
  if (tty_ ? (since >= options_.mininterval() || done) : since >= options_.log_interval()) draw(false);
}

void ProgressBar::set_postfix(std::string postfix) { postfix_ = std::move(postfix); }

void ProgressBar::write(const std::string& line, std::FILE* to) {
  if (!closed_ && tty_) {
    std::fputs("\r\033[K", options_.file());
    std::fflush(options_.file());
  }
  std::fputs(line.c_str(), to);
  std::fputc('\n', to);
  std::fflush(to);
  if (!closed_ && tty_) draw(false);
}

void ProgressBar::draw(bool final) {
  std::FILE* f = options_.file();
  last_draw_ = std::chrono::steady_clock::now();
  last_drawn_n_ = n_;
  const std::string text =
      format_meter(n_, total_, elapsed(), tty_ ? columns() : 0, options_.desc(), options_.unit(), postfix_);
  if (tty_) std::fprintf(f, "\r%s\033[K%s", text.c_str(), final ? "\n" : "");
  else std::fprintf(f, "%s\n", text.c_str());
  std::fflush(f);
}

void ProgressBar::close() {
  if (closed_) return;
  // The final state: always on a terminal; as a log line unless the last line already showed it.
  if (tty_ || last_drawn_n_ != n_) draw(true);
  closed_ = true;
}

}  // namespace troupe::metrics
