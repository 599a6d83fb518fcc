// ProgressBar: tqdm's bar for long loops (epochs, collector frames, benchmark cases). On a terminal
// it redraws one line in place (count, percentage, rate, elapsed and remaining time); when its stream
// is not a terminal (CI logs, pipes) it prints one plain line every `log_interval` seconds and one at
// the end, so logs stay readable.
//
//   metrics::ProgressBar bar(epochs, metrics::ProgressOptions().desc("train").unit("epoch"));
//   for (int e = 0; e < epochs; ++e) {
//     ...
//     bar.set_postfix("loss " + std::to_string(loss));
//     bar.write(epoch_line);   // a line of output above the bar (stdout), the bar drawn again below
//     bar.update();
//   }
//   bar.close();              // final state, then a newline
//
//   train:  35%|███▌      | 7/20 [00:02<00:04, 3.10epoch/s, loss 0.1234]      (terminal)
//   train: 35% 7/20 [00:02<00:04, 3.10epoch/s, loss 0.1234]                   (log line)
//
// One bar is driven by one thread. With several ranks, let only one draw (`disable(ctx.rank != 0)`).
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

#include <troupe/util/options.h>

namespace troupe::metrics {

/// Options of a ProgressBar (tqdm's names).
struct ProgressOptions {
  using FilePtr = std::FILE*;  // (TROUPE_ARG spells `const T&`: with T = std::FILE* that would be const FILE*)
  /// Printed before the bar ("train").
  TROUPE_ARG(std::string, desc) = "";
  /// What one count is ("it", "epoch", "frames").
  TROUPE_ARG(std::string, unit) = "it";
  /// Where the bar goes.
  TROUPE_ARG(FilePtr, file) = stderr;
  /// Draw in place (true) or print log lines (false); unset: whether `file` is a terminal (isatty).
  TROUPE_ARG(std::optional<bool>, tty) = std::nullopt;
  /// On a terminal: least seconds between redraws.
  TROUPE_ARG(double, mininterval) = 0.1;
  /// Off a terminal: least seconds between log lines (the final line is always printed).
  TROUPE_ARG(double, log_interval) = 10.0;
  /// Width of the whole line on a terminal; 0: $COLUMNS, else 80.
  TROUPE_ARG(int, ncols) = 0;
  /// Print nothing (ranks other than 0).
  TROUPE_ARG(bool, disable) = false;
};

/// A progress display over `total` counts (see the top of this file).
class ProgressBar {
 public:
  /// `total` <= 0: unknown; the line then shows the count and rate only.
  explicit ProgressBar(int64_t total, ProgressOptions options = {});
  /// close().
  ~ProgressBar();
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  /// Adds `n` to the count and draws when the interval has passed (or the count reached the total).
  void update(int64_t n = 1);
  /// Text shown after the rate ("loss 0.1234"); drawn at the next update.
  void set_postfix(std::string postfix);
  /// Prints `line` (a newline is added) to `to`, above the bar: on a terminal the bar is cleared first
  /// and drawn again after.
  void write(const std::string& line, std::FILE* to = stdout);
  /// Draws the final state and ends the line; later updates are ignored. Idempotent.
  void close();

  /// Counts so far.
  int64_t n() const { return n_; }
  /// The total given to the constructor.
  int64_t total() const { return total_; }
  /// Seconds since the bar was made.
  double elapsed() const;
  /// True when the bar draws in place.
  bool is_tty() const { return tty_; }

  /// The text of a bar line (tqdm's format_meter): `ncols` > 0 draws a bar filling that width,
  /// 0 gives the plain log line without a bar.
  static std::string format_meter(int64_t n, int64_t total, double elapsed, int ncols, const std::string& desc,
                                  const std::string& unit, const std::string& postfix);
  /// Seconds as "MM:SS", or "H:MM:SS" from an hour on (tqdm's format_interval).
  static std::string format_interval(double seconds);

 private:
  void draw(bool final);
  int columns() const;

  int64_t total_;
  ProgressOptions options_;
  bool tty_ = false;
  bool closed_ = false;
  int64_t n_ = 0;
  int64_t last_drawn_n_ = -1;
  std::string postfix_;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

}  // namespace troupe::metrics
