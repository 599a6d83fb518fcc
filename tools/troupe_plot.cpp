// troupe-plot: training curves from metrics.jsonl files (SummaryWriter's), one row of panels per tag,
// by step and by wall time, several runs overlaid.
//
//   troupe-plot RUN.jsonl... [-o curves.svg|curves.png] [--tags a,b,...] [--title TEXT]
//
// Writes SVG itself; PNG through gnuplot when it is installed. Any bad input (a missing file, a
// malformed line, an unwritable output, an unknown flag) ends the program with one line on stderr and
// exit status 2.
#include <troupe/metrics/plot.h>
#include <troupe/tools/cli.h>

#include <cstdio>
#include <exception>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  std::vector<std::string> inputs;
  std::string out = "curves.svg";
  std::string tags;
  troupe::metrics::PlotOptions options;
  troupe::cli::App app("troupe-plot", "Training curves from metrics.jsonl files (SummaryWriter's).");
  app.add_option("runs", inputs, "metrics.jsonl files, one run each")->required()->check(troupe::cli::ReadableFile);
  app.add_option("-o,--output", out, "OUT.svg or OUT.png");
  app.add_option("--tags", tags, "only these tags, comma-separated");
  app.add_option("--title", options.title, "title");
  troupe::cli::parse(app, argc, argv);
  for (size_t at = 0; at <= tags.size();) {
    size_t end = tags.find(',', at);
    if (end == std::string::npos) end = tags.size();
    if (end > at) options.tags.push_back(tags.substr(at, end - at));
    at = end + 1;
  }
  // bad input (a malformed line, an unwritable or unknown output, an unknown tag): one line, exit 2
  return troupe::cli::run_main("troupe-plot", [&] {
    std::vector<troupe::metrics::RunLog> runs;
    size_t records = 0;
    try {
      for (const auto& path : inputs) {
        runs.push_back(troupe::metrics::load_run(path));
        records += runs.back().records.size();
      }
      troupe::metrics::save_plot(runs, out, options);
    } catch (const std::exception& e) {
      throw troupe::cli::BadInput(e.what());
    }
    std::printf("troupe-plot: %zu records of %zu run%s -> %s\n", records, runs.size(), runs.size() == 1 ? "" : "s",
                out.c_str());
    return 0;
  });
}
