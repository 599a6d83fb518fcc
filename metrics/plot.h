// Training curves from metrics.jsonl files: one row of panels per tag, the left panel by step and the
// right one by wall time (seconds since the run's first record), every run (and, where a run logged
// from several ranks, every rank) overlaid in its own colour. Written as SVG by troupe itself, or as
// PNG through gnuplot when it is installed. The troupe-plot tool (tools/troupe_plot.cpp) is the
// command line of this:
//
//   troupe-plot runs/train_digits_mlp/metrics.jsonl runs/train_digits_conv/metrics.jsonl -o curves.svg
#pragma once

#include <string>
#include <vector>

#include <troupe/metrics/record.h>

namespace troupe::metrics {

/// The records of one run and the name its curves are labelled with.
struct RunLog {
  std::string name;
  std::vector<Record> records;
};

/// Reads a metrics.jsonl file (read_jsonl); the run is named after its directory when the file is
/// called metrics.jsonl ("runs/digits_mlp/metrics.jsonl" -> "digits_mlp"), else after the file's stem.
RunLog load_run(const std::string& path);

/// What to draw.
struct PlotOptions {
  /// Only these tags, in this order; empty: every tag, in order of first appearance.
  std::vector<std::string> tags;
  /// A title above the panels ("" for none).
  std::string title;
};

/// The SVG document of the curves. Throws MetricsError when there is nothing to draw (no records, or
/// none of the asked tags).
std::string render_svg(const std::vector<RunLog>& runs, const PlotOptions& options = {});

/// Writes the curves to `path`: .svg by render_svg, .png by gnuplot (MetricsError naming the reason
/// when gnuplot is not found or fails, or the file cannot be written).
void save_plot(const std::vector<RunLog>& runs, const std::string& path, const PlotOptions& options = {});

/// Tick positions covering [lo, hi] at a "nice" spacing (1, 2 or 5 times a power of ten, the one
/// nearest to (hi - lo) / (target - 1)); at least 2 when lo < hi.
std::vector<double> nice_ticks(double lo, double hi, int target = 5);

}  // namespace troupe::metrics
